//! Keyed timers: timers addressed by a user key (session timeouts).
//!
//! go-zero's `SetTimer / MoveTimer / RemoveTimer / Drain`, on the thread-safe
//! [`Timer`]. Each key maps to one entry `(value, id, timer handle)` in a
//! sharded map. Resetting a key's deadline (a heartbeat) is a map lookup and a
//! reschedule of its existing timer: O(1), no allocation.
//!
//! Lock order: map shard → timer shard. An expiring entry's task runs on a
//! timer worker, takes the map shard's lock, removes the entry if its `id`
//! still matches (a key set again meanwhile has a new id), releases the lock,
//! and only then calls the expiry callback. No key, value or task is ever
//! dropped under a map shard's lock: whatever leaves the map is dropped
//! after the lock is released, since its `Drop` is user code. (`Hash` and
//! `Eq` of the key run under it, as in any map.)

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::error::{BuildError, ScheduleError};
use crate::publish::{KeyEvent, KeyedFigures};
use crate::sharded::Sharded;
use crate::sync::AtomicBool;
use crate::sync::{AtomicU64, HashState};
use crate::timer::{Task, Timer, TimerBuilder, TimerHandle};

/// The callback a [`KeyedTimer`] calls with each expired key and value.
type OnExpire<K, V> = dyn Fn(K, V) + Send + Sync;

/// One key's timer.
struct Entry<V> {
    /// The value handed to the callback on expiry.
    value: V,
    /// Distinguishes this entry from a later one under the same key.
    id: u64,
    /// The entry's timer.
    handle: TimerHandle,
}

/// The keyed timer's map, its id source and its callback: what its handles
/// and its timer tasks share.
struct KeyMap<K, V> {
    /// key → entry, sharded by the key's hash.
    shards: Sharded<HashMap<K, Entry<V>, HashState>>,
    /// Source of entry ids.
    next_id: AtomicU64,
    /// Called with each expired key and value, outside every lock.
    on_expire: Box<OnExpire<K, V>>,
    /// Set by `shutdown`: `set` refuses from then on.
    closed: AtomicBool,
    /// Whether the timer is the keyed timer's own, to stop on shutdown.
    owns_timer: bool,
    /// What happened to the keys.
    stats: Stats,
    /// The same, published to `metrics` (with that feature).
    figures: KeyedFigures,
}

/// The keyed timer's counters (statistics only: they order nothing).
#[derive(Debug, Default)]
struct Stats {
    /// Keys inserted by `set`.
    inserted: std::sync::atomic::AtomicU64,
    /// Keys moved to a new deadline by `set` or `reset`.
    moved: std::sync::atomic::AtomicU64,
    /// Keys removed by `remove`, `drain` or `shutdown`.
    removed: std::sync::atomic::AtomicU64,
    /// Keys that expired (their callback ran).
    expired: std::sync::atomic::AtomicU64,
    /// Callbacks that panicked.
    panics: std::sync::atomic::AtomicU64,
}

impl<K, V> KeyMap<K, V> {
    /// Counts `n` keys that had `event`, here and in the published figures.
    fn record(&self, event: KeyEvent, n: u64) {
        let counter = match event {
            KeyEvent::Inserted => &self.stats.inserted,
            KeyEvent::Moved => &self.stats.moved,
            KeyEvent::Removed => &self.stats.removed,
            KeyEvent::Expired => &self.stats.expired,
            KeyEvent::Panicked => &self.stats.panics,
        };
        counter.fetch_add(n, Ordering::Relaxed);
        self.figures.event(event, n);
    }
}

/// A snapshot of a [`KeyedTimer`]'s gauge and counters.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let t = purgatorio::KeyedTimer::new(|_: u8, _: ()| ())?;
/// t.set(1, (), Duration::from_secs(30))?;
/// t.set(1, (), Duration::from_secs(30))?; // moved, not inserted again
/// t.remove(&1);
/// let m = t.metrics();
/// assert_eq!((m.len, m.inserted, m.moved, m.removed, m.expired), (0, 1, 1, 1, 0));
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyedMetrics {
    /// Keys set now.
    pub len: usize,
    /// Keys inserted by `set`.
    pub inserted: u64,
    /// Keys moved to a new deadline (`set` of a set key, `reset`).
    pub moved: u64,
    /// Keys removed without expiring (`remove`, `drain`, `shutdown`).
    pub removed: u64,
    /// Keys that expired: their callback ran.
    pub expired: u64,
    /// Callbacks that panicked (caught and counted; the timer goes on).
    pub panics: u64,
}

impl<K, V> Drop for KeyMap<K, V> {
    /// The last handle went: cancel the entries' timers, which on a shared
    /// timer would otherwise wait there until due. Keys, values and tasks
    /// drop after each shard's lock.
    fn drop(&mut self) {
        for shard in self.shards.iter() {
            let entries = std::mem::take(&mut *shard.lock());
            for (_, entry) in entries {
                drop(entry.handle.cancel());
            }
        }
    }
}

/// The timer task of one entry.
struct Expiry<K, V> {
    /// The keyed timer; weak, so pending tasks do not keep it alive.
    shared: Weak<KeyMap<K, V>>,
    /// The entry's key.
    key: K,
    /// The entry's id.
    id: u64,
}

impl<K, V> Task for Expiry<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Send + 'static,
{
    fn run(self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let expired = {
            let mut shard = shared.shards.shard(&self.key).lock();
            match shard.get(&self.key) {
                Some(entry) if entry.id == self.id => shard.remove_entry(&self.key),
                _ => None,
            }
        };
        if let Some((key, entry)) = expired {
            shared.record(KeyEvent::Expired, 1);
            let callback = std::panic::AssertUnwindSafe(|| (shared.on_expire)(key, entry.value));
            if std::panic::catch_unwind(callback).is_err() {
                shared.record(KeyEvent::Panicked, 1);
            }
        }
    }
}

/// Timers addressed by key: set, reset, remove, drain.
///
/// Expired entries are removed and handed to the callback, on the timer's
/// worker threads. The callback may call back into the keyed timer (for
/// example to set the key again). A panicking callback is caught and counted
/// in [`KeyedMetrics::panics`] and breaks
/// nothing. Dropping the last clone stops the timer; pending entries are
/// dropped without a callback.
///
/// # Examples
///
/// ```
/// use std::sync::mpsc;
/// use std::time::Duration;
/// use purgatorio::{KeyedTimer, ManualClock, Timer};
///
/// let clock = ManualClock::new();
/// let (tx, rx) = mpsc::channel();
/// let sessions = KeyedTimer::with_timer(Timer::builder().clock(clock.clone()), move |id: u32, user: &str| {
///     tx.send((id, user)).unwrap();
/// })?;
///
/// sessions.set(1, "ada", Duration::from_secs(30))?;
/// sessions.set(2, "bob", Duration::from_secs(30))?;
/// clock.advance(Duration::from_secs(20));
/// assert!(sessions.reset(&1, Duration::from_secs(30))); // ada's heartbeat
/// clock.advance(Duration::from_secs(10));
/// assert_eq!(rx.recv()?, (2, "bob"));                   // bob went idle
/// assert_eq!(sessions.remove(&1), Some("ada"));         // ada logs out
/// assert!(sessions.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyedTimer<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Send + 'static,
{
    /// Map, ids and callback.
    shared: Arc<KeyMap<K, V>>,
    /// Runs the entries' timers.
    timer: Timer,
}

impl<K, V> Clone for KeyedTimer<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Send + 'static,
{
    fn clone(&self) -> Self {
        KeyedTimer {
            shared: Arc::clone(&self.shared),
            timer: self.timer.clone(),
        }
    }
}

impl<K, V> fmt::Debug for KeyedTimer<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Send + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedTimer")
            .field("len", &self.len())
            .field("timer", &self.timer)
            .finish()
    }
}

impl<K, V> KeyedTimer<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Send + 'static,
{
    /// A keyed timer on a default [`Timer`] (system clock, 1 ms tick).
    ///
    /// # Errors
    ///
    /// [`BuildError::Spawn`] if its threads could not be started.
    ///
    /// # Examples
    ///
    /// ```
    /// let t = purgatorio::KeyedTimer::new(|key: String, _: ()| println!("{key} expired")).unwrap();
    /// assert!(t.is_empty());
    /// ```
    pub fn new(on_expire: impl Fn(K, V) + Send + Sync + 'static) -> Result<Self, BuildError> {
        Self::with_timer(Timer::builder(), on_expire)
    }

    /// A keyed timer on a timer built from `timer` (clock, tick, workers…).
    ///
    /// # Errors
    ///
    /// Any error of [`TimerBuilder::build`].
    ///
    /// # Examples
    ///
    /// See [`KeyedTimer`].
    pub fn with_timer(
        timer: TimerBuilder,
        on_expire: impl Fn(K, V) + Send + Sync + 'static,
    ) -> Result<Self, BuildError> {
        Ok(Self::start(timer.build()?, true, Box::new(on_expire)))
    }

    /// A keyed timer on `timer`, shared with anything else that uses it
    /// (purgatories, other keyed timers, your tasks): one driver thread and
    /// one worker pool for a whole server. Shutting the keyed timer down, or
    /// dropping its last handle, cancels its own entries and leaves the
    /// timer running.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatorio::{KeyedTimer, Timer};
    ///
    /// let timer = Timer::builder().build()?;
    /// let sessions = KeyedTimer::on_timer(&timer, |member: u32, _: ()| println!("{member} left"));
    /// let joins = KeyedTimer::on_timer(&timer, |group: String, _: ()| println!("{group} rebalances"));
    /// sessions.set(7, (), Duration::from_secs(10))?;
    /// joins.set("orders".to_string(), (), Duration::from_secs(30))?;
    /// assert_eq!(timer.len(), 2);
    /// drop(joins);                 // cancels its entry; the timer runs on
    /// assert_eq!(timer.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn on_timer(timer: &Timer, on_expire: impl Fn(K, V) + Send + Sync + 'static) -> Self {
        Self::start(timer.clone(), false, Box::new(on_expire))
    }

    /// A keyed timer on `timer`, which it stops on shutdown if `owns_timer`.
    fn start(timer: Timer, owns_timer: bool, on_expire: Box<OnExpire<K, V>>) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shared = Arc::new(KeyMap {
            shards: Sharded::new(16 * cores, HashMap::default),
            next_id: AtomicU64::new(0),
            on_expire,
            closed: AtomicBool::new(false),
            owns_timer,
            stats: Stats::default(),
            figures: KeyedFigures::new(timer.name()),
        });
        KeyedTimer { shared, timer }
    }

    /// Sets `key` to expire `delay` from now with `value`: inserts it, or
    /// moves an existing key to the new deadline and value. Returns the
    /// previous value, if the key was set.
    ///
    /// # Errors
    ///
    /// [`ScheduleError`] with the key and value inside if the timer is shut
    /// down.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let t = purgatorio::KeyedTimer::new(|_: u8, _: &str| ()).unwrap();
    /// assert_eq!(t.set(7, "a", Duration::from_secs(60)).unwrap(), None);
    /// assert_eq!(t.set(7, "b", Duration::from_secs(60)).unwrap(), Some("a"));
    /// assert_eq!(t.len(), 1);
    /// ```
    pub fn set(
        &self,
        key: K,
        value: V,
        delay: Duration,
    ) -> Result<Option<V>, ScheduleError<(K, V)>> {
        let mut shard = self.shared.shards.shard(&key).lock();
        if let Some(entry) = shard.get_mut(&key) {
            if entry.handle.reschedule(delay) {
                let old = std::mem::replace(&mut entry.value, value);
                drop(shard);
                self.shared.record(KeyEvent::Moved, 1);
                // `key` (the map keeps its own copy) drops here, unlocked.
                return Ok(Some(old));
            }
            // Its timer already fired; the in-flight task will find a new id.
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let task = Expiry {
            shared: Arc::downgrade(&self.shared),
            key: key.clone(),
            id,
        };
        if self.shared.closed.load(Ordering::SeqCst) {
            drop(shard);
            drop(task);
            return Err(ScheduleError::new((key, value)));
        }
        match self.timer.schedule(delay, move || task.run()) {
            Ok(handle) => {
                let entry = Entry { value, id, handle };
                let replaced = match shard.get_mut(&key) {
                    Some(slot) => Some(std::mem::replace(slot, entry)),
                    None => {
                        shard.insert(key, entry);
                        drop(shard);
                        self.shared.record(KeyEvent::Inserted, 1);
                        return Ok(None);
                    }
                };
                drop(shard);
                self.shared.record(KeyEvent::Inserted, 1);
                Ok(replaced.map(|old| old.value))
            }
            Err(refused) => {
                drop(shard);
                drop(refused.into_inner());
                Err(ScheduleError::new((key, value)))
            }
        }
    }

    /// Moves `key` to expire `delay` from now, keeping its value (go-zero's
    /// `MoveTimer`, a heartbeat). O(1), allocates nothing. Returns `false` if
    /// the key is not set or is expiring right now.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let t = purgatorio::KeyedTimer::new(|_: u8, _: ()| ()).unwrap();
    /// t.set(1, (), Duration::from_secs(30)).unwrap();
    /// assert!(t.reset(&1, Duration::from_secs(30)));
    /// assert!(!t.reset(&2, Duration::from_secs(30)));
    /// ```
    pub fn reset(&self, key: &K, delay: Duration) -> bool {
        let moved = {
            let shard = self.shared.shards.shard(key).lock();
            shard
                .get(key)
                .is_some_and(|entry| entry.handle.reschedule(delay))
        };
        if moved {
            self.shared.record(KeyEvent::Moved, 1);
        }
        moved
    }

    /// Removes `key` and returns its value; its callback will not run.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let t = purgatorio::KeyedTimer::new(|_: u8, _: u8| unreachable!()).unwrap();
    /// t.set(1, 10, Duration::from_millis(1)).unwrap();
    /// assert_eq!(t.remove(&1), Some(10));
    /// assert_eq!(t.remove(&1), None);
    /// ```
    pub fn remove(&self, key: &K) -> Option<V> {
        let (_key, entry) = self.shared.shards.shard(key).lock().remove_entry(key)?;
        drop(entry.handle.cancel());
        self.shared.record(KeyEvent::Removed, 1);
        Some(entry.value)
    }

    /// Whether `key` is set.
    ///
    /// # Examples
    ///
    /// ```
    /// let t = purgatorio::KeyedTimer::new(|_: u8, _: ()| ()).unwrap();
    /// assert!(!t.contains(&1));
    /// ```
    pub fn contains(&self, key: &K) -> bool {
        self.shared.shards.shard(key).lock().contains_key(key)
    }

    /// Removes every key and returns the keys and values (no callback runs).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let t = purgatorio::KeyedTimer::new(|_: u8, _: ()| ()).unwrap();
    /// t.set(1, (), Duration::from_secs(1)).unwrap();
    /// t.set(2, (), Duration::from_secs(1)).unwrap();
    /// assert_eq!(t.drain().len(), 2);
    /// assert!(t.is_empty());
    /// ```
    pub fn drain(&self) -> Vec<(K, V)> {
        let mut out = Vec::new();
        for shard in self.shared.shards.iter() {
            let entries = std::mem::take(&mut *shard.lock());
            for (key, entry) in entries {
                drop(entry.handle.cancel());
                out.push((key, entry.value));
            }
        }
        self.shared.record(KeyEvent::Removed, out.len() as u64);
        out
    }

    /// A snapshot of the gauge and counters.
    ///
    /// # Examples
    ///
    /// See [`KeyedMetrics`].
    pub fn metrics(&self) -> KeyedMetrics {
        let stats = &self.shared.stats;
        let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        KeyedMetrics {
            len: self.len(),
            inserted: load(&stats.inserted),
            moved: load(&stats.moved),
            removed: load(&stats.removed),
            expired: load(&stats.expired),
            panics: load(&stats.panics),
        }
    }

    /// Number of keys set.
    ///
    /// # Examples
    ///
    /// ```
    /// let t = purgatorio::KeyedTimer::new(|_: u8, _: ()| ()).unwrap();
    /// assert_eq!(t.len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.shared.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Whether no key is set.
    ///
    /// # Examples
    ///
    /// ```
    /// let t = purgatorio::KeyedTimer::new(|_: u8, _: ()| ()).unwrap();
    /// assert!(t.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The loom model's expiry path: the driver's pass and the worker's run,
    /// on the calling thread. Returns how many entries' tasks ran.
    #[cfg(all(test, purgatorio_loom))]
    pub(crate) fn run_due_here(&self) -> usize {
        self.timer.run_due_here()
    }

    /// Stops the timer (joining its threads) and returns every key still set,
    /// with its value; no callback runs. Afterwards [`set`](Self::set) fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let t = purgatorio::KeyedTimer::new(|_: u8, _: ()| ()).unwrap();
    /// t.set(1, (), Duration::from_secs(1)).unwrap();
    /// assert_eq!(t.shutdown(), vec![(1, ())]);
    /// assert!(t.set(2, (), Duration::from_secs(1)).is_err());
    /// ```
    pub fn shutdown(&self) -> Vec<(K, V)> {
        self.shared.closed.store(true, Ordering::SeqCst);
        if self.shared.owns_timer {
            drop(self.timer.shutdown());
        }
        self.drain()
    }
}
