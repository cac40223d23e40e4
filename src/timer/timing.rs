//! The driver's shared state: the time source, the tick the driver will
//! wake at and the signal that wakes it, the shutdown flag, the timer's
//! name and the counters. Shared by the handles, the shards, the driver and
//! the workers.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::metrics::Counters;
use super::signal::Signal;
use super::time::TimeSource;
use crate::sync::{AtomicBool, AtomicU64};

/// What the timer's threads and handles share.
pub(crate) struct Timing {
    /// The clock, the origin and the tick: time ↔ ticks.
    pub(super) time: TimeSource,
    /// Wakes the driver (and `advance_clock` callers).
    pub(super) signal: Arc<Signal>,
    /// The tick the driver will wake at; `u64::MAX` for none.
    pub(super) next_wake: AtomicU64,
    /// Set once by shutdown.
    pub(super) closed: AtomicBool,
    /// The threads' name prefix: the timer's name in published figures.
    pub(super) name: String,
    /// Counters kept outside the shard locks.
    pub(super) counters: Counters,
}

impl Timing {
    /// Whether the timer is shut down.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// The time source.
    pub(crate) fn time(&self) -> &TimeSource {
        &self.time
    }

    /// Records the lag of a task with deadline tick `deadline` starting now.
    pub(super) fn record_lag(&self, deadline: u64) {
        self.counters.record_lag(self.time.lag(deadline));
    }

    /// Lowers the tick the driver plans to wake at to `tick`; the returned
    /// [`Wake`] wakes the driver if that was earlier, once dropped.
    #[inline]
    pub(super) fn wake_if_earlier(&self, tick: u64) -> Wake<'_> {
        // Fast path: a plain load, so schedulers share the cache line.
        let earlier = tick < self.next_wake.load(Ordering::SeqCst)
            && self.next_wake.fetch_min(tick, Ordering::SeqCst) > tick;
        Wake(earlier.then_some(&*self.signal))
    }
}

/// A wake-up owed to the driver by a schedule that made the earliest
/// deadline, given when dropped. An async driver's wake-up runs its
/// runtime's waker, so a caller that scheduled under one of the crate's
/// locks (a keyed timer's shard, an operation's lock) keeps this until the
/// lock is released; any other caller lets it drop at once.
#[must_use = "dropping it wakes the driver: drop it after the locks"]
pub(crate) struct Wake<'a>(Option<&'a Signal>);

impl Wake<'_> {
    /// No wake-up owed.
    pub(super) fn none() -> Self {
        Wake(None)
    }
}

impl Drop for Wake<'_> {
    fn drop(&mut self) {
        if let Some(signal) = self.0.take() {
            signal.notify();
        }
    }
}
