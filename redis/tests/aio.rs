//! The async face on tokio against a real `redis-server` (installed if
//! missing) on a free loopback port, stopped by PID: delivery never early,
//! cancel, a Redis SIGKILLed and started again mid-run with the stream
//! resuming, acknowledge / retry with backoff / dead letter, extending the
//! visibility, an idle consumer blocking on the stream, and timeouts.
//! Every wait is bounded.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::{most_subscriptions, Server, PATIENCE};
use futures_util::StreamExt;
use purgatorio_redis::{aio, Backoff, Config, Error, Misfire, Scheduled, Scheduler, Step, Timers};
use purgatorio_testkit::wait_for;

/// Async timers of `namespace` on `server`, 500 ms visibility timeout.
async fn timers(server: &Server, namespace: &str) -> aio::Timers {
    let mut config = Config::new(namespace);
    config.visibility_timeout = Duration::from_millis(500);
    aio::Timers::connect(&server.url(), config)
        .await
        .expect("connect")
}

/// The next delivery of `stream`, within [`PATIENCE`].
async fn next(stream: &mut aio::Deliveries) -> aio::Delivery {
    tokio::time::timeout(PATIENCE, stream.next())
        .await
        .expect("a delivery within the patience")
        .expect("the stream goes on")
        .expect("no error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_are_delivered_once_never_early_and_cancelled_ones_never() {
    let server = Server::start_volatile();
    let timers = timers(&server, "async-once").await;
    let base = timers.server_time_ms().await.unwrap() + 300;
    let ids: Vec<String> = (0..300).map(|i| format!("t{i}")).collect();
    let batch: Vec<(&str, u64, &[u8])> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), base + i as u64 * 5, id.as_bytes()))
        .collect();
    timers.schedule_many(&batch).await.unwrap();
    let deadlines: HashMap<&str, u64> = batch.iter().map(|(id, at, _)| (*id, *at)).collect();
    let cancelled: HashSet<String> = (0..300).step_by(10).map(|i| format!("t{i}")).collect();
    for id in &cancelled {
        assert!(timers.cancel(id).await.unwrap(), "{id} was pending");
    }
    assert!(!timers.cancel("t0").await.unwrap(), "cancelled twice");

    let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run());
    let consumer = aio::Consumer::new(timers.clone(), "c").await.unwrap();
    let mut stream = consumer.deliveries();
    let mut seen = HashSet::new();
    while seen.len() < 300 - cancelled.len() {
        let delivery = next(&mut stream).await;
        let now = timers.server_time_ms().await.unwrap();
        assert!(
            delivery.promoted_ms >= delivery.deadline_ms && now >= delivery.deadline_ms,
            "{} early: deadline {}, promoted {}, handled {now}",
            delivery.id,
            delivery.deadline_ms,
            delivery.promoted_ms
        );
        assert_eq!(deadlines[delivery.id.as_str()], delivery.deadline_ms);
        assert_eq!(delivery.payload, delivery.id.as_bytes());
        assert_eq!(delivery.attempt, 1);
        assert!(
            !cancelled.contains(&delivery.id),
            "{} was cancelled",
            delivery.id
        );
        assert!(seen.insert(delivery.id.clone()), "{} twice", delivery.id);
        delivery.ack().await.unwrap();
    }
    // Nothing more comes: the cancelled timers stay cancelled.
    let more = tokio::time::timeout(Duration::from_millis(500), stream.next()).await;
    assert!(more.is_err(), "an extra delivery: {more:?}");
    node.abort();
    let metrics = timers.metrics().await.unwrap();
    assert_eq!(metrics.pending, 0);
    assert_eq!(metrics.unacknowledged, 0);
    assert_eq!(metrics.promoted, 270);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_resumes_after_redis_is_killed_and_started_again() {
    let mut server = Server::start("always");
    let timers = timers(&server, "async-restart").await;
    let base = timers.server_time_ms().await.unwrap() + 200;
    let ids: Vec<String> = (0..40).map(|i| format!("r{i}")).collect();
    let batch: Vec<(&str, u64, &[u8])> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), base + i as u64 * 100, &b"x"[..]))
        .collect();
    timers.schedule_many(&batch).await.unwrap();
    let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run());
    let consumer = aio::Consumer::new(timers.clone(), "c").await.unwrap();
    let mut stream = consumer.deliveries();
    let mut seen = HashSet::new();
    while seen.len() < 5 {
        let delivery = next(&mut stream).await;
        seen.insert(delivery.id.clone());
        delivery.ack().await.unwrap();
    }
    // Killed by PID mid-run, down for a second, started again on the same
    // port from its append-only file.
    server.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::block_in_place(|| server.restart());
    let back = Instant::now();
    let mut first_after = None;
    while seen.len() < ids.len() {
        let delivery = next(&mut stream).await;
        first_after.get_or_insert_with(|| back.elapsed());
        assert!(delivery.promoted_ms >= delivery.deadline_ms, "{delivery:?}");
        seen.insert(delivery.id.clone());
        // An acknowledgement may meet the outage: at least once.
        let _ = delivery.ack().await;
    }
    node.abort();
    let first_after = first_after.expect("deliveries after the restart");
    // A figure, not a bound: how soon depends on the machine.
    eprintln!("first delivery {first_after:?} after Redis answered again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_resumes_after_redis_stalls() {
    let server = Server::start_volatile();
    // Reads block at most 1 s (half the visibility timeout) and time out
    // 200 ms later: the stall outlives two of them. A take-over would come
    // only after the 2 s visibility timeout.
    let mut config = Config::new("async-stall");
    config.response_timeout = Duration::from_millis(200);
    config.visibility_timeout = Duration::from_secs(2);
    let timers = aio::Timers::connect(&server.url(), config).await.unwrap();
    let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run());
    let consumer = aio::Consumer::new(timers.clone(), "c").await.unwrap();
    // The stream is driven all along, through the stall.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let reading = tokio::spawn(async move {
        let mut stream = consumer.deliveries();
        while let Some(delivery) = stream.next().await {
            let delivery = delivery.expect("no error");
            let _ = delivery.ack().await;
            if tx
                .send((
                    delivery.id.clone(),
                    delivery.promoted_ms,
                    delivery.deadline_ms,
                    Instant::now(),
                ))
                .is_err()
            {
                return;
            }
        }
    });
    // Due while Redis is stopped.
    let at = timers.server_time_ms().await.unwrap() + 1_000;
    timers.schedule("during", at, b"").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.signal("STOP");
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.signal("CONT");
    let resumed = Instant::now();
    let (id, promoted_ms, deadline_ms, seen) = tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .expect("a delivery after the stall")
        .expect("the reader runs");
    assert_eq!(id, "during");
    assert!(promoted_ms >= deadline_ms);
    eprintln!(
        "delivered {:?} after Redis went on",
        seen.duration_since(resumed)
    );
    // And after it: a timer scheduled now is delivered as usual.
    let now = timers.server_time_ms().await.unwrap();
    timers.schedule("after", now + 100, b"").await.unwrap();
    let (id, ..) = tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(id, "after");
    reading.abort();
    node.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_timer_comes_back_after_its_backoff_then_goes_to_the_dead_letters() {
    let server = Server::start_volatile();
    let mut config = Config::new("async-retry");
    config.max_attempts = 3;
    let timers = aio::Timers::connect(&server.url(), config).await.unwrap();
    let now = timers.server_time_ms().await.unwrap();
    timers.schedule("flaky", now, b"p").await.unwrap();
    let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run());
    let consumer = aio::Consumer::new(timers.clone(), "c").await.unwrap();
    let mut stream = consumer.deliveries();
    let policy = Backoff::Exponential {
        initial: Duration::from_millis(100),
        max: Duration::from_millis(150),
    };
    let mut last_promoted = 0;
    for attempt in 1..=3 {
        let delivery = next(&mut stream).await;
        assert_eq!((delivery.id.as_str(), delivery.attempt), ("flaky", attempt));
        if attempt > 1 {
            // Due `policy.delay(attempt - 1)` after the retry, by Redis's clock.
            let delay = policy.delay(attempt - 1).as_millis() as u64;
            assert!(
                delivery.promoted_ms >= last_promoted + delay,
                "attempt {attempt} promoted at {} after {last_promoted}",
                delivery.promoted_ms
            );
        }
        last_promoted = delivery.promoted_ms;
        delivery.retry_with(&policy).await.unwrap();
    }
    let dead = timers.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!((dead[0].id.as_str(), dead[0].attempt), ("flaky", 3));
    assert_eq!(dead[0].payload, b"p");
    let more = tokio::time::timeout(Duration::from_millis(400), stream.next()).await;
    assert!(more.is_err(), "delivered after its last attempt: {more:?}");
    node.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extending_the_visibility_keeps_a_slow_delivery_from_other_consumers() {
    let server = Server::start_volatile();
    let timers = timers(&server, "async-extend").await;
    let now = timers.server_time_ms().await.unwrap();
    timers.schedule("slow", now, b"").await.unwrap();
    let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run());
    let slow = aio::Consumer::new(timers.clone(), "slow").await.unwrap();
    let other = aio::Consumer::new(timers.clone(), "other").await.unwrap();
    let delivery = next(&mut slow.deliveries()).await;
    // Held for three visibility timeouts, extended every 250 ms.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(delivery.extend_visibility().await.unwrap());
        let taken = other.poll(Duration::from_millis(1), 10).await.unwrap();
        assert!(taken.is_empty(), "taken over while extended: {taken:?}");
    }
    // Left alone, it is taken over after the visibility timeout, as the
    // next attempt; the first holder no longer holds it.
    let taken = tokio::time::timeout(PATIENCE, async {
        loop {
            let taken = other.poll(Duration::from_millis(100), 10).await.unwrap();
            if !taken.is_empty() {
                return taken;
            }
        }
    })
    .await
    .expect("taken over");
    assert_eq!((taken[0].id.as_str(), taken[0].attempt), ("slow", 2));
    assert!(!delivery.extend_visibility().await.unwrap());
    other.ack_all(&taken).await.unwrap();
    assert_eq!(timers.metrics().await.unwrap().unacknowledged, 0);
    node.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_consumer_waits_in_one_blocking_read() {
    let server = Server::start_volatile();
    // A 30 s visibility timeout: the stream looks for abandoned entries
    // every 15 s, and blocks on the stream in between.
    let timers = aio::Timers::connect(&server.url(), Config::new("async-idle"))
        .await
        .unwrap();
    let consumer = aio::Consumer::new(timers.clone(), "idle").await.unwrap();
    let mut stream = consumer.deliveries();
    tokio::task::block_in_place(|| server.reset_stats());
    let idle = tokio::time::timeout(Duration::from_secs(2), stream.next()).await;
    assert!(idle.is_err());
    let stats = tokio::task::block_in_place(|| server.commandstats());
    let reads = stats.get("xreadgroup").map_or(0, |(calls, _)| *calls);
    assert!(reads <= 1, "{reads} XREADGROUP calls in 2 s idle");
    // The blocked read ends as soon as a timer is due.
    let now = timers.server_time_ms().await.unwrap();
    timers.schedule("wake", now, b"").await.unwrap();
    let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run());
    let delivery = next(&mut stream).await;
    assert_eq!(delivery.id, "wake");
    node.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_by_id_on_the_async_face() {
    let server = Server::start_volatile();
    let timers = timers(&server, "async-manage").await;
    let now = timers.server_time_ms().await.unwrap();
    timers.schedule("a", now + 60_000, b"pa").await.unwrap();
    timers.schedule("b", now + 30_000, b"pb").await.unwrap();
    let a = timers.get("a").await.unwrap().expect("pending");
    assert_eq!(
        (a.deadline_ms, a.attempt, a.payload.as_slice()),
        (now + 60_000, 1, &b"pa"[..])
    );
    assert_eq!(timers.get("nope").await.unwrap(), None);
    let listed = timers.earliest(10).await.unwrap();
    assert_eq!(
        listed,
        [
            ("b".to_string(), now + 30_000),
            ("a".to_string(), now + 60_000)
        ]
    );
    assert!(timers.reschedule("a", now + 10_000).await.unwrap());
    assert_eq!(timers.earliest(1).await.unwrap()[0].0, "a");
    assert!(!timers.reschedule("nope", now).await.unwrap());
    assert!(matches!(
        timers.earliest(0).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(timers.metrics().await.unwrap().pending, 2);
    // Fired now: delivered at once, not 30 s later.
    assert!(timers.fire_now("b").await.unwrap());
    assert_eq!(timers.due(10).await.unwrap()[0].0, "b");
    assert!(timers.in_flight(10).await.unwrap().is_empty());
    let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run());
    let consumer = aio::Consumer::new(timers.clone(), "c").await.unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(5), consumer.deliveries().next())
        .await
        .expect("fired now")
        .unwrap()
        .unwrap();
    assert_eq!(delivery.id, "b");
    let held = timers.in_flight(10).await.unwrap();
    assert_eq!((held[0].id.as_str(), held[0].consumer.as_str()), ("b", "c"));
    delivery.ack().await.unwrap();
    assert!(timers.in_flight(10).await.unwrap().is_empty());
    node.abort();
    assert!(matches!(
        timers.schedule("", now, b"").await,
        Err(Error::InvalidId { .. })
    ));
    assert!(matches!(
        timers.schedule("x", u64::MAX, b"").await,
        Err(Error::DeadlineOutOfRange { .. })
    ));
    assert!(matches!(
        aio::Consumer::new(timers.clone(), "").await,
        Err(Error::InvalidArgument { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_is_a_timeout_not_a_hang() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", listener.local_addr().unwrap());
    let _held = std::thread::spawn(move || {
        let held: Vec<_> = listener.incoming().take(16).flatten().collect();
        std::thread::sleep(Duration::from_secs(10));
        drop(held);
    });
    let mut config = Config::new("silent");
    config.response_timeout = Duration::from_millis(200);
    config.retries = 2;
    let connected =
        tokio::time::timeout(Duration::from_secs(5), aio::Timers::connect(&url, config))
            .await
            .expect("connect hung on a server that never answers");
    match connected {
        Err(Error::Unavailable { tries: 2, last }) => assert!(last.is_timeout(), "{last}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recurring_timer_on_the_async_face_fires_on_its_phase_until_cancelled() {
    use purgatorio_redis::Recurrence;

    let server = Server::start_volatile();
    let timers = timers(&server, "async-every").await;
    let every = Recurrence::Every(Duration::from_millis(200));
    let first = timers
        .schedule_recurring("tick", &every, b"p")
        .await
        .unwrap();
    let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run());
    let consumer = aio::Consumer::new(timers.clone(), "c").await.unwrap();
    let mut stream = consumer.deliveries();
    for k in 1..=3 {
        let delivery = next(&mut stream).await;
        assert!(delivery.is_recurring());
        assert_eq!(delivery.deadline_ms, first + (k - 1) * 200, "{delivery:?}");
        assert!(delivery.promoted_ms >= delivery.deadline_ms);
        delivery.ack().await.unwrap();
        let pending = timers.get("tick").await.unwrap().expect("the next one");
        assert_eq!(pending.deadline_ms, first + k * 200);
    }
    assert!(timers.cancel("tick").await.unwrap());
    assert_eq!(timers.get("tick").await.unwrap(), None);
    let more = tokio::time::timeout(Duration::from_millis(600), stream.next()).await;
    assert!(more.is_err(), "fired after its cancel: {more:?}");
    node.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_goes_back_to_pending_on_the_async_face() {
    use purgatorio_redis::DeadLetterRetry;

    let server = Server::start_volatile();
    let mut config = Config::new("async-revive");
    config.max_attempts = 1;
    let timers = aio::Timers::connect(&server.url(), config).await.unwrap();
    let now = timers.server_time_ms().await.unwrap();
    timers.schedule("charge", now, b"card").await.unwrap();
    let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run());
    let consumer = aio::Consumer::new(timers.clone(), "c").await.unwrap();
    let mut stream = consumer.deliveries();
    next(&mut stream)
        .await
        .retry(Duration::from_millis(1))
        .await
        .unwrap();
    let letter = timers.dead_letters(10).await.unwrap().pop().expect("dead");
    assert_eq!(
        timers.retry_dead_letter(&letter).await.unwrap(),
        DeadLetterRetry::Pending
    );
    assert_eq!(
        timers.retry_dead_letter(&letter).await.unwrap(),
        DeadLetterRetry::Gone
    );
    let again = next(&mut stream).await;
    assert_eq!((again.id.as_str(), again.attempt), ("charge", 1));
    again.ack().await.unwrap();
    assert!(timers.dead_letters(10).await.unwrap().is_empty());
    node.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_that_waits_longer_than_the_response_timeout_is_no_timeout() {
    let server = Server::start_volatile();
    let mut config = Config::new("async-long-poll");
    config.response_timeout = Duration::from_millis(100);
    config.visibility_timeout = Duration::from_millis(500);
    let timers = aio::Timers::connect(&server.url(), config).await.unwrap();
    let consumer = aio::Consumer::new(timers.clone(), "c").await.unwrap();
    // A wait 10 times the response timeout is answered, empty, not
    // taken for a Redis that does not answer.
    let polled = consumer.poll(Duration::from_secs(1), 10).await.unwrap();
    assert!(polled.is_empty());
}

/// Commands Redis ran (the test's own INFO and CONFIG excluded) and their
/// µs of Redis CPU.
fn redis_calls(server: &Server) -> (u64, u64) {
    server
        .commandstats()
        .into_iter()
        .filter(|(name, _)| !name.starts_with("info") && !name.starts_with("config"))
        .fold((0, 0), |(calls, us), (_, (c, u))| (calls + c, us + u))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_timer_costs_redis_on_the_async_face() {
    let server = Server::start_volatile();
    let timers = timers(&server, "async-cost").await;
    let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run());
    let consumer = aio::Consumer::new(timers.clone(), "c").await.unwrap();
    let mut stream = consumer.deliveries();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let total = 5_000u64;
    for batched in [false, true] {
        tokio::task::block_in_place(|| server.reset_stats());
        let now = timers.server_time_ms().await.unwrap();
        let ids: Vec<String> = (0..total).map(|i| format!("t{batched}{i}")).collect();
        let batch: Vec<(&str, u64, &[u8])> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), now + 300 + i as u64 / 10, &b"payload"[..]))
            .collect();
        timers.schedule_many(&batch).await.unwrap();
        for _ in 0..total {
            let delivery = next(&mut stream).await;
            if batched {
                delivery.ack_in_batch();
            } else {
                delivery.ack().await.unwrap();
            }
        }
        // The stream sent what was owed before each read: at most the last
        // read's worth is left.
        let owed = timers.metrics().await.unwrap().unacknowledged;
        assert!(owed <= 100, "{owed} left unacknowledged");
        consumer.flush_acks().await.unwrap();
        assert_eq!(timers.metrics().await.unwrap().unacknowledged, 0);
        let (commands, us) = tokio::task::block_in_place(|| redis_calls(&server));
        let per_timer = commands as f64 / total as f64;
        eprintln!(
            "async face, {}: {per_timer:.2} commands and {:.1} µs of Redis CPU per timer",
            if batched { "ack_in_batch" } else { "ack each" },
            us as f64 / total as f64
        );
        let bound = if batched { 5.0 } else { 8.0 };
        assert!(per_timer <= bound, "{per_timer:.2} commands per timer");
    }
    node.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_node_stops_when_its_shutdown_completes() {
    let server = Server::start_volatile();
    let timers = timers(&server, "async-shutdown").await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run_until(async {
        let _ = stopped.await;
    }));
    // Running: a due timer is promoted.
    let now = timers.server_time_ms().await.unwrap();
    timers.schedule("before", now, b"").await.unwrap();
    let promoted = tokio::time::timeout(PATIENCE, async {
        while timers.metrics().await.unwrap().promoted < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(promoted.is_ok(), "the node promotes while it runs");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(2), node)
        .await
        .expect("the node ends at its shutdown")
        .unwrap()
        .unwrap();
    // Stopped: nothing is promoted any more.
    timers.schedule("after", now, b"").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(timers.metrics().await.unwrap().promoted, 1);
}

/// `Config::replicas_to_ack` holds on the async face too: a schedule ends
/// with `WAIT`, and the connection's timeout leaves room for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_waits_for_replicas_on_the_async_face_too() {
    let server = Server::start_volatile();
    // A server with no replica: WAIT 1 counts none after its 300 ms, longer
    // than the 200 ms response timeout.
    let mut config = Config::new("async-wait").replicas_to_ack(1, Duration::from_millis(300));
    config.response_timeout = Duration::from_millis(200);
    let timers = aio::Timers::connect(&server.url(), config).await.unwrap();
    let now = timers.server_time_ms().await.unwrap();
    // Stored, not replicated: an outcome, not an error.
    assert_eq!(
        timers.schedule("t", now + 60_000, b"").await.unwrap(),
        Scheduled::NotReplicated {
            acked: 0,
            wanted: 1
        }
    );
    assert_eq!(
        timers.get("t").await.unwrap().unwrap().deadline_ms,
        now + 60_000
    );
    let every = purgatorio_redis::Recurrence::Every(Duration::from_secs(60));
    timers.schedule_recurring("r", &every, b"").await.unwrap();
    assert!(timers.get("r").await.unwrap().is_some());
}

/// Saturated deliveries per second, the async stream (`ack_in_batch`)
/// beside the blocking consumer's `run`, on one `redis-server`, alternating
/// `PURGATORIO_REDIS_ROUNDS` rounds (default 2) of 100,000 timers all due at
/// once. A measurement, run alone in release:
/// `cargo test --release -p purgatorio-redis --features tokio --test aio saturated -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run alone, in release"]
async fn saturated_deliveries_async_beside_blocking() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    let server = Server::start_volatile();
    let rounds: usize = std::env::var("PURGATORIO_REDIS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2);
    let total = 100_000u64;
    for round in 0..rounds {
        for face in ["async", "blocking"] {
            let namespace = format!("sat-{face}-{round}");
            let timers = timers(&server, &namespace).await;
            let blocking = tokio::task::block_in_place(|| server.timers(&namespace));
            let now = timers.server_time_ms().await.unwrap();
            let ids: Vec<String> = (0..total).map(|i| format!("t{i}")).collect();
            let batch: Vec<(&str, u64, &[u8])> = ids
                .iter()
                .map(|id| (id.as_str(), now + 1_000, &b"payload"[..]))
                .collect();
            timers.schedule_many(&batch).await.unwrap();
            tokio::task::block_in_place(|| server.reset_stats());
            let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run());
            let started = Instant::now();
            let first_due = Duration::from_millis(1_000);
            match face {
                "async" => {
                    let consumer = aio::Consumer::new(timers.clone(), "c").await.unwrap();
                    let mut stream = consumer.deliveries();
                    for _ in 0..total {
                        next(&mut stream).await.ack_in_batch();
                    }
                    consumer.flush_acks().await.unwrap();
                }
                _ => {
                    let consumer = purgatorio_redis::Consumer::new(blocking, "c").unwrap();
                    let stop = consumer.stop_handle();
                    let seen = Arc::new(AtomicU64::new(0));
                    let counter = Arc::clone(&seen);
                    let running = std::thread::spawn(move || {
                        consumer
                            .run(|_| {
                                counter.fetch_add(1, Ordering::Relaxed);
                                purgatorio_redis::Verdict::Ack
                            })
                            .unwrap()
                    });
                    while seen.load(Ordering::Relaxed) < total {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    stop.stop();
                    tokio::task::block_in_place(|| running.join().unwrap());
                }
            }
            let secs = started.elapsed().saturating_sub(first_due).as_secs_f64();
            node.abort();
            let (commands, us) = tokio::task::block_in_place(|| redis_calls(&server));
            eprintln!(
                "round {round} {face:8}: {:>7.0} deliveries/s, {:.2} commands and {:.1} µs of Redis CPU per timer",
                total as f64 / secs,
                commands as f64 / total as f64,
                us as f64 / total as f64
            );
        }
    }
}

/// An error Redis keeps giving (the stream's key holds a string) is
/// yielded, and the stream goes on after it, but a pause later each time:
/// a caller that logs and goes on does not spin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_redis_keeps_giving_is_yielded_with_a_pause_between() {
    let server = Server::start_volatile();
    let timers = timers(&server, "async-wrong").await;
    let consumer = aio::Consumer::new(timers.clone(), "w").await.unwrap();
    tokio::task::block_in_place(|| {
        let mut c = server.raw().unwrap();
        redis::cmd("DEL")
            .arg("{async-wrong}:stream")
            .query::<()>(&mut c)
            .unwrap();
        redis::cmd("SET")
            .arg("{async-wrong}:stream")
            .arg("not a stream")
            .query::<()>(&mut c)
            .unwrap();
    });
    let mut stream = consumer.deliveries();
    let mut errors = 0;
    let until = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Some(item)) = tokio::time::timeout_at(until, stream.next()).await {
        assert!(item.is_err(), "a delivery from a key that is no stream");
        errors += 1;
    }
    // 500 ms apart: at most 5 in 2 s (without the pause, thousands).
    assert!((1..=5).contains(&errors), "{errors} errors in 2 s");
}

/// As the blocking node's: a wake subscription the server drops at once is
/// made again with backoff, and the node listens again once the drops stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_wake_subscription_is_made_again_with_backoff() {
    let server = Server::start_volatile();
    let timers = timers(&server, "aresub").await;
    let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run());
    let wait_subscribed = || async {
        let deadline = Instant::now() + PATIENCE;
        while server.subscribers("aresub") != 1 {
            assert!(Instant::now() < deadline, "no subscription");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    wait_subscribed().await;
    let mut c = server.raw().unwrap();
    let mut killed = 0;
    let started = Instant::now();
    for _ in 0..200 {
        killed += Server::kill_subscriptions(&mut c);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let allowed = most_subscriptions(started.elapsed());
    // Subscribing again at once would be one subscription per kill (200).
    assert!(
        killed <= allowed,
        "{killed} subscriptions killed in 200 tries over {:?}, at most {allowed} with backoff",
        started.elapsed()
    );
    wait_subscribed().await;
    let now = timers.server_time_ms().await.unwrap();
    timers.schedule("woken", now + 100, b"p").await.unwrap();
    let deadline = Instant::now() + PATIENCE;
    while timers.metrics().await.unwrap().promoted != 1 {
        assert!(Instant::now() < deadline, "not promoted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    node.abort();
}

/// The SHA1 of the promotion script, as the blocking node sends it: the
/// steps of a node that fires misfires (so sends no misfire page) on an
/// empty namespace of `server`, read back from `SLOWLOG` (promotion is the
/// script of 5 keys).
fn promote_sha(server: &Server) -> String {
    let mut c = server.raw().unwrap();
    let set = |c: &mut redis::Connection, key: &str, value: &str| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(key)
            .arg(value)
            .query::<()>(c)
            .unwrap()
    };
    set(&mut c, "slowlog-log-slower-than", "0");
    redis::cmd("SLOWLOG")
        .arg("RESET")
        .query::<()>(&mut c)
        .unwrap();
    let mut config = Config::new("sha-of-promote");
    config.misfire = Misfire::FireNow;
    let timers = Timers::connect(&server.url(), config).unwrap();
    let node = Scheduler::new(timers);
    while node.step().unwrap() == Step::Again {}
    let log: Vec<(u64, u64, u64, Vec<String>)> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(128)
        .query::<Vec<redis::Value>>(&mut c)
        .unwrap()
        .into_iter()
        .map(|entry| {
            let redis::Value::Array(fields) = entry else {
                panic!("a SLOWLOG entry is an array: {entry:?}")
            };
            redis::from_redis_value(&redis::Value::Array(fields[..4].to_vec())).unwrap()
        })
        .collect();
    set(&mut c, "slowlog-log-slower-than", "10000");
    log.into_iter()
        .map(|(_, _, _, args)| args)
        .find(|args| args.len() > 2 && args[0].eq_ignore_ascii_case("evalsha") && args[2] == "5")
        .map(|args| args[1].clone())
        .expect("the promotion call in SLOWLOG")
}

/// `INFO commandstats`' `rejected_calls` of `EVALSHA` on `c`: script
/// calls refused before they ran (here, by an ACL) so far.
fn evalsha_refused(c: &mut redis::Connection) -> Option<u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c).ok()?;
    let stats = info
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:"))?;
    stats
        .split(',')
        .find_map(|field| field.strip_prefix("rejected_calls="))?
        .parse()
        .ok()
}

/// A misfire page that fails lets the node promote nothing: with
/// [`Misfire::Skip`], timers overdue past the misfire threshold are
/// dropped, never delivered, however long the misfire call keeps failing.
/// The node's user may run only the promotion script (Redis's ACL
/// `+evalsha|<sha>`), so each misfire page is refused while each promotion
/// would succeed; once the misfire script is allowed, the timers are
/// skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_misfire_page_lets_nothing_be_promoted() {
    let server = Server::start_volatile();
    let sha = promote_sha(&server);
    let mut c = server.raw().unwrap();
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("node")
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-evalsha")
        .arg(format!("+evalsha|{sha}"))
        .query::<()>(&mut c)
        .unwrap();
    let namespace = "async-misfire-refused";
    let mut config = Config::new(namespace);
    config.misfire = Misfire::Skip;
    let admin = aio::Timers::connect(&server.url(), config.clone())
        .await
        .unwrap();
    let now = admin.server_time_ms().await.unwrap();
    let ids: Vec<String> = (0..10).map(|i| format!("late{i}")).collect();
    let batch: Vec<(&str, u64, &[u8])> = ids
        .iter()
        .map(|id| (id.as_str(), now - 10_000, &b"x"[..]))
        .collect();
    admin.schedule_many(&batch).await.unwrap();

    let url = format!("redis://node:secret@127.0.0.1:{}", server.port);
    let node_timers = aio::Timers::connect(&url, config).await.unwrap();
    let node = tokio::spawn(aio::Scheduler::new(node_timers).run());
    // Two refusals: the loop went round once after its first failed page,
    // and would have promoted in between had it tried.
    let mut watch = server.raw().unwrap();
    tokio::task::spawn_blocking(move || {
        wait_for("two refused misfire pages", PATIENCE, || {
            (evalsha_refused(&mut watch)? >= 2).then_some(())
        })
    })
    .await
    .unwrap();
    let metrics = admin.metrics().await.unwrap();
    assert_eq!(metrics.promoted, 0, "overdue timers delivered: {metrics:?}");
    assert_eq!(metrics.pending, 10, "{metrics:?}");

    // Allowed the misfire script, the node skips them.
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("node")
        .arg("+evalsha")
        .query::<()>(&mut c)
        .unwrap();
    let skipped = tokio::time::timeout(PATIENCE, async {
        loop {
            let metrics = admin.metrics().await.unwrap();
            if metrics.misfired == 10 {
                break metrics;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the misfires skipped within the patience");
    node.abort();
    assert_eq!(skipped.promoted, 0, "{skipped:?}");
    assert_eq!(skipped.pending, 0, "{skipped:?}");
}

/// `aio::wait_for_redis`: a connect started before Redis waits for it, past
/// what its own retries allow, and succeeds once Redis is up; with a
/// deadline it gives up with the last error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_start_waits_for_redis() {
    let port = purgatorio_testkit::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let gave_up = aio::wait_for_redis("early", Some(Duration::from_millis(300)), || {
        aio::Timers::connect(&url, Config::new("early"))
    })
    .await;
    assert!(
        matches!(gave_up, Err(Error::Unavailable { .. })),
        "{gave_up:?}"
    );
    let waiting = tokio::spawn({
        let url = url.clone();
        async move {
            aio::wait_for_redis("early", None, || {
                aio::Timers::connect(&url, Config::new("early"))
            })
            .await
        }
    });
    // Past what the retries of one connect allow (0.8 s).
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(!waiting.is_finished());
    let _server = tokio::task::block_in_place(|| Server::start_on("volatile", [port]));
    let timers = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("connected once Redis is up")
        .unwrap()
        .unwrap();
    timers.server_time_ms().await.unwrap();
}
