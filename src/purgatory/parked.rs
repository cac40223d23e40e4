//! [`Parked`]: one parked operation, completed directly or awaited.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::op::Op;
use super::operation::DelayedRequest;
use super::outcome::Outcome;
use super::request::Request;

/// A handle to one operation in a [`Purgatory`](crate::Purgatory), from [`Purgatory::park`](crate::Purgatory::park).
///
/// Completing through the handle is O(1): it locks just this operation. The
/// operation's entries leave the watch lists at the next check of their keys
/// or the next purge.
///
/// # Awaiting it
///
/// `Parked` is a future (Kafka's `DelayedFuture`, in Rust form): it resolves
/// once the operation ends, with its answer: `Some` of what
/// [`DelayedRequest::answer`] returned (for a
/// [`DelayedOperation`](crate::DelayedOperation), how it completed: a
/// [`Completion`](crate::Completion), after its `on_complete` returned), or `None` if it ended
/// without an answer (taken back by [`cancel`](Self::cancel) or
/// [`Purgatory::cancel_for_key`](crate::Purgatory::cancel_for_key), or a
/// callback of it panicked). Polled again after it resolved, a
/// `DelayedOperation`'s handle gives the same completion, a
/// `DelayedRequest`'s `None` (its answer was handed out once).
/// [`outcome`](Self::outcome) tells how it ended without taking the answer.
/// Dropping it leaves the operation parked (its answer is then dropped when
/// it completes); [`cancel_on_drop`](Self::cancel_on_drop) makes a future
/// that cancels it instead.
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{Completion, DelayedOperation, ManualClock, Purgatory, Timer};
///
/// struct Fetch;
/// impl DelayedOperation for Fetch {
///     fn delay(&self) -> Duration { Duration::from_millis(500) }
///     fn try_complete(&mut self) -> bool { false }
///     fn on_complete(&mut self, _: Completion) {}
/// }
///
/// let clock = ManualClock::new();
/// let purgatory: Purgatory<u32, Fetch> =
///     Purgatory::builder().timer(Timer::builder().clock(clock.clone())).build()?;
/// let fetch = purgatory.park(Fetch, [1])?;
/// clock.advance(Duration::from_millis(500));
/// # use futures_executor::block_on;
/// assert_eq!(block_on(fetch), Some(Completion::Expired));
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
pub struct Parked<O: DelayedRequest> {
    /// The operation.
    op: Arc<Op<O>>,
    /// Whether `park` completed it at once.
    completed_now: bool,
}

impl<O: DelayedRequest> fmt::Debug for Parked<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parked")
            .field("completed_now", &self.completed_now)
            .finish()
    }
}

impl<O: DelayedRequest> Parked<O> {
    /// The handle of `op`; `completed_now` if `park` completed it at once.
    /// Completions through it are counted in the operation's own counters
    /// (one reference to them fewer per operation: the count is shared by
    /// every thread that parks or completes).
    pub(super) fn new(op: Arc<Op<O>>, completed_now: bool) -> Self {
        Parked { op, completed_now }
    }

    /// Whether `park` completed the operation at once (it was never parked).
    ///
    /// # Examples
    ///
    /// See [`Purgatory::park`](crate::Purgatory::park).
    pub fn completed_now(&self) -> bool {
        self.completed_now
    }

    /// Runs the operation's `try_complete` under its lock; returns whether
    /// this call completed it.
    ///
    /// # Examples
    ///
    /// See [`Purgatory::park`](crate::Purgatory::park).
    pub fn try_complete(&self) -> bool {
        self.op.try_complete()
    }

    /// Completes the operation now, whatever its condition (`on_complete`
    /// runs with [`Completion::Forced`](crate::Completion::Forced)); returns
    /// whether this call completed it. Its timer is cancelled.
    ///
    /// Waits for the operation's lock if a callback of it is running on
    /// another thread. Called from inside a callback (of this operation or
    /// any other), it never waits: if the lock is taken, the completion is
    /// left to the lock's holder, which carries it out as soon as its
    /// callback returns, and this call returns `false`.
    ///
    /// # Examples
    ///
    /// See [`Purgatory::park`](crate::Purgatory::park).
    pub fn force_complete(&self) -> bool {
        self.op.complete(Request::Force)
    }

    /// Whether the operation is done: completed, expired or cancelled.
    ///
    /// It is done from the moment its completion starts, so while its
    /// `on_complete` runs on another thread this says `true` and
    /// [`outcome`](Self::outcome) still `None`: the outcome is published
    /// once `on_complete` returned.
    ///
    /// # Examples
    ///
    /// See [`Purgatory::park`](crate::Purgatory::park).
    pub fn is_done(&self) -> bool {
        self.op.is_done()
    }

    /// Takes the operation back without completing it (its `on_complete`
    /// never runs), if it is still pending; its timer is cancelled and an
    /// awaiting task gets `None`. Waits for the operation's lock, unless
    /// called from inside a callback: then a held lock gives `None`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatorio::{Completion, DelayedOperation, Purgatory};
    ///
    /// struct Wait(u32);
    /// impl DelayedOperation for Wait {
    ///     fn delay(&self) -> Duration { Duration::from_secs(60) }
    ///     fn try_complete(&mut self) -> bool { false }
    ///     fn on_complete(&mut self, _: Completion) { unreachable!() }
    /// }
    ///
    /// let purgatory: Purgatory<&str, Wait> = Purgatory::builder().build()?;
    /// let parked = purgatory.park(Wait(7), ["key"])?;
    /// assert_eq!(parked.cancel().map(|w| w.0), Some(7));
    /// assert!(parked.is_done());
    /// assert_eq!(purgatory.delayed(), 0);
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn cancel(&self) -> Option<O> {
        self.op.cancel()
    }

    /// How the operation ended, without waiting: `None` while it is
    /// pending. Awaiting the handle gives an answer only for
    /// [`Outcome::Completed`] (a [`DelayedRequest`]'s answer is handed over
    /// once: polled again after it resolved, the handle gives `None`, while
    /// this still says `Completed`).
    ///
    /// # Examples
    ///
    /// See [`Outcome`].
    pub fn outcome(&self) -> Option<Outcome> {
        self.op.ended()
    }

    /// A future that resolves as this handle does, but cancels the operation
    /// (see [`cancel`](Self::cancel)) if dropped before it ended: for a
    /// request whose client went away.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatorio::{Completion, DelayedOperation, Purgatory};
    ///
    /// struct Wait;
    /// impl DelayedOperation for Wait {
    ///     fn delay(&self) -> Duration { Duration::from_secs(60) }
    ///     fn try_complete(&mut self) -> bool { false }
    ///     fn on_complete(&mut self, _: Completion) { unreachable!() }
    /// }
    ///
    /// let purgatory: Purgatory<u8, Wait> = Purgatory::builder().build()?;
    /// let request = purgatory.park(Wait, [1])?.cancel_on_drop();
    /// drop(request); // the client disconnected
    /// assert_eq!(purgatory.delayed(), 0);
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn cancel_on_drop(self) -> CancelOnDrop<O> {
        CancelOnDrop { parked: Some(self) }
    }
}

impl<O: DelayedRequest> Drop for Parked<O> {
    fn drop(&mut self) {
        self.op.release_handle();
    }
}

impl<O: DelayedRequest> Future for Parked<O> {
    type Output = Option<O::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<O::Output>> {
        self.op.poll_outcome(cx)
    }
}

/// A [`Parked`] handle that cancels its operation if dropped before it
/// ended; from [`Parked::cancel_on_drop`]. Resolves as the handle does.
#[derive(Debug)]
#[must_use = "dropping it at once cancels the operation"]
pub struct CancelOnDrop<O: DelayedRequest> {
    /// The handle; `None` once given back by `into_inner`.
    parked: Option<Parked<O>>,
}

impl<O: DelayedRequest> CancelOnDrop<O> {
    /// The handle, which no longer cancels on drop.
    ///
    /// # Examples
    ///
    /// See [`Parked::cancel_on_drop`].
    pub fn into_inner(mut self) -> Parked<O> {
        self.parked
            .take()
            .expect("the handle is there until into_inner")
    }
}

impl<O: DelayedRequest> Future for CancelOnDrop<O> {
    type Output = Option<O::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<O::Output>> {
        match &mut self.get_mut().parked {
            Some(parked) => Pin::new(parked).poll(cx),
            None => Poll::Ready(None),
        }
    }
}

impl<O: DelayedRequest> Drop for CancelOnDrop<O> {
    fn drop(&mut self) {
        // The operation is handed back here and dropped after every lock.
        if let Some(parked) = self.parked.take() {
            drop(parked.cancel());
        }
    }
}
