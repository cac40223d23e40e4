//! # purgatorio-redis
//!
//! Durable timers on Redis: scheduled timers survive the death of every
//! process that scheduled them, fire on whichever scheduler node is alive,
//! and are delivered at least once through a Redis Stream, never before their
//! deadline by Redis's own clock.
//!
//! * [`Timers`]: schedule (idempotent by id: scheduling an id again moves
//!   it), cancel, metrics.
//! * [`Scheduler`]: a node that moves due timers to the stream. Any number
//!   may run; each due timer is moved once, by one atomic server-side step
//!   that reads Redis `TIME` itself. A node sleeps until the earliest
//!   deadline on purgatorio's in-memory timer, or until a schedule of an
//!   earlier deadline wakes it through Pub/Sub: no polling interval.
//! * [`Consumer`]: reads due timers as a member of the stream's consumer
//!   group, acknowledges them, or asks for a retry later; takes over the
//!   entries of a consumer that died after a visibility timeout, and moves a
//!   timer that failed every attempt to a dead-letter stream.
//!
//! ```no_run
//! use std::time::Duration;
//! use purgatorio_redis::{Config, Consumer, Scheduler, Timers, Verdict};
//!
//! let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
//! let at = timers.server_time_ms()? + 30_000;
//! timers.schedule("retry-order-17", at, b"charge card")?;
//! let scheduler = Scheduler::new(timers.clone());
//! std::thread::spawn(move || scheduler.run());
//! let consumer = Consumer::new(timers, "worker-1")?;
//! for delivery in consumer.poll(Duration::from_secs(1), 100)? {
//!     println!("{} is due", delivery.id);
//!     consumer.finish(&delivery, Verdict::Ack)?;
//! }
//! # Ok::<(), purgatorio_redis::Error>(())
//! ```

mod scripts;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use redis::Value;

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
    /// Attempts of one Redis call before [`Error::Unavailable`].
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
    /// Drop them, counted in [`Metrics::misfired`].
    Skip,
    /// Move them this far into the future.
    Reschedule(Duration),
}

/// Errors: bad input is refused before Redis is asked; Redis failures are
/// retried with backoff before they are reported.
#[derive(Debug)]
pub enum Error {
    /// An empty id, one over [`Config::max_id`] bytes, or one with a
    /// control character.
    InvalidId(String),
    /// A payload over [`Config::max_payload`] bytes.
    PayloadTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Redis refused the call (a script error, a wrong type).
    Redis(redis::RedisError),
    /// Redis could not be reached after [`Config::retries`] tries.
    Unavailable {
        /// How many tries.
        tries: u32,
        /// The last failure.
        last: redis::RedisError,
    },
    /// Redis answered something this crate does not understand.
    Protocol(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidId(id) => write!(f, "invalid timer id {id:?}"),
            Error::PayloadTooLarge { len, max } => {
                write!(f, "payload of {len} bytes is over the limit of {max}")
            }
            Error::Redis(e) => write!(f, "redis refused the call: {e}"),
            Error::Unavailable { tries, last } => {
                write!(f, "redis unavailable after {tries} tries: {last}")
            }
            Error::Protocol(what) => write!(f, "unexpected reply from redis: {what}"),
        }
    }
}

impl std::error::Error for Error {}

/// The figures of a namespace, read from Redis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Timers scheduled and not yet due.
    pub pending: u64,
    /// Timers moved to the stream so far.
    pub promoted: u64,
    /// How late the last promotion step was for its latest timer, ms.
    pub promotion_lag_ms: u64,
    /// Deliveries taken over from a consumer that did not acknowledge them.
    pub redelivered: u64,
    /// Timers in the dead-letter stream.
    pub dead_letters: u64,
    /// Misfired timers found by starting schedulers.
    pub misfired: u64,
    /// Delivered timers not yet acknowledged.
    pub unacknowledged: u64,
}

/// The key names of one namespace.
#[derive(Debug)]
struct Keys {
    prefix: String,
    buckets: String,
    payload: String,
    place: String,
    attempt: String,
    stream: String,
    dead: String,
    stats: String,
    wake: String,
    group: String,
}

impl Keys {
    fn new(namespace: &str) -> Keys {
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
struct Scripts {
    schedule: redis::Script,
    cancel: redis::Script,
    promote: redis::Script,
    misfire: redis::Script,
}

/// What every handle of one namespace shares.
struct Shared {
    client: redis::Client,
    config: Config,
    keys: Keys,
    scripts: Scripts,
    /// Idle connections, reused.
    idle: Mutex<Vec<redis::Connection>>,
    /// Calls answered by Redis (a pipeline is one).
    round_trips: std::sync::atomic::AtomicU64,
}

/// A namespace of durable timers on one Redis. Cheap to clone.
#[derive(Clone)]
pub struct Timers {
    shared: Arc<Shared>,
}

impl fmt::Debug for Timers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timers")
            .field("namespace", &self.shared.config.namespace)
            .finish()
    }
}

/// A wait before the next try of a failed call: 50 ms doubling, at most 2 s.
fn backoff(try_number: u32) -> Duration {
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

impl Timers {
    /// Connects to the Redis at `url` (`redis://host:port/db`).
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] if it cannot be reached, [`Error::Redis`] for
    /// a malformed url.
    pub fn connect(url: &str, config: Config) -> Result<Timers, Error> {
        if config.namespace.is_empty() || config.namespace.contains(['{', '}']) {
            return Err(Error::InvalidId(config.namespace));
        }
        let client = redis::Client::open(url).map_err(Error::Redis)?;
        let timers = Timers {
            shared: Arc::new(Shared {
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
                round_trips: std::sync::atomic::AtomicU64::new(0),
            }),
        };
        timers.server_time_ms()?;
        Ok(timers)
    }

    /// Round trips to Redis made through this handle and its clones so far
    /// (a pipeline counts once).
    pub fn round_trips(&self) -> u64 {
        self.shared.round_trips.load(Ordering::Relaxed)
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Runs `call` on a connection, retrying transient failures with
    /// backoff, [`Config::retries`] tries in all.
    fn with_connection<T>(
        &self,
        mut call: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, Error> {
        let tries = self.shared.config.retries.max(1);
        let mut last = None;
        for try_number in 0..tries {
            if try_number > 0 {
                thread::sleep(backoff(try_number));
            }
            let pooled = self.shared.idle.lock().expect("pool").pop();
            let mut connection = match pooled {
                Some(connection) => connection,
                None => match self
                    .shared
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
            self.shared.round_trips.fetch_add(1, Ordering::Relaxed);
            match call(&mut connection) {
                Ok(value) => {
                    self.shared.idle.lock().expect("pool").push(connection);
                    return Ok(value);
                }
                Err(e) if transient(&e) => last = Some(e),
                Err(e) => {
                    self.shared.idle.lock().expect("pool").push(connection);
                    return Err(Error::Redis(e));
                }
            }
        }
        Err(Error::Unavailable {
            tries,
            last: last.expect("at least one try failed"),
        })
    }

    /// Redis's clock, ms since the Unix epoch: the one clock every node
    /// uses, so a node whose own clock is wrong never fires early.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] if Redis cannot be reached.
    pub fn server_time_ms(&self) -> Result<u64, Error> {
        let (secs, micros): (u64, u64) = self.with_connection(|c| redis::cmd("TIME").query(c))?;
        Ok(secs * 1000 + micros / 1000)
    }

    fn check(&self, id: &str, payload: &[u8]) -> Result<(), Error> {
        let config = &self.shared.config;
        if id.is_empty() || id.len() > config.max_id || id.chars().any(char::is_control) {
            return Err(Error::InvalidId(id.to_string()));
        }
        if payload.len() > config.max_payload {
            return Err(Error::PayloadTooLarge {
                len: payload.len(),
                max: config.max_payload,
            });
        }
        Ok(())
    }

    /// Schedules timer `id` to be delivered with `payload` once Redis's
    /// clock reaches `at_ms` (ms since the Unix epoch). Scheduling an id
    /// that is pending moves it (new deadline and payload).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`], [`Error::PayloadTooLarge`] before Redis is
    /// asked; [`Error::Unavailable`] after the retries.
    pub fn schedule(&self, id: &str, at_ms: u64, payload: &[u8]) -> Result<(), Error> {
        self.schedule_attempt(id, at_ms, payload, 1)
    }

    fn schedule_attempt(
        &self,
        id: &str,
        at_ms: u64,
        payload: &[u8],
        attempt: u32,
    ) -> Result<(), Error> {
        self.check(id, payload)?;
        let (keys, scripts) = (&self.shared.keys, &self.shared.scripts);
        self.with_connection(|c| {
            scripts
                .schedule
                .key(&keys.buckets)
                .key(&keys.payload)
                .key(&keys.place)
                .key(&keys.attempt)
                .arg(&keys.prefix)
                .arg(id)
                .arg(at_ms)
                .arg(payload)
                .arg(attempt)
                .arg(self.shared.config.bucket_ms)
                .arg(&keys.wake)
                .invoke::<i64>(c)
        })?;
        Ok(())
    }

    /// Schedules many timers in one round trip (a pipeline of the same
    /// atomic step). Every item is checked before anything is sent.
    ///
    /// # Errors
    ///
    /// As [`schedule`](Self::schedule).
    pub fn schedule_many(&self, timers: &[(&str, u64, &[u8])]) -> Result<(), Error> {
        for (id, _, payload) in timers {
            self.check(id, payload)?;
        }
        let (keys, scripts) = (&self.shared.keys, &self.shared.scripts);
        let source = scripts::schedule();
        let hash = scripts.schedule.get_hash().to_string();
        self.with_connection(|c| {
            // Make sure the script is cached, then pipeline EVALSHA.
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(&source)
                .query::<String>(c)?;
            let mut pipe = redis::pipe();
            for (id, at_ms, payload) in timers {
                pipe.cmd("EVALSHA")
                    .arg(&hash)
                    .arg(4)
                    .arg(&keys.buckets)
                    .arg(&keys.payload)
                    .arg(&keys.place)
                    .arg(&keys.attempt)
                    .arg(&keys.prefix)
                    .arg(*id)
                    .arg(*at_ms)
                    .arg(*payload)
                    .arg(1)
                    .arg(self.shared.config.bucket_ms)
                    .arg(&keys.wake)
                    .ignore();
            }
            pipe.query::<()>(c)
        })
    }

    /// Cancels timer `id`; `true` if it was pending (not yet moved to the
    /// stream).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`]; [`Error::Unavailable`] after the retries.
    pub fn cancel(&self, id: &str) -> Result<bool, Error> {
        self.check(id, b"")?;
        let (keys, scripts) = (&self.shared.keys, &self.shared.scripts);
        let removed: i64 = self.with_connection(|c| {
            scripts
                .cancel
                .key(&keys.buckets)
                .key(&keys.payload)
                .key(&keys.place)
                .key(&keys.attempt)
                .arg(&keys.prefix)
                .arg(id)
                .invoke(c)
        })?;
        Ok(removed == 1)
    }

    /// Moves the due timers to the stream, one atomic step of at most
    /// [`Config::promote_batch`] timers. Returns how many moved, the
    /// earliest pending deadline, and Redis's time.
    fn promote(&self) -> Result<(u64, Option<u64>, u64), Error> {
        let (keys, scripts) = (&self.shared.keys, &self.shared.scripts);
        let (moved, next, now): (u64, String, String) = self.with_connection(|c| {
            scripts
                .promote
                .key(&keys.buckets)
                .key(&keys.payload)
                .key(&keys.place)
                .key(&keys.attempt)
                .key(&keys.stream)
                .key(&keys.stats)
                .arg(&keys.prefix)
                .arg(self.shared.config.promote_batch)
                .invoke(c)
        })?;
        let parse = |s: &str| {
            s.parse::<f64>()
                .map_err(|_| Error::Protocol(format!("a time of {s:?}")))
        };
        let next = parse(&next)?;
        let next = (next >= 0.0).then_some(next as u64);
        Ok((moved, next, parse(&now)? as u64))
    }

    /// Applies the misfire policy to timers more than `late` overdue.
    fn handle_misfires(&self, late: Duration) -> Result<u64, Error> {
        let (keys, scripts) = (&self.shared.keys, &self.shared.scripts);
        let config = &self.shared.config;
        let (policy, delay) = match config.misfire {
            Misfire::FireNow => ("fire", 0),
            Misfire::Skip => ("skip", 0),
            Misfire::Reschedule(d) => ("reschedule", d.as_millis() as u64),
        };
        self.with_connection(|c| {
            scripts
                .misfire
                .key(&keys.buckets)
                .key(&keys.payload)
                .key(&keys.place)
                .key(&keys.attempt)
                .key(&keys.stats)
                .arg(&keys.prefix)
                .arg(policy)
                .arg(late.as_millis() as u64)
                .arg(delay)
                .arg(config.bucket_ms)
                .arg(1_000_000)
                .invoke(c)
        })
    }

    /// The namespace's figures.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries.
    pub fn metrics(&self) -> Result<Metrics, Error> {
        let keys = &self.shared.keys;
        let (pending, stats, dead, unacked): (u64, Vec<(String, u64)>, u64, Value) = self
            .with_connection(|c| {
                redis::pipe()
                    .cmd("HLEN")
                    .arg(&keys.payload)
                    .cmd("HGETALL")
                    .arg(&keys.stats)
                    .cmd("XLEN")
                    .arg(&keys.dead)
                    .cmd("XPENDING")
                    .arg(&keys.stream)
                    .arg(&keys.group)
                    .query(c)
                    .or_else(|e| {
                        // No group yet: nothing delivered.
                        if e.code() == Some("NOGROUP") {
                            let (p, s, d): (u64, Vec<(String, u64)>, u64) = redis::pipe()
                                .cmd("HLEN")
                                .arg(&keys.payload)
                                .cmd("HGETALL")
                                .arg(&keys.stats)
                                .cmd("XLEN")
                                .arg(&keys.dead)
                                .query(c)?;
                            Ok((p, s, d, Value::Nil))
                        } else {
                            Err(e)
                        }
                    })
            })?;
        let stat = |name: &str| stats.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v);
        let unacknowledged = match unacked {
            Value::Array(items) => match items.first() {
                Some(Value::Int(n)) => *n as u64,
                _ => 0,
            },
            _ => 0,
        };
        Ok(Metrics {
            pending,
            promoted: stat("promoted"),
            promotion_lag_ms: stat("lag_ms"),
            redelivered: stat("redelivered"),
            dead_letters: dead,
            misfired: stat("misfired"),
            unacknowledged,
        })
    }
}

/// What wakes a scheduler node.
enum Wake {
    /// A deadline may be due (the in-memory timer fired, or Pub/Sub said an
    /// earlier deadline was scheduled).
    Check,
    /// [`Scheduler::stop`].
    Stop,
}

/// A scheduler node: moves due timers to the stream. Run any number.
pub struct Scheduler {
    timers: Timers,
    wake: (Sender<Wake>, Receiver<Wake>),
    stopped: Arc<AtomicBool>,
    /// A deliberate error of this node's own clock, ms (tests: a node whose
    /// clock is fast or slow).
    skew_ms: i64,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("timers", &self.timers)
            .finish()
    }
}

/// Stops a running [`Scheduler`] from another thread.
#[derive(Clone)]
pub struct StopHandle {
    wake: Sender<Wake>,
    stopped: Arc<AtomicBool>,
}

impl StopHandle {
    /// Asks the scheduler to stop; it returns from `run` promptly.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _ = self.wake.send(Wake::Stop);
    }
}

impl Scheduler {
    /// A node for `timers`' namespace.
    pub fn new(timers: Timers) -> Scheduler {
        Scheduler {
            timers,
            wake: crossbeam_channel::unbounded(),
            stopped: Arc::new(AtomicBool::new(false)),
            skew_ms: 0,
        }
    }

    /// Pretends this node's clock is `skew_ms` off (positive: fast). The
    /// node never trusts its own clock for a deadline, so this changes
    /// nothing but when it wakes up to ask Redis: for tests.
    pub fn with_clock_skew_ms(mut self, skew_ms: i64) -> Scheduler {
        self.skew_ms = skew_ms;
        self
    }

    /// A handle that stops [`run`](Self::run).
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            wake: self.wake.0.clone(),
            stopped: Arc::clone(&self.stopped),
        }
    }

    /// This node's (possibly skewed) clock, ms since the Unix epoch.
    fn local_ms(&self) -> i64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as i64;
        now + self.skew_ms
    }

    /// Runs the node until stopped: handles misfires once, then promotes
    /// due timers and sleeps until the next deadline or a wake-up. Redis
    /// failures are retried with backoff; the node keeps going.
    ///
    /// # Errors
    ///
    /// None while it runs; it returns `Ok` once stopped.
    pub fn run(&self) -> Result<(), Error> {
        let timer = purgatorio::Timer::builder()
            .thread_name("redis-scheduler")
            .build()
            .map_err(|e| Error::Protocol(e.to_string()))?;
        let listener = self.listen();
        let mut misfires_done = false;
        let mut armed: Option<purgatorio::TimerHandle> = None;
        while !self.stopped.load(Ordering::SeqCst) {
            if !misfires_done {
                misfires_done = self.timers.handle_misfires(Duration::from_secs(1)).is_ok();
            }
            let step = self.timers.promote();
            let wait = match step {
                Ok((moved, _, _)) if moved as usize >= self.timers.config().promote_batch => {
                    continue;
                }
                // Redis's time and this node's agree on rates, not on
                // readings: the wait is measured against Redis's clock.
                Ok((_, Some(next), now)) => {
                    let local_now = self.local_ms();
                    let offset = now as i64 - local_now;
                    let local_deadline = next as i64 - offset;
                    Some(Duration::from_millis(
                        (local_deadline - self.local_ms()).max(0) as u64,
                    ))
                }
                Ok((_, None, _)) => None,
                Err(_) => Some(Duration::from_millis(500)),
            };
            if let Some(old) = armed.take() {
                drop(old.cancel());
            }
            if let Some(wait) = wait {
                let tx = self.wake.0.clone();
                armed = timer
                    .schedule(wait, move || {
                        let _ = tx.send(Wake::Check);
                    })
                    .ok();
            }
            match self.wake.1.recv() {
                Ok(Wake::Check) => {
                    // Coalesce wake-ups that arrived meanwhile.
                    while let Ok(Wake::Check) = self.wake.1.try_recv() {}
                }
                Ok(Wake::Stop) | Err(_) => break,
            }
        }
        self.stopped.store(true, Ordering::SeqCst);
        // Wake the listener so that it notices.
        let _ = self.timers.with_connection(|c| {
            redis::cmd("PUBLISH")
                .arg(&self.timers.shared.keys.wake)
                .arg("stop")
                .query::<i64>(c)
        });
        drop(listener.join());
        Ok(())
    }

    /// Listens on the wake channel on a thread of its own: each message
    /// wakes the node. Reconnects with backoff if the connection drops.
    fn listen(&self) -> thread::JoinHandle<()> {
        let shared = Arc::clone(&self.timers.shared);
        let wake = self.wake.0.clone();
        let stopped = Arc::clone(&self.stopped);
        thread::Builder::new()
            .name("redis-wake".into())
            .spawn(move || {
                let mut failures = 0;
                while !stopped.load(Ordering::SeqCst) {
                    let connection = shared
                        .client
                        .get_connection_with_timeout(Duration::from_secs(2));
                    let Ok(mut connection) = connection else {
                        failures += 1;
                        thread::sleep(backoff(failures));
                        continue;
                    };
                    let mut pubsub = connection.as_pubsub();
                    if pubsub.subscribe(&shared.keys.wake).is_err() {
                        failures += 1;
                        thread::sleep(backoff(failures));
                        continue;
                    }
                    failures = 0;
                    // Subscribed: whatever was scheduled before is seen by
                    // the next promotion step.
                    let _ = wake.send(Wake::Check);
                    while let Ok(_message) = pubsub.get_message() {
                        if stopped.load(Ordering::SeqCst) {
                            return;
                        }
                        let _ = wake.send(Wake::Check);
                    }
                }
            })
            .expect("spawn the wake listener")
    }
}

/// A due timer, delivered to a [`Consumer`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The timer's id.
    pub id: String,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Its deadline, ms since the Unix epoch by Redis's clock.
    pub deadline_ms: u64,
    /// 1 for the first delivery; more after a retry or a take-over.
    pub attempt: u32,
    /// The stream entry.
    entry: String,
}

/// What a consumer did with a delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Done: acknowledged and removed.
    Ack,
    /// Deliver it again this much later, as the next attempt (or to the
    /// dead-letter stream after [`Config::max_attempts`]).
    RetryLater(Duration),
}

/// A member of the stream's consumer group.
pub struct Consumer {
    timers: Timers,
    name: String,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("name", &self.name)
            .finish()
    }
}

/// A stream entry's fields and values.
type Fields = Vec<(String, Vec<u8>)>;

/// The fields of a stream entry's value list.
fn fields(value: &Value) -> Fields {
    let Value::Array(items) = value else {
        return Vec::new();
    };
    items
        .chunks(2)
        .filter_map(|pair| match pair {
            [Value::BulkString(k), Value::BulkString(v)] => {
                Some((String::from_utf8_lossy(k).into_owned(), v.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The entries `[id, [field, value, …]]` of a stream reply.
fn entries(value: &Value) -> Vec<(String, Fields)> {
    let Value::Array(list) = value else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|entry| match entry {
            Value::Array(parts) if parts.len() == 2 => {
                let id = match &parts[0] {
                    Value::BulkString(id) => String::from_utf8_lossy(id).into_owned(),
                    _ => return None,
                };
                Some((id, fields(&parts[1])))
            }
            _ => None,
        })
        .collect()
}

impl Consumer {
    /// Joins the consumer group as `name` (creating the group if needed).
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries.
    pub fn new(timers: Timers, name: &str) -> Result<Consumer, Error> {
        let keys = &timers.shared.keys;
        let created: Result<(), Error> = timers.with_connection(|c| {
            redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&keys.stream)
                .arg(&keys.group)
                .arg("0")
                .arg("MKSTREAM")
                .query::<()>(c)
        });
        match created {
            Ok(()) => {}
            Err(Error::Redis(e)) if e.code() == Some("BUSYGROUP") => {}
            Err(e) => return Err(e),
        }
        Ok(Consumer {
            timers,
            name: name.to_string(),
        })
    }

    fn delivery(&self, entry: String, fields: Fields) -> Delivery {
        let field = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let number = |name: &str| {
            String::from_utf8_lossy(&field(name))
                .parse::<f64>()
                .unwrap_or(0.0) as u64
        };
        let attempt = number("attempt").max(1) as u32;
        Delivery {
            id: String::from_utf8_lossy(&field("id")).into_owned(),
            payload: field("payload"),
            deadline_ms: number("deadline"),
            attempt,
            entry,
        }
    }

    /// Up to `max` due timers: first those another consumer left
    /// unacknowledged for longer than the visibility timeout, then new ones,
    /// waiting up to `block` for one to arrive. Timers past
    /// [`Config::max_attempts`] go to the dead-letter stream instead.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries.
    pub fn poll(&self, block: Duration, max: usize) -> Result<Vec<Delivery>, Error> {
        let mut out = self.take_over(max)?;
        if out.len() < max {
            out.extend(self.read_new(block, max - out.len())?);
        }
        Ok(out)
    }

    /// Up to `max` entries that other consumers left unacknowledged for
    /// longer than the visibility timeout, now this consumer's.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries.
    pub fn take_over(&self, max: usize) -> Result<Vec<Delivery>, Error> {
        let keys = &self.timers.shared.keys;
        let config = &self.timers.shared.config;
        let claimed: Value = self.timers.with_connection(|c| {
            redis::cmd("XAUTOCLAIM")
                .arg(&keys.stream)
                .arg(&keys.group)
                .arg(&self.name)
                .arg(config.visibility_timeout.as_millis() as u64)
                .arg("0-0")
                .arg("COUNT")
                .arg(max)
                .query(c)
        })?;
        let mut out = Vec::new();
        if let Value::Array(parts) = &claimed {
            if let Some(list) = parts.get(1) {
                for (entry, fields) in entries(list) {
                    // An entry another consumer held too long: each
                    // delivery of it counts as an attempt.
                    let mut delivery = self.delivery(entry, fields);
                    let deliveries = self.delivery_count(&delivery.entry)?;
                    delivery.attempt += deliveries.saturating_sub(1);
                    self.timers.with_connection(|c| {
                        redis::cmd("HINCRBY")
                            .arg(&keys.stats)
                            .arg("redelivered")
                            .arg(1)
                            .query::<i64>(c)
                    })?;
                    if delivery.attempt > config.max_attempts {
                        self.dead_letter(&delivery)?;
                    } else {
                        out.push(delivery);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Up to `max` new due timers, waiting up to `block` for one.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries.
    pub fn read_new(&self, block: Duration, max: usize) -> Result<Vec<Delivery>, Error> {
        let keys = &self.timers.shared.keys;
        let mut out = Vec::new();
        let read: Value = self.timers.with_connection(|c| {
            redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(&keys.group)
                .arg(&self.name)
                .arg("COUNT")
                .arg(max)
                .arg("BLOCK")
                .arg(block.as_millis().max(1) as u64)
                .arg("STREAMS")
                .arg(&keys.stream)
                .arg(">")
                .query(c)
        })?;
        if let Value::Array(streams) = &read {
            for stream in streams {
                if let Value::Array(parts) = stream {
                    if let Some(list) = parts.get(1) {
                        for (entry, fields) in entries(list) {
                            out.push(self.delivery(entry, fields));
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// How many times the group delivered `entry` (Redis counts each
    /// take-over).
    fn delivery_count(&self, entry: &str) -> Result<u32, Error> {
        let keys = &self.timers.shared.keys;
        let reply: Value = self.timers.with_connection(|c| {
            redis::cmd("XPENDING")
                .arg(&keys.stream)
                .arg(&keys.group)
                .arg(entry)
                .arg(entry)
                .arg(1)
                .query(c)
        })?;
        match reply {
            Value::Array(rows) => match rows.first() {
                Some(Value::Array(row)) => match row.get(3) {
                    Some(Value::Int(n)) => Ok(*n as u32),
                    _ => Err(Error::Protocol("an XPENDING row".into())),
                },
                _ => Ok(1),
            },
            _ => Err(Error::Protocol("an XPENDING reply".into())),
        }
    }

    fn dead_letter(&self, delivery: &Delivery) -> Result<(), Error> {
        let keys = &self.timers.shared.keys;
        self.timers.with_connection(|c| {
            redis::pipe()
                .atomic()
                .cmd("XADD")
                .arg(&keys.dead)
                .arg("*")
                .arg("id")
                .arg(&delivery.id)
                .arg("payload")
                .arg(&delivery.payload)
                .arg("deadline")
                .arg(delivery.deadline_ms)
                .arg("attempt")
                .arg(delivery.attempt)
                .ignore()
                .cmd("XACK")
                .arg(&keys.stream)
                .arg(&keys.group)
                .arg(&delivery.entry)
                .ignore()
                .cmd("XDEL")
                .arg(&keys.stream)
                .arg(&delivery.entry)
                .ignore()
                .query::<()>(c)
        })
    }

    /// Acknowledges `delivery`, or schedules its next attempt.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries.
    pub fn finish(&self, delivery: &Delivery, verdict: Verdict) -> Result<(), Error> {
        let keys = &self.timers.shared.keys;
        if let Verdict::RetryLater(delay) = verdict {
            if delivery.attempt >= self.timers.shared.config.max_attempts {
                return self.dead_letter(delivery);
            }
            let at = self.timers.server_time_ms()? + delay.as_millis() as u64;
            self.timers.schedule_attempt(
                &delivery.id,
                at,
                &delivery.payload,
                delivery.attempt + 1,
            )?;
        }
        self.timers.with_connection(|c| {
            redis::pipe()
                .atomic()
                .cmd("XACK")
                .arg(&keys.stream)
                .arg(&keys.group)
                .arg(&delivery.entry)
                .ignore()
                .cmd("XDEL")
                .arg(&keys.stream)
                .arg(&delivery.entry)
                .ignore()
                .query::<()>(c)
        })
    }

    /// Acknowledges `deliveries` in one round trip.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries.
    pub fn ack_all(&self, deliveries: &[Delivery]) -> Result<(), Error> {
        if deliveries.is_empty() {
            return Ok(());
        }
        let keys = &self.timers.shared.keys;
        self.timers.with_connection(|c| {
            let mut pipe = redis::pipe();
            pipe.atomic();
            let mut ack = redis::cmd("XACK");
            ack.arg(&keys.stream).arg(&keys.group);
            let mut del = redis::cmd("XDEL");
            del.arg(&keys.stream);
            for delivery in deliveries {
                ack.arg(&delivery.entry);
                del.arg(&delivery.entry);
            }
            pipe.add_command(ack).ignore().add_command(del).ignore();
            pipe.query::<()>(c)
        })
    }

    /// Delivers due timers to `handle` until `stop` is set, acknowledging
    /// or retrying each as it says.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] if Redis stays unreachable.
    pub fn run(
        &self,
        stop: &AtomicBool,
        mut handle: impl FnMut(&Delivery) -> Verdict,
    ) -> Result<(), Error> {
        // Redis tells nobody when an entry's visibility runs out: look for
        // abandoned entries every half visibility timeout, and otherwise
        // wait in a blocking read (at most `block`, to see `stop`).
        let visibility = self.timers.shared.config.visibility_timeout;
        let block = (visibility / 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut next_take_over = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            let mut batch = Vec::new();
            if Instant::now() >= next_take_over {
                batch = self.take_over(100)?;
                next_take_over = Instant::now() + visibility / 2;
            }
            batch.extend(self.read_new(block, 100)?);
            let mut done = Vec::with_capacity(batch.len());
            for delivery in batch {
                match handle(&delivery) {
                    Verdict::Ack => done.push(delivery),
                    verdict => self.finish(&delivery, verdict)?,
                }
            }
            self.ack_all(&done)?;
        }
        Ok(())
    }
}
