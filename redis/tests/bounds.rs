//! Every script's work is bounded: with many timers pending and a backlog
//! overdue, no schedule, misfire or promotion call costs Redis more than
//! [`CALL_BOUND_US`] of CPU, and two nodes never count the backlog twice.
//! `PURGATORIO_REDIS_PENDING` sets how many timers are pending (100,000 by
//! default; the figures in `docs/redis.md` use 1,000,000 with `--release
//! -- --nocapture`).
//!
//! The test makes every call itself, one at a time ([`Scheduler::step`],
//! `schedule_many` of one script call), and reads four figures per call:
//! the CPU time redis-server's main thread spent meanwhile and the time it
//! waited for a CPU while runnable (`/proc/<pid>/task/<pid>/schedstat`,
//! read while the thread sleeps), Redis's own duration of the call
//! (`SLOWLOG`, a wall clock inside Redis), and the round trip. The bound is
//! on the CPU time: it is the work of the call, which Redis's wall clock
//! holds plus whatever time the kernel gave the CPU to other processes.

mod common;

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use common::{Server, PATIENCE};
use purgatorio_redis::{Config, Misfire, Scheduler, Step, StopHandle, Timers};
use purgatorio_testkit::wait_for;
use redis::Value;

/// The most CPU time redis-server may spend on one script call, µs: the
/// design bound (`docs/redis.md`).
const CALL_BOUND_US: u64 = 5_000;

/// Without the kernel's scheduler figures (no `sched_info`), the bound on
/// the median of Redis's own wall time of a script's calls (`SLOWLOG`), µs:
/// a wall clock holds whatever time the kernel gave the CPU to others, so
/// no single call is bounded, and the median has twice the CPU bound of
/// slack for a loaded machine. A weaker check than the CPU bound; the test
/// says loudly which one it made. `PURGATORIO_REDIS_NO_SCHEDSTAT=1` makes
/// it on any kernel.
const SLOWLOG_MEDIAN_BOUND_US: u64 = 2 * CALL_BOUND_US;

/// Schedules `n` timers `prefix0…` with deadlines from `from_ms` (ms since
/// the epoch, may be past) spread over `spread_ms`, in batches.
fn fill(timers: &Timers, prefix: &str, n: u64, from_ms: u64, spread_ms: u64) {
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    for (c, chunk) in ids.chunks(10_000).enumerate() {
        timers
            .schedule_many(&batch(chunk, c * 10_000, n, from_ms, spread_ms))
            .unwrap();
    }
}

/// Timers `ids` (numbers `first…` of `n`) with deadlines from `from_ms`
/// spread over `spread_ms`.
fn batch(
    ids: &[String],
    first: usize,
    n: u64,
    from_ms: u64,
    spread_ms: u64,
) -> Vec<(&str, u64, &'static [u8])> {
    ids.iter()
        .enumerate()
        .map(|(j, id)| {
            let i = (first + j) as u64;
            (id.as_str(), from_ms + i * spread_ms / n, &b"payload"[..])
        })
        .collect()
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

/// The script of a logged `EVALSHA` (or `EVAL`), told apart by its number of keys
/// (5: promote, 4: misfire, 2: schedule); `None` for any other command.
fn script_of(args: &[Value]) -> Option<&'static str> {
    let text = |v: Option<&Value>| match v {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).to_lowercase(),
        _ => String::new(),
    };
    if !matches!(text(args.first()).as_str(), "evalsha" | "eval") {
        return None;
    }
    Some(match text(args.get(2)).as_str() {
        "5" => "promote",
        "4" => "misfire",
        _ => "schedule",
    })
}

/// The slow log's entries `(script, µs)` of `EVALSHA` calls, newest first.
fn slowlog(c: &mut redis::Connection, count: i64) -> Vec<(&'static str, u64)> {
    let log: Value = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(count)
        .query(c)
        .unwrap();
    let Value::Array(entries) = log else {
        panic!("SLOWLOG GET: {log:?}")
    };
    entries
        .iter()
        .filter_map(|entry| {
            let Value::Array(fields) = entry else {
                return None;
            };
            let (Some(Value::Int(us)), Some(Value::Array(args))) = (fields.get(2), fields.get(3))
            else {
                return None;
            };
            Some((script_of(args)?, u64::try_from(*us).ok()?))
        })
        .collect()
}

/// The durations of the `EVALSHA` calls in the slow log, µs, sorted, by
/// script.
fn script_durations(server: &Server) -> BTreeMap<&'static str, Vec<u64>> {
    let mut c = server.raw().unwrap();
    let mut out: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
    for (script, us) in slowlog(&mut c, -1) {
        out.entry(script).or_default().push(us);
    }
    for durations in out.values_mut() {
        durations.sort_unstable();
    }
    out
}

/// The kernel's scheduler figures of one thread
/// (`/proc/<pid>/task/<tid>/schedstat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sched {
    /// Time on a CPU, ns (`sum_exec_runtime`).
    cpu_ns: u64,
    /// Time runnable but waiting for a CPU, ns (`run_delay`).
    waited_ns: u64,
    /// Time slices run.
    slices: u64,
}

/// redis-server's main thread, as the kernel's scheduler sees it.
struct Probe {
    /// `/proc/<pid>/task/<pid>/`.
    dir: String,
}

impl Probe {
    /// The probe of `pid`'s main thread, if this kernel keeps its figures.
    fn new(pid: u32) -> Option<Probe> {
        let probe = Probe {
            dir: format!("/proc/{pid}/task/{pid}/"),
        };
        let sched = probe.read()?;
        (sched.slices > 0).then_some(probe)
    }

    fn read(&self) -> Option<Sched> {
        let text = std::fs::read_to_string(format!("{}schedstat", self.dir)).ok()?;
        let mut fields = text.split_whitespace().map(str::parse::<u64>);
        Some(Sched {
            cpu_ns: fields.next()?.ok()?,
            waited_ns: fields.next()?.ok()?,
            slices: fields.next()?.ok()?,
        })
    }

    /// Whether the thread sleeps (state `S` in its `stat`).
    fn sleeping(&self) -> bool {
        std::fs::read_to_string(format!("{}stat", self.dir))
            .ok()
            .and_then(|stat| {
                let (_, rest) = stat.rsplit_once(')')?;
                rest.split_whitespace().next().map(|state| state == "S")
            })
            .unwrap_or(false)
    }

    /// One reading of the figures, with the thread's state just before and
    /// just after it.
    fn sample(&self) -> Sample {
        let asleep_before = self.sleeping();
        let sched = self.read().expect("schedstat");
        let asleep_after = self.sleeping();
        Sample {
            asleep_before,
            sched,
            asleep_after,
        }
    }

    /// The figures once the thread sleeps and they hold still; see
    /// [`settle`].
    fn settled(&self) -> Sched {
        let mut samples = std::iter::repeat_with(|| {
            let sample = self.sample();
            thread::sleep(Duration::from_micros(50));
            sample
        });
        settle(samples.by_ref().take(100_000))
            .unwrap_or_else(|| panic!("redis-server did not settle: {:?}", samples.next()))
    }
}

/// A reading of a thread's figures, with its state either side.
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// The thread slept (state `S`) just before the reading.
    asleep_before: bool,
    /// The figures.
    sched: Sched,
    /// The thread slept just after the reading.
    asleep_after: bool,
}

/// The first exact figures among `samples`: two readings in a row, each
/// taken while the thread was seen asleep both before and after it, that
/// agree in every figure (the time slices too). The kernel brings a
/// thread's `sum_exec_runtime` up to date when it stops running, not while
/// it runs (a running thread's figure lags by up to a scheduler tick): a
/// reading with the thread asleep either side holds its last slice whole,
/// and the same slice count in both readings says it did not run between
/// them. A reading seen asleep only after it may have been taken while it
/// ran, stale.
fn settle(samples: impl IntoIterator<Item = Sample>) -> Option<Sched> {
    let mut last: Option<Sched> = None;
    for sample in samples {
        let asleep = sample.asleep_before && sample.asleep_after;
        if asleep && last == Some(sample.sched) {
            return last;
        }
        last = asleep.then_some(sample.sched);
    }
    None
}

/// One call's figures, µs.
#[derive(Clone, Copy, Debug)]
struct Call {
    /// CPU time of redis-server's main thread.
    cpu: u64,
    /// Time redis-server waited for a CPU while runnable.
    waited: u64,
    /// Redis's own duration of the call (`SLOWLOG`).
    inside: u64,
    /// The round trip, at the client.
    round_trip: u64,
}

/// Makes calls one at a time and measures each.
struct Meter<'a> {
    probe: Option<&'a Probe>,
    log: redis::Connection,
    calls: BTreeMap<&'static str, Vec<Call>>,
}

impl Meter<'_> {
    /// Runs `call` (one script call in Redis) and files its figures under
    /// the script the slow log names.
    fn measure<T>(&mut self, call: impl FnOnce() -> T) -> T {
        let before = self.probe.map(Probe::settled);
        let start = Instant::now();
        let out = call();
        let round_trip = start.elapsed().as_micros() as u64;
        let after = self.probe.map(Probe::settled);
        let (script, inside) = *slowlog(&mut self.log, 1)
            .first()
            .expect("the call in the slow log");
        let (cpu, waited) = match (before, after) {
            (Some(b), Some(a)) => (
                (a.cpu_ns - b.cpu_ns) / 1_000,
                (a.waited_ns - b.waited_ns) / 1_000,
            ),
            // No CPU figures: the wall time stands in, for the report
            // only; the check is then on its median (see
            // SLOWLOG_MEDIAN_BOUND_US).
            _ => (inside, 0),
        };
        self.calls.entry(script).or_default().push(Call {
            cpu,
            waited,
            inside,
            round_trip,
        });
        out
    }
}

/// `p`-th percentile of sorted `values`.
fn percentile(values: &[u64], p: usize) -> u64 {
    values[(values.len() * p / 100).min(values.len() - 1)]
}

/// Redis's forks so far: `total_forks`, `latest_fork_usec`.
fn persistence(server: &Server) -> String {
    let mut c = server.raw().unwrap();
    let info: String = redis::cmd("INFO").arg("stats").query(&mut c).unwrap();
    info.lines()
        .filter(|line| line.starts_with("total_forks:") || line.starts_with("latest_fork_usec:"))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}

fn config_set(server: &Server, key: &str, value: &str) {
    let mut c = server.raw().unwrap();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg(key)
        .arg(value)
        .query::<()>(&mut c)
        .unwrap();
}

#[test]
fn scripts_stay_bounded_with_a_large_backlog() {
    let pending: u64 = std::env::var("PURGATORIO_REDIS_PENDING")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let backlog = pending / 5;
    let server = Server::start("no");
    let mut config = Config::new("bound");
    config.misfire = Misfire::Skip;
    let timers = Timers::connect(&server.url(), config).unwrap();
    let now = timers.server_time_ms().unwrap();
    fill(&timers, "far", pending, now + 3_600_000, 3_600_000);
    fill(&timers, "late", backlog, now - 20_000, 10_000);
    config_set(&server, "slowlog-log-slower-than", "0");
    config_set(&server, "slowlog-max-len", "128");
    // Rewriting the append-only file forks redis-server, which costs its
    // main thread 5–6 ms of CPU at this size whatever the scripts do (the
    // fork copies the page tables): Redis's persistence, not a script's
    // work. It is reported apart, and kept out of the measured calls.
    config_set(&server, "auto-aof-rewrite-percentage", "0");
    wait_for("a rewrite under way to end", PATIENCE, || {
        let mut c = server.raw().ok()?;
        let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).ok()?;
        info.contains("aof_rewrite_in_progress:0").then_some(())
    });
    let forks = persistence(&server);
    let probe = if std::env::var_os("PURGATORIO_REDIS_NO_SCHEDSTAT").is_some() {
        None
    } else {
        Probe::new(server.pid())
    };
    match probe {
        Some(_) => eprintln!(
            "MEASURE: redis-server's CPU time per call (schedstat); every call ≤ {CALL_BOUND_US} µs"
        ),
        None => eprintln!(
            "MEASURE: NO SCHEDULER FIGURES for redis-server (no sched_info, or \
             PURGATORIO_REDIS_NO_SCHEDSTAT): bounding the MEDIAN of Redis's SLOWLOG wall time \
             at {SLOWLOG_MEDIAN_BOUND_US} µs instead, a weaker check"
        ),
    }
    let mut meter = Meter {
        probe: probe.as_ref(),
        log: server.raw().unwrap(),
        calls: BTreeMap::new(),
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();

    // Two nodes with the backlog overdue: they take turns, page by page,
    // and each misfired timer is counted once.
    let nodes = [
        Scheduler::new(timers.clone()),
        Scheduler::new(timers.clone()),
    ];
    let mut turn = 0;
    loop {
        let node = &nodes[turn % 2];
        turn += 1;
        let step = meter.measure(|| node.step().unwrap());
        if step != Step::Again {
            break;
        }
    }
    let skipped = timers.metrics().unwrap();
    assert_eq!(skipped.pending, pending, "{skipped:?}");
    assert_eq!(
        skipped.misfired, backlog,
        "each misfired timer counted once: {skipped:?}"
    );
    // Then a backlog comes due at once, scheduled one script call at a
    // time, and promoted in batches.
    let due = timers.server_time_ms().unwrap();
    let ids: Vec<String> = (0..backlog).map(|i| format!("due{i}")).collect();
    let per_call = 250;
    for (c, chunk) in ids.chunks(per_call).enumerate() {
        let timers_of_call = batch(chunk, c * per_call, backlog, due, 1);
        meter.measure(|| timers.schedule_many(&timers_of_call).unwrap());
    }
    while meter.measure(|| nodes[0].step().unwrap()) == Step::Again {}
    let metrics = timers.metrics().unwrap();
    assert_eq!((metrics.pending, metrics.promoted), (pending, backlog));

    let batch_of = [
        ("misfire", 500),
        ("promote", timers.config().promote_batch as u64),
        ("schedule", per_call as u64),
    ];
    for (script, size) in batch_of {
        let calls = &meter.calls[script];
        let full_calls = backlog / size;
        assert!(
            calls.len() as u64 >= full_calls,
            "{script}: {} calls",
            calls.len()
        );
        let sorted = |figure: fn(&Call) -> u64| {
            let mut v: Vec<u64> = calls.iter().map(figure).collect();
            v.sort_unstable();
            v
        };
        let (cpu, waited) = (sorted(|c| c.cpu), sorted(|c| c.waited));
        let (inside, round_trip) = (sorted(|c| c.inside), sorted(|c| c.round_trip));
        let row = |v: &[u64]| {
            format!(
                "median {} p99 {} max {}",
                percentile(v, 50),
                percentile(v, 99),
                v[v.len() - 1]
            )
        };
        eprintln!(
            "{pending} pending, {backlog} overdue then {backlog} due: {} {script} calls of \
             ≤ {size} timers, µs:\n  redis-server CPU {}\n  waited for a CPU {} (sum {})\n  \
             SLOWLOG {}\n  round trip {}",
            calls.len(),
            row(&cpu),
            row(&waited),
            waited.iter().sum::<u64>(),
            row(&inside),
            row(&round_trip),
        );
        let mut slowest: Vec<&Call> = calls.iter().collect();
        slowest.sort_unstable_by_key(|c| std::cmp::Reverse(c.inside.max(c.cpu)));
        eprintln!("  slowest: {:?}", &slowest[..3.min(slowest.len())]);
        if meter.probe.is_some() {
            let worst = calls.iter().max_by_key(|c| c.cpu).unwrap();
            assert!(
                worst.cpu <= CALL_BOUND_US,
                "a {script} call cost Redis {} µs of CPU with {pending} pending: {worst:?}",
                worst.cpu
            );
        } else {
            let median = percentile(&inside, 50);
            eprintln!("  MEASURE: {script}: SLOWLOG median {median} µs, bound {SLOWLOG_MEDIAN_BOUND_US} µs (no CPU figures)");
            assert!(
                median <= SLOWLOG_MEDIAN_BOUND_US,
                "{script} calls took Redis a median {median} µs of wall time with {pending} pending"
            );
        }
    }
    eprintln!("load average before: {}", load.trim());
    eprintln!("while filling, before the measured calls: {forks}");
    assert_eq!(
        persistence(&server),
        forks,
        "no fork during the measured calls"
    );
}

#[test]
fn two_starting_schedulers_count_a_fired_backlog_once() {
    let server = Server::start("no");
    let timers = server.timers("fire");
    let now = timers.server_time_ms().unwrap();
    fill(&timers, "late", 3_000, now - 20_000, 10_000);
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
    config_set(server, "slowlog-log-slower-than", "0");
    config_set(server, "slowlog-max-len", "100000");
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
