//! The standard workloads W1–W4 on purgatorio alone: the single-threaded
//! core, and the thread-safe timer for W1 and W4. The workloads themselves
//! live in `purgatorio-workloads`, shared with the peers report, which runs
//! the same ones beside the other timer structures.
//!
//! ```text
//! cargo run --release --example workloads            # all
//! cargo run --release --example workloads -- w1 w3   # some (w1 w1-clock w1-timer w1-timer-id w2 ...)
//! cargo run --release --example workloads -- w1 w1-clock w1-timer w1-timer-id --pending 10000
//! cargo run --release --example workloads -- --help  # what each one is
//! ```
//!
//! Time is in milliseconds on a caller-driven clock starting at 0, with a
//! fixed-seed RNG; tick 1 ms, 64 slots per level.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use purgatorio::{LocalTimer, ManualClock, Timer, TimerBuilder};
use purgatorio_workloads::{ms, w3, w4, Churn, Expire, Purgatorio, RealTimePairs, SEED};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// W1 churn: `pending` (1,000,000 in the standard run) in [1, 30,000] ms,
/// then 2,000,000 × (schedule one more + cancel a random pending one).
fn w1(pending: usize) {
    let mut churn = Churn::<Purgatorio>::new(pending);
    let pairs = 2_000_000u64;
    let start = Instant::now();
    churn.run(pairs);
    let elapsed = start.elapsed();
    churn.finish();
    println!(
        "W1 churn:  {:>7.1} ns per schedule+cancel pair ({} pending, {} pairs)",
        elapsed.as_nanos() as f64 / pairs as f64,
        grouped(pending as u64),
        grouped(pairs)
    );
}

/// W1 on the core in real time: the pairs of [`w1_timer`], each deadline
/// read from the system clock by the caller, as any real-time caller of
/// `LocalTimer` does. The reference for the thread-safe timer's pair: the
/// same work, less what the thread-safe layer adds.
fn w1_clock(pending: usize) {
    let mut rng = SmallRng::seed_from_u64(SEED);
    let mut timer: LocalTimer<u64> = LocalTimer::new();
    let origin = Instant::now();
    let deadline = |rng: &mut SmallRng| origin.elapsed() + ms(rng.gen_range(60_000..=90_000));
    let mut keys: Vec<_> = (0..pending as u64)
        .map(|id| timer.schedule_at(deadline(&mut rng), id))
        .collect();
    let pairs = 2_000_000u64;
    let start = Instant::now();
    for id in 0..pairs {
        let key = timer.schedule_at(deadline(&mut rng), id);
        let victim = rng.gen_range(0..keys.len());
        let old = std::mem::replace(&mut keys[victim], key);
        assert!(timer.cancel(old).is_some());
    }
    let elapsed = start.elapsed();
    println!(
        "W1 clock:  {:>7.1} ns per schedule+cancel pair (core, a system clock read per schedule, {} pending)",
        elapsed.as_nanos() as f64 / pairs as f64,
        grouped(pending as u64)
    );
}

/// W1 on the thread-safe timer (system clock, delays in [60, 90] s so none
/// fires during the run), from one thread: `pending` timers, then
/// 2,000,000 × (schedule one more + cancel a random pending one), each
/// task named by its [`TimerHandle`](purgatorio::TimerHandle), or with
/// `by_id` by its [`TimerId`](purgatorio::TimerId), cancelled through the
/// timer (no reference count per task).
fn w1_timer(pending: usize, by_id: bool) {
    let timer: Timer<fn()> = TimerBuilder::new().build().expect("timer");
    let task: fn() = || ();
    let (ns, label, what) = if by_id {
        let ns = w1_pairs(
            pending,
            |delay| timer.schedule_id(delay, task).expect("scheduled"),
            |id| timer.cancel(id).is_some(),
        );
        (ns, "W1 timer id:", "thread-safe timer by id")
    } else {
        let ns = w1_pairs(
            pending,
            |delay| timer.schedule(delay, task).expect("scheduled"),
            |handle| handle.cancel().is_some(),
        );
        (ns, "W1 timer:", "thread-safe timer")
    };
    println!(
        "{label:<12}{ns:>6.1} ns per schedule+cancel pair ({what}, one thread, {} pending)",
        grouped(pending as u64)
    );
}

/// W1's pairs on a real-time timer: `pending` scheduled with delays in
/// [60, 90] s, then 2,000,000 × (`schedule` one more + `cancel` a random
/// pending one, which must succeed); nanoseconds per pair.
fn w1_pairs<N>(
    pending: usize,
    mut schedule: impl FnMut(Duration) -> N,
    cancel: impl FnMut(N) -> bool,
) -> f64 {
    let delay = |rng: &mut SmallRng| ms(rng.gen_range(60_000..=90_000));
    let mut pairs = RealTimePairs::new(pending, SEED, |rng| schedule(delay(rng)), cancel);
    let n = 2_000_000u64;
    let start = Instant::now();
    pairs.run(n);
    start.elapsed().as_nanos() as f64 / n as f64
}

/// W2 expire: 1,000,000 in [1, 10,000] ms, advanced 1 ms at a time to 10,001.
fn w2() {
    let expire = Expire::<Purgatorio>::new(1_000_000);
    let start = Instant::now();
    let out = expire.run();
    let elapsed = start.elapsed();
    println!(
        "W2 expire: {:>7.1} ns per fired timer ({} fired, {} early, {} more than a tick late)",
        elapsed.as_nanos() as f64 / out.fired as f64,
        out.fired,
        out.early,
        out.late
    );
}

/// W3 memory: 10,000,000 pending u64 payloads in [1 ms, 1 h].
fn w3_memory() {
    let n = 10_000_000;
    let per = w3::<Purgatorio>(n);
    println!("W3 memory: {per:>7.1} bytes per pending timer ({n} pending)");
}

/// W4 sparse: 1,000 timers in [1 s, 3,600 s], driven by waking at
/// `next_expiration` only.
fn w4_sparse() {
    let sparse = w4::<Purgatorio>();
    println!(
        "W4 sparse: {:>7} wake-ups for {} timers over an hour ({} early; a 1 ms ticking wheel: 3,600,000)",
        sparse.wakeups, sparse.fired.fired, sparse.fired.early
    );
}

/// W4 on the thread-safe timer: the same 1,000 timers on a manual clock that
/// jumps to each next expiration, counting the driver thread's own wake-ups;
/// then 10 s of real time with nothing pending on the system clock.
fn w4_timer() {
    let mut rng = SmallRng::seed_from_u64(SEED);
    let clock = ManualClock::new();
    let timer: Timer = Timer::builder()
        .clock(clock.clone())
        .build()
        .expect("timer");
    let fired = Arc::new(AtomicU64::new(0));
    for _ in 0..1_000 {
        let fired = Arc::clone(&fired);
        let d = rng.gen_range(1_000..=3_600_000u64);
        let t = timer
            .schedule(
                ms(d),
                Box::new(move || {
                    fired.fetch_add(1, Ordering::Relaxed);
                }),
            )
            .expect("scheduled");
        drop(t);
    }
    while let Some(at) = timer.next_expiration() {
        clock.advance(at.saturating_duration_since(timer.now()));
        // Wait for the driver to take what is due (real time, not measured).
        while timer.next_expiration().is_some_and(|next| next <= at) {
            std::thread::yield_now();
        }
    }
    while fired.load(Ordering::Relaxed) < 1_000 {
        std::thread::yield_now();
    }
    let m = timer.metrics();
    println!(
        "W4 timer:  {:>7} driver wake-ups for {} timers over an hour (thread-safe timer, manual clock jumping to each expiration)",
        m.wakeups, m.expired
    );
    let idle: Timer = Timer::builder().build().expect("timer");
    std::thread::sleep(Duration::from_secs(10));
    println!(
        "W4 idle:   {:>7} driver wake-ups in 10 s with nothing pending (system clock)",
        idle.metrics().wakeups
    );
}

/// `n` with its thousands grouped: 1,000,000.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// One workload of this example.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Workload {
    /// W1 churn on the core: 1,000,000 pending (or `--pending`), 2,000,000 schedule+cancel pairs.
    W1,
    /// W1 on the core with a system clock read per schedule (the reference
    /// for `w1-timer` and `w1-timer-id`).
    W1Clock,
    /// W1 on the thread-safe timer, from one thread.
    W1Timer,
    /// W1 on the thread-safe timer by `TimerId`, from one thread.
    W1TimerId,
    /// W2 expire: 1,000,000 timers, the clock advanced 1 ms at a time.
    W2,
    /// W3 memory: 10,000,000 pending timers, RSS per timer.
    W3,
    /// W4 sparse: 1,000 timers over an hour, wake-ups counted.
    W4,
    /// W4 on the thread-safe timer, then 10 s idle on the system clock.
    W4Timer,
}

/// The standard workloads W1–W4 on purgatorio alone.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The workloads to run, in this order [default: all].
    #[arg(value_enum)]
    workloads: Vec<Workload>,
    /// Timers pending during the W1 runs (the standard W1 has 1,000,000).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u32).range(1..))]
    pending: u32,
}

fn main() {
    let mut args = Args::parse();
    if args.workloads.is_empty() {
        args.workloads = Workload::value_variants().to_vec();
    }
    for &workload in &args.workloads {
        match workload {
            Workload::W1 => w1(args.pending as usize),
            Workload::W1Clock => w1_clock(args.pending as usize),
            Workload::W1Timer => w1_timer(args.pending as usize, false),
            Workload::W1TimerId => w1_timer(args.pending as usize, true),
            Workload::W2 => w2(),
            Workload::W3 => w3_memory(),
            Workload::W4 => w4_sparse(),
            Workload::W4Timer => w4_timer(),
        }
    }
}
