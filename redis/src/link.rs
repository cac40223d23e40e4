//! The link to Redis: the key names of a namespace, the scripts, a pool of
//! connections, and the one retry loop every call goes through.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use crate::{scripts, Config, Error};

/// The key names of one namespace.
#[derive(Debug)]
pub(crate) struct Keys {
    /// `{namespace}`: the hash tag every key starts with.
    pub(crate) prefix: String,
    /// The sorted set of non-empty buckets, scored by earliest deadline.
    pub(crate) buckets: String,
    /// Timer id → payload.
    pub(crate) payload: String,
    /// Timer id → its bucket.
    pub(crate) place: String,
    /// Timer id → the attempt it will be delivered as.
    pub(crate) attempt: String,
    /// The stream of due timers.
    pub(crate) stream: String,
    /// The dead-letter stream.
    pub(crate) dead: String,
    /// The counters.
    pub(crate) stats: String,
    /// The Pub/Sub channel that wakes scheduler nodes.
    pub(crate) wake: String,
    /// The stream's consumer group.
    pub(crate) group: String,
}

impl Keys {
    /// The names for `namespace`.
    pub(crate) fn new(namespace: &str) -> Keys {
        let prefix = format!("{{{namespace}}}");
        let key = |name: &str| format!("{prefix}:{name}");
        Keys {
            buckets: key("buckets"),
            payload: key("payload"),
            place: key("where"),
            attempt: key("attempt"),
            stream: key("stream"),
            dead: key("dead"),
            stats: key("stats"),
            wake: key("wake"),
            group: "purgatorio".to_string(),
            prefix,
        }
    }
}

/// The scripts, loaded once per process (`EVALSHA`, `EVAL` on a miss).
pub(crate) struct Scripts {
    /// [`scripts::schedule`].
    pub(crate) schedule: redis::Script,
    /// [`scripts::cancel`].
    pub(crate) cancel: redis::Script,
    /// [`scripts::promote`].
    pub(crate) promote: redis::Script,
    /// [`scripts::misfire`].
    pub(crate) misfire: redis::Script,
}

/// What every handle of one namespace shares.
pub(crate) struct Link {
    /// Opens connections.
    pub(crate) client: redis::Client,
    /// The settings.
    pub(crate) config: Config,
    /// The key names.
    pub(crate) keys: Keys,
    /// The scripts.
    pub(crate) scripts: Scripts,
    /// Idle connections, reused.
    idle: Mutex<Vec<redis::Connection>>,
    /// Calls answered by Redis (a pipeline is one).
    round_trips: AtomicU64,
}

/// A wait before the next try of a failed call: 50 ms doubling, at most 2 s.
pub(crate) fn backoff(try_number: u32) -> Duration {
    Duration::from_millis(50u64 << try_number.min(5)).min(Duration::from_secs(2))
}

/// Whether `error` is worth another try (the connection, not the call).
fn transient(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || matches!(
            error.kind(),
            redis::ErrorKind::BusyLoadingError | redis::ErrorKind::TryAgain
        )
}

impl Link {
    /// A link for `config`'s namespace through `client`; connects lazily.
    pub(crate) fn new(client: redis::Client, config: Config) -> Link {
        Link {
            client,
            keys: Keys::new(&config.namespace),
            config,
            scripts: Scripts {
                schedule: redis::Script::new(&scripts::schedule()),
                cancel: redis::Script::new(&scripts::cancel()),
                promote: redis::Script::new(&scripts::promote()),
                misfire: redis::Script::new(&scripts::misfire()),
            },
            idle: Mutex::new(Vec::new()),
            round_trips: AtomicU64::new(0),
        }
    }

    /// Round trips answered so far.
    pub(crate) fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// Runs `call` on a connection, retrying transient failures with
    /// backoff, [`Config::retries`] tries in all.
    pub(crate) fn with_connection<T>(
        &self,
        mut call: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, Error> {
        let tries = self.config.retries.max(1);
        let mut last = None;
        for try_number in 0..tries {
            if try_number > 0 {
                thread::sleep(backoff(try_number));
            }
            let pooled = self.idle.lock().expect("pool").pop();
            let mut connection = match pooled {
                Some(connection) => connection,
                None => match self
                    .client
                    .get_connection_with_timeout(Duration::from_secs(2))
                {
                    Ok(connection) => connection,
                    Err(e) if transient(&e) => {
                        last = Some(e);
                        continue;
                    }
                    Err(e) => return Err(Error::Redis(e)),
                },
            };
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            match call(&mut connection) {
                Ok(value) => {
                    self.idle.lock().expect("pool").push(connection);
                    return Ok(value);
                }
                Err(e) if transient(&e) => last = Some(e),
                Err(e) => {
                    self.idle.lock().expect("pool").push(connection);
                    return Err(Error::Redis(e));
                }
            }
        }
        Err(Error::Unavailable {
            tries,
            last: last.expect("at least one try failed"),
        })
    }
}
