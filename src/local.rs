//! The single-threaded timer: the caller supplies time.
//!
//! [`LocalTimer`] is the timing wheel with a [`Duration`] face. It reads no
//! clock, spawns no thread and takes no lock: time is whatever the caller
//! passes to [`poll`](LocalTimer::poll) / [`advance`](LocalTimer::advance),
//! measured from an origin of the caller's choosing (time zero): a
//! deterministic timer for event loops, simulations and tests. It shares the
//! wheel (`wheel/`) with the threaded [`Timer`](crate::Timer), whose shards
//! each hold a wheel of their own; `Timer` does not use `LocalTimer`.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use crate::error::BuildError;
use crate::time::{nanos, Resolution, WheelConfig};
use crate::wheel::{Fired, TimerKey, Wheel};

/// A hierarchical timing wheel driven by caller-supplied time.
///
/// * **Never early**: a timer comes out of [`poll`](Self::poll) only when
///   `now >= deadline`, and at the first poll at or after its deadline rounded
///   up to the tick, so at most one tick late relative to the polls made.
/// * **Cheap**: schedule, cancel and reschedule are O(1) and allocate nothing
///   once the timer has grown to its working set; a poll visits only buckets
///   that are due, however much time passed. A deadline due at once, or 2^31
///   ticks or more away (24.8 days at the default 1 ms tick), waits in a side
///   heap instead: O(log n) to schedule, cancel still O(1).
/// * **Unbounded range**: any deadline up to [`Duration::MAX`] is accepted;
///   coarser levels are created the first time a deadline needs them.
///   Deadlines more than about 584 years after time zero are beyond the
///   nanosecond range and never fire (they stay pending until cancelled or
///   drained).
///
/// Expirations come out in deadline order; timers due in the same tick come
/// out in an unspecified order.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::LocalTimer;
///
/// let mut timer = LocalTimer::new(); // 1 ms tick, 64 slots per level
/// timer.schedule_at(Duration::from_millis(30), "retry");
/// let session = timer.schedule_at(Duration::from_secs(10), "session idle");
///
/// assert_eq!(timer.next_expiration(), Some(Duration::from_millis(30)));
/// let fired: Vec<_> = timer.advance(Duration::from_millis(30)).map(|e| e.into_inner()).collect();
/// assert_eq!(fired, ["retry"]);
///
/// // A heartbeat pushes the session's timeout out.
/// assert!(timer.reschedule(session, Duration::from_secs(10)));
/// assert_eq!(timer.advance(Duration::from_secs(10)).count(), 0);
/// assert_eq!(timer.len(), 1);
/// ```
pub struct LocalTimer<T> {
    /// The wheel, in ticks.
    wheel: Wheel<T>,
    /// Tick length and conversions.
    resolution: Resolution,
    /// The latest time passed to a poll (never decreases).
    now: Duration,
}

/// Builds a [`LocalTimer`] with a chosen tick and wheel size.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::LocalTimer;
///
/// let timer: LocalTimer<u64> = LocalTimer::builder()
///     .tick(Duration::from_micros(100))
///     .wheel_size(256)
///     .build()
///     .unwrap();
/// assert_eq!(timer.tick(), Duration::from_micros(100));
/// ```
pub struct LocalTimerBuilder<T> {
    /// Tick and wheel size.
    config: WheelConfig,
    /// The payload type of the timer to build.
    payload: PhantomData<fn() -> T>,
}

impl<T> LocalTimerBuilder<T> {
    crate::time::wheel_setters!("purgatorio::LocalTimer::<()>::builder()");

    /// Builds the timer, with its time at zero.
    ///
    /// # Errors
    ///
    /// [`BuildError::Tick`] if the tick is outside
    /// [`MIN_TICK`](crate::MIN_TICK)`..=`[`MAX_TICK`](crate::MAX_TICK);
    /// [`BuildError::WheelSize`] if the wheel size is outside
    /// [`MIN_WHEEL_SIZE`](crate::MIN_WHEEL_SIZE)`..=`[`MAX_WHEEL_SIZE`](crate::MAX_WHEEL_SIZE).
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio::{BuildError, LocalTimer};
    /// let err = LocalTimer::<()>::builder().wheel_size(1).build().unwrap_err();
    /// assert!(matches!(err, BuildError::WheelSize(1)));
    /// ```
    pub fn build(self) -> Result<LocalTimer<T>, BuildError> {
        let (resolution, wheel_size) = self.config.check()?;
        Ok(LocalTimer {
            wheel: Wheel::new(wheel_size, 0),
            resolution,
            now: Duration::ZERO,
        })
    }
}

impl<T> Default for LocalTimerBuilder<T> {
    fn default() -> Self {
        LocalTimerBuilder {
            config: WheelConfig::DEFAULT,
            payload: PhantomData,
        }
    }
}

impl<T> Clone for LocalTimerBuilder<T> {
    fn clone(&self) -> Self {
        LocalTimerBuilder {
            config: self.config,
            payload: PhantomData,
        }
    }
}

impl<T> fmt::Debug for LocalTimerBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalTimerBuilder")
            .field("tick", &self.config.tick)
            .field("wheel_size", &self.config.wheel_size)
            .finish()
    }
}

/// A timer that came due, as handed out by [`LocalTimer::poll`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::LocalTimer;
///
/// let mut timer = LocalTimer::new();
/// let key = timer.schedule_at(Duration::from_micros(1500), 'x');
/// let e = timer.poll(Duration::from_millis(2)).unwrap();
/// assert_eq!(e.key(), key);
/// assert_eq!(e.deadline(), Duration::from_millis(2)); // rounded up to the tick
/// assert_eq!(*e.get_ref(), 'x');
/// assert_eq!(e.into_inner(), 'x');
/// ```
#[derive(Debug)]
pub struct Expired<T> {
    /// The timer's key, stale from now on.
    key: TimerKey,
    /// The start of the tick it was due in.
    deadline: Duration,
    /// The payload.
    value: T,
}

impl<T> Expired<T> {
    /// The key the timer had.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut t = purgatorio::LocalTimer::new();
    /// let k = t.schedule(std::time::Duration::ZERO, ());
    /// assert_eq!(t.poll(std::time::Duration::ZERO).unwrap().key(), k);
    /// ```
    pub fn key(&self) -> TimerKey {
        self.key
    }

    /// The start of the tick the timer was due in: its deadline rounded up
    /// to the tick (the earliest time it could fire), or, for a deadline
    /// that had already passed inside the tick it was scheduled in, that
    /// tick's start.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut t = purgatorio::LocalTimer::new();
    /// t.schedule_at(Duration::from_millis(3), ());
    /// let e = t.poll(Duration::from_secs(1)).unwrap();
    /// assert_eq!(e.deadline(), Duration::from_millis(3));
    /// ```
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// The payload, by reference.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut t = purgatorio::LocalTimer::new();
    /// t.schedule(std::time::Duration::ZERO, 9);
    /// assert_eq!(*t.poll(std::time::Duration::ZERO).unwrap().get_ref(), 9);
    /// ```
    pub fn get_ref(&self) -> &T {
        &self.value
    }

    /// The payload.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut t = purgatorio::LocalTimer::new();
    /// t.schedule(std::time::Duration::ZERO, String::from("x"));
    /// assert_eq!(t.poll(std::time::Duration::ZERO).unwrap().into_inner(), "x");
    /// ```
    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T> LocalTimer<T> {
    /// A timer with a 1 ms tick and 64 slots per level, at time zero.
    ///
    /// # Examples
    ///
    /// ```
    /// let timer = purgatorio::LocalTimer::<u64>::new();
    /// assert!(timer.is_empty());
    /// ```
    pub fn new() -> Self {
        LocalTimerBuilder::default()
            .build()
            .expect("the defaults are valid")
    }

    /// A builder to choose the tick and wheel size.
    ///
    /// # Examples
    ///
    /// ```
    /// let t = purgatorio::LocalTimer::<()>::builder().wheel_size(8).build().unwrap();
    /// assert_eq!(t.wheel_size(), 8);
    /// ```
    pub fn builder() -> LocalTimerBuilder<T> {
        LocalTimerBuilder::default()
    }

    /// The tick length.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(purgatorio::LocalTimer::<()>::new().tick(), purgatorio::DEFAULT_TICK);
    /// ```
    pub fn tick(&self) -> Duration {
        self.resolution.tick()
    }

    /// Slots per level.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(purgatorio::LocalTimer::<()>::new().wheel_size(), 64);
    /// ```
    pub fn wheel_size(&self) -> usize {
        self.wheel.wheel_size() as usize
    }

    /// The timer's time: the latest `now` passed to a poll (zero at first).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut t = purgatorio::LocalTimer::<()>::new();
    /// t.advance(Duration::from_millis(7)).for_each(drop);
    /// assert_eq!(t.now(), Duration::from_millis(7));
    /// ```
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Number of pending timers, including due ones not yet handed out.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut t = purgatorio::LocalTimer::new();
    /// t.schedule(std::time::Duration::from_secs(1), ());
    /// assert_eq!(t.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    /// Whether no timer is pending.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(purgatorio::LocalTimer::<()>::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.wheel.len() == 0
    }

    /// Schedules `value` to come due `delay` after the timer's time
    /// ([`now`](Self::now)), saturating.
    ///
    /// # Panics
    ///
    /// If more than 4,294,967,294 timers would be pending at once, or more
    /// than 2^31 of them in the side heap (due at once, or 2^31 ticks or more
    /// away).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut t = purgatorio::LocalTimer::new();
    /// t.advance(Duration::from_secs(1)).for_each(drop);
    /// t.schedule(Duration::from_millis(5), "x");
    /// assert_eq!(t.next_expiration(), Some(Duration::from_millis(1005)));
    /// ```
    #[inline]
    pub fn schedule(&mut self, delay: Duration, value: T) -> TimerKey {
        self.schedule_at(self.now.saturating_add(delay), value)
    }

    /// Schedules `value` to come due at `deadline` (time since zero). A
    /// deadline at or before the timer's time is due at once: the next poll,
    /// even at the same time, hands it out.
    ///
    /// # Panics
    ///
    /// If more than 4,294,967,294 timers would be pending at once, or more
    /// than 2^31 of them in the side heap (due at once, or 2^31 ticks or more
    /// away).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut t = purgatorio::LocalTimer::new();
    /// t.schedule_at(Duration::MAX, "never, in practice");
    /// t.schedule_at(Duration::ZERO, "now");
    /// assert_eq!(t.poll(Duration::ZERO).unwrap().into_inner(), "now");
    /// ```
    #[inline]
    pub fn schedule_at(&mut self, deadline: Duration, value: T) -> TimerKey {
        let tick = self.resolution.due(nanos(deadline), nanos(self.now)).tick;
        self.wheel.insert(tick, value)
    }

    /// Cancels a pending timer and returns its payload; `None` if the key is
    /// stale (the timer fired or was cancelled). The slot is reusable at once.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut t = purgatorio::LocalTimer::new();
    /// let k = t.schedule(std::time::Duration::from_secs(1), 1);
    /// assert_eq!(t.cancel(k), Some(1));
    /// assert!(t.is_empty());
    /// ```
    #[inline]
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        self.wheel.remove(key)
    }

    /// Moves a pending timer to `delay` after the timer's time; `false` if the
    /// key is stale. The key stays valid.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut t = purgatorio::LocalTimer::new();
    /// let k = t.schedule(Duration::from_millis(10), ());
    /// assert!(t.reschedule(k, Duration::from_millis(50)));
    /// assert_eq!(t.next_expiration(), Some(Duration::from_millis(50)));
    /// ```
    #[inline]
    pub fn reschedule(&mut self, key: TimerKey, delay: Duration) -> bool {
        self.reschedule_at(key, self.now.saturating_add(delay))
    }

    /// Moves a pending timer to `deadline`; `false` if the key is stale.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut t = purgatorio::LocalTimer::new();
    /// let k = t.schedule(Duration::from_secs(10), ());
    /// assert!(t.reschedule_at(k, Duration::from_millis(1)));
    /// assert_eq!(t.poll(Duration::from_millis(1)).unwrap().key(), k);
    /// assert!(!t.reschedule_at(k, Duration::from_secs(1)));
    /// ```
    #[inline]
    pub fn reschedule_at(&mut self, key: TimerKey, deadline: Duration) -> bool {
        let tick = self.resolution.due(nanos(deadline), nanos(self.now)).tick;
        self.wheel.reschedule(key, tick)
    }

    /// Whether `key` is still pending.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut t = purgatorio::LocalTimer::new();
    /// let k = t.schedule(std::time::Duration::ZERO, ());
    /// assert!(t.contains(k));
    /// t.poll(std::time::Duration::ZERO);
    /// assert!(!t.contains(k));
    /// ```
    pub fn contains(&self, key: TimerKey) -> bool {
        self.wheel.contains(key)
    }

    /// When a driver should next poll: the start of the earliest tick in
    /// which a timer may be due, or `None` if no timer can ever come due.
    ///
    /// Never later than the earliest pending deadline (rounded up to the
    /// tick). After cancellations it can be earlier: a poll then hands out
    /// nothing and the answer moves on.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut t = purgatorio::LocalTimer::new();
    /// assert_eq!(t.next_expiration(), None);
    /// t.schedule_at(Duration::from_micros(2500), ());
    /// assert_eq!(t.next_expiration(), Some(Duration::from_millis(3)));
    /// ```
    pub fn next_expiration(&self) -> Option<Duration> {
        self.wheel
            .next_expiration()
            .map(|tick| self.resolution.start_after_origin(tick))
    }

    /// Advances the timer's time to `now` and hands out the next timer that
    /// is due, earliest deadline first; `None` when nothing more is due.
    ///
    /// A `now` earlier than the timer's time is treated as its time: the
    /// clock never runs back and nothing fires early.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut t = purgatorio::LocalTimer::new();
    /// t.schedule_at(Duration::from_millis(2), 'b');
    /// t.schedule_at(Duration::from_millis(1), 'a');
    /// let now = Duration::from_millis(5);
    /// assert_eq!(t.poll(now).map(|e| e.into_inner()), Some('a'));
    /// assert_eq!(t.poll(now).map(|e| e.into_inner()), Some('b'));
    /// assert!(t.poll(now).is_none());
    /// ```
    #[inline]
    pub fn poll(&mut self, now: Duration) -> Option<Expired<T>> {
        self.now = self.now.max(now);
        self.poll_tick(self.resolution.tick_of(nanos(self.now)))
    }

    /// [`poll`](Self::poll) at tick `now`, the timer's time being set.
    #[inline]
    fn poll_tick(&mut self, now: u64) -> Option<Expired<T>> {
        let fired = self.wheel.poll(now)?;
        Some(self.expired(fired))
    }

    /// Advances the timer's time to `now` and returns an iterator over the
    /// timers that are due, earliest deadline first. Timers left in the
    /// iterator when it is dropped stay pending and come out at the next poll.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut t = purgatorio::LocalTimer::new();
    /// for ms in [3, 1, 2, 100] {
    ///     t.schedule_at(Duration::from_millis(ms), ms);
    /// }
    /// let due: Vec<u64> = t.advance(Duration::from_millis(10)).map(|e| e.into_inner()).collect();
    /// assert_eq!(due, [1, 2, 3]);
    /// ```
    pub fn advance(&mut self, now: Duration) -> Advance<'_, T> {
        self.now = self.now.max(now);
        let tick = self.resolution.tick_of(nanos(self.now));
        Advance { timer: self, tick }
    }

    /// Removes every pending timer and returns their payloads in no
    /// particular order. Every key turns stale.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut t = purgatorio::LocalTimer::new();
    /// t.schedule(Duration::from_secs(1), 1);
    /// t.schedule(Duration::from_secs(2), 2);
    /// let mut left = t.drain();
    /// left.sort();
    /// assert_eq!(left, [1, 2]);
    /// assert!(t.is_empty());
    /// ```
    pub fn drain(&mut self) -> Vec<T> {
        self.wheel.drain()
    }

    /// Wraps a fired timer with its deadline as a duration.
    fn expired(&self, fired: Fired<T>) -> Expired<T> {
        Expired {
            key: fired.key,
            deadline: self.resolution.start_after_origin(fired.deadline),
            value: fired.value,
        }
    }
}

impl<T> Default for LocalTimer<T> {
    fn default() -> Self {
        LocalTimer::new()
    }
}

impl<T> fmt::Debug for LocalTimer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalTimer")
            .field("tick", &self.tick())
            .field("wheel_size", &self.wheel_size())
            .field("now", &self.now)
            .field("len", &self.len())
            .finish()
    }
}

/// The timers due at one time, from [`LocalTimer::advance`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let mut t = purgatorio::LocalTimer::new();
/// t.schedule(Duration::from_millis(1), ());
/// let mut due = t.advance(Duration::from_millis(1));
/// assert!(due.next().is_some());
/// assert!(due.next().is_none());
/// ```
#[derive(Debug)]
#[must_use = "an Advance does nothing until iterated: the timers it hands out are due"]
pub struct Advance<'a, T> {
    /// The timer being advanced; its time is already set.
    timer: &'a mut LocalTimer<T>,
    /// Its time in ticks (converted once, not per timer).
    tick: u64,
}

impl<T> Iterator for Advance<'_, T> {
    type Item = Expired<T>;

    fn next(&mut self) -> Option<Expired<T>> {
        self.timer.poll_tick(self.tick)
    }
}
