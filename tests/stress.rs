//! Stress: real threads on the system clock, bounded in size. Every timer
//! task either ran exactly once or was cancelled with `true`, never both,
//! and the metrics agree; every purgatory operation completes exactly once
//! and expires only if nothing completed it.
//!
//! `PURGATORIO_STRESS_OPS` sets the operations per thread (default 5,000):
//!
//! ```text
//! PURGATORIO_STRESS_OPS=200000 cargo test --release --test stress
//! ```
//!
//! No assertion depends on timing; the only timeout guards against a hang.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use purgatorio::{Completion, DelayedOperation, Purgatory, Timer};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const THREADS: usize = 4;

fn ops_per_thread() -> usize {
    std::env::var("PURGATORIO_STRESS_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000)
}

/// Waits until `done` holds, panicking after a minute (a hang, not a
/// timing assertion).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < give_up, "hung waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn timer_tasks_run_exactly_once_or_are_cancelled() {
    let per = ops_per_thread();
    let total = THREADS * per;
    let ran: Arc<Vec<AtomicU8>> = Arc::new((0..total).map(|_| AtomicU8::new(0)).collect());
    let cancelled: Arc<Vec<AtomicBool>> =
        Arc::new((0..total).map(|_| AtomicBool::new(false)).collect());
    let timer: Timer = Timer::builder()
        .shards(3)
        .workers(2)
        .build()
        .expect("timer");
    thread::scope(|s| {
        for t in 0..THREADS {
            let (timer, ran, cancelled) = (timer.clone(), Arc::clone(&ran), Arc::clone(&cancelled));
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t as u64);
                let mut handles = Vec::new();
                for i in 0..per {
                    let id = t * per + i;
                    let ran = Arc::clone(&ran);
                    let delay = Duration::from_micros(rng.gen_range(0..5_000));
                    let handle = timer
                        .schedule(
                            delay,
                            Box::new(move || {
                                ran[id].fetch_add(1, Ordering::Relaxed);
                            }),
                        )
                        .expect("scheduled");
                    handles.push((id, handle));
                    // Cancel or reschedule a random earlier timer (maybe fired).
                    if rng.gen_bool(0.4) {
                        let (victim, ref h) = handles[rng.gen_range(0..handles.len())];
                        if rng.gen_bool(0.5) {
                            if h.cancel().is_some() {
                                assert!(
                                    !cancelled[victim].swap(true, Ordering::Relaxed),
                                    "cancelled twice with true"
                                );
                            }
                        } else {
                            h.reschedule(Duration::from_micros(rng.gen_range(0..5_000)));
                        }
                    }
                }
            });
        }
    });
    wait_until("the timer to drain", || timer.is_empty());
    let m = timer.metrics();
    wait_until("the workers to finish", || {
        timer.metrics().expired
            == ran
                .iter()
                .map(|r| u64::from(r.load(Ordering::Relaxed)))
                .sum::<u64>()
    });
    let (mut runs, mut cancels) = (0u64, 0u64);
    for id in 0..total {
        let r = ran[id].load(Ordering::Relaxed);
        let c = cancelled[id].load(Ordering::Relaxed);
        assert!(
            (r == 1) ^ c,
            "task {id}: ran {r} times, cancelled with true: {c}"
        );
        runs += u64::from(r);
        cancels += u64::from(c);
    }
    let m2 = timer.metrics();
    assert_eq!(m.scheduled, total as u64);
    assert_eq!(m2.cancelled, cancels);
    assert_eq!(m2.expired, runs);
    assert_eq!(m2.panicked, 0);
    assert_eq!(m2.pending, 0);
    timer.shutdown();
}

/// An operation whose completion condition another thread sets.
struct Op {
    id: usize,
    satisfied: Arc<Vec<AtomicBool>>,
    tried_true: Arc<Vec<AtomicBool>>,
    completed: Arc<Vec<AtomicU8>>,
    expired: Arc<Vec<AtomicU8>>,
    delay: Duration,
}

impl DelayedOperation for Op {
    fn delay(&self) -> Duration {
        self.delay
    }
    fn try_complete(&mut self) -> bool {
        let yes = self.satisfied[self.id].load(Ordering::Relaxed);
        if yes {
            self.tried_true[self.id].store(true, Ordering::Relaxed);
        }
        yes
    }
    fn on_complete(&mut self, completion: Completion) {
        self.completed[self.id].fetch_add(1, Ordering::Relaxed);
        if completion.is_timeout() {
            self.expired[self.id].fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn purgatory_operations_complete_exactly_once() {
    const KEYS: u64 = 64;
    let per = ops_per_thread();
    let total = 2 * per;
    let flags = |_| {
        Arc::new(
            (0..total)
                .map(|_| AtomicBool::new(false))
                .collect::<Vec<_>>(),
        )
    };
    let counts = |_| Arc::new((0..total).map(|_| AtomicU8::new(0)).collect::<Vec<_>>());
    let (satisfied, tried_true) = (flags(0), flags(1));
    let (completed, expired) = (counts(0), counts(1));
    let purgatory: Purgatory<u64, Op> = Purgatory::builder()
        .purge_interval(100)
        .build()
        .expect("purgatory");
    let produced = AtomicUsize::new(0);
    thread::scope(|s| {
        // Two producers park operations on 1–3 random keys.
        for t in 0..2 {
            let (p, satisfied, tried_true, completed, expired, produced) = (
                &purgatory,
                &satisfied,
                &tried_true,
                &completed,
                &expired,
                &produced,
            );
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(100 + t as u64);
                for i in 0..per {
                    let id = t * per + i;
                    let keys: Vec<u64> = (0..rng.gen_range(1..=3))
                        .map(|_| rng.gen_range(0..KEYS))
                        .collect();
                    let op = Op {
                        id,
                        satisfied: Arc::clone(satisfied),
                        tried_true: Arc::clone(tried_true),
                        completed: Arc::clone(completed),
                        expired: Arc::clone(expired),
                        delay: Duration::from_micros(rng.gen_range(100..10_000)),
                    };
                    p.try_complete_else_watch(op, &keys).expect("watched");
                    produced.fetch_add(1, Ordering::Release);
                }
            });
        }
        // Two completers satisfy random operations and poke random keys.
        for t in 0..2 {
            let (p, satisfied, produced) = (&purgatory, &satisfied, &produced);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(200 + t as u64);
                while produced.load(Ordering::Acquire) < total {
                    let n = produced.load(Ordering::Acquire);
                    if n > 0 {
                        satisfied[rng.gen_range(0..n)].store(true, Ordering::Relaxed);
                    }
                    p.check_and_complete(&rng.gen_range(0..KEYS)).expect("open");
                }
            });
        }
    });
    wait_until("every operation to end", || {
        completed.iter().all(|c| c.load(Ordering::Relaxed) > 0)
    });
    for id in 0..total {
        let c = completed[id].load(Ordering::Relaxed);
        let e = expired[id].load(Ordering::Relaxed);
        assert_eq!(c, 1, "operation {id} completed {c} times");
        assert!(e <= 1, "operation {id} expired {e} times");
        if e == 1 {
            assert!(
                !tried_true[id].load(Ordering::Relaxed),
                "operation {id} expired although try_complete succeeded"
            );
        }
    }
    let m = purgatory.metrics();
    let expiries: u64 = expired
        .iter()
        .map(|e| u64::from(e.load(Ordering::Relaxed)))
        .sum();
    assert_eq!(m.expired, expiries);
    assert_eq!(m.satisfied + m.expired, total as u64);
    assert_eq!(m.panics, 0);
    wait_until("the purgatory to forget done operations", || {
        purgatory.delayed() == 0
    });
    purgatory.shutdown();
}

/// Counts its completions; never completes by itself.
struct Parked {
    completed: Arc<AtomicUsize>,
}

impl DelayedOperation for Parked {
    fn delay(&self) -> Duration {
        Duration::from_secs(3600)
    }
    fn try_complete(&mut self) -> bool {
        false
    }
    fn on_complete(&mut self, _completion: Completion) {
        self.completed.fetch_add(1, Ordering::Relaxed);
    }
}

/// `park` racing `shutdown`: once both have returned, every operation the
/// purgatory accepted has ended (expired by shutdown, or by `park` itself).
/// Before the fix that the loom model `shutdown_races_park` found, an
/// operation watched after shutdown drained the lists could be left pending.
#[test]
fn park_racing_shutdown_leaves_nothing_pending() {
    let rounds = (ops_per_thread() / 25).max(1);
    for round in 0..rounds {
        let purgatory: Purgatory<u64, Parked> = Purgatory::builder()
            .timer(Timer::builder().shards(2).workers(1))
            .build()
            .expect("purgatory");
        let completed = Arc::new(AtomicUsize::new(0));
        let accepted = AtomicUsize::new(0);
        thread::scope(|s| {
            for t in 0..2u64 {
                let (p, completed, accepted) = (&purgatory, &completed, &accepted);
                s.spawn(move || {
                    for key in 0.. {
                        let op = Parked {
                            completed: Arc::clone(completed),
                        };
                        match p.park(op, [key % 8, t]) {
                            Ok(_) => accepted.fetch_add(1, Ordering::Relaxed),
                            Err(_) => return,
                        };
                    }
                });
            }
            // Let the producers get going, then shut down under them.
            wait_until("the producers to start", || {
                accepted.load(Ordering::Relaxed) > round % 50
            });
            purgatory.shutdown();
        });
        let accepted = accepted.load(Ordering::Relaxed);
        assert_eq!(
            completed.load(Ordering::Relaxed),
            accepted,
            "round {round}: an accepted operation was left pending"
        );
        assert_eq!(purgatory.metrics().shut_down, accepted as u64);
    }
}
