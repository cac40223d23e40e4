//! Counters the timer keeps, and the snapshot it reports.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// "No expiry recorded yet" in [`Counters::last_lag_ns`].
const NO_LAG: u64 = u64::MAX;

/// Counters updated outside the shard locks (the per-shard ones live in the
/// shards, under their locks, where updating them costs nothing).
#[derive(Debug)]
pub(crate) struct Counters {
    /// Driver passes after a wait (timed out or notified).
    wakeups: AtomicU64,
    /// Tasks that panicked.
    panicked: AtomicU64,
    /// Lag of the most recently started task in nanoseconds, or [`NO_LAG`].
    last_lag_ns: AtomicU64,
}

impl Counters {
    /// All zero.
    pub(crate) fn new() -> Self {
        Counters {
            wakeups: AtomicU64::new(0),
            panicked: AtomicU64::new(0),
            last_lag_ns: AtomicU64::new(NO_LAG),
        }
    }

    /// Counts one driver wake-up.
    pub(crate) fn record_wakeup(&self) {
        self.wakeups.fetch_add(1, Relaxed);
    }

    /// Counts one panicking task.
    pub(crate) fn record_panic(&self) {
        self.panicked.fetch_add(1, Relaxed);
    }

    /// Records the lag of a task about to run.
    pub(crate) fn record_lag(&self, lag: Duration) {
        let ns = u64::try_from(lag.as_nanos()).unwrap_or(NO_LAG - 1);
        self.last_lag_ns.store(ns.min(NO_LAG - 1), Relaxed);
    }

    /// Fills the process-wide fields of a snapshot.
    pub(crate) fn fill(&self, metrics: &mut Metrics) {
        metrics.wakeups = self.wakeups.load(Relaxed);
        metrics.panicked = self.panicked.load(Relaxed);
        metrics.last_lag = match self.last_lag_ns.load(Relaxed) {
            NO_LAG => None,
            ns => Some(Duration::from_nanos(ns)),
        };
    }
}

/// A snapshot of a [`Timer`](crate::Timer)'s counters.
///
/// Totals count since the timer was built. Each field is read on its own, so
/// while other threads work the fields may be a moment apart from each other.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{ManualClock, Timer};
///
/// let clock = ManualClock::new();
/// let timer = Timer::builder().clock(clock.clone()).build().unwrap();
/// let handle = timer.schedule(Duration::from_secs(1), || ()).unwrap();
/// handle.cancel();
/// let m = timer.metrics();
/// assert_eq!((m.scheduled, m.cancelled, m.pending), (1, 1, 0));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Timers linked in the wheel, not yet handed to the workers (Kafka's `size`).
    pub pending: usize,
    /// Tasks accepted by `schedule` / `schedule_at`.
    pub scheduled: u64,
    /// Timers whose `cancel` returned `true`.
    pub cancelled: u64,
    /// Tasks handed to the workers (due, or due at once when scheduled).
    pub expired: u64,
    /// Tasks that panicked (caught; the worker went on).
    pub panicked: u64,
    /// Times the driver thread woke up (timeout or notification).
    pub wakeups: u64,
    /// For the most recently started task: start time minus deadline.
    pub last_lag: Option<Duration>,
}
