//! Garbage and compaction: dead references counted, and dropped in bulk.
//!
//! Cancelling or moving a timer leaves its reference where it is, dead (its
//! slot no longer carries its check): O(1), no bucket touched. Dead
//! references are dropped when met (a flush, the head's settling), and the
//! [`Garbage`] count says how many wait. When they outnumber the live timers
//! by [`GARBAGE_SLACK`], a compaction drops them all and re-keys every
//! bucket: O(references), amortised O(1) per cancel. When the last live
//! timer goes, every reference is dropped at once instead
//! ([`freed`](super::freed)'s `empty_out`).

use super::pool::{Bucket, Pool};
use super::reference::{Ref, SIDE};
use super::Wheel;

/// Garbage references tolerated beyond the number of live timers before a
/// compaction (references, not bytes).
pub(super) const GARBAGE_SLACK: usize = 1024;

/// How many references are known to be dead but still stored somewhere.
#[derive(Debug, Default)]
pub(super) struct Garbage {
    /// Dead references stored.
    count: usize,
    /// Compactions so far (tests only).
    #[cfg(test)]
    compactions: usize,
}

impl Garbage {
    /// Dead references stored.
    #[inline]
    pub(super) fn count(&self) -> usize {
        self.count
    }

    /// Compactions so far.
    #[cfg(test)]
    pub(super) fn compactions(&self) -> usize {
        self.compactions
    }

    /// One more reference died (its timer was cancelled or moved).
    #[inline]
    pub(super) fn add(&mut self) {
        self.count += 1;
    }

    /// `n` dead references were met and dropped.
    #[inline]
    pub(super) fn met(&mut self, n: usize) {
        self.count -= n;
    }

    /// A reference met on its way out was dead: it was counted.
    #[inline]
    pub(super) fn met_dead(&mut self) {
        debug_assert!(self.count > 0, "dead reference not counted as garbage");
        self.count = self.count.saturating_sub(1);
    }

    /// Every reference was dropped.
    #[inline]
    pub(super) fn clear(&mut self) {
        self.count = 0;
    }
}

/// Keeps the references of `refs` that `keep` accepts, in order; returns
/// how many it dropped.
///
/// Branch-free on the answer: every reference is written and the write
/// index moves only past kept ones, so the arena lookups of successive
/// references overlap instead of waiting on a mispredicted branch each.
fn retain_kept(refs: &mut Vec<Ref>, mut keep: impl FnMut(Ref) -> bool) -> usize {
    let before = refs.len();
    let mut kept = 0;
    for at in 0..before {
        let r = refs[at];
        refs[kept] = r;
        kept += usize::from(keep(r));
    }
    refs.truncate(kept);
    before - kept
}

/// Keeps the references of `bucket` that `keep` accepts; returns how many
/// it dropped, and the earliest kept one with its deadline at wheel time
/// `now`.
pub(super) fn retain_kept_in(
    pool: &mut Pool,
    bucket: &mut Bucket,
    now: u64,
    keep: impl FnMut(Ref) -> bool,
) -> (usize, Option<(u64, Ref)>) {
    let before = bucket.len();
    pool.retain(bucket, keep);
    let earliest = (0..bucket.blocks())
        .filter_map(|k| {
            pool.block(bucket, k)
                .iter()
                .map(|&r| (r.deadline(now), r))
                .min_by_key(|e| e.0)
        })
        .min_by_key(|e| e.0);
    (before - bucket.len(), earliest)
}

/// Which arena slots a compaction has kept a reference to: the first
/// reference that reads as live for a slot is kept, and any other one is a
/// stale duplicate (it reads as live because the slot's new occupant has
/// the same deadline, so the same check).
struct Kept(Vec<u64>);

impl Kept {
    /// None yet, for an arena of `slots` slots.
    fn new(slots: usize) -> Self {
        Kept(vec![0; slots.div_ceil(64)])
    }

    /// Whether `r`, which must read as live, is the first kept for its
    /// slot; marks the slot.
    #[inline]
    fn first(&mut self, r: Ref) -> bool {
        let (word, bit) = (r.idx as usize / 64, 1u64 << (r.idx % 64));
        let first = self.0[word] & bit == 0;
        self.0[word] |= bit;
        first
    }
}

impl<T> Wheel<T> {
    /// Counts the reference or side entry that carried `check` as garbage:
    /// its timer was cancelled or moved.
    #[inline]
    pub(super) fn forget(&mut self, check: u32) {
        if check & SIDE == 0 {
            self.garbage.add();
        } else {
            self.side.release(check);
            let arena = &self.arena;
            self.side
                .collect_garbage(|idx, check| arena.is_live(idx, check));
        }
    }

    /// Drops all references when no timer is live, or compacts when garbage
    /// outnumbers the live timers.
    #[inline]
    pub(super) fn collect_garbage(&mut self) {
        if self.arena.len() == 0 {
            self.empty_out(false);
        } else if self.garbage.count > self.arena.len() + GARBAGE_SLACK {
            self.compact();
        }
    }

    /// Removes every dead reference, and every duplicate of a live one, and
    /// re-keys every bucket to its earliest live deadline. O(references).
    fn compact(&mut self) {
        #[cfg(test)]
        {
            self.garbage.compactions += 1;
        }
        let arena = &self.arena;
        let mut kept = Kept::new(arena.slots());
        let mut keep = |r: Ref| arena.is_live(r.idx, r.check) && kept.first(r);
        let mut dropped = 0;
        for refs in [&mut self.ready, self.run.refs_mut()] {
            dropped += retain_kept(refs, &mut keep);
        }
        let armed: Vec<u32> = self.queue.buckets().collect();
        for bucket in armed {
            let refs = &mut self.buckets[bucket as usize];
            let (gone, earliest) = retain_kept_in(&mut self.pool, refs, self.now, &mut keep);
            dropped += gone;
            match earliest {
                Some((deadline, r)) => {
                    self.queue.rekey(bucket, deadline);
                    self.head.hold(bucket, r);
                }
                None => {
                    self.queue.disarm(bucket);
                }
            }
        }
        // A stale reference that reads as live has its timer's deadline
        // (see `reference`): keeping one reference per slot drops them,
        // else a slot reused at one deadline over and over (a clock that
        // does not move) would keep its stale references counted for ever,
        // and every later change would compact again.
        self.garbage.met(dropped);
    }
}
