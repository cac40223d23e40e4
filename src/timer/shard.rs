//! A shard: one wheel and its counters behind a lock, and which shard a
//! thread schedules into.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::task::Task;
use super::timing::Timing;
use crate::sync::Mutex;
use crate::wheel::{TimerKey, Wheel};

/// One shard: a wheel and its counters behind a lock.
pub(crate) struct Shard<T> {
    /// The wheel and the counters updated with it.
    pub(super) state: Mutex<ShardState<T>>,
    /// Shared with the timer.
    pub(super) timing: Arc<Timing>,
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

impl<T: Task> Shard<T> {
    /// Cancels the timer `key` and hands its task back; `None` if it is no
    /// longer pending.
    pub(super) fn cancel(&self, key: TimerKey) -> Option<T> {
        let task = {
            let mut state = self.state.lock();
            let task = state.wheel.remove(key);
            state.cancelled += u64::from(task.is_some());
            task
        };
        if task.is_some() {
            self.timing.counters.figures.cancelled();
        }
        task
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

    /// Moves the timer `key` to `delay` from now; `false` if it is no
    /// longer pending.
    pub(super) fn reschedule_after(&self, key: TimerKey, delay: Duration) -> bool {
        let time = self.timing.time();
        self.reschedule(key, time.due_after(time.now(), delay))
    }

    /// Moves the timer `key` to `deadline`; `false` if it is no longer
    /// pending.
    pub(super) fn reschedule_at(&self, key: TimerKey, deadline: Instant) -> bool {
        let time = self.timing.time();
        self.reschedule(key, time.due_at(time.now(), deadline))
    }

    /// Moves the timer `key` to tick `tick`; `false` if it is no longer
    /// pending.
    fn reschedule(&self, key: TimerKey, tick: u64) -> bool {
        let moved = self.state.lock().wheel.reschedule(key, tick);
        if moved {
            self.timing.wake_if_earlier(tick);
        }
        moved
    }

    /// Whether the timer `key` is still waiting in the wheel.
    pub(super) fn contains(&self, key: TimerKey) -> bool {
        self.state.lock().wheel.contains(key)
    }
}

thread_local! {
    /// This thread's shard number, assigned round-robin on first use.
    static SHARD_HINT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Next shard number to hand to a new thread.
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

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
