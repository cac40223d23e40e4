//! Every error of the crate, in one place. Small, typed, and a refused task,
//! operation, key or value is always given back.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use crate::tick::{
    Invalid, MAX_SHARDS, MAX_TICK, MAX_WATCH_SHARDS, MAX_WHEEL_SIZE, MAX_WORKERS, MIN_TICK,
    MIN_WHEEL_SIZE,
};

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
    /// The purgatory's watch-shard count is outside `1..=`[`MAX_WATCH_SHARDS`].
    WatchShards(usize),
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
            BuildError::WatchShards(n) => {
                write!(f, "watch shard count {n} is outside 1..={MAX_WATCH_SHARDS}")
            }
            BuildError::ThreadName(name) => {
                write!(f, "thread name {name:?} contains a NUL byte")
            }
            BuildError::Spawn(err) => write!(f, "could not start a timer thread: {err}"),
        }
    }
}

impl From<Invalid> for BuildError {
    fn from(invalid: Invalid) -> Self {
        match invalid {
            Invalid::Tick(tick) => BuildError::Tick(tick),
            Invalid::WheelSize(size) => BuildError::WheelSize(size),
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

/// Why [`Purgatory::try_complete_else_watch`](crate::Purgatory::try_complete_else_watch) refused an operation; the
/// operation is handed back.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{Completion, DelayedOperation, Purgatory, WatchError};
///
/// struct Never;
/// impl DelayedOperation for Never {
///     fn delay(&self) -> Duration { Duration::from_secs(1) }
///     fn try_complete(&mut self) -> bool { false }
///     fn on_complete(&mut self, _: Completion) {}
/// }
///
/// let purgatory: Purgatory<u32, Never> = Purgatory::builder().build().unwrap();
/// let err = purgatory.try_complete_else_watch(Never, &[]).unwrap_err();
/// assert_eq!(err.to_string(), "an operation needs at least one watch key");
/// let _op: Never = err.into_inner();
/// ```
#[non_exhaustive]
pub enum WatchError<O> {
    /// The key list was empty.
    NoKeys(O),
    /// The purgatory is shut down.
    ShutDown(O),
}

impl<O> WatchError<O> {
    /// The refused operation.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(purgatorio::WatchError::NoKeys(3).into_inner(), 3);
    /// ```
    pub fn into_inner(self) -> O {
        match self {
            WatchError::NoKeys(op) | WatchError::ShutDown(op) => op,
        }
    }
}

impl<O> fmt::Debug for WatchError<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchError::NoKeys(_) => f.write_str("NoKeys(..)"),
            WatchError::ShutDown(_) => f.write_str("ShutDown(..)"),
        }
    }
}

impl<O> fmt::Display for WatchError<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchError::NoKeys(_) => f.write_str("an operation needs at least one watch key"),
            WatchError::ShutDown(_) => f.write_str("purgatory is shut down"),
        }
    }
}

impl<O> Error for WatchError<O> {}

/// A call on a purgatory that was shut down.
///
/// # Examples
///
/// ```
/// assert_eq!(purgatorio::ShutDownError.to_string(), "purgatory is shut down");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutDownError;

impl fmt::Display for ShutDownError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("purgatory is shut down")
    }
}

impl Error for ShutDownError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_lowercase() {
        for err in [
            BuildError::Tick(Duration::ZERO),
            BuildError::WheelSize(1),
            BuildError::Shards(0),
            BuildError::Workers(0),
            BuildError::WatchShards(0),
            BuildError::ThreadName("a\0b".into()),
        ] {
            let msg = err.to_string();
            assert!(msg.chars().next().unwrap().is_lowercase(), "{msg}");
        }
        assert_eq!(ScheduleError(()).to_string(), "timer is shut down");
    }
}
