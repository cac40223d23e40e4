//! Every error of the crate, in one place. Small, typed, and a refused task,
//! operation, key or value is always given back.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use crate::time::{
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

/// A value refused by a call, held until its owner takes it back. Behind a
/// lock, so that the error is `Sync` (and `?` converts it into
/// `Box<dyn Error + Send + Sync>` or `anyhow::Error`) even when the value
/// (a boxed closure, an operation) is only `Send`: nobody can reach the value
/// through a shared reference.
struct Refused<T>(parking_lot::Mutex<T>);

impl<T> Refused<T> {
    /// Holds `value`.
    fn new(value: T) -> Self {
        Refused(parking_lot::Mutex::new(value))
    }

    /// The value.
    fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

/// A task the timer refused because it is shut down; the task is handed back.
///
/// `Send + Sync + 'static` whenever the task is `Send + 'static`, so `?`
/// carries it into `Box<dyn Error + Send + Sync>`; `Debug` does not need the
/// task to be `Debug`.
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
pub struct ScheduleError<T>(Refused<T>);

impl<T> ScheduleError<T> {
    /// The error for `task`.
    pub(crate) fn new(task: T) -> Self {
        ScheduleError(Refused::new(task))
    }

    /// The refused task.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build().unwrap();
    /// timer.shutdown();
    /// let err = timer.schedule(Duration::ZERO, || ()).unwrap_err();
    /// purgatorio::Task::run(err.into_inner()); // still a task you can run
    /// ```
    pub fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

impl<T: PartialEq> PartialEq for ScheduleError<T> {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other) || *self.0 .0.lock() == *other.0 .0.lock()
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

/// Why a purgatory refused an operation: see [`WatchError::kind`].
///
/// # Examples
///
/// See [`WatchError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WatchErrorKind {
    /// The key list was empty.
    NoKeys,
    /// The purgatory is shut down.
    ShutDown,
}

/// Why [`Purgatory::park`](crate::Purgatory::park) or
/// [`try_complete_else_watch`](crate::Purgatory::try_complete_else_watch)
/// refused an operation; the operation is handed back.
///
/// `Send + Sync + 'static` for every operation type, `Debug` without the
/// operation being `Debug`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{Completion, DelayedOperation, Purgatory, WatchErrorKind};
///
/// struct Never;
/// impl DelayedOperation for Never {
///     fn delay(&self) -> Duration { Duration::from_secs(1) }
///     fn try_complete(&mut self) -> bool { false }
///     fn on_complete(&mut self, _: Completion) {}
/// }
///
/// let purgatory: Purgatory<u32, Never> = Purgatory::builder().build().unwrap();
/// let err = purgatory.try_complete_else_watch(Never, [0u32; 0]).unwrap_err();
/// assert_eq!(err.kind(), WatchErrorKind::NoKeys);
/// assert_eq!(err.to_string(), "an operation needs at least one watch key");
/// let _op: Never = err.into_inner();
/// ```
pub struct WatchError<O> {
    /// Why.
    kind: WatchErrorKind,
    /// The operation.
    op: Refused<O>,
}

impl<O> WatchError<O> {
    /// The error of `kind` for `op`.
    pub(crate) fn new(kind: WatchErrorKind, op: O) -> Self {
        WatchError {
            kind,
            op: Refused::new(op),
        }
    }

    /// Why the operation was refused.
    ///
    /// # Examples
    ///
    /// See [`WatchError`].
    pub fn kind(&self) -> WatchErrorKind {
        self.kind
    }

    /// The refused operation.
    ///
    /// # Examples
    ///
    /// See [`WatchError`].
    pub fn into_inner(self) -> O {
        self.op.into_inner()
    }
}

impl<O> fmt::Debug for WatchError<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchError")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl<O> fmt::Display for WatchError<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            WatchErrorKind::NoKeys => f.write_str("an operation needs at least one watch key"),
            WatchErrorKind::ShutDown => f.write_str("purgatory is shut down"),
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

    /// Every public error is `Send + Sync + 'static` even when the value it
    /// hands back is only `Send` (a boxed closure, a `Cell`).
    #[test]
    fn errors_are_send_and_sync_whatever_they_hold() {
        fn send_sync<E: Error + Send + Sync + 'static>(_: &E) {}
        let not_sync = std::cell::Cell::new(1);
        send_sync(&ScheduleError::new(
            Box::new(move || not_sync.set(2)) as Box<dyn FnOnce() + Send>
        ));
        send_sync(&WatchError::new(
            WatchErrorKind::ShutDown,
            std::cell::Cell::new(2),
        ));
        send_sync(&ShutDownError);
        send_sync(&BuildError::Workers(0));
        let boxed: Box<dyn Error + Send + Sync> =
            ScheduleError::new(std::cell::Cell::new(3)).into();
        assert_eq!(boxed.to_string(), "timer is shut down");
    }

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
        assert_eq!(ScheduleError::new(()).to_string(), "timer is shut down");
    }
}
