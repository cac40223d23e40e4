//! The timer's time: its clock and origin, tick conversions, the driver's
//! wake-up tick and signal, the shutdown flag and the counters. Shared by the
//! handles, the shards, the driver and the workers.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::metrics::Counters;
use super::signal::Signal;
use crate::clock::Clock;
use crate::sync::{AtomicBool, AtomicU64};
use crate::tick::Resolution;

/// What the timer's threads and handles share.
pub(crate) struct Timing {
    /// Where time comes from.
    pub(crate) clock: Arc<dyn Clock>,
    /// The clock's reading when the timer was built: tick 0.
    pub(crate) origin: Instant,
    /// Tick length and conversions.
    pub(crate) resolution: Resolution,
    /// Wakes the driver (and `advance_clock` callers).
    pub(crate) signal: Arc<Signal>,
    /// The tick the driver will wake at; `u64::MAX` for none.
    pub(crate) next_wake: AtomicU64,
    /// Set once by shutdown.
    pub(crate) closed: AtomicBool,
    /// The threads' name prefix: the timer's name in published figures.
    pub(crate) name: String,
    /// Counters kept outside the shard locks.
    pub(crate) counters: Counters,
}

impl Timing {
    /// Whether the timer is shut down.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Time since the origin on the timer's clock.
    pub(crate) fn elapsed(&self) -> Duration {
        self.clock.now().saturating_duration_since(self.origin)
    }

    /// The tick the clock is in now.
    pub(crate) fn now_tick(&self) -> u64 {
        self.resolution.now_tick(self.elapsed())
    }

    /// The tick at which a task due at `deadline` may fire, the clock
    /// reading `elapsed`: due now if the deadline has passed.
    pub(crate) fn deadline_tick(&self, deadline: Instant, elapsed: Duration) -> u64 {
        let deadline = deadline.saturating_duration_since(self.origin);
        self.resolution.due_tick(deadline, elapsed)
    }

    /// The tick at which a task due `delay` after `elapsed` may fire.
    pub(crate) fn delay_tick(&self, elapsed: Duration, delay: Duration) -> u64 {
        self.resolution
            .due_tick(elapsed.saturating_add(delay), elapsed)
    }

    /// The instant at which `tick` begins, if representable.
    pub(crate) fn instant_of(&self, tick: u64) -> Option<Instant> {
        self.origin.checked_add(self.resolution.tick_start(tick))
    }

    /// Records the lag of a task with deadline tick `deadline` starting now.
    pub(crate) fn record_lag(&self, deadline: u64) {
        let lag = self
            .elapsed()
            .saturating_sub(self.resolution.tick_start(deadline));
        self.counters.record_lag(lag);
    }

    /// Wakes the driver if `tick` is earlier than it plans to wake.
    #[inline]
    pub(crate) fn wake_if_earlier(&self, tick: u64) {
        // Fast path: a plain load, so schedulers share the cache line.
        if tick < self.next_wake.load(Ordering::SeqCst)
            && self.next_wake.fetch_min(tick, Ordering::SeqCst) > tick
        {
            self.signal.notify();
        }
    }
}
