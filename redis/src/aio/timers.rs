//! [`Timers`] on tokio: schedule, cancel and read the figures of one
//! namespace, each call an `async fn`; and the steps the scheduler node
//! calls. Management by id is in `manage.rs`.

use std::fmt;
use std::sync::Arc;

use redis::Value;

use crate::aio::link::Connection;
use crate::link::Tries;
use crate::namespace::Namespace;
use crate::timers::{MisfirePage, Promotion, Scheduled};
use crate::{calls, recurring, Config, Error, Metrics, Recurrence};

/// A namespace of durable timers on one Redis, on tokio: the async face of
/// [`crate::Timers`], with the same keys, scripts and guarantees (the two
/// faces mix freely on one namespace). Cheap to clone; the clones share one
/// multiplexed connection, which reconnects on its own.
///
/// # Examples
///
/// ```no_run
/// use purgatorio_redis::{aio, Config};
///
/// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
/// let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
/// let at = timers.server_time_ms().await? + 30_000;
/// timers.schedule("retry-order-17", at, b"charge card").await?;
/// assert!(timers.cancel("retry-order-17").await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Timers {
    /// The blocking face's handle: its checks of ids, deadlines and
    /// payloads. It never connects (its pool stays empty).
    pub(crate) checks: crate::Timers,
    /// The connection manager.
    pub(crate) connection: Connection,
}

impl fmt::Debug for Timers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("aio::Timers")
            .field("namespace", &self.config().namespace)
            .finish()
    }
}

impl Timers {
    /// Connects to the Redis at `url` (`redis://host:port/db`, or
    /// `rediss://` over TLS with the `tls` feature).
    ///
    /// # Errors
    ///
    /// As [`crate::Timers::connect`]: [`Error::InvalidNamespace`],
    /// [`Error::InvalidConfig`], [`Error::InvalidUrl`],
    /// [`Error::TlsUnsupported`], [`Error::TlsCertificate`], or
    /// [`Error::Unavailable`] if Redis cannot be reached.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// let mut config = Config::new("payments");
    /// config.visibility_timeout = std::time::Duration::from_secs(60);
    /// let timers = aio::Timers::connect("redis://127.0.0.1:6379", config).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str, config: Config) -> Result<Timers, Error> {
        config.validate()?;
        Timers::open(Namespace::open(url, config)?).await
    }

    /// Connects to the master of `config`'s namespace in the Redis Cluster
    /// that the nodes at `seeds` belong to, as the blocking
    /// [`crate::Timers::connect_cluster`] does: every call goes to the
    /// master of the namespace's slot, asked of the cluster
    /// (`CLUSTER SLOTS`, on one of tokio's blocking threads) when a
    /// connection opens, and again after a failover or a `MOVED`.
    /// Schedulers and consumers run as with one Redis.
    ///
    /// # Errors
    ///
    /// As [`crate::Timers::connect_cluster`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// let seeds = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"];
    /// let payments = aio::Timers::connect_cluster(&seeds, Config::new("payments")).await?;
    /// # drop(payments);
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub async fn connect_cluster(seeds: &[&str], config: Config) -> Result<Timers, Error> {
        config.validate()?;
        Timers::open(Namespace::open_cluster(seeds, config)?).await
    }

    /// Opens the connection manager of `ns` and asks Redis the time.
    async fn open(ns: Namespace) -> Result<Timers, Error> {
        let ns = Arc::new(ns);
        // The manager's response timeout is one for every call: a
        // schedule's `WAIT` (`Config::replicas_to_ack`) may take its own
        // timeout on top.
        let wait = ns
            .config
            .replica_ack
            .map_or(std::time::Duration::ZERO, |ack| ack.timeout);
        let timeout = ns.config.response_timeout.saturating_add(wait);
        let connection = Connection::open_with(Arc::clone(&ns), timeout, Tries::Config).await?;
        let timers = Timers {
            checks: crate::Timers { ns },
            connection,
        };
        timers.server_time_ms().await?;
        Ok(timers)
    }

    /// The keys, scripts and settings.
    pub(crate) fn ns(&self) -> &Namespace {
        &self.connection.ns
    }

    /// Round trips to Redis made through this handle, its clones, and the
    /// consumers and schedulers made from them (a pipeline counts once).
    pub fn round_trips(&self) -> u64 {
        self.ns().link.round_trips()
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.ns().config
    }

    /// Redis's clock, ms since the Unix epoch: the one clock every node
    /// uses.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// let in_30_s = timers.server_time_ms().await? + 30_000;
    /// # Ok(()) }
    /// ```
    pub async fn server_time_ms(&self) -> Result<u64, Error> {
        let time = self
            .connection
            .call(Tries::Config, |mut c| async move {
                calls::time().query_async(&mut c).await
            })
            .await?;
        Ok(calls::time_ms(time))
    }

    /// Schedules timer `id` to be delivered with `payload` once Redis's
    /// clock reaches `at_ms` (ms since the Unix epoch). Scheduling an id
    /// that is pending moves it (new deadline and payload).
    ///
    /// # Errors
    ///
    /// As [`crate::Timers::schedule`]: [`Error::InvalidId`],
    /// [`Error::DeadlineOutOfRange`], [`Error::PayloadTooLarge`] before
    /// Redis is asked; [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// let at = timers.server_time_ms().await? + 30_000; // Redis's clock
    /// timers.schedule("retry-order-17", at, b"charge card").await?;
    /// timers.schedule("retry-order-17", at + 5_000, b"charge card").await?; // moved
    /// # Ok(()) }
    /// ```
    pub async fn schedule(&self, id: &str, at_ms: u64, payload: &[u8]) -> Result<Scheduled, Error> {
        self.schedule_attempt(id, at_ms, payload, 1).await
    }

    /// Schedules `id` as delivery number `attempt`.
    pub(crate) async fn schedule_attempt(
        &self,
        id: &str,
        at_ms: u64,
        payload: &[u8],
        attempt: u32,
    ) -> Result<Scheduled, Error> {
        self.checks.check_input(id, at_ms, payload)?;
        self.send_schedules(&[(id, at_ms, payload)], attempt).await
    }

    /// Schedules many timers in one round trip (one atomic step per 500
    /// timers or 1 MiB of payloads, pipelined); every item is checked
    /// before anything is sent.
    ///
    /// # Errors
    ///
    /// As [`schedule`](Self::schedule).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// let at = timers.server_time_ms().await? + 60_000;
    /// let ids: Vec<String> = (0..10_000).map(|i| format!("order-{i}")).collect();
    /// let batch: Vec<(&str, u64, &[u8])> = ids.iter().map(|id| (id.as_str(), at, &b""[..])).collect();
    /// timers.schedule_many(&batch).await?; // one round trip
    /// # Ok(()) }
    /// ```
    pub async fn schedule_many(&self, timers: &[(&str, u64, &[u8])]) -> Result<Scheduled, Error> {
        for (id, at_ms, payload) in timers {
            self.checks.check_input(id, *at_ms, payload)?;
        }
        self.send_schedules(timers, 1).await
    }

    /// Sends checked schedules in one pipeline (loading the script first if
    /// Redis lost it).
    async fn send_schedules(
        &self,
        timers: &[(&str, u64, &[u8])],
        attempt: u32,
    ) -> Result<Scheduled, Error> {
        if timers.is_empty() {
            return Ok(Scheduled::Stored);
        }
        self.send_schedule_pipe(&calls::schedule(self.ns(), timers, attempt), timers.len())
            .await
    }

    /// Sends a pipeline of schedule calls, loading the script first if
    /// Redis lost it.
    async fn send_schedule_pipe(
        &self,
        pipe: &redis::Pipeline,
        timers: usize,
    ) -> Result<Scheduled, Error> {
        let mut pipe = pipe.clone();
        let wait = calls::add_wait(&mut pipe, self.ns());
        let pipe = &pipe;
        let acked: Vec<u32> = self
            .connection
            .call(Tries::Config, |mut c| async move {
                match pipe.query_async(&mut c).await {
                    Err(e) if calls::no_script(&e) => {
                        calls::load_schedule().query_async::<String>(&mut c).await?;
                        pipe.query_async(&mut c).await
                    }
                    other => other,
                }
            })
            .await?;
        let outcome = calls::scheduled(wait, &acked);
        if let Some(count) = calls::record_replication(self.ns(), outcome, timers) {
            // A count for the metrics: the schedule itself is done.
            let count = &count;
            let _ = self
                .connection
                .call(Tries::Once, |mut c| async move {
                    count.query_async::<()>(&mut c).await
                })
                .await;
        }
        Ok(outcome)
    }

    /// Schedules recurring timer `id`: every occurrence is delivered with
    /// `payload`, the first one after Redis's now, and acknowledging one
    /// schedules the next in the same atomic step (see
    /// [`crate::Timers::schedule_recurring`]). Scheduling an id again
    /// replaces its series; [`cancel`](Self::cancel) ends it. Returns the
    /// first occurrence's deadline, ms by Redis's clock.
    ///
    /// # Errors
    ///
    /// As [`crate::Timers::schedule_recurring`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config, Recurrence};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("reports")).await?;
    /// let every_monday = Recurrence::Cron("0 9 * * MON".into());
    /// timers.schedule_recurring("weekly-report", &every_monday, b"").await?;
    /// # Ok(()) }
    /// ```
    pub async fn schedule_recurring(
        &self,
        id: &str,
        recurrence: &Recurrence,
        payload: &[u8],
    ) -> Result<u64, Error> {
        self.checks.check_input(id, 0, payload)?;
        let now = self.server_time_ms().await?;
        let (spec, first) = recurring::first(recurrence, now)?;
        self.send_schedule_pipe(
            &calls::schedule_recurring(self.ns(), id, &spec, first, payload),
            1,
        )
        .await?;
        Ok(first)
    }

    /// Cancels timer `id`, and ends its series if it recurs; `true` if it
    /// was pending or recurring.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`]; [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// if timers.cancel("retry-order-17").await? {
    ///     println!("cancelled before it was due");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn cancel(&self, id: &str) -> Result<bool, Error> {
        self.checks.check_id(id)?;
        let ns = self.ns();
        let removed: i64 = self
            .connection
            .call(Tries::Config, |mut c| async move {
                calls::cancel(ns, id).invoke_async(&mut c).await
            })
            .await?;
        Ok(removed == 1)
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
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// let m = timers.metrics().await?;
    /// println!("{} pending, {} in flight", m.pending, m.unacknowledged);
    /// # Ok(()) }
    /// ```
    pub async fn metrics(&self) -> Result<Metrics, Error> {
        let ns = self.ns();
        let (with_group, without) = (&calls::metrics(ns, true), &calls::metrics(ns, false));
        let (figures, unacked) = self
            .connection
            .call(Tries::Config, |mut c| async move {
                let read = with_group
                    .query_async::<calls::MetricsGroupReply>(&mut c)
                    .await;
                match read {
                    Ok((p, s, d, unacked)) => Ok(((p, s, d), unacked)),
                    // No group yet: nothing delivered.
                    Err(e) if calls::no_group(&e) => {
                        let figures: calls::MetricsReply = without.query_async(&mut c).await?;
                        Ok((figures, Value::Nil))
                    }
                    Err(e) => Err(e),
                }
            })
            .await?;
        Ok(calls::metrics_of(figures, &unacked))
    }

    /// One promotion step; one try (the scheduler's loop handles outages).
    pub(crate) async fn promote(
        &self,
        misfire_after: std::time::Duration,
    ) -> Result<Promotion, Error> {
        let ns = self.ns();
        let step: calls::PromoteReply = self
            .connection
            .call(Tries::Once, |mut c| async move {
                calls::promote(ns, misfire_after).invoke_async(&mut c).await
            })
            .await?;
        calls::promotion(step)
    }

    /// One page of the misfire policy; one try.
    pub(crate) async fn handle_misfires(
        &self,
        late: std::time::Duration,
    ) -> Result<MisfirePage, Error> {
        let Some(misfire) = &calls::misfire(self.ns(), late) else {
            return Ok(MisfirePage::Done);
        };
        let page: calls::MisfireReply = self
            .connection
            .call(Tries::Once, |mut c| async move {
                misfire.invoke_async(&mut c).await
            })
            .await?;
        Ok(calls::misfire_page(page))
    }
}
