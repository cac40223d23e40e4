//! [`ShutDown`]: a timer's shutdown, awaited instead of blocked on.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::rendezvous::Rendezvous;
use crate::timer::{Task, Timer};

/// A future that shuts a [`Timer`] down on a thread of its own and resolves
/// with the tasks that never ran; from [`Timer::shutdown_async`].
///
/// [`Timer::shutdown`] joins the driver and the workers, which waits for the
/// tasks already running to return; this does the same without holding up
/// the task (and the runtime thread) that awaits it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let timer = purgatorio::Timer::builder().build()?;
/// timer.schedule(Duration::from_secs(60), || ())?;
/// # use futures_executor::block_on;
/// let never_ran = block_on(timer.shutdown_async());
/// assert_eq!(never_ran.len(), 1);
/// assert!(timer.is_shut_down());
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[must_use = "the shutdown's result is only known by awaiting it"]
pub struct ShutDown<T = crate::timer::BoxTask> {
    /// Where the shutting-down thread leaves the tasks.
    result: Arc<Rendezvous<Vec<T>>>,
}

impl<T> fmt::Debug for ShutDown<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShutDown").finish_non_exhaustive()
    }
}

impl<T> Future for ShutDown<T> {
    type Output = Vec<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<T>> {
        // Awaited again after it resolved: nothing more never ran.
        self.result.poll_take(cx).map(Option::unwrap_or_default)
    }
}

impl<T: Task> Timer<T> {
    /// [`shutdown`](Self::shutdown), done on a thread of its own: the
    /// returned future resolves with the tasks that never ran once every
    /// thread of the timer has been joined. The shutdown starts at once,
    /// whether or not the future is awaited.
    ///
    /// If no thread can be started, it shuts down on the calling thread.
    /// Do not block on the future from inside one of the timer's own tasks:
    /// the shutdown waits for that task to return (call
    /// [`shutdown`](Self::shutdown) there, which skips the calling worker).
    ///
    /// # Examples
    ///
    /// See [`ShutDown`].
    pub fn shutdown_async(&self) -> ShutDown<T> {
        let result = Arc::new(Rendezvous::default());
        let timer = self.clone();
        let done = Arc::clone(&result);
        let spawned = std::thread::Builder::new()
            .name(format!("{}-shutdown", self.name()))
            .spawn(move || {
                let tasks = timer.shutdown();
                drop(timer);
                done.set(tasks);
            });
        if spawned.is_err() {
            result.set(self.shutdown());
        }
        ShutDown { result }
    }
}
