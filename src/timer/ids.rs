//! The timer's methods that name a task by a [`TimerId`]: a plain value,
//! with no reference count to move per task (see [`TimerId`]).

use std::time::{Duration, Instant};

use super::handle::TimerId;
use super::service::Timer;
use super::task::Task;
use crate::error::ScheduleError;
use crate::time::Deadline;

/// The timer's tasks by [`TimerId`].
impl<T: Task> Timer<T> {
    /// [`schedule`](Self::schedule), naming the task by a [`TimerId`]
    /// instead of a [`TimerHandle`](crate::TimerHandle).
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
        self.schedule_id_of(Deadline::After(delay), task.into())
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
        self.schedule_id_of(Deadline::At(deadline), task.into())
    }

    /// [`schedule_id`](Self::schedule_id) and
    /// [`schedule_id_at`](Self::schedule_id_at).
    #[inline]
    fn schedule_id_of(&self, deadline: Deadline, task: T) -> Result<TimerId, ScheduleError<T>> {
        let (entry, _wake) = self.schedule_entry(deadline, task)?;
        Ok(self.driver().id(entry))
    }

    /// Cancels the task `id` names and hands it back; `Some` iff this call
    /// prevented it from running (as [`TimerHandle::cancel`](crate::TimerHandle::cancel)). The task is
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
        self.reschedule_id(id, Deadline::After(delay))
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
        self.reschedule_id(id, Deadline::At(deadline))
    }

    /// [`reschedule`](Self::reschedule) and
    /// [`reschedule_at`](Self::reschedule_at).
    fn reschedule_id(&self, id: TimerId, deadline: Deadline) -> bool {
        self.driver()
            .entry_of(id)
            .and_then(|entry| self.driver().reschedule(entry, deadline))
            .is_some()
    }

    /// Whether the task `id` names is still waiting in the wheel (what
    /// [`LocalTimer::contains`](crate::LocalTimer::contains) says of a key).
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
    #[doc(alias = "contains")]
    pub fn is_pending(&self, id: TimerId) -> bool {
        self.driver()
            .entry_of(id)
            .is_some_and(|entry| self.driver().contains(entry))
    }
}
