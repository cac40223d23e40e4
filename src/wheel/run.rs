//! The sorted run: a sparse second-level bucket, handed out in order.
//!
//! When a second-level bucket is flushed, what is not due yet would all land
//! in the finest level, one or two references per bucket there, and arming
//! and popping a bucket per reference costs more than sorting them once. So
//! a sparse one ([`RUN_PER_TICK`]) of a small wheel ([`RUN_MAX_WHEEL`])
//! becomes the run instead: its references sorted latest first, handed out
//! from the back, merged by deadline with the bucket queue and the side heap.
//! Its deadlines all lie in the finest level's window, so a counting sort by
//! tick sorts it without a compare.

use super::reference::{self, Ref, NO_REF};

/// A flushed second-level bucket becomes the run, rather than being filed
/// into the finest level, when the wheel has at most this many slots (the
/// run is sorted by counting, one count per tick)...
pub(super) const RUN_MAX_WHEEL: usize = 256;

/// ...and the bucket holds at most this many references per tick of its
/// width. Sparser, finest-level buckets would hold a few references each,
/// and arming and popping one per reference costs more than counting them.
/// Denser, a finest-level bucket's flush reads its references' slots in one
/// tight loop, whose cache misses overlap; handed out one by one from a run
/// they do not (`docs/design.md`, W2).
pub(super) const RUN_PER_TICK: usize = 16;

/// The references of a flushed sparse second-level bucket that were not yet
/// due, sorted latest first.
#[derive(Debug, Default)]
pub(super) struct Run {
    /// The run, latest deadline first.
    refs: Vec<Ref>,
    /// A spare vector for sorting the run.
    scratch: Vec<Ref>,
}

impl Run {
    /// Whether a flushed `bucket` holding `len` references, of a wheel of
    /// `wheel_size` slots per level, becomes the run: the run is empty, and
    /// the bucket is a sparse one of the second level of a small wheel.
    #[inline]
    pub(super) fn takes(&self, wheel_size: usize, bucket: usize, len: usize) -> bool {
        self.refs.is_empty()
            && wheel_size <= RUN_MAX_WHEEL
            && (wheel_size..2 * wheel_size).contains(&bucket)
            && len <= RUN_PER_TICK * wheel_size
    }

    /// Adds `r` to the run being filled (sorted by [`sort`](Self::sort)).
    #[inline]
    pub(super) fn push(&mut self, r: Ref) {
        self.refs.push(r);
    }

    /// The earliest reference of the run.
    #[inline]
    pub(super) fn last(&self) -> Option<Ref> {
        self.refs.last().copied()
    }

    /// Drops the earliest reference of the run.
    #[inline]
    pub(super) fn pop(&mut self) {
        self.refs.pop();
    }

    /// The references, latest first, for a removal that drops dead ones.
    #[inline]
    pub(super) fn refs_mut(&mut self) -> &mut Vec<Ref> {
        &mut self.refs
    }

    /// The references, latest first.
    #[cfg(test)]
    pub(super) fn refs(&self) -> &[Ref] {
        &self.refs
    }

    /// Drops every reference.
    pub(super) fn clear(&mut self) {
        self.refs.clear();
    }

    /// Sorts the run latest first, at wheel time `now`, when the finest
    /// level's window ends at `last` and spans `wheel_size` ticks (at most
    /// [`RUN_MAX_WHEEL`]): a counting sort by tick does it without a compare
    /// (a comparison sort of random deadlines mispredicts about one branch
    /// per reference).
    pub(super) fn sort(&mut self, now: u64, last: u64, wheel_size: usize) {
        if self.refs.len() < 8 {
            self.refs
                .sort_unstable_by_key(|r| std::cmp::Reverse(r.deadline(now)));
            return;
        }
        // A reference's place counted from the level's last tick, latest
        // first: `last − deadline`, from the checks alone (both are in the
        // near window, and the run spans at most `wheel_size` ticks).
        let from_last = |r: &Ref| ((last as u32).wrapping_sub(r.check) & reference::LOW) as usize;
        let mut counts = [0u32; RUN_MAX_WHEEL + 1];
        for r in &self.refs {
            debug_assert_eq!(from_last(r) as u64, last - r.deadline(now));
            debug_assert!(from_last(r) < wheel_size);
            counts[from_last(r) + 1] += 1;
        }
        for at in 1..=wheel_size {
            counts[at] += counts[at - 1];
        }
        let mut sorted = std::mem::take(&mut self.scratch);
        sorted.clear();
        sorted.resize(self.refs.len(), NO_REF);
        for &r in &self.refs {
            let at = &mut counts[from_last(&r)];
            sorted[*at as usize] = r;
            *at += 1;
        }
        self.scratch = std::mem::replace(&mut self.refs, sorted);
    }
}
