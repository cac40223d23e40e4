//! Time and ticks: the one place where time becomes ticks, the wheel's
//! settings, and every configuration limit. Both timers sit on top of it.
//!
//! The timing wheel counts time in whole *ticks* since an origin. Every
//! conversion between [`Duration`] and ticks happens here, with one rule that
//! makes the whole crate *never early*:
//!
//! * a **deadline** is rounded **up** to the next tick boundary, and
//! * a **now** is rounded **down** to the tick it falls in,
//!
//! so "now tick ≥ deadline tick" implies "now ≥ deadline" at every tick size.
//! (A deadline that has already passed when it is scheduled is due in the
//! current tick, at once.) Both conversions saturate instead of overflowing.
//! A deadline beyond the representable range (about 584 years of nanoseconds
//! after the origin) maps to [`NEVER`], a tick that no clock reading ever
//! reaches: such a timer stays pending until it is cancelled or drained, it
//! never fires early.

use std::time::Duration;

/// The tick that no clock reading reaches: deadlines beyond the representable
/// range are stored here and never fire.
pub(crate) const NEVER: u64 = u64::MAX;

/// The largest tick a clock reading converts to (one below [`NEVER`]).
const LATEST_NOW: u64 = u64::MAX - 1;

/// The default tick: one millisecond.
pub const DEFAULT_TICK: Duration = Duration::from_millis(1);

/// The default wheel size: 64 slots per level.
pub const DEFAULT_WHEEL_SIZE: usize = 64;

/// The wheel's two settings, as builder methods: one definition for
/// [`LocalTimerBuilder`](crate::LocalTimerBuilder) and
/// [`TimerBuilder`](crate::TimerBuilder), both holding a `config:
/// WheelConfig`. `$new` is the expression that makes the builder, for the
/// examples.
macro_rules! wheel_setters {
    ($new:literal) => {
        /// Sets the tick: the resolution of deadlines and the width of the
        /// finest buckets. Defaults to [`DEFAULT_TICK`](crate::DEFAULT_TICK)
        /// (1 ms), at most [`MAX_TICK`](crate::MAX_TICK); a zero tick is a
        /// [`BuildError`](crate::BuildError) at `build`.
        ///
        /// # Examples
        ///
        /// ```
        #[doc = concat!("let t = ", $new, ".tick(std::time::Duration::from_micros(100)).build().unwrap();")]
        /// assert_eq!(t.tick().as_micros(), 100);
        /// ```
        pub fn tick(mut self, tick: std::time::Duration) -> Self {
            self.config.tick = tick;
            self
        }

        /// Sets the number of slots per level. Defaults to
        /// [`DEFAULT_WHEEL_SIZE`](crate::DEFAULT_WHEEL_SIZE); any size from 2
        /// to [`MAX_WHEEL_SIZE`](crate::MAX_WHEEL_SIZE) works, and powers of
        /// two are a little faster.
        ///
        /// # Examples
        ///
        /// ```
        #[doc = concat!("let t = ", $new, ".wheel_size(20).build().unwrap();")]
        /// # drop(t);
        /// ```
        pub fn wheel_size(mut self, wheel_size: usize) -> Self {
            self.config.wheel_size = wheel_size;
            self
        }
    };
}
pub(crate) use wheel_setters;

/// The wheel settings both builders share, validated in one place.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WheelConfig {
    /// Length of one tick.
    pub(crate) tick: Duration,
    /// Slots per level.
    pub(crate) wheel_size: usize,
}

impl WheelConfig {
    /// The defaults: [`DEFAULT_TICK`], [`DEFAULT_WHEEL_SIZE`].
    pub(crate) const DEFAULT: WheelConfig = WheelConfig {
        tick: DEFAULT_TICK,
        wheel_size: DEFAULT_WHEEL_SIZE,
    };

    /// Checks the settings; returns the tick resolution and the wheel size.
    pub(crate) fn check(self) -> Result<(Resolution, u64), Invalid> {
        let tick = check_tick(self.tick)?;
        let wheel_size = check_wheel_size(self.wheel_size)?;
        Ok((Resolution::new(tick), wheel_size))
    }
}

/// A wheel setting out of its range; `error.rs` turns it into a
/// [`BuildError`](crate::BuildError). (Errors depend on the limits, which
/// their messages quote, not the other way round.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Invalid {
    /// A tick outside [`MIN_TICK`]`..=`[`MAX_TICK`].
    Tick(Duration),
    /// A wheel size outside [`MIN_WHEEL_SIZE`]`..=`[`MAX_WHEEL_SIZE`].
    WheelSize(usize),
}

/// The smallest tick a timer accepts.
pub const MIN_TICK: Duration = Duration::from_nanos(1);

/// The largest tick a timer accepts (one hour).
pub const MAX_TICK: Duration = Duration::from_secs(3600);

/// The smallest wheel size (slots per level).
pub const MIN_WHEEL_SIZE: usize = 2;

/// The largest wheel size (slots per level); bucket ids must fit a `u32`
/// across every level, and each level allocates this many buckets.
pub const MAX_WHEEL_SIZE: usize = 1 << 16;

/// The largest number of shards a [`Timer`](crate::Timer) accepts.
pub const MAX_SHARDS: usize = 1024;

/// The largest number of worker threads a [`Timer`](crate::Timer) accepts.
pub const MAX_WORKERS: usize = 1024;

/// The largest number of watch-list shards a
/// [`Purgatory`](crate::Purgatory) accepts.
pub const MAX_WATCH_SHARDS: usize = 1 << 14;

/// Checks a tick length.
fn check_tick(tick: Duration) -> Result<Duration, Invalid> {
    if (MIN_TICK..=MAX_TICK).contains(&tick) {
        Ok(tick)
    } else {
        Err(Invalid::Tick(tick))
    }
}

/// Checks a wheel size.
fn check_wheel_size(size: usize) -> Result<u64, Invalid> {
    if (MIN_WHEEL_SIZE..=MAX_WHEEL_SIZE).contains(&size) {
        Ok(size as u64)
    } else {
        Err(Invalid::WheelSize(size))
    }
}

/// The tick length and the conversions between time and ticks.
///
/// Ticks count whole tick lengths since an origin (time zero). The threaded
/// timer converts a clock reading on every schedule, so the hot conversions
/// work on whole nanoseconds in 64 bits and divide by the tick with a
/// multiplication by its precomputed reciprocal, corrected to be exact
/// ([`Resolution::split`]): no 128-bit arithmetic and no hardware division.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resolution {
    /// Length of one tick in nanoseconds (≥ 1).
    tick_ns: u64,
    /// `⌊(2^64 − 1) / tick_ns⌋`: the quotient estimate's multiplier.
    reciprocal: u64,
}

/// `d` in whole nanoseconds; `None` past `u64::MAX` (about 584 years).
#[inline]
pub(crate) fn nanos(d: Duration) -> Option<u64> {
    d.as_secs()
        .checked_mul(1_000_000_000)?
        .checked_add(u64::from(d.subsec_nanos()))
}

impl Resolution {
    /// A resolution of `tick`, which the caller has validated (1 ns ≤ tick,
    /// and whole nanoseconds fit a `u64`).
    pub(crate) fn new(tick: Duration) -> Self {
        let tick_ns = nanos(tick).unwrap_or(u64::MAX).max(1);
        Resolution {
            tick_ns,
            reciprocal: u64::MAX / tick_ns,
        }
    }

    /// `ns / tick_ns` and `ns % tick_ns`, exactly.
    ///
    /// The estimate `⌊ns · r / 2^64⌋`, with `r = ⌊(2^64 − 1) / d⌋ > 2^64/d − 1`,
    /// is never above the quotient and below it by less than
    /// `1 + ns/2^64 < 2`, so at most two corrections make it exact.
    #[inline]
    pub(crate) fn split(&self, ns: u64) -> (u64, u64) {
        let mut q = ((u128::from(ns) * u128::from(self.reciprocal)) >> 64) as u64;
        let mut r = ns - q * self.tick_ns;
        // At most twice (see above); a loop the compiler keeps short.
        while r >= self.tick_ns {
            q += 1;
            r -= self.tick_ns;
        }
        (q, r)
    }

    /// The tick a reading `ns` nanoseconds after the origin falls in:
    /// rounded down, and never [`NEVER`].
    #[inline]
    pub(crate) fn now_tick_ns(&self, ns: u64) -> u64 {
        self.split(ns).0.min(LATEST_NOW)
    }

    /// The tick at which a timer due `ns` nanoseconds after the origin may
    /// fire: rounded up.
    #[inline]
    pub(crate) fn deadline_tick_ns(&self, ns: u64) -> u64 {
        let (q, r) = self.split(ns);
        q + u64::from(r > 0)
    }

    /// [`due_tick`](Self::due_tick) in whole nanoseconds since the origin;
    /// `None` as the deadline: past what a `u64` holds, so [`NEVER`].
    #[inline]
    pub(crate) fn due_tick_ns(&self, deadline: Option<u64>, now: u64) -> u64 {
        match deadline {
            None => NEVER,
            Some(deadline) if deadline <= now => {
                self.deadline_tick_ns(deadline).min(self.now_tick_ns(now))
            }
            Some(deadline) => self.deadline_tick_ns(deadline),
        }
    }

    /// The tick length.
    pub(crate) fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick_ns)
    }

    /// The tick at which a timer due at `deadline` (since the origin) may
    /// fire: rounded up; [`NEVER`] when out of range.
    #[inline]
    pub(crate) fn deadline_tick(&self, deadline: Duration) -> u64 {
        self.deadline_tick_of(nanos(deadline))
    }

    /// [`deadline_tick_ns`](Self::deadline_tick_ns) of a deadline in
    /// nanoseconds since the origin, `None` meaning past what a `u64`
    /// holds: then [`NEVER`].
    #[inline]
    pub(crate) fn deadline_tick_of(&self, ns: Option<u64>) -> u64 {
        ns.map_or(NEVER, |ns| self.deadline_tick_ns(ns))
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
        nanos(now).map_or(LATEST_NOW, |ns| self.now_tick_ns(ns))
    }

    /// The time (since the origin) at which `tick` begins, saturating at
    /// [`Duration::MAX`].
    #[inline]
    pub(crate) fn tick_start(&self, tick: u64) -> Duration {
        // In 64 bits whenever it fits (584 years of nanoseconds): a 128-bit
        // division is a library call, and this runs for every fired timer.
        if let Some(ns) = tick.checked_mul(self.tick_ns) {
            return Duration::from_nanos(ns);
        }
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

    #[test]
    fn bounds_are_inclusive() {
        assert!(check_tick(MIN_TICK).is_ok());
        assert!(check_tick(MAX_TICK).is_ok());
        assert!(check_tick(Duration::ZERO).is_err());
        assert!(check_tick(MAX_TICK + Duration::from_nanos(1)).is_err());
        assert!(check_tick(Duration::MAX).is_err());
        assert_eq!(check_wheel_size(2).unwrap(), 2);
        assert_eq!(check_wheel_size(MAX_WHEEL_SIZE).unwrap(), 1 << 16);
        for bad in [0, 1, MAX_WHEEL_SIZE + 1, usize::MAX] {
            assert_eq!(check_wheel_size(bad), Err(Invalid::WheelSize(bad)));
        }
    }

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
    fn the_reciprocal_divides_exactly() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            // xorshift64: enough spread for edge-free values.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut ticks = vec![
            1,
            2,
            3,
            7,
            1_000,
            999_999,
            1_000_000,
            3_600_000_000_000,
            u64::MAX,
        ];
        ticks.extend((0..200).map(|_| (next() >> (next() % 64)).max(1)));
        for d in ticks {
            let r = Resolution {
                tick_ns: d,
                reciprocal: u64::MAX / d,
            };
            let mut values = vec![0, 1, d - 1, d, d.saturating_add(1), u64::MAX - 1, u64::MAX];
            values.extend((0..200).map(|_| next() >> (next() % 64)));
            for ns in values {
                assert_eq!(r.split(ns), (ns / d, ns % d), "{ns} / {d}");
            }
        }
    }

    #[test]
    fn nanosecond_conversions_agree_with_durations() {
        for tick_ns in [1u64, 7, 1_000_000, 3_600_000_000_000] {
            let r = Resolution::new(Duration::from_nanos(tick_ns));
            for ns in [
                0u64,
                1,
                tick_ns - 1,
                tick_ns,
                tick_ns + 1,
                1 << 40,
                u64::MAX,
            ] {
                let d = Duration::from_nanos(ns);
                assert_eq!(nanos(d), Some(ns));
                assert_eq!(r.now_tick_ns(ns), r.now_tick(d));
                assert_eq!(r.deadline_tick_ns(ns), r.deadline_tick(d));
                for now in [0u64, ns / 2, ns, ns.saturating_add(tick_ns)] {
                    let want = r.due_tick(d, Duration::from_nanos(now));
                    assert_eq!(r.due_tick_ns(Some(ns), now), want);
                }
            }
        }
        assert_eq!(nanos(Duration::MAX), None);
        assert_eq!(Resolution::new(MS).due_tick_ns(None, 5), NEVER);
    }
}
