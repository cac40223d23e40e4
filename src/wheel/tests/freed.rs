//! Freed memory: what an emptied wheel or a trimmed pool gives back, kept
//! for the owner when the wheel keeps what it frees, and what a small wheel
//! keeps.

use super::*;

#[test]
fn an_emptied_wheel_gives_its_arena_back_and_keeps_working() {
    let mut w = Wheel::new(64, 0);
    let keys: Vec<_> = (0..10_000u64).map(|i| w.insert(1 + i % 500, i)).collect();
    for &k in &keys[..5_000] {
        assert!(w.remove(k).is_some());
    }
    let fired = std::iter::from_fn(|| w.poll(1_000)).count();
    assert_eq!(fired, 5_000);
    assert_eq!(w.arena.slots(), 0, "released once empty");
    w.check_invariants();
    let k = w.insert(1_010, 7);
    assert!(
        keys.iter().all(|&old| !w.contains(old)),
        "old keys stay stale"
    );
    assert!(keys.iter().all(|&old| w.remove(old).is_none()));
    assert!(w.contains(k));
    assert_eq!(w.poll(1_010).map(|f| f.value), Some(7));
    w.check_invariants();
}

#[test]
fn an_emptied_wheel_gives_its_pool_back() {
    let mut w = Wheel::new(64, 0);
    let n = 2 * KEEP_REFS as u64;
    for i in 0..n {
        w.insert(1 + i % 5_000, i);
    }
    assert!(w.pool.stored() >= n as usize);
    assert_eq!(std::iter::from_fn(|| w.poll(5_000)).count(), n as usize);
    assert_eq!(w.pool.stored(), 0, "the pool kept its references' memory");
    w.check_invariants();
    w.insert(6_000, 7);
    assert_eq!(w.poll(6_000).map(|f| f.value), Some(7));
    w.check_invariants();
}

/// A wheel of 64 slots per level that keeps what it frees for its owner
/// if `keeps`.
fn keeping(keeps: bool) -> Wheel<u64> {
    let mut w = Wheel::new(64, 0);
    if keeps {
        w.keep_freed();
    }
    w
}

#[test]
fn what_polls_free_is_kept_for_the_owner() {
    for keeps in [false, true] {
        let mut w = keeping(keeps);
        let far = w.insert(10_000_000, u64::MAX);
        let n = 20 * KEEP_REFS as u64;
        for i in 0..n {
            w.insert(1 + i % 100_000, i);
        }
        // A burst fired while a timer waits: the pool is rebuilt.
        assert_eq!(std::iter::from_fn(|| w.poll(100_000)).count(), n as usize);
        let rebuilt = w.take_freed();
        assert_eq!(rebuilt.is_some(), keeps, "keeps {keeps}");
        if let Some(freed) = rebuilt {
            assert!(freed.pool.is_some() && freed.slots.is_none());
        }
        // The last timer fired: the arena and the pool give their memory back.
        assert_eq!(w.poll(10_000_000).map(|f| f.key), Some(far));
        assert!(w.poll(10_000_000).is_none());
        assert_eq!(w.arena.slots(), 0);
        let emptied = w.take_freed();
        assert_eq!(emptied.is_some(), keeps, "keeps {keeps}");
        if let Some(freed) = emptied {
            assert!(
                freed.slots.is_some(),
                "the arena's slots wait for the owner"
            );
        }
        assert!(w.take_freed().is_none(), "taken once");
        w.check_invariants();
        w.insert(10_000_001, 7);
        assert_eq!(w.poll(10_000_001).map(|f| f.value), Some(7));
    }
}

#[test]
fn what_removing_the_last_timer_frees_is_kept_for_the_owner() {
    for keeps in [false, true] {
        let mut w = keeping(keeps);
        // Twice the store an empty wheel keeps: both the arena and the
        // pool have memory to give back.
        let n = 2 * KEEP_REFS as u64;
        let keys: Vec<_> = (0..n).map(|i| w.insert(1 + i % 5_000, i)).collect();
        for (i, key) in keys.into_iter().enumerate() {
            assert_eq!(w.remove(key), Some(i as u64));
        }
        assert_eq!(w.len(), 0);
        assert_eq!(w.arena.slots(), 0, "the emptied arena was released");
        let emptied = w.take_freed();
        assert_eq!(emptied.is_some(), keeps, "keeps {keeps}");
        if let Some(freed) = emptied {
            assert!(
                freed.slots.is_some() && freed.pool.is_some(),
                "the arena's slots and the pool's store wait for the owner"
            );
        }
        w.check_invariants();
        w.insert(3, 7);
        assert_eq!(w.poll(3).map(|f| f.value), Some(7));
    }
}

#[test]
fn what_draining_frees_is_kept_for_the_owner() {
    for keeps in [false, true] {
        let mut w = keeping(keeps);
        let n = 2 * KEEP_REFS as u64;
        for i in 0..n {
            w.insert(1 + i % 5_000, i);
        }
        w.insert(10_000_000, n);
        assert_eq!(w.drain().len(), n as usize + 1);
        assert_eq!(w.len(), 0);
        let drained = w.take_freed();
        assert_eq!(drained.is_some(), keeps, "keeps {keeps}");
        if let Some(freed) = drained {
            assert!(freed.pool.is_some(), "the pool's store waits for the owner");
        }
        w.check_invariants();
        w.insert(3, 7);
        assert_eq!(w.poll(3).map(|f| f.value), Some(7));
    }
}

#[test]
fn what_the_last_fired_timer_and_the_empty_poll_free_is_kept_together() {
    let mut w = Wheel::new(64, 0);
    w.keep_freed();
    let n = 4 * KEEP_REFS as u64;
    let keys: Vec<_> = (0..n)
        .map(|i| (w.insert(1 + i % 50, i), 1 + i % 50))
        .collect();
    // Timers cancelled after the last live one leave garbage behind it:
    // the last one to fire then drops every reference itself, and the
    // poll after it releases the arena.
    for &(k, deadline) in &keys {
        if deadline > 25 {
            assert!(w.remove(k).is_some());
        }
    }
    let live = keys.iter().filter(|&&(_, deadline)| deadline <= 25).count();
    assert_eq!(std::iter::from_fn(|| w.poll(25)).count(), live);
    let freed = w.take_freed().expect("kept for the owner");
    assert!(
        freed.pool.is_some(),
        "the pool's store was freed in the poll"
    );
    assert!(
        freed.slots.is_some(),
        "the arena's slots were freed in the poll"
    );
    assert!(w.take_freed().is_none());
    w.check_invariants();
}

#[test]
fn a_fired_burst_gives_the_pool_back_while_a_timer_waits() {
    let mut w = Wheel::new(64, 0);
    let far = w.insert(10_000_000, u64::MAX);
    let n = 20 * KEEP_REFS as u64;
    for i in 0..n {
        w.insert(1 + i % 100_000, i);
    }
    let peak = w.pool.stored();
    assert!(peak >= n as usize);
    let fired = std::iter::from_fn(|| w.poll(100_000)).count();
    assert_eq!(fired, n as usize);
    w.check_invariants();
    assert!(
        w.pool.stored() <= 16 * w.len() + KEEP_REFS,
        "the pool kept {} references' room for {} pending (peak {peak})",
        w.pool.stored(),
        w.len()
    );
    // What waits still fires, once, on time.
    assert_eq!(w.poll(9_999_999).map(|f| f.value), None);
    let last = w.poll(10_000_000).expect("the far timer fires");
    assert_eq!((last.key, last.value), (far, u64::MAX));
    assert!(w.poll(u64::MAX - 1).is_none());
}

/// A small wheel that goes from one timer to none and back keeps its
/// buckets' blocks and arena, whether the timer was cancelled or fired.
#[test]
fn a_small_wheel_that_empties_keeps_its_store() {
    let mut w = Wheel::new(64, 0);
    for round in 0..3u64 {
        for delay in [3, 100, 5_000, 300_000] {
            let k = w.insert(w.now() + delay, delay);
            let stored = w.pool.stored();
            assert!(stored > 0);
            assert_eq!(w.remove(k), Some(delay), "round {round}");
            assert_eq!(w.pool.stored(), stored, "the buckets keep their blocks");
            assert_eq!((w.garbage.count(), w.queue.peek()), (0, None));
            assert_eq!(w.next_expiration(), None);
            w.check_invariants();
        }
        let at = w.now() + 70;
        w.insert(at, 7);
        let stored = w.pool.stored();
        assert_eq!(drain_due(&mut w, at), vec![(at, 7)]);
        assert!(w.poll(at).is_none());
        assert_eq!(w.pool.stored(), stored);
        assert_eq!(w.next_expiration(), None);
        w.check_invariants();
        // The last timer fires with a cancelled one's reference left.
        let at = w.now() + 70;
        w.insert(at, 8);
        let gone = w.insert(at + 5_000, 9);
        let stored = w.pool.stored();
        assert_eq!(w.remove(gone), Some(9));
        assert_eq!(w.garbage.count(), 1, "its reference waits");
        assert_eq!(w.poll(at).map(|f| f.value), Some(8));
        assert_eq!((w.garbage.count(), w.queue.peek()), (0, None));
        assert!(w.poll(at).is_none());
        assert_eq!(w.pool.stored(), stored, "the buckets keep their blocks");
        w.check_invariants();
    }
    assert!(w.arena.slots() > 0, "the arena kept its slot");
}

#[test]
fn cascades_reuse_the_pool_instead_of_growing_it() {
    let mut w = Wheel::new(64, 0);
    // Keeps the wheel from ever emptying (which clears the pool).
    w.insert(1 << 30, u64::MAX);
    let mut high = Vec::new();
    for round in 0..4u64 {
        let start = round * 1_000_000;
        for i in 0..20_000u64 {
            w.insert(start + 1 + (i * 7_919) % 600_000, i);
        }
        let mut now = start;
        let mut fired = 0;
        while fired < 20_000 {
            now += 997;
            fired += drain_due(&mut w, now).len();
        }
        w.check_invariants();
        high.push(w.pool.stored());
    }
    // Each round fills and cascades 20,000 references through the
    // levels. The first round starts at a level boundary and the others
    // do not, so they spread over more buckets; from then on the blocks
    // freed serve the next round, and the pool holds still (it would grow
    // by 20,000 a round if freed blocks were lost).
    assert!(high[0] < 2 * 20_000, "pool high-water marks {high:?}");
    assert!(
        high[2..].iter().all(|&h| h <= high[1] + high[1] / 8),
        "pool high-water marks {high:?}"
    );
}
