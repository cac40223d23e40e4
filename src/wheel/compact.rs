//! Garbage and compaction: dead references counted, and dropped in bulk.
//!
//! Cancelling or moving a timer leaves its reference where it is, dead (its
//! slot no longer carries its check): O(1), no bucket touched. Dead
//! references are dropped when met (a flush, the head's settling), and the
//! [`Garbage`] count says how many wait. When they outnumber the live timers
//! by [`GARBAGE_SLACK`], a compaction drops them all and re-keys every
//! bucket: O(references), amortised O(1) per cancel. When the last live
//! timer goes, every reference is dropped at once instead (the wheel's
//! `empty_out`, [`freed`](super::freed)).

use super::arena::Arena;
use super::bucket_queue::BucketQueue;
use super::head::Head;
use super::pool::{Bucket, Pool};
use super::reference::{Ref, SIDE};
use super::side::Side;

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

    /// Whether the dead references outnumber the `live` timers by more
    /// than [`GARBAGE_SLACK`]: time to [`compact`].
    #[inline]
    pub(super) fn outnumbers(&self, live: usize) -> bool {
        self.count > live + GARBAGE_SLACK
    }

    /// Counts the reference or side entry that carried `check` as garbage:
    /// its timer (in `arena`) was cancelled or moved. The `side` heap
    /// counts its own, and drops them when they outnumber its live ones.
    #[inline]
    pub(super) fn forget<T>(&mut self, check: u32, side: &mut Side, arena: &Arena<T>) {
        if check & SIDE == 0 {
            self.count += 1;
        } else {
            side.release(check);
            side.collect_garbage(|idx, check| arena.is_live(idx, check));
        }
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

    /// A compaction dropped `n` dead references.
    #[inline]
    pub(super) fn compacted(&mut self, n: usize) {
        #[cfg(test)]
        {
            self.compactions += 1;
        }
        self.met(n);
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

/// Removes every dead reference (of `arena`'s timers), and every
/// duplicate of a live one, from the ready list and the run (`lists`) and
/// from every armed bucket of `queue`, and re-keys each bucket to its
/// earliest live deadline at wheel time `now` (its holder in `head`);
/// returns how many references it dropped. O(references).
pub(super) fn compact<T>(
    arena: &Arena<T>,
    lists: [&mut Vec<Ref>; 2],
    queue: &mut BucketQueue,
    buckets: &mut [Bucket],
    pool: &mut Pool,
    head: &mut Head,
    now: u64,
) -> usize {
    // A stale reference that reads as live has its timer's deadline
    // (see `reference`): keeping one reference per slot drops them,
    // else a slot reused at one deadline over and over (a clock that
    // does not move) would keep its stale references counted for ever,
    // and every later change would compact again.
    let mut kept = Kept::new(arena.slots());
    let mut keep = |r: Ref| arena.is_live(r.idx, r.check) && kept.first(r);
    let mut dropped = 0;
    for refs in lists {
        dropped += retain_kept(refs, &mut keep);
    }
    let armed: Vec<u32> = queue.buckets().collect();
    for bucket in armed {
        let refs = &mut buckets[bucket as usize];
        dropped += head.rekey(queue, pool, refs, bucket, now, &mut keep);
    }
    dropped
}
