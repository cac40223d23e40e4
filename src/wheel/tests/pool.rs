//! The pool: buckets' references in order across blocks, blocks given back
//! and reused.

use crate::wheel::pool::{blocks_for, Bucket, Pool, KEEP_REFS, MAX_BLOCK, MIN_BLOCK};
use crate::wheel::reference::Ref;

/// Pushes references 0 to `n` (exclusive) onto `b`.
fn fill(pool: &mut Pool, b: &mut Bucket, n: u32) {
    for i in 0..n {
        pool.push(b, r(i));
    }
}

fn r(i: u32) -> Ref {
    Ref { idx: i, check: i }
}

#[test]
fn a_bucket_keeps_its_references_in_order_across_blocks() {
    let mut pool = Pool::default();
    let mut b = Bucket::default();
    for i in 0..5_000 {
        pool.push(&mut b, r(i));
        pool.check([&b]);
    }
    assert_eq!(b.len(), 5_000);
    assert_eq!(b.blocks(), blocks_for(5_000));
    assert!(pool.refs(&b).map(|r| r.idx).eq(0..5_000));
    assert_eq!(pool.last(&b), Some(r(4_999)));
    // Less than one largest block beyond what the references need.
    assert!(
        pool.stored() - 5_000 < MAX_BLOCK,
        "{} stored",
        pool.stored()
    );
}

#[test]
fn blocks_given_back_are_reused_by_other_buckets() {
    let mut pool = Pool::default();
    let mut a = Bucket::default();
    let mut b = Bucket::default();
    fill(&mut pool, &mut a, 3_000);
    let stored = pool.stored();
    pool.release(&mut a);
    assert!(a.is_empty() && a.blocks() == 0);
    pool.check([&a, &b]);
    // Another bucket of the same size takes exactly the freed blocks.
    for i in 0..3_000 {
        pool.push(&mut b, r(10_000 + i));
    }
    assert_eq!(pool.stored(), stored, "no new block carved");
    pool.check([&a, &b]);
    assert!(pool.refs(&b).map(|r| r.idx).eq(10_000..13_000));
    // The emptied bucket fills again, now with new blocks.
    fill(&mut pool, &mut a, 100);
    pool.check([&a, &b]);
    assert!(pool.refs(&a).map(|r| r.idx).eq(0..100));
    assert!(pool.refs(&b).map(|r| r.idx).eq(10_000..13_000));
}

#[test]
fn buckets_growing_together_interleave_their_blocks() {
    let mut pool = Pool::default();
    let mut buckets: Vec<Bucket> = (0..7).map(|_| Bucket::default()).collect();
    for i in 0..20_000u32 {
        let b = (i as usize * 5 + i as usize / 3) % buckets.len();
        pool.push(&mut buckets[b], r(i));
    }
    pool.check(&buckets);
    let mut all: Vec<u32> = buckets
        .iter()
        .flat_map(|b| pool.refs(b).map(|r| r.idx))
        .collect();
    all.sort_unstable();
    assert!(all.into_iter().eq(0..20_000));
    for b in &buckets {
        let refs: Vec<u32> = pool.refs(b).map(|r| r.idx).collect();
        assert!(refs.windows(2).all(|p| p[0] < p[1]), "pushed order kept");
    }
}

#[test]
fn retain_compacts_in_order_and_gives_back_the_blocks_it_frees() {
    for len in [0usize, 1, 3, 4, 5, 100, 1_020, 1_021, 1_532, 1_533, 6_000] {
        for keep_every in [1usize, 2, 3, 7, 1_000_000] {
            let mut pool = Pool::default();
            let mut other = Bucket::default();
            let mut b = Bucket::default();
            for i in 0..len as u32 {
                pool.push(&mut b, r(i));
                pool.push(&mut other, r(i));
            }
            // Every `keep_every`-th survives: garbage in every block.
            pool.retain(&mut b, |r| (r.idx as usize).is_multiple_of(keep_every));
            pool.check([&b, &other]);
            let want: Vec<u32> = (0..len as u32)
                .filter(|i| (*i as usize).is_multiple_of(keep_every))
                .collect();
            let got: Vec<u32> = pool.refs(&b).map(|r| r.idx).collect();
            assert_eq!(got, want, "len {len} keep every {keep_every}");
            assert_eq!(b.blocks(), blocks_for(want.len()));
            // The bucket grows on from where it stands.
            pool.push(&mut b, r(u32::MAX - 1));
            pool.check([&b, &other]);
            assert_eq!(pool.last(&b), Some(r(u32::MAX - 1)));
            assert!(pool.refs(&other).map(|r| r.idx).eq(0..len as u32));
        }
    }
}

#[test]
fn retain_of_nothing_empties_the_bucket() {
    let mut pool = Pool::default();
    let mut b = Bucket::default();
    fill(&mut pool, &mut b, 2_000);
    pool.retain(&mut b, |_| false);
    assert!(b.is_empty() && b.blocks() == 0);
    assert_eq!(pool.last(&b), None);
    pool.check([&b]);
}

#[test]
fn pop_while_crosses_blocks_and_gives_them_back() {
    let mut pool = Pool::default();
    let mut b = Bucket::default();
    fill(&mut pool, &mut b, 1_600);
    // Pop down to 12 references (two full blocks): across every block
    // boundary from the 512-blocks down to the second block.
    assert_eq!(pool.pop_while(&mut b, |r| r.idx >= 12), 1_600 - 12);
    pool.check([&b]);
    assert_eq!(b.blocks(), 2);
    assert_eq!(pool.last(&b), Some(r(11)));
    assert_eq!(pool.pop_while(&mut b, |r| r.idx >= 11), 1);
    pool.check([&b]);
    assert_eq!(pool.pop_while(&mut b, |_| true), 11);
    assert!(b.is_empty() && b.blocks() == 0);
    pool.check([&b]);
    assert_eq!(pool.pop_while(&mut b, |_| true), 0);
    fill(&mut pool, &mut b, 30);
    pool.check([&b]);
    assert!(pool.refs(&b).map(|r| r.idx).eq(0..30));
}

#[test]
fn unload_hands_out_blocks_last_first_and_recycles_them() {
    let mut pool = Pool::default();
    let mut b = Bucket::default();
    let mut other = Bucket::default();
    fill(&mut pool, &mut b, 1_500);
    let stored = pool.stored();
    let mut out = Vec::new();
    let mut seen = Vec::new();
    let mut blocks = Vec::new();
    while pool.unload(&mut b, &mut out) {
        blocks.push(out.len());
        seen.extend(out.iter().map(|r| r.idx));
        // Refill another bucket meanwhile, as a cascade does.
        for &r in &out {
            pool.push(&mut other, r);
        }
        pool.check([&b, &other]);
    }
    assert_eq!(blocks, [480, 512, 256, 128, 64, 32, 16, 8, 4]);
    seen.sort_unstable();
    assert!(seen.into_iter().eq(0..1_500));
    assert!(b.is_empty() && b.blocks() == 0);
    assert_eq!(other.len(), 1_500);
    assert!(
        pool.stored() <= stored + MAX_BLOCK,
        "the unloaded blocks were reused: {} stored, {stored} before",
        pool.stored()
    );
    assert!(!pool.unload(&mut b, &mut out));
}

#[test]
fn a_cleared_pool_starts_afresh() {
    let mut pool = Pool::default();
    let mut b = Bucket::default();
    for i in 0..(2 * KEEP_REFS) as u32 {
        pool.push(&mut b, r(i));
    }
    pool.release(&mut b);
    pool.clear();
    assert_eq!(pool.stored(), 0);
    pool.check([&b]);
    pool.push(&mut b, r(1));
    pool.check([&b]);
    assert_eq!(pool.stored(), MIN_BLOCK);
}
