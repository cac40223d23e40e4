//! Criterion: the thread-safe timer and the purgatory.
//!
//! - `timer_churn/threads/{1,2}`: W1 on [`Timer`] (system clock): 1,000,000
//!   pending split over the threads, each thread doing schedule + cancel of
//!   a random own pending timer, by its `TimerHandle`. Time is per pair over
//!   all threads, so the 2-thread figure is the aggregate throughput.
//! - `timer_churn/ids/{1,2}`: the same, each timer named by its `TimerId`
//!   and cancelled through the timer.
//! - `purgatory/complete`: park an operation on one of 10,000 keys, satisfy
//!   it and `check_and_complete` the key (the completion-heavy mix).
//! - `purgatory/expire`: park 100,000 operations with a 10 ms timeout on a
//!   manual clock, advance it and wait until all expired (the expiry-heavy
//!   mix); time per operation.
//!
//! ```text
//! cargo bench --bench timer
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use purgatorio::{Completion, DelayedOperation, ManualClock, Purgatory, Timer, TimerBuilder};
use purgatorio_workloads::RealTimePairs;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const PENDING: usize = 1_000_000;

/// A W1 deadline an hour out (nothing fires during the bench), spread over
/// W1's 30 s.
fn delay(rng: &mut SmallRng) -> Duration {
    Duration::from_millis(3_600_000 + rng.gen_range(1..=30_000))
}

/// How a churn worker names its timers.
#[derive(Clone, Copy, Debug)]
enum Naming {
    /// By `TimerHandle`, cancelled through it.
    Handles,
    /// By `TimerId`, cancelled through the timer.
    Ids,
}

/// A thread that keeps its own pending timers and runs churn on request.
fn churn_worker(
    timer: Timer<fn()>,
    naming: Naming,
    pending: usize,
    seed: u64,
) -> Sender<(u64, Sender<()>)> {
    let (tx, rx) = unbounded::<(u64, Sender<()>)>();
    let (ready_tx, ready_rx) = bounded(1);
    thread::spawn(move || {
        let task: fn() = || ();
        match naming {
            Naming::Handles => churn(
                RealTimePairs::new(
                    pending,
                    seed,
                    |rng| timer.schedule(delay(rng), task).expect("scheduled"),
                    |handle| handle.cancel().is_some(),
                ),
                &ready_tx,
                &rx,
            ),
            Naming::Ids => churn(
                RealTimePairs::new(
                    pending,
                    seed,
                    |rng| timer.schedule_id(delay(rng), task).expect("scheduled"),
                    |id| timer.cancel(id).is_some(),
                ),
                &ready_tx,
                &rx,
            ),
        }
    });
    ready_rx.recv().expect("worker filled its timers");
    tx
}

/// A churn worker's loop, its timers scheduled: says it is ready, then runs
/// as many pairs as each request asks for.
fn churn<N>(
    mut pairs: RealTimePairs<N, impl FnMut(&mut SmallRng) -> N, impl FnMut(N) -> bool>,
    ready: &Sender<()>,
    requests: &Receiver<(u64, Sender<()>)>,
) {
    ready.send(()).expect("bench waits");
    for (n, done) in requests {
        pairs.run(n);
        done.send(()).expect("bench waits");
    }
}

fn timer_churn(c: &mut Criterion) {
    let mut group = c.benchmark_group("timer_churn");
    group.throughput(Throughput::Elements(1));
    for (name, naming) in [("threads", Naming::Handles), ("ids", Naming::Ids)] {
        for threads in [1usize, 2] {
            group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &t| {
                let timer: Timer<fn()> = TimerBuilder::new().build().expect("timer");
                let workers: Vec<_> = (0..t)
                    .map(|i| churn_worker(timer.clone(), naming, PENDING / t, i as u64))
                    .collect();
                b.iter_custom(|iters| {
                    let per = iters.div_ceil(t as u64);
                    let (done_tx, done_rx) = unbounded();
                    let start = Instant::now();
                    for w in &workers {
                        w.send((per, done_tx.clone())).expect("worker alive");
                    }
                    for _ in 0..t {
                        done_rx.recv().expect("worker done");
                    }
                    start.elapsed()
                });
                drop(workers);
                timer.shutdown();
            });
        }
    }
    group.finish();
}

/// An operation satisfied when its key's flag is set.
struct Op {
    flag: Arc<AtomicBool>,
    timeout: Duration,
}

impl DelayedOperation for Op {
    fn delay(&self) -> Duration {
        self.timeout
    }
    fn try_complete(&mut self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }
    fn on_complete(&mut self, _: Completion) {}
}

fn purgatory(c: &mut Criterion) {
    let mut group = c.benchmark_group("purgatory");
    group.throughput(Throughput::Elements(1));
    group.bench_function("complete", |b| {
        const KEYS: u64 = 10_000;
        let purgatory: Purgatory<u64, Op> = Purgatory::builder().build().expect("purgatory");
        let flags: Vec<_> = (0..KEYS)
            .map(|_| Arc::new(AtomicBool::new(false)))
            .collect();
        let mut rng = SmallRng::seed_from_u64(7);
        b.iter(|| {
            let key = rng.gen_range(0..KEYS);
            let flag = &flags[key as usize];
            let op = Op {
                flag: Arc::clone(flag),
                timeout: Duration::from_secs(30),
            };
            assert!(!purgatory
                .try_complete_else_watch(op, [key])
                .expect("watched"));
            flag.store(true, Ordering::Relaxed);
            assert_eq!(purgatory.check_and_complete(&key).expect("open"), 1);
            flag.store(false, Ordering::Relaxed);
        });
    });
    group.sample_size(10);
    const EXPIRING: u64 = 100_000;
    group.throughput(Throughput::Elements(EXPIRING));
    group.bench_function("expire", |b| {
        let clock = ManualClock::new();
        let purgatory: Purgatory<u64, Op> = Purgatory::builder()
            .timer(Timer::builder().clock(clock.clone()))
            .build()
            .expect("purgatory");
        let never = Arc::new(AtomicBool::new(false));
        let mut rng = SmallRng::seed_from_u64(9);
        b.iter(|| {
            for _ in 0..EXPIRING {
                let op = Op {
                    flag: Arc::clone(&never),
                    timeout: Duration::from_millis(10),
                };
                let keys = [rng.gen_range(0..10_000u64)];
                assert!(!purgatory
                    .try_complete_else_watch(op, keys)
                    .expect("watched"));
            }
            clock.advance(Duration::from_millis(10));
            while purgatory.delayed() > 0 {
                thread::yield_now();
            }
        });
    });
    group.finish();
}

criterion_group!(benches, timer_churn, purgatory);
criterion_main!(benches);
