//! The side heap: live entries in deadline order, garbage bounded.

use std::collections::HashMap;

use crate::wheel::side::{Side, GARBAGE_SLACK};

#[test]
fn serves_live_entries_in_deadline_order_and_skips_cancelled_ones() {
    // slot → the check it carries (an arena stand-in).
    let mut slots: HashMap<u32, u32> = HashMap::new();
    let mut side = Side::default();
    for (idx, deadline) in [(0u32, 50u64), (1, 10), (2, 30), (3, 10)] {
        let check = side.reserve(deadline);
        slots.insert(idx, check);
        side.push(idx, check, deadline);
    }
    // Cancel slot 1; move slot 2 to 5 (its slab index is reused).
    side.release(slots.remove(&1).unwrap());
    let old = slots[&2];
    side.release(old);
    let check = side.reserve(5);
    assert_eq!(check, old, "the freed index is reused at once");
    slots.insert(2, check);
    side.push(2, check, 5);
    side.check(|i, c| slots.get(&i) == Some(&c));
    let mut out = Vec::new();
    while let Some(e) = side.first(|i, c| slots.get(&i) == Some(&c)) {
        side.pop_first();
        slots.remove(&e.idx);
        out.push((e.deadline, e.idx));
    }
    assert_eq!(out, [(5, 2), (10, 3), (50, 0)]);
    assert_eq!(side.len(), 0);
    side.check(|i, c| slots.get(&i) == Some(&c));
}

#[test]
fn garbage_is_compacted_by_count() {
    let mut side = Side::default();
    let keep = side.reserve(u64::MAX);
    side.push(0, keep, u64::MAX);
    for i in 0..10_000u64 {
        let check = side.reserve(1_000 + i);
        side.push(1, check, 1_000 + i);
        side.release(check);
        side.collect_garbage(|i, c| i == 0 && c == keep);
        assert!(side.garbage() <= side.len() + GARBAGE_SLACK);
    }
    side.check(|i, c| i == 0 && c == keep);
    assert!(side.heap_len() <= 2 + GARBAGE_SLACK);
    assert_eq!(
        side.first(|i, c| i == 0 && c == keep).map(|e| e.idx),
        Some(0)
    );
}
