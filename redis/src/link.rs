//! The link to Redis: where a namespace's connections go (one Redis, or
//! the master of its slot in a Redis Cluster), a pool of connections whose
//! every call is bounded by the response timeout, and the one retry loop
//! every call goes through.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use crate::error::{preview, transient};
use crate::health::backoff;
use crate::{Config, Error};

/// Where a namespace's connections go.
enum Route {
    /// One Redis. Its client opens connections with no handshake, so that
    /// nothing is read from a new connection before its timeouts are set.
    Single(redis::Client),
    /// The master of the namespace's slot in a Redis Cluster, asked for
    /// each new connection.
    #[cfg(feature = "cluster")]
    Cluster(crate::cluster::Seeds),
}

/// The connections of one namespace.
pub(crate) struct Link {
    /// Where connections go.
    route: Route,
    /// The handshake of the url (`AUTH`, `SELECT`), sent by
    /// [`connect`](Self::connect) under the response timeout.
    handshake: redis::RedisConnectionInfo,
    /// [`Config::response_timeout`].
    response_timeout: Duration,
    /// [`Config::retries`].
    retries: u32,
    /// Idle connections, reused.
    idle: Mutex<Vec<redis::Connection>>,
    /// Calls answered by Redis (a pipeline is one).
    round_trips: AtomicU64,
}

/// How hard a call tries before it reports [`Error::Unavailable`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Tries {
    /// [`Config::retries`] tries with backoff: the public calls.
    Config,
    /// One try: the loops of the scheduler and the consumer, which handle
    /// outages themselves (back off, log, never give up).
    Once,
}

/// A client for the `rediss://` url `info` that trusts only the CA
/// certificates `pem` ([`Config::tls_ca_pem`], already checked by
/// [`Config::validate`]).
#[cfg(feature = "tls")]
fn client_trusting(info: redis::ConnectionInfo, pem: &[u8]) -> Result<redis::Client, Error> {
    let invalid = |why| Error::InvalidConfig {
        field: "tls_ca_pem",
        why,
    };
    if !matches!(info.addr, redis::ConnectionAddr::TcpTls { .. }) {
        return Err(invalid("needs a rediss:// url"));
    }
    let certificates = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem.to_vec()),
    };
    // Valid PEM whose DER is no CA certificate is refused here.
    redis::Client::build_with_tls(info, certificates)
        .map_err(|_| invalid("holds a certificate that is not a CA certificate"))
}

impl Link {
    /// A link to the Redis at `url` with `config`'s settings; connects
    /// lazily.
    pub(crate) fn open(url: &str, config: &Config) -> Result<Link, Error> {
        let (client, handshake) = Link::client(url, config)?;
        Ok(Link::with_route(Route::Single(client), handshake, config))
    }

    /// A link to the master of `config`'s namespace in the Redis Cluster
    /// that `seeds` belong to (their handshake is the first one's);
    /// connects lazily.
    #[cfg(feature = "cluster")]
    pub(crate) fn open_cluster(
        seeds: &[&str],
        prefix: &str,
        config: &Config,
    ) -> Result<Link, Error> {
        let mut clients = Vec::new();
        let mut handshake = None;
        for url in seeds {
            let (client, its) = Link::client(url, config)?;
            if its.db != 0 {
                return Err(Error::InvalidUrl {
                    preview: preview(url),
                    source: redis::RedisError::from((
                        redis::ErrorKind::InvalidClientConfig,
                        "a Redis Cluster has only database 0",
                    )),
                });
            }
            handshake.get_or_insert(its);
            clients.push(client);
        }
        let Some(handshake) = handshake else {
            return Err(Error::InvalidArgument {
                name: "seeds",
                why: "must name at least one cluster node",
            });
        };
        let seeds = crate::cluster::Seeds::new(prefix, clients);
        Ok(Link::with_route(Route::Cluster(seeds), handshake, config))
    }

    /// A client for `url` with no handshake, and the handshake.
    fn client(
        url: &str,
        config: &Config,
    ) -> Result<(redis::Client, redis::RedisConnectionInfo), Error> {
        #[cfg(not(feature = "tls"))]
        if url.starts_with("rediss://") {
            return Err(Error::TlsUnsupported);
        }
        let invalid = |source| Error::InvalidUrl {
            preview: preview(url),
            source,
        };
        let mut info = redis::IntoConnectionInfo::into_connection_info(url).map_err(invalid)?;
        let handshake = std::mem::take(&mut info.redis);
        #[cfg(feature = "tls")]
        let client = match &config.tls_ca_pem {
            Some(pem) => client_trusting(info, pem)?,
            None => redis::Client::open(info).map_err(invalid)?,
        };
        #[cfg(not(feature = "tls"))]
        let client = {
            let _ = config;
            redis::Client::open(info).map_err(invalid)?
        };
        Ok((client, handshake))
    }

    /// The link itself.
    fn with_route(route: Route, handshake: redis::RedisConnectionInfo, config: &Config) -> Link {
        Link {
            route,
            handshake,
            response_timeout: config.response_timeout,
            retries: config.retries,
            idle: Mutex::new(Vec::new()),
            round_trips: AtomicU64::new(0),
        }
    }

    /// A client for connections that send the url's handshake (`AUTH`,
    /// `SELECT`) themselves, within their own connection timeout: those of
    /// the async face, whose connection manager reconnects on its own. In
    /// a cluster, a client for the master of the namespace's slot, asked of
    /// the cluster now: this blocks for the round trips (the async face
    /// asks on tokio's blocking threads, `aio::link::node_client`).
    #[cfg(feature = "tokio")]
    pub(crate) fn client_with_handshake(&self) -> redis::RedisResult<redis::Client> {
        let client = match &self.route {
            Route::Single(client) => client.clone(),
            #[cfg(feature = "cluster")]
            Route::Cluster(seeds) => seeds.master(|node| self.connect_to(node))?,
        };
        let mut info = client.get_connection_info().clone();
        info.redis = self.handshake.clone();
        // The address keeps the TLS settings (a private CA) the client was
        // built with.
        redis::Client::open(info)
    }

    /// Whether the link follows a Redis Cluster: the node of its keys may
    /// change (a failover, a resharding).
    #[cfg(feature = "tokio")]
    pub(crate) fn follows_cluster(&self) -> bool {
        match &self.route {
            Route::Single(_) => false,
            #[cfg(feature = "cluster")]
            Route::Cluster(_) => true,
        }
    }

    /// Round trips answered so far.
    pub(crate) fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// Counts a round trip made outside [`call`](Self::call).
    pub(crate) fn count_round_trip(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs `call` on a connection, retrying transient failures with
    /// backoff, [`Config::retries`] tries in all.
    pub(crate) fn with_connection<T>(
        &self,
        call: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, Error> {
        self.call(Tries::Config, call)
    }

    /// A fresh connection to the namespace's Redis (in a cluster, to the
    /// master of its slot) whose every call is bounded by the response
    /// timeout.
    pub(crate) fn connect(&self) -> redis::RedisResult<redis::Connection> {
        match &self.route {
            Route::Single(client) => self.connect_to(client),
            #[cfg(feature = "cluster")]
            Route::Cluster(seeds) => self.connect_to(&seeds.master(|node| self.connect_to(node))?),
        }
    }

    /// A fresh connection to `client`'s node, with the response timeout
    /// and the url's handshake.
    fn connect_to(&self, client: &redis::Client) -> redis::RedisResult<redis::Connection> {
        let timeout = self.response_timeout;
        let mut connection = client.get_connection_with_timeout(timeout)?;
        connection.set_read_timeout(Some(timeout))?;
        connection.set_write_timeout(Some(timeout))?;
        let handshake = &self.handshake;
        if let Some(password) = &handshake.password {
            let mut auth = redis::cmd("AUTH");
            if let Some(username) = &handshake.username {
                auth.arg(username);
            }
            auth.arg(password).query::<()>(&mut connection)?;
        }
        if handshake.db != 0 {
            redis::cmd("SELECT")
                .arg(handshake.db)
                .query::<()>(&mut connection)?;
        }
        Ok(connection)
    }

    /// Runs `call` on a connection, retrying transient failures as `tries`
    /// says. A connection that failed is dropped, never reused: its answer
    /// may still come.
    pub(crate) fn call<T>(
        &self,
        tries: Tries,
        mut call: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, Error> {
        let tries = match tries {
            Tries::Config => self.retries.max(1),
            Tries::Once => 1,
        };
        let mut last = None;
        let mut failures = 0;
        while failures < tries {
            if failures > 0 {
                thread::sleep(backoff(failures));
            }
            let pooled = self.idle.lock().expect("pool").pop();
            let was_pooled = pooled.is_some();
            let mut connection = match pooled.map_or_else(|| self.connect(), Ok) {
                Ok(connection) => connection,
                Err(e) if transient(&e) => {
                    failures += 1;
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(Error::refused(e)),
            };
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            match call(&mut connection) {
                Ok(value) => {
                    self.idle.lock().expect("pool").push(connection);
                    return Ok(value);
                }
                Err(e) if was_pooled && transient(&e) && !e.is_timeout() => {
                    // An idle connection that broke (Redis restarted): so
                    // did its siblings. Try again at once on a fresh one;
                    // that does not count as a try.
                    self.idle.lock().expect("pool").clear();
                }
                Err(e) if transient(&e) => {
                    failures += 1;
                    last = Some(e);
                }
                Err(e) => {
                    self.idle.lock().expect("pool").push(connection);
                    return Err(Error::refused(e));
                }
            }
        }
        Err(Error::Unavailable {
            tries,
            last: last.expect("at least one try failed"),
        })
    }
}
