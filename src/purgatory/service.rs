//! [`Purgatory`]: park operations on keys, complete them by key, expire them
//! on time.

use std::borrow::Borrow;
use std::cell::Cell;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::core::Core;
use super::metrics::PurgatoryMetrics;
use super::op::Op;
use super::operation::DelayedRequest;
use super::parked::Parked;
use super::request::in_callback;
use super::watchers::DefaultKeyHasher;
use crate::error::{ShutDownError, WatchError, WatchErrorKind};
use crate::time::Deadline;
use crate::timer::{BoxTask, Job, Timer};

/// Owns the timer; the last [`Purgatory`] handle drops it, which shuts down.
struct Shared<K, O: DelayedRequest, S> {
    /// Watch lists and counters.
    core: Arc<Core<K, O, S>>,
    /// Expires operations and runs purges.
    timer: Timer,
    /// Whether the timer is the purgatory's own, to stop with it.
    owns_timer: bool,
}

impl<K, O: DelayedRequest, S> Drop for Shared<K, O, S> {
    fn drop(&mut self) {
        self.core.shut_down(&self.timer, self.owns_timer);
    }
}

/// Parks delayed operations until they complete or expire.
///
/// `K` is the watch-key type (a topic, a partition, a request id…), `O` the
/// operation type. Cloning is cheap and shares the purgatory. Dropping the
/// last clone shuts it down like [`shutdown`](Self::shutdown).
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::{mpsc, Arc};
/// use std::time::Duration;
/// use purgatorio::{Completion, DelayedOperation, ManualClock, Purgatory, Timer};
///
/// /// A fetch that waits until the log reaches `min_offset`.
/// struct DelayedFetch {
///     log_end: Arc<AtomicU64>,
///     min_offset: u64,
///     reply: mpsc::Sender<&'static str>,
/// }
///
/// impl DelayedOperation for DelayedFetch {
///     fn delay(&self) -> Duration { Duration::from_millis(500) }
///     fn try_complete(&mut self) -> bool {
///         self.log_end.load(Ordering::SeqCst) >= self.min_offset
///     }
///     fn on_complete(&mut self, completion: Completion) {
///         // One answer, whichever way it ends.
///         let answer = if completion.is_timeout() { "timeout" } else { "data" };
///         self.reply.send(answer).unwrap();
///     }
/// }
///
/// let clock = ManualClock::new();
/// let purgatory: Purgatory<&str, DelayedFetch> =
///     Purgatory::builder().timer(Timer::builder().clock(clock.clone())).build()?;
/// let log_end = Arc::new(AtomicU64::new(0));
/// let (tx, rx) = mpsc::channel();
///
/// let fetch = DelayedFetch { log_end: log_end.clone(), min_offset: 10, reply: tx.clone() };
/// assert!(!purgatory.try_complete_else_watch(fetch, &["topic-a"])?); // parked
/// assert_eq!((purgatory.watched(), purgatory.delayed()), (1, 1));
///
/// log_end.store(10, Ordering::SeqCst);                          // a produce arrives
/// assert_eq!(purgatory.check_and_complete(&"topic-a")?, 1);     // completes the fetch
/// assert_eq!(rx.recv()?, "data");
///
/// let fetch = DelayedFetch { log_end, min_offset: 99, reply: tx };
/// purgatory.try_complete_else_watch(fetch, &["topic-a"])?;
/// clock.advance(Duration::from_millis(500));                   // max_wait passes
/// assert_eq!(rx.recv()?, "timeout");                            // the one answer
/// assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Purgatory<K, O: DelayedRequest, S = DefaultKeyHasher> {
    /// Shared ownership.
    owner: Arc<Shared<K, O, S>>,
}

impl<K, O: DelayedRequest, S> Clone for Purgatory<K, O, S> {
    fn clone(&self) -> Self {
        Purgatory {
            owner: Arc::clone(&self.owner),
        }
    }
}

impl<K, O: DelayedRequest, S> fmt::Debug for Purgatory<K, O, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Purgatory")
            .field("purge_interval", &self.owner.core.purge_interval)
            .field("timer", &self.owner.timer)
            .finish()
    }
}

impl<K, O, S> Purgatory<K, O, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    O: DelayedRequest,
    S: BuildHasher + Send + Sync + 'static,
{
    /// A purgatory on `core`, whose operations expire on `timer`.
    pub(super) fn new(core: Arc<Core<K, O, S>>, timer: Timer, owns_timer: bool) -> Self {
        Purgatory {
            owner: Arc::new(Shared {
                core,
                timer,
                owns_timer,
            }),
        }
    }

    /// The shared state.
    fn core(&self) -> &Core<K, O, S> {
        &self.owner.core
    }

    /// Tries to complete `op` now; if it cannot, watches it on every distinct
    /// key in `keys` and adds it to the timer with its
    /// [`delay`](DelayedRequest::delay). Returns whether it completed now.
    ///
    /// The whole registration runs under the operation's lock: try, watch,
    /// try again. An event that arrives during registration is therefore
    /// seen by the second try, or by the `check_and_complete` that reports
    /// it, or (if that call found the operation locked by the registration)
    /// by one more try right after the lock is released.
    /// [`park`](Self::park) does the same and also returns a handle to the
    /// operation.
    ///
    /// # Errors
    ///
    /// A [`WatchError`] of kind [`NoKeys`](crate::WatchErrorKind::NoKeys) if
    /// `keys` is empty, [`ShutDown`](crate::WatchErrorKind::ShutDown) if the
    /// purgatory, or the timer it shares, is shut down. Both hand the
    /// operation back, untried. (A shutdown that comes while this call runs,
    /// from another thread or from the operation's own `try_complete`,
    /// completes the operation as shut down instead: `Ok(false)`, with
    /// `on_complete` told [`Completion::ShutDown`](crate::Completion::ShutDown).)
    ///
    /// # Examples
    ///
    /// See [`Purgatory`].
    pub fn try_complete_else_watch(
        &self,
        op: O,
        keys: impl IntoIterator<Item = impl Borrow<K>>,
    ) -> Result<bool, WatchError<O>> {
        self.park(op, keys).map(|parked| parked.completed_now())
    }

    /// Like [`try_complete_else_watch`](Self::try_complete_else_watch), and
    /// returns a [`Parked`] handle that completes this one operation directly,
    /// in O(1), without scanning a watch list (Kafka's `forceComplete` on an
    /// operation the caller kept).
    ///
    /// # Errors
    ///
    /// As [`try_complete_else_watch`](Self::try_complete_else_watch).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatorio::{Completion, DelayedOperation, Purgatory};
    ///
    /// struct Produce { acked: bool }
    /// impl DelayedOperation for Produce {
    ///     fn delay(&self) -> Duration { Duration::from_secs(30) }
    ///     fn try_complete(&mut self) -> bool { self.acked }
    ///     fn on_complete(&mut self, completion: Completion) { println!("answer the producer") }
    /// }
    ///
    /// let p: Purgatory<&str, Produce> = Purgatory::builder().build().unwrap();
    /// let parked = p.park(Produce { acked: false }, &["partition-0"]).unwrap();
    /// assert!(!parked.completed_now());
    /// assert!(!parked.try_complete());   // condition still false
    /// assert!(parked.force_complete());  // the replicas acknowledged this request
    /// assert!(parked.is_done());
    /// assert_eq!(p.delayed(), 0);
    /// ```
    pub fn park(
        &self,
        op: O,
        keys: impl IntoIterator<Item = impl Borrow<K>>,
    ) -> Result<Parked<O>, WatchError<O>> {
        let core = self.core();
        let timer = &self.owner.timer;
        // A shared timer may be shut down while the purgatory is not: the
        // operation could never expire, so it is refused the same way.
        if self.is_shut_down() {
            return Err(WatchError::new(WatchErrorKind::ShutDown, op));
        }
        let keys = KeyList::collect(keys);
        if keys.is_empty() {
            return Err(WatchError::new(WatchErrorKind::NoKeys, op));
        }
        let delay = op.delay();
        let cell = Arc::new(Op::new(op, Arc::clone(&core.counters)));
        let counters = &core.counters;
        let watch = || {
            let mut watched = 0;
            for (i, key) in keys.iter().enumerate() {
                let key = key.borrow();
                if !keys.iter().take(i).any(|k| k.borrow() == key) {
                    core.watchers
                        .watch(key, core.watchers.hash(key), &cell, counters);
                    watched += 1;
                }
            }
            cell.set_watches(watched);
            counters.entries.fetch_add(watched, Ordering::Relaxed);
        };
        // The timer shut down while this ran (the check above came first):
        // no handle, and `register` completes the operation as shut down.
        // `arm` runs under the operation's lock: the driver's wake-up it may
        // owe is kept, and given once `register` has released the lock.
        let wake = Cell::new(None);
        let arm = || {
            let job: Arc<dyn Job> = Arc::clone(&cell) as Arc<dyn Job>;
            let (entry, owed) = timer
                .schedule_entry(Deadline::After(delay), BoxTask::job(job))
                .ok()?;
            wake.set(Some(owed));
            Some(entry)
        };
        let completed = cell.register(watch, arm);
        drop(wake);
        // This thread owns the shard the expiry went to: it removes, in a
        // batch, the expiries other threads gave up there when their
        // operations completed, and drops them here, where it holds no lock
        // (not from inside another operation's callback: the next `park`
        // or the driver's pass removes them then).
        if !in_callback() {
            timer.driver().collect_discards();
        }
        // Shut down while this registered: the shutdown's drain may have
        // missed the new entries, and a shared timer keeps running, so
        // complete the operation here (exactly once: whoever comes first).
        if core.closed.load(Ordering::SeqCst) {
            cell.shut_down_detached();
        }
        self.maybe_purge();
        Ok(Parked::new(cell, completed))
    }

    /// Tries every operation watched on `key`; returns how many this call
    /// completed. Done operations leave `key`'s list, and `key` goes when
    /// its list empties. An unknown key completes nothing.
    ///
    /// # Errors
    ///
    /// [`ShutDownError`] if the purgatory is shut down.
    ///
    /// # Examples
    ///
    /// See [`Purgatory`].
    pub fn check_and_complete<Q>(&self, key: &Q) -> Result<usize, ShutDownError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.on_key(key, |ops| {
            let completed = ops.iter().filter(|op| op.try_complete()).count();
            (completed, completed > 0)
        })
    }

    /// Removes `key`'s operations and hands them back, neither completed nor
    /// expired; their timers are cancelled and they leave every other list
    /// at the next purge. Operations already done are not returned.
    ///
    /// Waits for the lock of an operation whose callback runs on another
    /// thread. Called from inside a callback it never waits: an operation
    /// whose lock is taken (such as the one whose callback this is) stays
    /// watched and is not returned.
    ///
    /// # Errors
    ///
    /// [`ShutDownError`] if the purgatory is shut down.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use purgatorio::{Completion, DelayedOperation, Purgatory};
    /// struct Wait(u32);
    /// impl DelayedOperation for Wait {
    ///     fn delay(&self) -> Duration { Duration::from_secs(60) }
    ///     fn try_complete(&mut self) -> bool { false }
    ///     fn on_complete(&mut self, completion: Completion) { unreachable!("cancelled, never completed") }
    /// }
    /// let p: Purgatory<&str, Wait> = Purgatory::builder().build().unwrap();
    /// p.try_complete_else_watch(Wait(1), &["a", "b"]).unwrap();
    /// let back = p.cancel_for_key(&"a").unwrap();
    /// assert_eq!(back.len(), 1);
    /// assert_eq!(back[0].0, 1);
    /// assert_eq!(p.delayed(), 0);
    /// ```
    pub fn cancel_for_key<Q>(&self, key: &Q) -> Result<Vec<O>, ShutDownError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The cancelled operations are done now: they leave `key`'s list
        // here and their other lists at the next check or purge.
        self.on_key(key, |ops| {
            let back = ops.iter().filter_map(|op| op.cancel()).collect();
            (back, true)
        })
    }

    /// The frame of a call on one key: refuses if shut down, hashes the key
    /// once, hands `f` a copy of its live operations (tried or cancelled
    /// outside every lock), then, if `f` says some may be done now, drops
    /// the done ones from the key's list, and purges if due.
    fn on_key<Q, R>(
        &self,
        key: &Q,
        f: impl FnOnce(&[Arc<Op<O>>]) -> (R, bool),
    ) -> Result<R, ShutDownError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let core = self.core();
        if core.closed.load(Ordering::SeqCst) {
            return Err(ShutDownError);
        }
        let hash = core.watchers.hash(key);
        let ops = core.watchers.live_snapshot(key, hash, &core.counters);
        let (result, some_done) = f(&ops);
        drop(ops);
        if some_done {
            core.watchers.remove_done(key, hash, &core.counters);
        }
        self.maybe_purge();
        Ok(result)
    }

    /// Sum of the lengths of all watch lists (an operation watched on three
    /// keys counts three times; done operations count until removed).
    ///
    /// # Examples
    ///
    /// See [`Purgatory`].
    pub fn watched(&self) -> usize {
        self.core().watchers.watched()
    }

    /// Operations waiting for their delay: armed in the timer and not yet
    /// completed (this purgatory's own, also on a shared timer).
    ///
    /// # Examples
    ///
    /// See [`Purgatory`].
    pub fn delayed(&self) -> usize {
        if self.owner.owns_timer {
            self.owner.timer.len()
        } else {
            self.core().counters.delayed.load(Ordering::Relaxed)
        }
    }

    /// Number of keys that have a watch list.
    ///
    /// # Examples
    ///
    /// ```
    /// # use purgatorio::{Completion, DelayedOperation, Purgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> std::time::Duration { std::time::Duration::from_secs(9) }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self, _: Completion) {}
    /// # }
    /// let p: Purgatory<u8, Op> = Purgatory::builder().build().unwrap();
    /// p.try_complete_else_watch(Op, &[1, 2, 2]).unwrap();
    /// assert_eq!(p.keys(), 2);
    /// assert_eq!(p.watched(), 2);
    /// ```
    pub fn keys(&self) -> usize {
        self.core().watchers.keys()
    }

    /// A snapshot of the gauges and counters.
    ///
    /// # Examples
    ///
    /// See [`PurgatoryMetrics`].
    pub fn metrics(&self) -> PurgatoryMetrics {
        let core = self.core();
        let c = &core.counters;
        PurgatoryMetrics {
            watched: self.watched(),
            delayed: self.delayed(),
            satisfied: c.satisfied.load(Ordering::Relaxed),
            forced: c.forced.load(Ordering::Relaxed),
            expired: c.expired.load(Ordering::Relaxed),
            shut_down: c.shut_down.load(Ordering::Relaxed),
            cancelled: c.cancelled.load(Ordering::Relaxed),
            purged: c.purged.load(Ordering::Relaxed),
            panics: c.panics.load(Ordering::Relaxed),
        }
    }

    /// Drives expiry without a driver thread (a timer built with
    /// [`driver_thread(false)`](crate::TimerBuilder::driver_thread)): waits up to
    /// `timeout` for an operation to come due and hands everything due to the
    /// workers. Returns whether anything was due.
    ///
    /// # Examples
    ///
    /// ```
    /// # use purgatorio::{Completion, DelayedOperation, Purgatory, Timer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> std::time::Duration { std::time::Duration::ZERO }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self, _: Completion) {}
    /// # }
    /// let p: Purgatory<u8, Op> = Purgatory::builder()
    ///     .timer(Timer::builder().driver_thread(false))
    ///     .build()
    ///     .unwrap();
    /// assert!(!p.advance_clock(std::time::Duration::ZERO));
    /// ```
    pub fn advance_clock(&self, timeout: Duration) -> bool {
        self.owner.timer.advance_clock(timeout)
    }

    /// Shuts down: completes every pending operation with
    /// [`Completion::ShutDown`](crate::Completion::ShutDown), on the calling
    /// thread, and returns how many it completed. Afterwards every call
    /// returns an error; calling it again returns 0.
    ///
    /// On a timer of its own it also stops that timer, joining its threads
    /// (so it blocks while a callback runs elsewhere: in async code use
    /// [`shutdown_async`](Self::shutdown_async)). On a shared timer
    /// ([`PurgatoryBuilder::shared_timer`](crate::PurgatoryBuilder::shared_timer))
    /// the timer keeps running for its other users; shutting *that timer*
    /// down instead completes this purgatory's pending operations as shut
    /// down, and from then on `park` and `try_complete_else_watch` refuse
    /// with [`WatchErrorKind::ShutDown`](crate::WatchErrorKind::ShutDown).
    ///
    /// It may be called from a callback (so may the drop of the last
    /// handle): the worker thread it runs on, if any, is not joined (it
    /// exits once its callback returns), and an operation whose lock is held
    /// (the calling callback's own, or, from a callback, one held by another
    /// thread) completes as soon as its holder releases it and is not
    /// counted.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use purgatorio::{Completion, DelayedOperation, Purgatory, ShutDownError};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> Duration { Duration::from_secs(60) }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self, _: Completion) {}
    /// # }
    /// let p: Purgatory<u8, Op> = Purgatory::builder().build().unwrap();
    /// p.try_complete_else_watch(Op, &[1]).unwrap();
    /// assert_eq!(p.shutdown(), 1);
    /// assert_eq!(p.check_and_complete(&1), Err(ShutDownError));
    /// assert_eq!(p.shutdown(), 0);
    /// ```
    pub fn shutdown(&self) -> usize {
        self.owner
            .core
            .shut_down(&self.owner.timer, self.owner.owns_timer)
    }

    /// The timer the purgatory's operations expire on.
    pub(crate) fn timer(&self) -> &Timer {
        &self.owner.timer
    }

    /// Whether the purgatory is shut down, or the timer it shares is: then
    /// [`park`](Self::park) refuses and pending operations have completed
    /// as shut down.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use purgatorio::{Completion, DelayedOperation, Purgatory, Timer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> Duration { Duration::from_secs(60) }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self, _: Completion) {}
    /// # }
    /// let timer = Timer::builder().build()?;
    /// let p: Purgatory<u8, Op> = Purgatory::builder().shared_timer(&timer).build()?;
    /// assert!(!p.is_shut_down());
    /// timer.shutdown();
    /// assert!(p.is_shut_down());
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn is_shut_down(&self) -> bool {
        self.core().closed.load(Ordering::SeqCst) || self.owner.timer.is_shut_down()
    }

    /// The loom models' expiry path: the driver's pass and the worker's run,
    /// on the calling thread. Returns how many tasks ran.
    #[cfg(all(test, purgatorio_loom))]
    pub(crate) fn run_due_here(&self) -> usize {
        self.owner.timer.run_due_here()
    }

    /// The loom models' purge, on the calling thread.
    #[cfg(all(test, purgatorio_loom))]
    pub(crate) fn purge_now(&self) {
        self.core().purge();
    }

    /// A purge to run on another thread of a loom model; it keeps the watch
    /// lists alive, not the purgatory.
    #[cfg(all(test, purgatorio_loom))]
    pub(crate) fn purger(&self) -> impl FnOnce() + Send + 'static {
        let core = Arc::clone(&self.owner.core);
        move || core.purge()
    }

    /// Hands a purge to the workers when enough done entries linger.
    fn maybe_purge(&self) {
        let core = &self.owner.core;
        if !core.counters.purge_due(core.purge_interval)
            || core.purging.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let for_purge = Arc::clone(&self.owner.core);
        let job = BoxTask::new(move || for_purge.purge());
        // Straight to the workers: an internal job never enters the wheel,
        // so it neither shows in `delayed()` nor waits for a tick.
        if let Err(job) = self.owner.timer.execute(job) {
            core.purging.store(false, Ordering::Release);
            drop(job);
        }
    }
}

/// How many of a `park`'s keys are held on the stack; more spill to a `Vec`.
const INLINE_KEYS: usize = 8;

/// The keys of one `park`, held without an allocation when there are at
/// most [`INLINE_KEYS`] (registration needs them twice: to watch, and to
/// skip duplicates).
struct KeyList<T> {
    /// The first keys.
    inline: [Option<T>; INLINE_KEYS],
    /// The rest, if any.
    spill: Vec<T>,
}

impl<T> KeyList<T> {
    /// Takes every key of `keys`.
    fn collect(keys: impl IntoIterator<Item = T>) -> Self {
        let mut list = KeyList {
            inline: std::array::from_fn(|_| None),
            spill: Vec::new(),
        };
        let mut keys = keys.into_iter();
        for slot in list.inline.iter_mut() {
            match keys.next() {
                Some(key) => *slot = Some(key),
                None => return list,
            }
        }
        list.spill.extend(keys);
        list
    }

    /// Whether there is no key.
    fn is_empty(&self) -> bool {
        self.inline[0].is_none()
    }

    /// The keys, in order.
    fn iter(&self) -> impl Iterator<Item = &T> {
        self.inline
            .iter()
            .map_while(Option::as_ref)
            .chain(&self.spill)
    }
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests {
    use super::*;
    use crate::purgatory::test_ops::Wait;

    /// An operation counts one watch per distinct key (counted once, at
    /// the end of its registration): when it completes, exactly those
    /// entries linger until a check of their keys removes them.
    #[test]
    fn a_finished_operation_lingers_once_per_distinct_key() {
        let p: Purgatory<u8, Wait> = Purgatory::builder().build().unwrap();
        let kept = p.park(Wait, [1]).unwrap();
        let parked = p.park(Wait, [1, 2, 2, 3, 1]).unwrap();
        let counters = &p.core().counters;
        assert_eq!(counters.entries.load(Ordering::Relaxed), 4);
        assert_eq!(counters.lingering.load(Ordering::Relaxed), 0);
        assert!(parked.force_complete());
        assert_eq!(counters.lingering.load(Ordering::Relaxed), 3);
        assert_eq!(p.watched(), 4);
        assert_eq!(p.check_and_complete(&2), Ok(0));
        assert_eq!(counters.lingering.load(Ordering::Relaxed), 2);
        assert_eq!(p.check_and_complete(&1), Ok(0));
        assert_eq!(p.check_and_complete(&3), Ok(0));
        assert_eq!(counters.lingering.load(Ordering::Relaxed), 0);
        assert_eq!(counters.entries.load(Ordering::Relaxed), 1);
        assert_eq!((p.watched(), p.keys()), (1, 1));
        assert!(kept.force_complete());
    }
}
