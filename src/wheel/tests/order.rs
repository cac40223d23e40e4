//! Deadline order: across levels, overdue first, far timers beside the
//! buckets, the end of time, and time that never runs back.

use super::*;

#[test]
fn lone_far_timer_fires_on_first_wake_up() {
    let mut w = Wheel::new(64, 0);
    w.insert(1_000_000, 1);
    assert!(w.levels() >= 4);
    assert_eq!(w.next_expiration(), Some(1_000_000));
    assert!(drain_due(&mut w, 999_999).is_empty());
    assert_eq!(w.next_expiration(), Some(1_000_000));
    assert_eq!(drain_due(&mut w, 1_000_000), vec![(1_000_000, 1)]);
    assert_eq!(w.next_expiration(), None);
}

#[test]
fn expirations_come_out_in_deadline_order_across_levels() {
    let mut w = Wheel::new(4, 0);
    let deadlines = [70u64, 3, 17, 64, 5, 1000, 4, 63, 65];
    for &d in &deadlines {
        w.insert(d, d);
    }
    w.check_invariants();
    let out: Vec<u64> = drain_due(&mut w, 2000).into_iter().map(|f| f.0).collect();
    let mut sorted = deadlines.to_vec();
    sorted.sort();
    assert_eq!(out, sorted);
    w.check_invariants();
}

#[test]
fn overdue_is_served_first_in_order() {
    let mut w = Wheel::new(8, 100);
    w.insert(150, 150);
    w.insert(90, 90);
    w.insert(10, 10);
    w.insert(100, 100);
    assert_eq!(w.next_expiration(), Some(10), "due since 10");
    let out: Vec<u64> = drain_due(&mut w, 100).into_iter().map(|f| f.0).collect();
    assert_eq!(out, vec![10, 90, 100]);
    assert_eq!(drain_due(&mut w, 150), vec![(150, 150)]);
}

#[test]
fn never_fires_never_ticks() {
    let mut w = Wheel::new(2, 0);
    w.insert(NEVER, 1);
    w.insert(NEVER - 1, 2);
    assert_eq!(w.levels(), 1, "far timers wait in the side heap");
    assert_eq!(w.side.len(), 2);
    assert_eq!(drain_due(&mut w, NEVER - 2), vec![]);
    assert_eq!(drain_due(&mut w, NEVER - 1), vec![(NEVER - 1, 2)]);
    assert_eq!(w.next_expiration(), None);
    assert_eq!(w.len(), 1);
    assert_eq!(w.drain(), vec![1]);
}

#[test]
fn references_near_the_end_of_time_recover_their_deadlines() {
    for wheel_size in [2u64, 64] {
        let start = NEVER - 3 * (reference::NEAR / 4);
        let mut w = Wheel::new(wheel_size, start);
        let deadlines = [NEVER, NEVER - 1, NEVER - 2, start + 1, NEVER - 70_000];
        for &d in &deadlines {
            w.insert(d, d);
        }
        assert_eq!(w.side.len(), 0, "all within the near window");
        w.check_invariants();
        let out: Vec<u64> = drain_due(&mut w, NEVER - 1)
            .into_iter()
            .map(|(d, v)| {
                assert_eq!(d, v);
                d
            })
            .collect();
        assert_eq!(out, [start + 1, NEVER - 70_000, NEVER - 2, NEVER - 1]);
        assert_eq!(w.next_expiration(), None, "NEVER asks for no wake-up");
        assert_eq!(w.len(), 1);
        w.check_invariants();
    }
}

#[test]
fn far_timers_fire_in_deadline_order_with_the_buckets() {
    let near = reference::NEAR;
    let mut w = Wheel::new(64, 5);
    let a = w.insert(5 + near, 1); // just outside the window: side
    let b = w.insert(4 + near, 2); // just inside: a reference
    let c = w.insert(3 * near, 3);
    let d = w.insert(10, 4);
    let e = w.insert(7 * near, 5);
    assert_eq!(w.side.len(), 3);
    w.check_invariants();
    assert_eq!(w.remove(c), Some(3), "cancel of a far timer");
    assert!(w.reschedule(d, 2 * near), "near to far");
    assert!(w.reschedule(e, 100), "far to near");
    assert!(w.reschedule(a, 5 + near), "far to the same far deadline");
    w.check_invariants();
    assert_eq!(w.next_expiration(), Some(100));
    let out = drain_due(&mut w, 2 * near);
    assert_eq!(out, [(100, 5), (4 + near, 2), (5 + near, 1), (2 * near, 4)]);
    assert_eq!(w.remove(b), None);
    assert_eq!(w.len(), 0);
    w.check_invariants();
}

#[test]
fn a_stale_reference_that_reads_live_fires_its_timer_on_time_once() {
    let mut w = Wheel::new(8, 0);
    // Moved away and back: the first reference reads as live again.
    let k = w.insert(50, 1);
    assert!(w.reschedule(k, 3_000));
    assert!(w.reschedule(k, 50));
    // Cancelled, and the slot reused by a timer due in the same tick.
    let gone = w.insert(70, 2);
    assert_eq!(w.remove(gone), Some(2));
    let reused = w.insert(70, 3);
    assert_eq!(reused.idx, gone.idx, "the slot was reused");
    w.check_invariants();
    assert!(drain_due(&mut w, 49).is_empty());
    assert_eq!(drain_due(&mut w, 69), vec![(50, 1)]);
    assert_eq!(drain_due(&mut w, 3_000), vec![(70, 3)]);
    assert_eq!(w.len(), 0);
    assert_eq!(w.garbage.count(), 0, "every stale reference was met");
    w.check_invariants();
}

#[test]
fn time_never_runs_back() {
    let mut w = Wheel::new(8, 50);
    w.insert(60, 1);
    assert!(drain_due(&mut w, 10).is_empty());
    assert_eq!(w.now(), 50);
    assert_eq!(drain_due(&mut w, 60), vec![(60, 1)]);
}
