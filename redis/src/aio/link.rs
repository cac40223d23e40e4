//! The async face's link to Redis: `redis`'s tokio connection manager
//! (one multiplexed connection that reconnects on its own) and the one
//! retry loop every async call goes through, with the blocking face's
//! backoff and response timeout.

use std::future::Future;
use std::sync::Arc;
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
    manager: ConnectionManager,
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
        let client = ns.link.client_with_handshake()?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(response_timeout)
            .set_connection_timeout(ns.config.response_timeout)
            // The manager's own reconnect makes one attempt whenever a call
            // finds the connection broken; the backoff between attempts is
            // ours ([`call`](Self::call)), so that both faces wait alike.
            .set_number_of_retries(0)
            .set_max_delay(MAX_BACKOFF.as_millis() as u64);
        let manager = ConnectionManager::new_with_config(client, config).await?;
        Ok(Connection { ns, manager })
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
    /// late answer is read and dropped).
    pub(crate) async fn call<T, F, Fut>(&self, tries: Tries, mut call: F) -> Result<T, Error>
    where
        F: FnMut(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        retry(&self.ns, tries, || call(self.manager.clone())).await
    }
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
