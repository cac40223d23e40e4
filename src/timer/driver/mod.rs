//! The driver: sleeps until the earliest due bucket of all shards, then moves
//! what is due to the worker pool.
//!
//! ## Wake-up protocol
//!
//! `next_wake` holds the tick the driver will wake at (`u64::MAX`: none).
//! A pass ([`Driver::pass`]) sets it to `PASSING`, visits every shard, and
//! at its end replaces `PASSING` with the earliest expiration it saw (or
//! keeps a lower tick found there), takes the ticks left in `deferred`
//! meanwhile, and plans the earliest of them. If that is already due it
//! signals, so the driver passes again at once whatever its clock. A
//! scheduler that inserts a deadline:
//!
//! * while `next_wake` reads `PASSING`, lowers `deferred` to its tick and
//!   reads `next_wake` again; if it still reads `PASSING`, it is done: the
//!   pass swaps `deferred` out after replacing `PASSING`, so after that
//!   second read, and plans no later than the tick. A schedule during a
//!   pass wakes nobody: the driver is awake. Otherwise the pass ended
//!   meanwhile, and it goes on as below.
//! * otherwise, if its tick is below `next_wake`, lowers it with
//!   `fetch_min` and, if it was the one to lower it, raises the
//!   [`Signal`](super::signal::Signal).
//!
//! So a deadline is seen by a pass, taken by a pass at its end, or
//! signalled, and the thread that made the pass sleeps no later than its
//! plan. A pass made by a thread that will not sleep until its plan
//! (`run_due`, `advance_clock` returning) gives it up with a signal: it may
//! have taken a schedule left for the pass, or replaced the plan a sleeping
//! driver holds (passes may overlap: the driver's and `run_due`'s, or two
//! `drive` loops), so the driver passes again and plans for itself. No
//! lost wake-up, and no wake-up when nothing is pending: with an empty
//! wheel the driver waits without a timeout.
//!
//! The loop runs on the driver thread ([`Driver::drive`]) or, for a timer
//! built without one, as a future on the application's async runtime
//! ([`Driver::drive_async`], with the runtime's own sleep): then an
//! expiry wakes its task from the runtime's thread, with no other thread
//! woken on the way.
//!
//! Locks: a pass holds one shard lock at a time, and at most
//! [`BATCH`] expirations' worth of work under it; the signal's mutex is never
//! held with a shard lock. No user code runs on the driver, with one
//! exception outside every lock: a sleep's entry only wakes its async task,
//! so the driver wakes it itself (`wake_here`) instead of handing it to a
//! worker.

use std::future::Future;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::executor::Runner;
use super::handle::{TimerHandle, TimerId, TIMER_MASK};
use super::hooks::ShutdownHooks;
use super::pool;
use super::shard::{owns, shard_index, HomeShard, Leftover, Shard, ShardState};
use super::signal::Signal;
use super::task::{BoxTask, Task};
use super::timing::{Timing, Wake};
use crate::error::ScheduleError;
use crate::sync::Mutex;
use crate::time::{Deadline, Due, TimeSource};
use crate::wheel::{Fired, Freed, TimerKey};

/// The most expirations moved out of a shard under one hold of its lock.
pub(crate) const BATCH: usize = 1024;

/// The earlier of two optional times; `None` only if both are.
fn earlier<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A scheduled timer named by its shard's number and its key there: a
/// [`TimerHandle`] without the shard's reference count, for an owner that
/// reaches the [`Driver`] anyway (a parked operation's or a key's timer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Entry {
    /// The shard's number.
    shard: u32,
    /// The timer's key there.
    key: TimerKey,
}

impl Entry {
    /// The timer `key` in shard number `shard`.
    pub(super) fn new(shard: u32, key: TimerKey) -> Self {
        Entry { shard, key }
    }
}

/// The driver: the shards, the timing they share, and the pool it hands due
/// tasks to. Its loop runs on the driver thread; its pass also serves
/// [`Timer::run_due`](crate::Timer::run_due) and
/// [`Timer::advance_clock`](crate::Timer::advance_clock).
pub(crate) struct Driver<T> {
    /// The shards, each behind its own lock.
    pub(super) shards: Box<[Arc<Shard<T>>]>,
    /// Clock, signal, counters.
    pub(super) timing: Arc<Timing>,
    /// Where due tasks run.
    pub(super) pool: Runner<T>,
    /// What else ends at shutdown.
    pub(super) hooks: ShutdownHooks,
}

impl<T> std::fmt::Debug for Driver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("shards", &self.shards.len())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl<T> Driver<T> {
    /// The timer's time source.
    #[inline]
    pub(crate) fn time(&self) -> &TimeSource {
        self.timing.time()
    }

    /// Whether the timer is shut down.
    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        self.timing.is_closed()
    }

    /// The loom models' view of the wake-up protocol: the signal's epoch
    /// and the tick the driver plans to wake at.
    #[cfg(all(test, purgatorio_loom))]
    pub(crate) fn wake_state(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::SeqCst;
        (
            self.timing.signal.epoch(),
            self.timing.next_wake.load(SeqCst),
        )
    }
}

impl<T: Task> Driver<T> {
    /// The user's handle of `entry`: its shard's reference and its key.
    #[inline]
    pub(crate) fn handle(&self, entry: Entry) -> TimerHandle<T> {
        TimerHandle::new(Arc::clone(&self.shards[entry.shard as usize]), entry.key)
    }

    /// Schedules `task` when `due` says (a task due now runs at once), in
    /// the calling thread's home shard, and names it by an [`Entry`]; the
    /// [`Wake`] wakes the driver, if it must, when dropped (after the
    /// caller's locks).
    #[inline]
    pub(crate) fn insert(&self, due: Due, task: T) -> Result<(Entry, Wake<'_>), ScheduleError<T>> {
        let index = shard_index(self.shards.len());
        let shard = &self.shards[index];
        let number = index as u32;
        let tick = due.tick;
        if due.now && !self.pool.runs_inline() {
            // Already due: straight to the workers (Kafka's "expired, run
            // now"). An inline executor would run it on this thread, so
            // then it goes through the wheel to the driver instead. Its key
            // names no slot, and differs from every other such task's.
            let nth = self.run_now(shard, tick, task)?;
            return Ok((Entry::new(number, TimerKey::dead(nth)), Wake::none()));
        }
        let (key, _mark) = shard.insert(tick, task).map_err(ScheduleError::new)?;
        Ok((Entry::new(number, key), self.timing.wake_if_earlier(tick)))
    }

    /// The calling thread's home shard, for a [`Sleep`](crate::Sleep)
    /// made there (its entry goes to the home of the thread that polls
    /// it).
    #[inline]
    pub(crate) fn home_shard(&self) -> HomeShard<T> {
        HomeShard::of(&self.shards)
    }

    /// Cancels `entry` and hands its task back; `None` if it is no longer
    /// pending.
    #[inline]
    pub(crate) fn cancel(&self, entry: Entry) -> Option<T> {
        self.shards[entry.shard as usize].cancel(entry.key)
    }

    /// On a thread that owns a shard: removes the timers other threads
    /// gave up there ([`discard`](Self::discard)) once enough wait. Call it
    /// holding none of the crate's locks: their tasks are dropped here.
    #[inline]
    pub(crate) fn collect_discards(&self) {
        let shard = &self.shards[shard_index(self.shards.len())];
        if shard.inbox_full() {
            drop(shard.discard_waiting());
        }
    }

    /// Whether `entry` is still waiting in its wheel.
    pub(super) fn contains(&self, entry: Entry) -> bool {
        self.shards[entry.shard as usize].contains(entry.key)
    }

    /// The user's id of `entry`: this timer's number and the entry.
    #[inline]
    pub(super) fn id(&self, entry: Entry) -> TimerId {
        TimerId::new(self.timing.id, entry.shard, entry.key)
    }

    /// The entry `id` names, if it is one of this timer's (a shard number
    /// it does not have names nothing either).
    #[inline]
    pub(super) fn entry_of(&self, id: TimerId) -> Option<Entry> {
        let shard = id.shard();
        (id.timer() == self.timing.id & TIMER_MASK && (shard as usize) < self.shards.len())
            .then(|| Entry::new(shard, id.key()))
    }

    /// Moves `entry` to `deadline`; `None` if it is no longer pending,
    /// else the [`Wake`] to drop after the caller's locks.
    pub(crate) fn reschedule(&self, entry: Entry, deadline: Deadline) -> Option<Wake<'_>> {
        self.shards[entry.shard as usize]
            .reschedule(entry.key, deadline)
            .map(|(_, wake)| wake)
    }

    /// Hands a task that is already due to the workers; returns how many
    /// tasks `shard` had accepted, this one included.
    fn run_now(&self, shard: &Shard<T>, tick: u64, task: T) -> Result<u64, ScheduleError<T>> {
        match self.pool.submit(vec![Fired::untracked(tick, task)]) {
            Ok(()) => {
                let mut state = shard.state.lock();
                state.scheduled += 1;
                state.expired += 1;
                let nth = state.scheduled;
                drop(state);
                let figures = &self.timing.counters.figures;
                figures.scheduled(1);
                figures.expired(1);
                Ok(nth)
            }
            Err(mut batch) => Err(ScheduleError::new(batch.pop().expect("one task").value)),
        }
    }

    /// The driver thread's loop; returns once the timer is shut down.
    pub(crate) fn drive(&self) {
        while !self.timing.is_closed() {
            let seen = self.timing.signal.epoch();
            let (_, until) = self.pass();
            if self.timing.is_closed() {
                return;
            }
            self.timing.signal.wait(seen, until);
            self.timing.counters.record_wakeup();
        }
    }

    /// The driver's loop as a future, for an async runtime to run in place
    /// of the driver thread: the same passes, the same wake-up protocol,
    /// with the runtime's `sleep` between them. Ends once the timer is shut
    /// down.
    pub(crate) async fn drive_async<S, F>(&self, mut sleep: S)
    where
        S: FnMut(Instant) -> F,
        F: Future<Output = ()>,
    {
        // The waker left with the signal, taken back when this future ends
        // or is dropped (its task aborted), so the signal keeps no waker of
        // a task that no longer waits.
        let mut left = Forget {
            signal: &self.timing.signal,
            waker: None,
        };
        while !self.timing.is_closed() {
            let seen = self.timing.signal.epoch();
            let (_, until) = self.pass();
            if self.timing.is_closed() {
                return;
            }
            let mut nap = std::pin::pin!(until.map(&mut sleep));
            std::future::poll_fn(|cx| {
                if left.waker.as_ref().is_none_or(|w| !w.will_wake(cx.waker())) {
                    left.waker = Some(cx.waker().clone());
                }
                if self.timing.signal.poll_changed(seen, cx).is_ready() {
                    return Poll::Ready(());
                }
                match nap.as_mut().as_pin_mut() {
                    Some(nap) => nap.poll(cx),
                    None => Poll::Pending,
                }
            })
            .await;
            self.timing.counters.record_wakeup();
        }
    }

    /// One pass of the driver's own (its thread's loop, the async loop):
    /// moves everything due to the workers, and returns how many timers
    /// that was and the real instant to sleep until (`None`: until
    /// signalled). Schedules made during it are left for its end (see the
    /// module docs), so its caller must sleep until that instant, or pass
    /// again.
    pub(crate) fn pass(&self) -> (usize, Option<Instant>) {
        let (moved, planned) = self.pass_planning();
        (moved, self.sleep_until(planned))
    }

    /// [`pass`](Self::pass), returning the tick the driver plans to wake at
    /// (`u64::MAX`: none).
    pub(crate) fn pass_planning(&self) -> (usize, u64) {
        self.timing.begin_pass();
        let time = self.timing.time();
        let now = time.resolution().tick_of(time.now());
        let unwinding = EndOnUnwind(&self.timing, now);
        let (moved, earliest, freed) = self.run_due_at(now);
        std::mem::forget(unwinding);
        let planned = self.timing.end_pass(now, earliest);
        // After the plan is made: a schedule meanwhile signals the driver.
        drop(freed);
        (moved, planned)
    }

    /// A pass whose caller does not sleep until its plan
    /// ([`Timer::run_due`](crate::Timer::run_due)): the plan goes back to
    /// the driver. Returns how many timers were moved.
    pub(crate) fn run_due(&self) -> usize {
        let (moved, planned) = self.pass_planning();
        self.timing.relinquish(planned);
        moved
    }

    /// The real instant at which tick `wake` begins, if the clock is real
    /// time and the instant is representable.
    fn sleep_until(&self, wake: u64) -> Option<Instant> {
        if wake == u64::MAX || !self.timing.time().clock().is_real_time() {
            return None;
        }
        self.timing.time().instant_of(wake)
    }

    /// Calls `f` with each shard and its state, one shard (and its lock)
    /// at a time.
    pub(super) fn visit_each(&self, mut f: impl FnMut(&Shard<T>, &mut ShardState<T>)) {
        for shard in self.shards.iter() {
            f(shard, &mut shard.state.lock());
        }
    }

    /// Moves every timer due at tick `now` to the workers, shard by shard.
    /// Returns how many, and the earliest tick at which one may be due next.
    ///
    /// Also returns the memory the wheels gave back (a million timers'
    /// slots, once they all fired, take milliseconds to free), for the
    /// caller to free after the pass has ended.
    fn run_due_at(&self, now: u64) -> (usize, Option<u64>, Vec<Freed<T>>) {
        let mut moved = 0;
        let mut earliest: Option<u64> = None;
        let mut freed = Vec::new();
        for shard in self.shards.iter() {
            let mut discarded = Vec::new();
            loop {
                let mut batch = Vec::new();
                let next = {
                    let mut state = shard.state.lock();
                    shard.passing(now);
                    // What other threads gave up leaves before anything is
                    // polled, so it does not fire; its tasks are dropped
                    // after the lock.
                    discarded.append(&mut shard.apply_discards(&mut state));
                    while batch.len() < BATCH {
                        match state.wheel.poll(now) {
                            Some(fired) => batch.push(fired),
                            None => break,
                        }
                    }
                    state.expired += batch.len() as u64;
                    let drained = batch.len() < BATCH;
                    if drained {
                        shard.polled(now);
                    }
                    freed.extend(state.wheel.take_freed().map(|kept| *kept));
                    drained.then(|| state.wheel.next_expiration())
                };
                moved += batch.len();
                self.timing.counters.figures.expired(batch.len() as u64);
                let batch = self.wake_here(batch);
                // The pool closes only after the driver has stopped and the
                // shards were drained, so a batch is never refused here; if it
                // were, dropping it outside every lock is the safe answer.
                drop(self.pool.submit(batch));
                if let Some(next) = next {
                    earliest = earlier(earliest, next);
                    break;
                }
            }
            drop(discarded);
        }
        (moved, earliest, freed)
    }

    /// Wakes the async tasks whose sleeps are in `batch` on this thread
    /// (no lock is held), instead of a worker: a waker only schedules its
    /// task, so the hop to a worker would cost more than it saves. Returns
    /// the rest, for the workers.
    fn wake_here(&self, mut batch: pool::Batch<T>) -> pool::Batch<T> {
        let wakes: Vec<Fired<T>> = batch
            .extract_if(.., |fired| fired.value.wakes_only())
            .collect();
        for fired in wakes {
            self.timing.record_lag(fired.deadline);
            let task = fired.value;
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || task.run())).is_err() {
                self.timing.counters.record_panic();
            }
        }
        batch
    }

    /// Kafka's `advanceClock(timeout)`: waits up to `timeout` (real time) for
    /// a timer to come due, hands everything due to the workers, and returns
    /// whether anything was.
    pub(crate) fn advance_clock(&self, timeout: Duration) -> bool {
        let give_up = Instant::now().checked_add(timeout);
        loop {
            let seen = self.timing.signal.epoch();
            let (moved, planned) = self.pass_planning();
            let done = moved > 0
                || self.timing.is_closed()
                || give_up.is_some_and(|g| Instant::now() >= g);
            if done {
                // It will not sleep until its plan: the driver takes it.
                self.timing.relinquish(planned);
                return moved > 0;
            }
            self.timing
                .signal
                .wait(seen, earlier(self.sleep_until(planned), give_up));
        }
    }

    /// Stops the driver, drains the shards, closes the pool, joins the
    /// driver `thread` and the workers (all but the calling thread) and
    /// returns the tasks that never ran.
    pub(crate) fn shutdown(&self, thread: &Mutex<Option<JoinHandle<()>>>) -> Vec<T> {
        self.timing.closed.store(true, SeqCst);
        let mut pending = Vec::new();
        for shard in self.shards.iter() {
            let mut state = shard.state.lock();
            state.closed = true;
            let drained = state.wheel.drain();
            // A large wheel's blocks and side heap: freed after the lock.
            let leftover = Leftover::of(&mut state);
            drop(state);
            drop(leftover);
            pending.extend(drained);
        }
        self.timing.signal.notify();
        let thread = thread.lock().take();
        if let Some(handle) = thread {
            pool::join_all(vec![handle]);
        }
        self.pool.close();
        // The crate's own entries end here, outside every lock (sleeps woken,
        // operations completed as shut down, keyed entries removed); the
        // user's tasks go back. Then the waits with no entry end too.
        let tasks = pending.into_iter().filter_map(T::into_user_task).collect();
        self.hooks.run();
        tasks
    }
}

/// Ends a pass that unwinds (a task dropped in it panicked), made at the
/// tick it holds: `next_wake` no longer reads `PASSING`, the ticks left for
/// the pass are planned, and the driver is signalled to pass again, since
/// this pass saw only part of the wheel.
struct EndOnUnwind<'a>(&'a Timing, u64);

impl Drop for EndOnUnwind<'_> {
    fn drop(&mut self) {
        self.0.end_pass(self.1, None);
        self.0.signal.notify();
    }
}

/// The waker an async driver left with the signal: taken back on drop.
struct Forget<'a> {
    /// The driver's signal.
    signal: &'a Signal,
    /// The last waker the driver was polled with.
    waker: Option<std::task::Waker>,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if let Some(waker) = self.waker.take() {
            self.signal.forget(&waker);
        }
    }
}

impl Driver<BoxTask> {
    /// Gives up the timer `entry`, whose task its owner no longer needs (a
    /// finished operation's expiry). On the thread that owns the entry's
    /// shard it is cancelled at once. From another thread its key waits in
    /// the shard's inbox, removed later by the shard's owner or by the
    /// driver before its next poll (see [`shard`](super::shard)); if its
    /// deadline comes first, its job finds the operation done. Takes only
    /// the shard's locks and drops only the caller's own task, so it may be
    /// called under an operation's lock; the memory a cancel that emptied
    /// the wheel let go of comes back, for the caller to drop after that
    /// lock.
    pub(crate) fn discard(&self, entry: Entry) -> Leftover<BoxTask> {
        if entry.key.is_dead() {
            return Leftover::none();
        }
        let shard = &self.shards[entry.shard as usize];
        if !owns(entry.shard as usize, self.shards.len()) && shard.defer_discard(entry.key) {
            return Leftover::none();
        }
        // The task holds a reference of the caller's, never the last one;
        // disarmed, it is dropped without the abandonment a lost timer gets.
        let (task, leftover) = shard.cancel_leaving(entry.key);
        if let Some(task) = task {
            task.disarm();
        }
        leftover
    }
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests;
