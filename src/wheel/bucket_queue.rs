//! The bucket queue: armed buckets ordered by when they are due.
//!
//! Kafka keeps its buckets in a `java.util.concurrent.BucketQueue`; we keep
//! them in an *indexed* binary min-heap, so a bucket can be registered,
//! re-keyed or withdrawn in O(log b), where b is the number of armed buckets
//! (at most a few hundred; never the number of timers).
//!
//! A bucket's key is the earliest deadline (in ticks) it holds, not the start
//! of its range: a lone timer in a coarse bucket is then due exactly when the
//! timer is, and fires on the driver's first wake-up instead of cascading
//! through every finer level on the way down.
//!
//! Ties are broken by bucket id, so the order is deterministic.
//!
//! With at most 64 slots per level (the default is 64), the finest level's
//! buckets skip the heap: one bit each in a word, and their keys in a
//! table. Every such key is an exact tick in `[now, now + slots)`, and
//! bucket `b` holds the tick `≡ b` modulo the slot count, so the earliest
//! is the first set bit at or after `now`'s slot, wrapping around: found
//! in a few instructions instead of a heap's O(log b) sift. Most buckets
//! that come due are of that level (every timer ends in it, or expires
//! from a coarser bucket by its exact key), so the heap keeps only the
//! coarse levels' buckets.

/// Marks a bucket that is not in the heap.
const ABSENT: u32 = u32::MAX;

/// The most finest-level buckets kept outside the heap (bits of a word).
const NEAR_MAX: u64 = 64;

/// An indexed min-heap of bucket ids keyed by a `u64` tick, beside a bitmap
/// of the finest level's buckets.
#[derive(Debug, Default)]
pub(crate) struct BucketQueue {
    /// The heap: `(key, bucket)`, smallest first.
    heap: Vec<(u64, u32)>,
    /// For each bucket id, its position in `heap`, or [`ABSENT`].
    pos: Vec<u32>,
    /// Bucket ids below this are finest-level buckets kept in `near` (0
    /// when a level has more than [`NEAR_MAX`] slots: all go in the heap).
    near_len: u32,
    /// Bit `b`: bucket `b` (`b < near_len`) is armed.
    near: u64,
    /// The keys of the armed buckets of `near`.
    near_keys: Vec<u64>,
}

impl BucketQueue {
    /// An empty queue for a wheel of `wheel_size` slots per level, whose
    /// buckets `0..wheel_size` are the finest level's, keyed by their exact
    /// tick, which is always in `[now, now + wheel_size)` (see
    /// [`peek`](Self::peek)).
    pub(crate) fn new(wheel_size: u64) -> Self {
        let near_len = if wheel_size <= NEAR_MAX {
            wheel_size as u32
        } else {
            0
        };
        BucketQueue {
            near_len,
            near_keys: vec![0; near_len as usize],
            ..BucketQueue::default()
        }
    }

    /// Whether `bucket` is kept in `near`.
    #[inline]
    fn is_near(&self, bucket: u32) -> bool {
        bucket < self.near_len
    }

    /// Makes room for bucket ids below `buckets`.
    pub(crate) fn reserve_buckets(&mut self, buckets: usize) {
        if self.pos.len() < buckets {
            self.pos.resize(buckets, ABSENT);
        }
    }

    /// Number of armed buckets.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len() + self.near.count_ones() as usize
    }

    /// The key of `bucket`, if armed.
    #[cfg(test)]
    pub(crate) fn key(&self, bucket: u32) -> Option<u64> {
        if self.is_near(bucket) {
            return (self.near & (1 << bucket) != 0).then(|| self.near_keys[bucket as usize]);
        }
        match self.pos[bucket as usize] {
            ABSENT => None,
            at => Some(self.heap[at as usize].0),
        }
    }

    /// Arms `bucket` at `key`, or lowers its key to `key` if that is earlier.
    /// Returns whether the bucket's key is now `key` (armed, lowered, or
    /// already equal).
    #[inline]
    pub(crate) fn arm(&mut self, bucket: u32, key: u64) -> bool {
        if self.is_near(bucket) {
            let bit = 1 << bucket;
            let current = &mut self.near_keys[bucket as usize];
            if self.near & bit == 0 {
                self.near |= bit;
                *current = key;
                return true;
            }
            let lowered = key <= *current;
            *current = (*current).min(key);
            return lowered;
        }
        match self.pos[bucket as usize] {
            ABSENT => {
                self.heap.push((key, bucket));
                self.sift_up(self.heap.len() - 1);
                true
            }
            at => {
                let current = self.heap[at as usize].0;
                if key < current {
                    self.heap[at as usize].0 = key;
                    self.sift_up(at as usize);
                }
                key <= current
            }
        }
    }

    /// Sets the key of an armed `bucket`, earlier or later.
    pub(crate) fn rekey(&mut self, bucket: u32, key: u64) {
        if self.is_near(bucket) {
            debug_assert!(
                self.near & (1 << bucket) != 0,
                "rekey of unarmed bucket {bucket}"
            );
            self.near_keys[bucket as usize] = key;
            return;
        }
        let at = self.pos[bucket as usize];
        debug_assert_ne!(at, ABSENT, "rekey of unarmed bucket {bucket}");
        let at = at as usize;
        let old = self.heap[at].0;
        self.heap[at].0 = key;
        if key < old {
            self.sift_up(at);
        } else {
            self.sift_down(at);
        }
    }

    /// Withdraws `bucket`; returns its key if it was armed.
    pub(crate) fn disarm(&mut self, bucket: u32) -> Option<u64> {
        if self.is_near(bucket) {
            let bit = 1 << bucket;
            let armed = self.near & bit != 0;
            self.near &= !bit;
            return armed.then(|| self.near_keys[bucket as usize]);
        }
        let at = self.pos[bucket as usize];
        if at == ABSENT {
            return None;
        }
        Some(self.remove_at(at as usize).0)
    }

    /// The earliest `(key, bucket)`, the wheel's time being `now`: no armed
    /// key is earlier than `now`, and the finest level's keys are before
    /// `now + wheel_size`.
    #[inline]
    pub(crate) fn peek(&self, now: u64) -> Option<(u64, u32)> {
        let far = self.heap.first().copied();
        if self.near == 0 {
            return far;
        }
        // The first armed slot at or after now's, wrapping around.
        let start = match self.near_len {
            64 => (now & 63) as u32,
            len => (now % u64::from(len)) as u32,
        };
        let after = self.near >> start;
        let slot = if after != 0 {
            start + after.trailing_zeros()
        } else {
            self.near.trailing_zeros()
        };
        let near = (self.near_keys[slot as usize], slot);
        debug_assert!(
            near.0 >= now,
            "finest bucket {slot} key {} before now {now}",
            near.0
        );
        // Ties go to the finer bucket (smaller id), as in the heap.
        Some(far.map_or(near, |far| near.min(far)))
    }

    /// The armed buckets, in no particular order.
    pub(crate) fn buckets(&self) -> impl Iterator<Item = u32> + '_ {
        let near = self.near;
        (0..self.near_len)
            .filter(move |&b| near & (1 << b) != 0)
            .chain(self.heap.iter().map(|&(_, b)| b))
    }

    /// Disarms every bucket.
    pub(crate) fn clear(&mut self) {
        for &(_, b) in &self.heap {
            self.pos[b as usize] = ABSENT;
        }
        self.heap.clear();
        self.near = 0;
    }

    /// Removes the element at heap position `at`.
    fn remove_at(&mut self, at: usize) -> (u64, u32) {
        let last = self.heap.len() - 1;
        self.heap.swap(at, last);
        let removed = self.heap.pop().expect("heap is not empty");
        self.pos[removed.1 as usize] = ABSENT;
        if at < self.heap.len() {
            self.pos[self.heap[at].1 as usize] = at as u32;
            self.sift_down(at);
            self.sift_up(at);
        }
        removed
    }

    /// Restores the heap order upwards from `at`.
    fn sift_up(&mut self, mut at: usize) {
        let item = self.heap[at];
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.heap[parent] <= item {
                break;
            }
            self.heap[at] = self.heap[parent];
            self.pos[self.heap[at].1 as usize] = at as u32;
            at = parent;
        }
        self.heap[at] = item;
        self.pos[item.1 as usize] = at as u32;
    }

    /// Restores the heap order downwards from `at`.
    fn sift_down(&mut self, mut at: usize) {
        let item = self.heap[at];
        let len = self.heap.len();
        loop {
            let left = 2 * at + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.heap[right] < self.heap[left] {
                right
            } else {
                left
            };
            if item <= self.heap[child] {
                break;
            }
            self.heap[at] = self.heap[child];
            self.pos[self.heap[at].1 as usize] = at as u32;
            at = child;
        }
        self.heap[at] = item;
        self.pos[item.1 as usize] = at as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Checks the heap property and the position index.
    fn check(q: &BucketQueue) {
        for (i, &(k, b)) in q.heap.iter().enumerate() {
            assert_eq!(q.pos[b as usize] as usize, i, "position of bucket {b}");
            if i > 0 {
                assert!(q.heap[(i - 1) / 2] <= (k, b), "heap order at {i}");
            }
        }
    }

    #[test]
    fn matches_an_ordered_set() {
        // More than NEAR_MAX slots: every bucket is in the heap, whose keys
        // may be anything.
        let mut q = BucketQueue::new(NEAR_MAX + 1);
        q.reserve_buckets(64);
        let mut model: BTreeSet<(u64, u32)> = BTreeSet::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let b = (rand() % 64) as u32;
            let k = rand() % 1000;
            let current = model.iter().find(|e| e.1 == b).copied();
            match rand() % 4 {
                0 => {
                    let lowered = q.arm(b, k);
                    assert_eq!(lowered, current.is_none_or(|c| k <= c.0));
                    match current {
                        Some(c) if c.0 <= k => {}
                        _ => {
                            if let Some(c) = current {
                                model.remove(&c);
                            }
                            model.insert((k, b));
                        }
                    }
                }
                1 => {
                    assert_eq!(q.disarm(b), current.map(|c| c.0));
                    if let Some(c) = current {
                        model.remove(&c);
                    }
                }
                2 => {
                    if let Some(c) = current {
                        q.rekey(b, k);
                        model.remove(&c);
                        model.insert((k, b));
                    }
                }
                _ => {
                    let first = model.iter().next().copied();
                    assert_eq!(q.peek(0), first);
                    if let Some(f) = first {
                        assert_eq!(q.disarm(f.1), Some(f.0));
                        model.remove(&f);
                    }
                }
            }
            check(&q);
            assert_eq!(q.peek(0), model.iter().next().copied());
            assert_eq!(q.len(), model.len());
            assert_eq!(q.key(b), model.iter().find(|e| e.1 == b).map(|e| e.0));
        }
        q.clear();
        assert_eq!(q.peek(0), None);
        assert!((0..64).all(|b| q.key(b).is_none()));
    }

    #[test]
    fn the_finest_level_comes_out_in_key_order_beside_the_heap() {
        // 8 slots per level: buckets 0..8 are the finest level's, whose
        // keys are ticks in [now, now + 8) in the slot of their residue.
        for w in [3u64, 8, 64] {
            let mut q = BucketQueue::new(w);
            q.reserve_buckets(3 * w as usize);
            let mut model: BTreeSet<(u64, u32)> = BTreeSet::new();
            let mut now = 0u64;
            let mut seed = 0x2545_f491_4f6c_dd1du64;
            let mut rand = move || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            for _ in 0..20_000 {
                match rand() % 3 {
                    0 => {
                        let key = now + rand() % w;
                        let bucket = (key % w) as u32;
                        let current = model.iter().find(|e| e.1 == bucket).copied();
                        assert_eq!(q.arm(bucket, key), current.is_none_or(|c| c.0 == key));
                        model.insert((key, bucket));
                    }
                    1 => {
                        let key = now + rand() % 1000;
                        let bucket = (w + rand() % (2 * w)) as u32;
                        let current = model.iter().find(|e| e.1 == bucket).copied();
                        let lowered = q.arm(bucket, key);
                        assert_eq!(lowered, current.is_none_or(|c| key <= c.0));
                        if lowered {
                            if let Some(c) = current {
                                model.remove(&c);
                            }
                            model.insert((key, bucket));
                        }
                    }
                    _ => {
                        let first = model.iter().next().copied();
                        assert_eq!(q.peek(now), first, "w {w} now {now}");
                        if let Some(f) = first {
                            assert_eq!(q.disarm(f.1), Some(f.0));
                            model.remove(&f);
                            now = f.0;
                        }
                    }
                }
                assert_eq!(q.peek(now), model.iter().next().copied());
                assert_eq!(q.len(), model.len());
            }
        }
    }
}
