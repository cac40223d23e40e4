//! Garbage and compaction: dead references skipped, counted and bounded.

use super::*;

#[test]
fn cancel_and_reschedule_leave_garbage_that_is_skipped() {
    let mut w = Wheel::new(8, 0);
    let a = w.insert(10, 1);
    let b = w.insert(20, 2);
    assert!(w.reschedule(a, 30));
    assert_eq!(w.remove(b), Some(2));
    w.check_invariants();
    assert!(drain_due(&mut w, 29).is_empty());
    assert_eq!(drain_due(&mut w, 30), vec![(30, 1)]);
    assert!(!w.reschedule(a, 40));
    assert_eq!(w.remove(a), None);
    w.check_invariants();
}

#[test]
fn compaction_bounds_garbage_when_every_timer_shares_one_deadline() {
    // The clock never moves and every timer has one deadline: each slot
    // freed is reused at once, at the same deadline, so its stale
    // references read as live. Compaction must still drop them.
    let mut w = Wheel::new(64, 0);
    let mut keys: std::collections::VecDeque<_> =
        (0..40_000u64).map(|i| w.insert(100, i)).collect();
    for i in 0..50_000u64 {
        keys.push_back(w.insert(100, i));
        let k = keys.pop_front().expect("pending");
        assert!(w.remove(k).is_some());
        assert!(
            w.garbage.count() <= w.len() + GARBAGE_SLACK + 1,
            "garbage {} beside {} pending after {i} pairs",
            w.garbage.count(),
            w.len()
        );
    }
    // Each compaction drops at least the slack's worth of garbage.
    assert!(
        w.garbage.compactions() <= 50_000 / GARBAGE_SLACK + 1,
        "{} compactions for 50,000 cancels",
        w.garbage.compactions()
    );
    w.check_invariants();
    let fired: Vec<u64> = std::iter::from_fn(|| w.poll(100))
        .map(|f| f.value)
        .collect();
    assert_eq!(fired.len(), 40_000, "each pending timer fires once");
    assert_eq!(w.len(), 0);
}

#[test]
fn compaction_bounds_garbage() {
    let mut w = Wheel::new(64, 0);
    w.insert(5_000_000, 0);
    for i in 0..100_000u64 {
        let k = w.insert(1 + i % 30_000, i);
        w.remove(k);
        assert!(w.garbage.count() <= w.len() + GARBAGE_SLACK + 1);
    }
    w.check_invariants();
    let refs: usize = w.buckets.iter().map(Bucket::len).sum();
    assert!(refs <= 1 + GARBAGE_SLACK + 1, "{refs} references kept");
}

#[test]
fn compaction_of_garbage_across_blocks_keeps_exactly_the_live_timers() {
    let mut w = Wheel::new(64, 0);
    // All in level 2, slot 1 (ticks 4096..8192): one bucket of 6,000.
    let keys: Vec<(TimerKey, u64)> = (0..6_000u64)
        .map(|i| {
            let d = 4_096 + (i * 7_919) % 4_096;
            (w.insert(d, i), d)
        })
        .collect();
    let bucket = w.bucket_for(4_096) as usize;
    assert_eq!(w.buckets[bucket].len(), 6_000);
    // Two of every three cancelled: garbage in every block, and enough
    // to compact (garbage > live + slack) before the end.
    let mut live = Vec::new();
    for (i, &(k, d)) in keys.iter().enumerate() {
        if i % 3 == 0 {
            live.push((d, i as u64));
        } else {
            assert_eq!(w.remove(k), Some(i as u64));
        }
    }
    w.check_invariants();
    assert!(
        w.buckets[bucket].len() < 6_000 - GARBAGE_SLACK,
        "compacted: {} references left",
        w.buckets[bucket].len()
    );
    live.sort_unstable();
    let mut now = 0;
    let mut fired = Vec::new();
    while w.len() > 0 {
        now += 37;
        for (d, v) in drain_due(&mut w, now) {
            assert!(d <= now && d > now - 37, "{d} fired at {now}");
            fired.push((d, v));
        }
        w.check_invariants();
    }
    fired.sort_unstable();
    assert_eq!(fired, live);
}
