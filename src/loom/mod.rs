//! loom models of the crate's shared state, built with
//! `--cfg purgatorio_loom` (see `docs/guarantees.md`):
//!
//! ```sh
//! RUSTFLAGS="--cfg purgatorio_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test --release --lib loom -- --nocapture
//! ```
//!
//! Each model runs the crate's own timer, purgatory or keyed timer (the
//! `sync` shim swaps in loom's locks and atomics) on a [`ManualClock`]
//! without a driver thread or workers: a model thread plays the driver and
//! then the worker (`run_due_here`), and loom runs every interleaving of the
//! threads up to a preemption bound.

mod future;
mod keyed;
mod purgatory;
mod timer;

use std::time::Duration;

use crate::clock::ManualClock;
use crate::timer::{Timer, TimerBuilder};

/// The timer every model uses (also the purgatory's and the keyed timer's):
/// a 1 ms tick, 4 slots per level, one shard, `clock`, and no driver
/// thread; the model drives it with `run_due_here`.
fn builder(clock: &ManualClock) -> TimerBuilder {
    Timer::builder()
        .tick(Duration::from_millis(1))
        .wheel_size(4)
        .shards(1)
        .clock(clock.clone())
        .driver_thread(false)
}

/// Runs a loom model of the crate's own code: every interleaving of its
/// threads up to `LOOM_MAX_PREEMPTIONS` preemptions (4 unless set), and
/// prints how many interleavings that was.
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use std::sync::Arc;

    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(4);
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    builder.check(move || {
        counted.fetch_add(1, Relaxed);
        f();
    });
    println!(
        "loom model {name}: {} interleavings (preemption bound {:?})",
        runs.load(Relaxed),
        builder.preemption_bound
    );
}
