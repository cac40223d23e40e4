//! The worker pool: runs expired tasks off the driver thread.
//!
//! Batches of expired tasks travel over one unbounded `crossbeam-channel`
//! that every worker receives from. Each task runs under `catch_unwind`: a
//! panic is counted and the worker goes on with the next task. Closing the
//! pool drops the sender; workers finish the batches already queued, then
//! exit, and are joined.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use crossbeam_channel::{Receiver, Sender};

use super::task::Task;
use super::timing::Timing;
use crate::error::BuildError;
use crate::sync::Mutex;
use crate::wheel::Fired;

/// The deadline of an internal job that never was a timer: no lag recorded.
pub(crate) const UNTIMED: u64 = u64::MAX;

/// A batch of fired tasks on their way to the workers: the wheel's own
/// [`Fired`] items, whose `deadline` the workers use for the lag metric
/// ([`UNTIMED`]: none).
pub(crate) type Batch<T> = Vec<Fired<T>>;

/// The sending side of the pool and its threads.
pub(crate) struct Pool<T> {
    /// `None` once the pool is closed.
    sender: Mutex<Option<Sender<Batch<T>>>>,
    /// Worker threads not yet joined.
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// Where the workers count.
    timing: Arc<Timing>,
    /// Under loom there are no worker threads: the model runs the queued
    /// batches itself, with [`run_queued`](Self::run_queued).
    /// Held here also so that the channel stays open without workers.
    #[cfg(purgatorio_loom)]
    #[cfg_attr(not(test), allow(dead_code))]
    receiver: Receiver<Batch<T>>,
}

impl<T: Task> Pool<T> {
    /// Starts `workers` threads named `{name}-worker-{i}` (none under loom).
    pub(crate) fn start(
        workers: usize,
        name: &str,
        timing: &Arc<Timing>,
    ) -> Result<Self, BuildError> {
        let (sender, receiver) = crossbeam_channel::unbounded::<Batch<T>>();
        let workers = if cfg!(purgatorio_loom) { 0 } else { workers };
        let mut handles = Vec::with_capacity(workers);
        for i in 0..workers {
            let receiver = receiver.clone();
            let timing = Arc::clone(timing);
            let spawned = thread::Builder::new()
                .name(format!("{name}-worker-{i}"))
                .spawn(move || work(&receiver, &timing));
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(err) => {
                    // Stop the workers already started before reporting.
                    drop(sender);
                    join_all(handles);
                    return Err(BuildError::Spawn(err));
                }
            }
        }
        Ok(Pool {
            sender: Mutex::new(Some(sender)),
            workers: Mutex::new(handles),
            timing: Arc::clone(timing),
            #[cfg(purgatorio_loom)]
            receiver,
        })
    }

    /// Runs the queued batches on the calling thread, as a worker would;
    /// returns how many tasks ran. The receive happens under the sender's
    /// lock, so loom sees each batch's hand-off.
    #[cfg(all(test, purgatorio_loom))]
    pub(crate) fn run_queued(&self, timing: &Timing) -> usize {
        let batches: Vec<Batch<T>> = {
            let _sender = self.sender.lock();
            self.receiver.try_iter().collect()
        };
        batches
            .into_iter()
            .map(|batch| run_batch(batch, timing))
            .sum()
    }

    /// The timing the workers count in.
    pub(crate) fn timing(&self) -> &Timing {
        &self.timing
    }

    /// Queues a batch; gives it back if the pool is closed.
    pub(crate) fn submit(&self, batch: Batch<T>) -> Result<(), Batch<T>> {
        if batch.is_empty() {
            return Ok(());
        }
        match &*self.sender.lock() {
            Some(sender) => sender.send(batch).map_err(|err| err.into_inner()),
            None => Err(batch),
        }
    }

    /// Closes the pool: queued batches still run; then joins the workers,
    /// except the calling thread if it is one of them.
    pub(crate) fn close(&self) {
        drop(self.sender.lock().take());
        let handles = std::mem::take(&mut *self.workers.lock());
        join_all(handles);
    }
}

/// Joins `handles`, skipping the current thread (which cannot join itself and
/// exits on its own once its task returns and the channel is closed).
pub(crate) fn join_all(handles: Vec<JoinHandle<()>>) {
    let me = thread::current().id();
    for handle in handles {
        if handle.thread().id() != me {
            // A worker never panics: tasks run under catch_unwind.
            let _ = handle.join();
        }
    }
}

/// A worker's loop: run batches until the channel closes.
fn work<T: Task>(receiver: &Receiver<Batch<T>>, timing: &Timing) {
    for batch in receiver {
        run_batch(batch, timing);
    }
}

/// Runs a batch's tasks, catching and counting panics; returns how many ran.
pub(crate) fn run_batch<T: Task>(batch: Batch<T>, timing: &Timing) -> usize {
    let ran = batch.len();
    timing.counters.dequeued(ran);
    for fired in batch {
        if fired.deadline != UNTIMED {
            timing.record_lag(fired.deadline);
        }
        let task = fired.value;
        if catch_unwind(AssertUnwindSafe(move || task.run())).is_err() {
            timing.counters.record_panic();
        }
    }
    ran
}
