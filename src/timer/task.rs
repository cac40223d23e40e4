//! What a [`Timer`](crate::Timer) runs: the [`Task`] trait, and the default
//! task, [`BoxTask`].

use std::sync::Arc;
use std::task::Waker;

/// Work a [`Timer`](crate::Timer) runs when a deadline passes.
///
/// Implemented for every `FnOnce() + Send + 'static` closure. A task runs on
/// a worker thread of the timer, never on the driver and never under a lock of
/// the timer's, so it may call anything on the timer (schedule, cancel,
/// metrics, even drop the last `Timer` handle). A task that panics is caught
/// and counted in [`Metrics::panicked`](crate::Metrics::panicked); the worker goes on.
///
/// # Examples
///
/// ```
/// use purgatorio::Task;
///
/// struct Expire(u64);
/// impl Task for Expire {
///     fn run(self) {
///         println!("request {} timed out", self.0);
///     }
/// }
/// Expire(7).run();
/// ```
pub trait Task: Send + 'static {
    /// Runs the task.
    fn run(self);

    /// Whether running the task only wakes an async task (a sleep's entry):
    /// the driver then wakes it itself, rather than hand it to a worker.
    /// Not for users to call or override.
    #[doc(hidden)]
    fn wakes_only(&self) -> bool {
        false
    }

    /// What a shutdown hands back of a task that never ran: the task itself,
    /// unless it is one of the crate's own entries (a sleep's wake-up, a
    /// parked operation's expiry, a keyed timer's key), which is ended here
    /// instead (the sleep woken, the operation completed as shut down, the
    /// key removed). Not for users to call or override.
    #[doc(hidden)]
    fn into_user_task(self) -> Option<Self>
    where
        Self: Sized,
    {
        Some(self)
    }
}

impl<F: FnOnce() + Send + 'static> Task for F {
    fn run(self) {
        self()
    }
}

/// The default task type: any `FnOnce() + Send + 'static` closure, boxed.
///
/// A default [`Timer`](crate::Timer) takes closures directly:
/// [`schedule`](crate::Timer::schedule) accepts anything that converts into
/// its task type, and every such closure converts into a `BoxTask`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{BoxTask, Task, Timer};
///
/// let timer = Timer::builder().build()?;
/// timer.schedule(Duration::from_secs(1), || println!("one"))?;
/// timer.schedule(Duration::from_secs(2), move || println!("two"))?; // another closure type
///
/// let task = BoxTask::new(|| ());
/// task.run();
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
pub struct BoxTask(Work);

/// What a [`BoxTask`] carries.
enum Work {
    /// A user's closure.
    Closure(Box<dyn FnOnce() + Send + 'static>),
    /// A job of the crate's already in an `Arc`: no box of its own.
    Job(JobRef),
    /// An async task's waker (a [`Sleep`](crate::Sleep)): no box at all.
    Wake(WakeRef),
}

/// A job of the crate's that a [`BoxTask`] can carry without boxing it: the
/// purgatory's expiry of an operation, which already lives in an `Arc`, and
/// a keyed timer's expiry of a key. So any number of purgatories share one
/// default [`Timer`](crate::Timer) at no allocation per operation, and a
/// shutdown ends the crate's entries instead of handing them to the user.
pub(crate) trait Job: Send + Sync + 'static {
    /// Runs the job: its deadline passed.
    fn fire(self: Arc<Self>);

    /// The job will never run: the timer was shut down or dropped with it
    /// pending (a cancelled job is dropped the same way, after its owner is
    /// done with it, so this must then do nothing).
    fn abandon(self: Arc<Self>);
}

/// A carried job; dropped without running, it is abandoned.
struct JobRef(Option<Arc<dyn Job>>);

impl Drop for JobRef {
    fn drop(&mut self) {
        if let Some(job) = self.0.take() {
            job.abandon();
        }
    }
}

/// A carried waker; dropped without running (the timer shut down with it
/// pending), it still wakes its task, which then finds the timer shut down.
/// The sleep that owns it takes it back with [`BoxTask::disarm`].
struct WakeRef(Option<Waker>);

impl Drop for WakeRef {
    fn drop(&mut self) {
        if let Some(waker) = self.0.take() {
            waker.wake();
        }
    }
}

impl BoxTask {
    /// Boxes `task`.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio::{BoxTask, Task};
    /// BoxTask::new(|| println!("ran")).run();
    /// ```
    pub fn new(task: impl FnOnce() + Send + 'static) -> Self {
        BoxTask(Work::Closure(Box::new(task)))
    }

    /// Carries `job` without another allocation.
    pub(crate) fn job(job: Arc<dyn Job>) -> Self {
        BoxTask(Work::Job(JobRef(Some(job))))
    }

    /// Carries `waker`: running the task wakes it.
    pub(crate) fn waker(waker: Waker) -> Self {
        BoxTask(Work::Wake(WakeRef(Some(waker))))
    }

    /// Drops the task without running it, without the wake-up a dropped
    /// waker task gives or the abandonment a dropped job gets: for an owner
    /// that cancelled its own entry and is done with it (a sleep, a keyed
    /// timer's key).
    pub(crate) fn disarm(self) {
        match self.0 {
            Work::Wake(mut wake) => drop(wake.0.take()),
            Work::Job(mut job) => drop(job.0.take()),
            Work::Closure(task) => drop(task),
        }
    }
}

impl<F: FnOnce() + Send + 'static> From<F> for BoxTask {
    fn from(task: F) -> Self {
        BoxTask::new(task)
    }
}

impl Task for BoxTask {
    fn wakes_only(&self) -> bool {
        matches!(self.0, Work::Wake(_))
    }

    fn into_user_task(self) -> Option<Self> {
        match self.0 {
            Work::Closure(task) => Some(BoxTask(Work::Closure(task))),
            // Dropped unrun: the job is abandoned, the waker woken.
            Work::Job(_) | Work::Wake(_) => None,
        }
    }

    fn run(self) {
        match self.0 {
            Work::Closure(task) => task(),
            Work::Job(mut job) => {
                if let Some(job) = job.0.take() {
                    job.fire();
                }
            }
            Work::Wake(mut wake) => {
                if let Some(waker) = wake.0.take() {
                    waker.wake();
                }
            }
        }
    }
}

impl std::fmt::Debug for BoxTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BoxTask(..)")
    }
}
