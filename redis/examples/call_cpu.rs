//! Measures what each script call of a large backlog costs redis-server:
//! the CPU time of its main thread per call (the kernel's scheduler
//! figures, read while the thread sleeps), the time it waited for a CPU,
//! Redis's own duration of the call (`SLOWLOG`), the round trip, and the
//! commands each script runs inside Redis (`INFO commandstats`), with their
//! µs. Prints the figures beside the design bound of 5 ms of CPU per call;
//! nothing is asserted (a measurement depends on the machine; the test
//! `tests/bounds.rs` checks what holds on any machine, the commands).
//!
//! ```text
//! cargo run --release -p purgatorio-redis --example call_cpu [PENDING]
//! ```
//!
//! `PENDING` timers are pending (100,000 by default), a fifth of that
//! overdue and then as many due at once. It starts a `redis-server` of its
//! own on a free loopback port, with an append-only file (`appendfsync
//! no`), and stops it by PID.

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use common::backlog::{self, Backlog, Watch};
use common::probe::Probe;
use common::Server;

/// The design bound of one script call, µs of redis-server's CPU
/// (`redis/README.md`, "Every step is one atomic script, and bounded").
const CALL_BOUND_US: u64 = 5_000;

/// One call's figures, µs.
#[derive(Clone, Copy, Debug)]
struct Call {
    /// CPU time of redis-server's main thread (without the kernel's
    /// figures: Redis's own duration stands in).
    cpu: u64,
    /// Time redis-server waited for a CPU while runnable.
    waited: u64,
    /// Redis's own duration of the call (`SLOWLOG`).
    inside: u64,
    /// The round trip, at the client.
    round_trip: u64,
}

/// Makes calls one at a time and measures each.
struct Meter {
    /// redis-server's main thread, if the kernel keeps its figures.
    probe: Option<Probe>,
    /// The measurement's own connection.
    look: redis::Connection,
    /// Script → figures of each call.
    calls: BTreeMap<&'static str, Vec<Call>>,
    /// Script → command → (calls, µs) inside its calls.
    commands: BTreeMap<&'static str, HashMap<String, (u64, u64)>>,
}

impl Watch for Meter {
    fn call<T>(&mut self, call: impl FnOnce() -> T) -> T {
        // The looks at Redis come outside the CPU readings.
        let counted = backlog::commands(&mut self.look);
        let before = self.probe.as_ref().map(Probe::settled);
        let start = Instant::now();
        let out = call();
        let round_trip = start.elapsed().as_micros() as u64;
        let after = self.probe.as_ref().map(Probe::settled);
        let ran = backlog::since(&counted, &backlog::commands(&mut self.look));
        let (script, inside) = backlog::last_call(&mut self.look);
        let (cpu, waited) = match (before, after) {
            (Some(b), Some(a)) => (
                (a.cpu_ns - b.cpu_ns) / 1_000,
                (a.waited_ns - b.waited_ns) / 1_000,
            ),
            _ => (inside, 0),
        };
        self.calls.entry(script).or_default().push(Call {
            cpu,
            waited,
            inside,
            round_trip,
        });
        let commands = self.commands.entry(script).or_default();
        for (name, (calls, us)) in ran {
            let sum = commands.entry(name).or_default();
            *sum = (sum.0 + calls, sum.1 + us);
        }
        out
    }
}

/// `p`-th percentile of sorted `values`.
fn percentile(values: &[u64], p: usize) -> u64 {
    values[(values.len() * p / 100).min(values.len() - 1)]
}

fn main() {
    let pending: u64 = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("PENDING: a number of timers"))
        .unwrap_or(100_000);
    let run = Backlog {
        pending,
        backlog: pending / 5,
    };
    let server = Server::start("no");
    let timers = run.prepare(&server);
    let forks = backlog::persistence(&server);
    let probe = Probe::new(server.pid());
    if probe.is_none() {
        println!(
            "NO SCHEDULER FIGURES for redis-server (no sched_info): the CPU column is \
             Redis's own wall time of each call, which holds whatever the kernel gave others"
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut meter = Meter {
        probe,
        look: server.raw().unwrap(),
        calls: BTreeMap::new(),
        commands: BTreeMap::new(),
    };
    run.run(&timers, &mut meter);
    println!(
        "{} pending, {} overdue then {} due; load average before: {}",
        run.pending,
        run.backlog,
        run.backlog,
        load.trim()
    );
    for (script, calls) in &meter.calls {
        let sorted = |figure: fn(&Call) -> u64| {
            let mut v: Vec<u64> = calls.iter().map(figure).collect();
            v.sort_unstable();
            v
        };
        let row = |v: &[u64]| {
            format!(
                "median {:>5} p99 {:>5} max {:>5}",
                percentile(v, 50),
                percentile(v, 99),
                v[v.len() - 1]
            )
        };
        let cpu = sorted(|c| c.cpu);
        let worst = cpu[cpu.len() - 1];
        println!(
            "{script}: {} calls of ≤ {} timers, µs\n  redis-server CPU  {}  (bound {CALL_BOUND_US}: {})\n  \
             waited for a CPU  {}\n  SLOWLOG           {}\n  round trip        {}",
            calls.len(),
            Backlog::page(script, &timers),
            row(&cpu),
            if worst <= CALL_BOUND_US { "held" } else { "EXCEEDED" },
            row(&sorted(|c| c.waited)),
            row(&sorted(|c| c.inside)),
            row(&sorted(|c| c.round_trip)),
        );
        let mut commands: Vec<_> = meter.commands[script].iter().collect();
        commands.sort_by_key(|(_, &(_, us))| std::cmp::Reverse(us));
        let per_call = |n: u64| n as f64 / calls.len() as f64;
        let line: Vec<String> = commands
            .iter()
            .map(|(name, &(n, us))| {
                format!("{name} {:.0}×{:.1}µs", per_call(n), us as f64 / n as f64)
            })
            .collect();
        println!("  commands per call (count×µs each): {}", line.join(", "));
    }
    let after = backlog::persistence(&server);
    println!("forks: {forks} before, {after} after the measured calls");
    by_batch(&server, &mut meter);
}

/// Timers promoted per batch-size run of [`by_batch`].
const PER_BATCH_RUN: u64 = 5_000;

/// What a promotion costs per timer as its batch shrinks (timers that
/// trickle in make small calls): `PER_BATCH_RUN` timers due at once,
/// promoted with `promote_batch` of 10, 50 and 250.
fn by_batch(server: &Server, meter: &mut Meter) {
    for batch in [10, 50, 250] {
        let mut config = purgatorio_redis::Config::new(&format!("batch{batch}"));
        config.promote_batch = batch;
        let timers = purgatorio_redis::Timers::connect(&server.url(), config).unwrap();
        let now = timers.server_time_ms().unwrap();
        backlog::fill(&timers, "due", PER_BATCH_RUN, now, 1);
        let node = purgatorio_redis::Scheduler::new(timers.clone());
        meter.calls.remove("promote");
        while meter.call(|| node.step().unwrap()) == purgatorio_redis::Step::Again {}
        let calls = &meter.calls["promote"];
        let cpu: u64 = calls.iter().map(|c| c.cpu).sum();
        println!(
            "promote_batch {batch:>3}: {} calls, {:.2} µs of redis-server CPU per timer, \
             {:.0} µs per call",
            calls.len(),
            cpu as f64 / PER_BATCH_RUN as f64,
            cpu as f64 / calls.len() as f64
        );
        // A call with nothing due: the fixed part.
        meter.calls.remove("promote");
        for _ in 0..50 {
            meter.call(|| node.step().unwrap());
        }
        let empty = &meter.calls["promote"];
        let mut cpu: Vec<u64> = empty.iter().map(|c| c.cpu).collect();
        cpu.sort_unstable();
        println!(
            "  a promote call with nothing due: median {} µs of CPU",
            cpu[cpu.len() / 2]
        );
    }
}
