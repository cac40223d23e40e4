//! Bucket storage: every bucket's references in blocks of one pool.
//!
//! The pool is one `Vec<Ref>` that the wheel owns, cut into blocks. A bucket
//! is a short directory of its blocks, in order; all of them are full except
//! the last. Block `k` of a bucket holds `4·2^k` references, up to
//! [`MAX_BLOCK`] (512, 4 KiB); every block after that holds 512:
//!
//! | block of the bucket | 0 | 1 | 2  | … | 7   | 8, 9, …  |
//! |---------------------|---|---|----|---|-----|----------|
//! | references          | 4 | 8 | 16 | … | 512 | 512 each |
//!
//! so a bucket of a few timers costs a few dozen bytes and a large one wastes
//! less than one block. A bucket that is flushed, compacted or emptied gives
//! its blocks back to a free list per size; the next bucket to grow takes
//! them, last freed first. A free block's first reference links the next
//! free block of its size, so the free lists cost nothing.
//!
//! **Why not a `Vec` per bucket** (W3, `docs/design.md`): a vector grows by
//! doubling, and every move hands the old buffer back to the allocator.
//! glibc keeps freed chunks below its mmap threshold resident in the middle
//! of the heap: 0.2 bytes per timer at 10M pending, when the 64 second-level
//! buckets of W3 move from 64 KiB chunks to their own mappings, plus a part
//! page per bucket mapping. Here nothing goes back to the allocator while the
//! wheel holds a reference; the pool's own vector, once past the threshold,
//! grows by remapping, which leaves nothing behind. The cost is the unfilled
//! rest of each bucket's last block and 4 bytes per block in the directory.
//!
//! [`Pool::clear`] gives a large pool back once the wheel holds no
//! reference; the wheel [rebuilds](Pool::rebuild) it smaller while it holds
//! some, once the store is more than 16 times what its references need
//! (a burst fired, a few timers still pending).

use std::ops::Range;

use super::reference::{Ref, NO_REF};

/// References in the smallest block. Every block size is a multiple of it,
/// so a block's address is its first reference's index divided by it.
pub(super) const MIN_BLOCK: usize = 4;

/// The largest size class: blocks of `MIN_BLOCK << MAX_CLASS` references.
const MAX_CLASS: usize = 7;

/// References in the largest block (512: 4 KiB).
pub(super) const MAX_BLOCK: usize = MIN_BLOCK << MAX_CLASS;

/// References the first `MAX_CLASS + 1` blocks of a bucket hold, one of
/// each size.
const GROWING: usize = MIN_BLOCK * ((1 << (MAX_CLASS + 1)) - 1);

/// An empty pool with more references than this gives its memory back
/// ([`Pool::clear`]); a smaller one keeps it for the next burst.
pub(super) const KEEP_REFS: usize = 1 << 14;

/// The end of a free list.
const NONE: u32 = u32::MAX;

/// The size class of block `k` of a bucket.
#[inline]
fn class(k: usize) -> usize {
    k.min(MAX_CLASS)
}

/// References in block `k` of a bucket.
#[inline]
fn block_size(k: usize) -> usize {
    MIN_BLOCK << class(k)
}

/// References the first `blocks` blocks of a bucket hold.
#[inline]
fn capacity(blocks: usize) -> usize {
    if blocks <= MAX_CLASS + 1 {
        MIN_BLOCK * ((1 << blocks) - 1)
    } else {
        GROWING + MAX_BLOCK * (blocks - MAX_CLASS - 1)
    }
}

/// The fewest blocks a bucket of `len` references needs.
#[inline]
pub(super) fn blocks_for(len: usize) -> usize {
    if len <= GROWING {
        // The least n with 4·(2^n − 1) ≥ len: the bit length of ⌈len/4⌉.
        (usize::BITS - len.div_ceil(MIN_BLOCK).leading_zeros()) as usize
    } else {
        MAX_CLASS + 1 + (len - GROWING).div_ceil(MAX_BLOCK)
    }
}

/// One bucket's references: a directory of blocks in a [`Pool`].
#[derive(Debug, Default)]
pub(super) struct Bucket {
    /// Its blocks' addresses (first index / [`MIN_BLOCK`]), in order.
    blocks: Vec<u32>,
    /// Pool index of the next reference pushed, in the last block.
    at: usize,
    /// Pool index just past the last block.
    end: usize,
}

impl Bucket {
    /// References held, live or garbage.
    #[inline]
    pub(super) fn len(&self) -> usize {
        match self.blocks.len().checked_sub(1) {
            Some(last) => capacity(last) + self.at - self.blocks[last] as usize * MIN_BLOCK,
            None => 0,
        }
    }

    /// Whether it holds no reference.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Number of blocks it holds.
    #[inline]
    pub(super) fn blocks(&self) -> usize {
        self.blocks.len()
    }
}

/// Blocks of references for every bucket of one wheel.
#[derive(Debug)]
pub(super) struct Pool {
    /// Every block, back to back. A free block's first reference holds the
    /// address of the next free block of its size in `idx`.
    store: Vec<Ref>,
    /// Per size class, the address of the first free block, or [`NONE`].
    free: [u32; MAX_CLASS + 1],
}

impl Default for Pool {
    fn default() -> Self {
        Pool {
            store: Vec::new(),
            free: [NONE; MAX_CLASS + 1],
        }
    }
}

impl Pool {
    /// Appends `r` to `bucket`.
    #[inline]
    pub(super) fn push(&mut self, bucket: &mut Bucket, r: Ref) {
        if bucket.at == bucket.end {
            self.grow(bucket);
        }
        self.store[bucket.at] = r;
        bucket.at += 1;
    }

    /// Gives a full (or blockless) `bucket` its next block.
    #[inline(never)]
    fn grow(&mut self, bucket: &mut Bucket) {
        let k = bucket.blocks.len();
        let addr = self.take_block(class(k));
        bucket.blocks.push(addr);
        bucket.at = addr as usize * MIN_BLOCK;
        bucket.end = bucket.at + block_size(k);
    }

    /// A block of size class `class`: the last one freed, or a new one at
    /// the end of the store.
    ///
    /// # Panics
    ///
    /// If the store would pass 2^34 references (128 GiB), whose addresses
    /// no longer fit a `u32`.
    fn take_block(&mut self, class: usize) -> u32 {
        let addr = self.free[class];
        if addr != NONE {
            self.free[class] = self.store[addr as usize * MIN_BLOCK].idx;
            return addr;
        }
        let start = self.store.len();
        let addr = u32::try_from(start / MIN_BLOCK)
            .ok()
            .filter(|&a| a != NONE)
            .expect("more than 2^34 references in one wheel's buckets");
        self.store.resize(start + (MIN_BLOCK << class), NO_REF);
        addr
    }

    /// Puts block `addr` of size class `class` on its free list.
    #[inline]
    fn free_block(&mut self, addr: u32, class: usize) {
        self.store[addr as usize * MIN_BLOCK] = Ref {
            idx: self.free[class],
            check: 0,
        };
        self.free[class] = addr;
    }

    /// The pool indices of block `k` of `bucket` that hold references.
    #[inline]
    fn span(&self, bucket: &Bucket, k: usize) -> Range<usize> {
        let start = bucket.blocks[k] as usize * MIN_BLOCK;
        if k + 1 == bucket.blocks.len() {
            start..bucket.at
        } else {
            start..start + block_size(k)
        }
    }

    /// The references of block `k` of `bucket`.
    #[inline]
    pub(super) fn block(&self, bucket: &Bucket, k: usize) -> &[Ref] {
        &self.store[self.span(bucket, k)]
    }

    /// The references of `bucket`, in the order they were pushed (tests
    /// only).
    #[cfg(test)]
    pub(super) fn refs<'a>(&'a self, bucket: &'a Bucket) -> impl Iterator<Item = Ref> + 'a {
        (0..bucket.blocks.len()).flat_map(move |k| self.block(bucket, k).iter().copied())
    }

    /// The last reference of `bucket`.
    #[inline]
    pub(super) fn last(&self, bucket: &Bucket) -> Option<Ref> {
        (!bucket.is_empty()).then(|| self.store[bucket.at - 1])
    }

    /// Moves the references of the last block of `bucket` into `out`
    /// (replacing what it held) and gives the block back; `false` when the
    /// bucket is empty. Unloading a bucket block by block hands each block
    /// to the next bucket that grows while the rest is still being read.
    #[inline]
    pub(super) fn unload(&mut self, bucket: &mut Bucket, out: &mut Vec<Ref>) -> bool {
        let Some(k) = bucket.blocks.len().checked_sub(1) else {
            return false;
        };
        out.clear();
        out.extend_from_slice(self.block(bucket, k));
        self.shrink(bucket, k);
        true
    }

    /// Removes the last references of `bucket` while `dead` says so;
    /// returns how many it removed. Blocks it empties go back to the pool.
    pub(super) fn pop_while(&mut self, bucket: &mut Bucket, dead: impl Fn(Ref) -> bool) -> usize {
        let mut popped = 0;
        while !bucket.is_empty() && dead(self.store[bucket.at - 1]) {
            popped += 1;
            bucket.at -= 1;
            let k = bucket.blocks.len() - 1;
            if bucket.at == bucket.blocks[k] as usize * MIN_BLOCK {
                // The last block is empty; the one before it is full.
                self.shrink(bucket, k);
            }
        }
        popped
    }

    /// Keeps the references of `bucket` that `keep` accepts, in order, and
    /// gives the blocks no longer needed back to the pool.
    ///
    /// Branch-free on `keep`: every reference is written and the write
    /// position moves only past kept ones, so the lookups `keep` makes for
    /// successive references overlap instead of waiting on a mispredicted
    /// branch each.
    pub(super) fn retain(&mut self, bucket: &mut Bucket, mut keep: impl FnMut(Ref) -> bool) {
        let blocks = bucket.blocks.len();
        if blocks == 0 {
            return;
        }
        // The write cursor: block `wk`, pool index `w` in it, and where it
        // moves to the next block (never, in the last block: the cursor
        // trails the read one, which stops at the end of the bucket).
        let end_of = |wk: usize, w: usize| {
            if wk + 1 < blocks {
                w + block_size(wk)
            } else {
                usize::MAX
            }
        };
        let mut wk = 0;
        let mut w = bucket.blocks[0] as usize * MIN_BLOCK;
        let mut wend = end_of(0, w);
        let mut kept = 0;
        for k in 0..blocks {
            for at in self.span(bucket, k) {
                let r = self.store[at];
                self.store[w] = r;
                let keeps = keep(r);
                kept += usize::from(keeps);
                w += usize::from(keeps);
                if w == wend {
                    // The next block was read already, or is being read.
                    wk += 1;
                    w = bucket.blocks[wk] as usize * MIN_BLOCK;
                    wend = end_of(wk, w);
                }
            }
        }
        let need = blocks_for(kept);
        self.truncate_blocks(bucket, need);
        match need.checked_sub(1) {
            Some(last) => {
                let start = bucket.blocks[last] as usize * MIN_BLOCK;
                bucket.at = start + kept - capacity(last);
                bucket.end = start + block_size(last);
            }
            None => {
                bucket.at = 0;
                bucket.end = 0;
            }
        }
    }

    /// Empties `bucket` and gives all its blocks back; it keeps its
    /// directory's memory for the next fill.
    pub(super) fn release(&mut self, bucket: &mut Bucket) {
        self.truncate_blocks(bucket, 0);
        bucket.at = 0;
        bucket.end = 0;
    }

    /// Gives back every block of `bucket` from the `keep`-th on.
    fn truncate_blocks(&mut self, bucket: &mut Bucket, keep: usize) {
        for k in keep..bucket.blocks.len() {
            self.free_block(bucket.blocks[k], class(k));
        }
        bucket.blocks.truncate(keep);
    }

    /// Gives back the last block `k` of `bucket`, emptied; the block before
    /// it (full) becomes the last.
    fn shrink(&mut self, bucket: &mut Bucket, k: usize) {
        self.truncate_blocks(bucket, k);
        match k.checked_sub(1) {
            Some(prev) => {
                let start = bucket.blocks[prev] as usize * MIN_BLOCK;
                bucket.end = start + block_size(prev);
                bucket.at = bucket.end;
            }
            None => {
                bucket.at = 0;
                bucket.end = 0;
            }
        }
    }

    /// Forgets every block. Every bucket must have been
    /// [released](Self::release) first. A large pool gives its memory back:
    /// the old pool, for the caller to free (or drop).
    pub(super) fn clear(&mut self) -> Option<Pool> {
        if self.store.len() > KEEP_REFS {
            return Some(std::mem::take(self));
        }
        self.store.clear();
        self.free = [NONE; MAX_CLASS + 1];
        None
    }

    /// References the store has room for, in use or free.
    #[inline]
    pub(super) fn stored(&self) -> usize {
        self.store.len()
    }

    /// Moves the references of `buckets` (every bucket of the wheel) into a
    /// store of their own size, in the same order, and gives the old store
    /// back, for the caller to free (or drop): for a pool whose store is
    /// mostly free blocks after a burst fired, while a few timers are still
    /// pending. O(references + buckets).
    pub(super) fn rebuild<'a>(
        &mut self,
        buckets: impl IntoIterator<Item = &'a mut Bucket>,
    ) -> Pool {
        let mut fresh = Pool::default();
        let mut refs = Vec::new();
        for bucket in buckets {
            if bucket.is_empty() {
                continue;
            }
            refs.clear();
            for k in 0..bucket.blocks() {
                refs.extend_from_slice(self.block(bucket, k));
            }
            let mut moved = Bucket::default();
            for &r in &refs {
                fresh.push(&mut moved, r);
            }
            *bucket = moved;
        }
        std::mem::replace(self, fresh)
    }

    /// Checks the pool against its buckets (tests only): every block of the
    /// store is in exactly one bucket or one free list of its size, and every
    /// bucket's counts match its blocks.
    #[cfg(test)]
    pub(super) fn check<'a>(&self, buckets: impl IntoIterator<Item = &'a Bucket>) {
        // Pool index → size of the block starting there, once.
        let mut owned: std::collections::BTreeMap<usize, usize> = Default::default();
        let mut claim = |start: usize, size: usize, what: &str| {
            assert!(
                owned.insert(start, size).is_none(),
                "block at {start} claimed twice ({what})"
            );
        };
        for b in buckets {
            let len = b.len();
            assert_eq!(b.blocks.len(), blocks_for(len), "blocks for {len}");
            for (k, &addr) in b.blocks.iter().enumerate() {
                claim(addr as usize * MIN_BLOCK, block_size(k), "bucket");
            }
            if let Some(&addr) = b.blocks.last() {
                let k = b.blocks.len() - 1;
                let start = addr as usize * MIN_BLOCK;
                assert_eq!(b.end, start + block_size(k), "end of the last block");
                assert!(b.at > start, "an empty last block is given back");
                assert!(b.at <= b.end, "the last block overflows");
            } else {
                assert_eq!((b.at, b.end), (0, 0), "a blockless bucket");
            }
        }
        for (class, &head) in self.free.iter().enumerate() {
            let mut addr = head;
            while addr != NONE {
                let start = addr as usize * MIN_BLOCK;
                claim(start, MIN_BLOCK << class, "free");
                addr = self.store[start].idx;
            }
        }
        // The blocks tile the store exactly.
        let mut next = 0;
        for (&start, &size) in &owned {
            assert_eq!(start, next, "a gap or an overlap at {start}");
            next = start + size;
        }
        assert_eq!(next, self.store.len(), "blocks cover the store");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_and_blocks_for_agree_with_the_block_table() {
        let mut total = 0;
        for k in 0..40 {
            assert_eq!(capacity(k), total, "{k} blocks");
            let size = block_size(k);
            assert_eq!(size, (4usize << k).min(512), "block {k}");
            for len in [total + 1, total + size / 2, total + size] {
                assert_eq!(blocks_for(len), k + 1, "{len} references");
            }
            total += size;
        }
        assert_eq!(blocks_for(0), 0);
        assert_eq!(capacity(MAX_CLASS + 1), GROWING);
    }
}
