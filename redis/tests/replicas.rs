//! `Config::replicas_to_ack` on a master with no replica (as after a
//! failover, until a replica rejoins): every schedule is stored and
//! delivered, and says it was not replicated in time,
//! `Scheduled::NotReplicated`, an outcome distinct from an error, so that
//! no caller retries (and duplicates) a stored timer or reports a timer
//! that fires as failed. A consumer's retry (`Verdict::RetryLater`) goes
//! through too, instead of leaving the delivery unacknowledged to come
//! back twice. (The CLI: `tests/input.rs`.)

mod common;

use std::time::Duration;

use common::{Server, PATIENCE};
use purgatorio_redis::{Config, Consumer, Scheduled, Scheduler, Timers, Verdict};
use purgatorio_testkit::wait_for;

#[test]
fn a_schedule_stored_but_not_replicated_is_an_outcome_and_is_delivered() {
    let server = Server::start_volatile();
    let mut config = Config::new("wait").replicas_to_ack(1, Duration::from_millis(50));
    config.visibility_timeout = Duration::from_secs(30);
    let timers = Timers::connect(&server.url(), config).unwrap();
    let now = timers.server_time_ms().unwrap();
    let not_replicated = Scheduled::NotReplicated {
        acked: 0,
        wanted: 1,
    };
    assert_eq!(timers.schedule("a", now, b"p").unwrap(), not_replicated);
    let batch: Vec<(&str, u64, &[u8])> = vec![("b", now, b"p"), ("c", now + 100, b"p")];
    assert_eq!(timers.schedule_many(&batch).unwrap(), not_replicated);
    let node = Scheduler::new(timers.clone());
    let stop = node.stop_handle();
    let running = std::thread::spawn(move || node.run());
    let consumer = Consumer::new(timers.clone(), "c").unwrap();
    let mut seen = Vec::new();
    let mut retried = false;
    wait_for("the deliveries", PATIENCE, || {
        for delivery in consumer.poll(Duration::from_millis(100), 10).unwrap() {
            if delivery.id == "a" && !retried {
                // A retry is a schedule too: not replicated, and no error,
                // so the delivery is acknowledged and comes back once.
                consumer
                    .finish(&delivery, Verdict::RetryLater(Duration::from_millis(50)))
                    .unwrap();
                retried = true;
            } else {
                consumer.finish(&delivery, Verdict::Ack).unwrap();
            }
            seen.push((delivery.id, delivery.attempt));
        }
        (seen.len() >= 4).then_some(())
    });
    seen.sort();
    let want: Vec<(String, u32)> = [("a", 1), ("a", 2), ("b", 1), ("c", 1)]
        .iter()
        .map(|(id, attempt)| (id.to_string(), *attempt))
        .collect();
    assert_eq!(seen, want);
    let metrics = timers.metrics().unwrap();
    assert_eq!((metrics.pending, metrics.unacknowledged), (0, 0));
    stop.stop();
    running.join().unwrap().unwrap();
}
