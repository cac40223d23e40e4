//! Clocks: where a [`Timer`](crate::Timer) gets the time.
//!
//! Clocks are pluggable through the [`Clock`] trait: [`SystemClock`] reads the
//! operating system's monotonic clock, [`ManualClock`] only moves when told to
//! and is what tests and simulations use. Turning their instants into ticks
//! is `time`'s job (`src/time/`), not theirs.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::sync::Mutex;

/// A source of monotonic time for [`Timer`](crate::Timer).
///
/// Implementations must be monotonic: `now` never returns an earlier instant
/// than a previous call did. (A clock that goes backwards anyway is tolerated:
/// the timer treats it as standing still, so nothing fires early; the one
/// exception is a reading before the timer was built, which counts as that
/// moment, so a deadline between the two counts as reached.)
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
    /// let timer = Timer::builder().clock(clock.clone()).build().unwrap();
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

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

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
