//! The real-time check: 1,000,000 timers with delays uniform in
//! [1, 2,000] ms on the system clock, run by the thread-safe [`Timer`]'s own
//! driver and workers. Reports how late each fired (p50, p99, p99.9, max),
//! how many fired early (must be 0) and the process CPU time per timer.
//!
//! ```text
//! cargo run --release --example realtime
//! cargo run --release --example realtime -- 200000     # fewer timers
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use purgatorio::{Task, Timer, TimerBuilder};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use purgatorio_workloads::cli::exit_code;
use purgatorio_workloads::proc::cpu_seconds;

/// Lateness histogram in 10 µs buckets up to 100 ms, plus the maximum.
struct Lateness {
    buckets: Vec<AtomicU64>,
    max_us: AtomicU64,
    early: AtomicU64,
    fired: AtomicU64,
}

const BUCKET_US: u64 = 10;

impl Lateness {
    fn new() -> Self {
        Lateness {
            buckets: (0..10_000).map(|_| AtomicU64::new(0)).collect(),
            max_us: AtomicU64::new(0),
            early: AtomicU64::new(0),
            fired: AtomicU64::new(0),
        }
    }

    fn record(&self, deadline: Instant) {
        let now = Instant::now();
        match now.checked_duration_since(deadline) {
            Some(late) => {
                let us = late.as_micros() as u64;
                let b = ((us / BUCKET_US) as usize).min(self.buckets.len() - 1);
                self.buckets[b].fetch_add(1, Ordering::Relaxed);
                self.max_us.fetch_max(us, Ordering::Relaxed);
            }
            None => {
                self.early.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.fired.fetch_add(1, Ordering::Release);
    }

    /// The lateness (ms) below which a fraction `p` of the on-time firings fell.
    fn percentile(&self, p: f64) -> f64 {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        let want = (total as f64 * p).ceil() as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return ((i as u64 + 1) * BUCKET_US) as f64 / 1000.0;
            }
        }
        f64::INFINITY
    }
}

/// One timer: records its lateness when run.
struct Probe {
    deadline: Instant,
    lateness: Arc<Lateness>,
}

impl Task for Probe {
    fn run(self) {
        self.lateness.record(self.deadline);
    }
}

/// Timers with delays uniform in [1, 2,000] ms on the system clock: how late
/// each fired, how many early (must be 0), and the CPU time per timer.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// How many timers.
    #[arg(default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    timers: u64,
}

fn main() -> ExitCode {
    let n = Args::parse().timers;
    let lateness = Arc::new(Lateness::new());
    let timer: Timer<Probe> = TimerBuilder::new().build().expect("timer");
    let mut rng = SmallRng::seed_from_u64(1);
    let cpu_start = cpu_seconds();
    let start = Instant::now();
    for _ in 0..n {
        // One deadline for the timer and the probe: the lateness measured is
        // the timer's, not the time this thread lost between two clock reads.
        let deadline = Instant::now() + Duration::from_millis(rng.gen_range(1..=2_000));
        let probe = Probe {
            deadline,
            lateness: Arc::clone(&lateness),
        };
        drop(timer.schedule_at(deadline, probe).expect("scheduled"));
    }
    let scheduled_in = start.elapsed();
    while lateness.fired.load(Ordering::Acquire) < n {
        std::thread::sleep(Duration::from_millis(10));
    }
    let cpu = cpu_seconds() - cpu_start;
    let m = timer.metrics();
    println!("timers               {n} (delays uniform in [1, 2000] ms, system clock)");
    println!("scheduled in         {:.3} s", scheduled_in.as_secs_f64());
    println!(
        "all fired after      {:.3} s",
        start.elapsed().as_secs_f64()
    );
    println!(
        "lateness ms          p50 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.3}",
        lateness.percentile(0.5),
        lateness.percentile(0.99),
        lateness.percentile(0.999),
        lateness.max_us.load(Ordering::Relaxed) as f64 / 1000.0
    );
    println!(
        "early                {}",
        lateness.early.load(Ordering::Relaxed)
    );
    println!(
        "CPU (process)        {:.3} s, {:.0} ns per timer",
        cpu,
        cpu * 1e9 / n as f64
    );
    println!("driver wake-ups      {}", m.wakeups);
    let early = lateness.early.load(Ordering::Relaxed);
    exit_code(match early {
        0 => Ok(()),
        _ => Err(format!("{early} timers fired early")),
    })
}
