//! What a timer costs Redis, counted by Redis itself (`INFO commandstats`,
//! commands inside scripts included): scheduled in batches, promoted in
//! batches, delivered and acknowledged in batches, it stays within 5
//! commands end to end; an idle consumer waits in one blocking read rather
//! than polling.

mod common;

use std::thread;
use std::time::Duration;

use common::{Server, PATIENCE};
use purgatorio_redis::{Consumer, Scheduler, Verdict};
use purgatorio_testkit::wait_for;

/// Calls counted, all commands but the test's own look at the stats.
fn calls(server: &Server) -> (u64, u64) {
    server
        .commandstats()
        .into_iter()
        .filter(|(name, _)| !name.starts_with("info") && !name.starts_with("config"))
        .fold((0, 0), |(calls, us), (_, (c, u))| (calls + c, us + u))
}

#[test]
fn a_timer_costs_at_most_five_redis_commands_end_to_end() {
    let server = Server::start("no");
    let timers = server.timers("cost");
    let scheduler = Scheduler::new(timers.clone());
    let stop_scheduler = scheduler.stop_handle();
    let scheduler = thread::spawn(move || scheduler.run().unwrap());
    let consumer = Consumer::new(timers.clone(), "c").unwrap();
    let stop_consumer = consumer.stop_handle();
    let delivered = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = std::sync::Arc::clone(&delivered);
    let consumer = thread::spawn(move || {
        consumer
            .run(|_| {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Verdict::Ack
            })
            .unwrap()
    });
    thread::sleep(Duration::from_millis(200));
    server.reset_stats();
    let total = 5_000u64;
    let now = timers.server_time_ms().unwrap();
    let ids: Vec<String> = (0..total).map(|i| format!("t{i}")).collect();
    let batch: Vec<(&str, u64, &[u8])> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), now + 300 + i as u64 / 10, &b"payload"[..]))
        .collect();
    timers.schedule_many(&batch).unwrap();
    wait_for("every delivery", PATIENCE, || {
        (delivered.load(std::sync::atomic::Ordering::SeqCst) >= total).then_some(())
    });
    wait_for("the last acks", PATIENCE, || {
        (timers.metrics().ok()?.unacknowledged == 0).then_some(())
    });
    let (commands, us) = calls(&server);
    // Acknowledged entries leave the stream (trimmed in whole nodes of at
    // most 100 entries), whatever the number delivered.
    let left: u64 = redis::cmd("XLEN")
        .arg("{cost}:stream")
        .query(&mut server.raw().unwrap())
        .unwrap();
    assert!(left <= 200, "{left} entries left in the stream");
    stop_scheduler.stop();
    stop_consumer.stop();
    scheduler.join().unwrap();
    consumer.join().unwrap();
    let per_timer = commands as f64 / total as f64;
    eprintln!(
        "{per_timer:.2} commands and {:.1} µs of Redis CPU per timer: {:?}",
        us as f64 / total as f64,
        server.commandstats()
    );
    assert!(per_timer <= 5.0, "{per_timer:.2} commands per timer");
}

#[test]
fn an_idle_consumer_waits_in_one_blocking_read() {
    let server = Server::start("no");
    let timers = server.timers("idle");
    let mut config = timers.config().clone();
    config.visibility_timeout = Duration::from_secs(30);
    let timers = purgatorio_redis::Timers::connect(&server.url(), config).unwrap();
    let consumer = Consumer::new(timers, "idle").unwrap();
    let stop = consumer.stop_handle();
    let running = thread::spawn(move || consumer.run(|_| Verdict::Ack).unwrap());
    thread::sleep(Duration::from_millis(300));
    server.reset_stats();
    thread::sleep(Duration::from_secs(3));
    let stats = server.commandstats();
    stop.stop();
    running.join().unwrap();
    let reads = stats.get("xreadgroup").map_or(0, |s| s.0);
    let claims = stats.get("xautoclaim").map_or(0, |s| s.0);
    assert!(
        reads + claims == 0,
        "an idle consumer called Redis in 3 s: {stats:?}"
    );
}

#[test]
fn trimming_never_removes_an_entry_still_pending() {
    let server = Server::start("no");
    let timers = server.timers("trim");
    let node = Scheduler::new(timers.clone());
    let stop = node.stop_handle();
    let running = thread::spawn(move || node.run().unwrap());
    let holder = Consumer::new(timers.clone(), "holder").unwrap();
    let other = Consumer::new(timers.clone(), "other").unwrap();
    timers
        .schedule("held", timers.server_time_ms().unwrap(), b"keep me")
        .unwrap();
    let held = wait_for("the held delivery", PATIENCE, || {
        holder
            .read_new(Duration::from_millis(100), 1)
            .unwrap()
            .pop()
    });
    // Many later entries, all acknowledged by another consumer: each ack
    // trims the stream, never below the held entry.
    let now = timers.server_time_ms().unwrap();
    let ids: Vec<String> = (0..1_000).map(|i| format!("later{i}")).collect();
    let batch: Vec<(&str, u64, &[u8])> =
        ids.iter().map(|id| (id.as_str(), now, &b""[..])).collect();
    timers.schedule_many(&batch).unwrap();
    let mut acked = 0;
    wait_for("the later deliveries", PATIENCE, || {
        let got = other.read_new(Duration::from_millis(100), 100).unwrap();
        acked += got.len();
        other.ack_all(&got).unwrap();
        (acked >= 1_000).then_some(())
    });
    let taken = wait_for("the take-over", PATIENCE, || {
        other.take_over(10).unwrap().pop()
    });
    assert_eq!(
        (taken.id.as_str(), &taken.payload[..]),
        ("held", &b"keep me"[..])
    );
    assert_eq!(taken.deadline_ms, held.deadline_ms);
    other.ack_all(&[taken]).unwrap();
    let left: u64 = redis::cmd("XLEN")
        .arg("{trim}:stream")
        .query(&mut server.raw().unwrap())
        .unwrap();
    assert!(left <= 200, "{left} entries left once nothing is pending");
    stop.stop();
    running.join().unwrap();
}
