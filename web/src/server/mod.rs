//! [`Server`]: serves a router with every edge bounded, timed by a
//! purgatorio [`Timer`].
//!
//! `axum::serve` leaves a server's edges open: it accepts every connection,
//! waits forever for a request's headers or body, and writes to a client
//! that never reads until the kernel gives up. A [`Server`] bounds each:
//!
//! * **Connections**: at most [`max_connections`](Server::max_connections)
//!   at once (past it, new ones wait in the kernel's listen queue), and at
//!   most [`max_connections_per_ip`](Server::max_connections_per_ip) from
//!   one address (past it, a new one is closed at once).
//! * **Headers**: a request's headers (and an idle keep-alive
//!   connection's next request) must arrive within
//!   [`header_read_timeout`](Server::header_read_timeout), in at most
//!   [`max_buf_size`](Server::max_buf_size) bytes (else 431).
//! * **Bodies**: a body must arrive whole within
//!   [`body_timeout`](Server::body_timeout) of when it first has to wait,
//!   and the bodies being read hold at most
//!   [`max_body_bytes`](Server::max_body_bytes) between them
//!   ([`BodyError`]; the handler answers 400 and the connection closes).
//! * **Answers**: once a write has to wait, the client must read at least
//!   16 KiB, or all of it, within [`write_timeout`](Server::write_timeout),
//!   or the connection closes: a client that stops reading, or reads a
//!   byte at a time, pins its answer no longer than that.
//!
//! Memory is then bounded in total: each connection holds its read buffer
//! (at most about twice [`max_buf_size`](Server::max_buf_size)), hyper's
//! state for one request, and the one answer being written (hyper writes
//! one at a time, pipelined or not); the bodies being read hold at most
//! [`max_body_bytes`](Server::max_body_bytes) together. How large an
//! answer is, is the router's: the long-poll service's are at most one
//! value, 512 KiB.
//!
//! Every timeout runs on the server's [`Timer`], hyper's own too
//! ([`HyperTimer`]): on a [`ManualClock`](purgatorio::ManualClock), a test
//! moves them all. HTTP/1.1 only (with upgrades); a long poll needs no more.

mod body;
mod io;
mod stall;
mod timer;

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use parking_lot::Mutex;
use purgatorio::Timer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

pub use body::BodyError;
pub use timer::HyperTimer;

use body::{Budget, GuardedBody};
use io::GuardedIo;
use stall::Stall;

/// The bytes a client must read, once a write has to wait, within the
/// write timeout (unless it reads all there is).
const WRITE_MIN_PROGRESS: usize = 16 * 1024;

/// The longest timeout hyper is given: it adds it to an `Instant`.
const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

/// Serves an axum [`Router`] over HTTP/1.1 with bounded connections,
/// header and body reads, and writes. See the [module](self) for what
/// each bound does. Clones share the bounds, the counts and the slots.
///
/// # Examples
///
/// ```no_run
/// use purgatorio_web::{long_poll::LongPoll, server::Server, shared_timer};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let app = LongPoll::new(shared_timer())?.router();
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8500").await?;
/// Server::new(shared_timer()).max_connections(10_000).serve(listener, app).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Server {
    /// Where every timeout goes.
    timer: Timer,
    /// A slot per connection served at once.
    slots: Arc<Semaphore>,
    /// The most connections from one address.
    max_per_ip: usize,
    /// How long a request's headers may take.
    header_read_timeout: Duration,
    /// How long a body may take once it waits.
    body_timeout: Duration,
    /// How long a write may wait without enough progress.
    write_timeout: Duration,
    /// A connection's read buffer.
    max_buf_size: usize,
    /// The bytes of request bodies held at once.
    budget: Arc<Budget>,
    /// The counts.
    counts: Arc<Counts>,
}

/// What a [`Server`] counts.
#[derive(Debug, Default)]
struct Counts {
    /// Connections open now.
    open: Arc<AtomicUsize>,
    /// Connections open now, by address.
    by_ip: Mutex<HashMap<IpAddr, usize>>,
    /// Connections closed at once: their address had its limit.
    refused: AtomicU64,
    /// Accepts that failed.
    accept_errors: AtomicU64,
}

impl Server {
    /// The default [`max_connections`](Self::max_connections): 4,096.
    pub const MAX_CONNECTIONS: usize = 4096;
    /// The default [`max_connections_per_ip`](Self::max_connections_per_ip):
    /// 200 (Consul's `http_max_conns_per_client`).
    pub const MAX_CONNECTIONS_PER_IP: usize = 200;
    /// The default [`header_read_timeout`](Self::header_read_timeout): 30 s.
    pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
    /// The default [`body_timeout`](Self::body_timeout): 30 s.
    pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
    /// The default [`write_timeout`](Self::write_timeout): 30 s.
    pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
    /// The default [`max_buf_size`](Self::max_buf_size): 64 KiB.
    pub const MAX_BUF_SIZE: usize = 64 * 1024;
    /// The default [`max_body_bytes`](Self::max_body_bytes): 64 MiB.
    pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

    /// A server whose timeouts run on `timer`, with the default bounds.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio_web::server::Server;
    ///
    /// let server = Server::new(purgatorio_web::shared_timer());
    /// assert_eq!(server.open_connections(), 0);
    /// ```
    pub fn new(timer: &Timer) -> Self {
        Server {
            timer: timer.clone(),
            slots: Arc::new(Semaphore::new(Self::MAX_CONNECTIONS)),
            max_per_ip: Self::MAX_CONNECTIONS_PER_IP,
            header_read_timeout: Self::HEADER_READ_TIMEOUT,
            body_timeout: Self::BODY_TIMEOUT,
            write_timeout: Self::WRITE_TIMEOUT,
            max_buf_size: Self::MAX_BUF_SIZE,
            budget: Arc::new(Budget::new(Self::MAX_BODY_BYTES)),
            counts: Arc::default(),
        }
    }

    /// Serves at most `max` connections at once (at least 1); the next
    /// waits in the listen queue until one closes. A parked long-poll holds
    /// its connection, so this also bounds the parked GETs.
    ///
    /// # Examples
    ///
    /// ```
    /// let server = purgatorio_web::server::Server::new(purgatorio_web::shared_timer())
    ///     .max_connections(100);
    /// # drop(server);
    /// ```
    pub fn max_connections(mut self, max: usize) -> Self {
        self.slots = Arc::new(Semaphore::new(max.clamp(1, Semaphore::MAX_PERMITS)));
        self
    }

    /// Serves at most `max` connections at once from one IP address (at
    /// least 1); one more is closed as soon as it is accepted, so that one
    /// client cannot take every slot.
    ///
    /// # Examples
    ///
    /// ```
    /// let server = purgatorio_web::server::Server::new(purgatorio_web::shared_timer())
    ///     .max_connections_per_ip(16);
    /// # drop(server);
    /// ```
    pub fn max_connections_per_ip(mut self, max: usize) -> Self {
        self.max_per_ip = max.max(1);
        self
    }

    /// Closes a connection whose request headers do not all arrive within
    /// `timeout` (at most a year), counted from when it waits for them: an
    /// idle keep-alive connection is closed after it too.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let server = purgatorio_web::server::Server::new(purgatorio_web::shared_timer())
    ///     .header_read_timeout(Duration::from_secs(10));
    /// # drop(server);
    /// ```
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout.min(LONGEST);
        self
    }

    /// Cuts off a request body that is not all there `timeout` after it
    /// first had to wait ([`BodyError::TimedOut`]); sending a byte now and
    /// then does not extend it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let server = purgatorio_web::server::Server::new(purgatorio_web::shared_timer())
    ///     .body_timeout(Duration::from_secs(10));
    /// # drop(server);
    /// ```
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// Closes a connection whose write has waited `timeout` without the
    /// client reading 16 KiB of it, or all of it: a client that stopped
    /// reading, or reads a trickle.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let server = purgatorio_web::server::Server::new(purgatorio_web::shared_timer())
    ///     .write_timeout(Duration::from_secs(10));
    /// # drop(server);
    /// ```
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// A connection's read buffer, at least 8 KiB (hyper's floor): request
    /// headers that do not fit are answered 431.
    ///
    /// # Examples
    ///
    /// ```
    /// let server = purgatorio_web::server::Server::new(purgatorio_web::shared_timer())
    ///     .max_buf_size(16 * 1024);
    /// # drop(server);
    /// ```
    pub fn max_buf_size(mut self, bytes: usize) -> Self {
        self.max_buf_size = bytes.max(8192);
        self
    }

    /// The bytes of request bodies all connections may hold at once while
    /// they are read (at least 64 KiB), each data frame charged 64 bytes
    /// more than its length; a body that would pass it fails with
    /// [`BodyError::Busy`]. Bytes are charged until the body is dropped:
    /// a handler that streams a body still holds its share until then.
    ///
    /// # Examples
    ///
    /// ```
    /// let server = purgatorio_web::server::Server::new(purgatorio_web::shared_timer())
    ///     .max_body_bytes(16 << 20);
    /// # drop(server);
    /// ```
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.budget = Arc::new(Budget::new(bytes.max(64 * 1024)));
        self
    }

    /// Connections open now.
    ///
    /// # Examples
    ///
    /// ```
    /// let server = purgatorio_web::server::Server::new(purgatorio_web::shared_timer());
    /// assert_eq!(server.open_connections(), 0);
    /// ```
    pub fn open_connections(&self) -> usize {
        self.counts.open.load(Ordering::Relaxed)
    }

    /// Connections closed as soon as accepted, because their address
    /// already had [`max_connections_per_ip`](Self::max_connections_per_ip).
    ///
    /// # Examples
    ///
    /// ```
    /// let server = purgatorio_web::server::Server::new(purgatorio_web::shared_timer());
    /// assert_eq!(server.refused_connections(), 0);
    /// ```
    pub fn refused_connections(&self) -> u64 {
        self.counts.refused.load(Ordering::Relaxed)
    }

    /// Accepts that failed (too many open files, say); each was tried again
    /// after 100 ms.
    ///
    /// # Examples
    ///
    /// ```
    /// let server = purgatorio_web::server::Server::new(purgatorio_web::shared_timer());
    /// assert_eq!(server.accept_errors(), 0);
    /// ```
    pub fn accept_errors(&self) -> u64 {
        self.counts.accept_errors.load(Ordering::Relaxed)
    }

    /// Bytes of request bodies held now, across connections, as charged.
    ///
    /// # Examples
    ///
    /// ```
    /// let server = purgatorio_web::server::Server::new(purgatorio_web::shared_timer());
    /// assert_eq!(server.body_bytes_held(), 0);
    /// ```
    pub fn body_bytes_held(&self) -> usize {
        self.budget.held()
    }

    /// Serves `app` on `listener`'s connections, one task each, until the
    /// timer shuts down. Handlers can read the peer's address with
    /// `ConnectInfo<SocketAddr>`.
    ///
    /// # Errors
    ///
    /// The accept's error, once the timer has shut down. Before that, an
    /// accept that fails is counted ([`accept_errors`](Self::accept_errors))
    /// and tried again after 100 ms; a connection's own errors close only
    /// it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// use purgatorio_web::server::Server;
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// Server::new(purgatorio_web::shared_timer()).serve(listener, axum::Router::new()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn serve(&self, listener: TcpListener, app: Router) -> std::io::Result<()> {
        self.serve_with_shutdown(listener, app, std::future::pending())
            .await
    }

    /// [`serve`](Self::serve) until `signal` completes, then stops
    /// accepting, lets each connection finish the request it is serving
    /// (idle ones close at once), and returns once every connection has
    /// closed. A parked long-poll ends at its answer: shut its purgatory
    /// down first to answer them all at once (503).
    ///
    /// # Errors
    ///
    /// As [`serve`](Self::serve).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// use purgatorio_web::server::Server;
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let server = Server::new(purgatorio_web::shared_timer());
    /// // Stops at once: the signal is already there.
    /// server.serve_with_shutdown(listener, axum::Router::new(), async {}).await?;
    /// # Ok(()) }
    /// ```
    pub async fn serve_with_shutdown(
        &self,
        listener: TcpListener,
        app: Router,
        signal: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        let (stop, stopping) = watch::channel(false);
        // Each connection holds a sender; all dropped, all have closed.
        let (open, mut all_closed) = mpsc::channel::<()>(1);
        tokio::pin!(signal);
        loop {
            let accepted = tokio::select! {
                () = &mut signal => break,
                accepted = self.accept(&listener) => accepted,
            };
            let (tcp, peer, slot) = match accepted {
                Ok(accepted) => accepted,
                Err(e) if self.timer.is_shut_down() => return Err(e),
                Err(_) => continue,
            };
            let Some(per_ip) = PerIp::count(&self.counts, peer.ip(), self.max_per_ip) else {
                self.counts.refused.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let connection = self
                .clone()
                .connection(tcp, peer, app.clone(), stopping.clone());
            let (open, held) = (open.clone(), (slot, per_ip));
            tokio::spawn(async move {
                connection.await;
                drop((held, open));
            });
        }
        // New connections are refused from here on.
        drop(listener);
        let _ = stop.send(true);
        drop(open);
        let _ = all_closed.recv().await;
        Ok(())
    }

    /// The next connection and its slot. A failed accept of the connection
    /// alone (reset before it was taken) is skipped; any other is counted
    /// and returned after 100 ms.
    async fn accept(
        &self,
        listener: &TcpListener,
    ) -> std::io::Result<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
        use std::io::ErrorKind::{ConnectionAborted, ConnectionReset, Interrupted};
        let Ok(slot) = Arc::clone(&self.slots).acquire_owned().await else {
            unreachable!("the semaphore is never closed");
        };
        loop {
            match listener.accept().await {
                Ok((tcp, peer)) => return Ok((tcp, peer, slot)),
                Err(e) if matches!(e.kind(), ConnectionAborted | ConnectionReset | Interrupted) => {
                }
                Err(e) => {
                    self.counts.accept_errors.fetch_add(1, Ordering::Relaxed);
                    self.timer.sleep(Duration::from_millis(100)).await;
                    return Err(e);
                }
            }
        }
    }

    /// Serves one connection until it closes, or ends it gracefully once
    /// `stopping` turns true.
    async fn connection(
        self,
        tcp: TcpStream,
        peer: SocketAddr,
        app: Router,
        mut stopping: watch::Receiver<bool>,
    ) {
        let _open = Open::count(&self.counts.open);
        // Answers go out at once: no Nagle delay on keep-alive connections.
        let _ = tcp.set_nodelay(true);
        let stall = Stall::new(&self.timer, self.write_timeout, WRITE_MIN_PROGRESS);
        let io = GuardedIo::new(tcp, stall);
        let (timer, limit, budget) = (
            self.timer.clone(),
            self.body_timeout,
            Arc::clone(&self.budget),
        );
        let app = app.map_request(move |request: Request<hyper::body::Incoming>| {
            // A request with no body (most GETs) needs no guard.
            let mut request = request.map(|body| {
                if http_body::Body::is_end_stream(&body) {
                    return Body::new(body);
                }
                let stall = Stall::new(&timer, limit, usize::MAX);
                Body::new(GuardedBody::new(
                    Body::new(body),
                    stall,
                    Arc::clone(&budget),
                ))
            });
            request.extensions_mut().insert(ConnectInfo(peer));
            request
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(HyperTimer::new(&self.timer))
            .header_read_timeout(self.header_read_timeout)
            .max_buf_size(self.max_buf_size)
            .serve_connection(TokioIo::new(io), TowerToHyperService::new(app))
            .with_upgrades();
        tokio::pin!(connection);
        // A connection's errors (a client gone, a timeout) end only it.
        tokio::select! {
            _ = connection.as_mut() => return,
            _ = stopping.wait_for(|&stop| stop) => {}
        }
        connection.as_mut().graceful_shutdown();
        let _ = connection.await;
    }
}

/// Counts a connection open while it lives.
struct Open(Arc<AtomicUsize>);

impl Open {
    /// One more open in `open`.
    fn count(open: &Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::Relaxed);
        Open(Arc::clone(open))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts a connection against its address while it lives.
struct PerIp {
    /// The counts.
    counts: Arc<Counts>,
    /// Its address.
    ip: IpAddr,
}

impl PerIp {
    /// One more from `ip`, unless it already has `max`.
    fn count(counts: &Arc<Counts>, ip: IpAddr, max: usize) -> Option<Self> {
        let mut by_ip = counts.by_ip.lock();
        let open = by_ip.entry(ip).or_default();
        if *open >= max {
            return None;
        }
        *open += 1;
        drop(by_ip);
        Some(PerIp {
            counts: Arc::clone(counts),
            ip,
        })
    }
}

impl Drop for PerIp {
    fn drop(&mut self) {
        let mut by_ip = self.counts.by_ip.lock();
        if let Some(open) = by_ip.get_mut(&self.ip) {
            *open -= 1;
            if *open == 0 {
                by_ip.remove(&self.ip);
            }
        }
    }
}
