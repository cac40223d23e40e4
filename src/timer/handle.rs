//! Two names for one scheduled task: [`TimerHandle`], which cancels or
//! moves it by itself, and [`TimerId`], a plain value the [`Timer`] takes.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::driver::Entry;
use super::service::Timer;
use super::shard::Shard;
use super::task::{BoxTask, Task};
use crate::error::ScheduleError;
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
        self.shard.reschedule_after(self.key, delay).is_some()
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
        self.shard.reschedule_at(self.key, deadline).is_some()
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
    /// methods ([`Timer::cancel`] and the rest).
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
        TimerId {
            timer: self.shard.timing.id,
            entry: Entry::new(self.shard.number, self.key),
        }
    }
}

/// A scheduled task of a [`Timer`], named by a plain value: [`Copy`], 16
/// bytes, no reference count and nothing to drop. Give it to the timer that
/// made it: [`Timer::cancel`], [`Timer::reschedule`],
/// [`Timer::reschedule_at`], [`Timer::is_pending`].
///
/// It is what a [`TimerHandle`] is without its reference to the timer's
/// memory: for a server that keeps millions of pending timers in its own
/// tables and has the timer at hand when it cancels one. Scheduling and
/// cancelling by id moves no shared count, so on the thread that scheduled
/// it the pair writes nothing another core is using.
///
/// * **Stale ids are harmless.** Once the task ran, was cancelled or the
///   timer shut down, every call with the id answers `None` / `false`, even
///   after its slot holds another task.
/// * **Other timers' ids name nothing.** An id given to a timer other than
///   the one that made it answers `None` / `false` there.
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
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerId {
    /// The number of the timer that made it.
    pub(super) timer: u32,
    /// Its shard and key there.
    pub(super) entry: Entry,
}

impl fmt::Debug for TimerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerId")
            .field("timer", &self.timer)
            .field("entry", &self.entry)
            .finish()
    }
}

/// The timer's tasks by [`TimerId`].
impl<T: Task> Timer<T> {
    /// [`schedule`](Self::schedule), naming the task by a [`TimerId`]
    /// instead of a [`TimerHandle`].
    ///
    /// # Errors
    ///
    /// [`ScheduleError`] with the task inside if the timer is shut down.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// let id = timer.schedule_id(Duration::from_secs(30), || println!("30 s"))?;
    /// assert!(timer.is_pending(id));
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    #[inline]
    pub fn schedule_id(
        &self,
        delay: Duration,
        task: impl Into<T>,
    ) -> Result<TimerId, ScheduleError<T>> {
        let (entry, _wake) = self.schedule_entry(delay, task.into())?;
        Ok(self.driver().id(entry))
    }

    /// [`schedule_at`](Self::schedule_at), naming the task by a
    /// [`TimerId`].
    ///
    /// # Errors
    ///
    /// [`ScheduleError`] with the task inside if the timer is shut down.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// let id = timer.schedule_id_at(timer.now() + Duration::from_secs(30), || ())?;
    /// assert!(timer.cancel(id).is_some());
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    #[inline]
    pub fn schedule_id_at(
        &self,
        deadline: Instant,
        task: impl Into<T>,
    ) -> Result<TimerId, ScheduleError<T>> {
        let (entry, _wake) = self.schedule_entry_at(deadline, task.into())?;
        Ok(self.driver().id(entry))
    }

    /// Cancels the task `id` names and hands it back; `Some` iff this call
    /// prevented it from running (as [`TimerHandle::cancel`]). The task is
    /// returned, not dropped, so its `Drop` runs wherever the caller lets it
    /// go, outside the timer's locks.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatorio::Task;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// let id = timer.schedule_id(Duration::from_secs(30), || println!("late"))?;
    /// let task = timer.cancel(id).expect("pending");
    /// assert!(timer.cancel(id).is_none());
    /// task.run(); // yours to run or drop
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    #[inline]
    pub fn cancel(&self, id: TimerId) -> Option<T> {
        let entry = self.driver().entry_of(id)?;
        self.driver().cancel(entry)
    }

    /// Moves the task `id` names to `delay` from now; `false` if it is no
    /// longer pending.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// let session = timer.schedule_id(Duration::from_secs(30), || ())?;
    /// assert!(timer.reschedule(session, Duration::from_secs(30))); // heartbeat
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn reschedule(&self, id: TimerId, delay: Duration) -> bool {
        self.driver()
            .entry_of(id)
            .and_then(|entry| self.driver().reschedule(entry, delay))
            .is_some()
    }

    /// Moves the task `id` names to `deadline`; `false` if it is no longer
    /// pending.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// let id = timer.schedule_id(Duration::from_secs(30), || ())?;
    /// assert!(timer.reschedule_at(id, timer.now() + Duration::from_secs(60)));
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn reschedule_at(&self, id: TimerId, deadline: Instant) -> bool {
        self.driver()
            .entry_of(id)
            .and_then(|entry| self.driver().reschedule_at(entry, deadline))
            .is_some()
    }

    /// Whether the task `id` names is still waiting in the wheel.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// let id = timer.schedule_id(Duration::from_secs(30), || ())?;
    /// assert!(timer.is_pending(id));
    /// timer.cancel(id);
    /// assert!(!timer.is_pending(id));
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn is_pending(&self, id: TimerId) -> bool {
        self.driver()
            .entry_of(id)
            .is_some_and(|entry| self.driver().contains(entry))
    }
}
