//! The arena: where pending timers' payloads live.
//!
//! A `Vec` of slots linked into a free list by index, so scheduling allocates
//! nothing once the arena has grown to the working set, and a cancelled slot is
//! reusable at once.
//!
//! Each slot carries a **stamp**, a per-slot counter that moves on every free
//! and every reschedule and never takes the value 0. The wheel's buckets refer
//! to slots by `(index, stamp)`; a reference whose stamp no longer matches is
//! *garbage*, skipped when met. That is what makes cancel O(1) and touch only
//! the cancelled slot: the bucket is never searched.
//!
//! A slot's **generation** is the stamp it had when it was occupied; handles
//! carry it, so a handle outlives its timer harmlessly: the next occupant of
//! the slot has a different generation.
//!
//! With a `u64` payload a slot is 16 bytes: the generation is a `NonZeroU32`
//! whose niche holds the vacant/occupied tag.

use std::num::NonZeroU32;

/// The index that ends the free list.
const NIL: u32 = u32::MAX;

/// An empty arena with more slots than this gives its memory back
/// ([`Arena::release`]); smaller ones keep it for the next burst.
const KEEP_SLOTS: usize = 4096;

/// The largest number of slots an arena holds (indices are `u32`, and
/// [`NIL`] is reserved).
pub(crate) const MAX_SLOTS: usize = NIL as usize;

/// One place in the arena.
#[derive(Debug)]
enum Slot<T> {
    /// Holds a pending timer's payload.
    Occupied {
        /// The payload, handed back on cancel or expiry.
        value: T,
        /// The stamp at the time the slot was occupied; identifies this occupant.
        gen: NonZeroU32,
        /// The stamp of the one live reference to this slot.
        stamp: u32,
    },
    /// Free; part of the free list.
    Vacant {
        /// The next free slot, or [`NIL`].
        next_free: u32,
        /// The stamp the next occupant starts with.
        stamp: u32,
    },
}

/// The stamp after `stamp`; skips 0 so a stamp is always a valid generation.
#[inline]
fn next_stamp(stamp: u32) -> u32 {
    if stamp == u32::MAX {
        1
    } else {
        stamp + 1
    }
}

/// A slab of payloads addressed by `(index, generation)` and `(index, stamp)`.
#[derive(Debug)]
pub(crate) struct Arena<T> {
    /// All slots, occupied or vacant.
    slots: Vec<Slot<T>>,
    /// Head of the free list, or [`NIL`].
    free: u32,
    /// Number of occupied slots.
    len: usize,
    /// How many times the arena gave its slots back ([`release`](Self::release)):
    /// keys carry it, so a key from before a release never matches a slot
    /// created after it, whatever their stamps.
    epoch: u32,
}

impl<T> Arena<T> {
    /// An empty arena.
    pub(crate) fn new() -> Self {
        Arena {
            slots: Vec::new(),
            free: NIL,
            len: 0,
            epoch: 0,
        }
    }

    /// Number of occupied slots.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Stores `value`; returns its index, generation and stamp.
    ///
    /// # Panics
    ///
    /// If [`MAX_SLOTS`] slots are occupied.
    #[inline]
    pub(crate) fn insert(&mut self, value: T) -> (u32, NonZeroU32, u32) {
        if self.free == NIL {
            assert!(
                self.slots.len() < MAX_SLOTS,
                "more than {MAX_SLOTS} pending timers"
            );
            self.slots.push(Slot::Vacant {
                next_free: NIL,
                stamp: 1,
            });
            self.free = (self.slots.len() - 1) as u32;
        }
        let idx = self.free;
        let slot = &mut self.slots[idx as usize];
        let Slot::Vacant { next_free, stamp } = *slot else {
            unreachable!("free list points at occupied slot {idx}")
        };
        let gen = NonZeroU32::new(stamp).expect("stamps are never zero");
        *slot = Slot::Occupied { value, gen, stamp };
        self.free = next_free;
        self.len += 1;
        (idx, gen, stamp)
    }

    /// Whether `(idx, gen)` names an occupied slot.
    #[inline]
    pub(crate) fn contains(&self, idx: u32, gen: NonZeroU32) -> bool {
        matches!(self.slots.get(idx as usize), Some(Slot::Occupied { gen: g, .. }) if *g == gen)
    }

    /// The payload of `(idx, gen)`, if occupied.
    #[inline]
    pub(crate) fn get_mut(&mut self, idx: u32, gen: NonZeroU32) -> Option<&mut T> {
        match self.slots.get_mut(idx as usize) {
            Some(Slot::Occupied { value, gen: g, .. }) if *g == gen => Some(value),
            _ => None,
        }
    }

    /// Whether `(idx, stamp)` is the live reference to an occupied slot.
    #[inline]
    pub(crate) fn is_live(&self, idx: u32, stamp: u32) -> bool {
        matches!(self.slots.get(idx as usize), Some(Slot::Occupied { stamp: s, .. }) if *s == stamp)
    }

    /// Moves the live reference of `(idx, gen)` on: the old reference becomes
    /// garbage. Returns the new stamp, or `None` if `(idx, gen)` is not occupied.
    #[inline]
    pub(crate) fn restamp(&mut self, idx: u32, gen: NonZeroU32) -> Option<u32> {
        match self.slots.get_mut(idx as usize) {
            Some(Slot::Occupied { gen: g, stamp, .. }) if *g == gen => {
                *stamp = next_stamp(*stamp);
                Some(*stamp)
            }
            _ => None,
        }
    }

    /// Frees `(idx, gen)` and returns its payload, if occupied.
    #[inline]
    pub(crate) fn remove(&mut self, idx: u32, gen: NonZeroU32) -> Option<T> {
        if !self.contains(idx, gen) {
            return None;
        }
        Some(self.vacate(idx))
    }

    /// Frees the slot that `(idx, stamp)` references and returns its payload
    /// and generation, if that reference is live.
    #[inline]
    pub(crate) fn remove_live(&mut self, idx: u32, stamp: u32) -> Option<(T, NonZeroU32)> {
        let gen = match self.slots.get(idx as usize) {
            Some(Slot::Occupied { gen, stamp: s, .. }) if *s == stamp => *gen,
            _ => return None,
        };
        Some((self.vacate(idx), gen))
    }

    /// Frees an occupied slot and returns its payload.
    fn vacate(&mut self, idx: u32) -> T {
        let slot = &mut self.slots[idx as usize];
        let stamp = match slot {
            Slot::Occupied { stamp, .. } => next_stamp(*stamp),
            Slot::Vacant { .. } => unreachable!("vacating a vacant slot"),
        };
        let old = std::mem::replace(
            slot,
            Slot::Vacant {
                next_free: self.free,
                stamp,
            },
        );
        self.free = idx;
        self.len -= 1;
        match old {
            Slot::Occupied { value, .. } => value,
            Slot::Vacant { .. } => unreachable!("vacating a vacant slot"),
        }
    }

    /// The arena's epoch: keys made now carry it.
    #[inline]
    pub(crate) fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Gives the slots' memory back if the arena is empty and large: after a
    /// burst of a million timers, all cancelled or fired, the arena costs
    /// nothing again. O(1) besides freeing the memory, once per emptying of
    /// a large arena. The epoch moves on, so keys from before never match a
    /// slot created after (the caller must have dropped every reference).
    pub(crate) fn release(&mut self) {
        if self.len != 0 || self.slots.len() <= KEEP_SLOTS {
            return;
        }
        self.epoch = self.epoch.wrapping_add(1);
        self.slots = Vec::new();
        self.free = NIL;
    }

    /// Number of slots, occupied or vacant (tests only).
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Frees every occupied slot, returning the payloads in index order. The
    /// arena keeps its memory, and every outstanding handle and reference
    /// turns stale.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        let mut out = Vec::with_capacity(self.len);
        for idx in 0..self.slots.len() {
            if matches!(self.slots[idx], Slot::Occupied { .. }) {
                out.push(self.vacate(idx as u32));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_is_sixteen_bytes_for_u64() {
        assert_eq!(std::mem::size_of::<Slot<u64>>(), 16);
    }

    #[test]
    fn reuse_changes_generation_and_stamp() {
        let mut a = Arena::new();
        let (i, g, s) = a.insert("a");
        assert!(a.contains(i, g) && a.is_live(i, s));
        assert_eq!(a.remove(i, g), Some("a"));
        assert_eq!(a.remove(i, g), None, "double remove");
        let (j, g2, s2) = a.insert("b");
        assert_eq!(i, j, "slot reused at once");
        assert_ne!(g, g2);
        assert_ne!(s, s2);
        assert!(!a.contains(i, g) && !a.is_live(i, s), "stale handle misses");
        assert_eq!(a.len(), 1);
    }

    #[test]
    fn restamp_keeps_generation_but_kills_old_reference() {
        let mut a = Arena::new();
        let (i, g, s) = a.insert(7u64);
        let s2 = a.restamp(i, g).unwrap();
        assert!(!a.is_live(i, s) && a.is_live(i, s2) && a.contains(i, g));
        assert_eq!(a.remove_live(i, s), None);
        assert_eq!(a.remove_live(i, s2), Some((7, g)));
        assert_eq!(a.restamp(i, g), None);
    }

    #[test]
    fn stamps_wrap_without_zero() {
        assert_eq!(next_stamp(u32::MAX), 1);
        assert_eq!(next_stamp(1), 2);
    }

    #[test]
    fn an_empty_large_arena_gives_its_memory_back_and_moves_its_epoch() {
        let mut a = Arena::new();
        let keys: Vec<_> = (0..2 * KEEP_SLOTS as u64).map(|v| a.insert(v)).collect();
        for &(i, g, _) in &keys[1..] {
            a.remove(i, g);
        }
        a.release();
        assert_eq!(a.slots(), 2 * KEEP_SLOTS, "not empty: kept");
        a.remove(keys[0].0, keys[0].1);
        a.release();
        assert_eq!(a.slots(), 0, "empty and large: released");
        assert_eq!(a.epoch(), 1, "keys from before carry epoch 0");
        let (i, g, s) = a.insert(99);
        assert_eq!((i, g.get(), s), (0, 1, 1), "the first slot starts afresh");
        assert_eq!(a.remove(i, g), Some(99));
    }

    #[test]
    fn drain_returns_everything_and_empties() {
        let mut a = Arena::new();
        let keys: Vec<_> = (0..10).map(|v| a.insert(v)).collect();
        a.remove(keys[3].0, keys[3].1);
        assert_eq!(a.drain(), vec![0, 1, 2, 4, 5, 6, 7, 8, 9]);
        assert_eq!(a.len(), 0);
        assert!(keys.iter().all(|&(i, g, _)| !a.contains(i, g)));
    }
}
