//! Sharded watch lists: key → operations waiting on it.
//!
//! A key's shard is chosen by its hash, so unrelated keys rarely share a lock.
//! A shard lock is held only to edit or copy a list, never while an
//! operation's callbacks run, and no operation lock is taken under it.
//! Nothing a user wrote runs under it but the key's `Hash`, `Eq` and (for a
//! new key) `Clone`: operations and keys that leave a list are dropped after
//! the lock is released, since dropping them may run user code (the last
//! reference to an operation, a key's `Drop`).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::op::{sub_saturating, Op, OpCounters};
use super::operation::DelayedOperation;
use crate::sharded::Sharded;
use crate::sync::HashState;

/// One shard of the watch lists.
struct Lists<K, O> {
    /// Operations watched per key; a key whose list empties is removed.
    lists: HashMap<K, Vec<Arc<Op<O>>>, HashState>,
    /// Sum of the lengths of `lists`.
    watched: usize,
}

/// All watch lists of a purgatory.
pub(crate) struct Watchers<K, O> {
    /// The lists, sharded by key.
    shards: Sharded<Lists<K, O>>,
}

impl<K: Hash + Eq + Clone, O: DelayedOperation> Watchers<K, O> {
    /// Empty lists in `shards` shards (≥ 1).
    pub(crate) fn new(shards: usize) -> Self {
        Watchers {
            shards: Sharded::new(shards, || Lists {
                lists: HashMap::default(),
                watched: 0,
            }),
        }
    }

    /// Adds `op` to `key`'s list. The caller holds the operation's lock.
    pub(crate) fn watch(&self, key: &K, op: &Arc<Op<O>>) {
        op.add_watch();
        let mut shard = self.shards.shard(key).lock();
        shard.watched += 1;
        match shard.lists.get_mut(key) {
            Some(list) => list.push(Arc::clone(op)),
            None => {
                shard.lists.insert(key.clone(), vec![Arc::clone(op)]);
            }
        }
    }

    /// Drops the done operations from `key`'s list (and the key if its list
    /// empties) and returns a copy of the rest, to try outside the lock.
    pub(crate) fn live_snapshot<Q>(&self, key: &Q, counters: &OpCounters) -> Vec<Arc<Op<O>>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.edit_list(key, counters, |list| list.clone())
            .unwrap_or_default()
    }

    /// Drops the done operations from `key`'s list, and the key if its list
    /// empties.
    pub(crate) fn remove_done<Q>(&self, key: &Q, counters: &OpCounters)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.edit_list(key, counters, |_| ());
    }

    /// Under the shard lock: takes the done operations out of `key`'s list,
    /// runs `f` on what is left, and takes the key out if its list is empty.
    /// What was taken out is dropped after the lock. `None` if `key` has no
    /// list.
    fn edit_list<Q, R>(
        &self,
        key: &Q,
        counters: &OpCounters,
        f: impl FnOnce(&Vec<Arc<Op<O>>>) -> R,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut shard = self.shards.shard(key).lock();
        let list = shard.lists.get_mut(key)?;
        let done: Vec<Arc<Op<O>>> = list.extract_if(.., |op| op.is_done()).collect();
        let result = f(list);
        let emptied = list.is_empty();
        shard.watched -= done.len();
        let emptied = if emptied {
            shard.lists.remove_entry(key)
        } else {
            None
        };
        drop(shard);
        sub_saturating(&counters.lingering, done.len());
        counters.removed(done.len());
        drop((done, emptied));
        Some(result)
    }

    /// Takes every done operation out of every list, one shard at a time,
    /// and drops them (and the keys whose lists emptied) after that shard's
    /// lock. Returns how many entries went.
    pub(crate) fn purge(&self, counters: &OpCounters) -> usize {
        let mut total = 0;
        for shard in self.shards.iter() {
            let mut done: Vec<Arc<Op<O>>> = Vec::new();
            let emptied: Vec<(K, Vec<Arc<Op<O>>>)> = {
                let mut shard = shard.lock();
                for list in shard.lists.values_mut() {
                    done.extend(list.extract_if(.., |op| op.is_done()));
                }
                shard.watched -= done.len();
                // Counted under the lock that removed them, so `purged`
                // never lags `watched`.
                counters
                    .purged
                    .fetch_add(done.len() as u64, Ordering::Relaxed);
                shard.lists.extract_if(|_, list| list.is_empty()).collect()
            };
            sub_saturating(&counters.lingering, done.len());
            counters.removed(done.len());
            total += done.len();
            drop((done, emptied));
        }
        total
    }

    /// Sum of the lengths of all lists.
    pub(crate) fn watched(&self) -> usize {
        self.shards.iter().map(|s| s.lock().watched).sum()
    }

    /// Number of keys with a list.
    pub(crate) fn keys(&self) -> usize {
        self.shards.iter().map(|s| s.lock().lists.len()).sum()
    }
}

impl<K, O> Watchers<K, O> {
    /// Removes every list; returns every operation once (an operation watched
    /// on several keys appears once). The keys are dropped after the locks.
    pub(crate) fn drain(&self) -> Vec<Arc<Op<O>>> {
        let mut all: Vec<Arc<Op<O>>> = Vec::new();
        for shard in self.shards.iter() {
            let lists = {
                let mut shard = shard.lock();
                shard.watched = 0;
                std::mem::take(&mut shard.lists)
            };
            for (_, list) in lists {
                all.extend(list);
            }
        }
        all.sort_by_key(|op| Arc::as_ptr(op) as usize);
        all.dedup_by(|a, b| Arc::ptr_eq(a, b));
        all
    }
}
