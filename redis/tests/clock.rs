//! Scheduler nodes whose clocks are wrong never fire early: each node is a
//! real CLI process whose clock `libfaketime` moves 30 s fast, 30 s slow, a
//! day ahead, or runs at double speed (the monotonic clock too). Promotion
//! reads Redis's `TIME` in the script; a node that used its own clock would
//! deliver these timers up to 30 s early, and this test would see it.

mod common;

use std::thread;
use std::time::Duration;

use common::{spawn_cli, Server, PATIENCE};
use purgatorio_redis::Consumer;
use purgatorio_testkit::{require_program, wait_for, TempDir};

#[test]
fn nodes_with_wrong_clocks_never_fire_early_by_redis_time() {
    let faketime = require_program("faketime", "faketime");
    let faketime = faketime.to_str().unwrap();
    let server = Server::start("everysec");
    let dir = TempDir::new("purgatorio-redis-clock");
    let url = server.url();
    let nodes: Vec<_> = ["+30s", "-30s", "+1d", "+0 x2"]
        .iter()
        .enumerate()
        .map(|(i, clock)| {
            spawn_cli(
                &[faketime, "-f", clock],
                &url,
                "clock",
                &["scheduler"],
                &dir,
                &format!("node{i}"),
            )
        })
        .collect();
    // Every node is listening before anything is scheduled.
    let mut raw = server.raw().unwrap();
    wait_for("4 nodes on the wake channel", PATIENCE, || {
        let (_, n): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("{clock}:wake")
            .query(&mut raw)
            .ok()?;
        (n == 4).then_some(())
    });
    let timers = server.timers("clock");
    let now = timers.server_time_ms().unwrap();
    let total = 200u64;
    let batch: Vec<(String, u64)> = (0..total)
        .map(|i| (format!("c{i}"), now + 1_000 + i * 10))
        .collect();
    let items: Vec<(&str, u64, &[u8])> = batch
        .iter()
        .map(|(id, at)| (id.as_str(), *at, &b"p"[..]))
        .collect();
    timers.schedule_many(&items).unwrap();
    let consumer = Consumer::new(timers.clone(), "judge").unwrap();
    let mut seen = Vec::new();
    wait_for("every delivery", PATIENCE, || {
        for delivery in consumer.poll(Duration::from_millis(100), 100).unwrap() {
            // Redis's clock when the delivery is in hand: the judge.
            let handled = timers.server_time_ms().unwrap();
            seen.push((delivery.id.clone(), delivery.deadline_ms, handled));
            consumer.ack_all(&[delivery]).unwrap();
        }
        (seen.len() as u64 >= total).then_some(())
    });
    let early: Vec<_> = seen.iter().filter(|(_, at, now)| now < at).collect();
    assert!(
        early.is_empty(),
        "{} of {total} delivered before their deadline by Redis time, e.g. {:?}",
        early.len(),
        early.first()
    );
    assert_eq!(seen.len() as u64, total);
    thread::sleep(Duration::from_millis(200));
    for mut node in nodes {
        assert!(
            node.child().try_wait().unwrap().is_none(),
            "a node with a wrong clock exited"
        );
    }
}
