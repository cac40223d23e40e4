//! The head: what the next poll and `next_expiration` look at first.
//!
//! The head is the top of the ready list, the top of the run, and the
//! earliest armed bucket, whose key was set by one of its references, its
//! *holder*. When that timer dies (cancelled or moved), the key may be
//! earlier than anything the bucket still holds, and the driver would wake
//! up for nothing. Settling makes the head live again: it drops dead
//! references off the tops, and re-keys or disarms a head bucket whose
//! holder died (rescanning a coarse one of up to [`RESCAN_LIMIT`]
//! references). A removal settles only when the dead timer may have been
//! on top, or a poll left the head unsettled; the rest of the time it looks
//! nothing up.

use super::arena::Arena;
use super::compact::retain_kept_in;
use super::reference::{Ref, NO_REF};
use super::Wheel;

/// A coarse head bucket whose key-setting timer died is rescanned for its
/// exact key up to this many references; a larger one keeps its early key and
/// is flushed (cascaded) then, which is work it needs anyway.
pub(super) const RESCAN_LIMIT: usize = 64;

/// Each bucket's key holder, and whether the head is settled.
#[derive(Debug)]
pub(super) struct Head {
    /// Per bucket, the reference whose deadline set the bucket's key: while
    /// it is live, the key is exact.
    holders: Vec<Ref>,
    /// Whether the head is settled: what the next poll and
    /// `next_expiration` look at first is live. A poll may leave it
    /// unsettled (a bucket that became the head may hold a dead holder); a
    /// removal then settles it, as does any removal of a timer on top.
    settled: bool,
}

impl Default for Head {
    fn default() -> Self {
        Head {
            holders: Vec::new(),
            settled: true,
        }
    }
}

impl Head {
    /// Makes room for holders of `buckets` buckets in all.
    pub(super) fn add_buckets(&mut self, buckets: usize) {
        self.holders.resize(buckets, NO_REF);
    }

    /// `r` set the key of `bucket`.
    #[inline]
    pub(super) fn hold(&mut self, bucket: u32, r: Ref) {
        self.holders[bucket as usize] = r;
    }

    /// The reference that set the key of `bucket`.
    #[inline]
    pub(super) fn holder(&self, bucket: u32) -> Ref {
        self.holders[bucket as usize]
    }

    /// Whether the head is settled.
    #[cfg(test)]
    pub(super) fn is_settled(&self) -> bool {
        self.settled
    }

    /// A poll may leave the head unsettled.
    #[inline]
    pub(super) fn unsettle(&mut self) {
        self.settled = false;
    }

    /// The head is settled (or nothing is dead).
    #[inline]
    pub(super) fn settle(&mut self) {
        self.settled = true;
    }
}

/// Pops dead references off the end of `refs` until a live one is last;
/// returns how many it popped.
fn pop_dead<T>(arena: &Arena<T>, refs: &mut Vec<Ref>) -> usize {
    let before = refs.len();
    while refs.last().is_some_and(|r| !arena.is_live(r.idx, r.check)) {
        refs.pop();
    }
    before - refs.len()
}

impl<T> Wheel<T> {
    /// After the timer in slot `idx` was removed or moved: settles the head
    /// if that timer may have been on top of it (the last reference of the
    /// ready list or of the run, or the head bucket's holder), or if a poll
    /// left it unsettled. Otherwise it is settled already, and only that
    /// timer's references died: no lookup in the arena.
    #[inline]
    pub(super) fn settle_after(&mut self, idx: u32) {
        let on_top = |r: Option<Ref>| r.is_some_and(|r| r.idx == idx);
        if !self.head.settled
            || on_top(self.ready.last().copied())
            || on_top(self.run.last())
            || self
                .queue
                .peek()
                .is_some_and(|(_, bucket)| self.head.holder(bucket).idx == idx)
        {
            self.settle_head();
        }
    }

    /// Makes the head of the bucket queue exact again after its key-setting
    /// timer died, so that [`next_expiration`](Self::next_expiration) does not
    /// ask for a wake-up with nothing due. Amortised O(1): dead references met
    /// here are dropped for good, and a rescan is bounded by [`RESCAN_LIMIT`].
    pub(super) fn settle_head(&mut self) {
        self.head.settled = true;
        self.garbage.met(pop_dead(&self.arena, &mut self.ready));
        self.garbage.met(pop_dead(&self.arena, self.run.refs_mut()));
        while let Some((_, bucket)) = self.queue.peek() {
            let b = bucket as usize;
            let holder = self.head.holders[b];
            if self.arena.is_live(holder.idx, holder.check) {
                return;
            }
            let refs = &mut self.buckets[b];
            if b < self.levels.wheel_size() as usize {
                // Level 0: every reference has the key as its deadline, so
                // any live one makes the key exact.
                let arena = &self.arena;
                self.garbage.met(
                    self.pool
                        .pop_while(refs, |r| !arena.is_live(r.idx, r.check)),
                );
                match self.pool.last(refs) {
                    Some(live) => {
                        self.head.holders[b] = live;
                        return;
                    }
                    None => {
                        self.queue.disarm(bucket);
                    }
                }
            } else if refs.len() <= RESCAN_LIMIT {
                let arena = &self.arena;
                let (dropped, earliest) = retain_kept_in(&mut self.pool, refs, self.now, |r| {
                    arena.is_live(r.idx, r.check)
                });
                self.garbage.met(dropped);
                match earliest {
                    Some((deadline, r)) => {
                        self.queue.rekey(bucket, deadline);
                        self.head.holders[b] = r;
                    }
                    None => {
                        self.queue.disarm(bucket);
                    }
                }
            } else {
                return;
            }
        }
    }
}
