//! The purgatory: operations parked until they complete or time out
//! (Kafka's `DelayedOperationPurgatory`, latest semantics).
//!
//! ## How it works
//!
//! * [`try_complete_else_watch`](Purgatory::try_complete_else_watch): under the
//!   operation's lock, try; if not done, add it to the watch list of every
//!   (distinct) key, then try again (closing the race with an event that
//!   arrived during registration); if still not done, add it to the timer.
//! * [`check_and_complete`](Purgatory::check_and_complete): copy the key's list
//!   under its shard lock, try each operation outside that lock (never
//!   blocking on an operation's lock: see [`DelayedOperation`]), then drop the
//!   done ones from the list.
//! * Expiry: the timer's driver hands due operations to the timer's workers,
//!   which complete them as expired. No polling thread: the driver sleeps
//!   until something is due.
//! * Purge: a done operation may linger in the lists of its other keys. The
//!   purgatory counts those entries exactly; past `purge_interval` it hands
//!   one purge job to the timer's workers, which sweeps the lists one shard
//!   at a time, off the callers' path.
//!
//! ## Lock order
//!
//! operation → watch shard, and operation → timer shard. Nothing takes an
//! operation's lock while holding a shard lock, and the watch path only ever
//! `try_lock`s operations, so callbacks may re-enter the purgatory.

mod op;
mod watchers;

#[cfg(all(test, purgatorio_loom))]
mod loom_models;

use std::error::Error;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{BuildError, ScheduleError};
use crate::sync::{AtomicBool, AtomicU64};
use crate::timer::{BoxTask, Timer, TimerBuilder};
use op::{Job, Op, OpCounters, Request};
use watchers::Watchers;

pub use op::DelayedOperation;

/// The default purge interval: lingering done entries tolerated before a purge.
pub const DEFAULT_PURGE_INTERVAL: usize = 1000;

/// Why [`Purgatory::try_complete_else_watch`] refused an operation; the
/// operation is handed back.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{DelayedOperation, Purgatory, WatchError};
///
/// struct Never;
/// impl DelayedOperation for Never {
///     fn delay(&self) -> Duration { Duration::from_secs(1) }
///     fn try_complete(&mut self) -> bool { false }
///     fn on_complete(&mut self) {}
/// }
///
/// let purgatory: Purgatory<u32, Never> = Purgatory::builder().build().unwrap();
/// let err = purgatory.try_complete_else_watch(Never, &[]).unwrap_err();
/// assert_eq!(err.to_string(), "an operation needs at least one watch key");
/// let _op: Never = err.into_inner();
/// ```
#[non_exhaustive]
pub enum WatchError<O> {
    /// The key list was empty.
    NoKeys(O),
    /// The purgatory is shut down.
    ShutDown(O),
}

impl<O> WatchError<O> {
    /// The refused operation.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(purgatorio::WatchError::NoKeys(3).into_inner(), 3);
    /// ```
    pub fn into_inner(self) -> O {
        match self {
            WatchError::NoKeys(op) | WatchError::ShutDown(op) => op,
        }
    }
}

impl<O> fmt::Debug for WatchError<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchError::NoKeys(_) => f.write_str("NoKeys(..)"),
            WatchError::ShutDown(_) => f.write_str("ShutDown(..)"),
        }
    }
}

impl<O> fmt::Display for WatchError<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchError::NoKeys(_) => f.write_str("an operation needs at least one watch key"),
            WatchError::ShutDown(_) => f.write_str("purgatory is shut down"),
        }
    }
}

impl<O> Error for WatchError<O> {}

/// A call on a purgatory that was shut down.
///
/// # Examples
///
/// ```
/// assert_eq!(purgatorio::ShutDownError.to_string(), "purgatory is shut down");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutDownError;

impl fmt::Display for ShutDownError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("purgatory is shut down")
    }
}

impl Error for ShutDownError {}

/// A snapshot of a purgatory's gauges and counters.
///
/// # Examples
///
/// ```
/// # use std::time::Duration;
/// # use purgatorio::{DelayedOperation, Purgatory};
/// # struct Op;
/// # impl DelayedOperation for Op {
/// #     fn delay(&self) -> Duration { Duration::from_secs(1) }
/// #     fn try_complete(&mut self) -> bool { true }
/// #     fn on_complete(&mut self) {}
/// # }
/// let purgatory: Purgatory<&str, Op> = Purgatory::builder().build().unwrap();
/// assert!(purgatory.try_complete_else_watch(Op, &["k"]).unwrap());
/// assert_eq!(purgatory.metrics().completed_by_try, 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgatoryMetrics {
    /// Sum of the lengths of all watch lists.
    pub watched: usize,
    /// Operations waiting in the timer.
    pub delayed: usize,
    /// Operations completed other than by expiry: a successful
    /// `try_complete`, or [`Parked::force_complete`].
    pub completed_by_try: u64,
    /// Operations completed by expiry (including at shutdown).
    pub expired: u64,
    /// Done entries removed from watch lists by purges.
    pub purged: u64,
    /// Panics caught in operation callbacks.
    pub panics: u64,
}

/// What the purgatory's handles and its workers share.
struct Core<K, O> {
    /// The watch lists.
    watchers: Watchers<K, O>,
    /// Completion counters and the lingering estimate.
    counters: Arc<OpCounters>,
    /// Lingering entries tolerated before a purge.
    purge_interval: usize,
    /// Whether a purge job is queued or running.
    purging: AtomicBool,
    /// Entries removed by purges.
    purged: AtomicU64,
    /// Set by shutdown.
    closed: AtomicBool,
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static, O: DelayedOperation> Core<K, O> {
    /// Runs a purge (on a worker). A trigger that arrived while it ran was
    /// dropped (`purging` was set), and the sweep may already have passed the
    /// shards it concerned: so after each sweep, sweep again while too many
    /// done entries still linger.
    fn purge(&self) {
        loop {
            let removed = self.watchers.purge(&self.counters);
            self.purged.fetch_add(removed as u64, Ordering::Relaxed);
            self.purging.store(false, Ordering::Release);
            let lingering = self.counters.lingering.load(Ordering::Relaxed);
            if removed == 0
                || lingering <= self.purge_interval
                || self.purging.swap(true, Ordering::AcqRel)
            {
                return;
            }
        }
    }
}

/// Owns the timer; the last [`Purgatory`] handle drops it, which shuts down.
struct Owner<K, O: DelayedOperation> {
    /// Watch lists and counters.
    core: Arc<Core<K, O>>,
    /// Expires operations and runs purges.
    timer: Timer<Job<O>>,
}

impl<K, O: DelayedOperation> Drop for Owner<K, O> {
    fn drop(&mut self) {
        shut_down(&self.core, &self.timer);
    }
}

/// Shuts a purgatory down once: stops the timer and expires every pending
/// operation on the calling thread. Returns how many it expired.
fn shut_down<K, O: DelayedOperation>(core: &Core<K, O>, timer: &Timer<Job<O>>) -> usize {
    if core.closed.swap(true, Ordering::SeqCst) {
        return 0;
    }
    // An operation parked while this runs may be watched after the drain:
    // then its expiry job comes back from the timer's shutdown below, or its
    // `park` finds the timer shut down and expires it there. (Dropping the
    // timer's jobs instead lost such an operation: the loom model
    // `shutdown_races_park` found that.)
    let watched = core.watchers.drain();
    let scheduled = timer.shutdown().into_iter().filter_map(|job| match job {
        Job::Expire { op, .. } => Some(op),
        Job::Run(_) => None,
    });
    // An operation whose lock a callback holds (this thread's own, called
    // from inside it, or another's while this one is inside a callback) is
    // left to expire when its holder releases it; it is not counted here.
    let expired = watched
        .into_iter()
        .chain(scheduled)
        .filter(|op| op.expire_detached(&core.counters))
        .count();
    core.counters.lingering.store(0, Ordering::Relaxed);
    expired
}

/// A handle to one operation in a [`Purgatory`], from [`Purgatory::park`].
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
    /// Whether `park` completed the operation at once (it was never parked).
    ///
    /// # Examples
    ///
    /// See [`Purgatory::park`].
    pub fn completed_now(&self) -> bool {
        self.completed_now
    }

    /// Runs the operation's `try_complete` under its lock; returns whether
    /// this call completed it.
    ///
    /// # Examples
    ///
    /// See [`Purgatory::park`].
    pub fn try_complete(&self) -> bool {
        self.op.try_complete(&self.counters)
    }

    /// Completes the operation now, whatever its condition (`on_complete`
    /// runs, `on_expiration` does not); returns whether this call completed
    /// it. Its timer is cancelled.
    ///
    /// Waits for the operation's lock if a callback of it is running on
    /// another thread. Called from inside a callback (of this operation or
    /// any other), it never waits: if the lock is taken, the completion is
    /// left to the lock's holder, which carries it out as soon as its
    /// callback returns, and this call returns `false`.
    ///
    /// # Examples
    ///
    /// See [`Purgatory::park`].
    pub fn force_complete(&self) -> bool {
        self.op.complete(Request::Force, &self.counters)
    }

    /// Whether the operation is done: completed, expired or cancelled.
    ///
    /// # Examples
    ///
    /// See [`Purgatory::park`].
    pub fn is_done(&self) -> bool {
        self.op.is_done()
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
/// use purgatorio::{DelayedOperation, ManualClock, Purgatory, Timer};
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
///     fn on_complete(&mut self) { self.reply.send("data").unwrap() }
///     fn on_expiration(&mut self) { self.reply.send("timeout").unwrap() }
/// }
///
/// let clock = ManualClock::new();
/// let purgatory = Purgatory::builder().timer(Timer::builder().clock(clock.clone())).build()?;
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
/// assert_eq!(rx.recv()?, "data");                               // on_complete, then
/// assert_eq!(rx.recv()?, "timeout");                            // on_expiration
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Purgatory<K, O: DelayedOperation> {
    /// Shared ownership.
    owner: Arc<Owner<K, O>>,
}

impl<K, O: DelayedOperation> Clone for Purgatory<K, O> {
    fn clone(&self) -> Self {
        Purgatory {
            owner: Arc::clone(&self.owner),
        }
    }
}

impl<K, O: DelayedOperation> fmt::Debug for Purgatory<K, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Purgatory")
            .field("purge_interval", &self.owner.core.purge_interval)
            .field("timer", &self.owner.timer)
            .finish()
    }
}

/// Builds a [`Purgatory`].
///
/// # Examples
///
/// ```
/// # use std::time::Duration;
/// # use purgatorio::{DelayedOperation, Purgatory};
/// # struct Op;
/// # impl DelayedOperation for Op {
/// #     fn delay(&self) -> Duration { Duration::from_secs(1) }
/// #     fn try_complete(&mut self) -> bool { false }
/// #     fn on_complete(&mut self) {}
/// # }
/// let purgatory: Purgatory<u64, Op> = Purgatory::builder()
///     .watch_shards(64)
///     .purge_interval(10_000)
///     .timer(purgatorio::Timer::builder().workers(2).thread_name("fetch-purgatory"))
///     .build()
///     .unwrap();
/// # drop(purgatory);
/// ```
pub struct PurgatoryBuilder<K, O: DelayedOperation> {
    /// Number of watch-list shards.
    watch_shards: usize,
    /// Lingering entries tolerated before a purge.
    purge_interval: usize,
    /// The timer's settings.
    timer: TimerBuilder<Job<O>>,
    /// The key type.
    keys: std::marker::PhantomData<fn() -> K>,
}

impl<K, O: DelayedOperation> fmt::Debug for PurgatoryBuilder<K, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PurgatoryBuilder")
            .field("watch_shards", &self.watch_shards)
            .field("purge_interval", &self.purge_interval)
            .field("timer", &self.timer)
            .finish()
    }
}

impl<K, O> PurgatoryBuilder<K, O>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    O: DelayedOperation,
{
    /// Sets the number of watch-list shards (default: 16 per core, at least 16).
    ///
    /// # Examples
    ///
    /// ```
    /// # use purgatorio::{DelayedOperation, Purgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> std::time::Duration { std::time::Duration::ZERO }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self) {}
    /// # }
    /// let p: Purgatory<u8, Op> = Purgatory::builder().watch_shards(1).build().unwrap();
    /// # drop(p);
    /// ```
    pub fn watch_shards(mut self, shards: usize) -> Self {
        self.watch_shards = shards;
        self
    }

    /// Sets how many done entries may linger in watch lists before a purge
    /// (default [`DEFAULT_PURGE_INTERVAL`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # use purgatorio::{DelayedOperation, Purgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> std::time::Duration { std::time::Duration::ZERO }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self) {}
    /// # }
    /// let p: Purgatory<u8, Op> = Purgatory::builder().purge_interval(100).build().unwrap();
    /// # drop(p);
    /// ```
    pub fn purge_interval(mut self, interval: usize) -> Self {
        self.purge_interval = interval;
        self
    }

    /// Sets up the purgatory's timer: clock, tick, wheel size, shards,
    /// workers (which run expirations and purges), thread names, driver
    /// thread. Defaults to [`Timer::builder()`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # use purgatorio::{DelayedOperation, Purgatory, Timer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> Duration { Duration::ZERO }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self) {}
    /// # }
    /// let p: Purgatory<u8, Op> = Purgatory::builder()
    ///     .timer(Timer::builder().tick(Duration::from_micros(100)).workers(1).thread_name("produce"))
    ///     .build()
    ///     .unwrap();
    /// # drop(p);
    /// ```
    pub fn timer(mut self, timer: TimerBuilder<BoxTask>) -> Self {
        self.timer = timer.retask();
        self
    }

    /// Builds the purgatory and starts its timer.
    ///
    /// # Errors
    ///
    /// [`BuildError::Shards`] for zero watch shards (or more than
    /// [`MAX_SHARDS`](crate::MAX_SHARDS)); any error of
    /// [`TimerBuilder::build`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use purgatorio::{BuildError, DelayedOperation, Purgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> std::time::Duration { std::time::Duration::ZERO }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self) {}
    /// # }
    /// let err = Purgatory::<u8, Op>::builder().watch_shards(0).build().unwrap_err();
    /// assert!(matches!(err, BuildError::Shards(0)));
    /// ```
    pub fn build(self) -> Result<Purgatory<K, O>, BuildError> {
        if !(1..=crate::error::MAX_SHARDS * 16).contains(&self.watch_shards) {
            return Err(BuildError::Shards(self.watch_shards));
        }
        let timer = self.timer.build()?;
        let core = Arc::new(Core {
            watchers: Watchers::new(self.watch_shards),
            counters: Arc::new(OpCounters::default()),
            purge_interval: self.purge_interval,
            purging: AtomicBool::new(false),
            purged: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        });
        Ok(Purgatory {
            owner: Arc::new(Owner { core, timer }),
        })
    }
}

impl<K, O> Purgatory<K, O>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    O: DelayedOperation,
{
    /// A builder with the defaults.
    ///
    /// # Examples
    ///
    /// ```
    /// # use purgatorio::{DelayedOperation, Purgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> std::time::Duration { std::time::Duration::ZERO }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self) {}
    /// # }
    /// let p: Purgatory<String, Op> = Purgatory::builder().build().unwrap();
    /// assert_eq!(p.watched(), 0);
    /// ```
    pub fn builder() -> PurgatoryBuilder<K, O> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        PurgatoryBuilder {
            watch_shards: (16 * cores).max(16),
            purge_interval: DEFAULT_PURGE_INTERVAL,
            timer: Timer::builder(),
            keys: std::marker::PhantomData,
        }
    }

    /// The shared state.
    fn core(&self) -> &Core<K, O> {
        &self.owner.core
    }

    /// Tries to complete `op` now; if it cannot, watches it on every distinct
    /// key in `keys` and adds it to the timer with its
    /// [`delay`](DelayedOperation::delay). Returns whether it completed now.
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
    /// [`WatchError::NoKeys`] if `keys` is empty; [`WatchError::ShutDown`] if
    /// the purgatory is shut down. Both hand the operation back.
    ///
    /// # Examples
    ///
    /// See [`Purgatory`].
    pub fn try_complete_else_watch(&self, op: O, keys: &[K]) -> Result<bool, WatchError<O>> {
        self.park(op, keys).map(|parked| parked.completed_now)
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
    /// use purgatorio::{DelayedOperation, Purgatory};
    ///
    /// struct Produce { acked: bool }
    /// impl DelayedOperation for Produce {
    ///     fn delay(&self) -> Duration { Duration::from_secs(30) }
    ///     fn try_complete(&mut self) -> bool { self.acked }
    ///     fn on_complete(&mut self) { println!("answer the producer") }
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
    pub fn park(&self, op: O, keys: &[K]) -> Result<Parked<O>, WatchError<O>> {
        let core = self.core();
        if core.closed.load(Ordering::SeqCst) {
            return Err(WatchError::ShutDown(op));
        }
        if keys.is_empty() {
            return Err(WatchError::NoKeys(op));
        }
        let delay = op.delay();
        let cell = Arc::new(Op::new(op));
        let counters = &core.counters;
        let completed = cell.register(counters, || {
            for (i, key) in keys.iter().enumerate() {
                if !keys[..i].contains(key) {
                    core.watchers.watch(key, &cell);
                }
            }
        });
        if !completed && !cell.is_done() {
            let job = Job::Expire {
                op: Arc::clone(&cell),
                counters: Arc::clone(counters),
            };
            match self.owner.timer.schedule(delay, job) {
                Ok(handle) => cell.set_timer(handle),
                // Shut down meanwhile: expire it, as shutdown does with the rest.
                Err(ScheduleError(job)) => {
                    drop(job);
                    cell.complete(Request::Expire, counters);
                }
            }
        }
        self.maybe_purge();
        Ok(Parked {
            op: cell,
            counters: Arc::clone(counters),
            completed_now: completed,
        })
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
    pub fn check_and_complete(&self, key: &K) -> Result<usize, ShutDownError> {
        let core = self.core();
        if core.closed.load(Ordering::SeqCst) {
            return Err(ShutDownError);
        }
        let ops = core.watchers.live_snapshot(key, &core.counters);
        let completed = ops
            .iter()
            .filter(|op| op.try_complete(&core.counters))
            .count();
        drop(ops);
        if completed > 0 {
            core.watchers.remove_done(key, &core.counters);
        }
        self.maybe_purge();
        Ok(completed)
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
    /// # use purgatorio::{DelayedOperation, Purgatory};
    /// struct Wait(u32);
    /// impl DelayedOperation for Wait {
    ///     fn delay(&self) -> Duration { Duration::from_secs(60) }
    ///     fn try_complete(&mut self) -> bool { false }
    ///     fn on_complete(&mut self) { unreachable!("cancelled, never completed") }
    /// }
    /// let p: Purgatory<&str, Wait> = Purgatory::builder().build().unwrap();
    /// p.try_complete_else_watch(Wait(1), &["a", "b"]).unwrap();
    /// let back = p.cancel_for_key(&"a").unwrap();
    /// assert_eq!(back.len(), 1);
    /// assert_eq!(back[0].0, 1);
    /// assert_eq!(p.delayed(), 0);
    /// ```
    pub fn cancel_for_key(&self, key: &K) -> Result<Vec<O>, ShutDownError> {
        let core = self.core();
        if core.closed.load(Ordering::SeqCst) {
            return Err(ShutDownError);
        }
        let watched = core.watchers.live_snapshot(key, &core.counters);
        let ops = watched
            .iter()
            .filter_map(|op| op.cancel(&core.counters))
            .collect();
        drop(watched);
        // The cancelled operations are done now: they leave `key`'s list
        // here and their other lists at the next check or purge.
        core.watchers.remove_done(key, &core.counters);
        self.maybe_purge();
        Ok(ops)
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

    /// Operations waiting in the timer.
    ///
    /// # Examples
    ///
    /// See [`Purgatory`].
    pub fn delayed(&self) -> usize {
        self.owner.timer.len()
    }

    /// Number of keys that have a watch list.
    ///
    /// # Examples
    ///
    /// ```
    /// # use purgatorio::{DelayedOperation, Purgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> std::time::Duration { std::time::Duration::from_secs(9) }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self) {}
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
            completed_by_try: c.completed_by_try.load(Ordering::Relaxed),
            expired: c.expired.load(Ordering::Relaxed),
            purged: core.purged.load(Ordering::Relaxed),
            panics: c.panics.load(Ordering::Relaxed),
        }
    }

    /// Drives expiry without a driver thread (a timer built with
    /// [`driver_thread(false)`](TimerBuilder::driver_thread)): waits up to
    /// `timeout` for an operation to come due and hands everything due to the
    /// workers. Returns whether anything was due.
    ///
    /// # Examples
    ///
    /// ```
    /// # use purgatorio::{DelayedOperation, Purgatory, Timer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> std::time::Duration { std::time::Duration::ZERO }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self) {}
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

    /// Shuts down: stops the timer (joining its threads) and completes every
    /// pending operation as expired (`on_complete`, then `on_expiration`), on
    /// the calling thread. Returns how many it expired. Afterwards every call
    /// returns an error; calling it again returns 0.
    ///
    /// It may be called from a callback (so may the drop of the last
    /// handle): the worker thread it runs on, if any, is not joined (it
    /// exits once its callback returns), and an operation whose lock is held
    /// (the calling callback's own, or, from a callback, one held by another
    /// thread) expires as soon as its holder releases it and is not
    /// counted.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use purgatorio::{DelayedOperation, Purgatory, ShutDownError};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> Duration { Duration::from_secs(60) }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self) {}
    /// # }
    /// let p: Purgatory<u8, Op> = Purgatory::builder().build().unwrap();
    /// p.try_complete_else_watch(Op, &[1]).unwrap();
    /// assert_eq!(p.shutdown(), 1);
    /// assert_eq!(p.check_and_complete(&1), Err(ShutDownError));
    /// assert_eq!(p.shutdown(), 0);
    /// ```
    pub fn shutdown(&self) -> usize {
        shut_down(&self.owner.core, &self.owner.timer)
    }

    /// Hands a purge to the workers when enough done entries linger.
    fn maybe_purge(&self) {
        let core = &self.owner.core;
        if core.counters.lingering.load(Ordering::Relaxed) <= core.purge_interval
            || core.purging.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let for_purge = Arc::clone(&self.owner.core);
        let job = Job::Run(Box::new(move || for_purge.purge()));
        // Straight to the workers: an internal job never enters the wheel,
        // so it neither shows in `delayed()` nor waits for a tick.
        if let Err(job) = self.owner.timer.execute(job) {
            core.purging.store(false, Ordering::Release);
            drop(job);
        }
    }
}
