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

    /// Wakes the driver if `tick` is earlier than it plans to wake.
    #[inline]
    pub(super) fn wake_if_earlier(&self, tick: u64) {
        // Fast path: a plain load, so schedulers share the cache line.
        if tick < self.next_wake.load(Ordering::SeqCst)
            && self.next_wake.fetch_min(tick, Ordering::SeqCst) > tick
        {
            self.signal.notify();
        }
    }
}
