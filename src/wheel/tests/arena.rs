//! The arena: generations that make stale keys miss, slots reused and
//! given back.

use crate::wheel::arena::{Arena, KEEP_SLOTS};

#[test]
fn reuse_changes_generation_and_kills_the_old_reference() {
    let mut a = Arena::new();
    let (i, g) = a.insert("a", 40);
    assert!(a.contains(i, g) && a.is_live(i, 40) && !a.is_live(i, 41));
    assert_eq!(a.remove(i, g), Some(("a", 40)));
    assert_eq!(a.remove(i, g), None, "double remove");
    assert!(!a.is_live(i, 40), "a vacant slot has no live reference");
    let (j, g2) = a.insert("b", 41);
    assert_eq!(i, j, "slot reused at once");
    assert_ne!(g, g2);
    assert!(
        !a.contains(i, g) && !a.is_live(i, 40),
        "stale handle misses"
    );
    assert_eq!(a.len(), 1);
}

#[test]
fn recheck_keeps_generation_but_kills_old_reference() {
    let mut a = Arena::new();
    let (i, g) = a.insert(7u64, 10);
    assert_eq!(a.recheck(i, g, 20), Some(10));
    assert!(!a.is_live(i, 10) && a.is_live(i, 20) && a.contains(i, g));
    assert_eq!(a.remove_live(i, 10), None);
    assert_eq!(a.remove_live(i, 20), Some((7, g)));
    assert_eq!(a.recheck(i, g, 30), None);
}

#[test]
fn an_empty_large_arena_gives_its_memory_back_and_old_keys_match_nothing_after() {
    let mut a = Arena::new();
    let keys: Vec<_> = (0..2 * KEEP_SLOTS as u64).map(|v| a.insert(v, 0)).collect();
    for &(i, g) in &keys[1..] {
        a.remove(i, g);
    }
    a.release();
    assert_eq!(a.slots(), 2 * KEEP_SLOTS, "not empty: kept");
    a.remove(keys[0].0, keys[0].1);
    a.release();
    assert_eq!(a.slots(), 0, "empty and large: released");
    let (i, g) = a.insert(99, 0);
    assert_eq!(i, 0, "the first slot starts afresh");
    assert!(
        keys.iter().all(|&(_, old)| old < g),
        "a new slot's generation is past every old key's"
    );
    assert!(keys.iter().all(|&(i, old)| !a.contains(i, old)));
    assert_eq!(a.remove(keys[0].0, keys[0].1), None, "an old key matched");
    assert_eq!(a.remove(i, g), Some((99, 0)));
}

#[test]
fn generations_after_a_release_near_the_wrap_match_no_old_key() {
    let mut a = Arena::new();
    a.start_generations_at(u32::MAX - 2);
    let keys: Vec<_> = (0..2 * KEEP_SLOTS as u64).map(|v| a.insert(v, 0)).collect();
    // Slot 0 goes round past the wrap: MAX − 2, MAX − 1, MAX, 1, 2.
    let (i, mut g) = keys[0];
    let mut old = vec![(i, g)];
    for v in 0..4 {
        a.remove(i, g);
        g = a.insert(v, 0).1;
        old.push((i, g));
    }
    assert_eq!(g.get(), 2);
    a.remove(i, g);
    for &(i, g) in &keys[1..] {
        a.remove(i, g);
    }
    a.release();
    assert_eq!(a.slots(), 0);
    // Two release cycles: none of the old keys ever matches.
    for _ in 0..2 {
        let new: Vec<_> = (0..2 * KEEP_SLOTS as u64).map(|v| a.insert(v, 0)).collect();
        for &(i, g) in keys.iter().chain(&old) {
            assert!(!a.contains(i, g), "old key ({i}, {g}) matches");
        }
        for &(i, g) in &new {
            a.remove(i, g);
        }
        a.release();
    }
}

#[test]
fn drain_returns_everything_and_empties() {
    let mut a = Arena::new();
    let keys: Vec<_> = (0..10).map(|v| a.insert(v, 0)).collect();
    a.remove(keys[3].0, keys[3].1);
    assert_eq!(a.drain(), vec![0, 1, 2, 4, 5, 6, 7, 8, 9]);
    assert_eq!(a.len(), 0);
    assert!(keys.iter().all(|&(i, g)| !a.contains(i, g)));
}
