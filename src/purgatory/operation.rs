//! [`DelayedOperation`]: what a user parks, and the contract its callbacks
//! live by.

use std::time::Duration;

/// An operation that waits in a [`Purgatory`](crate::Purgatory) until it can
/// complete or its delay passes (Kafka's `DelayedOperation`).
///
/// ## Callback contract
///
/// * [`try_complete`](Self::try_complete) checks the operation's condition;
///   returning `true` completes the operation: [`on_complete`](Self::on_complete)
///   runs next. It may be called many times, from any thread, but never
///   concurrently with another callback of the same operation.
/// * [`on_complete`](Self::on_complete) runs **exactly once**, on whichever path
///   wins: a successful `try_complete`, `force_complete`, or expiry.
/// * [`on_expiration`](Self::on_expiration) runs after `on_complete`, only when
///   the operation completed because its delay passed (or the purgatory shut
///   down).
/// * The operation is dropped once it is done, right after its last
///   callback, on the thread that ran it, with no lock of the crate's held.
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
/// * `shutdown`, or dropping the last `Purgatory` handle, expires the
///   operations whose locks are held when their holders release them; the
///   calling thread does not wait for its own worker to finish.
///
/// A callback must not wait (on a channel, a lock of its own…) for another
/// thread that is waiting for this operation. A callback that panics is
/// caught and counted in
/// [`PurgatoryMetrics::panics`](crate::PurgatoryMetrics::panics); the
/// operation is then done (a panic in `try_complete` completes it without
/// callbacks) and the purgatory keeps working.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use purgatorio::DelayedOperation;
///
/// /// Waits until `acks` reaches 3, for at most `timeout`.
/// struct DelayedProduce {
///     acks: Arc<AtomicUsize>,
///     timeout: Duration,
///     answer: std::sync::mpsc::Sender<&'static str>,
/// }
///
/// impl DelayedOperation for DelayedProduce {
///     fn delay(&self) -> Duration {
///         self.timeout
///     }
///     fn try_complete(&mut self) -> bool {
///         self.acks.load(Ordering::SeqCst) >= 3
///     }
///     fn on_complete(&mut self) {
///         let _ = self.answer.send("done");
///     }
///     fn on_expiration(&mut self) {
///         let _ = self.answer.send("timed out");
///     }
/// }
/// ```
pub trait DelayedOperation: Send + 'static {
    /// How long the operation may wait before it expires.
    fn delay(&self) -> Duration;

    /// Checks whether the operation can complete now; `true` completes it.
    fn try_complete(&mut self) -> bool;

    /// Runs exactly once, when the operation completes by any path.
    fn on_complete(&mut self);

    /// Runs after [`on_complete`](Self::on_complete) when the operation
    /// expired. Does nothing by default.
    fn on_expiration(&mut self) {}
}
