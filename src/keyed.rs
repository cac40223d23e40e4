//! Keyed timers: timers addressed by a user key (session timeouts).
//!
//! go-zero's `SetTimer / MoveTimer / RemoveTimer / Drain`, on the thread-safe
//! [`Timer`]. Each key maps to one entry `(key, value, id, timer entry)` in
//! a sharded hash table; a call hashes its key once, for the shard and the
//! table both, and looks it up by any borrowed form (`&str` for a `String`
//! key). Resetting a key's deadline (a heartbeat) is a lookup and a
//! reschedule of its existing timer: O(1), no allocation.
//!
//! An entry's timer task is a crate job ([`Expiry`]): when the timer shuts
//! down with it pending, the key is removed quietly (no callback, the value
//! dropped) instead of being handed back to the user as a task of theirs.
//!
//! Lock order: map shard → timer shard. An expiring entry's task runs on a
//! timer worker, takes the map shard's lock, removes the entry if its `id`
//! still matches (a key set again meanwhile has a new id), releases the lock,
//! and only then calls the expiry callback. No key, value or task is ever
//! dropped under a map shard's lock: whatever leaves the map is dropped
//! after the lock is released, since its `Drop` is user code. (`Hash` and
//! `Eq` of the key run under it, as in any map.)

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::error::{BuildError, ScheduleError};
use crate::publish::{KeyEvent, KeyedFigures};
use crate::sharded::Sharded;
use crate::sync::AtomicBool;
use crate::sync::{AtomicU64, HashState};
use crate::time::Deadline;
use crate::timer::{BoxTask, Driver, Entry as TimerEntry, Job, Timer, TimerBuilder};
use hashbrown::HashTable;

/// The callback a [`KeyedTimer`] calls with each expired key and value.
type OnExpire<K, V> = dyn Fn(K, V) + Send + Sync;

/// One key's timer.
struct Entry<K, V> {
    /// The key.
    key: K,
    /// The value handed to the callback on expiry.
    value: V,
    /// Distinguishes this entry from a later one under the same key.
    id: u64,
    /// The entry's timer, in the keyed timer's [`Driver`].
    timer: TimerEntry,
}

/// The keyed timer's map, its id source and its callback: what its handles
/// and its timer tasks share.
struct KeyMap<K, V> {
    /// The entries, sharded by the key's hash and found by it.
    shards: Sharded<HashTable<Entry<K, V>>, HashState>,
    /// Source of entry ids.
    next_id: AtomicU64,
    /// Called with each expired key and value, outside every lock.
    on_expire: Box<OnExpire<K, V>>,
    /// The timer's shards, where the entries' timers are cancelled and
    /// moved (by [`TimerEntry`], without a shard reference per key).
    driver: Arc<Driver<BoxTask>>,
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
    /// Removes the entry of `key` (whose hash is `hash`) if its id is `id`:
    /// the entry a timer job was made for, not a later one under the same
    /// key. The entry is dropped (or used) by the caller, after the lock.
    fn take_if_current(&self, key: &K, hash: u64, id: u64) -> Option<Entry<K, V>>
    where
        K: Eq,
    {
        let mut shard = self.shards.shard_of(hash).lock();
        let found = shard.find_entry(hash, |entry| entry.key == *key && entry.id == id);
        found.ok().map(|slot| slot.remove().0)
    }

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
            for entry in entries {
                entry.cancel_timer(&self.driver);
            }
        }
    }
}

impl<K, V> Entry<K, V> {
    /// Cancels the entry's timer in `driver`; its job is dropped without
    /// running.
    fn cancel_timer(&self, driver: &Driver<BoxTask>) {
        if let Some(task) = driver.cancel(self.timer) {
            task.disarm();
        }
    }
}

/// The timer job of one entry.
struct Expiry<K, V> {
    /// The keyed timer; weak, so pending jobs do not keep it alive.
    shared: Weak<KeyMap<K, V>>,
    /// The entry's key.
    key: K,
    /// The key's hash.
    hash: u64,
    /// The entry's id.
    id: u64,
}

impl<K, V> Job for Expiry<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Send + 'static,
{
    fn fire(self: Arc<Self>) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        if let Some(entry) = shared.take_if_current(&self.key, self.hash, self.id) {
            shared.record(KeyEvent::Expired, 1);
            let Entry { key, value, .. } = entry;
            let callback = std::panic::AssertUnwindSafe(|| (shared.on_expire)(key, value));
            if std::panic::catch_unwind(callback).is_err() {
                shared.record(KeyEvent::Panicked, 1);
            }
        }
    }

    /// The timer shut down (or was dropped) with the entry pending: the key
    /// leaves the map without a callback, and its value is dropped here,
    /// after the lock.
    fn abandon(self: Arc<Self>) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        if let Some(entry) = shared.take_if_current(&self.key, self.hash, self.id) {
            shared.record(KeyEvent::Removed, 1);
            drop(entry);
        }
    }
}

/// Timers addressed by key: set, reset, remove, drain.
///
/// Expired entries are removed and handed to the callback, on the timer's
/// worker threads. The callback may call back into the keyed timer (for
/// example to set the key again). A panicking callback is caught and counted
/// in [`KeyedMetrics::panics`] and breaks nothing.
///
/// Look-ups take any borrowed form of the key (`&str` for `String` keys),
/// and hash it once per call.
///
/// # Shutting down
///
/// * [`shutdown`](Self::shutdown) removes every key and returns them; on a
///   timer of its own ([`new`](Self::new), [`with_timer`](Self::with_timer))
///   it also stops that timer, on a shared one ([`on_timer`](Self::on_timer),
///   [`with_expirations`](Self::with_expirations)) it leaves the timer
///   running for its other users.
/// * Shutting the *timer* down ends the keyed timer's waits too: pending keys
///   are removed without a callback (never handed back as tasks of yours,
///   never fired early), and [`Expirations`](crate::Expirations) ends.
/// * Dropping the last clone does what `shutdown` does, and drops the keys.
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
            shards: Sharded::new(16 * cores, HashTable::new),
            next_id: AtomicU64::new(0),
            on_expire,
            driver: Arc::clone(timer.driver()),
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
        let shared = &self.shared;
        let hash = shared.shards.hash(&key);
        let mut shard = shared.shards.shard_of(hash).lock();
        if let Some(entry) = shard.find_mut(hash, |entry| entry.key == key) {
            if let Some(wake) = shared
                .driver
                .reschedule(entry.timer, Deadline::After(delay))
            {
                let old = std::mem::replace(&mut entry.value, value);
                drop(shard);
                // The driver's wake-up, after the shard's lock.
                drop(wake);
                shared.record(KeyEvent::Moved, 1);
                // `key` (the map keeps its own copy) drops here, unlocked.
                return Ok(Some(old));
            }
            // Its timer already fired; the job in flight will find a new id.
        }
        if shared.closed.load(Ordering::SeqCst) {
            drop(shard);
            return Err(ScheduleError::new((key, value)));
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let job: Arc<dyn Job> = Arc::new(Expiry {
            shared: Arc::downgrade(shared),
            key: key.clone(),
            hash,
            id,
        });
        match self
            .timer
            .schedule_entry(Deadline::After(delay), BoxTask::job(job))
        {
            Ok((timer, wake)) => {
                let entry = Entry {
                    key,
                    value,
                    id,
                    timer,
                };
                let replaced = match shard.find_mut(hash, |e| e.key == entry.key) {
                    Some(slot) => Some(std::mem::replace(slot, entry)),
                    None => {
                        let hasher = shared.shards.hasher();
                        shard.insert_unique(hash, entry, |e| hasher.hash_one(&e.key));
                        None
                    }
                };
                drop(shard);
                drop(wake);
                shared.record(KeyEvent::Inserted, 1);
                Ok(replaced.map(|old| old.value))
            }
            Err(refused) => {
                drop(shard);
                refused.into_inner().disarm();
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
    ///
    /// // String keys are looked up by `&str`: a heartbeat allocates nothing.
    /// let sessions = purgatorio::KeyedTimer::new(|_: String, _: ()| ()).unwrap();
    /// sessions.set("consumer-1".to_string(), (), Duration::from_secs(10)).unwrap();
    /// assert!(sessions.reset("consumer-1", Duration::from_secs(10)));
    /// ```
    pub fn reset<Q>(&self, key: &Q, delay: Duration) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The driver's wake-up, if owed, is given after the shard's lock.
        let wake = {
            let hash = self.shared.shards.hash(key);
            let shard = self.shared.shards.shard_of(hash).lock();
            shard
                .find(hash, |entry| entry.key.borrow() == key)
                .and_then(|entry| {
                    self.shared
                        .driver
                        .reschedule(entry.timer, Deadline::After(delay))
                })
        };
        let moved = wake.is_some();
        drop(wake);
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
    pub fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.shared.shards.hash(key);
        let entry = {
            let mut shard = self.shared.shards.shard_of(hash).lock();
            let found = shard.find_entry(hash, |entry| entry.key.borrow() == key);
            found.ok()?.remove().0
        };
        entry.cancel_timer(&self.shared.driver);
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
    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.shared.shards.hash(key);
        let shard = self.shared.shards.shard_of(hash).lock();
        shard
            .find(hash, |entry| entry.key.borrow() == key)
            .is_some()
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
            for entry in entries {
                entry.cancel_timer(&self.shared.driver);
                out.push((entry.key, entry.value));
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

    /// The timer the keyed timer runs on.
    pub(crate) fn timer(&self) -> &Timer {
        &self.timer
    }

    /// The loom model's expiry path: the driver's pass and the worker's run,
    /// on the calling thread. Returns how many entries' tasks ran.
    #[cfg(all(test, purgatorio_loom))]
    pub(crate) fn run_due_here(&self) -> usize {
        self.timer.run_due_here()
    }

    /// Shuts the keyed timer down: removes every key still set and returns
    /// them with their values (no callback runs); afterwards
    /// [`set`](Self::set) fails. On a timer of its own it also stops that
    /// timer, joining its threads (so it blocks while a callback runs: in
    /// async code use [`shutdown_async`](Self::shutdown_async)); on a shared
    /// timer ([`on_timer`](Self::on_timer),
    /// [`with_expirations`](Self::with_expirations)) the timer keeps running
    /// for its other users. Calling it again returns nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let t = purgatorio::KeyedTimer::new(|_: u8, _: ()| ()).unwrap();
    /// t.set(1, (), Duration::from_secs(1)).unwrap();
    /// assert_eq!(t.shutdown(), vec![(1, ())]);
    /// assert!(t.set(2, (), Duration::from_secs(1)).is_err());
    ///
    /// // On a shared timer, the timer runs on.
    /// let timer = purgatorio::Timer::builder().build().unwrap();
    /// let sessions = purgatorio::KeyedTimer::on_timer(&timer, |_: u8, _: ()| ());
    /// sessions.set(1, (), Duration::from_secs(1)).unwrap();
    /// assert_eq!(sessions.shutdown().len(), 1);
    /// assert!(!timer.is_shut_down());
    /// ```
    pub fn shutdown(&self) -> Vec<(K, V)> {
        self.shared.closed.store(true, Ordering::SeqCst);
        // Keys first: the timer's shutdown would remove them quietly.
        let keys = self.drain();
        if self.shared.owns_timer {
            drop(self.timer.shutdown());
        }
        keys
    }
}
