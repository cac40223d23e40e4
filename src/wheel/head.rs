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
use super::bucket_queue::BucketQueue;
use super::pool::{Bucket, Pool};
use super::reference::{Ref, NO_REF};

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
    /// The finest level's buckets (bucket ids below it are level 0's).
    finest: usize,
}

impl Default for Head {
    fn default() -> Self {
        Head {
            holders: Vec::new(),
            settled: true,
            finest: 0,
        }
    }
}

impl Head {
    /// Makes room for holders of `buckets` buckets in all (the first call:
    /// the finest level's).
    pub(super) fn add_buckets(&mut self, buckets: usize) {
        if self.finest == 0 {
            self.finest = buckets;
        }
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
    #[inline]
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
    pub(super) fn mark_settled(&mut self) {
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

/// Keeps the references of `bucket` that `keep` accepts; returns how many
/// it dropped, and the earliest kept one with its deadline at wheel time
/// `now`.
fn retain_kept_in(
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

impl Head {
    /// Makes the head live again after its timer died, so that the wheel's
    /// next expiration does not ask for a wake-up with nothing due: pops
    /// the dead references (of `arena`'s timers) off the top of the ready
    /// list and the run (`lists`), and settles the head bucket of `queue`
    /// (`buckets` in `pool`, at wheel time `now`); returns how many dead
    /// references it dropped. Amortised O(1): dead references met here are
    /// dropped for good, and a rescan is bounded by [`RESCAN_LIMIT`].
    pub(super) fn settle<T>(
        &mut self,
        arena: &Arena<T>,
        lists: [&mut Vec<Ref>; 2],
        queue: &mut BucketQueue,
        buckets: &mut [Bucket],
        pool: &mut Pool,
        now: u64,
    ) -> usize {
        self.settled = true;
        let mut dropped = 0;
        for refs in lists {
            dropped += pop_dead(arena, refs);
        }
        while let Some((_, bucket)) = queue.peek() {
            let b = bucket as usize;
            let holder = self.holders[b];
            if arena.is_live(holder.idx, holder.check) {
                break;
            }
            let refs = &mut buckets[b];
            if b < self.finest {
                // Level 0: every reference has the key as its deadline, so
                // any live one makes the key exact.
                dropped += pool.pop_while(refs, |r| !arena.is_live(r.idx, r.check));
                match pool.last(refs) {
                    Some(live) => {
                        self.holders[b] = live;
                        break;
                    }
                    None => {
                        queue.disarm(bucket);
                    }
                }
            } else if refs.len() <= RESCAN_LIMIT {
                let live = |r: Ref| arena.is_live(r.idx, r.check);
                dropped += self.rekey(queue, pool, refs, bucket, now, live);
            } else {
                break;
            }
        }
        dropped
    }

    /// Keeps the references of armed `bucket` (`refs`, in `pool`) that
    /// `keep` accepts, and re-keys the bucket in `queue` to the earliest
    /// kept one at wheel time `now`, its holder now, or disarms it if none
    /// is kept; returns how many references it dropped.
    pub(super) fn rekey(
        &mut self,
        queue: &mut BucketQueue,
        pool: &mut Pool,
        refs: &mut Bucket,
        bucket: u32,
        now: u64,
        keep: impl FnMut(Ref) -> bool,
    ) -> usize {
        let (dropped, earliest) = retain_kept_in(pool, refs, now, keep);
        match earliest {
            Some((deadline, r)) => {
                queue.rekey(bucket, deadline);
                self.hold(bucket, r);
            }
            None => {
                queue.disarm(bucket);
            }
        }
        dropped
    }
}
