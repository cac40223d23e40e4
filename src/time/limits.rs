//! The wheel's settings, their defaults, and every configuration limit,
//! checked in one place ([`WheelConfig::check`]). `error.rs` quotes these
//! limits in its messages.

use std::time::Duration;

use super::Resolution;

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
}
