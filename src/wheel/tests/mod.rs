//! Scenario tests of the wheel and its parts, one file per mechanism; the
//! arithmetic and pure helpers of each part are tested beside them.

mod arena;
mod bucket_queue;
mod compact;
mod freed;
mod head;
mod order;
mod pool;
mod random;
mod run;
mod side;

use super::compact::GARBAGE_SLACK;
use super::pool::{Bucket, KEEP_REFS};
use super::reference;
use super::{TimerKey, Wheel};
use crate::time::NEVER;

/// Polls `w` at `now` until nothing is due: `(deadline, value)` of each.
fn drain_due(w: &mut Wheel<u64>, now: u64) -> Vec<(u64, u64)> {
    std::iter::from_fn(|| w.poll(now))
        .map(|f| (f.deadline, f.value))
        .collect()
}
