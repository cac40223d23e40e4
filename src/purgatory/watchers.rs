//! Sharded watch lists: key → operations waiting on it.
//!
//! A key's shard is chosen by its hash, so unrelated keys rarely share a lock.
//! A shard lock is held only to edit or copy a list, never while an
//! operation's callbacks run, and no operation lock is taken under it.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use super::op::{sub_saturating, DelayedOperation, Op, OpCounters};
use crate::sync::{HashState, Mutex};

/// One shard of the watch lists.
struct Shard<K, O> {
    /// Operations watched per key; a key whose list empties is removed.
    lists: HashMap<K, Vec<Arc<Op<O>>>, HashState>,
    /// Sum of the lengths of `lists`.
    watched: usize,
}

/// All watch lists of a purgatory.
pub(crate) struct Watchers<K, O> {
    /// The shards.
    shards: Box<[Mutex<Shard<K, O>>]>,
    /// Picks a key's shard.
    hasher: HashState,
}

impl<K: Hash + Eq + Clone, O: DelayedOperation> Watchers<K, O> {
    /// Empty lists in `shards` shards (≥ 1).
    pub(crate) fn new(shards: usize) -> Self {
        Watchers {
            shards: (0..shards.max(1))
                .map(|_| {
                    Mutex::new(Shard {
                        lists: HashMap::default(),
                        watched: 0,
                    })
                })
                .collect(),
            hasher: HashState::default(),
        }
    }

    /// The shard of `key`.
    fn shard(&self, key: &K) -> &Mutex<Shard<K, O>> {
        let at = self.hasher.hash_one(key) as usize % self.shards.len();
        &self.shards[at]
    }

    /// Adds `op` to `key`'s list. The caller holds the operation's lock.
    pub(crate) fn watch(&self, key: &K, op: &Arc<Op<O>>) {
        op.add_watch();
        let mut shard = self.shard(key).lock();
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
    pub(crate) fn live_snapshot(&self, key: &K, counters: &OpCounters) -> Vec<Arc<Op<O>>> {
        self.edit_list(key, counters, |list| list.clone())
            .unwrap_or_default()
    }

    /// Drops the done operations from `key`'s list, and the key if its list
    /// empties.
    pub(crate) fn remove_done(&self, key: &K, counters: &OpCounters) {
        self.edit_list(key, counters, |_| ());
    }

    /// Under the shard lock: drops the done operations from `key`'s list,
    /// runs `f` on what is left, removes the key if its list is empty.
    /// `None` if `key` has no list.
    fn edit_list<R>(
        &self,
        key: &K,
        counters: &OpCounters,
        f: impl FnOnce(&Vec<Arc<Op<O>>>) -> R,
    ) -> Option<R> {
        let mut shard = self.shard(key).lock();
        let list = shard.lists.get_mut(key)?;
        let before = list.len();
        list.retain(|op| !op.is_done());
        let removed = before - list.len();
        let result = f(list);
        if list.is_empty() {
            shard.lists.remove(key);
        }
        shard.watched -= removed;
        drop(shard);
        sub_saturating(&counters.lingering, removed);
        Some(result)
    }

    /// Removes `key`'s whole list and returns it.
    pub(crate) fn take(&self, key: &K) -> Vec<Arc<Op<O>>> {
        let mut shard = self.shard(key).lock();
        let list = shard.lists.remove(key).unwrap_or_default();
        shard.watched -= list.len();
        list
    }

    /// Drops every done operation from every list, one shard at a time.
    /// Returns how many entries went.
    pub(crate) fn purge(&self, counters: &OpCounters) -> usize {
        let mut total = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let mut removed = 0;
            shard.lists.retain(|_, list| {
                let before = list.len();
                list.retain(|op| !op.is_done());
                removed += before - list.len();
                !list.is_empty()
            });
            shard.watched -= removed;
            drop(shard);
            sub_saturating(&counters.lingering, removed);
            total += removed;
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
    /// on several keys appears once).
    pub(crate) fn drain(&self) -> Vec<Arc<Op<O>>> {
        let mut all: Vec<Arc<Op<O>>> = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            shard.watched = 0;
            for (_, list) in shard.lists.drain() {
                all.extend(list);
            }
        }
        all.sort_by_key(|op| Arc::as_ptr(op) as usize);
        all.dedup_by(|a, b| Arc::ptr_eq(a, b));
        all
    }
}
