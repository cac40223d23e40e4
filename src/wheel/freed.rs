//! Freed memory: what a wheel gives back, and who frees it.
//!
//! A wheel gives memory back when it empties (a large arena's slots, pool
//! and side heap: [`Freer::give_back`], unless [`is_small`]) and when its
//! pool's store outgrows its references ([`Freer::trim_pool`]). A small
//! wheel keeps its memory for its next timers instead, so one that goes
//! from one timer to none and back does not rebuild its store each time.
//!
//! The memory given back is a [`Freed`]. By default the wheel frees it in
//! the call that gave it back ([`Freer::Wheel`]). A wheel behind a lock
//! keeps it for its owner instead ([`Freer::Owner`], the wheel's
//! `keep_freed`), who takes it (`take_freed`) after every call that can
//! empty the wheel or rebuild its pool and drops it after the lock: freeing
//! a million timers' slots takes milliseconds, which must neither hold the
//! lock nor delay the tasks a poll handed out.

use super::arena::{self, Arena, Slots};
use super::pool::{self, Bucket, Pool};
use super::side::Side;

/// Memory a wheel gave back (an emptied arena's slots, a pool's or side
/// heap's old store), held to be freed outside its owner's lock. None of it
/// holds a payload: dropping it runs no user code.
#[must_use = "a wheel that keeps what it frees holds this for its owner (`take_freed`)"]
pub(crate) struct Freed<T> {
    /// An emptied arena's slots.
    pub(super) slots: Option<Slots<T>>,
    /// A pool's old store.
    pub(super) pool: Option<Pool>,
    /// A side heap's old store.
    pub(super) side: Option<Side>,
}

impl<T> Default for Freed<T> {
    fn default() -> Self {
        Freed {
            slots: None,
            pool: None,
            side: None,
        }
    }
}

impl<T> std::fmt::Debug for Freed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Freed")
            .field("slots", &self.slots.is_some())
            .field("pool", &self.pool.is_some())
            .field("side", &self.side.is_some())
            .finish()
    }
}

impl<T> Freed<T> {
    /// Whether it holds nothing.
    fn is_empty(&self) -> bool {
        self.slots.is_none() && self.pool.is_none() && self.side.is_none()
    }

    /// Keeps what `other` holds beside this; of two of a kind (a second
    /// release before the owner took the first, within one batch of
    /// polls) the later is freed here.
    fn merge(&mut self, other: Freed<T>) {
        let Freed { slots, pool, side } = other;
        if self.slots.is_none() {
            self.slots = slots;
        }
        if self.pool.is_none() {
            self.pool = pool;
        }
        if self.side.is_none() {
            self.side = side;
        }
    }
}

/// Who frees the memory a wheel gives back.
#[derive(Debug)]
pub(super) enum Freer<T> {
    /// The wheel, in the call that gave it back.
    Wheel,
    /// The wheel's owner, after its lock: what was given back since the
    /// owner last took it.
    Owner(Option<Box<Freed<T>>>),
}

impl<T> Freer<T> {
    /// Makes the memory given back wait for the owner to take it
    /// ([`take`](Self::take)) and free it after its lock.
    pub(super) fn keep(&mut self) {
        if let Freer::Wheel = self {
            *self = Freer::Owner(None);
        }
    }

    /// The memory given back since the last call, if it is kept for the
    /// owner ([`keep`](Self::keep)).
    #[inline]
    pub(super) fn take(&mut self) -> Option<Box<Freed<T>>> {
        match self {
            Freer::Owner(kept) => kept.take(),
            Freer::Wheel => None,
        }
    }

    /// Frees `freed` now, or keeps it for the owner beside what it kept
    /// already.
    fn hand(&mut self, freed: Freed<T>) {
        let Freer::Owner(kept) = self else {
            return;
        };
        if freed.is_empty() {
            return;
        }
        match kept {
            Some(kept) => kept.merge(freed),
            None => *kept = Some(Box::new(freed)),
        }
    }

    /// Rebuilds the `pool` of `buckets` smaller once its store is more than
    /// 16 times the references the wheel can hold (`needed`: its pending
    /// timers and its garbage), past [`pool::KEEP_REFS`], and hands the old
    /// store on: after a burst fired, the blocks it freed would otherwise
    /// stay until the wheel empties. Amortized over the references freed
    /// since the store last had that size.
    pub(super) fn trim_pool(&mut self, pool: &mut Pool, buckets: &mut [Bucket], needed: usize) {
        if pool.stored() > 16 * needed + pool::KEEP_REFS {
            let old = pool.rebuild(buckets.iter_mut());
            self.hand(Freed {
                pool: Some(old),
                ..Freed::default()
            });
        }
    }

    /// The wheel emptied (its references were dropped): empties the `pool`
    /// and the `side` heap, whose stores a large one gives back, and
    /// releases `arena`'s slots if given, and frees or keeps what was given
    /// back ([`hand`](Self::hand)).
    pub(super) fn give_back(
        &mut self,
        pool: &mut Pool,
        side: &mut Side,
        arena: Option<&mut Arena<T>>,
    ) {
        let freed = Freed {
            pool: pool.clear(),
            side: side.clear(),
            slots: arena.and_then(Arena::release),
        };
        self.hand(freed);
    }
}

/// Whether a wheel with this `arena`, `pool` and `side` heap has no memory
/// to give back: each is no larger than what an empty wheel keeps.
pub(super) fn is_small<T>(arena: &Arena<T>, pool: &Pool, side: &Side) -> bool {
    arena.slots() <= arena::KEEP_SLOTS
        && pool.stored() <= pool::KEEP_REFS
        && side.is_clear_and_small()
}
