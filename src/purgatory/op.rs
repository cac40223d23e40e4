//! Delayed operations and the cell that makes their completion exactly-once.
//!
//! ## The operation's lock
//!
//! Every path that completes an operation (a `try_complete` from
//! `try_complete_else_watch` or `check_and_complete`, `force_complete`, the
//! timer's expiry, shutdown) takes the operation's own lock, checks `done`,
//! sets it, and runs the user's callbacks under that lock. So `on_complete`
//! runs once, and never while another thread is inside `try_complete`. This
//! lock is the one lock of ours that user code runs under. The user's value
//! is taken out as the operation finishes and dropped only after the lock is
//! released, so its `Drop` runs with no lock of ours held.
//!
//! ## Nobody waits for an operation from inside a callback
//!
//! A thread that holds an operation's lock (it is running a callback) never
//! waits for another operation's lock, and expiry never waits for one
//! either. Where the lock is taken, the caller leaves a *request* in the
//! operation's `requests` word instead, and the holder carries it out right
//! after releasing the lock (Kafka's `tryCompletePending`, widened):
//!
//! | bit | left by | the holder then |
//! |---|---|---|
//! | [`RETRY`] | an event (`check_and_complete`, `Parked::try_complete`) | tries again |
//! | [`RETRY_NESTED`] | an event reported from inside a `try_complete` | tries again, at most once per call |
//! | [`FORCE`] | `force_complete` from inside a callback | completes it |
//! | [`EXPIRE`] | expiry | expires it |
//! | [`SHUT_DOWN`] | shutdown from inside a callback | completes it as shut down |
//!
//! So no cycle of operation locks can form, whatever the callbacks call, and
//! a `try_complete` that reports its own key gets one more attempt instead
//! of spinning for ever. Threads outside every callback may wait for an
//! operation's lock (`force_complete`, `cancel_for_key`, shutdown): they hold
//! none, so they close no cycle.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::counters::OpCounters;
use super::operation::{Completion, DelayedRequest};
use super::outcome::{decode, encode, Outcome, AWAITED, GONE};
use super::request::{in_callback, Depth, Request, RETRY_NESTED};
use crate::rendezvous::WakerSlot;
use crate::sync::{AtomicBool, AtomicU8, AtomicUsize, Mutex, MutexGuard};
use crate::timer::{BoxTask, Entry, Job, Leftover};

/// What an operation's lock protects.
struct OpState<O: DelayedRequest> {
    /// The user's operation: `None` once it finished (and was dropped) or
    /// was handed back by `cancel_for_key`.
    op: Option<O>,
    /// The operation's timer, added while registration held the lock.
    timer: Option<Entry>,
    /// What `answer` returned, until the handle's task takes it (or, with
    /// no handle left, until it is dropped after the lock).
    answer: Option<O::Output>,
}

/// An operation shared by the watch lists and the timer.
pub(crate) struct Op<O: DelayedRequest> {
    /// The operation and its timer handle: the operation's lock.
    state: Mutex<OpState<O>>,
    /// Set, under the operation's lock, when it completed or was cancelled;
    /// read without it to skip and purge done entries.
    done: AtomicBool,
    /// Number of watch lists the operation was added to.
    watches: AtomicUsize,
    /// Requests left for the lock's holder (see the module docs).
    requests: AtomicUsize,
    /// The purgatory's counters, for the timer's expiry.
    counters: Arc<OpCounters>,
    /// How the operation ended, encoded (see [`encode`]), for the task
    /// awaiting its [`Parked`](super::Parked) handle; 0 while it is pending;
    /// plus [`AWAITED`] once a task stored its waker, and [`GONE`] once the
    /// handle was dropped. Every side changes it with a read-modify-write,
    /// so they are totally ordered: a task that marks it after the outcome
    /// was published sees the outcome, and a publisher that comes after the
    /// mark wakes the stored waker; of the publisher and the dropped
    /// handle, exactly one sees the other and drops a stored answer nobody
    /// will take.
    outcome: AtomicU8,
    /// That task's waker.
    waiter: WakerSlot,
}

/// An operation locked by this thread. Dropping it releases the lock, then
/// drops the user's value if the operation finished while locked.
struct Locked<'a, O: DelayedRequest> {
    /// The lock's guard; declared first, so released first.
    state: MutexGuard<'a, OpState<O>>,
    /// What the timer's wheel let go of when giving up the operation's
    /// timer emptied it: freed after the lock.
    leftover: Option<Leftover<BoxTask>>,
    /// The cell.
    op: &'a Op<O>,
    /// The finished operation's value, to drop after the lock.
    finished: Option<O>,
    /// How it ended, if it did while locked: announced to an awaiting task
    /// after the lock is released and the value dropped.
    ended: Announce<'a, O>,
}

/// Announces how an operation ended, on drop: declared last in [`Locked`],
/// so it runs after the lock is released and the finished value dropped.
struct Announce<'a, O: DelayedRequest> {
    /// The operation.
    op: &'a Op<O>,
    /// How it ended, once it did.
    outcome: Option<Outcome>,
}

impl<O: DelayedRequest> Drop for Announce<'_, O> {
    fn drop(&mut self) {
        if let Some(outcome) = self.outcome.take() {
            let before = self.op.outcome.fetch_or(encode(outcome), Ordering::AcqRel);
            if before & AWAITED != 0 {
                self.op.waiter.wake();
            }
            if before & GONE != 0 {
                // The handle went before the answer was published: nobody
                // will take it.
                self.op.drop_answer();
            }
        }
    }
}

impl<O: DelayedRequest> Drop for Locked<'_, O> {
    fn drop(&mut self) {
        // The fields drop after this: the guard, then the finished value,
        // whose `Drop` may call anything since no lock is held by then.
        Depth::update(|d| d.held -= 1);
    }
}

impl<'a, O: DelayedRequest> Locked<'a, O> {
    /// The operation's counters, for as long as the operation is borrowed.
    fn counters(&self) -> &'a OpCounters {
        let op: &'a Op<O> = self.op;
        &op.counters
    }

    /// Carries out `request` on the pending operation; returns how it
    /// completed here, if it did.
    fn carry_out(&mut self, request: Request) -> Option<Completion> {
        match request.completion() {
            None => self.try_complete().then_some(Completion::Satisfied),
            Some(completion) => self.finish(completion).then_some(completion),
        }
    }

    /// Runs `try_complete`; completes the operation if it returns `true`.
    /// Returns whether it did.
    fn try_complete(&mut self) -> bool {
        let counters = self.counters();
        if self.op.is_done() {
            return false;
        }
        let Some(op) = self.state.op.as_mut() else {
            return false;
        };
        Depth::update(|d| d.trying += 1);
        let result = catch_unwind(AssertUnwindSafe(|| op.try_complete()));
        Depth::update(|d| d.trying -= 1);
        match result {
            Ok(true) => self.finish(Completion::Satisfied),
            Ok(false) => false,
            Err(_) => {
                counters.panicked();
                self.mark_done(true);
                self.finished = self.state.op.take();
                self.ended.outcome = Some(Outcome::Panicked);
                false
            }
        }
    }

    /// Completes the operation unless it is done: marks it done, runs
    /// `on_complete` with `completion`, and takes the value out to drop
    /// after the lock. Returns whether this call completed it.
    fn finish(&mut self, completion: Completion) -> bool {
        let counters = self.counters();
        if self.op.is_done() || self.state.op.is_none() {
            return false;
        }
        // An expired operation's timer has fired; any other may still be
        // pending (on a shared timer, even at shutdown).
        let cancel_timer = completion != Completion::Expired;
        self.mark_done(cancel_timer);
        counters.count(completion);
        if let Some(op) = self.state.op.as_mut() {
            match catch_unwind(AssertUnwindSafe(|| op.answer(completion))) {
                Ok(answer) => self.state.answer = Some(answer),
                Err(_) => counters.panicked(),
            }
        }
        self.finished = self.state.op.take();
        self.ended.outcome = Some(Outcome::Completed(completion));
        true
    }

    /// Counts the operation's watch-list entries as lingering, sets `done`,
    /// and takes the timer entry, giving the timer up if `cancel_timer`.
    fn mark_done(&mut self, cancel_timer: bool) {
        let counters = self.counters();
        // Count first: whoever removes an entry does so because it saw
        // `done`, so its subtraction comes after this addition.
        counters
            .lingering
            .fetch_add(self.op.watches.load(Ordering::Relaxed), Ordering::Relaxed);
        self.op.done.store(true, Ordering::Release);
        if let Some(entry) = self.state.timer.take() {
            if counters.count_delayed {
                counters.delayed.fetch_sub(1, Ordering::Relaxed);
            }
            if let (true, Some(timer)) = (cancel_timer, &counters.timer) {
                // op lock → timer shard (or its inbox) is the one nesting;
                // the timer never takes an operation's lock.
                self.leftover = Some(timer.discard(entry));
            }
        }
    }
}

impl<O: DelayedRequest> Op<O> {
    /// The [`Parked`](super::Parked) handle was dropped: drops the awaiting
    /// task's waker, so that task is neither kept alive nor woken for
    /// nothing, and an answer nobody will take now (if the operation already
    /// ended; otherwise its publisher drops it). No read-modify-write when
    /// it ended already and no task awaited it; one otherwise.
    pub(crate) fn release_handle(&self) {
        // Once the outcome is published with no task awaiting, nobody reads
        // `GONE` any more: the publisher looked when it published, and only
        // this handle polls. A read then does (it acquires the published
        // answer as the read-modify-write did): one read-modify-write fewer
        // per request completed through its handle.
        let now = self.outcome.load(Ordering::Acquire);
        let before = if decode(now).is_some() && now & AWAITED == 0 {
            now
        } else {
            self.outcome.fetch_or(GONE, Ordering::AcqRel)
        };
        if before & AWAITED != 0 {
            self.waiter.clear();
        }
        if decode(before).is_some() {
            self.drop_answer();
        }
    }

    /// Drops a stored answer nobody will take, after the lock. The operation
    /// ended, so whoever holds its lock runs no callback: the wait is short.
    fn drop_answer(&self) {
        if std::mem::needs_drop::<O::Output>() {
            let answer = self.state.lock().answer.take();
            drop(answer);
        }
    }

    /// The answer of an operation that ended as `ended`, for the awaiting
    /// task: taken once; a [`DelayedOperation`](super::DelayedOperation)'s
    /// completion can be given again.
    fn take_answer(&self, ended: Outcome) -> Option<O::Output> {
        let completion = ended.completion()?;
        let answer = self.state.lock().answer.take();
        answer.or_else(|| O::answer_again(completion))
    }
    /// A fresh, pending operation, counted in `counters`.
    pub(crate) fn new(op: O, counters: Arc<OpCounters>) -> Self {
        Op {
            state: Mutex::new(OpState {
                op: Some(op),
                timer: None,
                answer: None,
            }),
            done: AtomicBool::new(false),
            watches: AtomicUsize::new(0),
            requests: AtomicUsize::new(0),
            counters,
            outcome: AtomicU8::new(0),
            waiter: WakerSlot::default(),
        }
    }

    /// Whether the operation is done (completed, expired or cancelled).
    #[inline]
    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Records that `watches` watch lists hold this operation. Called once,
    /// by the registration, under the operation's lock: the one place that
    /// reads the count, [`Locked::mark_done`], runs under that lock too, so
    /// a plain store after the last watch does what a read-modify-write per
    /// watch did.
    pub(crate) fn set_watches(&self, watches: usize) {
        self.watches.store(watches, Ordering::Relaxed);
    }

    /// Wraps a held guard.
    fn locked<'a>(&'a self, state: MutexGuard<'a, OpState<O>>) -> Locked<'a, O> {
        Depth::update(|d| d.held += 1);
        Locked {
            state,
            leftover: None,
            op: self,
            finished: None,
            ended: Announce {
                op: self,
                outcome: None,
            },
        }
    }

    /// Waits for the lock. Only for a thread outside every callback, or for
    /// an operation no other thread can see yet.
    fn lock(&self) -> Locked<'_, O> {
        self.locked(self.state.lock())
    }

    /// Takes the lock if it is free.
    fn try_lock(&self) -> Option<Locked<'_, O>> {
        self.state.try_lock().map(|state| self.locked(state))
    }

    /// Registers a fresh operation that no other thread can see yet, all
    /// under its lock: runs `try_complete`; if that fails, runs `watch` and
    /// tries again (an event that arrived during `watch` is seen by the
    /// second try, or left as a request that [`settle`](Self::settle) then
    /// honours); if it is still pending, `arm` adds it to the timer and the
    /// handle is kept. An expiry that fires before the lock is released
    /// leaves its request too. `arm` giving no handle (the timer shut down
    /// while this ran) completes the operation as shut down. Returns whether
    /// it completed.
    pub(crate) fn register(
        &self,
        watch: impl FnOnce(),
        arm: impl FnOnce() -> Option<Entry>,
    ) -> bool {
        let completed = {
            let mut locked = self.lock();
            if locked.try_complete() {
                true
            } else if self.is_done() {
                false
            } else {
                watch();
                if locked.try_complete() {
                    true
                } else {
                    if !self.is_done() {
                        match arm() {
                            Some(entry) => {
                                if self.counters.count_delayed {
                                    self.counters.delayed.fetch_add(1, Ordering::Relaxed);
                                }
                                locked.state.timer = Some(entry);
                            }
                            None => {
                                locked.finish(Completion::ShutDown);
                            }
                        }
                    }
                    false
                }
            }
        };
        completed || self.settle() == Some(Completion::Satisfied)
    }

    /// After a lock hold that left the operation pending: carries out the
    /// requests left meanwhile. Returns how this call completed it, if it
    /// did.
    fn settle(&self) -> Option<Completion> {
        match self.requests.swap(0, Ordering::AcqRel) {
            0 => None,
            raised => self.drive(Request::from_bits(raised), raised & !RETRY_NESTED != 0),
        }
    }

    /// Carries out `request` without ever waiting for the lock (Kafka's
    /// `maybeTryComplete`); returns how this call completed the operation,
    /// if it did. That can be another caller's request carried out on its
    /// behalf: a checker that expires an operation for the timer has not
    /// completed it, so callers compare the outcome with what they asked.
    ///
    /// If another thread holds the lock, this leaves the request for it and
    /// goes; the holder carries it out after releasing the lock. If the
    /// holder may already have looked (this call's request was the first
    /// one left), this call looks once more itself. So an event that arrived
    /// before this call is never missed.
    ///
    /// Every raise and every clear of `requests` is a read-modify-write,
    /// which reads the latest value and acquires what the raiser released:
    /// the holder that clears a raised retry sees the raiser's event in
    /// `try_complete` even if the user's condition is a relaxed atomic.
    /// (The holder reads it plainly before its try, to skip clearing
    /// nothing; the read-modify-write after the lock is released is the
    /// one that never misses a raise. A plain store and load,
    /// as in Kafka's `tryCompletePending`, is a store-buffering pattern: the
    /// holder could clear the flag and still read the condition stale. The
    /// loom model `retry_flag_never_loses_a_completion` found that.)
    pub(crate) fn request(&self, request: Request) -> Option<Completion> {
        self.drive(request, true)
    }

    /// Runs `try_complete` without waiting for the lock; returns whether
    /// this call completed the operation (a forced completion left by
    /// another caller counts, an expiry does not).
    pub(crate) fn try_complete(&self) -> bool {
        matches!(
            self.request(Request::Try),
            Some(Completion::Satisfied | Completion::Forced)
        )
    }

    /// [`request`](Self::request), with `nested_retry` telling whether a
    /// retry raised from inside a `try_complete` may still be honoured.
    fn drive(&self, mut request: Request, mut nested_retry: bool) -> Option<Completion> {
        loop {
            if self.is_done() {
                return None;
            }
            let Some(mut locked) = self.try_lock() else {
                if self.requests.fetch_or(request.bit(), Ordering::AcqRel) != 0 {
                    return None;
                }
                continue;
            };
            // What was raised so far is covered now: a retry by this try, a
            // forced completion or an expiry by carrying it out here. Read
            // first, taken only if set: mostly nothing is, and a check tries
            // every operation of a key, so the read-modify-write cost one
            // per operation tried. A raise this read misses (a stale 0) is
            // not lost: it stays set, and the read-modify-write after the
            // lock is released takes it and carries it out.
            let raised = if self.requests.load(Ordering::Relaxed) == 0 {
                0
            } else {
                self.requests.swap(0, Ordering::AcqRel)
            };
            request = request.max(Request::from_bits(raised));
            if let Some(outcome) = locked.carry_out(request) {
                return Some(outcome);
            }
            drop(locked);
            // Still pending (or done by a panic): honour what was raised
            // while this call held the lock. A retry raised from inside a
            // `try_complete` counts once, so one that reports its own key
            // cannot keep the loop going.
            let raised = self.requests.swap(0, Ordering::AcqRel);
            if raised & !RETRY_NESTED == 0 {
                if raised == 0 || !nested_retry {
                    return None;
                }
                nested_retry = false;
            }
            request = Request::from_bits(raised);
        }
    }

    /// Completes the operation (`Force`) or expires it (`Expire`) unless it
    /// is done; returns whether this call did. Waits for the lock, unless
    /// the calling thread is inside a callback: then a held lock gets the
    /// request left for its holder, and this returns `false`.
    pub(crate) fn complete(&self, request: Request) -> bool {
        let wanted = request.completion();
        debug_assert!(wanted.is_some(), "complete forces, expires or shuts down");
        if self.is_done() {
            return false;
        }
        let outcome = if in_callback() {
            self.request(request)
        } else {
            self.lock().carry_out(request)
        };
        outcome.is_some() && outcome == wanted
    }

    /// Takes the operation back without completing it (`cancel_for_key`).
    /// Waits for the lock unless the calling thread is inside a callback.
    /// `None` if it is done, or locked while called from a callback.
    pub(crate) fn cancel(&self) -> Option<O> {
        if self.is_done() {
            return None;
        }
        let mut locked = if in_callback() {
            self.try_lock()?
        } else {
            self.lock()
        };
        if self.is_done() {
            return None;
        }
        locked.mark_done(true);
        self.counters.cancelled.fetch_add(1, Ordering::Relaxed);
        self.counters.figures.cancelled();
        locked.ended.outcome = Some(Outcome::Cancelled);
        locked.state.op.take()
    }

    /// How the operation ended, once it has; otherwise registers `cx`'s
    /// waker to be woken when it does.
    pub(crate) fn poll_outcome(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<O::Output>> {
        if let Some(ended) = self.ended() {
            return std::task::Poll::Ready(self.take_answer(ended));
        }
        self.waiter.register(cx);
        match decode(self.outcome.fetch_or(AWAITED, Ordering::AcqRel)) {
            Some(ended) => {
                // Published meanwhile: the publisher may have found the
                // waker or not; either way nobody waits on it any more.
                self.waiter.clear();
                std::task::Poll::Ready(self.take_answer(ended))
            }
            None => std::task::Poll::Pending,
        }
    }

    /// How the operation ended, if it has.
    pub(crate) fn ended(&self) -> Option<Outcome> {
        decode(self.outcome.load(Ordering::Acquire))
    }

    /// Completes the operation as shut down if it is not done, after its
    /// watch-list entries were dropped. Returns whether this call did.
    pub(crate) fn shut_down_detached(&self) -> bool {
        self.watches.store(0, Ordering::Relaxed);
        self.complete(Request::ShutDown)
    }
}

/// The operation is its own timer job: the timer carries it in its `Arc`,
/// so parking allocates nothing for the timer.
impl<O: DelayedRequest> Job for Op<O> {
    fn fire(self: Arc<Self>) {
        // Never waits: a callback holding the operation expires it on
        // release, so a worker cannot be stuck behind a callback that is
        // shutting the purgatory down.
        self.request(Request::Expire);
    }

    fn abandon(self: Arc<Self>) {
        // The timer went away with the expiry pending (or the operation
        // finished and cancelled it: then it is done and this does nothing).
        if !self.is_done() {
            self.request(Request::ShutDown);
        }
    }
}
