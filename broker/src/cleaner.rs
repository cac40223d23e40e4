//! Retention at work: every `--retention-check-interval-ms` (Kafka's
//! `log.retention.check.interval.ms`), each partition gives up the closed
//! segments that its topic's `retention.ms` and `retention.bytes` (else
//! `--retention-ms` and `--retention-bytes`) let go
//! ([`Log::expire`](crate::log::Log::expire)), under its lock; their files
//! are deleted after the lock is released, off the runtime's threads. A
//! fetch of an offset below the new log start is OFFSET_OUT_OF_RANGE, and
//! ListOffsets' earliest moves to it.
//!
//! The first check comes one interval after the start (at most
//! [`FIRST_CHECK_MAX`] after it, as Kafka's waits 30 s), not at it, so a
//! start does not read every partition at once. Before each check the
//! partitions of the topics it covers that no request has read yet are
//! read on the blocking pool ([`LazyLog`]): retention
//! reaches the partitions that hold data whether or not a client used
//! them since the start. Every partition read, covered or not, also gives
//! up the closed segments wholly below the log start that DeleteRecords
//! moved.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::broker::Broker;
use crate::log::segment::Segment;
use crate::log::{LazyLog, Topic};

/// The longest wait for the first check after the start.
pub const FIRST_CHECK_MAX: Duration = Duration::from_secs(30);

/// Runs retention for the broker's life.
pub async fn retain(broker: Arc<Broker>) {
    let period = broker.config.retention_check;
    let first = tokio::time::Instant::now() + period.min(FIRST_CHECK_MAX);
    let mut every = tokio::time::interval_at(first, period);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let covered = covered(&broker);
        LazyLog::ready(
            covered
                .iter()
                .flat_map(|topic| topic.partitions.iter().cloned()),
        )
        .await;
        // Every topic's open logs: those retention does not cover still
        // give up the segments wholly below their start (DeleteRecords').
        let topics: Vec<Arc<Topic>> = broker.topics.read().values().cloned().collect();
        let gone = sweep(&broker, &topics, now_ms());
        if gone.is_empty() {
            continue;
        }
        let broker = Arc::clone(&broker);
        let _ = tokio::task::spawn_blocking(move || {
            for segment in gone {
                let base = segment.base;
                if let Err(e) = segment.delete() {
                    eprintln!("warning: cannot delete the segment at offset {base}: {e}");
                }
                broker.segments_deleted.fetch_add(1, Ordering::Relaxed);
            }
        })
        .await;
    }
}

/// The topics that retention keeps in bounds (by time or size).
fn covered(broker: &Broker) -> Vec<Arc<Topic>> {
    let topics = broker.topics.read();
    topics
        .values()
        .filter(|topic| {
            let retention = topic.config.retention(&broker.config.log.retention);
            retention.ms.is_some() || retention.bytes.is_some()
        })
        .cloned()
        .collect()
}

/// Takes the expired segments out of the logs of `topics` that are read
/// (one made meanwhile, by a request, is read; its expiry waits for the
/// next check).
fn sweep(broker: &Broker, topics: &[Arc<Topic>], now_ms: i64) -> Vec<Segment> {
    let mut gone = Vec::new();
    for topic in topics {
        let retention = topic.config.retention(&broker.config.log.retention);
        for log in &topic.partitions {
            if let Some(mut log) = log.lock_if_open() {
                gone.extend(log.expire(now_ms, &retention));
            }
        }
    }
    gone
}

/// The wall clock, ms since the epoch (the clock record timestamps use).
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
