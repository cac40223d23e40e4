//! [`Timer`]: the handle users hold, and the owner whose drop shuts the
//! timer down.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::time::Deadline;

use super::driver::{Driver, Entry};
use super::handle::TimerHandle;
use super::hooks::OnShutdown;
use super::metrics::Metrics;
use super::pool::UNTIMED;
use super::task::{BoxTask, Task};
use super::timing::Wake;
use crate::error::ScheduleError;
use crate::sync::Mutex;
use crate::wheel::Fired;

/// Owns the threads; dropping the last [`Timer`] drops it, which shuts down.
pub(crate) struct Owner<T: Task> {
    /// Everything the threads share.
    driver: Arc<Driver<T>>,
    /// The driver thread, until joined.
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl<T: Task> Owner<T> {
    /// Owns `driver` and the driver `thread`, if one was started.
    pub(super) fn new(driver: Arc<Driver<T>>, thread: Option<JoinHandle<()>>) -> Self {
        Owner {
            driver,
            thread: Mutex::new(thread),
        }
    }
}

impl<T: Task> Drop for Owner<T> {
    fn drop(&mut self) {
        // Pending tasks are dropped here, on the dropping thread, outside
        // every lock.
        drop(self.driver.shutdown(&self.thread));
    }
}

/// A thread-safe hierarchical timing wheel with its own driver thread and
/// worker pool.
///
/// Cloning is cheap and shares the timer. When the last clone is dropped the
/// timer shuts down: the driver and workers are joined (tasks already handed
/// to workers finish first, so the drop blocks no longer than they take)
/// and pending tasks are dropped without running. Call
/// [`shutdown`](Self::shutdown) to get them back instead, or
/// [`shutdown_async`](Self::shutdown_async) in async code. Pending
/// [`Sleep`](crate::Sleep)s and timeouts do not keep the timer running:
/// they end at once when it shuts down.
///
/// `T` is the task type: by default [`BoxTask`], any closure, built with
/// [`Timer::builder`]. A timer of your own task type (no box per task) is
/// built with [`TimerBuilder::new`](crate::TimerBuilder::new):
/// `let timer: Timer<MyTask> = TimerBuilder::new().build()?`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::Timer;
///
/// let timer = Timer::builder().build().unwrap();
/// let (tx, rx) = std::sync::mpsc::channel();
/// timer.schedule(Duration::from_millis(10), move || tx.send("fired").unwrap()).unwrap();
/// let slow = timer.schedule(Duration::from_secs(60), || unreachable!()).unwrap();
/// assert_eq!(rx.recv().unwrap(), "fired");
/// assert!(slow.cancel().is_some());
/// ```
pub struct Timer<T: Task = BoxTask> {
    /// Shared ownership of the driver and its threads.
    owner: Arc<Owner<T>>,
}

impl<T: Task> Clone for Timer<T> {
    fn clone(&self) -> Self {
        Timer {
            owner: Arc::clone(&self.owner),
        }
    }
}

impl<T: Task> fmt::Debug for Timer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let timing = &self.driver().timing;
        f.debug_struct("Timer")
            .field("tick", &timing.time().resolution().tick())
            .field("shards", &self.driver().shards.len())
            .field("clock", timing.time().clock())
            .field("shut_down", &timing.is_closed())
            .finish()
    }
}

impl<T: Task> Timer<T> {
    /// The first handle to the timer `owner` runs.
    pub(super) fn new(owner: Owner<T>) -> Self {
        Timer {
            owner: Arc::new(owner),
        }
    }

    /// Everything the threads share.
    pub(crate) fn driver(&self) -> &Arc<Driver<T>> {
        &self.owner.driver
    }

    /// The tick length.
    ///
    /// # Examples
    ///
    /// ```
    /// let timer = purgatorio::Timer::builder().build().unwrap();
    /// assert_eq!(timer.tick(), purgatorio::DEFAULT_TICK);
    /// ```
    pub fn tick(&self) -> Duration {
        self.driver().timing.time().resolution().tick()
    }

    /// The timer's name: its threads' name prefix.
    pub(crate) fn name(&self) -> &str {
        &self.driver().timing.name
    }

    /// The current time on the timer's clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = purgatorio::ManualClock::new();
    /// let timer = purgatorio::Timer::builder().clock(clock.clone()).build().unwrap();
    /// let t0 = timer.now();
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(timer.now() - t0, Duration::from_secs(1));
    /// ```
    pub fn now(&self) -> Instant {
        self.driver().timing.time().read()
    }

    /// Runs `task` on a worker once `delay` has passed on the timer's clock.
    ///
    /// `task` is anything that converts into the timer's task type: on a
    /// default timer, any `FnOnce() + Send + 'static` closure. A zero delay
    /// (or any deadline already passed) hands the task to the workers at
    /// once; its handle is then already stale. The task never runs on the
    /// calling thread.
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
    /// let handle = timer.schedule(Duration::from_secs(30), || println!("30 s"))?;
    /// assert!(handle.is_pending());
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    #[inline]
    pub fn schedule(
        &self,
        delay: Duration,
        task: impl Into<T>,
    ) -> Result<TimerHandle<T>, ScheduleError<T>> {
        self.schedule_handle(Deadline::After(delay), task.into())
    }

    /// [`schedule`](Self::schedule) and [`schedule_at`](Self::schedule_at).
    #[inline]
    fn schedule_handle(
        &self,
        deadline: Deadline,
        task: T,
    ) -> Result<TimerHandle<T>, ScheduleError<T>> {
        let (entry, _wake) = self.schedule_entry(deadline, task)?;
        Ok(self.driver().handle(entry))
    }

    /// A schedule for the crate's own entries: names the timer by an
    /// [`Entry`] rather than a [`TimerHandle`], whose shard reference would
    /// be one more count to move per timer.
    ///
    /// The [`Wake`] wakes the driver, if the new deadline is the earliest,
    /// when dropped: a caller holding one of the crate's locks drops it
    /// after, since an async driver's wake-up runs its runtime's waker.
    #[inline]
    pub(crate) fn schedule_entry(
        &self,
        deadline: Deadline,
        task: T,
    ) -> Result<(Entry, Wake<'_>), ScheduleError<T>> {
        self.driver()
            .insert(self.driver().time().due(deadline), task)
    }

    /// Runs `task` on a worker once the timer's clock reaches `deadline`.
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
    /// let at = timer.now() + Duration::from_secs(30);
    /// let handle = timer.schedule_at(at, || ())?;
    /// assert!(handle.cancel().is_some());
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    #[inline]
    pub fn schedule_at(
        &self,
        deadline: Instant,
        task: impl Into<T>,
    ) -> Result<TimerHandle<T>, ScheduleError<T>> {
        self.schedule_handle(Deadline::At(deadline), task.into())
    }

    /// Hands an internal task (a purge) straight to the workers: it never
    /// enters a wheel, so it shows in no gauge and waits for no tick. Gives
    /// the task back if the timer is shut down.
    pub(crate) fn execute(&self, task: T) -> Result<(), T> {
        self.driver()
            .pool
            .submit(vec![Fired::untracked(UNTIMED, task)])
            .map_err(|mut batch| batch.pop().expect("one task").value)
    }

    /// Number of timers linked in the wheels, not yet handed to the workers.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build().unwrap();
    /// timer.schedule(Duration::from_secs(9), || ()).unwrap();
    /// assert_eq!(timer.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        let mut len = 0;
        self.driver()
            .visit_each(|shard, state| len += state.wheel.len() - shard.given_up(state));
        len
    }

    /// Whether no timer is pending.
    ///
    /// # Examples
    ///
    /// ```
    /// let timer = purgatorio::Timer::builder().build().unwrap();
    /// assert!(timer.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot of the counters.
    ///
    /// # Examples
    ///
    /// ```
    /// let timer = purgatorio::Timer::builder().build().unwrap();
    /// assert_eq!(timer.metrics().scheduled, 0);
    /// ```
    pub fn metrics(&self) -> Metrics {
        let mut metrics = Metrics::default();
        self.driver().visit_each(|shard, state| {
            let given_up = shard.given_up(state);
            metrics.pending += state.wheel.len() - given_up;
            metrics.scheduled += state.scheduled;
            metrics.cancelled += state.cancelled + given_up as u64;
            metrics.expired += state.expired;
        });
        self.driver().timing.counters.fill(&mut metrics);
        metrics
    }

    /// The instant at which the earliest pending task may come due, if any
    /// can. Never later than the earliest deadline; after cancellations it
    /// can be earlier (a step at that time then finds nothing due).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build().unwrap();
    /// assert_eq!(timer.next_expiration(), None);
    /// let at = timer.now() + Duration::from_secs(5);
    /// timer.schedule_at(at, || ()).unwrap();
    /// let next = timer.next_expiration().unwrap();
    /// assert!(next >= at && next < at + timer.tick());
    /// ```
    pub fn next_expiration(&self) -> Option<Instant> {
        let timing = &self.driver().timing;
        let mut earliest: Option<u64> = None;
        self.driver().visit_each(|_, state| {
            earliest = earliest
                .into_iter()
                .chain(state.wheel.next_expiration())
                .min();
        });
        earliest.and_then(|tick| timing.time().instant_of(tick))
    }

    /// Kafka's `advanceClock(timeout)`: waits up to `timeout` (real time) for
    /// a timer to come due, hands everything due to the workers, and returns
    /// whether anything was due. For timers built with
    /// [`driver_thread(false)`](crate::TimerBuilder::driver_thread); harmless beside
    /// a driver thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatorio::{ManualClock, Timer};
    ///
    /// let clock = ManualClock::new();
    /// let timer = Timer::builder().clock(clock.clone()).driver_thread(false).build().unwrap();
    /// timer.schedule(Duration::from_millis(5), || ()).unwrap();
    /// assert!(!timer.advance_clock(Duration::ZERO));
    /// clock.advance(Duration::from_millis(5));
    /// assert!(timer.advance_clock(Duration::ZERO));
    /// ```
    pub fn advance_clock(&self, timeout: Duration) -> bool {
        self.driver().advance_clock(timeout)
    }

    /// A non-blocking step: hands every timer due now to the workers and
    /// returns how many there were.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatorio::{ManualClock, Timer};
    ///
    /// let clock = ManualClock::new();
    /// let timer = Timer::builder().clock(clock.clone()).driver_thread(false).build().unwrap();
    /// timer.schedule(Duration::from_millis(1), || ()).unwrap();
    /// timer.schedule(Duration::from_millis(2), || ()).unwrap();
    /// clock.advance(Duration::from_millis(2));
    /// assert_eq!(timer.run_due(), 2);
    /// ```
    pub fn run_due(&self) -> usize {
        self.driver().run_due()
    }

    /// Drives the timer from an async runtime, in place of a driver thread:
    /// for a timer built with
    /// [`driver_thread(false)`](crate::TimerBuilder::driver_thread), a
    /// future to spawn once. It hands what is due to the executor, then
    /// awaits `sleep(instant)` (your runtime's sleep until that instant)
    /// for the next due bucket, or a schedule that makes an earlier one,
    /// or a jump of a [`ManualClock`](crate::ManualClock), and again; with
    /// nothing pending it sleeps without a timeout. It ends once the timer
    /// is shut down.
    ///
    /// With [`Executor::Inline`](crate::Executor::Inline), expirations then
    /// run on the runtime's thread, so an expiry that wakes a task (a
    /// [`Sleep`](crate::Sleep), a [`Parked`](crate::Parked) operation)
    /// hands no work to any other thread: the runtime wakes for the
    /// bucket's deadline and the woken tasks run where it woke. Keep the
    /// callbacks to microseconds, as on a driver thread, since they hold up
    /// the runtime's thread as well. Expiries are as late as the runtime's
    /// sleep makes them (tokio's resolution is a millisecond), never early.
    ///
    /// The future holds the timer: while it runs, dropping the other
    /// handles does not shut the timer down; [`shutdown`](Self::shutdown)
    /// does, and ends the future. Harmless beside a driver thread, like
    /// [`advance_clock`](Self::advance_clock).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatorio::{Executor, Timer};
    ///
    /// # tokio::runtime::Builder::new_multi_thread().enable_time().build()?.block_on(async {
    /// let timer = Timer::builder()
    ///     .driver_thread(false)
    ///     .executor(Executor::Inline)
    ///     .build()?;
    /// let driver = timer.clone();
    /// let driving = tokio::spawn(async move {
    ///     driver.drive(|at| tokio::time::sleep_until(at.into())).await
    /// });
    /// timer.sleep(Duration::from_millis(5)).await;
    /// timer.shutdown();
    /// driving.await?;
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// # })
    /// # .map_err(|e| e as Box<dyn std::error::Error>)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn drive<S, F>(&self, sleep: S)
    where
        S: FnMut(Instant) -> F,
        F: Future<Output = ()>,
    {
        self.driver().drive_async(sleep).await;
    }

    /// The loom models' driver and worker in one: hands every due task to
    /// the (thread-less) pool, then runs what the pool holds on the calling
    /// thread. Returns how many tasks ran.
    #[cfg(all(test, purgatorio_loom))]
    pub(crate) fn run_due_here(&self) -> usize {
        self.run_due();
        let driver = self.driver();
        driver.pool.run_queued(&driver.timing)
    }

    /// Shuts the timer down and returns the tasks that never ran: those you
    /// scheduled. The crate's own entries end here instead: pending
    /// [`Sleep`](crate::Sleep)s and timeouts are woken and end, and the
    /// operations of purgatories sharing the timer complete as shut down.
    ///
    /// Stops the driver, drains every shard, lets the workers finish the
    /// tasks already handed to them, and joins every thread (except the
    /// calling one, if it is a worker: a task may shut its own timer down).
    /// Afterwards `schedule` returns the task in a [`ScheduleError`], and
    /// cancel and reschedule answer `false`. Calling it again returns nothing.
    /// Pending [`Sleep`](crate::Sleep)s end at once.
    ///
    /// It blocks for as long as the tasks already running take; in async
    /// code, [`shutdown_async`](Self::shutdown_async) does the same on a
    /// thread of its own. Dropping the last handle does what this does.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build().unwrap();
    /// timer.schedule(Duration::from_secs(60), || ()).unwrap();
    /// assert_eq!(timer.shutdown().len(), 1);
    /// assert!(timer.shutdown().is_empty());
    /// assert!(timer.is_shut_down());
    /// ```
    pub fn shutdown(&self) -> Vec<T> {
        self.driver().shutdown(&self.owner.thread)
    }

    /// Calls `hook` once when the timer shuts down (at once if it has),
    /// with no lock of the timer's held; a hook whose owner is gone by then
    /// is skipped.
    pub(crate) fn on_shutdown(&self, hook: std::sync::Weak<dyn OnShutdown>) {
        self.driver().hooks.register(hook);
    }

    /// Whether [`shutdown`](Self::shutdown) has been called.
    ///
    /// # Examples
    ///
    /// ```
    /// let timer = purgatorio::Timer::builder().build().unwrap();
    /// assert!(!timer.is_shut_down());
    /// ```
    pub fn is_shut_down(&self) -> bool {
        self.driver().timing.is_closed()
    }
}
