//! Counters the timer keeps, the lateness histogram, and the snapshot it
//! reports.
//!
//! ## The lateness histogram
//!
//! Each started task's lateness (start time minus deadline) lands in one of
//! [`BUCKETS`] atomic counters: values below 16 ns exactly, then every power
//! of two split into 16 equal sub-buckets, so a quantile read from it is at
//! most 1/16 (6.25 %) above the true value and never below it. Recording is
//! one relaxed atomic add; no lock, no allocation.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::publish::TimerFigures;
use std::time::Duration;

/// Sub-buckets per power of two, as a power of two.
const SUB_BITS: u32 = 4;

/// Sub-buckets per power of two.
const SUB: usize = 1 << SUB_BITS;

/// Buckets of the lateness histogram: 16 exact ones, then 16 per power of
/// two from 2^4 ns to 2^63 ns.
pub(crate) const BUCKETS: usize = SUB + (64 - SUB_BITS as usize) * SUB;

/// The bucket of a lateness of `ns` nanoseconds.
fn bucket(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let exp = 63 - ns.leading_zeros(); // ≥ SUB_BITS
    let mantissa = (ns >> (exp - SUB_BITS)) as usize; // in SUB..2 * SUB
    (exp - SUB_BITS + 1) as usize * SUB + (mantissa - SUB)
}

/// The largest lateness, in nanoseconds, that falls in bucket `index`.
fn bucket_top(index: usize) -> u64 {
    if index < SUB {
        return index as u64;
    }
    let exp = (index / SUB) as u32 + SUB_BITS - 1;
    let mantissa = (index % SUB + SUB) as u64;
    let low = mantissa << (exp - SUB_BITS);
    low.saturating_add((1u64 << (exp - SUB_BITS)) - 1)
}

/// Counters updated outside the shard locks (the per-shard ones live in the
/// shards, under their locks, where updating them costs nothing).
#[derive(Debug)]
pub(crate) struct Counters {
    /// Driver passes after a wait (timed out or notified).
    wakeups: AtomicU64,
    /// Tasks that panicked.
    panicked: AtomicU64,
    /// Tasks handed to the executor and not yet taken up by it.
    backlog: AtomicU64,
    /// The lateness histogram.
    lateness: Box<[AtomicU64]>,
    /// The same figures, published to `metrics` (with that feature).
    pub(super) figures: TimerFigures,
}

impl Counters {
    /// All zero, published under the timer's `name`.
    pub(crate) fn new(name: &str) -> Self {
        Counters {
            wakeups: AtomicU64::new(0),
            panicked: AtomicU64::new(0),
            backlog: AtomicU64::new(0),
            lateness: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            figures: TimerFigures::new(name),
        }
    }

    /// Counts one driver wake-up.
    pub(crate) fn record_wakeup(&self) {
        self.wakeups.fetch_add(1, Relaxed);
        self.figures.wakeup();
    }

    /// Counts one panicking task.
    pub(crate) fn record_panic(&self) {
        self.panicked.fetch_add(1, Relaxed);
        self.figures.panicked();
    }

    /// Counts `n` tasks handed to the executor.
    pub(crate) fn queued(&self, n: usize) {
        self.backlog.fetch_add(n as u64, Relaxed);
        self.figures.backlog(n as f64);
    }

    /// Counts `n` tasks taken up by the executor (or refused by it).
    pub(crate) fn dequeued(&self, n: usize) {
        let _ = self
            .backlog
            .fetch_update(Relaxed, Relaxed, |v| Some(v.saturating_sub(n as u64)));
        self.figures.backlog(-(n as f64));
    }

    /// Records the lateness of a task about to run.
    pub(crate) fn record_lag(&self, lag: Duration) {
        let ns = u64::try_from(lag.as_nanos()).unwrap_or(u64::MAX);
        self.lateness[bucket(ns)].fetch_add(1, Relaxed);
        self.figures.lateness(lag);
    }

    /// Fills the process-wide fields of a snapshot.
    pub(crate) fn fill(&self, metrics: &mut Metrics) {
        metrics.wakeups = self.wakeups.load(Relaxed);
        metrics.panicked = self.panicked.load(Relaxed);
        metrics.backlog = self.backlog.load(Relaxed);
        metrics.lateness = Lateness {
            counts: self.lateness.iter().map(|c| c.load(Relaxed)).collect(),
        };
    }
}

/// The lateness of the tasks a timer started (start time minus deadline), as
/// a histogram: read quantiles from it.
///
/// Each value is held to within 1/16 of itself, and a quantile never
/// under-reports: it is the top of the bucket holding that rank.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{ManualClock, Timer};
///
/// let clock = ManualClock::new();
/// let timer = Timer::builder().clock(clock.clone()).driver_thread(false).build()?;
/// timer.schedule(Duration::from_millis(1), || ())?;
/// clock.advance(Duration::from_millis(3)); // run 2 ms late
/// timer.run_due();
/// # while timer.metrics().lateness.count() == 0 { std::thread::yield_now() }
/// let lateness = timer.metrics().lateness;
/// assert_eq!(lateness.count(), 1);
/// let p99 = lateness.quantile(0.99).unwrap();
/// assert!(p99 >= Duration::from_millis(2) && p99 <= Duration::from_micros(2125));
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lateness {
    /// Count per bucket; empty if nothing was recorded.
    counts: Box<[u64]>,
}

impl Lateness {
    /// How many tasks were recorded.
    ///
    /// # Examples
    ///
    /// See [`Lateness`].
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The lateness at quantile `q` (0.0 to 1.0; 0.99 is the p99), or
    /// `None` if nothing was recorded. `q` outside 0..=1 is clamped.
    ///
    /// # Examples
    ///
    /// See [`Lateness`].
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let q = if q.is_nan() { 1.0 } else { q.clamp(0.0, 1.0) };
        // The rank of the sample asked for, 1-based, at least the first.
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (index, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(Duration::from_nanos(bucket_top(index)));
            }
        }
        None
    }

    /// The largest lateness recorded (to within 1/16), or `None`.
    ///
    /// # Examples
    ///
    /// See [`Lateness`].
    pub fn max(&self) -> Option<Duration> {
        self.quantile(1.0)
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
/// assert_eq!((m.scheduled, m.cancelled, m.pending, m.backlog), (1, 1, 0, 0));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Timers linked in the wheel, not yet handed to the executor (Kafka's
    /// `size`).
    pub pending: usize,
    /// Tasks accepted by `schedule` / `schedule_at`.
    pub scheduled: u64,
    /// Timers whose `cancel` handed the task back.
    pub cancelled: u64,
    /// Tasks handed to the executor (due, or due at once when scheduled).
    pub expired: u64,
    /// Tasks handed to the executor and not yet taken up by it: the
    /// workers' backlog (a batch counts as taken up when a worker starts
    /// it).
    pub backlog: u64,
    /// Tasks that panicked (caught; the worker went on).
    pub panicked: u64,
    /// Times the driver thread woke up (timeout or notification).
    pub wakeups: u64,
    /// How late the started tasks were: start time minus deadline.
    pub lateness: Lateness,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order_within_a_sixteenth() {
        let mut last = 0;
        for ns in 0..100_000u64 {
            let b = bucket(ns);
            assert!(b >= last, "buckets out of order at {ns}");
            last = b;
        }
        for ns in (0..10_000u64)
            .chain((0..64).map(|e| 1u64 << e))
            .chain((1..64).map(|e| (1u64 << e) - 1))
            .chain([u64::MAX])
        {
            let b = bucket(ns);
            assert!(b < BUCKETS, "{ns} -> bucket {b}");
            let top = bucket_top(b);
            assert!(top >= ns, "bucket {b} tops at {top} below {ns}");
            assert!(
                top - ns <= ns / 16,
                "{ns} read as {top}: more than 1/16 off"
            );
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_top(BUCKETS - 1), u64::MAX);
    }

    #[test]
    fn quantiles_never_under_report() {
        let counters = Counters::new("test");
        for ms in 1..=100u64 {
            counters.record_lag(Duration::from_millis(ms));
        }
        let mut m = Metrics::default();
        counters.fill(&mut m);
        assert_eq!(m.lateness.count(), 100);
        let p50 = m.lateness.quantile(0.5).unwrap();
        assert!(p50 >= Duration::from_millis(50) && p50 <= Duration::from_micros(53_125));
        let p99 = m.lateness.quantile(0.99).unwrap();
        assert!(p99 >= Duration::from_millis(99) && p99 <= Duration::from_micros(105_188));
        assert!(m.lateness.max().unwrap() >= Duration::from_millis(100));
        assert_eq!(Lateness::default().quantile(0.5), None);
    }
}
