//! The head: settled after a removal, so the next expiration is exact.

use super::*;

#[test]
fn emptied_wheel_arms_nothing() {
    let mut w = Wheel::new(64, 0);
    let keys: Vec<_> = (1..100).map(|d| w.insert(d * 1000, d)).collect();
    for k in keys {
        w.remove(k);
    }
    assert_eq!(w.next_expiration(), None);
    assert_eq!(w.queue.len(), 0);
    w.check_invariants();
}

/// A removal skips settling the head only when the head is settled and
/// the timer is not on top: the next timer out of the ready list is.
#[test]
fn removing_the_next_ready_timer_settles_the_head() {
    let mut w = Wheel::new(64, 0);
    let keys: Vec<_> = (0..4).map(|i| w.insert(5, i)).collect();
    w.insert(40, 9);
    let later = w.insert(50, 10);
    assert!(w.poll(5).is_some());
    assert!(
        !w.head.is_settled(),
        "a poll that handed a timer out may leave it unsettled"
    );
    assert_eq!(w.ready.len(), 3);
    // Neither on top nor the head's holder: settled all the same, since
    // the poll left the head unsettled.
    w.remove(later);
    assert!(w.head.is_settled());
    let next = w.ready.last().copied().expect("three still ready");
    let key = keys
        .into_iter()
        .find(|k| k.idx == next.idx)
        .expect("one of them");
    w.remove(key);
    w.check_invariants();
    assert_eq!(std::iter::from_fn(|| w.poll(5)).count(), 2);
    assert_eq!(w.next_expiration(), Some(40));
}

#[test]
fn cancelling_the_earliest_timer_moves_next_expiration() {
    let mut w = Wheel::new(64, 0);
    let a = w.insert(10, 1);
    w.insert(20, 2);
    let far = w.insert(100_000, 3);
    w.insert(100_050, 4);
    assert_eq!(w.next_expiration(), Some(10));
    w.remove(a);
    assert_eq!(w.next_expiration(), Some(20), "level 0 key settles");
    while w.poll(20).is_some() {}
    assert_eq!(w.next_expiration(), Some(100_000));
    w.remove(far);
    assert_eq!(
        w.next_expiration(),
        Some(100_050),
        "small coarse bucket rescanned"
    );
    assert!(!w.reschedule(far, 5), "a cancelled key stays stale");
}

#[test]
fn a_finest_bucket_emptied_from_its_end_and_refilled_keeps_its_timers() {
    let mut w = Wheel::new(64, 0);
    // 600 references in bucket 10: blocks of 4, 8, …, 512.
    let keys: Vec<TimerKey> = (0..600).map(|i| w.insert(10, i)).collect();
    assert_eq!(w.buckets[10].len(), 600);
    // Cancelling from the end pops the dead references (the bucket is
    // the head and its key holder dies each time) across every block.
    for &k in keys[1..].iter().rev() {
        assert!(w.remove(k).is_some());
    }
    w.check_invariants();
    assert_eq!((w.buckets[10].len(), w.buckets[10].blocks()), (1, 1));
    assert_eq!(w.garbage.count(), 0, "every dead reference was popped");
    // Refilled, it takes blocks from the pool again.
    for i in 600..1_200 {
        w.insert(10, i);
    }
    w.check_invariants();
    assert!(drain_due(&mut w, 9).is_empty());
    let mut fired: Vec<u64> = drain_due(&mut w, 10).into_iter().map(|f| f.1).collect();
    fired.sort_unstable();
    let want: Vec<u64> = std::iter::once(0).chain(600..1_200).collect();
    assert_eq!(fired, want);
    w.check_invariants();
}
