//! The single-threaded core on W1 churn and W2 expire (shared brief), swept
//! over the pending count, beside the textbook baseline: a `BinaryHeap` with
//! lazy cancel.
//!
//! ```text
//! cargo bench --bench local
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use purgatorio::LocalTimer;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const SEED: u64 = 0x5eed;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// A binary heap of `(deadline, id)` with lazy cancel: a cancelled id is
/// flagged and skipped when it reaches the top.
#[derive(Default)]
struct HeapTimer {
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    cancelled: Vec<bool>,
}

impl HeapTimer {
    fn schedule(&mut self, deadline: u64) -> u64 {
        let id = self.cancelled.len() as u64;
        self.cancelled.push(false);
        self.heap.push(Reverse((deadline, id)));
        id
    }

    fn cancel(&mut self, id: u64) {
        self.cancelled[id as usize] = true;
    }

    fn poll(&mut self, now: u64) -> Option<u64> {
        while let Some(&Reverse((deadline, id))) = self.heap.peek() {
            if deadline > now {
                return None;
            }
            self.heap.pop();
            if !self.cancelled[id as usize] {
                return Some(deadline);
            }
        }
        None
    }
}

/// W1: `pending` timers in [1, 30,000] ms, then schedule one + cancel a
/// random pending one, `iters` times.
fn churn(c: &mut Criterion) {
    let mut group = c.benchmark_group("w1_churn");
    for pending in [10_000usize, 100_000, 1_000_000] {
        group.throughput(Throughput::Elements(1));
        group.bench_with_input(
            BenchmarkId::new("purgatorio", pending),
            &pending,
            |b, &n| {
                let mut rng = SmallRng::seed_from_u64(SEED);
                let mut timer = LocalTimer::new();
                let mut keys: Vec<_> = (0..n as u64)
                    .map(|i| timer.schedule_at(ms(rng.gen_range(1..=30_000)), i))
                    .collect();
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for i in 0..iters {
                        let key = timer.schedule_at(ms(rng.gen_range(1..=30_000)), i);
                        let victim = rng.gen_range(0..keys.len());
                        let old = std::mem::replace(&mut keys[victim], key);
                        black_box(timer.cancel(old));
                    }
                    start.elapsed()
                });
            },
        );
        group.bench_with_input(
            BenchmarkId::new("binary_heap_lazy", pending),
            &pending,
            |b, &n| {
                let mut rng = SmallRng::seed_from_u64(SEED);
                let mut timer = HeapTimer::default();
                let mut ids: Vec<_> = (0..n)
                    .map(|_| timer.schedule(rng.gen_range(1..=30_000)))
                    .collect();
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let id = timer.schedule(rng.gen_range(1..=30_000));
                        let victim = rng.gen_range(0..ids.len());
                        timer.cancel(std::mem::replace(&mut ids[victim], id));
                    }
                    start.elapsed()
                });
            },
        );
    }
    group.finish();
}

/// W2: `pending` timers in [1, 10,000] ms, advanced 1 ms at a time; time per
/// fired timer. Checks the count and that nothing fired early.
fn expire(c: &mut Criterion) {
    let mut group = c.benchmark_group("w2_expire");
    group.sample_size(10);
    for pending in [10_000u64, 100_000, 1_000_000] {
        group.throughput(Throughput::Elements(pending));
        group.bench_with_input(
            BenchmarkId::new("purgatorio", pending),
            &pending,
            |b, &n| {
                b.iter_batched(
                    || {
                        let mut rng = SmallRng::seed_from_u64(SEED);
                        let mut timer = LocalTimer::new();
                        for _ in 0..n {
                            let d = rng.gen_range(1..=10_000u64);
                            timer.schedule_at(ms(d), d);
                        }
                        timer
                    },
                    |mut timer| {
                        let mut fired = 0u64;
                        for now in 1..=10_001u64 {
                            for e in timer.advance(ms(now)) {
                                assert!(*e.get_ref() <= now, "fired early");
                                fired += 1;
                            }
                        }
                        assert_eq!(fired, n);
                    },
                    criterion::BatchSize::PerIteration,
                );
            },
        );
        group.bench_with_input(
            BenchmarkId::new("binary_heap_lazy", pending),
            &pending,
            |b, &n| {
                b.iter_batched(
                    || {
                        let mut rng = SmallRng::seed_from_u64(SEED);
                        let mut timer = HeapTimer::default();
                        for _ in 0..n {
                            timer.schedule(rng.gen_range(1..=10_000u64));
                        }
                        timer
                    },
                    |mut timer| {
                        let mut fired = 0u64;
                        for now in 1..=10_001u64 {
                            while let Some(d) = timer.poll(now) {
                                assert!(d <= now, "fired early");
                                fired += 1;
                            }
                        }
                        assert_eq!(fired, n);
                    },
                    criterion::BatchSize::PerIteration,
                );
            },
        );
    }
    group.finish();
}

criterion_group!(benches, churn, expire);
criterion_main!(benches);
