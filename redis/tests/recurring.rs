//! Recurring timers (fixed interval, cron) and a dead letter sent back to
//! pending, against a real `redis-server`: occurrences on their phase and
//! never early, the next one scheduled once by the acknowledgement of the
//! current one (also when a consumer died holding it), a retry keeps the
//! series, cancel ends it.

mod common;

use std::thread;
use std::time::Duration;

use common::{Server, PATIENCE};
use purgatorio_redis::{
    Config, Consumer, DeadLetterRetry, Delivery, Error, Recurrence, Scheduler, StopHandle, Timers,
    Verdict,
};
use purgatorio_testkit::wait_for;

/// A scheduler node on a thread of the test.
struct Node {
    stop: StopHandle,
    thread: thread::JoinHandle<()>,
}

impl Node {
    fn start(timers: &Timers) -> Node {
        let node = Scheduler::new(timers.clone());
        let stop = node.stop_handle();
        let thread = thread::spawn(move || node.run().expect("scheduler"));
        Node { stop, thread }
    }

    fn stop(self) {
        self.stop.stop();
        self.thread.join().unwrap();
    }
}

/// The next delivery `consumer` reads (new or taken over).
fn next(consumer: &Consumer) -> Delivery {
    wait_for("a delivery", PATIENCE, || {
        consumer.poll(Duration::from_millis(100), 1).unwrap().pop()
    })
}

/// The number of series stored in `namespace`.
fn series(server: &Server, namespace: &str) -> u64 {
    let mut c = server.raw().unwrap();
    redis::cmd("HLEN")
        .arg(format!("{{{namespace}}}:repeat"))
        .query(&mut c)
        .unwrap()
}

#[test]
fn an_interval_fires_on_its_phase_never_early_until_cancelled() {
    let server = Server::start_volatile();
    let timers = server.timers("every");
    let every = Recurrence::Every(Duration::from_millis(200));
    let first = timers.schedule_recurring("tick", &every, b"p").unwrap();
    assert_eq!(timers.get("tick").unwrap().unwrap().deadline_ms, first);
    let node = Node::start(&timers);
    let consumer = Consumer::new(timers.clone(), "c").unwrap();
    let mut deadlines = Vec::new();
    for _ in 0..4 {
        let delivery = next(&consumer);
        assert!(delivery.is_recurring());
        assert_eq!(
            (delivery.id.as_str(), &delivery.payload[..]),
            ("tick", &b"p"[..])
        );
        assert!(delivery.promoted_ms >= delivery.deadline_ms, "{delivery:?}");
        assert_eq!(delivery.attempt, 1);
        // No drift: on the phase of the first, whatever the handling took.
        assert_eq!((delivery.deadline_ms - first) % 200, 0, "{delivery:?}");
        deadlines.push(delivery.deadline_ms);
        thread::sleep(Duration::from_millis(30));
        consumer.finish(&delivery, Verdict::Ack).unwrap();
        // The acknowledgement scheduled the next one: the first on the
        // phase strictly after the delivered deadline and its promotion
        // (200 ms later unless the machine was slower than that; a missed
        // one is skipped, not fired late).
        let pending = timers.get("tick").unwrap().expect("the next occurrence");
        let seen = delivery.promoted_ms.max(delivery.deadline_ms);
        assert!(pending.deadline_ms > seen, "{pending:?} {delivery:?}");
        assert!(
            pending.deadline_ms <= seen + 200,
            "{pending:?} {delivery:?}"
        );
        assert_eq!((pending.deadline_ms - first) % 200, 0, "{pending:?}");
    }
    assert!(deadlines.windows(2).all(|w| w[1] > w[0]), "{deadlines:?}");

    // Cancelled with an occurrence in flight: that one is the last.
    let in_flight = next(&consumer);
    assert!(timers.cancel("tick").unwrap());
    consumer.finish(&in_flight, Verdict::Ack).unwrap();
    assert_eq!(timers.get("tick").unwrap(), None);
    assert_eq!(series(&server, "every"), 0);
    thread::sleep(Duration::from_millis(600));
    assert!(consumer
        .poll(Duration::from_millis(1), 10)
        .unwrap()
        .is_empty());
    assert!(!timers.cancel("tick").unwrap());
    node.stop();
}

#[test]
fn a_cron_expression_fires_on_its_whole_seconds() {
    let server = Server::start_volatile();
    let timers = server.timers("cron");
    let every_second = Recurrence::Cron("* * * * * *".into());
    let first = timers
        .schedule_recurring("cron", &every_second, b"")
        .unwrap();
    assert_eq!(first % 1_000, 0);
    let node = Node::start(&timers);
    let consumer = Consumer::new(timers.clone(), "c").unwrap();
    let mut last = 0;
    for _ in 0..2 {
        let delivery = next(&consumer);
        assert_eq!(delivery.deadline_ms % 1_000, 0, "{delivery:?}");
        assert!(delivery.deadline_ms > last);
        assert!(delivery.promoted_ms >= delivery.deadline_ms);
        last = delivery.deadline_ms;
        consumer.finish(&delivery, Verdict::Ack).unwrap();
    }
    assert!(timers.cancel("cron").unwrap());
    node.stop();
    for bad in [
        Recurrence::Cron("every tuesday".into()),
        Recurrence::Cron("0 0 30 2 *".into()),
        Recurrence::Every(Duration::ZERO),
    ] {
        assert!(
            matches!(
                timers.schedule_recurring("bad", &bad, b""),
                Err(Error::InvalidArgument {
                    name: "recurrence",
                    ..
                })
            ),
            "{bad:?}"
        );
    }
    assert_eq!(series(&server, "cron"), 0);
}

/// A series in a time zone is stored with its zone (`cron-in`), fires on
/// its times, and the acknowledgement of an occurrence, reading the series
/// back from Redis, schedules the next in the same zone.
#[test]
fn a_cron_expression_in_a_time_zone_fires_and_goes_on_in_its_zone() {
    let server = Server::start_volatile();
    let timers = server.timers("zone");
    let nine = Recurrence::CronIn {
        expression: "0 9 * * MON-FRI".into(),
        zone: "Europe/Berlin".into(),
    };
    let now = timers.server_time_ms().unwrap();
    let first = timers.schedule_recurring("nine", &nine, b"").unwrap();
    assert_eq!(Some(first), nine.next_after(now, now).unwrap());
    let mut c = server.raw().unwrap();
    let spec: String = redis::cmd("HGET")
        .arg("{zone}:repeat")
        .arg("nine")
        .query(&mut c)
        .unwrap();
    assert!(
        spec.starts_with("cron-in ") && spec.ends_with(" Europe/Berlin 0 9 * * MON-FRI"),
        "{spec}"
    );
    let every_second = Recurrence::CronIn {
        expression: "* * * * * *".into(),
        zone: "America/New_York".into(),
    };
    timers
        .schedule_recurring("tick", &every_second, b"")
        .unwrap();
    let node = Node::start(&timers);
    let consumer = Consumer::new(timers.clone(), "c").unwrap();
    let mut last = 0;
    for _ in 0..2 {
        let delivery = next(&consumer);
        assert_eq!(delivery.id, "tick");
        assert_eq!(delivery.deadline_ms % 1_000, 0, "{delivery:?}");
        assert!(delivery.deadline_ms > last);
        assert!(delivery.promoted_ms >= delivery.deadline_ms);
        last = delivery.deadline_ms;
        consumer.finish(&delivery, Verdict::Ack).unwrap();
    }
    let pending = timers.get("tick").unwrap().expect("the next occurrence");
    assert!(pending.deadline_ms > last, "{pending:?}");
    node.stop();
    let atlantis = Recurrence::CronIn {
        expression: "0 9 * * *".into(),
        zone: "Europe/Atlantis".into(),
    };
    assert!(matches!(
        timers.schedule_recurring("bad", &atlantis, b""),
        Err(Error::InvalidArgument {
            name: "recurrence",
            ..
        })
    ));
}

#[test]
fn a_consumer_that_died_holding_an_occurrence_delays_the_series_but_never_doubles_it() {
    let server = Server::start_volatile();
    // Taken over after 300 ms.
    let mut config = Config::new("crash");
    config.visibility_timeout = Duration::from_millis(300);
    let timers = Timers::connect(&server.url(), config).unwrap();
    // Long enough that the next occurrence stays pending while it is
    // looked at.
    let every = Recurrence::Every(Duration::from_millis(1_000));
    let first = timers.schedule_recurring("job", &every, b"").unwrap();
    let node = Node::start(&timers);
    let dying = Consumer::new(timers.clone(), "dying").unwrap();
    let held = next(&dying);
    assert_eq!(held.deadline_ms, first);
    // Until the occurrence is acknowledged, no next one: at least once.
    thread::sleep(Duration::from_millis(150));
    assert_eq!(timers.get("job").unwrap(), None);
    let survivor = Consumer::new(timers.clone(), "survivor").unwrap();
    let taken = next(&survivor);
    assert_eq!((taken.deadline_ms, taken.attempt), (first, 2));
    // Both finish it (the first holder was only slow): the next occurrence
    // is scheduled once, by the acknowledgement that removed the entry.
    survivor.finish(&taken, Verdict::Ack).unwrap();
    let scheduled = timers.get("job").unwrap().expect("the next occurrence");
    assert_eq!(scheduled.deadline_ms - first, 1_000);
    let after = next(&survivor);
    assert_eq!(after.deadline_ms, scheduled.deadline_ms);
    // The slow holder's late acknowledgement, once the next occurrence
    // fired: it schedules nothing, so that occurrence fires once.
    dying.finish(&held, Verdict::Ack).unwrap();
    assert_eq!(timers.get("job").unwrap(), None);
    assert_eq!(timers.metrics().unwrap().pending, 0);
    survivor.finish(&after, Verdict::Ack).unwrap();
    let then = timers.get("job").unwrap().expect("the series goes on");
    assert_eq!(then.deadline_ms - first, 2_000);
    assert!(timers.cancel("job").unwrap());
    node.stop();
}

#[test]
fn a_retried_occurrence_keeps_its_series_and_its_phase() {
    let server = Server::start_volatile();
    let timers = server.timers("retry");
    let every = Recurrence::Every(Duration::from_millis(300));
    let first = timers.schedule_recurring("job", &every, b"").unwrap();
    let node = Node::start(&timers);
    let consumer = Consumer::new(timers.clone(), "c").unwrap();
    let failed = next(&consumer);
    consumer
        .finish(&failed, Verdict::RetryLater(Duration::from_millis(50)))
        .unwrap();
    let retried = next(&consumer);
    assert_eq!((retried.id.as_str(), retried.attempt), ("job", 2));
    assert!(retried.is_recurring());
    assert!(retried.promoted_ms >= failed.promoted_ms + 50);
    consumer.finish(&retried, Verdict::Ack).unwrap();
    let pending = timers.get("job").unwrap().expect("the series goes on");
    assert_eq!(pending.attempt, 1);
    assert_eq!((pending.deadline_ms - first) % 300, 0, "{pending:?}");
    assert!(pending.deadline_ms > retried.promoted_ms);
    assert!(timers.cancel("job").unwrap());
    node.stop();
}

#[test]
fn a_dead_letter_goes_back_to_pending_once() {
    let server = Server::start_volatile();
    let mut config = Config::new("revive");
    config.max_attempts = 1;
    let timers = Timers::connect(&server.url(), config).unwrap();
    let now = timers.server_time_ms().unwrap();
    timers.schedule("charge", now, b"card").unwrap();
    let node = Node::start(&timers);
    let consumer = Consumer::new(timers.clone(), "c").unwrap();
    let failed = next(&consumer);
    consumer
        .finish(&failed, Verdict::RetryLater(Duration::from_millis(1)))
        .unwrap();
    let letter = timers.dead_letters(10).unwrap().pop().expect("dead");
    assert_eq!(
        timers.retry_dead_letter(&letter).unwrap(),
        DeadLetterRetry::Pending
    );
    assert!(timers.dead_letters(10).unwrap().is_empty());
    assert_eq!(
        timers.retry_dead_letter(&letter).unwrap(),
        DeadLetterRetry::Gone
    );
    let again = next(&consumer);
    assert_eq!(
        (again.id.as_str(), &again.payload[..], again.attempt),
        ("charge", &b"card"[..], 1)
    );
    assert!(again.promoted_ms >= again.deadline_ms);
    // Dead again; meanwhile the id was scheduled anew: left alone.
    consumer
        .finish(&again, Verdict::RetryLater(Duration::from_millis(1)))
        .unwrap();
    let letter = timers.dead_letters(10).unwrap().pop().expect("dead");
    timers.schedule("charge", now + 600_000, b"new").unwrap();
    assert_eq!(
        timers.retry_dead_letter(&letter).unwrap(),
        DeadLetterRetry::IdPending
    );
    assert_eq!(timers.get("charge").unwrap().unwrap().payload, b"new");
    assert_eq!(timers.dead_letters(10).unwrap().len(), 1);
    node.stop();
}

#[test]
fn skipping_misfires_keeps_a_recurring_series_going() {
    use purgatorio_redis::Misfire;

    let server = Server::start_volatile();
    let mut config = Config::new("skip");
    config.misfire = Misfire::Skip;
    let timers = Timers::connect(&server.url(), config).unwrap();
    let every = Recurrence::Every(Duration::from_millis(300));
    let first = timers.schedule_recurring("series", &every, b"").unwrap();
    let now = timers.server_time_ms().unwrap();
    timers.schedule("one-shot", now, b"").unwrap();
    // No scheduler runs until both are more than a second overdue.
    thread::sleep(Duration::from_millis(1_700));
    let node = Node::start(&timers);
    let consumer = Consumer::new(timers.clone(), "c").unwrap();
    // The one-shot timer is skipped; the series' overdue occurrence is
    // delivered now, and its acknowledgement schedules the next one.
    let late = next(&consumer);
    assert_eq!(late.id, "series");
    assert!(late.deadline_ms > first + 1_000, "{late:?}");
    assert!(late.promoted_ms >= late.deadline_ms);
    consumer.finish(&late, Verdict::Ack).unwrap();
    let pending = timers.get("series").unwrap().expect("the series goes on");
    assert_eq!((pending.deadline_ms - first) % 300, 0, "{pending:?}");
    let after = next(&consumer);
    assert_eq!(after.deadline_ms, pending.deadline_ms);
    consumer.finish(&after, Verdict::Ack).unwrap();
    assert!(timers.cancel("series").unwrap());
    assert_eq!(timers.get("one-shot").unwrap(), None);
    let m = timers.metrics().unwrap();
    assert_eq!(m.misfired, 2, "{m:?}");
    assert!(consumer
        .poll(Duration::from_millis(300), 10)
        .unwrap()
        .is_empty());
    node.stop();
}
