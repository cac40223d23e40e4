//! The timer's time source: its clock, its origin (tick 0, the clock's
//! reading when the timer was built) and its resolution. Every conversion
//! between the clock's instants and the wheel's ticks goes through here:
//! readings round down (a tick has begun only once all of it is past) and
//! deadlines round up (a timer fires only in a tick that starts at or after
//! its deadline), so nothing fires early.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::tick::Resolution;

/// A reading of the timer's clock: the time since the origin and the tick
/// it falls in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Now {
    /// Time since the origin.
    pub(crate) elapsed: Duration,
    /// The tick the reading falls in, rounded down.
    pub(crate) tick: u64,
}

/// Where a timer's time comes from, and how it becomes ticks.
pub(crate) struct TimeSource {
    /// Where time comes from.
    clock: Arc<dyn Clock>,
    /// The clock's reading when the timer was built: tick 0.
    origin: Instant,
    /// Tick length and conversions.
    resolution: Resolution,
}

impl TimeSource {
    /// A time source on `clock` whose tick 0 starts now.
    pub(crate) fn new(clock: Arc<dyn Clock>, resolution: Resolution) -> Self {
        let origin = clock.now();
        TimeSource {
            clock,
            origin,
            resolution,
        }
    }

    /// The clock.
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The tick's length.
    pub(crate) fn tick(&self) -> Duration {
        self.resolution.tick()
    }

    /// The clock's instant now (one clock reading).
    pub(crate) fn instant(&self) -> Instant {
        self.clock.now()
    }

    /// The clock read now, in ticks.
    pub(crate) fn now(&self) -> Now {
        self.ticks(self.clock.now())
    }

    /// `at`, a reading of the clock, in ticks: the one conversion of an
    /// instant the clock gave.
    pub(crate) fn ticks(&self, at: Instant) -> Now {
        let elapsed = at.saturating_duration_since(self.origin);
        Now {
            elapsed,
            tick: self.resolution.now_tick(elapsed),
        }
    }

    /// The tick at which a task due `delay` after `now` may fire.
    pub(crate) fn due_after(&self, now: Now, delay: Duration) -> u64 {
        self.resolution
            .due_tick(now.elapsed.saturating_add(delay), now.elapsed)
    }

    /// The tick at which a task due at `deadline` may fire, the clock
    /// reading `now`: due now if the deadline has passed.
    pub(crate) fn due_at(&self, now: Now, deadline: Instant) -> u64 {
        let deadline = deadline.saturating_duration_since(self.origin);
        self.resolution.due_tick(deadline, now.elapsed)
    }

    /// The instant at which `tick` begins, if representable.
    pub(crate) fn instant_of(&self, tick: u64) -> Option<Instant> {
        self.origin.checked_add(self.resolution.tick_start(tick))
    }

    /// How long after its tick `deadline` began the clock reads now.
    pub(crate) fn lag(&self, deadline: u64) -> Duration {
        self.now()
            .elapsed
            .saturating_sub(self.resolution.tick_start(deadline))
    }
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn source(tick_ms: u64) -> (ManualClock, TimeSource) {
        let clock = ManualClock::new();
        let resolution = Resolution::new(Duration::from_millis(tick_ms));
        (clock.clone(), TimeSource::new(Arc::new(clock), resolution))
    }

    #[test]
    fn readings_round_down_and_deadlines_up() {
        let (clock, time) = source(10);
        clock.advance(Duration::from_millis(15));
        let now = time.now();
        assert_eq!((now.elapsed, now.tick), (Duration::from_millis(15), 1));
        // Due 5 ms from 15 ms: 20 ms starts tick 2, never earlier.
        assert_eq!(time.due_after(now, Duration::from_millis(5)), 2);
        // Due 6 ms from 15 ms: 21 ms, so the tick that starts at 30 ms.
        assert_eq!(time.due_after(now, Duration::from_millis(6)), 3);
        let at = time.instant() + Duration::from_millis(6);
        assert_eq!(time.due_at(now, at), 3);
        assert_eq!(
            time.instant_of(3),
            Some(time.instant() + Duration::from_millis(15))
        );
        assert_eq!(time.lag(1), Duration::from_millis(5));
    }
}
