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

/// Marks a bucket that is not in the heap.
const ABSENT: u32 = u32::MAX;

/// An indexed min-heap of bucket ids keyed by a `u64` tick.
#[derive(Debug, Default)]
pub(crate) struct BucketQueue {
    /// The heap: `(key, bucket)`, smallest first.
    heap: Vec<(u64, u32)>,
    /// For each bucket id, its position in `heap`, or [`ABSENT`].
    pos: Vec<u32>,
}

impl BucketQueue {
    /// An empty queue.
    pub(crate) fn new() -> Self {
        BucketQueue::default()
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
        self.heap.len()
    }

    /// The key of `bucket`, if armed.
    #[cfg(test)]
    pub(crate) fn key(&self, bucket: u32) -> Option<u64> {
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
        let at = self.pos[bucket as usize];
        if at == ABSENT {
            return None;
        }
        Some(self.remove_at(at as usize).0)
    }

    /// The earliest `(key, bucket)`.
    #[inline]
    pub(crate) fn peek(&self) -> Option<(u64, u32)> {
        self.heap.first().copied()
    }

    /// Removes and returns the earliest `(key, bucket)`.
    pub(crate) fn pop(&mut self) -> Option<(u64, u32)> {
        if self.heap.is_empty() {
            None
        } else {
            Some(self.remove_at(0))
        }
    }

    /// The armed buckets, in no particular order.
    pub(crate) fn buckets(&self) -> impl Iterator<Item = u32> + '_ {
        self.heap.iter().map(|&(_, b)| b)
    }

    /// Disarms every bucket.
    pub(crate) fn clear(&mut self) {
        for &(_, b) in &self.heap {
            self.pos[b as usize] = ABSENT;
        }
        self.heap.clear();
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
        let mut q = BucketQueue::new();
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
                    assert_eq!(q.pop(), first);
                    if let Some(f) = first {
                        model.remove(&f);
                    }
                }
            }
            check(&q);
            assert_eq!(q.peek(), model.iter().next().copied());
            assert_eq!(q.len(), model.len());
            assert_eq!(q.key(b), model.iter().find(|e| e.1 == b).map(|e| e.0));
        }
        q.clear();
        assert_eq!(q.peek(), None);
        assert!((0..64).all(|b| q.key(b).is_none()));
    }
}
