//! A shard: one wheel and its counters behind a lock, which shard a
//! thread schedules into, and the inbox of timers other threads gave up.
//!
//! ## Discards from other threads
//!
//! A purgatory's operation that completes on another thread than the one
//! that parked it no longer needs its expiry. Removing it at once would take
//! the shard's lock, which the parking thread takes for every schedule, and
//! free an arena slot that thread reuses next: two cache lines moved
//! between cores per operation. Instead the completing thread leaves the
//! key in the shard's inbox ([`Shard::defer_discard`]), and the keys are
//! removed in batches by the thread that owns the shard, on its next
//! schedule once [`DISCARD_BATCH`] are waiting, or by the driver before it
//! polls the shard. A timer whose key waits in the inbox is still in the
//! wheel: if its deadline comes first it fires, and its job finds the
//! operation done and does nothing. Nothing is dropped under a lock: the
//! removed tasks are returned to drop after it.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use super::task::Task;
use super::timing::{Timing, Wake};
use crate::sync::{AtomicBool, AtomicU64, Mutex};
use crate::time::{Deadline, TimeSource};
use crate::wheel::{Freed, TimerKey, Wheel};

/// How many keys wait in a shard's inbox before the shard's owner removes
/// them on its next schedule.
#[cfg(not(purgatorio_loom))]
pub(super) const DISCARD_BATCH: usize = 256;
/// One in the loom models, so that they reach the owner's removal.
#[cfg(purgatorio_loom)]
pub(super) const DISCARD_BATCH: usize = 1;

/// The most keys an inbox holds: past this, a thread gives up its timer by
/// cancelling it at once, so the inbox stays bounded even if the shard's
/// owner never schedules again and the driver sleeps.
pub(super) const DISCARD_MAX: usize = 4 * DISCARD_BATCH;

/// One shard: a wheel and its counters behind a lock.
pub(crate) struct Shard<T> {
    /// The wheel and the counters updated with it.
    pub(super) state: Mutex<ShardState<T>>,
    /// What other threads write for the owner; on a line of its own, not
    /// beside the lock the owner takes for every schedule.
    inbox: Inbox,
    /// The latest tick through which the wheel was polled empty: every
    /// timer in the wheel at that poll whose tick (its current one: a moved
    /// timer's new tick) is at or below it has left the wheel. Written
    /// under `state`'s lock; read without it.
    polled_through: AtomicU64,
    /// The latest tick a pass began polling the wheel at (drained or not),
    /// stored before it fires anything: a sleep woken by that pass whose
    /// clock reads an earlier tick knows its clock went back. Written
    /// under `state`'s lock; read without it.
    passing: AtomicU64,
    /// Shared with the timer.
    pub(super) timing: Arc<Timing>,
    /// Its number among the timer's shards.
    pub(super) number: u32,
    /// Every shard of the timer, this one included, by weak reference
    /// (set once, after all were built): how a [`HomeShard`] made on one
    /// thread reaches the home of the thread that polls it.
    siblings: OnceLock<Arc<[Weak<Shard<T>>]>>,
}

/// Keys of timers that other threads gave up on, still in the wheel (see
/// the module docs), on a cache line of their own (128 bytes: two lines on
/// processors that fetch lines in pairs). Beside the shard's lock, each
/// key left here made the owner's next lock wait for the line.
#[repr(align(128))]
struct Inbox {
    /// The keys. Taken after the shard's `state` when both are held.
    keys: Mutex<Vec<TimerKey>>,
    /// Set once `keys` holds [`DISCARD_BATCH`] of them; cleared by whoever
    /// empties it. A hint read without the lock.
    full: AtomicBool,
}

/// What a shard's lock protects.
pub(crate) struct ShardState<T> {
    /// Pending timers of this shard.
    pub(super) wheel: Wheel<T>,
    /// Tasks accepted here.
    pub(super) scheduled: u64,
    /// Successful cancels here.
    pub(super) cancelled: u64,
    /// Tasks moved from here to the workers.
    pub(super) expired: u64,
    /// Set by shutdown; the wheel is drained and accepts nothing more.
    pub(super) closed: bool,
}

/// Memory a cancel took out of the wheel it emptied, to drop once the
/// caller holds no lock (freeing a million timers' slots takes
/// milliseconds). It holds no task: dropping it runs no user code.
#[must_use = "dropping it frees the memory: hold it until the caller's locks are released"]
pub(crate) struct Leftover<T> {
    /// The memory; only ever dropped.
    _memory: Option<Box<Freed<T>>>,
}

impl<T> Leftover<T> {
    /// Nothing to free.
    pub(super) fn none() -> Self {
        Leftover { _memory: None }
    }

    /// What the wheel of `state` let go of since it was last asked.
    pub(super) fn of(state: &mut ShardState<T>) -> Self {
        Leftover {
            _memory: state.wheel.take_freed(),
        }
    }

    /// Whether it holds memory to free (tests only).
    #[cfg(all(test, not(purgatorio_loom)))]
    pub(super) fn holds_memory(&self) -> bool {
        self._memory.is_some()
    }
}

impl<T> Drop for Leftover<T> {
    /// Nothing to do, and no call, in the common case: the free itself (a
    /// rare, long call) is kept out of line.
    #[inline]
    fn drop(&mut self) {
        if let Some(memory) = self._memory.take() {
            free_cold(memory);
        }
    }
}

/// Frees what a cancel let go of.
#[cold]
#[inline(never)]
fn free_cold<T>(memory: Box<Freed<T>>) {
    drop(memory);
}

impl<T> Shard<T> {
    /// Shard number `number`, of `wheel`, sharing `timing`. The memory
    /// the wheel gives back is never freed under the shard's lock: a
    /// pass frees it after the pass (see
    /// [`Driver::pass`](super::driver::Driver::pass)), a cancel that
    /// empties the wheel after the lock ([`Leftover`]), and so does
    /// [`discard_waiting`](Self::discard_waiting).
    pub(super) fn new(number: u32, mut wheel: Wheel<T>, timing: Arc<Timing>) -> Self {
        wheel.keep_freed();
        Shard {
            state: Mutex::new(ShardState {
                wheel,
                scheduled: 0,
                cancelled: 0,
                expired: 0,
                closed: false,
            }),
            inbox: Inbox {
                keys: Mutex::new(Vec::new()),
                full: AtomicBool::new(false),
            },
            polled_through: AtomicU64::new(0),
            passing: AtomicU64::new(0),
            timing,
            number,
            siblings: OnceLock::new(),
        }
    }

    /// How many shards its timer has.
    #[cfg(all(test, not(purgatorio_loom)))]
    fn shards_in_timer(&self) -> usize {
        self.siblings.get().map_or(1, |siblings| siblings.len())
    }

    /// Gives each of `shards` (a timer's, in order) its siblings.
    pub(super) fn link(shards: &[Arc<Shard<T>>]) {
        let siblings: Arc<[Weak<Shard<T>>]> = shards.iter().map(Arc::downgrade).collect();
        for shard in shards {
            let _ = shard.siblings.set(Arc::clone(&siblings));
        }
    }

    /// Records that a pass (holding the wheel's lock) begins polling the
    /// wheel at tick `now`, before it fires anything.
    pub(super) fn passing(&self, now: u64) {
        self.passing.fetch_max(now, Ordering::Release);
    }

    /// Records that the wheel (whose lock the caller holds) was polled
    /// until nothing at or before tick `now` was left.
    pub(super) fn polled(&self, now: u64) {
        self.polled_through.fetch_max(now, Ordering::Release);
    }

    /// The mark of a timer just inserted at `tick` into the wheel (whose
    /// lock the caller holds): the tick through which the shard must be
    /// polled, later, for the timer to have certainly left the wheel. It is
    /// past the ticks already polled, so a timer inserted after its tick
    /// was polled (a clock read late) waits for the next poll.
    pub(super) fn mark(&self, tick: u64) -> u64 {
        // Relaxed: the caller holds the lock every write is made under.
        tick.max(
            self.polled_through
                .load(Ordering::Relaxed)
                .saturating_add(1),
        )
    }

    /// Whether the shard was polled through `mark`.
    #[inline]
    pub(super) fn polled_through(&self, mark: u64) -> bool {
        self.polled_through.load(Ordering::Acquire) >= mark
    }

    /// Leaves `key` for the shard's owner to remove (see the module docs);
    /// `false` if the inbox is full, and the caller must cancel the timer
    /// itself.
    pub(super) fn defer_discard(&self, key: TimerKey) -> bool {
        let mut inbox = self.inbox.keys.lock();
        if inbox.len() >= DISCARD_MAX {
            return false;
        }
        inbox.push(key);
        if inbox.len() == DISCARD_BATCH {
            self.inbox.full.store(true, Ordering::Relaxed);
        }
        true
    }

    /// Whether the inbox asks its owner to empty it.
    #[inline]
    pub(super) fn inbox_full(&self) -> bool {
        self.inbox.full.load(Ordering::Relaxed)
    }

    /// Removes the timers named in the inbox from the wheel of `state` (this
    /// shard's, locked by the caller). Returns their tasks, for the caller
    /// to drop once no lock is held.
    pub(super) fn apply_discards(&self, state: &mut ShardState<T>) -> Vec<T> {
        let keys = {
            let mut inbox = self.inbox.keys.lock();
            self.inbox.full.store(false, Ordering::Relaxed);
            // Drained, not taken: the inbox keeps its capacity.
            inbox.drain(..).collect::<Vec<_>>()
        };
        let tasks: Vec<T> = keys
            .into_iter()
            .filter_map(|key| state.wheel.remove(key))
            .collect();
        state.cancelled += tasks.len() as u64;
        self.timing.counters.figures.cancelled(tasks.len() as u64);
        tasks
    }

    /// Empties the inbox under the shard's lock; returns the removed tasks,
    /// and the memory the wheel let go of if that emptied it, to drop
    /// after it.
    pub(super) fn discard_waiting(&self) -> (Vec<T>, Leftover<T>) {
        let mut state = self.state.lock();
        let tasks = self.apply_discards(&mut state);
        (tasks, Leftover::of(&mut state))
    }

    /// How many timers in the wheel of `state` (this shard's, locked by
    /// the caller) another thread gave up on: they count as cancelled.
    pub(super) fn given_up(&self, state: &ShardState<T>) -> usize {
        let inbox = self.inbox.keys.lock();
        inbox
            .iter()
            .filter(|&&key| state.wheel.contains(key))
            .count()
    }
}

impl<T: Task> Shard<T> {
    /// Cancels the timer `key` and hands its task back; `None` if it is no
    /// longer pending.
    pub(super) fn cancel(&self, key: TimerKey) -> Option<T> {
        let (task, leftover) = self.cancel_leaving(key);
        drop(leftover);
        task
    }

    /// [`cancel`](Self::cancel), handing back also what the wheel let go
    /// of if this emptied it, for the caller to drop after its own locks.
    #[inline]
    pub(super) fn cancel_leaving(&self, key: TimerKey) -> (Option<T>, Leftover<T>) {
        let mut state = self.state.lock();
        let task = state.wheel.remove(key);
        state.cancelled += u64::from(task.is_some());
        // Only the cancel that empties the wheel lets go of memory (a
        // million timers' slots take milliseconds to free).
        let leftover = match state.wheel.len() {
            0 => Leftover::of(&mut state),
            _ => Leftover::none(),
        };
        drop(state);
        if task.is_some() {
            self.timing.counters.figures.cancelled(1);
        }
        (task, leftover)
    }

    /// Swaps the task of the pending timer `key` for `task` and returns the
    /// old one, to drop outside the lock; `Err(task)` if it is no longer
    /// pending.
    pub(super) fn replace(&self, key: TimerKey, task: T) -> Result<T, T> {
        match self.state.lock().wheel.get_mut(key) {
            Some(slot) => Ok(std::mem::replace(slot, task)),
            None => Err(task),
        }
    }

    /// Moves the timer `key` to `deadline`; `None` if it is no longer
    /// pending, else its new mark ([`mark`](Self::mark)) and the driver's
    /// [`Wake`], to drop after the caller's locks.
    pub(super) fn reschedule(&self, key: TimerKey, deadline: Deadline) -> Option<(u64, Wake<'_>)> {
        let tick = self.timing.time().due(deadline).tick;
        let mark = {
            let mut state = self.state.lock();
            state.wheel.reschedule(key, tick).then(|| self.mark(tick))
        };
        mark.map(|mark| (mark, self.timing.wake_if_earlier(tick)))
    }

    /// Whether the timer `key` is still waiting in the wheel.
    pub(super) fn contains(&self, key: TimerKey) -> bool {
        self.state.lock().wheel.contains(key)
    }

    /// Inserts `task` at `tick` from the calling thread, whose home this
    /// shard is; returns its key and mark ([`mark`](Self::mark)), or gives
    /// the task back if the shard is closed. Counts it as scheduled.
    #[inline]
    pub(super) fn insert(&self, tick: u64, task: T) -> Result<(TimerKey, u64), T> {
        let (key, mark) = {
            let mut state = self.state.lock();
            if state.closed {
                return Err(task);
            }
            state.scheduled += 1;
            let key = state.wheel.insert(tick, task);
            (key, self.mark(tick))
        };
        self.timing.counters.figures.scheduled(1);
        Ok((key, mark))
    }
}

/// The shard a [`Sleep`](crate::Sleep) holds: at first the home shard of
/// the thread that made it, then the home of the thread that first polls
/// it, where its entry goes. Its reference count moves on that shard's
/// line, which its own thread uses, rather than on one line that every
/// thread's sleeps share (a reference to the whole timer, as a sleep held
/// before: two runtime workers making timeouts at once spent most of their
/// time passing that line between them).
pub(crate) struct HomeShard<T>(Arc<Shard<T>>);

impl<T: Task> HomeShard<T> {
    /// The calling thread's home among `shards`.
    #[inline]
    pub(super) fn of(shards: &[Arc<Shard<T>>]) -> Self {
        HomeShard(Arc::clone(&shards[shard_index(shards.len())]))
    }

    /// Whether it is the calling thread's home shard.
    #[cfg(all(test, not(purgatorio_loom)))]
    pub(crate) fn is_home(&self) -> bool {
        self.0.number as usize == shard_index(self.0.shards_in_timer())
    }

    /// The timer's time source.
    #[inline]
    pub(crate) fn time(&self) -> &TimeSource {
        self.0.timing.time()
    }

    /// Whether the timer is shut down.
    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        self.0.timing.is_closed()
    }

    /// Inserts `task` at `tick` into the calling thread's home shard, which
    /// this then holds (the shard it held, if that one is gone): its key,
    /// its mark, and the driver's [`Wake`] to drop after the caller's
    /// locks; the task back if the timer shut down.
    #[inline]
    pub(crate) fn insert(&mut self, tick: u64, task: T) -> Result<(TimerKey, u64, Wake<'_>), T> {
        if let Some(siblings) = self.0.siblings.get() {
            let home = shard_index(siblings.len());
            if home != self.0.number as usize {
                if let Some(shard) = siblings[home].upgrade() {
                    self.0 = shard;
                }
            }
        }
        let (key, mark) = self.0.insert(tick, task)?;
        Ok((key, mark, self.0.timing.wake_if_earlier(tick)))
    }

    /// Whether the timer inserted with `mark` has certainly left the wheel
    /// (it fired): the shard was polled through the mark. One atomic read,
    /// no lock.
    #[inline]
    pub(crate) fn gone(&self, mark: u64) -> bool {
        self.0.polled_through(mark)
    }

    /// Cancels `key` and hands its task back; `None` if it is no longer
    /// pending.
    #[inline]
    pub(crate) fn cancel(&self, key: TimerKey) -> Option<T> {
        self.0.cancel(key)
    }

    /// Whether `key` is still in the wheel (takes the shard's lock).
    pub(crate) fn contains(&self, key: TimerKey) -> bool {
        self.0.contains(key)
    }

    /// Whether the clock reading `at` is behind a pass of this shard (the
    /// clock went back since), or at or before the timer's origin (a pass
    /// there fires tick 0, which moves no mark). A sleep woken by a pass
    /// that fired its entry, whose clock reads before its deadline, always
    /// finds this (see [`Shard::passing`]).
    pub(crate) fn behind_a_pass(&self, at: Instant) -> bool {
        let time = self.time();
        let since = time.since_origin(at);
        since == 0 || time.resolution().tick_of(since) < self.0.passing.load(Ordering::Acquire)
    }

    /// Swaps the task of `key` for `task`, handing the old one back;
    /// `Err(task)` if it is no longer pending.
    pub(crate) fn replace(&self, key: TimerKey, task: T) -> Result<T, T> {
        self.0.replace(key, task)
    }

    /// Moves `key` to `deadline`; `None` if it is no longer pending, else
    /// its new mark (see [`gone`](Self::gone)) and the driver's [`Wake`],
    /// to drop after the caller's locks.
    pub(crate) fn reschedule(&self, key: TimerKey, deadline: Deadline) -> Option<(u64, Wake<'_>)> {
        self.0.reschedule(key, deadline)
    }
}

thread_local! {
    /// This thread's shard number, assigned round-robin on first use.
    static SHARD_HINT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Next shard number to hand to a new thread.
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// Whether the calling thread owns shard `index` among `shards`: it is the
/// shard it schedules into.
#[inline]
pub(super) fn owns(index: usize, shards: usize) -> bool {
    #[cfg(purgatorio_loom)]
    if FOREIGN.with(Cell::get) {
        return false;
    }
    shard_index(shards) == index
}

#[cfg(purgatorio_loom)]
crate::sync::thread_local! {
    /// Set by a loom model thread that plays a thread owning no shard (the
    /// models' timers have one shard, which every thread would own).
    static FOREIGN: Cell<bool> = Cell::new(false);
}

/// Makes the calling loom model thread own no shard.
#[cfg(all(test, purgatorio_loom))]
pub(crate) fn act_as_foreign() {
    FOREIGN.with(|f| f.set(true));
}

/// The calling thread's shard among `shards`.
#[inline]
pub(crate) fn shard_index(shards: usize) -> usize {
    SHARD_HINT.with(|hint| {
        let mut value = hint.get();
        if value == usize::MAX {
            value = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
            hint.set(value);
        }
        value % shards
    })
}
