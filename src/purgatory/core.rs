//! What a purgatory's handles, its timer's tasks and its purges share: the
//! watch lists, the counters, the background purge and the shutdown.

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::counters::OpCounters;
use super::operation::DelayedRequest;
use super::watchers::Watchers;
use crate::publish::PurgatoryFigures;
use crate::sync::AtomicBool;
use crate::timer::Timer;

/// What the purgatory's handles and its workers share.
pub(super) struct Core<K, O: DelayedRequest, S> {
    /// The watch lists.
    pub(super) watchers: Watchers<K, O, S>,
    /// Completion counters and the lingering estimate.
    pub(super) counters: Arc<OpCounters>,
    /// Lingering entries tolerated before a purge.
    pub(super) purge_interval: usize,
    /// Whether a purge job is queued or running.
    pub(super) purging: AtomicBool,
    /// Set by shutdown.
    pub(super) closed: AtomicBool,
}

impl<K, O, S> Core<K, O, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    O: DelayedRequest,
    S: BuildHasher + Send + Sync + 'static,
{
    /// Empty watch lists in `watch_shards` shards, for operations on
    /// `timer`; a purge once more than `purge_interval` done entries linger.
    pub(super) fn new(
        watch_shards: usize,
        purge_interval: usize,
        timer: &Timer,
        shared_timer: bool,
        hasher: S,
        name: &str,
    ) -> Self {
        Core {
            watchers: Watchers::new(watch_shards, hasher),
            counters: Arc::new(OpCounters {
                count_delayed: shared_timer,
                timer: Some(Arc::clone(timer.driver())),
                figures: PurgatoryFigures::new(name),
                ..OpCounters::default()
            }),
            purge_interval,
            purging: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    /// Runs a purge (on a worker). A trigger that arrived while it ran was
    /// dropped (`purging` was set), and the sweep may already have passed the
    /// shards it concerned: so after each sweep, sweep again while too many
    /// done entries still linger.
    pub(super) fn purge(&self) {
        loop {
            let removed = self.watchers.purge(&self.counters);
            self.purging.store(false, Ordering::Release);
            if removed == 0
                || !self.counters.purge_due(self.purge_interval)
                || self.purging.swap(true, Ordering::AcqRel)
            {
                return;
            }
        }
    }
}

impl<K, O: DelayedRequest, S> Core<K, O, S> {
    /// Shuts a purgatory down once: completes every pending operation as
    /// shut down, on the calling thread, and stops the timer if the
    /// purgatory owns it. Returns how many operations it completed.
    pub(super) fn shut_down(&self, timer: &Timer, owns_timer: bool) -> usize {
        if self.closed.swap(true, Ordering::SeqCst) {
            return 0;
        }
        let before = self.counters.shut_down.load(Ordering::Relaxed);
        // An operation parked while this runs may be watched after the
        // drain: then `park` sees `closed` after registering and completes
        // it itself, or (own timer) its pending expiry comes back from the
        // timer's shutdown below and, dropped, completes it. (Dropping the
        // timer's jobs unrun once lost such an operation: the loom model
        // `shutdown_races_park` found that.)
        let watched = self.watchers.drain();
        if owns_timer {
            drop(timer.shutdown());
        }
        // An operation whose lock a callback holds (this thread's own, called
        // from inside it, or another's while this one is inside a callback)
        // is completed when its holder releases it; it is not counted here.
        for op in watched {
            op.shut_down_detached();
        }
        self.counters.lingering.store(0, Ordering::Relaxed);
        self.counters.entries.store(0, Ordering::Relaxed);
        (self.counters.shut_down.load(Ordering::Relaxed) - before) as usize
    }
}
