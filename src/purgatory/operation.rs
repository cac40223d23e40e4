//! [`DelayedOperation`]: what a user parks, the contract its callbacks live
//! by, and [`Completion`]: why an operation completed.

use std::time::Duration;

/// Why a delayed operation completed: what
/// [`on_complete`](DelayedOperation::on_complete) is told, exactly once.
///
/// Kafka's purgatory calls `onComplete` on every path and `onExpiration`
/// after it on the timeout path, so code that answers a request from
/// `onComplete` answers twice on a timeout unless it checks. Here the reason
/// comes with the one call: the natural code sends exactly one answer.
///
/// | variant | Kafka's path |
/// |---|---|
/// | [`Satisfied`](Self::Satisfied) | `tryComplete` returned true and called `forceComplete` |
/// | [`Forced`](Self::Forced) | the caller's `forceComplete` |
/// | [`Expired`](Self::Expired) | the timeout: `forceComplete` from the reaper, then `onExpiration` |
/// | [`ShutDown`](Self::ShutDown) | the purgatory's `shutdown` (Kafka drops the operations) |
///
/// # Examples
///
/// ```
/// use purgatorio::Completion;
///
/// fn answer(completion: Completion) -> &'static str {
///     if completion.is_timeout() { "REQUEST_TIMED_OUT" } else { "NONE" }
/// }
/// assert_eq!(answer(Completion::Satisfied), "NONE");
/// assert_eq!(answer(Completion::Expired), "REQUEST_TIMED_OUT");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Completion {
    /// [`try_complete`](DelayedOperation::try_complete) returned `true`.
    Satisfied,
    /// [`Parked::force_complete`](crate::Parked::force_complete) completed
    /// it, whatever its condition.
    Forced,
    /// Its [`delay`](DelayedOperation::delay) passed first.
    Expired,
    /// The purgatory shut down (or its last handle was dropped) while it was
    /// pending.
    ShutDown,
}

impl Completion {
    /// Whether the operation ended without its condition or a caller
    /// completing it: it [expired](Self::Expired) or was
    /// [shut down](Self::ShutDown).
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio::Completion;
    /// assert!(Completion::ShutDown.is_timeout());
    /// assert!(!Completion::Forced.is_timeout());
    /// ```
    pub fn is_timeout(self) -> bool {
        matches!(self, Completion::Expired | Completion::ShutDown)
    }
}

/// An operation that waits in a [`Purgatory`](crate::Purgatory) until it can
/// complete or its delay passes (Kafka's `DelayedOperation`).
///
/// ## Callback contract
///
/// * [`try_complete`](Self::try_complete) checks the operation's condition;
///   returning `true` completes the operation. It may be called many times,
///   from any thread, but never concurrently with another callback of the
///   same operation.
/// * [`on_complete`](Self::on_complete) runs **exactly once**, on whichever
///   path wins, and is told which one: [`Completion::Satisfied`] (a
///   successful `try_complete`), [`Completion::Forced`],
///   [`Completion::Expired`] or [`Completion::ShutDown`]. Kafka's
///   `onExpiration` is `on_complete` with `Expired`.
/// * The operation is dropped once it is done, right after `on_complete`, on
///   the thread that ran it, with no lock of the crate's held, except when
///   another operation's callback made the call that completed it: then that
///   operation's lock, which its callback already runs under, is still held
///   (calls from the `Drop` still work, as from any callback). An expiry
///   that finds the operation locked leaves it to the lock's holder, so
///   `on_complete(Expired)` and the drop may run on that thread rather than
///   on a timer worker.
///
/// Boxed operations are operations too, so one purgatory can hold several
/// kinds: `Purgatory<K, Box<dyn DelayedOperation>>`.
///
/// ## What callbacks may call
///
/// Callbacks run under **the operation's own lock** and no other lock of the
/// purgatory's or the timer's. From a callback, every call of the purgatory,
/// its [`Parked`](crate::Parked) handles and the timers works and returns
/// promptly; none waits for an operation that a callback (on any thread)
/// holds. Where that would be needed, the call leaves the work to the
/// thread holding that operation, which does it as soon as its callback
/// returns:
///
/// * `check_and_complete` on a key of an operation being tried elsewhere
///   asks that thread to try it again. Reported from inside a
///   `try_complete` (including this operation's own key), it earns the
///   operation **one** more attempt per call, not an endless loop.
/// * `force_complete` of an operation whose lock is held returns `false` and
///   the operation completes when its holder releases it (unless the holder
///   completes or cancels it first).
/// * `cancel_for_key` leaves an operation whose lock is held where it is
///   (not returned, still watched).
/// * `shutdown`, or dropping the last `Purgatory` handle, completes the
///   operations whose locks are held as shut down when their holders release
///   them; the calling thread does not wait for its own worker to finish.
///
/// A callback must not wait (on a channel, a lock of its own…) for another
/// thread that is waiting for this operation. A callback that panics is
/// caught and counted in
/// [`PurgatoryMetrics::panics`](crate::PurgatoryMetrics::panics); the
/// operation is then done (a panic in `try_complete` completes it without
/// calling `on_complete`) and the purgatory keeps working.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::{mpsc, Arc};
/// use std::time::Duration;
/// use purgatorio::{Completion, DelayedOperation};
///
/// /// Waits until `acks` reaches 3, for at most `timeout`; answers once.
/// struct DelayedProduce {
///     acks: Arc<AtomicUsize>,
///     timeout: Duration,
///     answer: mpsc::Sender<&'static str>,
/// }
///
/// impl DelayedOperation for DelayedProduce {
///     fn delay(&self) -> Duration {
///         self.timeout
///     }
///     fn try_complete(&mut self) -> bool {
///         self.acks.load(Ordering::SeqCst) >= 3
///     }
///     fn on_complete(&mut self, completion: Completion) {
///         let answer = if completion.is_timeout() { "REQUEST_TIMED_OUT" } else { "NONE" };
///         let _ = self.answer.send(answer);
///     }
/// }
/// ```
pub trait DelayedOperation: Send + 'static {
    /// How long the operation may wait before it expires.
    fn delay(&self) -> Duration;

    /// Checks whether the operation can complete now; `true` completes it.
    fn try_complete(&mut self) -> bool;

    /// Runs exactly once, when the operation completes, with the reason.
    fn on_complete(&mut self, completion: Completion);
}

/// A boxed operation is an operation: one purgatory can park several kinds
/// (`Purgatory<K, Box<dyn DelayedOperation>>`).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{Completion, DelayedOperation, Purgatory};
///
/// struct Fetch;
/// impl DelayedOperation for Fetch {
///     fn delay(&self) -> Duration { Duration::from_secs(1) }
///     fn try_complete(&mut self) -> bool { true }
///     fn on_complete(&mut self, _: Completion) {}
/// }
/// struct Produce;
/// impl DelayedOperation for Produce {
///     fn delay(&self) -> Duration { Duration::from_secs(1) }
///     fn try_complete(&mut self) -> bool { false }
///     fn on_complete(&mut self, _: Completion) {}
/// }
///
/// let p: Purgatory<u32, Box<dyn DelayedOperation>> = Purgatory::builder().build()?;
/// assert!(p.try_complete_else_watch(Box::new(Fetch), &[1])?);
/// assert!(!p.try_complete_else_watch(Box::new(Produce), &[1])?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl<T: DelayedOperation + ?Sized> DelayedOperation for Box<T> {
    fn delay(&self) -> Duration {
        (**self).delay()
    }
    fn try_complete(&mut self) -> bool {
        (**self).try_complete()
    }
    fn on_complete(&mut self, completion: Completion) {
        (**self).on_complete(completion)
    }
}
