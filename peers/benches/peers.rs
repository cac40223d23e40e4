//! Criterion: W1 churn and W2 expire for purgatorio and every peer at 10k,
//! 100k and 1M pending. Every run checks its counts (a cancel that misses,
//! a wrong fired count or an early firing panics).
//!
//! ```text
//! cargo bench -p purgatorio-peers
//! cargo bench -p purgatorio-peers -- w1_churn/nexus   # a filter
//! ```

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use purgatorio_peers::{BTree, Churn, Expire, Heap, Kompact, Nexus, Purgatorio, Subject, Tokio};

const SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];

fn churn_one<S: Subject>(c: &mut Criterion) {
    let mut group = c.benchmark_group("w1_churn");
    group.throughput(Throughput::Elements(1));
    for n in SIZES {
        group.bench_with_input(BenchmarkId::new(S::NAME, n), &n, |b, &n| {
            let mut churn = Churn::<S>::new(n);
            b.iter_custom(|pairs| {
                let start = Instant::now();
                churn.run(pairs);
                start.elapsed()
            });
            churn.finish();
        });
    }
    group.finish();
}

fn expire_one<S: Subject>(c: &mut Criterion) {
    let mut group = c.benchmark_group("w2_expire");
    group.sample_size(10);
    for n in SIZES {
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new(S::NAME, n), &n, |b, &n| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let expire = Expire::<S>::new(n);
                    let start = Instant::now();
                    let fired = expire.run();
                    total += start.elapsed();
                    assert_eq!(fired.fired, n as u64, "{}: fired count", S::NAME);
                    assert_eq!(fired.early, 0, "{}: fired early", S::NAME);
                }
                total
            });
        });
    }
    group.finish();
}

fn churn(c: &mut Criterion) {
    churn_one::<Purgatorio>(c);
    churn_one::<Nexus>(c);
    churn_one::<Kompact>(c);
    churn_one::<Tokio>(c);
    churn_one::<Heap>(c);
    churn_one::<BTree>(c);
}

fn expire(c: &mut Criterion) {
    expire_one::<Purgatorio>(c);
    expire_one::<Nexus>(c);
    expire_one::<Kompact>(c);
    expire_one::<Tokio>(c);
    expire_one::<Heap>(c);
    expire_one::<BTree>(c);
}

criterion_group!(benches, churn, expire);
criterion_main!(benches);
