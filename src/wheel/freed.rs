//! Freed memory: what a wheel gives back, and who frees it.
//!
//! A wheel gives memory back when it empties (a large arena's slots, pool
//! and side heap: [`empty_out`](Wheel::empty_out)) and when its pool's
//! store outgrows its references ([`trim_pool`](Wheel::trim_pool)). A small
//! wheel keeps its memory for its next timers instead, so one that goes
//! from one timer to none and back does not rebuild its store each time.
//!
//! The memory given back is a [`Freed`]. By default the wheel frees it in
//! the call that gave it back ([`Freer::Wheel`]). A wheel behind a lock
//! [keeps it](Wheel::keep_freed) for its owner instead ([`Freer::Owner`]),
//! who [takes it](Wheel::take_freed) after every call that can empty the
//! wheel or rebuild its pool and drops it after the lock: freeing a million
//! timers' slots takes milliseconds, which must neither hold the lock nor
//! delay the tasks a poll handed out.

use super::arena::{self, Slots};
use super::pool::{self, Pool};
use super::side::Side;
use super::Wheel;

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
    /// Frees `freed` now, or keeps it for the owner beside what it kept
    /// already.
    pub(super) fn hand(&mut self, freed: Freed<T>) {
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
}

impl<T> Wheel<T> {
    /// Makes the memory a poll or a removal gives back wait for the owner
    /// to take it ([`take_freed`](Self::take_freed)) and free it after its
    /// lock, instead of being freed inside the call.
    pub(crate) fn keep_freed(&mut self) {
        if let Freer::Wheel = self.freed {
            self.freed = Freer::Owner(None);
        }
    }

    /// The memory polls and removals gave back since the last call, if the
    /// wheel [keeps it](Self::keep_freed): to drop after the owner's lock.
    #[inline]
    pub(crate) fn take_freed(&mut self) -> Option<Box<Freed<T>>> {
        match &mut self.freed {
            Freer::Owner(kept) => kept.take(),
            Freer::Wheel => None,
        }
    }

    /// Rebuilds the buckets' pool smaller once its store is more than 16
    /// times the references the wheel can hold (its pending timers and its
    /// garbage), past [`pool::KEEP_REFS`]: after a burst fired, the blocks
    /// it freed would otherwise stay until the wheel empties. Amortized
    /// over the references freed since the store last had that size.
    pub(super) fn trim_pool(&mut self) {
        let needed = self.arena.len() + self.garbage.count();
        if self.pool.stored() > 16 * needed + pool::KEEP_REFS {
            let old = self.pool.rebuild(self.buckets.iter_mut());
            self.freed.hand(Freed {
                pool: Some(old),
                ..Freed::default()
            });
        }
    }

    /// Whether the wheel has no memory to give back: its arena, pool and
    /// side heap are no larger than what an empty wheel keeps.
    fn is_small(&self) -> bool {
        self.arena.slots() <= arena::KEEP_SLOTS
            && self.pool.stored() <= pool::KEEP_REFS
            && self.side.is_clear_and_small()
    }

    /// No timer is pending: every reference left is dead, and dropped. A
    /// small wheel ([`is_small`](Self::is_small)) keeps its memory: its
    /// buckets' blocks go back to the pool's free lists, for the next
    /// timers, and its arena keeps its slots. A larger one gives back its
    /// pool and side heap, and its arena unless `keep_arena`: when the last
    /// timer is being handed out, its slot was just freed, and the poll
    /// that finds the wheel empty releases the arena.
    pub(super) fn empty_out(&mut self, keep_arena: bool) {
        if self.is_small() {
            self.forget_refs();
            return;
        }
        let mut freed = self.drop_refs();
        if !keep_arena {
            freed.slots = self.arena.release();
        }
        self.freed.hand(freed);
    }

    /// Drops every reference of the buckets (their blocks go back to the
    /// pool's free lists), the ready list and the run, and disarms every
    /// bucket. Only correct when no near timer is pending (none that a
    /// reference holds).
    fn forget_refs(&mut self) {
        for bucket in self.queue.buckets() {
            self.pool.release(&mut self.buckets[bucket as usize]);
        }
        self.queue.clear();
        self.ready.clear();
        self.run.clear();
        self.garbage.clear();
        self.head.settle();
    }

    /// Drops every reference and side entry and disarms every bucket. Only
    /// correct when no timer is pending (or the arena is drained right after).
    /// Returns the memory a large pool and side heap gave back.
    pub(super) fn drop_refs(&mut self) -> Freed<T> {
        self.forget_refs();
        let pool = self.pool.clear();
        let side = self.side.clear();
        Freed {
            pool,
            side,
            slots: None,
        }
    }
}
