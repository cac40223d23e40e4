//! The timer's time source: its clock, its origin (tick 0, the clock's
//! reading when the timer was built) and its resolution. Every conversion
//! between the clock's instants and the wheel's ticks goes through here:
//! readings round down (a tick has begun only once all of it is past) and
//! deadlines round up (a timer fires only in a tick that starts at or after
//! its deadline), so nothing fires early.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::{Clock, SystemClock};
use crate::tick::{nanos, Resolution};

/// A reading of the timer's clock: the time since the origin and the tick
/// it falls in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Now {
    /// Whole nanoseconds since the origin (saturating at `u64::MAX`,
    /// 584 years).
    pub(super) ns: u64,
    /// The tick the reading falls in, rounded down.
    pub(super) tick: u64,
}

/// Where a timer's time comes from, and how it becomes ticks.
///
/// Every schedule reads the clock and converts a time, so this is the hot
/// path of [`Timer::schedule`](crate::Timer::schedule): the system clock
/// is read without a virtual call, conversions run on whole nanoseconds in
/// 64 bits ([`Resolution`]), and a deadline still ahead of the reading is
/// the only time converted to ticks ([`due_at_now`](Self::due_at_now),
/// [`due_after_now`](Self::due_after_now)): the reading's own tick cannot
/// make it due.
pub(crate) struct TimeSource {
    /// Where time comes from.
    clock: Arc<dyn Clock>,
    /// Whether `clock` is the [`SystemClock`], read as [`Instant::now`]
    /// directly.
    system: bool,
    /// The clock's reading when the timer was built: tick 0.
    origin: Instant,
    /// Tick length and conversions.
    resolution: Resolution,
}

impl TimeSource {
    /// A time source on `clock` whose tick 0 starts now; `system`: the
    /// clock is the [`SystemClock`] (see [`is_system`]).
    pub(crate) fn new(clock: Arc<dyn Clock>, system: bool, resolution: Resolution) -> Self {
        let origin = clock.now();
        TimeSource {
            clock,
            system,
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
    #[inline]
    pub(crate) fn instant(&self) -> Instant {
        if self.system {
            Instant::now()
        } else {
            self.clock.now()
        }
    }

    /// Whether the clock is the [`SystemClock`], which never goes back.
    #[inline]
    pub(crate) fn reads_system_clock(&self) -> bool {
        self.system
    }

    /// Whether `at`, a reading of the clock, lies before the origin (a
    /// clock that went back to before the timer was built): it counts as
    /// the origin.
    #[inline]
    pub(crate) fn before_origin(&self, at: Instant) -> bool {
        at < self.origin
    }

    /// The clock read now, in ticks.
    #[inline]
    pub(crate) fn now(&self) -> Now {
        self.ticks(self.instant())
    }

    /// `at`, a reading of the clock, in ticks.
    #[inline]
    pub(crate) fn ticks(&self, at: Instant) -> Now {
        match self.since_origin(at) {
            Some(ns) => Now {
                ns,
                tick: self.resolution.now_tick_ns(ns),
            },
            None => Now {
                ns: u64::MAX,
                tick: self
                    .resolution
                    .now_tick(at.saturating_duration_since(self.origin)),
            },
        }
    }

    /// `at` (a reading of the clock, or a deadline) in whole nanoseconds
    /// since the origin, an instant before it counting as the origin;
    /// `None` past what a `u64` holds (584 years): the one conversion of
    /// an instant.
    #[inline]
    fn since_origin(&self, at: Instant) -> Option<u64> {
        nanos(at.saturating_duration_since(self.origin))
    }

    /// The tick at which a task due `delay` after `now` may fire.
    #[inline]
    pub(crate) fn due_after(&self, now: Now, delay: Duration) -> u64 {
        let deadline = nanos(delay).and_then(|delay| now.ns.checked_add(delay));
        self.resolution.due_tick_ns(deadline, now.ns)
    }

    /// Reads the clock for a task due `delay` from now: as
    /// [`due_at_now`](Self::due_at_now), the tick at which it may fire
    /// ([`due_after`](Self::due_after)) and a tick the clock has reached.
    /// A delay of at least a nanosecond puts the deadline after the
    /// reading, so its tick is the deadline rounded up, after the
    /// reading's own: that one is never converted, and tick 0 serves.
    #[inline]
    pub(crate) fn due_after_now(&self, delay: Duration) -> (u64, u64) {
        let instant = self.instant();
        match (self.since_origin(instant), nanos(delay)) {
            // After the reading: rounded up, never due now.
            (Some(now), Some(delay)) if delay > 0 => {
                (self.resolution.deadline_tick_of(now.checked_add(delay)), 0)
            }
            _ => {
                let now = self.ticks(instant);
                (self.due_after(now, delay), now.tick)
            }
        }
    }

    /// The tick at which a task due at `deadline` may fire, the clock
    /// reading `now`: due now if the deadline has passed.
    #[inline]
    pub(crate) fn due_at(&self, now: Now, deadline: Instant) -> u64 {
        self.resolution
            .due_tick_ns(self.since_origin(deadline), now.ns)
    }

    /// The tick at which a task due at `deadline` may fire, the clock
    /// reading before `deadline`: [`due_at`](Self::due_at) with no reading
    /// to convert, since a deadline still ahead is rounded up whatever the
    /// reading.
    #[inline]
    pub(crate) fn due_ahead(&self, deadline: Instant) -> u64 {
        self.resolution
            .deadline_tick_of(self.since_origin(deadline))
    }

    /// Reads the clock for a task due at `deadline`: the tick at which it
    /// may fire ([`due_at`](Self::due_at)), and a tick the clock has
    /// reached, so that the task is due now if its tick is at or before
    /// that one. A deadline still ahead (the common case) costs one
    /// conversion, not two: its tick is the deadline rounded up, which lies
    /// after the reading's tick unless it is tick 0 (a deadline at or
    /// before the origin, which a reading before the origin counts as), so
    /// the origin's tick 0 serves as the tick reached.
    #[inline]
    pub(crate) fn due_at_now(&self, deadline: Instant) -> (u64, u64) {
        let instant = self.instant();
        if instant < deadline {
            (self.due_ahead(deadline), 0)
        } else {
            let now = self.ticks(instant);
            (self.due_at(now, deadline), now.tick)
        }
    }

    /// The instant at which `tick` begins, if representable.
    pub(crate) fn instant_of(&self, tick: u64) -> Option<Instant> {
        self.origin.checked_add(self.resolution.tick_start(tick))
    }

    /// How long after its tick `deadline` began the clock reads now.
    pub(crate) fn lag(&self, deadline: u64) -> Duration {
        Duration::from_nanos(self.now().ns).saturating_sub(self.resolution.tick_start(deadline))
    }
}

/// Whether a clock of type `C` is the [`SystemClock`], which a
/// [`TimeSource`] reads without a virtual call.
pub(crate) fn is_system<C: Clock>(_: &C) -> bool {
    std::any::TypeId::of::<C>() == std::any::TypeId::of::<SystemClock>()
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::tick::NEVER;

    fn source(tick_ms: u64) -> (ManualClock, TimeSource) {
        let clock = ManualClock::new();
        let resolution = Resolution::new(Duration::from_millis(tick_ms));
        (
            clock.clone(),
            TimeSource::new(Arc::new(clock), false, resolution),
        )
    }

    #[test]
    fn readings_round_down_and_deadlines_up() {
        let (clock, time) = source(10);
        clock.advance(Duration::from_millis(15));
        let now = time.now();
        assert_eq!((now.ns, now.tick), (15_000_000, 1));
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

    /// Reading the clock for a delay converts only the deadline when the
    /// delay is not zero, and gives what converting the reading too gives.
    #[test]
    fn a_reading_for_a_delay_agrees_with_converting_both() {
        for tick_ms in [1, 3, 10] {
            let (clock, time) = source(tick_ms);
            for step_ns in [0, 1, 999_999, 1_000_000, 2_500_000, 10_000_001] {
                clock.advance(Duration::from_nanos(step_ns));
                let now = time.now();
                for delay_ns in [0u64, 1, 499_999, 1_000_000, 7_000_001, 45_000_000] {
                    let delay = Duration::from_nanos(delay_ns);
                    let want = time.due_after(now, delay);
                    let (tick, reached) = time.due_after_now(delay);
                    assert_eq!(tick, want, "tick {tick_ms} ms, delay {delay:?}");
                    assert_eq!(tick <= reached, want <= now.tick, "due now: {delay:?}");
                }
                for delay in [Duration::MAX, Duration::from_secs(u64::MAX / 2)] {
                    assert_eq!(time.due_after_now(delay).0, NEVER);
                }
            }
        }
    }

    /// Reading the clock for a deadline converts only the deadline when it
    /// is ahead, and gives what the two conversions give: the same tick,
    /// and due now exactly when that tick is at or before the reading's.
    #[test]
    fn a_reading_for_a_deadline_agrees_with_converting_both() {
        for tick_ms in [1, 3, 10] {
            let (clock, time) = source(tick_ms);
            let origin = time.instant();
            for step_us in [0, 1, 999, 1_000, 2_500, 9_999, 10_000, 10_001] {
                clock.advance(Duration::from_micros(step_us));
                let reading = time.instant();
                let now = time.now();
                for offset_us in [0u64, 1, 500, 999, 1_000, 1_001, 7_000, 10_000, 45_000] {
                    for deadline in [
                        reading + Duration::from_micros(offset_us),
                        reading
                            .checked_sub(Duration::from_micros(offset_us))
                            .filter(|d| *d >= origin)
                            .unwrap_or(origin),
                    ] {
                        let want = time.due_at(now, deadline);
                        let (tick, reached) = time.due_at_now(deadline);
                        assert_eq!(tick, want, "tick {tick_ms} ms, deadline {deadline:?}");
                        assert_eq!(
                            tick <= reached,
                            want <= now.tick,
                            "due now: tick {tick_ms} ms, deadline {deadline:?}"
                        );
                        // Ahead: its tick starts at or after it. Passed:
                        // due now, at the latest at the reading's tick.
                        assert!(
                            time.instant_of(tick).is_none_or(|start| start >= deadline)
                                || (deadline <= reading && tick <= reached),
                            "never early"
                        );
                    }
                }
            }
        }
    }
}
