//! Every script's work is bounded: with many timers pending and a backlog
//! overdue, no schedule, misfire or promotion call takes more than its
//! page of timers, and the commands it runs inside Redis stay within a
//! bound linear in that page, whatever the number pending; two nodes never
//! count the backlog twice. The test counts Redis's commands (`INFO
//! commandstats`), which hold on any machine; the CPU time each call costs
//! redis-server is a measurement, reported by
//! `cargo run --release -p purgatorio-redis --example call_cpu` (see
//! `redis/README.md`), never asserted here.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::thread;
use std::time::Duration;

use common::backlog::{self, Backlog, Watch};
use common::probe::{settle, Sample, Sched};
use common::{Server, PATIENCE};
use purgatorio_redis::{Config, Misfire, Scheduler, Step, StopHandle, Timers};
use purgatorio_testkit::wait_for;

/// The most commands one script call may run inside Redis for a page of
/// `page` timers: one per timer and a few more per batch of records read,
/// with room for the buckets looked at. Commands, not time: this holds on
/// any machine.
fn most_commands(page: u64) -> u64 {
    2 * page + 64
}

/// Counts each call's commands, by the script the slow log names.
struct Counter {
    /// The test's own connection.
    look: redis::Connection,
    /// Script → commands of each call (the `EVALSHA` itself included).
    calls: HashMap<&'static str, Vec<u64>>,
}

impl Watch for Counter {
    fn call<T>(&mut self, call: impl FnOnce() -> T) -> T {
        let before = backlog::commands(&mut self.look);
        let out = call();
        let ran = backlog::since(&before, &backlog::commands(&mut self.look));
        let (script, _) = backlog::last_call(&mut self.look);
        let commands = ran.values().map(|&(calls, _)| calls).sum();
        self.calls.entry(script).or_default().push(commands);
        out
    }
}

#[test]
fn script_calls_stay_bounded_by_their_page_with_a_large_backlog() {
    let server = Server::start("no");
    let run = Backlog {
        pending: 20_000,
        backlog: 4_000,
    };
    let timers = run.prepare(&server);
    let mut counter = Counter {
        look: server.raw().unwrap(),
        calls: HashMap::new(),
    };
    let forks = backlog::persistence(&server);
    run.run(&timers, &mut counter);
    for script in ["misfire", "promote", "schedule"] {
        let page = Backlog::page(script, &timers);
        let calls = &counter.calls[script];
        // No call took more than its page: the backlog took at least as
        // many calls as it has pages.
        assert!(
            calls.len() as u64 >= run.backlog / page,
            "{script}: {} calls for {} timers in pages of {page}",
            calls.len(),
            run.backlog
        );
        let most = calls.iter().max().copied().unwrap_or(0);
        eprintln!(
            "{script}: {} calls, at most {most} commands in one (bound {})",
            calls.len(),
            most_commands(page)
        );
        assert!(
            most <= most_commands(page),
            "a {script} call ran {most} commands with {} pending: {calls:?}",
            run.pending
        );
    }
    assert_eq!(
        backlog::persistence(&server),
        forks,
        "no fork during the calls"
    );
}

/// Starts `count` scheduler nodes.
fn schedulers(timers: &Timers, count: usize) -> Vec<(StopHandle, thread::JoinHandle<()>)> {
    (0..count)
        .map(|_| {
            let node = Scheduler::new(timers.clone());
            let stop = node.stop_handle();
            (stop, thread::spawn(move || node.run().unwrap()))
        })
        .collect()
}

fn stop(nodes: Vec<(StopHandle, thread::JoinHandle<()>)>) {
    for (stop, thread) in nodes {
        stop.stop();
        thread.join().unwrap();
    }
}

/// The durations of the `EVALSHA` calls in the slow log, µs, sorted, by
/// script.
fn script_durations(server: &Server) -> BTreeMap<&'static str, Vec<u64>> {
    let mut c = server.raw().unwrap();
    let mut out: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
    for (script, us) in backlog::slowlog(&mut c, -1) {
        out.entry(script).or_default().push(us);
    }
    for durations in out.values_mut() {
        durations.sort_unstable();
    }
    out
}

#[test]
fn two_starting_schedulers_count_a_fired_backlog_once() {
    let server = Server::start("no");
    let timers = server.timers("fire");
    let now = timers.server_time_ms().unwrap();
    backlog::fill(&timers, "late", 3_000, now - 20_000, 10_000);
    let nodes = schedulers(&timers, 2);
    let metrics = wait_for("the backlog", PATIENCE, || {
        let m = timers.metrics().ok()?;
        (m.promoted == 3_000).then_some(m)
    });
    thread::sleep(Duration::from_millis(100));
    stop(nodes);
    assert_eq!(timers.metrics().unwrap().misfired, 3_000, "{metrics:?}");
}

/// Timers of `payload_len` bytes each: `n` of them, due at `at_ms`.
fn fill_big(timers: &Timers, prefix: &str, n: usize, at_ms: u64, payload_len: usize) {
    let payload = vec![b'x'; payload_len];
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    let batch: Vec<(&str, u64, &[u8])> = ids
        .iter()
        .map(|id| (id.as_str(), at_ms, &payload[..]))
        .collect();
    timers.schedule_many(&batch).unwrap();
}

/// Starts slow-logging every call.
fn log_every_call(server: &Server) {
    backlog::config_set(server, "slowlog-log-slower-than", "0");
    backlog::config_set(server, "slowlog-max-len", "100000");
    let mut c = server.raw().unwrap();
    redis::cmd("SLOWLOG")
        .arg("RESET")
        .query::<()>(&mut c)
        .unwrap();
}

/// Big payloads move in steps of about 256 KiB: 300 timers of 64 KiB (the
/// default `max_payload`) due at once take at least 60 promotion calls
/// (20 MiB at most 256 KiB and one timer each), not one call copying all of
/// them; scheduling them takes as many calls.
#[test]
fn big_payloads_are_scheduled_and_promoted_in_small_steps() {
    let server = Server::start("no");
    let timers = server.timers("bigp");
    let now = timers.server_time_ms().unwrap();
    log_every_call(&server);
    fill_big(&timers, "big", 300, now, 64 * 1024);
    let nodes = schedulers(&timers, 1);
    wait_for("the promotions", PATIENCE, || {
        (timers.metrics().ok()?.promoted == 300).then_some(())
    });
    stop(nodes);
    let durations = script_durations(&server);
    for script in ["schedule", "promote"] {
        let calls = &durations[script];
        eprintln!(
            "300 timers of 64 KiB: {} {script} calls, µs median {} max {}",
            calls.len(),
            calls[calls.len() / 2],
            calls[calls.len() - 1]
        );
    }
    for script in ["schedule", "promote"] {
        let calls = durations[script].len();
        assert!(calls >= 60, "{calls} {script} calls");
    }
}

/// The misfire step reschedules big payloads in steps of about 256 KiB too,
/// and a page cut short by bytes is followed by the next one (none of the
/// overdue timers is promoted instead of rescheduled).
#[test]
fn big_misfired_payloads_are_rescheduled_in_small_steps() {
    let server = Server::start("no");
    let mut config = Config::new("bigm");
    config.misfire = Misfire::Reschedule(Duration::from_secs(3_600));
    let timers = Timers::connect(&server.url(), config).unwrap();
    let now = timers.server_time_ms().unwrap();
    fill_big(&timers, "late", 300, now - 10_000, 64 * 1024);
    log_every_call(&server);
    let nodes = schedulers(&timers, 1);
    wait_for("the misfires", PATIENCE, || {
        (timers.metrics().ok()?.misfired == 300).then_some(())
    });
    thread::sleep(Duration::from_millis(200));
    stop(nodes);
    let metrics = timers.metrics().unwrap();
    assert_eq!((metrics.pending, metrics.promoted), (300, 0), "{metrics:?}");
    let calls = &script_durations(&server)["misfire"];
    eprintln!(
        "300 misfired timers of 64 KiB: {} misfire calls, µs median {} max {}",
        calls.len(),
        calls[calls.len() / 2],
        calls[calls.len() - 1]
    );
    assert!(calls.len() >= 60, "{} misfire calls", calls.len());
}

/// A promote call looks at no more buckets than `promote_batch`, even when
/// bucket scores say "due" and their buckets are empty (none of the steps
/// leaves one so; this writes 3,000 by hand): the node calls again until it
/// reaches the due timer.
#[test]
fn stale_bucket_scores_cost_bounded_looks() {
    let server = Server::start("no");
    let timers = server.timers("stale");
    let mut c = server.raw().unwrap();
    let mut stale = redis::cmd("ZADD");
    stale.arg("{stale}:buckets");
    for b in 0..3_000 {
        stale.arg(1 + b).arg(b);
    }
    stale.query::<()>(&mut c).unwrap();
    let now = timers.server_time_ms().unwrap();
    timers.schedule("due", now, b"p").unwrap();
    log_every_call(&server);
    let nodes = schedulers(&timers, 1);
    wait_for("the due timer", PATIENCE, || {
        (timers.metrics().ok()?.promoted == 1).then_some(())
    });
    stop(nodes);
    let calls = script_durations(&server)["promote"].len();
    assert!(calls >= 6, "{calls} promote calls for 3,000 stale buckets");
}

/// A stale bucket score that says "overdue" while its bucket holds nothing
/// overdue does not end the misfire pass: the timers overdue behind it are
/// skipped (not promoted), and 3,000 such scores, written by hand, cost
/// bounded pages.
#[test]
fn stale_bucket_scores_do_not_hide_misfired_timers() {
    let server = Server::start("no");
    let mut config = Config::new("stalem");
    config.misfire = Misfire::Skip;
    let timers = Timers::connect(&server.url(), config).unwrap();
    let now = timers.server_time_ms().unwrap();
    let mut c = server.raw().unwrap();
    let mut stale = redis::cmd("ZADD");
    stale.arg("{stalem}:buckets");
    for b in 0..3_000 {
        stale.arg(1 + b).arg(b);
    }
    stale.query::<()>(&mut c).unwrap();
    timers.schedule("late", now - 60_000, b"p").unwrap();
    log_every_call(&server);
    let node = Scheduler::new(timers.clone());
    while node.step().unwrap() == Step::Again {}
    let metrics = timers.metrics().unwrap();
    assert_eq!(
        (metrics.misfired, metrics.promoted, metrics.pending),
        (1, 0, 0),
        "{metrics:?}"
    );
    let calls = script_durations(&server)["misfire"].len();
    assert!(calls >= 6, "{calls} misfire calls for 3,000 stale buckets");
}

/// A sample of figures `cpu_ns`/`slices`, the thread's state either side.
fn sample(asleep_before: bool, cpu_ns: u64, slices: u64, asleep_after: bool) -> Sample {
    Sample {
        asleep_before,
        sched: Sched {
            cpu_ns,
            waited_ns: 0,
            slices,
        },
        asleep_after,
    }
}

/// A reading is exact only when the thread was seen asleep both before and
/// after it, twice in a row, alike: two equal readings taken while it ran
/// (its figure a tick stale), the second seen asleep only after it, are not
/// taken, though a rule that looked only after each reading took them.
#[test]
fn only_readings_asleep_either_side_settle() {
    let stale = [sample(false, 100, 7, false), sample(false, 100, 7, true)];
    let exact = [sample(true, 130, 8, true), sample(true, 130, 8, true)];
    assert_eq!(settle(stale), None);
    assert_eq!(
        settle(stale.into_iter().chain(exact)).map(|s| s.cpu_ns),
        Some(130)
    );
    // Asleep either side but a slice apart: it ran between the readings.
    let apart = [sample(true, 130, 8, true), sample(true, 130, 9, true)];
    assert_eq!(settle(apart), None);
    // A reading between two asleep ones, taken while it ran, breaks the pair.
    let broken = [
        sample(true, 130, 8, true),
        sample(true, 130, 8, false),
        sample(true, 130, 8, true),
    ];
    assert_eq!(settle(broken), None);
}
