//! Settings shared by every node of one namespace, and their ranges.

use std::time::Duration;

use crate::error::{name_fault, preview, Error};

/// The latest deadline accepted, ms since the Unix epoch: 2^53 − 1, the
/// largest whole number a Redis sorted-set score and a Lua number hold
/// exactly (about the year 287,396). A later one is refused with
/// [`Error::DeadlineOutOfRange`], never wrapped or rounded.
pub const MAX_DEADLINE_MS: u64 = (1 << 53) - 1;

/// The longest delay accepted for a retry or a misfire reschedule: 100
/// years, ms.
pub const MAX_DELAY_MS: u64 = 100 * 365 * 24 * 3_600 * 1_000;

/// The most timers one promotion step may move ([`Config::promote_batch`]):
/// the bound on one script's work (see `redis/README.md`).
pub const MAX_PROMOTE_BATCH: usize = 1_000;

/// The longest [`Config::promote_pace`]: 1 s.
pub const MAX_PROMOTE_PACE: Duration = Duration::from_secs(1);

/// The longest namespace accepted, bytes.
pub const MAX_NAMESPACE: usize = 128;

/// The largest [`Config::max_payload`]: Redis's own limit on one string,
/// 512 MiB.
pub const MAX_PAYLOAD_LIMIT: usize = 512 * 1024 * 1024;

/// The longest [`ReplicaAck::timeout`]: 60 s.
pub const MAX_REPLICA_WAIT: Duration = Duration::from_secs(60);

/// How many replicas must hold a schedule before it returns, and for how
/// long to wait ([`Config::replicas_to_ack`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaAck {
    /// Replicas that must acknowledge (Redis `WAIT numreplicas`).
    pub replicas: u32,
    /// The longest wait for them.
    pub timeout: Duration,
}

/// Settings shared by every node of one namespace.
#[derive(Clone, Debug)]
pub struct Config {
    /// The namespace: every key is `{namespace}:…` (one hash tag). 1 to
    /// [`MAX_NAMESPACE`] bytes, no brace, no control character.
    pub namespace: String,
    /// Width of a time bucket, ms; at least 1.
    pub bucket_ms: u64,
    /// The largest payload accepted, bytes; at most [`MAX_PAYLOAD_LIMIT`].
    pub max_payload: usize,
    /// The longest id accepted, bytes; at least 1.
    pub max_id: usize,
    /// How long a delivered timer may stay unacknowledged before another
    /// consumer takes it over; at least 1 ms.
    pub visibility_timeout: Duration,
    /// Deliveries of one timer before it goes to the dead-letter stream;
    /// at least 1.
    pub max_attempts: u32,
    /// Timers promoted per atomic step: 1 to [`MAX_PROMOTE_BATCH`].
    pub promote_batch: usize,
    /// The least wait of a scheduler node after a promotion step that moved
    /// timers and did not fill its batch, however soon the next deadline:
    /// timers coming due one after another then go to the stream in
    /// batches, which costs Redis less CPU per timer than a step per few
    /// timers (`redis/README.md`, "Where the CPU goes"), and may deliver
    /// them up to this much later. Never earlier: a timer is promoted only
    /// once due. At most [`MAX_PROMOTE_PACE`]; zero: no least wait.
    pub promote_pace: Duration,
    /// Attempts of one Redis call before
    /// [`Error::Unavailable`]; at least 1. The scheduler's and consumer's
    /// loops never give up: they retry with backoff until stopped.
    pub retries: u32,
    /// How long Redis may take to accept a connection or answer a call
    /// (beyond a blocking read's own wait) before the try counts as failed;
    /// at least 1 ms.
    pub response_timeout: Duration,
    /// What a starting scheduler does with timers whose deadline passed
    /// while no scheduler ran.
    pub misfire: Misfire,
    /// Replicas that must hold a schedule before it returns (`WAIT`), set
    /// with [`replicas_to_ack`](Self::replicas_to_ack); `None` (the
    /// default): a schedule returns once the master has it, and a failover
    /// may lose what the replica had not yet received (see
    /// `redis/README.md`, "Redis Cluster").
    pub replica_ack: Option<ReplicaAck>,
    /// The CA certificates, PEM, that a `rediss://` server's certificate
    /// must chain to, in place of the system's roots: for a private CA.
    /// At least one certificate; `None` (the default) trusts the system's
    /// roots.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use purgatorio_redis::{Config, Timers};
    ///
    /// let mut config = Config::new("payments");
    /// config.tls_ca_pem = Some(std::fs::read("/etc/redis/ca.crt").expect("read the CA"));
    /// let timers = Timers::connect("rediss://redis.internal:6380", config)?;
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    #[cfg(feature = "tls")]
    pub tls_ca_pem: Option<Vec<u8>>,
}

impl Config {
    /// The defaults for `namespace`: 1 s buckets, 64 KiB payloads, 256-byte
    /// ids, a 30 s visibility timeout, 5 attempts, 250 timers per step and
    /// a 10 ms pace between steps, 5 tries per call, a 2 s response timeout, misfires fired at once.
    ///
    /// # Examples
    ///
    /// ```
    /// let config = purgatorio_redis::Config::new("payments");
    /// assert!(config.validate().is_ok());
    /// ```
    pub fn new(namespace: &str) -> Config {
        Config {
            namespace: namespace.to_string(),
            bucket_ms: 1_000,
            max_payload: 64 * 1024,
            max_id: 256,
            visibility_timeout: Duration::from_secs(30),
            max_attempts: 5,
            promote_batch: 250,
            promote_pace: Duration::from_millis(10),
            retries: 5,
            response_timeout: Duration::from_secs(2),
            misfire: Misfire::FireNow,
            replica_ack: None,
            #[cfg(feature = "tls")]
            tls_ca_pem: None,
        }
    }

    /// Makes every schedule ([`Timers::schedule`](crate::Timers::schedule),
    /// [`schedule_many`](crate::Timers::schedule_many), a retry's) return
    /// only once `replicas` replicas of the master hold it (Redis `WAIT`),
    /// waiting at most `timeout` for them: a failover to one of them then
    /// loses none of it. Fewer in time is the outcome
    /// [`Scheduled::NotReplicated`](crate::Scheduled::NotReplicated), not an
    /// error: the master has the timers and delivers them (do not schedule
    /// them again). `replicas` at least 1, `timeout` from 1 ms to
    /// [`MAX_REPLICA_WAIT`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let config = purgatorio_redis::Config::new("payments")
    ///     .replicas_to_ack(1, Duration::from_millis(500));
    /// assert!(config.validate().is_ok());
    /// ```
    pub fn replicas_to_ack(mut self, replicas: u32, timeout: Duration) -> Config {
        self.replica_ack = Some(ReplicaAck { replicas, timeout });
        self
    }

    /// Checks every setting against its range ([`Timers::connect`](crate::Timers::connect)
    /// does it before anything reaches Redis).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidNamespace`] or [`Error::InvalidConfig`] naming the
    /// first setting out of range.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio_redis::{Config, Error};
    ///
    /// let mut config = Config::new("payments");
    /// config.promote_batch = 0;
    /// assert!(matches!(config.validate(), Err(Error::InvalidConfig { field: "promote_batch", .. })));
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        check_namespace(&self.namespace)?;
        let invalid = |field, why| Err(Error::InvalidConfig { field, why });
        if self.bucket_ms == 0 {
            return invalid("bucket_ms", "must be at least 1");
        }
        if self.max_payload > MAX_PAYLOAD_LIMIT {
            return invalid("max_payload", "must be at most 512 MiB");
        }
        if self.max_id == 0 {
            return invalid("max_id", "must be at least 1");
        }
        if self.visibility_timeout < Duration::from_millis(1) {
            return invalid("visibility_timeout", "must be at least 1 ms");
        }
        if self.max_attempts == 0 {
            return invalid("max_attempts", "must be at least 1");
        }
        if self.promote_batch == 0 || self.promote_batch > MAX_PROMOTE_BATCH {
            return invalid("promote_batch", "must be from 1 to 1,000");
        }
        if self.promote_pace > MAX_PROMOTE_PACE {
            return invalid("promote_pace", "must be at most 1 s");
        }
        if self.retries == 0 {
            return invalid("retries", "must be at least 1");
        }
        if self.response_timeout < Duration::from_millis(1) {
            return invalid("response_timeout", "must be at least 1 ms");
        }
        if let Some(ack) = self.replica_ack {
            if ack.replicas == 0 {
                return invalid("replica_ack", "replicas must be at least 1");
            }
            if ack.timeout < Duration::from_millis(1) || ack.timeout > MAX_REPLICA_WAIT {
                return invalid("replica_ack", "timeout must be from 1 ms to 60 s");
            }
        }
        if let Misfire::Reschedule(delay) = self.misfire {
            if delay.as_millis() > u128::from(MAX_DELAY_MS) {
                return invalid("misfire", "reschedule delay must be at most 100 years");
            }
        }
        #[cfg(feature = "tls")]
        if let Some(pem) = &self.tls_ca_pem {
            if let Err(why) = check_ca_pem(pem) {
                return invalid("tls_ca_pem", why);
            }
        }
        Ok(())
    }
}

/// Refuses CA certificates that would leave a TLS client trusting nothing:
/// no PEM certificate at all, or one whose base64 does not decode. (The
/// `redis` crate skips what is not a certificate, so a wrong file would
/// otherwise fail every handshake instead of being named here.)
#[cfg(feature = "tls")]
fn check_ca_pem(pem: &[u8]) -> Result<(), &'static str> {
    let mut certificates = 0;
    for certificate in rustls_pemfile::certs(&mut &pem[..]) {
        certificate.map_err(|_| "holds a certificate that is not valid PEM")?;
        certificates += 1;
    }
    if certificates == 0 {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
    }
    Ok(())
}

/// Refuses a namespace that cannot be one hash tag.
fn check_namespace(namespace: &str) -> Result<(), Error> {
    let why = name_fault(namespace, MAX_NAMESPACE, "longer than 128 bytes").or_else(|| {
        namespace
            .contains(['{', '}'])
            .then_some("holds a brace (it is the keys' hash tag)")
    });
    let Some(why) = why else { return Ok(()) };
    Err(Error::InvalidNamespace {
        preview: preview(namespace),
        why,
    })
}

/// What a starting scheduler does with timers whose deadline passed more
/// than a second before it started (no scheduler ran to fire them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misfire {
    /// Deliver them now, marked late by their deadline (the default).
    FireNow,
    /// Drop them, counted in [`Metrics::misfired`](crate::Metrics::misfired).
    Skip,
    /// Move them this far into the future (at most [`MAX_DELAY_MS`]).
    Reschedule(Duration),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_out_of_range_is_named() {
        /// A setting's name and a way to put it out of range.
        type Spoil = (&'static str, fn(&mut Config));
        let cases: [Spoil; 11] = [
            ("bucket_ms", |c| c.bucket_ms = 0),
            ("max_payload", |c| c.max_payload = usize::MAX),
            ("max_id", |c| c.max_id = 0),
            ("visibility_timeout", |c| {
                c.visibility_timeout = Duration::ZERO
            }),
            ("max_attempts", |c| c.max_attempts = 0),
            ("promote_batch", |c| c.promote_batch = 0),
            ("retries", |c| c.retries = 0),
            ("response_timeout", |c| c.response_timeout = Duration::ZERO),
            ("misfire", |c| {
                c.misfire = Misfire::Reschedule(Duration::MAX)
            }),
            ("replica_ack", |c| {
                c.replica_ack = Some(ReplicaAck {
                    replicas: 0,
                    timeout: Duration::from_secs(1),
                })
            }),
            ("replica_ack", |c| {
                c.replica_ack = Some(ReplicaAck {
                    replicas: 1,
                    timeout: Duration::from_secs(61),
                })
            }),
        ];
        for (name, spoil) in cases {
            let mut config = Config::new("ns");
            spoil(&mut config);
            match config.validate() {
                Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, name),
                other => panic!("{name}: {other:?}"),
            }
        }
        let mut big = Config::new("ns");
        big.promote_batch = MAX_PROMOTE_BATCH + 1;
        assert!(big.validate().is_err());
    }

    #[test]
    fn a_bad_namespace_is_reported_as_a_namespace() {
        for bad in ["", "a{b", "a}", "a\nb", &"n".repeat(129)] {
            let error = Config::new(bad).validate().unwrap_err();
            assert!(
                error.to_string().starts_with("invalid namespace"),
                "{error}"
            );
        }
        assert!(MAX_DEADLINE_MS as f64 as u64 == MAX_DEADLINE_MS);
    }
}
