//! The side heap: timers outside the near window of the wheel's time.
//!
//! A [reference](super::reference) holds only a deadline less than
//! [`NEAR`](super::reference::NEAR) ticks ahead. The others wait here, in a
//! min-heap of `(deadline, slot, check)` with the full deadline:
//!
//! * **overdue** timers, due at or before the wheel's time when scheduled:
//!   the next poll serves them first (the heap gives them in deadline
//!   order, which matters after a caller's clock went backwards);
//! * **far** timers, `NEAR` ticks or more ahead (24.8 days at a 1 ms tick):
//!   served in deadline order beside the wheel's buckets when their time
//!   comes. They never need a wake-up before that.
//!
//! A side timer's slot carries the check `SIDE | index`, where `index` names
//! an entry of a small slab that holds the timer's deadline. A heap entry is
//! live iff its slot carries its check and the slab entry still holds its
//! deadline: a stale entry that passes names the same slot due at the same
//! tick, so it fires that timer on time (as for references). Cancel frees
//! the slab entry and leaves the heap entry as garbage, O(1); garbage is
//! popped when it reaches the top, and the heap is compacted when garbage
//! outnumbers the live entries.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::reference::SIDE;

/// Garbage entries tolerated beyond the live ones before a compaction.
pub(super) const GARBAGE_SLACK: usize = 1024;

/// An emptied heap with more room than this gives its memory back
/// ([`Side::clear`]).
const KEEP_ENTRIES: usize = 4096;

/// A side timer waiting in the heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Entry {
    /// Deadline in ticks.
    pub(super) deadline: u64,
    /// Slot in the arena.
    pub(super) idx: u32,
    /// The check its slot carries while it is live (`SIDE | index`).
    pub(super) check: u32,
}

/// Timers outside the near window, by deadline.
#[derive(Debug, Default)]
pub(super) struct Side {
    /// Per slab index, the deadline of the side timer holding it.
    deadlines: Vec<u64>,
    /// Slab indices free for reuse.
    free: Vec<u32>,
    /// Entries by deadline, earliest on top; some are garbage.
    heap: BinaryHeap<Reverse<Entry>>,
    /// Entries in `heap` known to be dead.
    garbage: usize,
}

impl Side {
    /// Number of live side timers.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.deadlines.len() - self.free.len()
    }

    /// Whether the heap holds no entry and no more memory than an empty
    /// heap keeps ([`clear`](Self::clear) would give nothing back).
    #[inline]
    pub(super) fn is_clear_and_small(&self) -> bool {
        self.is_clear() && self.heap.capacity() <= KEEP_ENTRIES
    }

    /// Whether the heap holds no entry, live or dead.
    #[inline]
    pub(super) fn is_clear(&self) -> bool {
        self.heap.is_empty()
    }

    /// Takes a slab index for a timer due at `deadline`; returns the check
    /// its slot must carry. Pair with [`push`](Self::push) once the slot is
    /// known.
    ///
    /// # Panics
    ///
    /// With 2^31 side timers pending at once (the index must fit beside
    /// the [`SIDE`] bit).
    pub(super) fn reserve(&mut self, deadline: u64) -> u32 {
        let index = match self.free.pop() {
            Some(index) => {
                self.deadlines[index as usize] = deadline;
                index
            }
            None => {
                let index = self.deadlines.len() as u32;
                assert!(
                    index < SIDE,
                    "more than {SIDE} timers outside the near window"
                );
                self.deadlines.push(deadline);
                index
            }
        };
        SIDE | index
    }

    /// Files the side timer of slot `idx` with `check` from
    /// [`reserve`](Self::reserve).
    pub(super) fn push(&mut self, idx: u32, check: u32, deadline: u64) {
        self.heap.push(Reverse(Entry {
            deadline,
            idx,
            check,
        }));
    }

    /// The side timer with `check` was cancelled or moved: its heap entry is
    /// garbage from now on. O(1).
    #[inline]
    pub(super) fn release(&mut self, check: u32) {
        self.free.push(check & !SIDE);
        self.garbage += 1;
    }

    /// Whether `e` still names a live timer, given whether its slot carries
    /// `e.check`.
    #[inline]
    fn holds(&self, e: &Entry, slot_carries_check: bool) -> bool {
        slot_carries_check && self.deadlines[(e.check & !SIDE) as usize] == e.deadline
    }

    /// The earliest live entry, dropping dead ones from the top;
    /// `carries(idx, check)` tells whether a slot carries a check.
    #[inline]
    pub(super) fn first(&mut self, carries: impl Fn(u32, u32) -> bool) -> Option<Entry> {
        // Every poll asks, and the heap is usually empty.
        if self.heap.is_empty() {
            return None;
        }
        self.first_live(carries)
    }

    /// [`first`](Self::first) for a non-empty heap.
    #[inline(never)]
    fn first_live(&mut self, carries: impl Fn(u32, u32) -> bool) -> Option<Entry> {
        while let Some(&Reverse(e)) = self.heap.peek() {
            if self.holds(&e, carries(e.idx, e.check)) {
                return Some(e);
            }
            self.heap.pop();
            self.garbage -= 1;
        }
        None
    }

    /// The earliest entry's deadline, live or not: a lower bound of every
    /// side timer's deadline.
    #[inline]
    pub(super) fn earliest(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.0.deadline)
    }

    /// Removes the top entry, which [`first`](Self::first) found live, as its
    /// timer fires.
    pub(super) fn pop_first(&mut self) {
        if let Some(Reverse(e)) = self.heap.pop() {
            self.free.push(e.check & !SIDE);
        }
    }

    /// Compacts when garbage outnumbers the live entries by more than
    /// [`GARBAGE_SLACK`]: amortised O(1) per cancel.
    pub(super) fn collect_garbage(&mut self, carries: impl Fn(u32, u32) -> bool) {
        if self.garbage <= self.len() + GARBAGE_SLACK {
            return;
        }
        let before = self.heap.len();
        let deadlines = &self.deadlines;
        self.heap.retain(|Reverse(e)| {
            carries(e.idx, e.check) && deadlines[(e.check & !SIDE) as usize] == e.deadline
        });
        self.garbage -= before - self.heap.len();
    }

    /// Forgets every side timer (the arena is emptied with it). A large
    /// heap gives its memory back: the old side, for the caller to free (or
    /// drop).
    pub(super) fn clear(&mut self) -> Option<Side> {
        if self.heap.capacity() > KEEP_ENTRIES {
            return Some(std::mem::take(self));
        }
        self.deadlines.clear();
        self.free.clear();
        self.heap.clear();
        self.garbage = 0;
        None
    }

    /// The live entries, in no order (tests only).
    #[cfg(test)]
    pub(super) fn live(&self, carries: impl Fn(u32, u32) -> bool) -> Vec<Entry> {
        self.heap
            .iter()
            .map(|e| e.0)
            .filter(|e| self.holds(e, carries(e.idx, e.check)))
            .collect()
    }

    /// Entries in the heap known to be dead (tests only).
    #[cfg(test)]
    pub(super) fn garbage(&self) -> usize {
        self.garbage
    }

    /// Entries in the heap, live or dead (tests only).
    #[cfg(test)]
    pub(super) fn heap_len(&self) -> usize {
        self.heap.len()
    }

    /// Checks the counts (tests only): entries = side timers + garbage (a
    /// stale entry that reads as live is counted as garbage until met), every
    /// side timer has an entry that reads as live, and every free index is
    /// in range and free once.
    #[cfg(test)]
    pub(super) fn check(&self, carries: impl Fn(u32, u32) -> bool) {
        assert_eq!(
            self.heap.len(),
            self.len() + self.garbage,
            "side entries = side timers {} + garbage {}",
            self.len(),
            self.garbage
        );
        let mut live: Vec<u32> = self.live(carries).iter().map(|e| e.check).collect();
        live.sort_unstable();
        live.dedup();
        assert_eq!(live.len(), self.len(), "every side timer has a live entry");
        let mut free = self.free.clone();
        free.sort_unstable();
        free.dedup();
        assert_eq!(free.len(), self.free.len(), "a slab index freed twice");
        assert!(free.iter().all(|&i| (i as usize) < self.deadlines.len()));
    }
}
