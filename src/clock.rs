//! Clocks, and the one place where time becomes ticks.
//!
//! The timing wheel counts time in whole *ticks* since an origin. Every
//! conversion between [`Duration`] / [`Instant`] and ticks happens here, with
//! one rule that makes the whole crate *never early*:
//!
//! * a **deadline** is rounded **up** to the next tick boundary, and
//! * a **now** is rounded **down** to the tick it falls in,
//!
//! so "now tick ≥ deadline tick" implies "now ≥ deadline" at every tick size.
//! Both conversions saturate instead of overflowing. A deadline beyond the
//! representable range (about 584 years of nanoseconds after the origin) maps
//! to [`NEVER`], a tick that no clock reading ever reaches: such a timer stays
//! pending until it is cancelled or drained, it never fires early.
//!
//! Clocks are pluggable through the [`Clock`] trait: [`SystemClock`] reads the
//! operating system's monotonic clock, [`ManualClock`] only moves when told to
//! and is what tests and simulations use.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::sync::Mutex;

/// The tick that no clock reading reaches: deadlines beyond the representable
/// range are stored here and never fire.
pub(crate) const NEVER: u64 = u64::MAX;

/// The largest tick a clock reading converts to (one below [`NEVER`]).
const LATEST_NOW: u64 = u64::MAX - 1;

/// A source of monotonic time for [`Timer`](crate::Timer).
///
/// Implementations must be monotonic: `now` never returns an earlier instant
/// than a previous call did. (A clock that goes backwards anyway is tolerated:
/// the timer treats it as standing still, so nothing fires early.)
///
/// A clock whose time does not pass by itself, like [`ManualClock`], returns
/// `false` from [`is_real_time`](Clock::is_real_time) and calls every
/// [`ClockWaker`] given to [`register_waker`](Clock::register_waker) after each
/// jump, so that a timer's driver thread, which then sleeps without a timeout,
/// wakes up and looks at the new time.
///
/// # Examples
///
/// ```
/// use purgatorio::{Clock, SystemClock};
///
/// let clock = SystemClock;
/// let a = clock.now();
/// assert!(clock.now() >= a);
/// assert!(clock.is_real_time());
/// ```
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time on this clock.
    fn now(&self) -> Instant;

    /// Whether this clock's time passes with real time, so that a driver may
    /// sleep with a timeout computed from it. Defaults to `true`.
    fn is_real_time(&self) -> bool {
        true
    }

    /// Asks the clock to call `waker.wake()` after each jump of its time.
    /// Real-time clocks ignore it (the default).
    fn register_waker(&self, waker: ClockWaker) {
        drop(waker);
    }
}

/// Something a clock can wake after its time jumped (the driver of a timer).
pub(crate) trait Wake: Send + Sync {
    /// Called after the clock's time changed.
    fn wake(&self);
}

/// A handle a [`Clock`] calls after its time jumped; given to the clock by the
/// timers that use it.
///
/// It holds its target weakly: once the timer is gone, [`wake`](Self::wake)
/// does nothing and [`is_alive`](Self::is_alive) turns `false`, so a clock can
/// prune it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::ManualClock;
///
/// // ManualClock keeps the wakers of the timers built on it and calls them
/// // on every `advance`; a custom clock would do the same.
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(clock.elapsed(), Duration::from_millis(5));
/// ```
#[derive(Clone)]
pub struct ClockWaker {
    /// The driver to wake, held weakly so a clock never keeps a timer alive.
    target: Weak<dyn Wake>,
}

impl ClockWaker {
    /// Wraps a wake target.
    pub(crate) fn new(target: Weak<dyn Wake>) -> Self {
        ClockWaker { target }
    }

    /// Wakes the target, if it still exists.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio::ManualClock;
    /// // `advance` calls `wake` on every registered waker.
    /// ManualClock::new().advance(std::time::Duration::from_secs(1));
    /// ```
    pub fn wake(&self) {
        if let Some(target) = self.target.upgrade() {
            target.wake();
        }
    }

    /// Whether the target still exists.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio::{ManualClock, Timer};
    /// let clock = ManualClock::new();
    /// let timer: Timer = Timer::builder().clock(clock.clone()).build().unwrap();
    /// drop(timer); // its waker is dead now and the clock prunes it
    /// clock.advance(std::time::Duration::from_secs(1));
    /// ```
    pub fn is_alive(&self) -> bool {
        self.target.strong_count() > 0
    }
}

impl fmt::Debug for ClockWaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClockWaker")
            .field("alive", &self.is_alive())
            .finish()
    }
}

/// The operating system's monotonic clock ([`Instant::now`]).
///
/// # Examples
///
/// ```
/// use purgatorio::{Clock, SystemClock};
/// let t = SystemClock.now();
/// assert!(SystemClock.now() >= t);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to: for tests and simulations.
///
/// Clones share one time. Each [`advance`](Self::advance) wakes the drivers of
/// the timers built on it, so a test can drive a threaded [`Timer`](crate::Timer)
/// deterministically: no assertion needs to depend on how long a sleep took.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let start = clock.now();
/// clock.advance(Duration::from_millis(250));
/// assert_eq!(clock.now() - start, Duration::from_millis(250));
/// ```
#[derive(Clone, Debug)]
pub struct ManualClock {
    /// Shared state of all clones.
    inner: Arc<ManualInner>,
}

/// The state behind a [`ManualClock`].
#[derive(Debug)]
struct ManualInner {
    /// The instant at which the clock was created; its time is `origin + elapsed`.
    origin: Instant,
    /// Time elapsed on this clock; only ever grows.
    elapsed: Mutex<Duration>,
    /// Drivers to wake after each jump.
    wakers: Mutex<Vec<ClockWaker>>,
}

impl ManualClock {
    /// A manual clock standing at the current real instant.
    ///
    /// # Examples
    ///
    /// ```
    /// let clock = purgatorio::ManualClock::new();
    /// assert_eq!(clock.elapsed(), std::time::Duration::ZERO);
    /// ```
    pub fn new() -> Self {
        ManualClock {
            inner: Arc::new(ManualInner {
                origin: Instant::now(),
                elapsed: Mutex::new(Duration::ZERO),
                wakers: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Moves the clock forward by `by` (saturating) and wakes the drivers of
    /// the timers that use it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = purgatorio::ManualClock::new();
    /// clock.advance(Duration::from_secs(2));
    /// clock.advance(Duration::from_secs(3));
    /// assert_eq!(clock.elapsed(), Duration::from_secs(5));
    /// ```
    pub fn advance(&self, by: Duration) {
        {
            let mut elapsed = self.inner.elapsed.lock();
            *elapsed = elapsed.saturating_add(by);
        }
        self.wake_all();
    }

    /// Moves the clock forward to `elapsed` after its creation; an earlier
    /// value leaves it where it is (the clock is monotonic).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = purgatorio::ManualClock::new();
    /// clock.advance_to(Duration::from_secs(7));
    /// clock.advance_to(Duration::from_secs(1)); // ignored: no going back
    /// assert_eq!(clock.elapsed(), Duration::from_secs(7));
    /// ```
    pub fn advance_to(&self, elapsed: Duration) {
        {
            let mut current = self.inner.elapsed.lock();
            *current = (*current).max(elapsed);
        }
        self.wake_all();
    }

    /// Time elapsed on this clock since it was created.
    ///
    /// # Examples
    ///
    /// ```
    /// let clock = purgatorio::ManualClock::new();
    /// assert!(clock.elapsed().is_zero());
    /// ```
    pub fn elapsed(&self) -> Duration {
        *self.inner.elapsed.lock()
    }

    /// Calls every live waker, outside the lock, and prunes the dead ones.
    fn wake_all(&self) {
        let wakers: Vec<ClockWaker> = {
            let mut wakers = self.inner.wakers.lock();
            wakers.retain(ClockWaker::is_alive);
            wakers.clone()
        };
        for waker in &wakers {
            waker.wake();
        }
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        // `Instant + Duration` panics on overflow; saturate at the last
        // instant reachable from the origin instead.
        let elapsed = self.elapsed();
        self.inner
            .origin
            .checked_add(elapsed)
            .unwrap_or_else(|| far_instant(self.inner.origin, elapsed))
    }

    fn is_real_time(&self) -> bool {
        false
    }

    fn register_waker(&self, waker: ClockWaker) {
        let mut wakers = self.inner.wakers.lock();
        wakers.retain(ClockWaker::is_alive);
        wakers.push(waker);
    }
}

/// The latest instant at most `by` after `from`, for additions that overflow.
fn far_instant(from: Instant, by: Duration) -> Instant {
    let mut step = by;
    let mut at = from;
    while !step.is_zero() {
        match at.checked_add(step) {
            Some(next) => at = next,
            None => step /= 2,
        }
    }
    at
}

/// The tick length and the conversions between time and ticks.
///
/// Ticks count whole tick lengths since an origin (time zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resolution {
    /// Length of one tick in nanoseconds (≥ 1).
    tick_ns: u64,
}

impl Resolution {
    /// A resolution of `tick`, which the caller has validated (1 ns ≤ tick,
    /// and whole nanoseconds fit a `u64`).
    pub(crate) fn new(tick: Duration) -> Self {
        let tick_ns = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX).max(1);
        Resolution { tick_ns }
    }

    /// The tick length.
    pub(crate) fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick_ns)
    }

    /// The tick at which a timer due at `deadline` (since the origin) may
    /// fire: rounded up; [`NEVER`] when out of range.
    #[inline]
    pub(crate) fn deadline_tick(&self, deadline: Duration) -> u64 {
        match u64::try_from(deadline.as_nanos()) {
            Ok(ns) => ns.div_ceil(self.tick_ns),
            Err(_) => NEVER,
        }
    }

    /// The tick at which a timer due at `deadline` may fire when the clock
    /// reads `now` (both since the origin): the deadline rounded up, but for
    /// a deadline at or before `now` never past `now`'s tick, so it is due at
    /// once. (Rounding up alone made a deadline inside the current tick, such
    /// as "now", wait for the next tick.) A long-past deadline keeps its own
    /// tick, so expirations stay in deadline order.
    #[inline]
    pub(crate) fn due_tick(&self, deadline: Duration, now: Duration) -> u64 {
        let tick = self.deadline_tick(deadline);
        if deadline <= now {
            tick.min(self.now_tick(now))
        } else {
            tick
        }
    }

    /// The tick that `now` (since the origin) falls in: rounded down, and
    /// never [`NEVER`].
    #[inline]
    pub(crate) fn now_tick(&self, now: Duration) -> u64 {
        match u64::try_from(now.as_nanos()) {
            Ok(ns) => (ns / self.tick_ns).min(LATEST_NOW),
            Err(_) => LATEST_NOW,
        }
    }

    /// The time (since the origin) at which `tick` begins, saturating at
    /// [`Duration::MAX`].
    #[inline]
    pub(crate) fn tick_start(&self, tick: u64) -> Duration {
        let ns = u128::from(tick) * u128::from(self.tick_ns);
        let secs = ns / 1_000_000_000;
        match u64::try_from(secs) {
            Ok(secs) => Duration::new(secs, (ns % 1_000_000_000) as u32),
            Err(_) => Duration::MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn deadline_rounds_up_and_now_rounds_down() {
        let r = Resolution::new(MS);
        assert_eq!(r.deadline_tick(Duration::ZERO), 0);
        assert_eq!(r.deadline_tick(Duration::from_nanos(1)), 1);
        assert_eq!(r.deadline_tick(MS), 1);
        assert_eq!(r.deadline_tick(MS + Duration::from_nanos(1)), 2);
        assert_eq!(r.now_tick(Duration::from_nanos(999_999)), 0);
        assert_eq!(r.now_tick(MS), 1);
        assert_eq!(r.now_tick(2 * MS - Duration::from_nanos(1)), 1);
    }

    #[test]
    fn never_early_at_every_boundary() {
        for tick_ns in [1u64, 7, 1_000, 999_999, 1_000_000, 100_000_000] {
            let r = Resolution::new(Duration::from_nanos(tick_ns));
            for d in [0u64, 1, tick_ns - 1, tick_ns, tick_ns + 1, 3 * tick_ns - 1] {
                let deadline = Duration::from_nanos(d);
                let dt = r.deadline_tick(deadline);
                // The first instant whose tick reaches dt is dt's start.
                let fire = r.tick_start(dt);
                assert!(fire >= deadline, "tick {tick_ns}: {fire:?} < {deadline:?}");
                assert!(fire - deadline < r.tick(), "more than a tick late");
                assert!(r.now_tick(fire) >= dt);
                if !fire.is_zero() {
                    assert!(r.now_tick(fire - Duration::from_nanos(1)) < dt);
                }
            }
        }
    }

    #[test]
    fn a_due_deadline_is_due_in_the_current_tick() {
        let r = Resolution::new(10 * MS);
        let now = 15 * MS;
        assert_eq!(r.due_tick(14 * MS, now), 1, "past, inside the current tick");
        assert_eq!(r.due_tick(now, now), 1, "exactly now");
        assert_eq!(
            r.due_tick(Duration::ZERO, now),
            0,
            "long past keeps its tick"
        );
        assert_eq!(r.due_tick(10 * MS, now), 1, "past, at a tick boundary");
        assert_eq!(r.due_tick(9 * MS, now), 1);
        assert_eq!(r.due_tick(now + Duration::from_nanos(1), now), 2);
        assert_eq!(r.due_tick(20 * MS, now), 2);
        assert_eq!(r.due_tick(20 * MS + Duration::from_nanos(1), now), 3);
        // Never early: the tick's start is at or after the deadline, or the
        // deadline had already passed when scheduled.
        for d_ns in 0..40_000_000u64 / 1_000_000 {
            let deadline = Duration::from_millis(d_ns);
            let tick = r.due_tick(deadline, now);
            assert!(r.tick_start(tick) >= deadline || deadline <= now);
            assert!(tick <= r.now_tick(now) || r.tick_start(tick) >= deadline);
        }
    }

    #[test]
    fn saturates_instead_of_overflowing() {
        let r = Resolution::new(Duration::from_nanos(1));
        assert_eq!(r.deadline_tick(Duration::MAX), NEVER);
        assert_eq!(r.now_tick(Duration::MAX), LATEST_NOW);
        assert_eq!(r.deadline_tick(Duration::from_nanos(u64::MAX)), NEVER);
        assert!(r.now_tick(Duration::from_nanos(u64::MAX)) < NEVER);
        let big = Resolution::new(Duration::from_secs(3600));
        assert_eq!(big.tick_start(NEVER), Duration::MAX);
        assert_eq!(big.tick_start(2), Duration::from_secs(7200));
    }

    #[test]
    fn manual_clock_is_monotonic_and_shared() {
        let a = ManualClock::new();
        let b = a.clone();
        let t0 = a.now();
        b.advance(MS);
        assert_eq!(a.now() - t0, MS);
        a.advance_to(Duration::ZERO);
        assert_eq!(b.elapsed(), MS);
        a.advance(Duration::MAX);
        assert!(a.now() >= t0);
        assert!(!a.is_real_time());
    }
}
