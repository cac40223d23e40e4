//! `LocalTimer`: the single-threaded core on caller-supplied time.

use std::time::Duration;

use purgatorio::{BuildError, LocalTimer, MAX_TICK, MAX_WHEEL_SIZE};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn drain_at<T>(timer: &mut LocalTimer<T>, now: Duration) -> Vec<T> {
    timer.advance(now).map(|e| e.into_inner()).collect()
}

#[test]
fn already_expired_tasks_come_out_at_the_next_poll() {
    // Kafka TimerTest.testAlreadyExpiredTask: deadlines at or before the
    // current time are expired at once, not lost.
    let mut timer = LocalTimer::new();
    drain_at(&mut timer, ms(100));
    for i in 0..5u64 {
        timer.schedule_at(ms(100 - i * 20), i);
    }
    let mut out = drain_at(&mut timer, ms(100));
    assert_eq!(out, vec![4, 3, 2, 1, 0], "earliest deadline first");
    out.clear();
    assert!(timer.is_empty());
}

#[test]
fn task_expiration_across_many_levels() {
    // Kafka TimerTest.testTaskExpiration, on a small wheel to force levels.
    let mut timer = LocalTimer::builder().wheel_size(3).build().unwrap();
    let mut expected = Vec::new();
    for d in [
        0u64, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 10_000,
    ] {
        for copy in 0..3 {
            timer.schedule_at(ms(d), (d, copy));
            expected.push(d);
        }
    }
    let mut fired = Vec::new();
    for now in 0..=10_000u64 {
        for e in timer.advance(ms(now)) {
            let (d, _) = e.into_inner();
            assert_eq!(d, now, "fired at {now}, deadline {d}");
            fired.push(d);
        }
    }
    assert_eq!(fired, expected);
}

#[test]
fn one_tick_late_at_most_whatever_the_tick() {
    for tick in [
        Duration::from_micros(1),
        Duration::from_micros(7),
        ms(1),
        ms(10),
        ms(100),
        Duration::from_secs(1),
    ] {
        let mut timer = LocalTimer::builder()
            .tick(tick)
            .wheel_size(8)
            .build()
            .unwrap();
        let deadlines: Vec<Duration> = (1..200u32)
            .map(|i| tick * i / 3 + Duration::from_nanos(1))
            .collect();
        for &d in &deadlines {
            timer.schedule_at(d, d);
        }
        let step = tick / 4 + Duration::from_nanos(1);
        let mut now = Duration::ZERO;
        let mut fired = 0;
        while !timer.is_empty() {
            now += step;
            for e in timer.advance(now) {
                let d = e.into_inner();
                assert!(now >= d, "tick {tick:?}: fired at {now:?} before {d:?}");
                assert!(
                    now < d + tick + step,
                    "tick {tick:?}: {d:?} fired late at {now:?}"
                );
                fired += 1;
            }
        }
        assert_eq!(fired, deadlines.len());
    }
}

#[test]
fn stale_keys_never_touch_another_timer() {
    let mut timer = LocalTimer::new();
    let a = timer.schedule(ms(5), "a");
    assert_eq!(timer.cancel(a), Some("a"));
    let b = timer.schedule(ms(5), "b"); // reuses a's slot
    assert_ne!(a, b);
    assert_eq!(timer.cancel(a), None);
    assert!(!timer.reschedule(a, ms(1)));
    assert!(!timer.contains(a));
    assert!(timer.contains(b));
    assert_eq!(drain_at(&mut timer, ms(5)), vec!["b"]);
    // After firing, b is stale too, even once its slot is reused.
    let c = timer.schedule(ms(1), "c");
    assert_eq!(timer.cancel(b), None);
    assert_eq!(timer.cancel(c), Some("c"));
}

#[test]
fn far_and_absurd_deadlines_are_accepted_without_panic() {
    let mut timer = LocalTimer::builder().wheel_size(2).build().unwrap();
    let max = timer.schedule_at(Duration::MAX, 1);
    let huge = timer.schedule(Duration::MAX, 2);
    let year = timer.schedule(Duration::from_secs(365 * 24 * 3600), 3);
    assert_eq!(
        timer.next_expiration(),
        Some(Duration::from_secs(365 * 24 * 3600))
    );
    assert_eq!(
        drain_at(&mut timer, Duration::from_secs(365 * 24 * 3600)),
        vec![3]
    );
    assert!(!timer.contains(year));
    assert_eq!(drain_at(&mut timer, Duration::MAX), Vec::<i32>::new());
    assert!(
        timer.contains(max) && timer.contains(huge),
        "beyond range: never fires"
    );
    assert_eq!(timer.next_expiration(), None);
    let mut left = timer.drain();
    left.sort();
    assert_eq!(left, vec![1, 2]);
}

#[test]
fn a_clock_going_backwards_changes_nothing() {
    let mut timer = LocalTimer::new();
    timer.schedule_at(ms(50), ());
    drain_at(&mut timer, ms(40));
    drain_at(&mut timer, ms(10));
    assert_eq!(timer.now(), ms(40));
    assert_eq!(drain_at(&mut timer, ms(49)).len(), 0);
    assert_eq!(drain_at(&mut timer, ms(50)).len(), 1);
}

#[test]
fn an_advance_after_a_long_silence_visits_only_due_buckets() {
    let mut timer = LocalTimer::new();
    timer.schedule_at(Duration::from_secs(86_400), "tomorrow");
    // Nothing due for a day: one poll, nothing handed out.
    assert!(timer.poll(Duration::from_secs(86_399)).is_none());
    assert_eq!(timer.next_expiration(), Some(Duration::from_secs(86_400)));
    assert_eq!(
        drain_at(&mut timer, Duration::from_secs(90_000)),
        vec!["tomorrow"]
    );
}

#[test]
fn partially_consumed_advance_leaves_the_rest_pending() {
    let mut timer = LocalTimer::new();
    for d in 1..=10u64 {
        timer.schedule_at(ms(d), d);
    }
    let first: Vec<u64> = timer
        .advance(ms(10))
        .take(3)
        .map(|e| e.into_inner())
        .collect();
    assert_eq!(first, vec![1, 2, 3]);
    assert_eq!(timer.len(), 7);
    let k = timer.schedule_at(ms(2), 99); // already due: served first
    assert_eq!(timer.poll(ms(10)).unwrap().key(), k);
    let rest: Vec<u64> = drain_at(&mut timer, ms(10));
    assert_eq!(rest, (4..=10).collect::<Vec<_>>());
}

#[test]
fn cancel_frees_the_payload_at_once() {
    let payload = std::rc::Rc::new(());
    let mut timer = LocalTimer::new();
    let k = timer.schedule(ms(10), std::rc::Rc::clone(&payload));
    assert_eq!(std::rc::Rc::strong_count(&payload), 2);
    drop(timer.cancel(k));
    assert_eq!(std::rc::Rc::strong_count(&payload), 1);
}

#[test]
fn churn_keeps_memory_bounded_without_advancing() {
    // Cancelled entries leave garbage references behind; compaction must keep
    // them bounded even when time never moves.
    let mut timer = LocalTimer::new();
    let keep: Vec<_> = (0..1000u64).map(|i| timer.schedule(ms(1 + i), i)).collect();
    for i in 0..200_000u64 {
        let k = timer.schedule(ms(1 + i % 5000), i);
        assert!(timer.cancel(k).is_some());
    }
    assert_eq!(timer.len(), 1000);
    assert!(keep.iter().all(|&k| timer.contains(k)));
    assert_eq!(drain_at(&mut timer, ms(1000)).len(), 1000);
}

#[test]
fn bad_configuration_is_a_typed_error() {
    let tick = |t| LocalTimer::<()>::builder().tick(t).build().map(|_| ());
    assert!(matches!(tick(Duration::ZERO), Err(BuildError::Tick(_))));
    assert!(matches!(tick(MAX_TICK * 2), Err(BuildError::Tick(_))));
    assert!(matches!(tick(Duration::MAX), Err(BuildError::Tick(_))));
    assert!(tick(MAX_TICK).is_ok());
    let size = |s| {
        LocalTimer::<()>::builder()
            .wheel_size(s)
            .build()
            .map(|_| ())
    };
    for bad in [0, 1, MAX_WHEEL_SIZE + 1, usize::MAX] {
        assert!(matches!(size(bad), Err(BuildError::WheelSize(n)) if n == bad));
    }
    assert!(size(2).is_ok());
    assert!(size(MAX_WHEEL_SIZE).is_ok());
}

#[test]
fn largest_wheel_and_tick_still_work() {
    let mut timer = LocalTimer::builder()
        .tick(MAX_TICK)
        .wheel_size(MAX_WHEEL_SIZE)
        .build()
        .unwrap();
    timer.schedule(Duration::from_secs(1), "a");
    timer.schedule(Duration::MAX, "never");
    assert_eq!(timer.next_expiration(), Some(MAX_TICK));
    assert_eq!(drain_at(&mut timer, MAX_TICK), vec!["a"]);
}

#[test]
fn reschedule_keeps_the_key() {
    let mut timer = LocalTimer::new();
    let k = timer.schedule(ms(10), "session");
    for beat in 1..100u64 {
        drain_at(&mut timer, ms(beat * 5));
        assert!(timer.reschedule(k, ms(10)), "heartbeat {beat}");
    }
    assert_eq!(timer.len(), 1);
    assert!(drain_at(&mut timer, ms(504)).is_empty());
    let e = timer.poll(ms(505)).unwrap();
    assert_eq!(e.key(), k);
    assert_eq!(e.deadline(), ms(505));
}

#[test]
fn a_deadline_inside_the_current_tick_is_due_at_once() {
    // Issue 10, defect 5: with a 10 ms tick at 15 ms, a deadline of 14 ms
    // (or "now", or zero delay) rounded up to 20 ms and waited a whole tick.
    let mut timer = LocalTimer::builder().tick(ms(10)).build().unwrap();
    assert!(timer.poll(ms(15)).is_none());
    let past = timer.schedule_at(ms(14), 'x');
    let now = timer.schedule(Duration::ZERO, 'y');
    let mut due: Vec<_> = std::iter::from_fn(|| timer.poll(ms(15)))
        .map(|e| (e.key(), e.into_inner()))
        .collect();
    due.sort();
    assert_eq!(due, {
        let mut expected = vec![(past, 'x'), (now, 'y')];
        expected.sort();
        expected
    });
    // A later deadline in the same tick still waits: never early.
    timer.schedule_at(ms(16), 'z');
    assert!(timer.poll(ms(19)).is_none());
    assert_eq!(timer.poll(ms(20)).unwrap().into_inner(), 'z');
}

#[test]
fn at_the_end_of_time_a_zero_delay_is_still_due_at_once() {
    let mut timer = LocalTimer::new();
    let far = timer.schedule(Duration::from_nanos(u64::MAX - 1), "far");
    let mut fired: Vec<&str> = timer
        .advance(Duration::MAX)
        .map(|e| e.into_inner())
        .collect();
    assert_eq!(fired, vec!["far"], "a reading at the cap reaches it");
    assert!(!timer.contains(far));
    timer.schedule(Duration::ZERO, "now");
    fired = timer
        .advance(Duration::MAX)
        .map(|e| e.into_inner())
        .collect();
    assert_eq!(fired, vec!["now"]);
}
