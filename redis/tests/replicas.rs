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

/// The `INFO replication` line `field:` of `server`.
fn replication(server: &Server, field: &str) -> String {
    let mut c = server.raw().unwrap();
    let info: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// A master without its replica answers every schedule `NotReplicated`,
/// counted in the metrics; once a replica (re)joins, schedules are
/// replicated again (`Stored`), with no restart and nothing to reset.
#[test]
fn schedules_are_replicated_again_once_a_replica_joins_and_the_spell_is_counted() {
    let master = Server::start_volatile();
    let config = Config::new("rejoin").replicas_to_ack(1, Duration::from_millis(200));
    let timers = Timers::connect(&master.url(), config).unwrap();
    let at = timers.server_time_ms().unwrap() + 3_600_000;
    let batch: Vec<(&str, u64, &[u8])> = vec![("a", at, b"p"), ("b", at, b"p")];
    assert!(matches!(
        timers.schedule_many(&batch).unwrap(),
        Scheduled::NotReplicated { acked: 0, .. }
    ));
    assert!(matches!(
        timers.schedule("c", at, b"p").unwrap(),
        Scheduled::NotReplicated { .. }
    ));
    assert_eq!(timers.metrics().unwrap().not_replicated, 3);
    // A replica joins.
    let replica = Server::start_volatile();
    let mut c = replica.raw().unwrap();
    redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query::<()>(&mut c)
        .unwrap();
    wait_for("the replica's link", PATIENCE, || {
        (replication(&replica, "master_link_status") == "up").then_some(())
    });
    let mut k = 0;
    wait_for("a replicated schedule", PATIENCE, || {
        k += 1;
        let outcome = timers.schedule(&format!("d{k}"), at, b"p").unwrap();
        (outcome == Scheduled::Stored).then_some(())
    });
    // Each timer is on the master, and now on the replica too.
    assert_eq!(timers.metrics().unwrap().pending, 3 + k);
    let held: u64 = redis::cmd("HLEN")
        .arg("{rejoin}:timer")
        .query(&mut c)
        .unwrap();
    assert_eq!(held, 3 + k);
}
