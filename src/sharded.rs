//! [`Sharded`]: a value split into independently locked shards, picked by a
//! key's hash, so that unrelated keys rarely share a lock. The purgatory's
//! watch lists and the keyed timer's map are both one.

use std::hash::{BuildHasher, Hash};

use crate::sync::{HashState, Mutex};

/// `T` in shards, each behind its own lock, picked by a key's hash under
/// `S`.
pub(crate) struct Sharded<T, S = HashState> {
    /// The shards.
    shards: Box<[Mutex<T>]>,
    /// Hashes keys: random per instance (HashDoS-resistant) by default,
    /// fixed under loom.
    hasher: S,
}

impl<T> Sharded<T> {
    /// `shards` shards (at least one), each made by `make`.
    pub(crate) fn new(shards: usize, make: impl FnMut() -> T) -> Self {
        Sharded::with_hasher(shards, make, HashState::default())
    }
}

impl<T, S> Sharded<T, S> {
    /// `shards` shards (at least one), each made by `make`, keys hashed by
    /// `hasher`.
    pub(crate) fn with_hasher(shards: usize, make: impl FnMut() -> T, hasher: S) -> Self {
        let mut make = make;
        Sharded {
            shards: (0..shards.max(1)).map(|_| Mutex::new(make())).collect(),
            hasher,
        }
    }

    /// The shard of a key whose hash is `hash`. The hash is mixed first, so
    /// that the keys of one shard do not share the low bits a hash table in
    /// the shard then buckets them by.
    #[inline]
    pub(crate) fn shard_of(&self, hash: u64) -> &Mutex<T> {
        let mixed = hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        &self.shards[mixed as usize % self.shards.len()]
    }

    /// The hasher.
    pub(crate) fn hasher(&self) -> &S {
        &self.hasher
    }

    /// Every shard, in order.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, Mutex<T>> {
        self.shards.iter()
    }
}

impl<T, S: BuildHasher> Sharded<T, S> {
    /// The hash of `key`.
    #[inline]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_key_always_lands_in_the_same_shard() {
        let sharded = Sharded::new(8, Vec::<u32>::new);
        for key in 0..1000u32 {
            sharded.shard_of(sharded.hash(&key)).lock().push(key);
        }
        for key in 0..1000u32 {
            assert!(sharded.shard_of(sharded.hash(&key)).lock().contains(&key));
        }
        let total: usize = sharded.iter().map(|s| s.lock().len()).sum();
        assert_eq!(total, 1000);
        assert!(
            sharded.iter().all(|s| !s.lock().is_empty()),
            "1000 keys spread over 8 shards"
        );
        assert_eq!(Sharded::new(0, || ()).iter().count(), 1, "at least one");
    }
}
