//! Two names for one scheduled task: [`TimerHandle`], which cancels or
//! moves it by itself, and [`TimerId`], a plain value the [`Timer`](crate::Timer) takes.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::shard::Shard;
use super::task::{BoxTask, Task};
use crate::time::{Deadline, MAX_SHARDS};
use crate::wheel::TimerKey;

/// A scheduled task of a [`Timer`](crate::Timer): cancel or reschedule it from any thread.
///
/// The handle does not keep the timer running. Once the task has been handed
/// to the workers (or cancelled, or the timer shut down) the handle is stale
/// and every operation answers `false`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let timer = purgatorio::Timer::builder().build().unwrap();
/// let handle = timer.schedule(Duration::from_secs(30), || ()).unwrap();
/// let elsewhere = handle.clone();
/// std::thread::spawn(move || assert!(elsewhere.cancel().is_some())).join().unwrap();
/// assert!(handle.cancel().is_none());
/// ```
pub struct TimerHandle<T = BoxTask> {
    /// The shard the timer lives in.
    shard: Arc<Shard<T>>,
    /// Its key there.
    key: TimerKey,
}

impl<T> Clone for TimerHandle<T> {
    fn clone(&self) -> Self {
        TimerHandle {
            shard: Arc::clone(&self.shard),
            key: self.key,
        }
    }
}

impl<T> fmt::Debug for TimerHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerHandle")
            .field("key", &self.key)
            .finish()
    }
}

impl<T> TimerHandle<T> {
    /// The handle of the timer `key` in `shard`.
    pub(super) fn new(shard: Arc<Shard<T>>, key: TimerKey) -> Self {
        TimerHandle { shard, key }
    }
}

impl<T: Task> TimerHandle<T> {
    /// Cancels the task and hands it back; `Some` iff this call prevented
    /// it from running (like [`LocalTimer::cancel`](crate::LocalTimer::cancel)).
    /// The task is returned, not dropped, so its `Drop` runs wherever the
    /// caller lets it go, outside the timer's locks.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatorio::Task;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// let handle = timer.schedule(Duration::from_secs(30), || println!("late"))?;
    /// let task = handle.cancel().expect("pending");
    /// assert!(handle.cancel().is_none());
    /// task.run(); // yours to run or drop
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn cancel(&self) -> Option<T> {
        self.shard.cancel(self.key)
    }

    /// Moves the task to `delay` from now; `false` if it is no longer pending.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build().unwrap();
    /// let session = timer.schedule(Duration::from_secs(30), || ()).unwrap();
    /// assert!(session.reschedule(Duration::from_secs(30))); // heartbeat
    /// ```
    pub fn reschedule(&self, delay: Duration) -> bool {
        self.shard
            .reschedule(self.key, Deadline::After(delay))
            .is_some()
    }

    /// Moves the task to `deadline`; `false` if it is no longer pending.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build().unwrap();
    /// let h = timer.schedule(Duration::from_secs(30), || ()).unwrap();
    /// assert!(h.reschedule_at(timer.now() + Duration::from_secs(60)));
    /// ```
    pub fn reschedule_at(&self, deadline: Instant) -> bool {
        self.shard
            .reschedule(self.key, Deadline::At(deadline))
            .is_some()
    }

    /// Whether the task is still waiting in the wheel.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build().unwrap();
    /// let h = timer.schedule(Duration::from_secs(30), || ()).unwrap();
    /// assert!(h.is_pending());
    /// ```
    pub fn is_pending(&self) -> bool {
        self.shard.contains(self.key)
    }

    /// The task's [`TimerId`]: the same task, named for the timer's own
    /// methods ([`Timer::cancel`](crate::Timer::cancel) and the rest).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// let handle = timer.schedule(Duration::from_secs(30), || ())?;
    /// assert!(timer.cancel(handle.id()).is_some());
    /// assert!(!handle.is_pending());
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn id(&self) -> TimerId {
        TimerId::new(self.shard.timing.id, self.shard.number, self.key)
    }
}

/// A scheduled task of a [`Timer`](crate::Timer), named by a plain value: [`Copy`], 16
/// bytes, no reference count and nothing to drop. Give it to the timer that
/// made it: [`Timer::cancel`](crate::Timer::cancel), [`Timer::reschedule`](crate::Timer::reschedule),
/// [`Timer::reschedule_at`](crate::Timer::reschedule_at), [`Timer::is_pending`](crate::Timer::is_pending).
///
/// It is what a [`TimerHandle`] is without its reference to the timer's
/// memory: for a server that keeps millions of pending timers in its own
/// tables and has the timer at hand when it cancels one. Scheduling and
/// cancelling by id moves no reference count.
///
/// * **Stale ids are harmless.** Once the task was handed to the workers,
///   was cancelled or the timer shut down, every call with the id answers
///   `None` / `false`, even after its slot holds another task (a slot's
///   generation would have to come round after 2³² reuses first, as for a
///   [`TimerKey`](crate::TimerKey)).
/// * **Other timers' ids name nothing.** An id given to a timer other than
///   the one that made it answers `None` / `false` there.
/// * **Distinct tasks, distinct ids.** Two tasks of one timer never have
///   equal ids while either is pending, so ids can key a map. A task due at
///   once (zero delay, a deadline already past) goes straight to the
///   workers: its id is stale from the start, and still its own. (On an
///   [`Executor::Inline`](crate::Executor::Inline) timer such a task passes
///   through the wheel, and is pending until the driver's next pass.)
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let timer = purgatorio::Timer::builder().build()?;
/// let id = timer.schedule_id(Duration::from_secs(30), || println!("late"))?;
/// assert!(timer.is_pending(id));
/// assert!(timer.cancel(id).is_some());
/// assert!(timer.cancel(id).is_none()); // stale: harmless
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId {
    /// The number of the timer that made it, above [`SHARD_BITS`], and its
    /// shard's below.
    word: u64,
    /// Its key in that shard.
    key: TimerKey,
}

/// Bits of a [`TimerId`]'s word that hold the shard's number.
const SHARD_BITS: u32 = 10;
const _: () = assert!(MAX_SHARDS <= 1 << SHARD_BITS);

/// The bits of a timer's number an id keeps.
pub(super) const TIMER_MASK: u64 = u64::MAX >> SHARD_BITS;

impl TimerId {
    /// The id of the task `key` in shard `shard` of timer number `timer`.
    pub(super) fn new(timer: u64, shard: u32, key: TimerKey) -> Self {
        TimerId {
            word: (timer & TIMER_MASK) << SHARD_BITS | u64::from(shard),
            key,
        }
    }

    /// The number of its timer (the bits of it an id keeps).
    pub(super) fn timer(self) -> u64 {
        self.word >> SHARD_BITS
    }

    /// The number of its shard.
    pub(super) fn shard(self) -> u32 {
        (self.word & ((1 << SHARD_BITS) - 1)) as u32
    }

    /// Its key in that shard.
    pub(super) fn key(self) -> TimerKey {
        self.key
    }
}

impl fmt::Debug for TimerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerId")
            .field("timer", &self.timer())
            .field("shard", &self.shard())
            .field("key", &self.key)
            .finish()
    }
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests {
    use super::*;
    use crate::{Executor, ManualClock, Timer};

    /// A timer on `clock` with `shards` shards, run by `run_due` only.
    fn manual(clock: &ManualClock, shards: usize, executor: Executor) -> Timer {
        Timer::builder()
            .clock(clock.clone())
            .driver_thread(false)
            .shards(shards)
            .executor(executor)
            .build()
            .expect("timer")
    }

    #[test]
    fn an_id_naming_a_shard_the_timer_lacks_names_nothing() {
        let clock = ManualClock::new();
        let timer = manual(&clock, 1, Executor::default());
        let real = timer.schedule_id(Duration::from_secs(1), || ()).unwrap();
        for shard in [1, 7, (1 << SHARD_BITS) - 1] {
            let forged = TimerId::new(timer.driver().timing.id, shard, real.key());
            assert!(!timer.is_pending(forged));
            assert!(timer.cancel(forged).is_none());
            assert!(!timer.reschedule(forged, Duration::from_secs(2)));
        }
        assert!(timer.is_pending(real), "the real task is untouched");
    }

    #[test]
    fn a_stale_id_and_the_task_that_reused_its_slot_differ() {
        let clock = ManualClock::new();
        let timer = manual(&clock, 1, Executor::default());
        let old = timer.schedule_id(Duration::from_millis(1), || ()).unwrap();
        clock.advance(Duration::from_millis(1));
        assert_eq!(timer.run_due(), 1);
        let new = timer.schedule_id(Duration::from_millis(5), || ()).unwrap();
        assert_eq!(old.key().slot(), new.key().slot(), "the slot was reused");
        assert_ne!(old, new);
        assert!(timer.cancel(old).is_none());
        assert!(timer.is_pending(new));
    }

    #[test]
    fn tasks_due_at_once_have_ids_of_their_own() {
        let clock = ManualClock::new();
        let timer = manual(&clock, 1, Executor::default());
        let ids: Vec<TimerId> = (0..3)
            .map(|_| timer.schedule_id(Duration::ZERO, || ()).unwrap())
            .collect();
        let past = timer.schedule_id_at(timer.now(), || ()).unwrap();
        assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2] && ids[2] != past);
        for id in ids.into_iter().chain([past]) {
            assert!(!timer.is_pending(id), "handed to the workers at once");
            assert!(timer.cancel(id).is_none());
        }
        // An inline timer passes them through the wheel instead.
        let inline = manual(&clock, 1, Executor::Inline);
        let id = inline.schedule_id(Duration::ZERO, || ()).unwrap();
        assert!(inline.is_pending(id));
        assert_eq!(inline.run_due(), 1);
        assert!(!inline.is_pending(id));
    }

    #[test]
    fn an_id_keeps_the_low_bits_of_the_timer_number_and_the_whole_shard() {
        let key = TimerKey::dead(7);
        let id = TimerId::new(u64::MAX, 1023, key);
        assert_eq!((id.timer(), id.shard(), id.key()), (TIMER_MASK, 1023, key));
        let id = TimerId::new(5, 0, key);
        assert_eq!((id.timer(), id.shard()), (5, 0));
        assert_eq!(std::mem::size_of::<TimerId>(), 16);
    }
}
