//! The async face on a real Redis Cluster (3 masters, 1 replica each, as
//! `tests/cluster.rs` starts it): a namespace's timers scheduled, promoted
//! and delivered through `aio::Timers::connect_cluster`, its master
//! SIGKILLed mid-delivery, and delivery going on through the replica that
//! took over: none early, and the timers scheduled after the failover all
//! delivered.
#![cfg(feature = "cluster")]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use purgatorio_redis::{aio, Config, Scheduled};
use purgatorio_testkit::{wait_for, RedisCluster};

/// Deliveries: `id → (deadline, promoted)` of the first, and how many.
#[derive(Default)]
struct Seen {
    first: HashMap<String, (u64, u64)>,
    deliveries: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_face_follows_a_cluster_failover() {
    let mut cluster = RedisCluster::start(3, 1, 1_000);
    let urls = cluster.urls();
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    let namespace = "async-cluster";
    let slot = cluster.slot_of(namespace);
    let master = cluster.master_of_slot(slot).expect("the slot is served");
    let mut config = Config::new(namespace);
    config.visibility_timeout = Duration::from_millis(500);
    config.response_timeout = Duration::from_millis(500);
    let timers = aio::Timers::connect_cluster(&seeds, config)
        .await
        .expect("connect to the cluster");
    let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run());
    let consumer = aio::Consumer::new(timers.clone(), "c").await.unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Seen::default()));
    let reading = {
        let seen = std::sync::Arc::clone(&seen);
        tokio::spawn(async move {
            let mut stream = consumer.deliveries();
            while let Some(delivery) = stream.next().await {
                let Ok(delivery) = delivery else { continue };
                {
                    let mut seen = seen.lock().unwrap();
                    seen.deliveries += 1;
                    let (deadline, promoted) = (delivery.deadline_ms, delivery.promoted_ms);
                    seen.first
                        .entry(delivery.id.clone())
                        .or_insert((deadline, promoted));
                }
                // A failed acknowledgement is retried by the take-over.
                let _ = delivery.ack().await;
            }
        })
    };

    // Before the failover: 100 timers, 300 ms ahead.
    let schedule = |from: usize| {
        let timers = timers.clone();
        async move {
            let now = timers.server_time_ms().await?;
            let ids: Vec<String> = (from..from + 100).map(|i| format!("t{i}")).collect();
            let batch: Vec<(&str, u64, &[u8])> = ids
                .iter()
                .map(|id| (id.as_str(), now + 300, &b"p"[..]))
                .collect();
            timers.schedule_many(&batch).await.map(|s| (s, ids))
        }
    };
    let (stored, before) = schedule(0).await.expect("schedule");
    assert_eq!(stored, Scheduled::Stored);
    let delivered = |ids: &[String]| {
        let seen = seen.lock().unwrap();
        ids.iter()
            .all(|id| seen.first.contains_key(id))
            .then_some(())
    };
    wait_for("the first timers", Duration::from_secs(20), || {
        delivered(&before)
    });

    // The master killed; a replica takes over.
    cluster.kill(master);
    let killed = Instant::now();
    wait_for("a replica to take over", Duration::from_secs(20), || {
        cluster
            .master_of_slot(slot)
            .filter(|new| *new != master)
            .map(|_| ())
    });
    // After it: schedules go to the new master (retried until it answers).
    let mut after = None;
    while after.is_none() && killed.elapsed() < Duration::from_secs(20) {
        match schedule(100).await {
            Ok((Scheduled::Stored, ids)) => after = Some(ids),
            Ok(other) => panic!("no WAIT asked: {other:?}"),
            Err(e) => assert!(e.is_unavailable(), "{e}"),
        }
    }
    let after = after.expect("a schedule on the new master");
    wait_for(
        "the timers scheduled after",
        Duration::from_secs(20),
        || delivered(&after),
    );
    node.abort();
    reading.abort();

    let seen = seen.lock().unwrap();
    let early: Vec<_> = seen
        .first
        .iter()
        .filter(|(_, (deadline, promoted))| promoted < deadline)
        .collect();
    assert!(early.is_empty(), "delivered early: {early:?}");
    eprintln!(
        "async face: {} timers, {} deliveries, back {:.1} s after the kill",
        seen.first.len(),
        seen.deliveries,
        killed.elapsed().as_secs_f64()
    );
}
