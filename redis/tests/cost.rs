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
