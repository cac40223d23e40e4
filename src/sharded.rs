//! [`Sharded`]: a value split into independently locked shards, picked by a
//! key's hash, so that unrelated keys rarely share a lock. The purgatory's
//! watch lists and the keyed timer's map are both one.

use std::hash::{BuildHasher, Hash};

use crate::sync::{HashState, Mutex};

/// `T` in shards, each behind its own lock.
pub(crate) struct Sharded<T> {
    /// The shards.
    shards: Box<[Mutex<T>]>,
    /// Picks a key's shard: random per instance (HashDoS-resistant), fixed
    /// under loom.
    hasher: HashState,
}

impl<T> Sharded<T> {
    /// `shards` shards (at least one), each made by `make`.
    pub(crate) fn new(shards: usize, make: impl FnMut() -> T) -> Self {
        let mut make = make;
        Sharded {
            shards: (0..shards.max(1)).map(|_| Mutex::new(make())).collect(),
            hasher: HashState::default(),
        }
    }

    /// The shard that `key` belongs to.
    #[inline]
    pub(crate) fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> &Mutex<T> {
        let at = self.hasher.hash_one(key) as usize % self.shards.len();
        &self.shards[at]
    }

    /// Every shard, in order.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, Mutex<T>> {
        self.shards.iter()
    }
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_key_always_lands_in_the_same_shard() {
        let sharded = Sharded::new(8, Vec::<u32>::new);
        for key in 0..1000u32 {
            sharded.shard(&key).lock().push(key);
        }
        for key in 0..1000u32 {
            assert!(sharded.shard(&key).lock().contains(&key));
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
