//! What a user parks: [`DelayedRequest`] (an operation whose completion
//! gives an answer, what awaiting its [`Parked`](crate::Parked) handle
//! resolves to) and [`DelayedOperation`] (Kafka's callback style, a
//! `DelayedRequest` whose answer is its [`Completion`]); the contract their
//! callbacks live by; and [`Completion`]: why an operation completed.

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
    /// Whether the operation's delay passed first: [`Expired`](Self::Expired)
    /// only. A shutdown is not a timeout: a server answers its requests
    /// differently then (or not at all), so
    /// [`is_shut_down`](Self::is_shut_down) tells it apart.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio::Completion;
    /// assert!(Completion::Expired.is_timeout());
    /// assert!(!Completion::ShutDown.is_timeout());
    /// assert!(!Completion::Forced.is_timeout());
    /// ```
    pub fn is_timeout(self) -> bool {
        self == Completion::Expired
    }

    /// Whether the purgatory (or its timer) shut down while the operation
    /// was pending: [`ShutDown`](Self::ShutDown) only.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio::Completion;
    /// assert!(Completion::ShutDown.is_shut_down());
    /// assert!(!Completion::Expired.is_shut_down());
    /// ```
    pub fn is_shut_down(self) -> bool {
        self == Completion::ShutDown
    }

    /// Whether the operation's condition or a caller completed it:
    /// [`Satisfied`](Self::Satisfied) or [`Forced`](Self::Forced).
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio::Completion;
    /// assert!(Completion::Satisfied.is_satisfied());
    /// assert!(Completion::Forced.is_satisfied());
    /// assert!(!Completion::Expired.is_satisfied());
    /// ```
    pub fn is_satisfied(self) -> bool {
        matches!(self, Completion::Satisfied | Completion::Forced)
    }
}

/// A request parked in a [`Purgatory`](crate::Purgatory) until it can be
/// answered or its delay passes; completing it gives its answer, which
/// awaiting its [`Parked`](crate::Parked) handle resolves to.
///
/// This is [`DelayedOperation`] with a return value: implement this trait when
/// the code that parks a request awaits its answer (an async server's fetch
/// returns its records, a produce its error code), and `DelayedOperation`
/// when the operation answers through callbacks of its own. Every
/// `DelayedOperation` is a `DelayedRequest` whose [`Output`](Self::Output)
/// is its [`Completion`], so one purgatory API serves both. A type
/// implements one of the two, not both.
///
/// The callback contract is [`DelayedOperation`]'s:
/// [`answer`](Self::answer) is its `on_complete`, runs exactly once on
/// whichever path wins, under the operation's lock, and may call anything
/// on the purgatory and its timer. The answer is handed to the task awaiting
/// the [`Parked`](crate::Parked) handle; if no handle is left (it was
/// dropped, or the operation was parked with
/// [`try_complete_else_watch`](crate::Purgatory::try_complete_else_watch)),
/// it is dropped right away, after the lock, on the completing thread.
///
/// # Examples
///
/// A long-poll: the fetch returns whatever the log holds from its offset,
/// at once if there is data, else when data arrives or `max_wait` passes.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use purgatorio::{Completion, DelayedRequest, ManualClock, Purgatory, Timer};
///
/// struct Fetch { log: Arc<Mutex<Vec<String>>>, offset: usize, max_wait: Duration }
///
/// impl DelayedRequest for Fetch {
///     type Output = Vec<String>;
///     fn delay(&self) -> Duration { self.max_wait }
///     fn try_complete(&mut self) -> bool { self.log.lock().unwrap().len() > self.offset }
///     fn answer(&mut self, _: Completion) -> Vec<String> {
///         self.log.lock().unwrap()[self.offset..].to_vec() // empty at max_wait
///     }
/// }
///
/// let clock = ManualClock::new();
/// let fetches: Purgatory<&str, Fetch> =
///     Purgatory::builder().timer(Timer::builder().clock(clock.clone())).build()?;
/// let log = Arc::new(Mutex::new(Vec::new()));
/// let fetch = |offset| Fetch { log: log.clone(), offset, max_wait: Duration::from_millis(500) };
///
/// let waiting = fetches.park(fetch(0), ["orders"])?;
/// log.lock().unwrap().push("order 1".to_string());   // a produce...
/// fetches.check_and_complete("orders")?;             // ...completes the fetch
/// # use futures_executor::block_on;
/// assert_eq!(block_on(waiting), Some(vec!["order 1".to_string()]));
///
/// let empty = fetches.park(fetch(1), ["orders"])?;     // nothing past offset 1
/// clock.advance(Duration::from_millis(500));         // max_wait passes
/// assert_eq!(block_on(empty), Some(vec![]));
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
pub trait DelayedRequest: Send + 'static {
    /// What completing the request gives: the answer an awaiting task gets.
    type Output: Send + 'static;

    /// How long the request may wait before it expires.
    fn delay(&self) -> Duration;

    /// Checks whether the request can be answered now; `true` completes it.
    fn try_complete(&mut self) -> bool;

    /// Runs exactly once, when the request completes, with the reason;
    /// returns the answer.
    fn answer(&mut self, completion: Completion) -> Self::Output;

    /// The answer again, for a [`Parked`](crate::Parked) handle polled after
    /// it resolved: a [`DelayedOperation`]'s answer is its completion, which
    /// can be given again; a request's own answer was handed out once.
    /// Not for users to call or override.
    #[doc(hidden)]
    fn answer_again(completion: Completion) -> Option<Self::Output>
    where
        Self: Sized,
    {
        let _ = completion;
        None
    }
}

/// Every [`DelayedOperation`] is a [`DelayedRequest`] whose answer is how it
/// completed: awaiting its [`Parked`](crate::Parked) handle gives
/// `Some(completion)`.
impl<T: DelayedOperation> DelayedRequest for T {
    type Output = Completion;

    fn delay(&self) -> Duration {
        DelayedOperation::delay(self)
    }

    fn try_complete(&mut self) -> bool {
        DelayedOperation::try_complete(self)
    }

    fn answer(&mut self, completion: Completion) -> Completion {
        self.on_complete(completion);
        completion
    }

    fn answer_again(completion: Completion) -> Option<Completion> {
        Some(completion)
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
