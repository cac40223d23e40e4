//! Errors. Small, typed, and a refused task is always given back.

use std::error::Error;
use std::fmt;
use std::time::Duration;

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

/// Why a timer could not be built.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{BuildError, LocalTimer};
///
/// let err = LocalTimer::<()>::builder().tick(Duration::ZERO).build().unwrap_err();
/// assert!(matches!(err, BuildError::Tick(_)));
/// assert_eq!(err.to_string(), "tick of 0ns is outside 1ns..=3600s");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// The tick is outside [`MIN_TICK`]`..=`[`MAX_TICK`].
    Tick(Duration),
    /// The wheel size is outside [`MIN_WHEEL_SIZE`]`..=`[`MAX_WHEEL_SIZE`].
    WheelSize(usize),
    /// The shard count is outside `1..=`[`MAX_SHARDS`].
    Shards(usize),
    /// The worker count is outside `1..=`[`MAX_WORKERS`].
    Workers(usize),
    /// The thread name contains a NUL byte, which no thread name may hold.
    ThreadName(String),
    /// A thread could not be started.
    Spawn(std::io::Error),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Tick(tick) => {
                write!(f, "tick of {tick:?} is outside {MIN_TICK:?}..={MAX_TICK:?}")
            }
            BuildError::WheelSize(size) => write!(
                f,
                "wheel size {size} is outside {MIN_WHEEL_SIZE}..={MAX_WHEEL_SIZE}"
            ),
            BuildError::Shards(n) => write!(f, "shard count {n} is outside 1..={MAX_SHARDS}"),
            BuildError::Workers(n) => {
                write!(f, "worker count {n} is outside 1..={MAX_WORKERS}")
            }
            BuildError::ThreadName(name) => {
                write!(f, "thread name {name:?} contains a NUL byte")
            }
            BuildError::Spawn(err) => write!(f, "could not start a timer thread: {err}"),
        }
    }
}

impl Error for BuildError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            BuildError::Spawn(err) => Some(err),
            _ => None,
        }
    }
}

/// Checks a tick length.
pub(crate) fn check_tick(tick: Duration) -> Result<Duration, BuildError> {
    if (MIN_TICK..=MAX_TICK).contains(&tick) {
        Ok(tick)
    } else {
        Err(BuildError::Tick(tick))
    }
}

/// Checks a wheel size.
pub(crate) fn check_wheel_size(size: usize) -> Result<u64, BuildError> {
    if (MIN_WHEEL_SIZE..=MAX_WHEEL_SIZE).contains(&size) {
        Ok(size as u64)
    } else {
        Err(BuildError::WheelSize(size))
    }
}

/// A task the timer refused because it is shut down; the task is handed back.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::Timer;
///
/// let timer = Timer::builder().build().unwrap();
/// timer.shutdown();
/// let err = timer.schedule(Duration::from_secs(1), || ()).unwrap_err();
/// assert_eq!(err.to_string(), "timer is shut down");
/// let _task = err.into_inner(); // yours again
/// ```
#[derive(PartialEq, Eq)]
pub struct ScheduleError<T>(pub T);

impl<T> ScheduleError<T> {
    /// The refused task.
    ///
    /// # Examples
    ///
    /// ```
    /// let err = purgatorio::ScheduleError(5);
    /// assert_eq!(err.into_inner(), 5);
    /// ```
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for ScheduleError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ScheduleError(..)")
    }
}

impl<T> fmt::Display for ScheduleError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("timer is shut down")
    }
}

impl<T> Error for ScheduleError<T> {}

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
            assert!(matches!(check_wheel_size(bad), Err(BuildError::WheelSize(n)) if n == bad));
        }
    }

    #[test]
    fn messages_are_lowercase() {
        for err in [
            BuildError::Tick(Duration::ZERO),
            BuildError::WheelSize(1),
            BuildError::Shards(0),
            BuildError::Workers(0),
            BuildError::ThreadName("a\0b".into()),
        ] {
            let msg = err.to_string();
            assert!(msg.chars().next().unwrap().is_lowercase(), "{msg}");
        }
        assert_eq!(ScheduleError(()).to_string(), "timer is shut down");
    }
}
