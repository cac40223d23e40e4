//! A large backlog driven one script call at a time: many timers pending
//! far ahead, a backlog overdue (skipped by the misfire policy by two nodes
//! taking turns), then a backlog due at once (scheduled 250 to a call and
//! promoted in batches). `tests/bounds.rs` counts each call's commands;
//! `examples/call_cpu.rs` measures each call's CPU in redis-server.

use std::collections::HashMap;

use purgatorio_redis::{Config, Misfire, Scheduler, Step, Timers};
use redis::Value;

use super::{parse_commandstats, Server, PATIENCE};

/// Timers per schedule call of the due backlog.
pub const SCHEDULE_PER_CALL: usize = 250;

/// Timers per misfire call (the scripts' `MISFIRE_PAGE`).
pub const MISFIRE_PAGE: usize = 500;

/// Runs each script call of the backlog, and learns what it cost.
pub trait Watch {
    /// Runs `call`, one script call in Redis.
    fn call<T>(&mut self, call: impl FnOnce() -> T) -> T;
}

/// The sizes of a run.
#[derive(Clone, Copy, Debug)]
pub struct Backlog {
    /// Timers pending an hour ahead.
    pub pending: u64,
    /// Timers overdue, then as many due.
    pub backlog: u64,
}

impl Backlog {
    /// Timers of namespace `bound` on `server`, filled with the pending
    /// timers and the overdue backlog; the slow log then keeps every call,
    /// and no rewrite of the append-only file (a fork) comes during the
    /// calls.
    pub fn prepare(&self, server: &Server) -> Timers {
        let mut config = Config::new("bound");
        config.misfire = Misfire::Skip;
        let timers = Timers::connect(&server.url(), config).unwrap();
        let now = timers.server_time_ms().unwrap();
        fill(&timers, "far", self.pending, now + 3_600_000, 3_600_000);
        fill(&timers, "late", self.backlog, now - 20_000, 10_000);
        config_set(server, "slowlog-log-slower-than", "0");
        config_set(server, "slowlog-max-len", "128");
        // Rewriting the append-only file forks redis-server, which costs its
        // main thread milliseconds of CPU at this size whatever the scripts
        // do: Redis's persistence, not a script's work.
        config_set(server, "auto-aof-rewrite-percentage", "0");
        purgatorio_testkit::wait_for("a rewrite under way to end", PATIENCE, || {
            let mut c = server.raw().ok()?;
            let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).ok()?;
            info.contains("aof_rewrite_in_progress:0").then_some(())
        });
        timers
    }

    /// Every call, each through `watch`: two nodes take turns on the
    /// overdue backlog, each misfired timer counted once; then the due
    /// backlog is scheduled and promoted.
    pub fn run(&self, timers: &Timers, watch: &mut impl Watch) {
        let nodes = [
            Scheduler::new(timers.clone()),
            Scheduler::new(timers.clone()),
        ];
        let mut turn = 0;
        loop {
            let node = &nodes[turn % 2];
            turn += 1;
            if watch.call(|| node.step().unwrap()) != Step::Again {
                break;
            }
        }
        let skipped = timers.metrics().unwrap();
        assert_eq!(skipped.pending, self.pending, "{skipped:?}");
        assert_eq!(
            skipped.misfired, self.backlog,
            "each misfired timer counted once: {skipped:?}"
        );
        let due = timers.server_time_ms().unwrap();
        let ids: Vec<String> = (0..self.backlog).map(|i| format!("due{i}")).collect();
        for (c, chunk) in ids.chunks(SCHEDULE_PER_CALL).enumerate() {
            let of_call = batch(chunk, c * SCHEDULE_PER_CALL, self.backlog, due, 1);
            watch.call(|| timers.schedule_many(&of_call).unwrap());
        }
        while watch.call(|| nodes[0].step().unwrap()) == Step::Again {}
        let metrics = timers.metrics().unwrap();
        assert_eq!(
            (metrics.pending, metrics.promoted),
            (self.pending, self.backlog)
        );
    }

    /// The most timers one call of `script` takes.
    pub fn page(script: &str, timers: &Timers) -> u64 {
        match script {
            "misfire" => MISFIRE_PAGE as u64,
            "promote" => timers.config().promote_batch as u64,
            _ => SCHEDULE_PER_CALL as u64,
        }
    }
}

/// Schedules `n` timers `prefix0…` with deadlines from `from_ms` (ms since
/// the epoch, may be past) spread over `spread_ms`, in batches.
pub fn fill(timers: &Timers, prefix: &str, n: u64, from_ms: u64, spread_ms: u64) {
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
pub fn slowlog(c: &mut redis::Connection, count: i64) -> Vec<(&'static str, u64)> {
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

/// The last script call in the slow log and its duration inside Redis, µs
/// (the looks at Redis since, logged too, are passed over).
pub fn last_call(c: &mut redis::Connection) -> (&'static str, u64) {
    *slowlog(c, 8).first().expect("the call in the slow log")
}

/// `INFO commandstats` on `c`, without the commands that look at Redis
/// (`info`, `slowlog`, `config`): command → (calls, µs).
pub fn commands(c: &mut redis::Connection) -> HashMap<String, (u64, u64)> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    let mut stats = parse_commandstats(&info);
    stats.retain(|name, _| !["info", "slowlog", "config"].contains(&name.as_str()));
    stats
}

/// What happened between two readings of [`commands`]: command → (calls,
/// µs), those that ran.
pub fn since(
    before: &HashMap<String, (u64, u64)>,
    after: &HashMap<String, (u64, u64)>,
) -> HashMap<String, (u64, u64)> {
    after
        .iter()
        .filter_map(|(name, &(calls, us))| {
            let (c0, u0) = before.get(name).copied().unwrap_or_default();
            (calls > c0).then(|| (name.clone(), (calls - c0, us.saturating_sub(u0))))
        })
        .collect()
}

/// Redis's forks so far: `total_forks`, `latest_fork_usec`.
pub fn persistence(server: &Server) -> String {
    let mut c = server.raw().unwrap();
    let info: String = redis::cmd("INFO").arg("stats").query(&mut c).unwrap();
    info.lines()
        .filter(|line| line.starts_with("total_forks:") || line.starts_with("latest_fork_usec:"))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `CONFIG SET key value`.
pub fn config_set(server: &Server, key: &str, value: &str) {
    let mut c = server.raw().unwrap();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg(key)
        .arg(value)
        .query::<()>(&mut c)
        .unwrap();
}
