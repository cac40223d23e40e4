//! The thread-safe timer: Kafka's `SystemTimer` and its reaper, done better.
//!
//! ## Shape
//!
//! ```text
//!  schedule/cancel ──▶ shard[i]: Mutex<Wheel>   (i = the calling thread's shard)
//!                          │ next expiration
//!                          ▼
//!          driver thread: sleeps until the earliest one, or a signal
//!                          │ batches of due tasks
//!                          ▼
//!          worker pool: runs them, catching panics
//! ```
//!
//! * **No global lock.** Each thread schedules into its own shard (assigned
//!   round-robin on first use), so threads that schedule and cancel mostly
//!   touch different locks. A handle remembers its shard, so cancel works
//!   from any thread.
//! * **Tickless driver.** One thread sleeps until the earliest due bucket of
//!   all shards; with nothing pending it sleeps without a timeout. A
//!   schedule that creates an earlier deadline wakes it (see `driver` for the
//!   protocol). It moves due tasks out of one shard at a time, at most
//!   [`BATCH`](driver::BATCH) per lock hold, and never runs them.
//! * **Workers.** A pool of threads runs expired tasks; a panic is caught and
//!   counted.
//! * **Lock order.** At most one lock of ours is held at any time, and never
//!   while user code runs (tasks, their `Drop`, or the clock's wakers).
//!
//! Time is measured from the instant the timer was built (its origin), in
//! ticks: deadlines round up, clock readings round down, so nothing fires
//! early.

mod driver;
mod metrics;
mod pool;

#[cfg(all(test, purgatorio_loom))]
pub(crate) mod loom_models;

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::clock::{Clock, ClockWaker, Resolution, SystemClock, Wake};
use crate::error::{BuildError, ScheduleError, MAX_SHARDS, MAX_WORKERS};
use crate::local::WheelConfig;
use crate::sync::{AtomicBool, AtomicU64, Mutex};
use crate::wheel::{TimerKey, Wheel};
use driver::Signal;
use pool::{Job, Pool};

use metrics::Counters;
pub use metrics::Metrics;

/// Work a [`Timer`] runs when a deadline passes.
///
/// Implemented for every `FnOnce() + Send + 'static` closure. A task runs on
/// a worker thread of the timer, never on the driver and never under a lock of
/// the timer's, so it may call anything on the timer (schedule, cancel,
/// metrics, even drop the last `Timer` handle). A task that panics is caught
/// and counted in [`Metrics::panicked`]; the worker goes on.
///
/// # Examples
///
/// ```
/// use purgatorio::Task;
///
/// struct Expire(u64);
/// impl Task for Expire {
///     fn run(self) {
///         println!("request {} timed out", self.0);
///     }
/// }
/// Expire(7).run();
/// ```
pub trait Task: Send + 'static {
    /// Runs the task.
    fn run(self);
}

impl<F: FnOnce() + Send + 'static> Task for F {
    fn run(self) {
        self()
    }
}

/// The default task type: any boxed closure.
pub type BoxTask = Box<dyn FnOnce() + Send + 'static>;

/// What the timer's threads and handles share.
pub(crate) struct Common {
    /// Where time comes from.
    clock: Arc<dyn Clock>,
    /// The clock's reading when the timer was built: tick 0.
    origin: Instant,
    /// Tick length and conversions.
    resolution: Resolution,
    /// Wakes the driver (and `advance_clock` callers).
    signal: Arc<Signal>,
    /// The tick the driver will wake at; `u64::MAX` for none.
    next_wake: AtomicU64,
    /// Set once by shutdown.
    closed: AtomicBool,
    /// Counters kept outside the shard locks.
    counters: Counters,
}

impl Common {
    /// Whether the timer is shut down.
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Time since the origin on the timer's clock.
    fn elapsed(&self) -> Duration {
        self.clock.now().saturating_duration_since(self.origin)
    }

    /// The tick the clock is in now.
    fn now_tick(&self) -> u64 {
        self.resolution.now_tick(self.elapsed())
    }

    /// The tick at which a task due at `deadline` may fire, the clock
    /// reading `elapsed`: due now if the deadline has passed.
    fn deadline_tick(&self, deadline: Instant, elapsed: Duration) -> u64 {
        let deadline = deadline.saturating_duration_since(self.origin);
        self.resolution.due_tick(deadline, elapsed)
    }

    /// The tick at which a task due `delay` after `elapsed` may fire.
    fn delay_tick(&self, elapsed: Duration, delay: Duration) -> u64 {
        self.resolution
            .due_tick(elapsed.saturating_add(delay), elapsed)
    }

    /// The instant at which `tick` begins, if representable.
    fn instant_of(&self, tick: u64) -> Option<Instant> {
        self.origin.checked_add(self.resolution.tick_start(tick))
    }

    /// Records the lag of a task with deadline tick `deadline` starting now.
    fn record_lag(&self, deadline: u64) {
        let lag = self
            .elapsed()
            .saturating_sub(self.resolution.tick_start(deadline));
        self.counters.record_lag(lag);
    }

    /// Wakes the driver if `tick` is earlier than it plans to wake.
    #[inline]
    fn wake_if_earlier(&self, tick: u64) {
        // Fast path: a plain load, so schedulers share the cache line.
        if tick < self.next_wake.load(Ordering::SeqCst)
            && self.next_wake.fetch_min(tick, Ordering::SeqCst) > tick
        {
            self.signal.notify();
        }
    }
}

/// One shard: a wheel and its counters behind a lock.
pub(crate) struct Shard<T> {
    /// The wheel and the counters updated with it.
    state: Mutex<ShardState<T>>,
    /// Shared with the timer.
    common: Arc<Common>,
}

/// What a shard's lock protects.
struct ShardState<T> {
    /// Pending timers of this shard.
    wheel: Wheel<T>,
    /// Tasks accepted here.
    scheduled: u64,
    /// Successful cancels here.
    cancelled: u64,
    /// Tasks moved from here to the workers.
    expired: u64,
    /// Set by shutdown; the wheel is drained and accepts nothing more.
    closed: bool,
}

/// What the driver thread, the workers' sender and the timer handles share.
pub(crate) struct Shared<T> {
    /// The shards, each behind its own lock.
    shards: Box<[Arc<Shard<T>>]>,
    /// Clock, signal, counters.
    common: Arc<Common>,
    /// The worker pool.
    pool: Pool<T>,
}

/// Owns the threads; dropping the last [`Timer`] drops it, which shuts down.
struct Owner<T: Task> {
    /// Everything the threads share.
    shared: Arc<Shared<T>>,
    /// The driver thread, until joined.
    driver: Mutex<Option<JoinHandle<()>>>,
}

impl<T: Task> Drop for Owner<T> {
    fn drop(&mut self) {
        // Pending tasks are dropped here, on the dropping thread, outside
        // every lock.
        drop(shutdown(&self.shared, &self.driver));
    }
}

/// Stops the driver, drains the shards, closes the pool, joins the threads
/// (all but the calling one) and returns the tasks that never ran.
fn shutdown<T: Task>(shared: &Shared<T>, driver: &Mutex<Option<JoinHandle<()>>>) -> Vec<T> {
    let common = &shared.common;
    common.closed.store(true, Ordering::SeqCst);
    let mut pending = Vec::new();
    for shard in shared.shards.iter() {
        let mut state = shard.state.lock();
        state.closed = true;
        let drained = state.wheel.drain();
        drop(state);
        pending.extend(drained);
    }
    common.signal.notify();
    let driver = driver.lock().take();
    if let Some(handle) = driver {
        pool::join_all(vec![handle]);
    }
    shared.pool.close();
    pending
}

thread_local! {
    /// This thread's shard number, assigned round-robin on first use.
    static SHARD_HINT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Next shard number to hand to a new thread.
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's shard among `shards`.
#[inline]
fn shard_index(shards: usize) -> usize {
    SHARD_HINT.with(|hint| {
        let mut value = hint.get();
        if value == usize::MAX {
            value = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
            hint.set(value);
        }
        value % shards
    })
}

/// A thread-safe hierarchical timing wheel with its own driver thread and
/// worker pool.
///
/// Cloning is cheap and shares the timer. When the last clone is dropped the
/// timer shuts down: the driver and workers are joined (tasks already handed
/// to workers finish first) and pending tasks are dropped without running.
/// Call [`shutdown`](Self::shutdown) to get them back instead.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::Timer;
///
/// let timer: Timer = Timer::builder().build().unwrap();
/// let (tx, rx) = std::sync::mpsc::channel();
/// timer.schedule(Duration::from_millis(10), Box::new(move || tx.send("fired").unwrap())).unwrap();
/// let slow = timer.schedule(Duration::from_secs(60), Box::new(|| unreachable!())).unwrap();
/// assert_eq!(rx.recv().unwrap(), "fired");
/// assert!(slow.cancel());
/// ```
pub struct Timer<T: Task = BoxTask> {
    /// Shared ownership of the threads.
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
        let common = &self.shared().common;
        f.debug_struct("Timer")
            .field("tick", &common.resolution.tick())
            .field("shards", &self.shared().shards.len())
            .field("clock", &common.clock)
            .field("shut_down", &common.is_closed())
            .finish()
    }
}

/// Builds a [`Timer`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{ManualClock, Timer};
///
/// let timer: Timer = Timer::builder()
///     .tick(Duration::from_millis(1))
///     .wheel_size(64)
///     .shards(4)
///     .workers(2)
///     .clock(ManualClock::new())
///     .thread_name("reaper")
///     .build()
///     .unwrap();
/// assert_eq!(timer.tick(), Duration::from_millis(1));
/// ```
pub struct TimerBuilder<T: Task = BoxTask> {
    /// Tick and wheel size of every shard.
    config: WheelConfig,
    /// Number of shards.
    shards: usize,
    /// Number of worker threads.
    workers: usize,
    /// Time source.
    clock: Arc<dyn Clock>,
    /// Prefix of thread names.
    thread_name: String,
    /// Whether to start a driver thread.
    driver_thread: bool,
    /// The task type of the timer to build.
    task: PhantomData<fn() -> T>,
}

impl<T: Task> fmt::Debug for TimerBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerBuilder")
            .field("tick", &self.config.tick)
            .field("wheel_size", &self.config.wheel_size)
            .field("shards", &self.shards)
            .field("workers", &self.workers)
            .field("clock", &self.clock)
            .field("thread_name", &self.thread_name)
            .field("driver_thread", &self.driver_thread)
            .finish()
    }
}

impl<T: Task> Default for TimerBuilder<T> {
    fn default() -> Self {
        let cores = thread::available_parallelism().map_or(1, |n| n.get());
        TimerBuilder {
            config: WheelConfig::DEFAULT,
            shards: (2 * cores).min(MAX_SHARDS),
            workers: cores.min(MAX_WORKERS),
            clock: Arc::new(SystemClock),
            thread_name: String::from("purgatorio"),
            driver_thread: true,
            task: PhantomData,
        }
    }
}

impl<T: Task> TimerBuilder<T> {
    /// Sets the tick (default 1 ms): the resolution of deadlines.
    ///
    /// # Examples
    ///
    /// ```
    /// let t: purgatorio::Timer = purgatorio::Timer::builder()
    ///     .tick(std::time::Duration::from_micros(100)).build().unwrap();
    /// assert_eq!(t.tick().as_micros(), 100);
    /// ```
    pub fn tick(mut self, tick: Duration) -> Self {
        self.config.tick = tick;
        self
    }

    /// Sets the slots per level of each shard's wheel (default 64).
    ///
    /// # Examples
    ///
    /// ```
    /// let t: purgatorio::Timer = purgatorio::Timer::builder().wheel_size(20).build().unwrap();
    /// # drop(t);
    /// ```
    pub fn wheel_size(mut self, wheel_size: usize) -> Self {
        self.config.wheel_size = wheel_size;
        self
    }

    /// Sets the number of shards (default: twice the available cores).
    ///
    /// # Examples
    ///
    /// ```
    /// let t: purgatorio::Timer = purgatorio::Timer::builder().shards(1).build().unwrap();
    /// # drop(t);
    /// ```
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// Sets the number of worker threads (default: the available cores).
    ///
    /// # Examples
    ///
    /// ```
    /// let t: purgatorio::Timer = purgatorio::Timer::builder().workers(1).build().unwrap();
    /// # drop(t);
    /// ```
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Sets the clock (default [`SystemClock`]). Pass a [`ManualClock`](crate::ManualClock)
    /// to drive the timer deterministically.
    ///
    /// # Examples
    ///
    /// ```
    /// let clock = purgatorio::ManualClock::new();
    /// let t: purgatorio::Timer = purgatorio::Timer::builder().clock(clock.clone()).build().unwrap();
    /// # drop(t);
    /// ```
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Sets the prefix of the threads' names (default `"purgatorio"`): the
    /// driver is `{prefix}-driver`, workers `{prefix}-worker-{i}`.
    ///
    /// # Examples
    ///
    /// ```
    /// let t: purgatorio::Timer = purgatorio::Timer::builder().thread_name("fetch-timeouts").build().unwrap();
    /// # drop(t);
    /// ```
    pub fn thread_name(mut self, prefix: impl Into<String>) -> Self {
        self.thread_name = prefix.into();
        self
    }

    /// Whether to start a driver thread (default `true`). Without one, the
    /// caller drives the timer with [`Timer::advance_clock`] or
    /// [`Timer::run_due`]; expired tasks still run on the worker pool.
    ///
    /// # Examples
    ///
    /// ```
    /// let t: purgatorio::Timer = purgatorio::Timer::builder().driver_thread(false).build().unwrap();
    /// assert_eq!(t.run_due(), 0);
    /// ```
    pub fn driver_thread(mut self, start: bool) -> Self {
        self.driver_thread = start;
        self
    }

    /// The same settings for a timer of another task type (the purgatory and
    /// keyed timers take a configured `TimerBuilder` and run their own tasks).
    pub(crate) fn retask<U: Task>(self) -> TimerBuilder<U> {
        TimerBuilder {
            config: self.config,
            shards: self.shards,
            workers: self.workers,
            clock: self.clock,
            thread_name: self.thread_name,
            driver_thread: self.driver_thread,
            task: PhantomData,
        }
    }

    /// Builds the timer and starts its threads.
    ///
    /// # Errors
    ///
    /// [`BuildError::Tick`], [`BuildError::WheelSize`], [`BuildError::Shards`]
    /// or [`BuildError::Workers`] for a value out of range;
    /// [`BuildError::ThreadName`] for a thread name with a NUL byte;
    /// [`BuildError::Spawn`] if a thread could not be started (any thread
    /// already started is stopped and joined first).
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio::{BuildError, Timer};
    /// let err = Timer::<purgatorio::BoxTask>::builder().shards(0).build().unwrap_err();
    /// assert!(matches!(err, BuildError::Shards(0)));
    /// ```
    pub fn build(self) -> Result<Timer<T>, BuildError> {
        let (resolution, wheel_size) = self.config.check()?;
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return Err(BuildError::Shards(self.shards));
        }
        if !(1..=MAX_WORKERS).contains(&self.workers) {
            return Err(BuildError::Workers(self.workers));
        }
        if self.thread_name.contains('\0') {
            return Err(BuildError::ThreadName(self.thread_name));
        }
        let signal = Arc::new(Signal::default());
        let common = Arc::new(Common {
            origin: self.clock.now(),
            clock: Arc::clone(&self.clock),
            resolution,
            signal: Arc::clone(&signal),
            next_wake: AtomicU64::new(u64::MAX),
            closed: AtomicBool::new(false),
            counters: Counters::new(),
        });
        let shards = (0..self.shards)
            .map(|_| {
                Arc::new(Shard {
                    state: Mutex::new(ShardState {
                        wheel: Wheel::new(wheel_size, 0),
                        scheduled: 0,
                        cancelled: 0,
                        expired: 0,
                        closed: false,
                    }),
                    common: Arc::clone(&common),
                })
            })
            .collect();
        let pool = Pool::start(self.workers, &self.thread_name, &common)?;
        let shared = Arc::new(Shared {
            shards,
            common: Arc::clone(&common),
            pool,
        });
        let driver = if self.driver_thread {
            let for_driver = Arc::clone(&shared);
            let spawned = thread::Builder::new()
                .name(format!("{}-driver", self.thread_name))
                .spawn(move || for_driver.drive());
            match spawned {
                Ok(handle) => Some(handle),
                Err(err) => {
                    shared.pool.close();
                    return Err(BuildError::Spawn(err));
                }
            }
        } else {
            None
        };
        let weak: Weak<dyn Wake> = Arc::downgrade(&signal) as Weak<dyn Wake>;
        self.clock.register_waker(ClockWaker::new(weak));
        Ok(Timer {
            owner: Arc::new(Owner {
                shared,
                driver: Mutex::new(driver),
            }),
        })
    }
}

impl<T: Task> Timer<T> {
    /// A builder with the defaults: 1 ms tick, 64 slots per level, twice the
    /// cores in shards, one worker per core, the system clock, a driver thread.
    ///
    /// # Examples
    ///
    /// ```
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
    /// assert!(timer.is_empty());
    /// ```
    pub fn builder() -> TimerBuilder<T> {
        TimerBuilder::default()
    }

    /// Everything the threads share.
    fn shared(&self) -> &Shared<T> {
        &self.owner.shared
    }

    /// The tick length.
    ///
    /// # Examples
    ///
    /// ```
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
    /// assert_eq!(timer.tick(), purgatorio::DEFAULT_TICK);
    /// ```
    pub fn tick(&self) -> Duration {
        self.shared().common.resolution.tick()
    }

    /// The current time on the timer's clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = purgatorio::ManualClock::new();
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().clock(clock.clone()).build().unwrap();
    /// let t0 = timer.now();
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(timer.now() - t0, Duration::from_secs(1));
    /// ```
    pub fn now(&self) -> Instant {
        self.shared().common.clock.now()
    }

    /// Runs `task` on a worker once `delay` has passed on the timer's clock.
    ///
    /// A delay that rounds to the current tick or earlier hands the task to
    /// the workers at once; its handle is then already stale.
    ///
    /// # Errors
    ///
    /// [`ScheduleError`] with the task inside if the timer is shut down.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
    /// let handle = timer.schedule(Duration::from_secs(30), Box::new(|| ())).unwrap();
    /// assert!(handle.is_pending());
    /// ```
    #[inline]
    pub fn schedule(&self, delay: Duration, task: T) -> Result<TimerHandle<T>, ScheduleError<T>> {
        let common = &self.shared().common;
        let elapsed = common.elapsed();
        let tick = common.delay_tick(elapsed, delay);
        self.schedule_tick(tick, common.resolution.now_tick(elapsed), task)
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
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
    /// let at = timer.now() + Duration::from_secs(30);
    /// let handle = timer.schedule_at(at, Box::new(|| ())).unwrap();
    /// assert!(handle.cancel());
    /// ```
    #[inline]
    pub fn schedule_at(
        &self,
        deadline: Instant,
        task: T,
    ) -> Result<TimerHandle<T>, ScheduleError<T>> {
        let common = &self.shared().common;
        let elapsed = common.elapsed();
        let tick = common.deadline_tick(deadline, elapsed);
        self.schedule_tick(tick, common.resolution.now_tick(elapsed), task)
    }

    /// Schedules `task` at tick `tick`, the clock being at tick `now`.
    #[inline]
    fn schedule_tick(
        &self,
        tick: u64,
        now: u64,
        task: T,
    ) -> Result<TimerHandle<T>, ScheduleError<T>> {
        let shared = self.shared();
        let shard = &shared.shards[shard_index(shared.shards.len())];
        let common = &shared.common;
        if tick <= now {
            // Already due: straight to the workers (Kafka's "expired, run now").
            return self.run_now(shard, tick, task);
        }
        let key = {
            let mut state = shard.state.lock();
            if state.closed {
                return Err(ScheduleError(task));
            }
            state.scheduled += 1;
            state.wheel.insert(tick, task)
        };
        common.wake_if_earlier(tick);
        Ok(TimerHandle {
            shard: Arc::clone(shard),
            key,
        })
    }

    /// Hands an internal task (a purge) straight to the workers: it never
    /// enters a wheel, so it shows in no gauge and waits for no tick. Gives
    /// the task back if the timer is shut down.
    pub(crate) fn execute(&self, task: T) -> Result<(), T> {
        let job = Job {
            task,
            deadline: pool::UNTIMED,
        };
        self.shared()
            .pool
            .submit(vec![job])
            .map_err(|mut batch| batch.pop().expect("one job").task)
    }

    /// Hands a task that is already due to the workers.
    fn run_now(
        &self,
        shard: &Arc<Shard<T>>,
        tick: u64,
        task: T,
    ) -> Result<TimerHandle<T>, ScheduleError<T>> {
        let job = Job {
            task,
            deadline: tick,
        };
        match self.shared().pool.submit(vec![job]) {
            Ok(()) => {
                let mut state = shard.state.lock();
                state.scheduled += 1;
                state.expired += 1;
                drop(state);
                Ok(TimerHandle {
                    shard: Arc::clone(shard),
                    key: TimerKey::DEAD,
                })
            }
            Err(mut batch) => Err(ScheduleError(batch.pop().expect("one job").task)),
        }
    }

    /// Number of timers linked in the wheels, not yet handed to the workers.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
    /// timer.schedule(Duration::from_secs(9), Box::new(|| ())).unwrap();
    /// assert_eq!(timer.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.shared()
            .shards
            .iter()
            .map(|s| s.state.lock().wheel.len())
            .sum()
    }

    /// Whether no timer is pending.
    ///
    /// # Examples
    ///
    /// ```
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
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
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
    /// assert_eq!(timer.metrics().scheduled, 0);
    /// ```
    pub fn metrics(&self) -> Metrics {
        let mut metrics = Metrics::default();
        for shard in self.shared().shards.iter() {
            let state = shard.state.lock();
            metrics.pending += state.wheel.len();
            metrics.scheduled += state.scheduled;
            metrics.cancelled += state.cancelled;
            metrics.expired += state.expired;
        }
        self.shared().common.counters.fill(&mut metrics);
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
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
    /// assert_eq!(timer.next_expiration(), None);
    /// let at = timer.now() + Duration::from_secs(5);
    /// timer.schedule_at(at, Box::new(|| ())).unwrap();
    /// let next = timer.next_expiration().unwrap();
    /// assert!(next >= at && next < at + timer.tick());
    /// ```
    pub fn next_expiration(&self) -> Option<Instant> {
        let common = &self.shared().common;
        self.shared()
            .shards
            .iter()
            .filter_map(|s| s.state.lock().wheel.next_expiration())
            .min()
            .and_then(|tick| common.instant_of(tick))
    }

    /// Kafka's `advanceClock(timeout)`: waits up to `timeout` (real time) for
    /// a timer to come due, hands everything due to the workers, and returns
    /// whether anything was due. For timers built with
    /// [`driver_thread(false)`](TimerBuilder::driver_thread); harmless beside
    /// a driver thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatorio::{ManualClock, Timer};
    ///
    /// let clock = ManualClock::new();
    /// let timer: Timer = Timer::builder().clock(clock.clone()).driver_thread(false).build().unwrap();
    /// timer.schedule(Duration::from_millis(5), Box::new(|| ())).unwrap();
    /// assert!(!timer.advance_clock(Duration::ZERO));
    /// clock.advance(Duration::from_millis(5));
    /// assert!(timer.advance_clock(Duration::ZERO));
    /// ```
    pub fn advance_clock(&self, timeout: Duration) -> bool {
        self.shared().advance_clock(timeout)
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
    /// let timer: Timer = Timer::builder().clock(clock.clone()).driver_thread(false).build().unwrap();
    /// timer.schedule(Duration::from_millis(1), Box::new(|| ())).unwrap();
    /// timer.schedule(Duration::from_millis(2), Box::new(|| ())).unwrap();
    /// clock.advance(Duration::from_millis(2));
    /// assert_eq!(timer.run_due(), 2);
    /// ```
    pub fn run_due(&self) -> usize {
        self.shared().pass().0
    }

    /// The loom models' driver and worker in one: hands every due task to
    /// the (thread-less) pool, then runs what the pool holds on the calling
    /// thread. Returns how many tasks ran.
    #[cfg(purgatorio_loom)]
    pub(crate) fn run_due_here(&self) -> usize {
        self.run_due();
        let shared = self.shared();
        shared.pool.run_queued(&shared.common)
    }

    /// Shuts the timer down and returns the tasks that never ran.
    ///
    /// Stops the driver, drains every shard, lets the workers finish the
    /// tasks already handed to them, and joins every thread (except the
    /// calling one, if it is a worker: a task may shut its own timer down).
    /// Afterwards `schedule` returns the task in a [`ScheduleError`], and
    /// cancel and reschedule answer `false`. Calling it again returns nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
    /// timer.schedule(Duration::from_secs(60), Box::new(|| ())).unwrap();
    /// assert_eq!(timer.shutdown().len(), 1);
    /// assert!(timer.shutdown().is_empty());
    /// assert!(timer.is_shut_down());
    /// ```
    pub fn shutdown(&self) -> Vec<T> {
        shutdown(self.shared(), &self.owner.driver)
    }

    /// Whether [`shutdown`](Self::shutdown) has been called.
    ///
    /// # Examples
    ///
    /// ```
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
    /// assert!(!timer.is_shut_down());
    /// ```
    pub fn is_shut_down(&self) -> bool {
        self.shared().common.is_closed()
    }
}

/// A scheduled task of a [`Timer`]: cancel or reschedule it from any thread.
///
/// The handle does not keep the timer running. Once the task has been handed
/// to the workers (or cancelled, or the timer shut down) the handle is stale
/// and every operation answers `false`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
/// let handle = timer.schedule(Duration::from_secs(30), Box::new(|| ())).unwrap();
/// let elsewhere = handle.clone();
/// std::thread::spawn(move || assert!(elsewhere.cancel())).join().unwrap();
/// assert!(!handle.cancel());
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

impl<T: Task> TimerHandle<T> {
    /// Cancels the task; `true` iff this call prevented it from running.
    /// The task is dropped on the calling thread, outside the timer's locks.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
    /// let handle = timer.schedule(Duration::from_secs(30), Box::new(|| ())).unwrap();
    /// assert!(handle.cancel());
    /// assert!(!handle.cancel());
    /// ```
    pub fn cancel(&self) -> bool {
        let task = {
            let mut state = self.shard.state.lock();
            let task = state.wheel.remove(self.key);
            state.cancelled += u64::from(task.is_some());
            task
        };
        task.is_some()
    }

    /// Moves the task to `delay` from now; `false` if it is no longer pending.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
    /// let session = timer.schedule(Duration::from_secs(30), Box::new(|| ())).unwrap();
    /// assert!(session.reschedule(Duration::from_secs(30))); // heartbeat
    /// ```
    pub fn reschedule(&self, delay: Duration) -> bool {
        let common = &self.shard.common;
        let tick = common.delay_tick(common.elapsed(), delay);
        self.reschedule_tick(tick)
    }

    /// Moves the task to `deadline`; `false` if it is no longer pending.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
    /// let h = timer.schedule(Duration::from_secs(30), Box::new(|| ())).unwrap();
    /// assert!(h.reschedule_at(timer.now() + Duration::from_secs(60)));
    /// ```
    pub fn reschedule_at(&self, deadline: Instant) -> bool {
        let common = &self.shard.common;
        let tick = common.deadline_tick(deadline, common.elapsed());
        self.reschedule_tick(tick)
    }

    /// Moves the task to tick `tick`.
    fn reschedule_tick(&self, tick: u64) -> bool {
        let moved = self.shard.state.lock().wheel.reschedule(self.key, tick);
        if moved {
            self.shard.common.wake_if_earlier(tick);
        }
        moved
    }

    /// Whether the task is still waiting in the wheel.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer: purgatorio::Timer = purgatorio::Timer::builder().build().unwrap();
    /// let h = timer.schedule(Duration::from_secs(30), Box::new(|| ())).unwrap();
    /// assert!(h.is_pending());
    /// ```
    pub fn is_pending(&self) -> bool {
        self.shard.state.lock().wheel.contains(self.key)
    }
}
