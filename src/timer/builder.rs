//! [`TimerBuilder`]: settings, validation, and starting the threads.

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Weak};
use std::thread;

use super::driver::Driver;
use super::executor::{Executor, Runner};
use super::hooks::ShutdownHooks;
use super::metrics::Counters;
use super::service::{Owner, Timer};
use super::shard::Shard;
use super::signal::Signal;
use super::task::{BoxTask, Task};
use super::timing::Timing;
use crate::clock::{Clock, ClockWaker, SystemClock, Wake};
use crate::error::BuildError;
use crate::sync::{AtomicBool, AtomicU64};
use crate::time::{is_system_clock, TimeSource};
use crate::time::{WheelConfig, MAX_SHARDS, MAX_WORKERS};
use crate::wheel::Wheel;

/// Builds a [`Timer`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{ManualClock, Timer};
///
/// let timer = Timer::builder()
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
    /// Whether `clock` is the [`SystemClock`].
    system_clock: bool,
    /// Prefix of thread names.
    thread_name: String,
    /// Whether to start a driver thread.
    driver_thread: bool,
    /// Where expired tasks run.
    executor: Executor,
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
            .field("executor", &self.executor)
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
            system_clock: true,
            thread_name: String::from("purgatorio"),
            driver_thread: true,
            executor: Executor::Pool,
            task: PhantomData,
        }
    }
}

/// The number of the next timer built, for its [`TimerId`](crate::TimerId)s.
static NEXT_TIMER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A number for a new timer: each timer's differs from every other's in
/// the bits an id keeps (until 2⁵⁴ timers were built in one process:
/// thousands of years at a timer per microsecond).
fn next_timer_id() -> u64 {
    NEXT_TIMER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl<T: Task> TimerBuilder<T> {
    /// A builder with the defaults, for a timer of any task type `T` (the
    /// default [`Timer::builder`] is this for [`BoxTask`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio::{Task, Timer, TimerBuilder};
    ///
    /// struct Expire(u64);
    /// impl Task for Expire {
    ///     fn run(self) { println!("request {} timed out", self.0) }
    /// }
    /// let timer: Timer<Expire> = TimerBuilder::new().workers(1).build()?;
    /// timer.schedule(std::time::Duration::from_secs(1), Expire(7))?;
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    crate::time::wheel_setters!("purgatorio::Timer::builder()");

    /// Sets the number of shards (default: twice the available cores).
    ///
    /// # Examples
    ///
    /// ```
    /// let t = purgatorio::Timer::builder().shards(1).build().unwrap();
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
    /// let t = purgatorio::Timer::builder().workers(1).build().unwrap();
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
    /// let t = purgatorio::Timer::builder().clock(clock.clone()).build().unwrap();
    /// # drop(t);
    /// ```
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.system_clock = is_system_clock(&clock);
        self.clock = Arc::new(clock);
        self
    }

    /// Sets the prefix of the threads' names (default `"purgatorio"`): the
    /// driver is `{prefix}-driver`, workers `{prefix}-worker-{i}`.
    ///
    /// # Examples
    ///
    /// ```
    /// let t = purgatorio::Timer::builder().thread_name("fetch-timeouts").build().unwrap();
    /// # drop(t);
    /// ```
    pub fn thread_name(mut self, prefix: impl Into<String>) -> Self {
        self.thread_name = prefix.into();
        self
    }

    /// Where expired tasks run (default [`Executor::Pool`], the timer's own
    /// [`workers`](Self::workers)); see [`Executor`].
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio::{Executor, Timer};
    /// let timer = Timer::builder().executor(Executor::Inline).build()?;
    /// # drop(timer);
    /// # Ok::<(), purgatorio::BuildError>(())
    /// ```
    pub fn executor(mut self, executor: Executor) -> Self {
        self.executor = executor;
        self
    }

    /// Whether to start a driver thread (default `true`). Without one, the
    /// caller drives the timer with [`Timer::advance_clock`] or
    /// [`Timer::run_due`], or spawns [`Timer::drive`] on its async runtime;
    /// expired tasks still run on the executor (with
    /// [`Executor::Inline`], on the driving thread).
    ///
    /// # Examples
    ///
    /// ```
    /// let t = purgatorio::Timer::builder().driver_thread(false).build().unwrap();
    /// assert_eq!(t.run_due(), 0);
    /// ```
    pub fn driver_thread(mut self, start: bool) -> Self {
        self.driver_thread = start;
        self
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
        let timing = Arc::new(Timing {
            time: TimeSource::new(Arc::clone(&self.clock), self.system_clock, resolution),
            signal: Arc::clone(&signal),
            next_wake: AtomicU64::new(u64::MAX),
            deferred: AtomicU64::new(u64::MAX),
            closed: AtomicBool::new(false),
            counters: Counters::new(&self.thread_name),
            name: self.thread_name.clone(),
            id: next_timer_id(),
        });
        let shards: Box<[_]> = (0..self.shards as u32)
            .map(|number| {
                let wheel = Wheel::new(wheel_size, 0);
                Arc::new(Shard::new(number, wheel, Arc::clone(&timing)))
            })
            .collect();
        Shard::link(&shards);
        let pool = Runner::start(&self.executor, self.workers, &self.thread_name, &timing)?;
        let driver = Arc::new(Driver {
            shards,
            timing: Arc::clone(&timing),
            pool,
            hooks: ShutdownHooks::default(),
        });
        let thread = if self.driver_thread {
            let for_driver = Arc::clone(&driver);
            let spawned = thread::Builder::new()
                .name(format!("{}-driver", self.thread_name))
                .spawn(move || for_driver.drive());
            match spawned {
                Ok(handle) => Some(handle),
                Err(err) => {
                    driver.pool.close();
                    return Err(BuildError::Spawn(err));
                }
            }
        } else {
            None
        };
        let weak: Weak<dyn Wake> = Arc::downgrade(&signal) as Weak<dyn Wake>;
        self.clock.register_waker(ClockWaker::new(weak));
        Ok(Timer::new(Owner::new(driver, thread)))
    }
}

impl Timer {
    /// A builder of the default timer, whose tasks are closures
    /// ([`BoxTask`]): 1 ms tick, 64 slots per level, twice the cores in
    /// shards, one worker per core, the system clock, a driver thread. For
    /// a timer of your own task type, use [`TimerBuilder::new`].
    ///
    /// # Examples
    ///
    /// ```
    /// let timer = purgatorio::Timer::builder().build()?; // no annotation needed
    /// assert!(timer.is_empty());
    /// # Ok::<(), purgatorio::BuildError>(())
    /// ```
    pub fn builder() -> TimerBuilder {
        TimerBuilder::new()
    }
}
