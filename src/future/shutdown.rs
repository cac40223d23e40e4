//! [`ShutDown`]: a shutdown (a timer's, a purgatory's, a keyed timer's),
//! awaited instead of blocked on.

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::keyed::KeyedTimer;
use crate::purgatory::{DelayedRequest, Purgatory};
use crate::rendezvous::Rendezvous;
use crate::sync::Mutex;
use crate::timer::{Task, Timer};

/// A future that shuts something down on a thread of its own and resolves
/// with what the blocking shutdown returns: from [`Timer::shutdown_async`]
/// (the tasks that never ran: `ShutDown<Vec<T>>`, by default
/// `Vec<BoxTask>`), [`Purgatory::shutdown_async`](crate::Purgatory::shutdown_async)
/// (how many operations it completed) and
/// [`KeyedTimer::shutdown_async`](crate::KeyedTimer::shutdown_async) (the
/// keys still set).
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
pub struct ShutDown<R = Vec<crate::timer::BoxTask>> {
    /// Where the shutting-down thread leaves its result.
    result: Arc<Rendezvous<R>>,
}

impl<R> fmt::Debug for ShutDown<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShutDown").finish_non_exhaustive()
    }
}

impl<R: Default> Future for ShutDown<R> {
    type Output = R;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        // Awaited again after it resolved: nothing more was left (no task,
        // no operation, no key), as a second blocking shutdown says.
        self.result.poll_take(cx).map(Option::unwrap_or_default)
    }
}

impl<R: Send + 'static> ShutDown<R> {
    /// Runs `shut_down` on a thread named after `name`, or on the calling
    /// thread if none can be started; the future resolves with its result.
    pub(crate) fn spawn(name: &str, shut_down: impl FnOnce() -> R + Send + 'static) -> Self {
        let result = Arc::new(Rendezvous::default());
        // Shared with the thread, so that a thread that cannot be started
        // leaves the work here (`spawn` drops what it was given).
        let work = Arc::new(Mutex::new(Some(shut_down)));
        let (done, theirs) = (Arc::clone(&result), Arc::clone(&work));
        let spawned = std::thread::Builder::new()
            .name(format!("{name}-shutdown"))
            .spawn(move || {
                let shut_down = theirs.lock().take();
                if let Some(shut_down) = shut_down {
                    done.set(shut_down());
                }
            });
        if spawned.is_err() {
            let shut_down = work.lock().take();
            if let Some(shut_down) = shut_down {
                result.set(shut_down());
            }
        }
        ShutDown { result }
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
    pub fn shutdown_async(&self) -> ShutDown<Vec<T>> {
        let timer = self.clone();
        ShutDown::spawn(self.name(), move || timer.shutdown())
    }
}

impl<K, O, S> Purgatory<K, O, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    O: DelayedRequest,
    S: BuildHasher + Send + Sync + 'static,
{
    /// [`shutdown`](Self::shutdown), done on a thread of its own: the
    /// returned future resolves with how many operations it completed, once
    /// the purgatory (and its own timer, if it has one) is shut down. The
    /// shutdown starts at once, whether or not the future is awaited. If no
    /// thread can be started, it shuts down on the calling thread. On a
    /// shared timer, the timer keeps running for its other users.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use purgatorio::{Completion, DelayedOperation, Purgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> Duration { Duration::from_secs(60) }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self, _: Completion) {}
    /// # }
    /// let p: Purgatory<u8, Op> = Purgatory::builder().build()?;
    /// let parked = p.park(Op, [1])?;
    /// # use futures_executor::block_on;
    /// assert_eq!(block_on(p.shutdown_async()), 1);
    /// assert_eq!(block_on(parked), Some(Completion::ShutDown));
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn shutdown_async(&self) -> ShutDown<usize> {
        let purgatory = self.clone();
        ShutDown::spawn(self.timer().name(), move || purgatory.shutdown())
    }
}

impl<K, V> KeyedTimer<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Send + 'static,
{
    /// [`shutdown`](Self::shutdown), done on a thread of its own: the
    /// returned future resolves with the keys that were still set once the
    /// keyed timer (and its own timer, if it has one) is shut down. The
    /// shutdown starts at once, whether or not the future is awaited. If no
    /// thread can be started, it shuts down on the calling thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let sessions = purgatorio::KeyedTimer::new(|_: u32, _: ()| ())?;
    /// sessions.set(7, (), Duration::from_secs(30))?;
    /// # use futures_executor::block_on;
    /// assert_eq!(block_on(sessions.shutdown_async()), vec![(7, ())]);
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn shutdown_async(&self) -> ShutDown<Vec<(K, V)>> {
        let keyed = self.clone();
        ShutDown::spawn(self.timer().name(), move || keyed.shutdown())
    }
}
