//! [`TimerHandle`]: cancel or move one scheduled task.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::shard::Shard;
use super::task::{BoxTask, Task};
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
}
