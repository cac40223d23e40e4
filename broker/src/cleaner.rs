//! Retention at work: every `--retention-check-interval-ms` (Kafka's
//! `log.retention.check.interval.ms`), each partition gives up the closed
//! segments that its topic's `retention.ms` and `retention.bytes` (else
//! `--retention-ms` and `--retention-bytes`) let go
//! ([`Log::expire`](crate::log::Log::expire)), under its lock; their files
//! are deleted after the lock is released, off the runtime's threads. A
//! fetch of an offset below the new log start is OFFSET_OUT_OF_RANGE, and
//! ListOffsets' earliest moves to it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::broker::Broker;
use crate::log::segment::Segment;

/// Runs retention for the broker's life.
pub async fn retain(broker: Arc<Broker>) {
    let mut every = tokio::time::interval(broker.config.retention_check);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let gone = sweep(&broker, now_ms());
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

/// Takes every partition's expired segments out of its log.
fn sweep(broker: &Broker, now_ms: i64) -> Vec<Segment> {
    let topics: Vec<_> = broker.topics.read().values().cloned().collect();
    let mut gone = Vec::new();
    for topic in topics {
        let retention = topic.config.retention(&broker.config.log.retention);
        if retention.ms.is_none() && retention.bytes.is_none() {
            continue;
        }
        for log in &topic.partitions {
            gone.extend(log.lock().expire(now_ms, &retention));
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
