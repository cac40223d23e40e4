//! The async face's link to Redis: `redis`'s tokio connection manager
//! (one multiplexed connection that reconnects on its own) and the one
//! retry loop every async call goes through, with the blocking face's
//! backoff and response timeout. In a Redis Cluster the manager is to the
//! master of the namespace's slot; a call that fails as a moved slot or a
//! lost master does (see [`transient`]) drops it, and the next call asks
//! the cluster for the master again (`cluster.rs`), so a failover is
//! followed within the retry loop's backoff, as on the blocking face.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::error::transient;
use crate::health::backoff;
use crate::link::Tries;
use crate::namespace::Namespace;
use crate::{Error, MAX_BACKOFF};

/// A connection manager of one namespace, and the namespace's keys,
/// scripts and settings. Cheap to clone: the clones share the connection.
#[derive(Clone)]
pub(crate) struct Connection {
    /// The keys, scripts and settings, shared with the blocking face.
    pub(crate) ns: Arc<Namespace>,
    /// The multiplexed connection; calls from many tasks share it.
    manager: Arc<Mutex<Managed>>,
    /// Every call's response timeout.
    response_timeout: Duration,
}

/// The manager of a [`Connection`].
struct Managed {
    /// How many managers were opened.
    opened: u64,
    /// The last one opened; `None` once dropped for a lost master (in a
    /// cluster only), until the next call opens one.
    current: Option<ConnectionManager>,
}

/// A client for the namespace's Redis with the url's handshake; in a
/// cluster, for the master of its slot, asked of the cluster on one of
/// tokio's blocking threads (the lookup is the blocking face's).
pub(crate) async fn node_client(ns: &Arc<Namespace>) -> redis::RedisResult<redis::Client> {
    if !ns.link.follows_cluster() {
        return ns.link.client_with_handshake();
    }
    let ns = Arc::clone(ns);
    tokio::task::spawn_blocking(move || ns.link.client_with_handshake())
        .await
        .unwrap_or_else(|e| {
            Err(redis::RedisError::from((
                redis::ErrorKind::IoError,
                "the cluster lookup stopped",
                e.to_string(),
            )))
        })
}

impl Connection {
    /// Opens a connection manager whose every call is bounded by
    /// `response_timeout` (the blocking reads of a consumer add their
    /// wait to [`Config::response_timeout`](crate::Config::response_timeout)),
    /// and whose connecting is bounded by the configured response timeout,
    /// handshake included. One try: the callers retry.
    pub(crate) async fn open(
        ns: Arc<Namespace>,
        response_timeout: Duration,
    ) -> redis::RedisResult<Connection> {
        let manager = manager(&ns, response_timeout).await?;
        Ok(Connection {
            ns,
            manager: Arc::new(Mutex::new(Managed {
                opened: 1,
                current: Some(manager),
            })),
            response_timeout,
        })
    }

    /// Opens a connection as [`open`](Self::open) does, trying as `tries`
    /// says.
    pub(crate) async fn open_with(
        ns: Arc<Namespace>,
        response_timeout: Duration,
        tries: Tries,
    ) -> Result<Connection, Error> {
        retry(&ns, tries, || {
            Connection::open(Arc::clone(&ns), response_timeout)
        })
        .await
    }

    /// Runs `call` on the connection, retrying transient failures with
    /// backoff as `tries` says. The manager reconnects a broken connection
    /// by itself; a call that timed out leaves the connection in place (its
    /// late answer is read and dropped). In a cluster, a transient failure
    /// drops the manager: the next try asks for the master again.
    pub(crate) async fn call<T, F, Fut>(&self, tries: Tries, call: F) -> Result<T, Error>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let call = &call;
        retry(&self.ns, tries, || async move {
            let (number, manager) = self.manager().await?;
            let result = call(manager).await;
            if let Err(e) = &result {
                if self.ns.link.follows_cluster() && transient(e) {
                    self.drop_manager(number);
                }
            }
            result
        })
        .await
    }

    /// The manager and its number, opened if the last one was dropped.
    async fn manager(&self) -> redis::RedisResult<(u64, ConnectionManager)> {
        let current = {
            let managed = self.manager.lock().expect("manager");
            managed.current.clone().map(|m| (managed.opened, m))
        };
        if let Some(current) = current {
            return Ok(current);
        }
        let opened = manager(&self.ns, self.response_timeout).await?;
        let mut managed = self.manager.lock().expect("manager");
        // Another task may have opened one meanwhile: keep that one (this
        // one is dropped after the lock, below).
        let kept = match &managed.current {
            Some(current) => current.clone(),
            None => {
                managed.opened += 1;
                managed.current = Some(opened.clone());
                opened.clone()
            }
        };
        let number = managed.opened;
        drop(managed);
        drop(opened);
        Ok((number, kept))
    }

    /// Drops the manager if it is still the `opened`th: a failure seen by
    /// many calls drops it once.
    fn drop_manager(&self, opened: u64) {
        let dropped = {
            let mut managed = self.manager.lock().expect("manager");
            if managed.opened == opened {
                managed.current.take()
            } else {
                None
            }
        };
        drop(dropped);
    }
}

/// A connection manager to the namespace's Redis (in a cluster, to the
/// master of its slot): see [`Connection::open`].
async fn manager(
    ns: &Arc<Namespace>,
    response_timeout: Duration,
) -> redis::RedisResult<ConnectionManager> {
    let client = node_client(ns).await?;
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(response_timeout)
        .set_connection_timeout(ns.config.response_timeout)
        // The manager's own reconnect makes one attempt whenever a call
        // finds the connection broken; the backoff between attempts is
        // ours ([`retry`]), so that both faces wait alike.
        .set_number_of_retries(0)
        .set_max_delay(MAX_BACKOFF.as_millis() as u64);
    ConnectionManager::new_with_config(client, config).await
}

/// Runs `attempt` until it succeeds, fails for good, or `tries` transient
/// failures (waiting [`backoff`] between them) make it
/// [`Error::Unavailable`]. Each try counts as a round trip.
pub(crate) async fn retry<T, F, Fut>(
    ns: &Namespace,
    tries: Tries,
    mut attempt: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = redis::RedisResult<T>>,
{
    let tries = match tries {
        Tries::Config => ns.config.retries.max(1),
        Tries::Once => 1,
    };
    let mut failures = 0;
    loop {
        ns.link.count_round_trip();
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(e) if transient(&e) => {
                failures += 1;
                if failures >= tries {
                    return Err(Error::Unavailable { tries, last: e });
                }
                tokio::time::sleep(backoff(failures)).await;
            }
            Err(e) => return Err(Error::refused(e)),
        }
    }
}
