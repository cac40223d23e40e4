//! The sorted run: a sparse second-level bucket handed out in order.

use super::*;

#[test]
fn a_sparse_second_level_bucket_is_served_as_a_sorted_run() {
    let mut w = Wheel::new(64, 0);
    // All in the second level's slot 1 (ticks 64..128), a few per tick.
    let deadlines = [127u64, 64, 100, 65, 100, 90, 126, 64];
    let keys: Vec<TimerKey> = deadlines.iter().map(|&d| w.insert(d, d)).collect();
    assert!(w.run.refs().is_empty());
    // The bucket flushes at its earliest deadline: due ones go out, the
    // rest wait in the run, not in finest-level buckets.
    assert_eq!(w.poll(64).map(|f| f.value), Some(64));
    assert_eq!(w.poll(64).map(|f| f.value), Some(64));
    assert_eq!(w.poll(64).map(|f| f.value), None);
    assert_eq!(w.run.refs().len(), 6);
    assert_eq!(w.queue.peek(), None, "nothing filed into the finest level");
    assert_eq!(w.next_expiration(), Some(65));
    w.check_invariants();
    // Cancelling the run's earliest moves the next expiration with it.
    assert_eq!(w.remove(keys[3]), Some(65));
    assert_eq!(w.next_expiration(), Some(90));
    // A timer scheduled meanwhile, due before the run's next, goes first.
    w.insert(80, 80);
    w.check_invariants();
    let out: Vec<(u64, u64)> = drain_due(&mut w, 1000);
    assert_eq!(
        out.iter().map(|f| f.1).collect::<Vec<_>>(),
        [80, 90, 100, 100, 126, 127]
    );
    assert!(out.iter().all(|&(d, v)| d == v));
    w.check_invariants();
}

#[test]
fn a_run_sorted_by_counting_hands_out_in_deadline_order() {
    for wheel_size in [2u64, 3, 8, 64, 100, 256] {
        let mut w = Wheel::new(wheel_size, 0);
        // Second-level slot 1: ticks [W, 2W), several per tick, shuffled.
        let mut deadlines: Vec<u64> = (0..8 * wheel_size)
            .map(|i| wheel_size + (i * 7919) % wheel_size)
            .collect();
        deadlines.push(wheel_size);
        for (id, &d) in deadlines.iter().enumerate() {
            w.insert(d, id as u64);
        }
        assert_eq!(w.poll(wheel_size).map(|f| f.deadline), Some(wheel_size));
        assert!(
            w.run.refs().len() >= 8,
            "W {wheel_size}: the bucket became a run"
        );
        w.check_invariants();
        let mut out = vec![wheel_size];
        let mut now = wheel_size;
        while w.len() > 0 {
            now += 1;
            while let Some(f) = w.poll(now) {
                assert!(f.deadline <= now, "W {wheel_size}: early");
                out.push(f.deadline);
            }
            w.check_invariants();
        }
        deadlines.sort_unstable();
        assert_eq!(out, deadlines, "W {wheel_size}: deadline order");
    }
}
