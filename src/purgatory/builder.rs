//! [`PurgatoryBuilder`]: the purgatory's settings and its timer's.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use super::core::Core;
use super::op::Job;
use super::operation::DelayedOperation;
use super::service::Purgatory;
use crate::error::BuildError;
use crate::tick::MAX_WATCH_SHARDS;
use crate::timer::{BoxTask, TimerBuilder};

/// The default purge interval: lingering done entries tolerated before a
/// purge (see [`PurgatoryBuilder::purge_interval`]).
pub const DEFAULT_PURGE_INTERVAL: usize = 1000;

/// Builds a [`Purgatory`].
///
/// # Examples
///
/// ```
/// # use std::time::Duration;
/// # use purgatorio::{Completion, DelayedOperation, Purgatory};
/// # struct Op;
/// # impl DelayedOperation for Op {
/// #     fn delay(&self) -> Duration { Duration::from_secs(1) }
/// #     fn try_complete(&mut self) -> bool { false }
/// #     fn on_complete(&mut self, _: Completion) {}
/// # }
/// let purgatory: Purgatory<u64, Op> = Purgatory::builder()
///     .watch_shards(64)
///     .purge_interval(10_000)
///     .timer(purgatorio::Timer::builder().workers(2).thread_name("fetch-purgatory"))
///     .build()
///     .unwrap();
/// # drop(purgatory);
/// ```
pub struct PurgatoryBuilder<K, O: DelayedOperation> {
    /// Number of watch-list shards.
    watch_shards: usize,
    /// Lingering entries tolerated before a purge.
    purge_interval: usize,
    /// The timer's settings.
    timer: TimerBuilder<Job<O>>,
    /// The key type.
    keys: std::marker::PhantomData<fn() -> K>,
}

impl<K, O: DelayedOperation> fmt::Debug for PurgatoryBuilder<K, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PurgatoryBuilder")
            .field("watch_shards", &self.watch_shards)
            .field("purge_interval", &self.purge_interval)
            .field("timer", &self.timer)
            .finish()
    }
}

impl<K, O> PurgatoryBuilder<K, O>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    O: DelayedOperation,
{
    /// Sets the number of watch-list shards (default: 16 per core, at least 16).
    ///
    /// # Examples
    ///
    /// ```
    /// # use purgatorio::{Completion, DelayedOperation, Purgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> std::time::Duration { std::time::Duration::ZERO }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self, _: Completion) {}
    /// # }
    /// let p: Purgatory<u8, Op> = Purgatory::builder().watch_shards(1).build().unwrap();
    /// # drop(p);
    /// ```
    pub fn watch_shards(mut self, shards: usize) -> Self {
        self.watch_shards = shards;
        self
    }

    /// Sets how many done entries may linger in watch lists before a purge
    /// (default [`DEFAULT_PURGE_INTERVAL`]).
    ///
    /// A completed operation stays in its other keys' lists until a check of
    /// those keys or a purge removes it. A purge also waits until the done
    /// entries are at least half of all entries: a sweep reads every entry,
    /// so it then removes at least as many as it keeps, and its cost stays
    /// O(1) per completion however many operations are pending. Memory for
    /// lingering entries is therefore bounded by the larger of this interval
    /// and the number of live entries.
    ///
    /// # Examples
    ///
    /// ```
    /// # use purgatorio::{Completion, DelayedOperation, Purgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> std::time::Duration { std::time::Duration::ZERO }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self, _: Completion) {}
    /// # }
    /// let p: Purgatory<u8, Op> = Purgatory::builder().purge_interval(100).build().unwrap();
    /// # drop(p);
    /// ```
    pub fn purge_interval(mut self, interval: usize) -> Self {
        self.purge_interval = interval;
        self
    }

    /// Sets up the purgatory's timer: clock, tick, wheel size, shards,
    /// workers (which run expirations and purges), thread names, driver
    /// thread. Defaults to [`Timer::builder()`](crate::Timer::builder).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # use purgatorio::{Completion, DelayedOperation, Purgatory, Timer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> Duration { Duration::ZERO }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self, _: Completion) {}
    /// # }
    /// let p: Purgatory<u8, Op> = Purgatory::builder()
    ///     .timer(Timer::builder().tick(Duration::from_micros(100)).workers(1).thread_name("produce"))
    ///     .build()
    ///     .unwrap();
    /// # drop(p);
    /// ```
    pub fn timer(mut self, timer: TimerBuilder<BoxTask>) -> Self {
        self.timer = timer.retask();
        self
    }

    /// Builds the purgatory and starts its timer.
    ///
    /// # Errors
    ///
    /// [`BuildError::WatchShards`] for zero watch shards (or more than
    /// [`MAX_WATCH_SHARDS`](crate::MAX_WATCH_SHARDS)); any error of
    /// [`TimerBuilder::build`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use purgatorio::{BuildError, Completion, DelayedOperation, Purgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> std::time::Duration { std::time::Duration::ZERO }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self, _: Completion) {}
    /// # }
    /// let err = Purgatory::<u8, Op>::builder().watch_shards(0).build().unwrap_err();
    /// assert!(matches!(err, BuildError::WatchShards(0)));
    /// ```
    pub fn build(self) -> Result<Purgatory<K, O>, BuildError> {
        if !(1..=MAX_WATCH_SHARDS).contains(&self.watch_shards) {
            return Err(BuildError::WatchShards(self.watch_shards));
        }
        let timer = self.timer.build()?;
        let core = Arc::new(Core::new(self.watch_shards, self.purge_interval));
        Ok(Purgatory::new(core, timer))
    }
}

impl<K, O> Purgatory<K, O>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    O: DelayedOperation,
{
    /// A builder with the defaults.
    ///
    /// # Examples
    ///
    /// ```
    /// # use purgatorio::{Completion, DelayedOperation, Purgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> std::time::Duration { std::time::Duration::ZERO }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self, _: Completion) {}
    /// # }
    /// let p: Purgatory<String, Op> = Purgatory::builder().build().unwrap();
    /// assert_eq!(p.watched(), 0);
    /// ```
    pub fn builder() -> PurgatoryBuilder<K, O> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        PurgatoryBuilder {
            watch_shards: (16 * cores).max(16),
            purge_interval: DEFAULT_PURGE_INTERVAL,
            timer: TimerBuilder::new(),
            keys: std::marker::PhantomData,
        }
    }
}
