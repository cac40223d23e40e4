//! The counters a purgatory's operations move: completions by path, the
//! watch-list entries and those of done operations (the purge's estimate),
//! pending timers, panics. Each counter that every operation moves sits on
//! cache lines of its own.

use std::sync::atomic::Ordering;

use super::operation::Completion;
use crate::publish::PurgatoryFigures;
use crate::sync::{AtomicU64, AtomicUsize};
use crate::timer::{BoxTask, Driver};
use std::sync::Arc;

/// A value alone on its cache lines (two, for the adjacent-line
/// prefetcher): counters that different threads write do not slow each other
/// down by sharing a line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Counters shared by the purgatory and its timer tasks.
///
/// Each counter that moves with every operation sits on lines of its own:
/// the threads that park, complete, expire and purge each write some of
/// them, and on shared lines every write waited for the line to come over
/// from another core. The `Arc` around them shares its line with the
/// read-only fields only.
#[derive(Debug, Default)]
pub(crate) struct OpCounters {
    /// Whether to count `delayed`.
    pub(crate) count_delayed: bool,
    /// The same figures, published to `metrics` (with that feature).
    pub(crate) figures: PurgatoryFigures,
    /// Operations completed by a successful `try_complete`.
    pub(crate) satisfied: Padded<AtomicU64>,
    /// Operations completed by `Parked::force_complete`.
    pub(crate) forced: Padded<AtomicU64>,
    /// Operations completed by expiry.
    pub(crate) expired: Padded<AtomicU64>,
    /// Done entries swept from watch lists (by a purge or a `park`);
    /// counted under the shard lock that removed them, so it never lags
    /// `watched`.
    pub(crate) purged: Padded<AtomicU64>,
    /// Watch-list entries of done operations not yet removed.
    pub(crate) lingering: Padded<AtomicUsize>,
    /// Watch-list entries, done or not.
    pub(crate) entries: Padded<AtomicUsize>,
    /// Operations whose timer is armed, counted only on a shared timer
    /// (which holds other timers too); an own timer's length is the count.
    pub(crate) delayed: Padded<AtomicUsize>,
    /// Operations completed by shutdown.
    pub(crate) shut_down: AtomicU64,
    /// Operations handed back by `cancel_for_key`.
    pub(crate) cancelled: AtomicU64,
    /// Panics caught in callbacks.
    pub(crate) panics: AtomicU64,
    /// The timer's shards, where a finished operation cancels its timer by
    /// its [`Entry`](crate::timer::Entry): reached through this `Arc`,
    /// which every operation holds anyway, rather than through a shard
    /// reference of each operation's own, whose count the parking and the
    /// completing threads would both move. `None` only in a default value.
    pub(crate) timer: Option<Arc<Driver<BoxTask>>>,
}

impl OpCounters {
    /// Counts one completion.
    pub(super) fn count(&self, completion: Completion) {
        let counter = match completion {
            Completion::Satisfied => &self.satisfied,
            Completion::Forced => &self.forced,
            Completion::Expired => &self.expired,
            Completion::ShutDown => &self.shut_down,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.figures.completed(completion as usize);
    }

    /// Counts a callback that panicked.
    pub(super) fn panicked(&self) {
        self.panics.fetch_add(1, Ordering::Relaxed);
        self.figures.panicked();
    }

    /// Whether a purge is due: more than `interval` done entries linger,
    /// and they are at least half of all entries. A sweep reads every
    /// entry, so it then removes at least as many as it keeps: amortised
    /// O(1) per completion, however many operations are pending (the
    /// wheel compacts its garbage by the same rule).
    pub(crate) fn purge_due(&self, interval: usize) -> bool {
        let lingering = self.lingering.load(Ordering::Relaxed);
        lingering > interval && 2 * lingering >= self.entries.load(Ordering::Relaxed)
    }

    /// Counts `n` done entries swept from watch lists by a purge or a
    /// `park`; under the shard lock that removed them, so `purged` never
    /// lags `watched`.
    pub(crate) fn swept(&self, n: usize) {
        self.purged.fetch_add(n as u64, Ordering::Relaxed);
        self.figures.purged(n as u64);
    }

    /// Counts `n` done watch-list entries removed (after the lock).
    pub(crate) fn removed(&self, n: usize) {
        if n > 0 {
            sub_saturating(&self.lingering, n);
            sub_saturating(&self.entries, n);
        }
    }
}

/// Subtracts `n` from `counter`, stopping at zero.
pub(super) fn sub_saturating(counter: &AtomicUsize, n: usize) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(n))
    });
}
