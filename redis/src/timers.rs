//! [`Timers`]: schedule, cancel and read the figures of one namespace; and
//! the server-side steps the scheduler nodes call.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::error::{name_fault, preview};
use crate::link::Tries;
use crate::namespace::Namespace;
use crate::scripts::{BATCH_BYTES, SCHEDULE_BATCH};
use crate::{calls, Config, Error, MAX_DEADLINE_MS};

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
    /// Timers that no promotion reaches, as the last
    /// [`Timers::check`] counted them (0 before any check): a key of the
    /// namespace overwritten or deleted by another application strands
    /// them.
    pub stranded: u64,
    /// Timers whose schedule was stored but not replicated in time
    /// ([`Scheduled::NotReplicated`], with
    /// [`Config::replicas_to_ack`](crate::Config::replicas_to_ack)): the
    /// master delivered them, a failover before they reached a replica
    /// could have lost them.
    pub not_replicated: u64,
}

/// What a schedule did: the timers are stored on the master either way,
/// and it delivers them. With
/// [`Config::replicas_to_ack`](crate::Config::replicas_to_ack) the outcome
/// also says whether enough replicas acknowledged them in time.
///
/// Neither outcome asks for a retry. A timer that was stored but not
/// replicated in time (a master left without its replicas, as after a
/// failover until a replica rejoins) fires; scheduling it again to
/// "retry" would deliver it twice if it fired in between, and reporting it
/// as failed would report a timer that fires. What it says is that a
/// failover right now may lose it: alert on it, or wait for the replicas
/// and check with [`Timers::get`].
///
/// # Examples
///
/// ```no_run
/// # use purgatorio_redis::*;
/// use std::time::Duration;
///
/// let config = Config::new("payments").replicas_to_ack(1, Duration::from_millis(500));
/// let timers = Timers::connect("redis://127.0.0.1:6379", config)?;
/// let at = timers.server_time_ms()? + 30_000;
/// match timers.schedule("retry-order-17", at, b"charge card")? {
///     Scheduled::Stored => {}
///     Scheduled::NotReplicated { acked, wanted } => {
///         eprintln!("stored, on {acked} of {wanted} replicas: a failover now may lose it");
///     }
/// }
/// # Ok::<(), purgatorio_redis::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheduled {
    /// Stored, and held by the replicas asked for (if any were).
    Stored,
    /// Stored on the master, which delivers it, but fewer replicas than
    /// [`Config::replicas_to_ack`](crate::Config::replicas_to_ack) asks
    /// acknowledged it within its timeout. Do not schedule it again.
    NotReplicated {
        /// Replicas that acknowledged.
        acked: u32,
        /// Replicas asked for.
        wanted: u32,
    },
}

/// What one promotion step did.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Promotion {
    /// The earliest deadline still pending, ms by Redis's clock.
    pub(crate) next_deadline_ms: Option<u64>,
    /// Redis's clock during the step, ms.
    pub(crate) now_ms: u64,
    /// The step stopped at its count or byte limit: more may be due, call
    /// again at once.
    pub(crate) full: bool,
    /// Timers it took from the buckets.
    pub(crate) moved: u64,
}

/// Whether a misfire page left more to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MisfirePage {
    /// The page was full: call again.
    More,
    /// Nothing more is overdue.
    Done,
}

/// Splits `timers` into chunks of at most [`SCHEDULE_BATCH`] timers and
/// [`BATCH_BYTES`] of ids and payloads (a single larger timer goes alone).
pub(crate) fn chunks<'a, 'b>(
    timers: &'a [(&'b str, u64, &'b [u8])],
) -> impl Iterator<Item = &'a [(&'b str, u64, &'b [u8])]> {
    let mut rest = timers;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0;
        let mut len = 0;
        for (id, _, payload) in rest.iter().take(SCHEDULE_BATCH) {
            let size = id.len() + payload.len();
            if len > 0 && bytes + size > BATCH_BYTES {
                break;
            }
            bytes += size;
            len += 1;
        }
        let (chunk, tail) = rest.split_at(len);
        rest = tail;
        Some(chunk)
    })
}

/// A namespace of durable timers on one Redis. Cheap to clone.
#[derive(Clone)]
pub struct Timers {
    /// The connections, keys and scripts, shared by the clones.
    pub(crate) ns: Arc<Namespace>,
}

impl fmt::Debug for Timers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timers")
            .field("namespace", &self.ns.config.namespace)
            .finish()
    }
}

impl Timers {
    /// Connects to the Redis at `url` (`redis://host:port/db`, or
    /// `rediss://` over TLS with the `tls` feature).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidNamespace`] or [`Error::InvalidConfig`] for a setting
    /// out of range ([`Config::validate`]); [`Error::InvalidUrl`] for a
    /// malformed url, [`Error::TlsUnsupported`] for `rediss://` without the
    /// `tls` feature; [`Error::TlsCertificate`] if the server's TLS
    /// certificate is not trusted; [`Error::Unavailable`] if Redis cannot be
    /// reached.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use purgatorio_redis::{Config, Timers};
    ///
    /// let mut config = Config::new("payments");
    /// config.visibility_timeout = std::time::Duration::from_secs(60);
    /// let timers = Timers::connect("redis://127.0.0.1:6379", config)?;
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn connect(url: &str, config: Config) -> Result<Timers, Error> {
        config.validate()?;
        let timers = Timers {
            ns: Arc::new(Namespace::open(url, config)?),
        };
        timers.server_time_ms()?;
        Ok(timers)
    }

    /// Connects to the master of `config`'s namespace in the Redis Cluster
    /// that the nodes at `seeds` belong to (`redis://host:port` urls, or
    /// `rediss://` with the `tls` feature; database 0, a cluster's only
    /// one). A namespace's keys share one hash tag, so they live in one
    /// slot: its every call goes to the master of that slot, found by
    /// asking the nodes (`CLUSTER SLOTS`) for each new connection, again
    /// after a failover or a `MOVED`. Spread the load over the masters with
    /// several namespaces (their tags hash to different slots). Scheduler
    /// nodes and consumers run as with one Redis.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect); [`Error::InvalidArgument`] for no
    /// seed; [`Error::InvalidUrl`] for a url naming a database other than
    /// 0.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use purgatorio_redis::{Config, Timers};
    ///
    /// let seeds = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"];
    /// let payments = Timers::connect_cluster(&seeds, Config::new("payments"))?;
    /// let emails = Timers::connect_cluster(&seeds, Config::new("emails"))?;
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn connect_cluster(seeds: &[&str], config: Config) -> Result<Timers, Error> {
        config.validate()?;
        let timers = Timers {
            ns: Arc::new(Namespace::open_cluster(seeds, config)?),
        };
        timers.server_time_ms()?;
        Ok(timers)
    }

    /// Round trips to Redis made through this handle and its clones so far
    /// (a pipeline counts once).
    pub fn round_trips(&self) -> u64 {
        self.ns.link.round_trips()
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.ns.config
    }

    /// Redis's clock, ms since the Unix epoch: the one clock every node
    /// uses, so a node whose own clock is wrong never fires early.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] if Redis cannot be reached.
    pub fn server_time_ms(&self) -> Result<u64, Error> {
        let time = self.ns.link.with_connection(|c| calls::time().query(c))?;
        Ok(calls::time_ms(time))
    }

    /// Refuses a bad id before Redis is asked.
    pub(crate) fn check_id(&self, id: &str) -> Result<(), Error> {
        let max = self.ns.config.max_id;
        let Some(why) = name_fault(id, max, "longer than Config::max_id") else {
            return Ok(());
        };
        Err(Error::InvalidId {
            preview: preview(id),
            len: id.len(),
            why,
        })
    }

    /// Refuses a bad id, deadline or payload before Redis is asked.
    pub(crate) fn check_input(&self, id: &str, at_ms: u64, payload: &[u8]) -> Result<(), Error> {
        let config = &self.ns.config;
        self.check_id(id)?;
        if at_ms > MAX_DEADLINE_MS {
            return Err(Error::DeadlineOutOfRange {
                at_ms,
                max_ms: MAX_DEADLINE_MS,
            });
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
    /// [`Error::InvalidId`], [`Error::DeadlineOutOfRange`] (past
    /// [`MAX_DEADLINE_MS`]), [`Error::PayloadTooLarge`] before Redis is
    /// asked; [`Error::Unavailable`] after the retries. A schedule stored
    /// but not replicated in time (with [`Config::replicas_to_ack`]) is no
    /// error: [`Scheduled::NotReplicated`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// let at = timers.server_time_ms()? + 30_000; // Redis's clock
    /// timers.schedule("retry-order-17", at, b"charge card")?;
    /// timers.schedule("retry-order-17", at + 5_000, b"charge card")?; // moved
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn schedule(&self, id: &str, at_ms: u64, payload: &[u8]) -> Result<Scheduled, Error> {
        self.schedule_attempt(id, at_ms, payload, 1)
    }

    /// Schedules `id` as delivery number `attempt`.
    pub(crate) fn schedule_attempt(
        &self,
        id: &str,
        at_ms: u64,
        payload: &[u8],
        attempt: u32,
    ) -> Result<Scheduled, Error> {
        self.check_input(id, at_ms, payload)?;
        self.send_schedules(&[(id, at_ms, payload)], attempt)
    }

    /// Schedules many timers in one round trip: one atomic step per
    /// 250 timers (or 256 KiB of payloads),
    /// pipelined. Every item is checked before anything is sent; an id
    /// listed twice ends at its last entry.
    ///
    /// # Errors
    ///
    /// As [`schedule`](Self::schedule).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// let at = timers.server_time_ms()? + 60_000;
    /// let ids: Vec<String> = (0..10_000).map(|i| format!("order-{i}")).collect();
    /// let batch: Vec<(&str, u64, &[u8])> = ids.iter().map(|id| (id.as_str(), at, &b""[..])).collect();
    /// timers.schedule_many(&batch)?; // one round trip
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn schedule_many(&self, timers: &[(&str, u64, &[u8])]) -> Result<Scheduled, Error> {
        for (id, at_ms, payload) in timers {
            self.check_input(id, *at_ms, payload)?;
        }
        self.send_schedules(timers, 1)
    }

    /// Sends checked schedules: the schedule script once per chunk, all
    /// chunks in one pipeline (loading the script first if Redis lost it).
    fn send_schedules(
        &self,
        timers: &[(&str, u64, &[u8])],
        attempt: u32,
    ) -> Result<Scheduled, Error> {
        if timers.is_empty() {
            return Ok(Scheduled::Stored);
        }
        self.send_schedule_pipe(&calls::schedule(&self.ns, timers, attempt), timers.len())
    }

    /// Sends a pipeline of schedule calls, loading the script first if
    /// Redis lost it (it restarted, or `SCRIPT FLUSH`); with
    /// [`Config::replicas_to_ack`], then waits for the replicas (`WAIT`).
    /// `timers`: how many the pipeline schedules.
    pub(crate) fn send_schedule_pipe(
        &self,
        pipe: &redis::Pipeline,
        timers: usize,
    ) -> Result<Scheduled, Error> {
        let mut pipe = pipe.clone();
        let wait = calls::add_wait(&mut pipe, &self.ns);
        let response_timeout = self.ns.config.response_timeout;
        let acked: Vec<u32> = self.ns.link.with_connection(|c| {
            if let Some(ack) = wait {
                c.set_read_timeout(Some(response_timeout.saturating_add(ack.timeout)))?;
            }
            let sent = match pipe.query(c) {
                Err(e) if calls::no_script(&e) => {
                    calls::load_schedule().query::<String>(c)?;
                    pipe.query(c)
                }
                other => other,
            };
            if wait.is_some() {
                c.set_read_timeout(Some(response_timeout))?;
            }
            sent
        })?;
        let outcome = calls::scheduled(wait, &acked);
        if let Some(count) = calls::record_replication(&self.ns, outcome, timers) {
            // A count for the metrics: the schedule itself is done.
            let _ = self.ns.link.with_connection(|c| count.query::<()>(c));
        }
        Ok(outcome)
    }

    /// Cancels timer `id`, and ends its series if it recurs (an occurrence
    /// in flight is the last one); `true` if it was pending (not yet moved
    /// to the stream) or recurring.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`]; [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// if timers.cancel("retry-order-17")? {
    ///     println!("cancelled before it was due");
    /// }
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn cancel(&self, id: &str) -> Result<bool, Error> {
        self.check_id(id)?;
        let cancel = calls::cancel(&self.ns, id);
        let removed: i64 = self.ns.link.with_connection(|c| cancel.invoke(c))?;
        Ok(removed == 1)
    }

    /// Moves the due timers to the stream, one atomic step of at most
    /// [`Config::promote_batch`] timers and about 256 KiB of records
    /// ([`BATCH_BYTES`]); one try (the scheduler's loop
    /// handles outages). Timers promoted more than `misfire_after` late are
    /// counted in [`Metrics::misfired`].
    pub(crate) fn promote(&self, misfire_after: Duration) -> Result<Promotion, Error> {
        let promote = calls::promote(&self.ns, misfire_after);
        let step = self.ns.link.call(Tries::Once, |c| promote.invoke(c))?;
        calls::promotion(step)
    }

    /// Applies the misfire policy to up to one page of timers more than
    /// `late` overdue, and about 256 KiB of records ([`BATCH_BYTES`]);
    /// one try. [`MisfirePage::More`] when the page stopped at either limit.
    /// [`Misfire::FireNow`](crate::Misfire::FireNow) sends nothing: promotion delivers and counts
    /// them.
    pub(crate) fn handle_misfires(&self, late: Duration) -> Result<MisfirePage, Error> {
        let Some(misfire) = calls::misfire(&self.ns, late) else {
            return Ok(MisfirePage::Done);
        };
        let page: calls::MisfireReply = self.ns.link.call(Tries::Once, |c| misfire.invoke(c))?;
        Ok(calls::misfire_page(page))
    }

    /// The namespace's figures.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// let m = timers.metrics()?;
    /// println!("{} pending, {} delivered and not acknowledged", m.pending, m.unacknowledged);
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn metrics(&self) -> Result<Metrics, Error> {
        let (with_group, without) = (
            calls::metrics(&self.ns, true),
            calls::metrics(&self.ns, false),
        );
        let (figures, unacked) = self.ns.link.with_connection(|c| {
            match with_group.query::<calls::MetricsGroupReply>(c) {
                Ok((p, s, d, unacked)) => Ok(((p, s, d), unacked)),
                // No group yet: nothing delivered.
                Err(e) if calls::no_group(&e) => Ok((without.query(c)?, Value::Nil)),
                Err(e) => Err(e),
            }
        })?;
        Ok(calls::metrics_of(figures, &unacked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_bounded_by_count_and_bytes() {
        let small = [0u8; 10];
        let timers: Vec<(&str, u64, &[u8])> = (0..1_201).map(|_| ("a", 1, &small[..])).collect();
        let sizes: Vec<usize> = chunks(&timers).map(<[_]>::len).collect();
        assert_eq!(sizes, [250, 250, 250, 250, 201]);
        let big = vec![0u8; BATCH_BYTES / 2 + 1];
        let timers: Vec<(&str, u64, &[u8])> = (0..3).map(|_| ("a", 1, &big[..])).collect();
        let sizes: Vec<usize> = chunks(&timers).map(<[_]>::len).collect();
        assert_eq!(sizes, [1, 1, 1]);
        assert_eq!(chunks(&[]).count(), 0);
    }
}
