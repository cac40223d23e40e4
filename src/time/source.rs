//! The thread-safe timer's time source: one clock, read through the
//! documented [`Clock`] interface (or [`Instant::now`] for the
//! [`SystemClock`], without a virtual call), an origin (tick 0: the
//! clock's reading when the timer was built) and a resolution.
//!
//! Inside, a time is whole nanoseconds since the origin (a `u64`, 584
//! years). An [`Instant`] is converted only at the API's edge, exactly both
//! ways ([`since_origin`](TimeSource::since_origin),
//! [`instant`](TimeSource::instant)), and a delay is always `deadline = now +
//! delay`, computed once ([`Deadline`]). The argument that nothing fires
//! early is in `docs/guarantees.md`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ticks::{self, Due, Resolution};
use crate::clock::{Clock, SystemClock};

/// When a task is due: after a delay from now, or at an instant. The one
/// way every `x` / `x_at` pair of the API names its deadline, so each pair
/// has one body.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Deadline {
    /// This long after the clock's reading.
    After(Duration),
    /// At this instant of the clock.
    At(Instant),
}

/// Where a timer's time comes from, and how it becomes ticks.
pub(crate) struct TimeSource {
    /// Where time comes from.
    clock: Arc<dyn Clock>,
    /// Whether `clock` is the [`SystemClock`], read as [`Instant::now`]
    /// directly (every schedule reads the clock).
    system: bool,
    /// The clock's reading when the timer was built: time 0, tick 0.
    origin: Instant,
    /// Tick length and conversions.
    resolution: Resolution,
}

impl TimeSource {
    /// A time source on `clock` whose time 0 is now; `system`: `clock`
    /// is the [`SystemClock`] ([`is_system_clock`]).
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

    /// Whether the clock is the [`SystemClock`], which never goes back.
    #[inline]
    pub(crate) fn is_system(&self) -> bool {
        self.system
    }

    /// The tick length and its conversions.
    #[inline]
    pub(crate) fn resolution(&self) -> &Resolution {
        &self.resolution
    }

    /// The clock's reading, as an [`Instant`].
    #[inline]
    pub(crate) fn read(&self) -> Instant {
        if self.system {
            Instant::now()
        } else {
            self.clock.now()
        }
    }

    /// The clock's reading, in nanoseconds since the origin.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.since_origin(self.read())
    }

    /// `at` in nanoseconds since the origin: exact, an instant before the
    /// origin counting as the origin, and one past what a `u64` holds as
    /// [`NEVER_NS`](super::ticks::NEVER_NS).
    #[inline]
    pub(crate) fn since_origin(&self, at: Instant) -> u64 {
        ticks::nanos(at.saturating_duration_since(self.origin))
    }

    /// The instant at which `tick` begins, if an [`Instant`] can hold it:
    /// exactly the instant whose [`since_origin`](Self::since_origin) is
    /// the tick's start.
    pub(crate) fn instant_of(&self, tick: u64) -> Option<Instant> {
        let start = Duration::from_nanos(self.resolution.start(tick));
        self.origin.checked_add(start)
    }

    /// When a task due at `deadline` falls due: the clock is read once, and
    /// a delay is added to that reading.
    #[inline]
    pub(crate) fn due(&self, deadline: Deadline) -> Due {
        let now = self.now();
        let at = match deadline {
            Deadline::After(delay) => ticks::after(now, delay),
            Deadline::At(at) => self.since_origin(at),
        };
        self.resolution.due(at, now)
    }

    /// How long after tick `tick` began the clock reads now (a task's lag).
    pub(crate) fn lag(&self, tick: u64) -> Duration {
        Duration::from_nanos(self.now().saturating_sub(self.resolution.start(tick)))
    }
}

/// Whether a clock of type `C` is the [`SystemClock`], which a
/// [`TimeSource`] reads without a virtual call.
pub(crate) fn is_system_clock<C: Clock>(_: &C) -> bool {
    std::any::TypeId::of::<C>() == std::any::TypeId::of::<SystemClock>()
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::time::NEVER;

    fn source(tick_ms: u64) -> (ManualClock, TimeSource) {
        let clock = ManualClock::new();
        let resolution = Resolution::new(Duration::from_millis(tick_ms));
        (
            clock.clone(),
            TimeSource::new(Arc::new(clock), false, resolution),
        )
    }

    #[test]
    fn a_delay_is_added_to_one_reading_and_rounded_up() {
        let (clock, time) = source(10);
        clock.advance(Duration::from_millis(15));
        assert_eq!(time.now(), 15_000_000);
        let due = |d| time.due(Deadline::After(Duration::from_millis(d)));
        // 20 ms starts tick 2, never earlier; 21 ms waits for tick 3.
        assert_eq!(
            due(5),
            Due {
                tick: 2,
                now: false
            }
        );
        assert_eq!(
            due(6),
            Due {
                tick: 3,
                now: false
            }
        );
        assert_eq!(due(0), Due { tick: 1, now: true });
        let at = time.read() + Duration::from_millis(6);
        assert_eq!(time.due(Deadline::At(at)), due(6), "one body for both");
        assert_eq!(time.due(Deadline::After(Duration::MAX)).tick, NEVER);
        assert_eq!(time.lag(1), Duration::from_millis(5));
    }

    /// An instant converts exactly both ways (at the finest tick, a tick's
    /// start is its nanosecond); one before the origin counts as the
    /// origin.
    #[test]
    fn instants_convert_exactly_both_ways() {
        let clock = ManualClock::new();
        let finest = Resolution::new(Duration::from_nanos(1));
        let time = TimeSource::new(Arc::new(clock.clone()), false, finest);
        let origin = time.read();
        for ns in [0u64, 1, 999_999, 1_000_001, 3_600_000_000_007] {
            let at = origin + Duration::from_nanos(ns);
            assert_eq!(time.since_origin(at), ns);
            assert_eq!(time.instant_of(ns), Some(at));
        }
        if let Some(before) = origin.checked_sub(Duration::from_secs(1)) {
            assert_eq!(time.since_origin(before), 0);
        }
        clock.advance(Duration::from_millis(3));
        assert_eq!(time.now(), 3_000_000);
    }

    /// On the system clock, a delay's deadline lies between the deadlines
    /// that two readings around it give, at the finest tick: nothing is
    /// lost between `Instant` and nanoseconds.
    #[test]
    fn a_delay_on_the_system_clock_lies_between_two_readings() {
        let tick = Resolution::new(Duration::from_nanos(1));
        let time = TimeSource::new(Arc::new(SystemClock), is_system_clock(&SystemClock), tick);
        assert!(time.is_system());
        for delay in [1u64, 999, 1_000_000, 3_600_000_000_000].map(Duration::from_nanos) {
            let before = time.read();
            let due = time.due(Deadline::After(delay));
            let after = time.read();
            // At the finest tick, the deadline's tick is its nanosecond.
            let at = time.instant_of(due.tick).expect("representable");
            assert!(before + delay <= at && at <= after + delay, "{delay:?}");
        }
    }
}
