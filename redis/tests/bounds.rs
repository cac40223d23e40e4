//! Every script's work is bounded: with many timers pending and a backlog
//! overdue, no promotion or misfire call holds Redis longer than a bound
//! (Redis's own `SLOWLOG` times each call), and two starting schedulers
//! never count the backlog twice. `PURGATORIO_REDIS_PENDING` sets how many
//! timers are pending (100,000 by default; the figures in `docs/redis.md`
//! use 1,000,000 with `--release -- --nocapture`).

mod common;

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

use common::{Server, PATIENCE};
use purgatorio_redis::{Config, Misfire, Scheduler, StopHandle, Timers};
use purgatorio_testkit::wait_for;
use redis::Value;

/// The most Redis time one script call may take here, µs: the design bound
/// is 5 ms at 1M pending (see `docs/redis.md`); a shared CI machine gets
/// 5× that.
const CALL_BOUND_US: i64 = 25_000;

/// Schedules `n` timers `prefix0…` with deadlines from `from_ms` (ms since
/// the epoch, may be past) spread over `spread_ms`, in batches.
fn fill(timers: &Timers, prefix: &str, n: u64, from_ms: u64, spread_ms: u64) {
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    for (c, chunk) in ids.chunks(10_000).enumerate() {
        let batch: Vec<(&str, u64, &[u8])> = chunk
            .iter()
            .enumerate()
            .map(|(j, id)| {
                let i = (c * 10_000 + j) as u64;
                (id.as_str(), from_ms + i * spread_ms / n, &b"payload"[..])
            })
            .collect();
        timers.schedule_many(&batch).unwrap();
    }
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
/// script (told apart by their number of keys; 4: promote, 3: misfire,
/// 2: schedule).
fn script_durations(server: &Server) -> HashMap<String, Vec<i64>> {
    let mut c = server.raw().unwrap();
    let log: Value = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(&mut c)
        .unwrap();
    let mut out: HashMap<String, Vec<i64>> = HashMap::new();
    let Value::Array(entries) = log else {
        panic!("SLOWLOG GET: {log:?}")
    };
    for entry in entries {
        let Value::Array(fields) = entry else {
            continue;
        };
        let (Some(Value::Int(us)), Some(Value::Array(args))) = (fields.get(2), fields.get(3))
        else {
            continue;
        };
        let text = |v: Option<&Value>| match v {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).to_lowercase(),
            _ => String::new(),
        };
        if text(args.first()) != "evalsha" {
            continue;
        }
        let name = match text(args.get(2)).as_str() {
            "5" => "promote",
            "4" => "misfire",
            _ => "schedule",
        };
        out.entry(name.to_string()).or_default().push(*us);
    }
    for durations in out.values_mut() {
        durations.sort_unstable();
    }
    out
}

/// The redis-server's process id.
fn server_pid(server: &Server) -> u32 {
    let mut c = server.raw().unwrap();
    let info: String = redis::cmd("INFO").arg("server").query(&mut c).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
        .expect("INFO server: process_id")
}

/// How many times the kernel took the CPU from process `pid`'s main
/// thread (`nonvoluntary_ctxt_switches`; `None` off Linux): a call that
/// lost the CPU is slow by the machine's load, not by its work.
fn descheduled(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("nonvoluntary_ctxt_switches:"))?
        .trim()
        .parse()
        .ok()
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
    config_set(&server, "slowlog-max-len", "1000000");
    let mut c = server.raw().unwrap();
    redis::cmd("SLOWLOG")
        .arg("RESET")
        .query::<()>(&mut c)
        .unwrap();
    let pid = server_pid(&server);
    let descheduled_before = descheduled(pid);

    // Two nodes start at once with the backlog overdue: skipped in pages,
    // counted once.
    let nodes = schedulers(&timers, 2);
    let skipped = wait_for("the misfires", PATIENCE, || {
        let m = timers.metrics().ok()?;
        (m.pending == pending).then_some(m)
    });
    assert_eq!(
        skipped.misfired, backlog,
        "each misfired timer counted once: {skipped:?}"
    );
    // Then a backlog comes due at once: promoted in batches.
    let due = timers.server_time_ms().unwrap();
    fill(&timers, "due", backlog, due, 1);
    let metrics = wait_for("the promotions", Duration::from_secs(120), || {
        let m = timers.metrics().ok()?;
        (m.promoted == backlog).then_some(m)
    });
    stop(nodes);
    assert_eq!(metrics.pending, pending);
    let preempted = descheduled(pid).zip(descheduled_before).map(|(b, a)| b - a);
    let durations = script_durations(&server);
    let batch = timers.config().promote_batch as u64;
    let scripts = [
        ("promote", backlog / batch),
        ("misfire", backlog / 500),
        ("schedule", backlog / 250),
    ];
    for (script, full_calls) in scripts {
        let calls = &durations[script];
        assert!(
            calls.len() as u64 >= full_calls,
            "{script}: {} calls",
            calls.len()
        );
        // The calls that did a full batch are the slowest `full_calls`; their
        // median is the work's cost, their maximum what a loaded machine
        // added (a call descheduled is slow by the machine, not by its work).
        let full = &calls[calls.len() - full_calls as usize..];
        let (median, max) = (full[full.len() / 2], full[full.len() - 1]);
        let p99 = full[full.len() * 99 / 100];
        eprintln!(
            "{pending} pending, {backlog} overdue then {backlog} due: {} {script} calls, \
             the {full_calls} full ones µs median {median} p99 {p99} max {max} \
             (redis-server descheduled {preempted:?} times meanwhile)",
            calls.len()
        );
        assert!(
            median <= CALL_BOUND_US,
            "{script} calls held Redis {median} µs (median of full calls) with {pending} pending"
        );
    }
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
