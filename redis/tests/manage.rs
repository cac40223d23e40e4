//! Management by id and a slow handler's extended visibility, against a
//! real `redis-server`: what BullMQ users expect.

mod common;

use std::thread;
use std::time::Duration;

use common::{Server, PATIENCE};
use purgatorio_redis::{Config, Consumer, Pending, Scheduler, Timers};
use purgatorio_testkit::wait_for;

#[test]
fn a_pending_timer_can_be_read_moved_and_fired_now_by_id() {
    let server = Server::start("no");
    let timers = server.timers("manage");
    let now = timers.server_time_ms().unwrap();
    timers.schedule("a", now + 600_000, b"payload a").unwrap();
    assert_eq!(
        timers.get("a").unwrap(),
        Some(Pending {
            deadline_ms: now + 600_000,
            attempt: 1,
            payload: b"payload a".to_vec()
        })
    );
    assert_eq!(timers.get("nobody").unwrap(), None);
    assert!(timers.reschedule("a", now + 900_000).unwrap());
    assert_eq!(timers.get("a").unwrap().unwrap().deadline_ms, now + 900_000);
    assert!(
        !timers.reschedule("nobody", now).unwrap(),
        "nothing written"
    );
    assert_eq!(timers.metrics().unwrap().pending, 1);

    // A scheduler asleep until the far deadline is woken by fire_now.
    let node = Scheduler::new(timers.clone());
    let stop = node.stop_handle();
    let running = thread::spawn(move || node.run().unwrap());
    let consumer = Consumer::new(timers.clone(), "c").unwrap();
    thread::sleep(Duration::from_millis(200));
    assert!(consumer
        .read_new(Duration::from_millis(100), 10)
        .unwrap()
        .is_empty());
    assert!(timers.fire_now("a").unwrap());
    let delivery = wait_for("the fired timer", PATIENCE, || {
        consumer
            .read_new(Duration::from_millis(100), 10)
            .unwrap()
            .pop()
    });
    assert_eq!(
        (delivery.id.as_str(), &delivery.payload[..]),
        ("a", &b"payload a"[..])
    );
    assert!(delivery.promoted_ms >= delivery.deadline_ms);
    assert!(delivery.deadline_ms < now + 600_000);
    assert_eq!(
        timers.get("a").unwrap(),
        None,
        "delivered: no longer pending"
    );
    assert!(!timers.fire_now("a").unwrap());
    assert_eq!(
        timers.metrics().unwrap().misfired,
        0,
        "fired now is not late"
    );
    stop.stop();
    running.join().unwrap();
}

#[test]
fn a_slow_handler_keeps_its_delivery_by_extending_visibility() {
    let server = Server::start("no");
    let mut config = Config::new("slow");
    config.visibility_timeout = Duration::from_millis(300);
    let timers = Timers::connect(&server.url(), config).unwrap();
    timers
        .schedule("job", timers.server_time_ms().unwrap(), b"")
        .unwrap();
    let node = Scheduler::new(timers.clone());
    let stop = node.stop_handle();
    let running = thread::spawn(move || node.run().unwrap());
    let slow = Consumer::new(timers.clone(), "slow").unwrap();
    let other = Consumer::new(timers.clone(), "other").unwrap();
    let delivery = wait_for("the delivery", PATIENCE, || {
        slow.read_new(Duration::from_millis(100), 1).unwrap().pop()
    });
    // Three visibility timeouts of work, extended every 100 ms: never taken.
    for _ in 0..9 {
        thread::sleep(Duration::from_millis(100));
        assert!(slow.extend_visibility(&delivery).unwrap());
        assert!(
            other.take_over(10).unwrap().is_empty(),
            "taken over while extended"
        );
    }
    // It stops extending: taken over, as attempt 2.
    let taken = wait_for("the take-over", PATIENCE, || {
        other.take_over(10).unwrap().pop()
    });
    assert_eq!((taken.id.as_str(), taken.attempt), ("job", 2));
    assert!(
        !slow.extend_visibility(&delivery).unwrap(),
        "no longer ours"
    );
    stop.stop();
    running.join().unwrap();
}

#[test]
fn a_failing_timer_is_retried_by_its_backoff_then_dead_lettered() {
    let server = Server::start("no");
    let mut config = Config::new("backoff");
    config.max_attempts = 4;
    let timers = Timers::connect(&server.url(), config).unwrap();
    timers
        .schedule("flaky", timers.server_time_ms().unwrap(), b"p")
        .unwrap();
    let node = Scheduler::new(timers.clone());
    let stop = node.stop_handle();
    let running = thread::spawn(move || node.run().unwrap());
    let consumer = Consumer::new(timers.clone(), "c").unwrap();
    let policy = purgatorio_redis::Backoff::Exponential {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(120),
    };
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let delivery = wait_for("the next attempt", PATIENCE, || {
            consumer
                .read_new(Duration::from_millis(100), 1)
                .unwrap()
                .pop()
        });
        let handled = timers.server_time_ms().unwrap();
        seen.push((delivery.attempt, delivery.deadline_ms, handled));
        consumer.finish(&delivery, policy.retry(&delivery)).unwrap();
    }
    // Attempt n + 1 is due at least the policy's delay after attempt n was
    // handled, and never delivered before it is due.
    for pair in seen.windows(2) {
        let ((attempt, _, handled), (next, deadline, at)) = (pair[0], pair[1]);
        assert_eq!(next, attempt + 1);
        let delay = policy.delay(attempt).as_millis() as u64;
        assert!(deadline >= handled + delay, "{seen:?}");
        assert!(at >= deadline, "{seen:?}");
    }
    let metrics = timers.metrics().unwrap();
    assert_eq!((metrics.dead_letters, metrics.pending), (1, 0), "{seen:?}");
    let dead = timers.dead_letters(10).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].id.as_str(), &dead[0].payload[..], dead[0].attempt),
        ("flaky", &b"p"[..], 4)
    );
    stop.stop();
    running.join().unwrap();
}

#[test]
fn pending_timers_are_listed_earliest_first() {
    let server = Server::start("no");
    let timers = server.timers("list");
    let now = timers.server_time_ms().unwrap();
    // Across buckets (1 s wide) and within one, scheduled out of order.
    let offsets = [50_000u64, 2_100, 2_050, 900_000, 10, 2_000];
    for (i, offset) in offsets.iter().enumerate() {
        timers
            .schedule(&format!("t{i}"), now + offset, b"")
            .unwrap();
    }
    let listed = timers.earliest(4).unwrap();
    let expected: Vec<(String, u64)> = [(4, 10), (5, 2_000), (2, 2_050), (1, 2_100)]
        .iter()
        .map(|(i, offset)| (format!("t{i}"), now + offset))
        .collect();
    assert_eq!(listed, expected);
    assert_eq!(timers.earliest(1_000).unwrap().len(), 6);
    for bad in [0, purgatorio_redis::MAX_LIST + 1] {
        assert!(timers.earliest(bad).is_err());
        assert!(timers.dead_letters(bad).is_err());
    }
    assert!(timers.dead_letters(10).unwrap().is_empty());
}

#[test]
fn due_and_in_flight_timers_are_listed() {
    let server = Server::start("no");
    let timers = server.timers("lists");
    let now = timers.server_time_ms().unwrap();
    // Nothing delivered yet, no consumer group: nothing in flight.
    assert!(timers.in_flight(10).unwrap().is_empty());
    timers.schedule("late", now - 2_000, b"").unwrap();
    timers.schedule("now", now, b"").unwrap();
    timers.schedule("later", now + 600_000, b"").unwrap();
    // No scheduler node runs: two are due and waiting.
    let due = timers.due(10).unwrap();
    assert_eq!(
        due,
        [("late".to_string(), now - 2_000), ("now".to_string(), now)]
    );
    assert_eq!(timers.due(1).unwrap().len(), 1);
    assert!(timers.due(0).is_err());

    let node = Scheduler::new(timers.clone());
    let stop = node.stop_handle();
    let running = thread::spawn(move || node.run().unwrap());
    let consumer = Consumer::new(timers.clone(), "c").unwrap();
    let mut held = Vec::new();
    while held.len() < 2 {
        held.extend(consumer.poll(Duration::from_millis(100), 10).unwrap());
    }
    assert!(timers.due(10).unwrap().is_empty());
    let in_flight = timers.in_flight(10).unwrap();
    let ids: Vec<&str> = in_flight.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, ["late", "now"]);
    for h in &in_flight {
        assert_eq!((h.consumer.as_str(), h.deliveries, h.attempt), ("c", 1, 1));
    }
    assert_eq!(in_flight[0].deadline_ms, now - 2_000);
    consumer.ack_all(&held[..1]).unwrap();
    assert_eq!(timers.in_flight(10).unwrap().len(), 1);
    assert!(timers.in_flight(1_001).is_err());
    stop.stop();
    running.join().unwrap();
}

#[test]
fn a_misfired_timer_rescheduled_into_its_own_bucket_is_not_lost() {
    use purgatorio_redis::Misfire;

    let server = Server::start("no");
    // Buckets of 10 minutes: a timer 2 s overdue, rescheduled 100 ms from
    // now, stays in its bucket.
    let mut config = Config::new("own-bucket");
    config.bucket_ms = 600_000;
    config.misfire = Misfire::Reschedule(Duration::from_millis(100));
    let timers = Timers::connect(&server.url(), config).unwrap();
    let mut now = timers.server_time_ms().unwrap();
    let to_edge = 600_000 - now % 600_000;
    if now % 600_000 < 3_000 || to_edge < 3_000 {
        // Too near a bucket's edge for the two timers to share one: wait
        // until 3 s into the next bucket (at most 6 s).
        let wait = if to_edge < 3_000 {
            to_edge + 3_000
        } else {
            3_000 - now % 600_000
        };
        thread::sleep(Duration::from_millis(wait));
        now = timers.server_time_ms().unwrap();
    }
    timers.schedule("late", now - 2_000, b"").unwrap();
    timers.schedule("later", now + 2_000, b"").unwrap();
    let node = Scheduler::new(timers.clone());
    let stop = node.stop_handle();
    let running = thread::spawn(move || node.run().unwrap());
    let consumer = Consumer::new(timers.clone(), "c").unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let read = wait_for("both timers", PATIENCE, || {
            let read = consumer.poll(Duration::from_millis(100), 10).unwrap();
            (!read.is_empty()).then_some(read)
        });
        seen.extend(read.into_iter().map(|d| d.id));
    }
    assert_eq!(seen, ["late", "later"]);
    assert_eq!(timers.metrics().unwrap().misfired, 1);
    stop.stop();
    running.join().unwrap();
}
