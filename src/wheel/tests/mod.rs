//! Scenario tests of the wheel, one file per mechanism; the arithmetic of
//! each part is tested beside it.

mod compact;
mod freed;
mod head;
mod order;
mod random;
mod run;

use super::compact::GARBAGE_SLACK;
use super::pool::{self, Bucket};
use super::reference;
use super::{TimerKey, Wheel};
use crate::tick::NEVER;

/// Polls `w` at `now` until nothing is due: `(deadline, value)` of each.
fn drain_due(w: &mut Wheel<u64>, now: u64) -> Vec<(u64, u64)> {
    std::iter::from_fn(|| w.poll(now))
        .map(|f| (f.deadline, f.value))
        .collect()
}
