//! [`PurgatoryBuilder`]: the purgatory's settings and its timer's.

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use super::core::Core;
use super::operation::DelayedRequest;
use super::service::Purgatory;
use super::watchers::DefaultKeyHasher;
use crate::error::BuildError;
use crate::time::MAX_WATCH_SHARDS;
use crate::timer::{Timer, TimerBuilder};

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
pub struct PurgatoryBuilder<K, O: DelayedRequest, S = DefaultKeyHasher> {
    /// Number of watch-list shards.
    watch_shards: usize,
    /// Lingering entries tolerated before a purge.
    purge_interval: usize,
    /// Where the purgatory's timer comes from.
    timer: TimerSource,
    /// Hashes the watch keys.
    hasher: S,
    /// Labels the published figures.
    name: String,
    /// The key and operation types.
    types: std::marker::PhantomData<fn() -> (K, O)>,
}

/// Where a purgatory's timer comes from.
#[derive(Debug)]
enum TimerSource {
    /// A timer of its own, built with the purgatory and shut down with it.
    Own(TimerBuilder),
    /// A timer shared with others; the purgatory only holds a handle.
    Shared(Timer),
}

impl<K, O: DelayedRequest, S> fmt::Debug for PurgatoryBuilder<K, O, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PurgatoryBuilder")
            .field("watch_shards", &self.watch_shards)
            .field("purge_interval", &self.purge_interval)
            .field("timer", &self.timer)
            .finish()
    }
}

impl<K, O, S> PurgatoryBuilder<K, O, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    O: DelayedRequest,
    S: BuildHasher + Send + Sync + 'static,
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
    /// those keys, a `park` that finds the list doubled since its last
    /// sweep, or a purge removes it. A purge also waits until the done
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
    pub fn timer(mut self, timer: TimerBuilder) -> Self {
        self.timer = TimerSource::Own(timer);
        self
    }

    /// Runs the purgatory on `timer`, shared with anything else that uses it
    /// (other purgatories, keyed timers, your own tasks): one driver thread
    /// and one worker pool for a whole server. Operations expire on its
    /// clock and its workers; shutting the purgatory down completes its own
    /// operations and leaves the timer running. Expiring an operation costs
    /// the timer no allocation of its own.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # use purgatorio::{Completion, DelayedOperation, Purgatory, Timer};
    /// # struct Fetch;
    /// # impl DelayedOperation for Fetch {
    /// #     fn delay(&self) -> Duration { Duration::from_secs(1) }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self, _: Completion) {}
    /// # }
    /// # struct Produce;
    /// # impl DelayedOperation for Produce {
    /// #     fn delay(&self) -> Duration { Duration::from_secs(30) }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self, _: Completion) {}
    /// # }
    /// let timer = Timer::builder().thread_name("broker-timer").build()?;
    /// let fetches: Purgatory<u32, Fetch> = Purgatory::builder().shared_timer(&timer).build()?;
    /// let produces: Purgatory<u32, Produce> = Purgatory::builder().shared_timer(&timer).build()?;
    /// fetches.try_complete_else_watch(Fetch, [1])?;
    /// produces.try_complete_else_watch(Produce, [1])?;
    /// assert_eq!((fetches.delayed(), produces.delayed(), timer.len()), (1, 1, 2));
    /// produces.shutdown();                   // its own operations only
    /// assert_eq!(timer.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn shared_timer(mut self, timer: &Timer) -> Self {
        self.timer = TimerSource::Shared(timer.clone());
        self
    }

    /// Names the purgatory (default `"purgatory"`): the `purgatory` label
    /// of the figures published with the `metrics` feature.
    ///
    /// # Examples
    ///
    /// ```
    /// # use purgatorio::{Completion, DelayedOperation, Purgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> std::time::Duration { std::time::Duration::from_secs(1) }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self, _: Completion) {}
    /// # }
    /// let fetches: Purgatory<u64, Op> = Purgatory::builder().name("fetch").build()?;
    /// # drop(fetches);
    /// # Ok::<(), purgatorio::BuildError>(())
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Hashes watch keys with `hasher` (default [`DefaultKeyHasher`]). Each
    /// call hashes a key once: the hash picks the key's shard and finds its
    /// list.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::hash::BuildHasherDefault;
    /// # use purgatorio::{Completion, DelayedOperation, Purgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay(&self) -> std::time::Duration { std::time::Duration::from_secs(1) }
    /// #     fn try_complete(&mut self) -> bool { false }
    /// #     fn on_complete(&mut self, _: Completion) {}
    /// # }
    /// // A deterministic hasher, say for a simulation that must replay exactly.
    /// type Fixed = BuildHasherDefault<std::collections::hash_map::DefaultHasher>;
    /// let p: Purgatory<u64, Op, Fixed> = Purgatory::builder().hasher(Fixed::default()).build()?;
    /// p.try_complete_else_watch(Op, [1, 2])?;
    /// assert_eq!(p.keys(), 2);
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn hasher<H: BuildHasher + Send + Sync + 'static>(
        self,
        hasher: H,
    ) -> PurgatoryBuilder<K, O, H> {
        PurgatoryBuilder {
            watch_shards: self.watch_shards,
            purge_interval: self.purge_interval,
            timer: self.timer,
            hasher,
            name: self.name,
            types: std::marker::PhantomData,
        }
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
    pub fn build(self) -> Result<Purgatory<K, O, S>, BuildError> {
        if !(1..=MAX_WATCH_SHARDS).contains(&self.watch_shards) {
            return Err(BuildError::WatchShards(self.watch_shards));
        }
        let (timer, owns_timer) = match self.timer {
            TimerSource::Own(builder) => (builder.build()?, true),
            TimerSource::Shared(timer) => (timer, false),
        };
        let core = Arc::new(Core::new(
            self.watch_shards,
            self.purge_interval,
            &timer,
            !owns_timer,
            self.hasher,
            &self.name,
        ));
        Ok(Purgatory::new(core, timer, owns_timer))
    }
}

impl<K, O> Purgatory<K, O>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    O: DelayedRequest,
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
            timer: TimerSource::Own(Timer::builder()),
            hasher: DefaultKeyHasher::default(),
            name: String::from("purgatory"),
            types: std::marker::PhantomData,
        }
    }
}
