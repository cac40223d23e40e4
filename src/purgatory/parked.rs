//! [`Parked`]: one parked operation, completed directly.

use std::fmt;
use std::sync::Arc;

use super::op::{Op, OpCounters, Request};
use super::operation::DelayedOperation;

/// A handle to one operation in a [`Purgatory`](crate::Purgatory), from [`Purgatory::park`](crate::Purgatory::park).
///
/// Completing through the handle is O(1): it locks just this operation. The
/// operation's entries leave the watch lists at the next check of their keys
/// or the next purge.
pub struct Parked<O> {
    /// The operation.
    op: Arc<Op<O>>,
    /// Where completions are counted.
    counters: Arc<OpCounters>,
    /// Whether `park` completed it at once.
    completed_now: bool,
}

impl<O> fmt::Debug for Parked<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parked")
            .field("completed_now", &self.completed_now)
            .finish()
    }
}

impl<O: DelayedOperation> Parked<O> {
    /// The handle of `op`, counted in `counters`; `completed_now` if `park`
    /// completed it at once.
    pub(super) fn new(op: Arc<Op<O>>, counters: Arc<OpCounters>, completed_now: bool) -> Self {
        Parked {
            op,
            counters,
            completed_now,
        }
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
        self.op.try_complete(&self.counters)
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
        self.op.complete(Request::Force, &self.counters)
    }

    /// Whether the operation is done: completed, expired or cancelled.
    ///
    /// # Examples
    ///
    /// See [`Purgatory::park`](crate::Purgatory::park).
    pub fn is_done(&self) -> bool {
        self.op.is_done()
    }
}
