//! Delayed operations and the cell that makes their completion exactly-once.
//!
//! Every path that can complete an operation (a `try_complete` from
//! `try_complete_else_watch` or `check_and_complete`, the timer's expiry,
//! shutdown) takes the operation's own lock, checks `done`, sets it, and only
//! then runs the user's callbacks, still under that lock. So `on_complete`
//! runs once, and expiry never runs it while another thread is inside
//! `try_complete`. User callbacks run under `catch_unwind`: a panic is
//! counted and leaves the operation done.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex};
use crate::timer::{Task, TimerHandle};

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
///   wins: a successful `try_complete`, or expiry.
/// * [`on_expiration`](Self::on_expiration) runs after `on_complete`, only when
///   the operation completed because its delay passed (or the purgatory shut
///   down).
/// * Callbacks run under the operation's own lock and no other lock of the
///   purgatory's or the timer's. A callback may call
///   [`check_and_complete`](crate::Purgatory::check_and_complete),
///   [`try_complete_else_watch`](crate::Purgatory::try_complete_else_watch)
///   and the timer without deadlock (but must not wait for *this* operation to
///   complete, or for another thread that waits for it).
/// * A callback that panics is caught and counted in
///   [`PurgatoryMetrics::panics`](crate::PurgatoryMetrics::panics); the
///   operation is then done (a panic in `try_complete` completes it without
///   callbacks) and the purgatory keeps working.
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

/// Counters shared by the purgatory and its timer tasks.
#[derive(Debug, Default)]
pub(crate) struct OpCounters {
    /// Operations completed other than by expiry: a successful
    /// `try_complete`, or `Parked::force_complete`.
    pub(crate) completed_by_try: AtomicU64,
    /// Operations completed by expiry (including shutdown).
    pub(crate) expired: AtomicU64,
    /// Panics caught in callbacks.
    pub(crate) panics: AtomicU64,
    /// Watch-list entries of done operations not yet removed.
    pub(crate) lingering: AtomicUsize,
}

/// What an operation's lock protects.
pub(crate) struct OpState<O> {
    /// The user's operation; `None` once handed back by `cancel_for_key`.
    op: Option<O>,
    /// The operation's timer, once added.
    timer: Option<TimerHandle<Job<O>>>,
}

/// An operation shared by the watch lists and the timer.
pub(crate) struct Op<O> {
    /// The operation and its timer handle.
    state: Mutex<OpState<O>>,
    /// Set, under the lock, when the operation completed or was cancelled;
    /// read without it to skip and purge done entries.
    done: AtomicBool,
    /// Number of watch lists the operation was added to.
    watches: AtomicUsize,
    /// Set by a watcher that found the lock taken: the holder must try again
    /// after releasing it (Kafka's `tryCompletePending`).
    retry: AtomicBool,
}

/// How a completion came about.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// `try_complete` returned true.
    Completed,
    /// The delay passed.
    Expired,
}

impl<O: DelayedOperation> Op<O> {
    /// A fresh, pending operation.
    pub(crate) fn new(op: O) -> Self {
        Op {
            state: Mutex::new(OpState {
                op: Some(op),
                timer: None,
            }),
            done: AtomicBool::new(false),
            watches: AtomicUsize::new(0),
            retry: AtomicBool::new(false),
        }
    }

    /// Whether the operation is done (completed, expired or cancelled).
    #[inline]
    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Counts one more watch list holding this operation.
    pub(crate) fn add_watch(&self) {
        self.watches.fetch_add(1, Ordering::Relaxed);
    }

    /// Tries to complete the operation without ever blocking on its lock
    /// (Kafka's `maybeTryComplete`); returns whether this call completed it.
    ///
    /// If another thread holds the lock, this call raises `retry` and leaves;
    /// the holder sees the flag after releasing the lock and tries again. If
    /// the holder may already have looked at the flag (this call was the one
    /// to raise it), this call tries once more itself. So an event that
    /// arrived before this call is never missed, and a callback that calls
    /// `check_and_complete` never waits for another operation's lock.
    ///
    /// Every access to `retry` is a read-modify-write, which reads the
    /// latest value, and acquires what the raiser released: the holder that
    /// clears a raised flag sees the raiser's event in `try_complete` even if
    /// the user's condition is a relaxed atomic. (A plain store and load, as
    /// in Kafka's `tryCompletePending`, is a store-buffering pattern: the
    /// holder could clear the flag and still read the condition stale. The
    /// loom model `retry_flag_never_loses_a_completion` found that.)
    pub(crate) fn try_complete_watched(&self, counters: &OpCounters) -> bool {
        loop {
            if self.is_done() {
                return false;
            }
            let retry = match self.state.try_lock() {
                Some(mut state) => {
                    self.retry.swap(false, Ordering::AcqRel);
                    if self.try_complete_locked(&mut state, counters) {
                        return true;
                    }
                    drop(state);
                    self.retry.swap(false, Ordering::AcqRel)
                }
                None => !self.retry.swap(true, Ordering::AcqRel),
            };
            if !retry {
                return false;
            }
        }
    }

    /// Runs `f` with the operation locked, for a caller that may leave it
    /// pending (`park`). Returns `f`'s result and whether a retry completed
    /// the operation after the unlock.
    ///
    /// A watcher that found the lock taken meanwhile raised `retry` and left.
    /// So if the operation is still pending after the unlock, this tries
    /// again on the watcher's behalf. Without that, a `check_and_complete`
    /// that arrived while `park` held the lock (registering, or storing the
    /// timer) gave up, and its event was lost: the loom model
    /// `watch_races_check_and_complete_and_purge` found that.
    pub(crate) fn with_lock<R>(
        &self,
        counters: &OpCounters,
        f: impl FnOnce(&mut OpState<O>) -> R,
    ) -> (R, bool) {
        let result = f(&mut self.state.lock());
        let retried = !self.is_done()
            && self.retry.swap(false, Ordering::AcqRel)
            && self.try_complete_watched(counters);
        (result, retried)
    }

    /// Tries to complete the operation; the caller holds its lock.
    pub(crate) fn try_complete_locked(
        &self,
        state: &mut OpState<O>,
        counters: &OpCounters,
    ) -> bool {
        if self.is_done() {
            return false;
        }
        let Some(op) = state.op.as_mut() else {
            return false;
        };
        match catch_unwind(AssertUnwindSafe(|| op.try_complete())) {
            Ok(true) => {
                self.finish(state, Outcome::Completed, counters);
                true
            }
            Ok(false) => false,
            Err(_) => {
                counters.panics.fetch_add(1, Ordering::Relaxed);
                self.mark_done(state, counters);
                false
            }
        }
    }

    /// Completes the operation unless it is done already: `Completed` is
    /// Kafka's `forceComplete` (whatever its condition), `Expired` the timeout
    /// path. Returns whether this call completed it.
    pub(crate) fn complete(&self, outcome: Outcome, counters: &OpCounters) -> bool {
        let mut state = self.state.lock();
        if self.is_done() || state.op.is_none() {
            return false;
        }
        self.finish(&mut state, outcome, counters);
        true
    }

    /// Takes the operation back without completing it, for `cancel_for_key`,
    /// which has just removed one watch-list entry of it. Returns `None` if it
    /// is done already.
    pub(crate) fn cancel_detached(&self, counters: &OpCounters) -> Option<O> {
        let mut state = self.state.lock();
        if self.is_done() {
            // Its entries were counted as lingering; one of them is gone.
            sub_saturating(&counters.lingering, 1);
            return None;
        }
        self.watches.fetch_sub(1, Ordering::Relaxed);
        self.mark_done(&mut state, counters);
        state.op.take()
    }

    /// Completes the operation as expired if it is not done, for shutdown,
    /// after its watch-list entries were dropped. Returns whether this call
    /// expired it.
    pub(crate) fn expire_detached(&self, counters: &OpCounters) -> bool {
        self.watches.store(0, Ordering::Relaxed);
        self.complete(Outcome::Expired, counters)
    }

    /// Stores the timer handle, or cancels the timer at once if the operation
    /// completed before the handle arrived. Returns whether a retry raised
    /// meanwhile completed the operation (see [`with_lock`](Self::with_lock)).
    pub(crate) fn set_timer(&self, handle: TimerHandle<Job<O>>, counters: &OpCounters) -> bool {
        let (late, retried) = self.with_lock(counters, |state| {
            if self.is_done() {
                Some(handle)
            } else {
                state.timer = Some(handle);
                None
            }
        });
        if let Some(handle) = late {
            handle.cancel();
        }
        retried
    }

    /// Marks the operation done, cancels its timer, and runs the callbacks.
    fn finish(&self, state: &mut OpState<O>, outcome: Outcome, counters: &OpCounters) {
        self.mark_done(state, counters);
        let counter = match outcome {
            Outcome::Completed => &counters.completed_by_try,
            Outcome::Expired => &counters.expired,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let Some(op) = state.op.as_mut() else { return };
        let ran = catch_unwind(AssertUnwindSafe(|| {
            op.on_complete();
            if outcome == Outcome::Expired {
                op.on_expiration();
            }
        }));
        if ran.is_err() {
            counters.panics.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts the operation's watch-list entries as lingering, sets `done`,
    /// and cancels the timer.
    fn mark_done(&self, state: &mut OpState<O>, counters: &OpCounters) {
        // Count first: whoever removes an entry does so because it saw
        // `done`, so its subtraction comes after this addition.
        counters
            .lingering
            .fetch_add(self.watches.load(Ordering::Relaxed), Ordering::Relaxed);
        self.done.store(true, Ordering::Release);
        if let Some(timer) = state.timer.take() {
            // Taking the timer shard's lock under the op lock is the one
            // nesting (op → timer shard); the timer never takes an op lock.
            timer.cancel();
        }
    }
}

/// Subtracts `n` from `counter`, stopping at zero.
pub(crate) fn sub_saturating(counter: &AtomicUsize, n: usize) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(n))
    });
}

/// What the purgatory's timer runs on its workers.
pub(crate) enum Job<O> {
    /// Expire an operation.
    Expire {
        /// The operation.
        op: Arc<Op<O>>,
        /// Where to count.
        counters: Arc<OpCounters>,
    },
    /// Background work, such as a purge of the watch lists.
    Run(Box<dyn FnOnce() + Send>),
}

impl<O: DelayedOperation> Task for Job<O> {
    fn run(self) {
        match self {
            Job::Expire { op, counters } => {
                op.complete(Outcome::Expired, &counters);
            }
            Job::Run(work) => work(),
        }
    }
}
