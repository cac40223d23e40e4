//! Settings shared by every node of one namespace.

use std::time::Duration;

/// Settings shared by every node of one namespace.
#[derive(Clone, Debug)]
pub struct Config {
    /// The namespace: every key is `{namespace}:…` (one hash tag).
    pub namespace: String,
    /// Width of a time bucket, ms.
    pub bucket_ms: u64,
    /// The largest payload accepted, bytes.
    pub max_payload: usize,
    /// The longest id accepted, bytes.
    pub max_id: usize,
    /// How long a delivered timer may stay unacknowledged before another
    /// consumer takes it over.
    pub visibility_timeout: Duration,
    /// Deliveries of one timer before it goes to the dead-letter stream.
    pub max_attempts: u32,
    /// Timers promoted per atomic step.
    pub promote_batch: usize,
    /// Attempts of one Redis call before [`Error::Unavailable`](crate::Error::Unavailable).
    pub retries: u32,
    /// What a starting scheduler does with timers whose deadline passed
    /// while no scheduler ran.
    pub misfire: Misfire,
}

impl Config {
    /// The defaults for `namespace`: 1 s buckets, 64 KiB payloads, 256-byte
    /// ids, a 30 s visibility timeout, 5 attempts, 1,000 timers per step,
    /// 5 tries per call, misfires fired at once.
    pub fn new(namespace: &str) -> Config {
        Config {
            namespace: namespace.to_string(),
            bucket_ms: 1_000,
            max_payload: 64 * 1024,
            max_id: 256,
            visibility_timeout: Duration::from_secs(30),
            max_attempts: 5,
            promote_batch: 1_000,
            retries: 5,
            misfire: Misfire::FireNow,
        }
    }
}

/// What a starting scheduler does with timers whose deadline passed more
/// than a second before it started (no scheduler ran to fire them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misfire {
    /// Deliver them now, marked late by their deadline (the default).
    FireNow,
    /// Drop them, counted in [`Metrics::misfired`](crate::Metrics::misfired).
    Skip,
    /// Move them this far into the future.
    Reschedule(Duration),
}
