//! Where expired tasks run: the executor seam.
//!
//! The driver hands each batch of due tasks to a [`Runner`]: the timer's own
//! worker threads ([`Executor::Pool`], the default), the driver thread itself
//! ([`Executor::Inline`]), or a rayon thread pool the application already
//! has ([`Executor::Rayon`], with the `rayon` feature). Every task runs under
//! `catch_unwind` whichever it is, and shutdown waits for the tasks already
//! handed over, except the calling one.

use std::fmt;
use std::sync::Arc;

use super::pool::{Batch, Pool};
use super::task::Task;
use super::timing::Timing;
use crate::error::BuildError;

/// Where a [`Timer`](crate::Timer) runs its expired tasks.
///
/// # Examples
///
/// ```
/// use purgatorio::{Executor, Timer};
///
/// // Tiny callbacks: run them on the driver thread, no hand-off at all.
/// let timer = Timer::builder().executor(Executor::Inline).build()?;
/// timer.schedule(std::time::Duration::from_millis(1), || ())?;
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum Executor {
    /// The timer's own worker threads, as many as
    /// [`TimerBuilder::workers`](crate::TimerBuilder::workers) (the default).
    #[default]
    Pool,
    /// The driver thread, right after each pass, outside every lock: no
    /// hand-off, for callbacks that take microseconds. A slow task delays
    /// every later expiry. A task due at once is queued for the driver, never
    /// run on the scheduling thread; a purge runs on the thread that
    /// triggers it. Without a driver thread, the thread that calls
    /// [`run_due`](crate::Timer::run_due) or
    /// [`advance_clock`](crate::Timer::advance_clock) runs them.
    Inline,
    /// A rayon thread pool the application already runs: each batch of due
    /// tasks is one rayon job. Panics are caught and counted as with the
    /// built-in pool; shutdown waits for the batches already handed over.
    /// Needs the `rayon` feature.
    #[cfg(feature = "rayon")]
    #[cfg_attr(docsrs, doc(cfg(feature = "rayon")))]
    Rayon(Arc<rayon::ThreadPool>),
}

impl fmt::Debug for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Executor::Pool => f.write_str("Pool"),
            Executor::Inline => f.write_str("Inline"),
            #[cfg(feature = "rayon")]
            Executor::Rayon(pool) => f
                .debug_tuple("Rayon")
                .field(&pool.current_num_threads())
                .finish(),
        }
    }
}

/// The driver's side of the executor.
pub(crate) enum Runner<T> {
    /// The timer's own workers.
    Pool(Pool<T>),
    /// The thread that hands a batch over runs it.
    Inline(Inline),
    /// A rayon pool.
    #[cfg(feature = "rayon")]
    Rayon(rayon_runner::RayonRunner),
}

/// The inline runner's state.
pub(crate) struct Inline {
    /// Where lag and panics are counted.
    timing: Arc<Timing>,
    /// Set by `close`.
    closed: crate::sync::AtomicBool,
}

impl<T: Task> Runner<T> {
    /// Starts the executor: `workers` threads named `{name}-worker-{i}` for
    /// the built-in pool, nothing for the others.
    pub(crate) fn start(
        executor: &Executor,
        workers: usize,
        name: &str,
        timing: &Arc<Timing>,
    ) -> Result<Self, BuildError> {
        Ok(match executor {
            Executor::Pool => Runner::Pool(Pool::start(workers, name, timing)?),
            Executor::Inline => Runner::Inline(Inline {
                timing: Arc::clone(timing),
                closed: crate::sync::AtomicBool::new(false),
            }),
            #[cfg(feature = "rayon")]
            Executor::Rayon(pool) => {
                Runner::Rayon(rayon_runner::RayonRunner::new(Arc::clone(pool), timing))
            }
        })
    }

    /// Whether batches run on the thread that hands them over, so that a
    /// task due at once must go through the driver instead.
    pub(crate) fn runs_inline(&self) -> bool {
        matches!(self, Runner::Inline(_))
    }

    /// Hands a batch over (or, inline, runs it); gives it back if the
    /// executor is closed.
    pub(crate) fn submit(&self, batch: Batch<T>) -> Result<(), Batch<T>> {
        let counters = &self.timing().counters;
        let queued = batch.len();
        counters.queued(queued);
        let handed = match self {
            Runner::Pool(pool) => pool.submit(batch),
            Runner::Inline(inline) => {
                if inline.closed.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err(batch);
                }
                super::pool::run_batch(batch, &inline.timing);
                Ok(())
            }
            #[cfg(feature = "rayon")]
            Runner::Rayon(rayon) => rayon.submit(batch),
        };
        if handed.is_err() {
            counters.dequeued(queued);
        }
        handed
    }

    /// The timing its batches count lateness in.
    fn timing(&self) -> &Timing {
        match self {
            Runner::Pool(pool) => pool.timing(),
            Runner::Inline(inline) => &inline.timing,
            #[cfg(feature = "rayon")]
            Runner::Rayon(rayon) => rayon.timing(),
        }
    }

    /// Closes the executor: refuses new batches, lets the ones handed over
    /// finish (all but the calling thread's own), joins the pool's threads.
    pub(crate) fn close(&self) {
        match self {
            Runner::Pool(pool) => pool.close(),
            Runner::Inline(inline) => inline
                .closed
                .store(true, std::sync::atomic::Ordering::SeqCst),
            #[cfg(feature = "rayon")]
            Runner::Rayon(rayon) => rayon.close(),
        }
    }

    /// The loom models' worker: runs the queued batches here.
    #[cfg(all(test, purgatorio_loom))]
    pub(crate) fn run_queued(&self, timing: &Timing) -> usize {
        match self {
            Runner::Pool(pool) => pool.run_queued(timing),
            _ => 0,
        }
    }
}

/// Batches as rayon jobs, counted so that shutdown can wait for them.
#[cfg(feature = "rayon")]
mod rayon_runner {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::super::pool::{run_batch, Batch};
    use super::super::task::Task;
    use super::super::timing::Timing;
    use crate::sync::{Condvar, Mutex};

    std::thread_local! {
        /// The runner whose batch this thread is running, if any.
        static RUNNING: Cell<usize> = const { Cell::new(0) };
    }

    /// What the rayon jobs and the timer share.
    struct State {
        /// Where lag and panics are counted.
        timing: Arc<Timing>,
        /// Batches handed to rayon and not finished.
        in_flight: Mutex<usize>,
        /// Signalled when `in_flight` drops.
        idle: Condvar,
        /// Set by `close`.
        closed: AtomicBool,
    }

    /// A rayon pool as the timer's executor.
    pub(crate) struct RayonRunner {
        /// The application's pool.
        pool: Arc<rayon::ThreadPool>,
        /// Shared with the jobs.
        state: Arc<State>,
    }

    impl RayonRunner {
        /// Runs batches on `pool`.
        pub(crate) fn new(pool: Arc<rayon::ThreadPool>, timing: &Arc<Timing>) -> Self {
            RayonRunner {
                pool,
                state: Arc::new(State {
                    timing: Arc::clone(timing),
                    in_flight: Mutex::new(0),
                    idle: Condvar::new(),
                    closed: AtomicBool::new(false),
                }),
            }
        }

        /// The timing the batches count in.
        pub(crate) fn timing(&self) -> &Timing {
            &self.state.timing
        }

        /// Spawns the batch as one rayon job.
        pub(crate) fn submit<T: Task>(&self, batch: Batch<T>) -> Result<(), Batch<T>> {
            if batch.is_empty() {
                return Ok(());
            }
            {
                let mut in_flight = self.state.in_flight.lock();
                if self.state.closed.load(Ordering::SeqCst) {
                    return Err(batch);
                }
                *in_flight += 1;
            }
            let state = Arc::clone(&self.state);
            self.pool.spawn(move || {
                let me = Arc::as_ptr(&state) as usize;
                let outer = RUNNING.with(|r| r.replace(me));
                run_batch(batch, &state.timing);
                RUNNING.with(|r| r.set(outer));
                let mut in_flight = state.in_flight.lock();
                *in_flight -= 1;
                drop(in_flight);
                state.idle.notify_all();
            });
            Ok(())
        }

        /// Refuses new batches and waits for the ones in flight, except the
        /// calling thread's own (a task may shut its timer down).
        pub(crate) fn close(&self) {
            let me = Arc::as_ptr(&self.state) as usize;
            let own = usize::from(RUNNING.with(Cell::get) == me);
            let mut in_flight = self.state.in_flight.lock();
            self.state.closed.store(true, Ordering::SeqCst);
            while *in_flight > own {
                self.state.idle.wait(&mut in_flight);
            }
        }
    }
}
