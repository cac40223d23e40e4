//! The arena: where pending timers' payloads live.
//!
//! A `Vec` of slots linked into a free list by index, so scheduling allocates
//! nothing once the arena has grown to the working set, and a cancelled slot is
//! reusable at once.
//!
//! An occupied slot carries the **check** of the one live reference to it (see
//! [`reference`](super::reference): the deadline's low 31 bits, or a side
//! heap check). A bucket's reference whose check no longer matches is
//! *garbage*, skipped when met. That is what makes cancel O(1) and touch only
//! the cancelled slot: the bucket is never searched.
//!
//! A slot's **generation** moves on every time the slot is freed and never
//! takes the value 0; handles carry it, so a handle outlives its timer
//! harmlessly: the next occupant of the slot has a different generation.
//!
//! With a `u64` payload a slot is 16 bytes: the generation is a `NonZeroU32`
//! whose niche holds the vacant/occupied tag.

use std::num::NonZeroU32;

/// The index that ends the free list.
const NIL: u32 = u32::MAX;

/// An empty arena with more slots than this gives its memory back
/// ([`Arena::release`]); smaller ones keep it for the next burst.
pub(super) const KEEP_SLOTS: usize = 4096;

/// The largest number of slots an arena holds (indices are `u32`, and
/// [`NIL`] is reserved).
pub(crate) const MAX_SLOTS: usize = NIL as usize;

/// The slots of an emptied arena that gave its memory back
/// ([`Arena::release`]), to free where it costs nobody a wait: all vacant,
/// so freeing them runs no payload's `Drop`.
pub(crate) struct Slots<T> {
    /// Held only to be freed.
    _slots: Vec<Slot<T>>,
}

/// One place in the arena.
#[derive(Debug)]
enum Slot<T> {
    /// Holds a pending timer's payload.
    Occupied {
        /// The payload, handed back on cancel or expiry.
        value: T,
        /// Identifies this occupant.
        generation: NonZeroU32,
        /// The check of the one live reference to this slot.
        check: u32,
    },
    /// Free; part of the free list.
    Vacant {
        /// The next free slot, or [`NIL`].
        next_free: u32,
        /// The generation the next occupant gets (never 0).
        generation: u32,
    },
}

/// The generation after `generation`; skips 0, which no generation takes.
#[inline]
fn next_generation(generation: u32) -> u32 {
    if generation == u32::MAX {
        1
    } else {
        generation + 1
    }
}

/// A slab of payloads addressed by `(index, generation)` and `(index, check)`.
#[derive(Debug)]
pub(crate) struct Arena<T> {
    /// All slots, occupied or vacant.
    slots: Vec<Slot<T>>,
    /// Head of the free list, or [`NIL`].
    free: u32,
    /// Number of occupied slots.
    len: usize,
    /// The generation a new slot starts at: past every generation an
    /// occupant had before the arena last gave its slots back
    /// ([`release`](Self::release)), so a key from before never matches a
    /// slot made after.
    fresh: u32,
    /// How far past `fresh` the generations of the occupants since the last
    /// release went (counted with wrapping: slots made since then started
    /// at `fresh`).
    span: u32,
}

impl<T> Arena<T> {
    /// An empty arena.
    pub(crate) fn new() -> Self {
        Arena {
            slots: Vec::new(),
            free: NIL,
            len: 0,
            fresh: 1,
            span: 0,
        }
    }

    /// Number of occupied slots.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Stores `value`, whose live reference will carry `check`; returns its
    /// index and generation.
    ///
    /// # Panics
    ///
    /// If [`MAX_SLOTS`] slots are occupied.
    #[inline(always)]
    pub(crate) fn insert(&mut self, value: T, check: u32) -> (u32, NonZeroU32) {
        if self.free == NIL {
            assert!(
                self.slots.len() < MAX_SLOTS,
                "more than {MAX_SLOTS} pending timers"
            );
            self.slots.push(Slot::Vacant {
                next_free: NIL,
                generation: self.fresh,
            });
            self.free = (self.slots.len() - 1) as u32;
        }
        let idx = self.free;
        let slot = &mut self.slots[idx as usize];
        let Slot::Vacant {
            next_free,
            generation,
        } = *slot
        else {
            unreachable!("free list points at occupied slot {idx}")
        };
        let generation = NonZeroU32::new(generation).expect("generations are never zero");
        *slot = Slot::Occupied {
            value,
            generation,
            check,
        };
        self.free = next_free;
        self.len += 1;
        (idx, generation)
    }

    /// Whether `(idx, generation)` names an occupied slot.
    #[inline]
    pub(crate) fn contains(&self, idx: u32, generation: NonZeroU32) -> bool {
        matches!(self.slots.get(idx as usize), Some(Slot::Occupied { generation: g, .. }) if *g == generation)
    }

    /// The payload of `(idx, generation)`, if occupied.
    #[inline]
    pub(crate) fn get_mut(&mut self, idx: u32, generation: NonZeroU32) -> Option<&mut T> {
        match self.slots.get_mut(idx as usize) {
            Some(Slot::Occupied {
                value,
                generation: g,
                ..
            }) if *g == generation => Some(value),
            _ => None,
        }
    }

    /// Whether slot `idx` is occupied and carries `check`: whether a
    /// reference `(idx, check)` is live.
    #[inline]
    pub(crate) fn is_live(&self, idx: u32, check: u32) -> bool {
        matches!(self.slots.get(idx as usize), Some(Slot::Occupied { check: c, .. }) if *c == check)
    }

    /// Gives `(idx, generation)` a new live reference with `check`; the old one
    /// becomes garbage unless its check is the same. Returns the old check,
    /// or `None` if `(idx, generation)` is not occupied.
    #[inline]
    pub(crate) fn recheck(&mut self, idx: u32, generation: NonZeroU32, check: u32) -> Option<u32> {
        match self.slots.get_mut(idx as usize) {
            Some(Slot::Occupied {
                generation: g,
                check: c,
                ..
            }) if *g == generation => Some(std::mem::replace(c, check)),
            _ => None,
        }
    }

    /// Frees `(idx, generation)` and returns its payload and its live reference's
    /// check, if occupied.
    #[inline]
    pub(crate) fn remove(&mut self, idx: u32, generation: NonZeroU32) -> Option<(T, u32)> {
        if !self.contains(idx, generation) {
            return None;
        }
        let (value, _, check) = self.vacate(idx);
        Some((value, check))
    }

    /// Frees the slot that `(idx, check)` references and returns its payload
    /// and generation, if that reference is live.
    #[inline]
    pub(crate) fn remove_live(&mut self, idx: u32, check: u32) -> Option<(T, NonZeroU32)> {
        if !self.is_live(idx, check) {
            return None;
        }
        let (value, generation, _) = self.vacate(idx);
        Some((value, generation))
    }

    /// Frees an occupied slot; returns its payload, generation and check.
    fn vacate(&mut self, idx: u32) -> (T, NonZeroU32, u32) {
        let slot = &mut self.slots[idx as usize];
        let next = match slot {
            Slot::Occupied { generation, .. } => {
                self.span = self.span.max(generation.get().wrapping_sub(self.fresh));
                next_generation(generation.get())
            }
            Slot::Vacant { .. } => unreachable!("vacating a vacant slot"),
        };
        let old = std::mem::replace(
            slot,
            Slot::Vacant {
                next_free: self.free,
                generation: next,
            },
        );
        self.free = idx;
        self.len -= 1;
        match old {
            Slot::Occupied {
                value,
                generation,
                check,
            } => (value, generation, check),
            Slot::Vacant { .. } => unreachable!("vacating a vacant slot"),
        }
    }

    /// Gives the slots' memory back if the arena is empty and large: after a
    /// burst of a million timers, all cancelled or fired, the arena costs
    /// nothing again. O(1) besides freeing the memory, once per emptying of
    /// a large arena. New slots start past every generation handed out
    /// since the last release, so keys from before never match a slot
    /// created after (the caller must have dropped every reference). Over
    /// 2^32 generations they wrap, as a slot's own do.
    ///
    /// Returns the slots given back, for the caller to free (or drop).
    pub(crate) fn release(&mut self) -> Option<Slots<T>> {
        if self.len != 0 || self.slots.len() <= KEEP_SLOTS {
            return None;
        }
        self.fresh = next_generation(self.fresh.wrapping_add(self.span));
        self.span = 0;
        self.free = NIL;
        Some(Slots {
            _slots: std::mem::take(&mut self.slots),
        })
    }

    /// Number of slots, occupied or vacant.
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Makes the next fresh generation `fresh`, as if the arena had handed
    /// out generations up to it (tests of the wrap only).
    #[cfg(test)]
    pub(super) fn start_generations_at(&mut self, fresh: u32) {
        self.fresh = fresh;
    }

    /// Frees every occupied slot, returning the payloads in index order. The
    /// arena keeps its memory, and every outstanding handle and reference
    /// turns stale.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        let mut out = Vec::with_capacity(self.len);
        for idx in 0..self.slots.len() {
            if matches!(self.slots[idx], Slot::Occupied { .. }) {
                out.push(self.vacate(idx as u32).0);
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
    fn generations_wrap_without_zero() {
        assert_eq!(next_generation(u32::MAX), 1);
        assert_eq!(next_generation(1), 2);
    }
}
