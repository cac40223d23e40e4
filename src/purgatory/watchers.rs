//! Sharded watch lists: key → operations waiting on it.
//!
//! A key's shard is chosen by its hash, so unrelated keys rarely share a lock.
//! Each call hashes a key once: the same hash picks the shard and finds the
//! key's list in that shard's table. A shard lock is held only to edit or
//! copy a list, never while an operation's callbacks run, and no operation
//! lock is taken under it. Nothing a user wrote runs under it but the key's
//! `Eq` (and, for a new key, `Clone`; `Hash` when a shard's table grows):
//! operations and keys that leave a list are dropped after the lock is
//! released, since dropping them may run user code (the last reference to an
//! operation, a key's `Drop`).

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use hashbrown::HashTable;

use super::counters::OpCounters;
use super::op::Op;
use super::operation::DelayedRequest;
use crate::sharded::Sharded;

/// The default hasher of watch keys: fast (foldhash) and seeded at random
/// per process, so keys an attacker picks cannot be aimed at one shard.
pub type DefaultKeyHasher = hashbrown::DefaultHashBuilder;

/// A list shorter than this is not swept when it grows (see [`List::swept`]).
const SWEEP_FROM: usize = 32;

/// One key's list.
struct List<K, O: DelayedRequest> {
    /// The key.
    key: K,
    /// The operations watching it, done or not.
    ops: Vec<Arc<Op<O>>>,
    /// Its length after it was last swept of done operations: a push that
    /// doubles that (and reaches [`SWEEP_FROM`]) sweeps it again, on the
    /// parking thread, while the list is at hand. Each sweep reads at most
    /// twice the entries pushed since the last, so this costs O(1) per
    /// watch, and done entries of busy keys go a few at a time rather than
    /// in a purge of every list at once, whose bursts delayed expirations
    /// (`docs/design.md` has the figures).
    swept: usize,
}

impl<K, O: DelayedRequest> List<K, O> {
    /// Moves the done operations into `done`, keeping the order of the rest.
    fn sweep(&mut self, done: &mut Vec<Arc<Op<O>>>) {
        done.extend(self.ops.extract_if(.., |op| op.is_done()));
        self.swept = self.ops.len();
    }
}

/// One shard of the watch lists.
struct Lists<K, O: DelayedRequest> {
    /// Operations watched per key, found by the key's hash; a key whose list
    /// empties is removed.
    lists: HashTable<List<K, O>>,
    /// Sum of the lengths of `lists`.
    watched: usize,
}

/// All watch lists of a purgatory, keys hashed by `S`.
pub(crate) struct Watchers<K, O: DelayedRequest, S> {
    /// The lists, sharded by key.
    shards: Sharded<Lists<K, O>, S>,
}

impl<K: Hash + Eq + Clone, O: DelayedRequest, S: BuildHasher> Watchers<K, O, S> {
    /// Empty lists in `shards` shards (≥ 1), keys hashed by `hasher`.
    pub(crate) fn new(shards: usize, hasher: S) -> Self {
        Watchers {
            shards: Sharded::with_hasher(
                shards,
                || Lists {
                    lists: HashTable::new(),
                    watched: 0,
                },
                hasher,
            ),
        }
    }

    /// The hash of `key`, to pass to the calls below (hash once per call).
    #[inline]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.shards.hash(key)
    }

    /// Adds `op` to `key`'s list; `hash` is `key`'s. The caller holds the
    /// operation's lock. Sweeps the list of its done operations when it has
    /// doubled since its last sweep (see [`List::swept`]); they are dropped
    /// after the shard lock (done operations hold no user value).
    pub(crate) fn watch(&self, key: &K, hash: u64, op: &Arc<Op<O>>, counters: &OpCounters) {
        let mut done: Vec<Arc<Op<O>>> = Vec::new();
        let mut shard = self.shards.shard_of(hash).lock();
        match shard.lists.find_mut(hash, |list| &list.key == key) {
            Some(list) => {
                list.ops.push(Arc::clone(op));
                if list.ops.len() >= 2 * list.swept.max(SWEEP_FROM / 2) {
                    list.sweep(&mut done);
                }
            }
            None => {
                let hasher = self.shards.hasher();
                let list = List {
                    key: key.clone(),
                    ops: vec![Arc::clone(op)],
                    swept: 0,
                };
                shard
                    .lists
                    .insert_unique(hash, list, |list| hasher.hash_one(&list.key));
            }
        }
        shard.watched += 1;
        if done.is_empty() {
            return;
        }
        shard.watched -= done.len();
        counters.swept(done.len());
        drop(shard);
        counters.removed(done.len());
        drop(done);
    }

    /// Drops the done operations from `key`'s list (and the key if its list
    /// empties) and returns a copy of the rest, to try outside the lock.
    pub(crate) fn live_snapshot<Q>(
        &self,
        key: &Q,
        hash: u64,
        counters: &OpCounters,
    ) -> Vec<Arc<Op<O>>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.edit_list(key, hash, counters, |list| list.clone())
            .unwrap_or_default()
    }

    /// Drops the done operations from `key`'s list, and the key if its list
    /// empties.
    pub(crate) fn remove_done<Q>(&self, key: &Q, hash: u64, counters: &OpCounters)
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.edit_list(key, hash, counters, |_| ());
    }

    /// Under the shard lock: takes the done operations out of `key`'s list,
    /// runs `f` on what is left, and takes the key out if its list is empty.
    /// What was taken out is dropped after the lock. `None` if `key` has no
    /// list.
    fn edit_list<Q, R>(
        &self,
        key: &Q,
        hash: u64,
        counters: &OpCounters,
        f: impl FnOnce(&Vec<Arc<Op<O>>>) -> R,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let mut shard = self.shards.shard_of(hash).lock();
        let Ok(entry) = shard
            .lists
            .find_entry(hash, |list| list.key.borrow() == key)
        else {
            return None;
        };
        let mut entry = entry;
        let list = entry.get_mut();
        let mut done = Vec::new();
        list.sweep(&mut done);
        let result = f(&list.ops);
        let emptied = if list.ops.is_empty() {
            Some(entry.remove().0)
        } else {
            None
        };
        shard.watched -= done.len();
        drop(shard);
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
            let emptied: Vec<List<K, O>> = {
                let mut shard = shard.lock();
                for list in shard.lists.iter_mut() {
                    list.sweep(&mut done);
                }
                shard.watched -= done.len();
                counters.swept(done.len());
                shard.lists.extract_if(|list| list.ops.is_empty()).collect()
            };
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

impl<K, O: DelayedRequest, S> Watchers<K, O, S> {
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
            for list in lists {
                all.extend(list.ops);
            }
        }
        all.sort_by_key(|op| Arc::as_ptr(op) as usize);
        all.dedup_by(|a, b| Arc::ptr_eq(a, b));
        all
    }
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests {

    use super::*;
    use crate::purgatory::test_ops::Wait;

    /// A list of `n` operations, those at the indices `done` picks done
    /// (taken back, which sets `done` as completing does).
    fn list(n: usize, done: impl Fn(usize) -> bool) -> List<u8, Wait> {
        let counters = Arc::new(OpCounters::default());
        let ops: Vec<_> = (0..n)
            .map(|i| {
                let op = Arc::new(Op::new(Wait, Arc::clone(&counters)));
                if done(i) {
                    assert!(op.cancel().is_some(), "entry {i} was pending");
                }
                op
            })
            .collect();
        List {
            key: 0,
            ops,
            swept: 0,
        }
    }

    /// Sweeps lists with done entries first, last, in runs and alone: the
    /// live keep their order, every done one goes to `done` once, and
    /// `swept` is what is left.
    #[test]
    fn sweep_keeps_the_live_in_order_and_takes_every_done_one() {
        const RUN: usize = 64;
        type Pick = fn(usize) -> bool;
        let patterns: [(usize, Pick); 7] = [
            (0, |_| true),
            (5, |_| false),
            (RUN, |_| true),
            (200, |i| i % 3 == 0),
            (200, |i| (RUN..2 * RUN).contains(&i) || i == 199),
            (3 * RUN + 1, |i| i % 2 == 1 || i == 3 * RUN),
            (130, |i| i != 0 && i != 63 && i != 64 && i != 129),
        ];
        for (n, pick) in patterns {
            let mut list = list(n, pick);
            let before = list.ops.clone();
            let mut done = Vec::new();
            list.sweep(&mut done);
            let live: Vec<_> = before.iter().filter(|op| !op.is_done()).collect();
            assert_eq!(list.ops.len(), live.len(), "{n} entries");
            for (kept, expected) in list.ops.iter().zip(&live) {
                assert!(Arc::ptr_eq(kept, expected), "{n} entries: order changed");
            }
            let mut taken: Vec<_> = done.iter().map(Arc::as_ptr).collect();
            let mut expected: Vec<_> = before
                .iter()
                .filter(|op| op.is_done())
                .map(Arc::as_ptr)
                .collect();
            taken.sort();
            expected.sort();
            assert_eq!(taken, expected, "{n} entries: the done ones");
            assert_eq!(list.swept, live.len(), "{n} entries");
        }
    }
}
