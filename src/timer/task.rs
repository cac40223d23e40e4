//! What a [`Timer`](crate::Timer) runs: the [`Task`] trait.

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
}

impl<F: FnOnce() + Send + 'static> Task for F {
    fn run(self) {
        self()
    }
}

/// The default task type: any boxed closure.
pub type BoxTask = Box<dyn FnOnce() + Send + 'static>;
