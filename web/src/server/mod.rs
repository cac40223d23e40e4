//! [`Server`]: serves a router with every edge bounded, timed by a
//! purgatorio [`Timer`].
//!
//! `axum::serve` leaves a server's edges open: it accepts every connection,
//! waits forever for a request's headers or body, and writes to a client
//! that never reads until the kernel gives up. A [`Server`] bounds each:
//!
//! * **Connections**: at most [`max_connections`](Server::max_connections)
//!   at once; past it, new ones wait in the kernel's listen queue.
//! * **Headers**: a request's headers (and an idle keep-alive
//!   connection's next request) must arrive within
//!   [`header_read_timeout`](Server::header_read_timeout), in at most
//!   [`max_buf_size`](Server::max_buf_size) bytes (else 431).
//! * **Bodies**: a body that sends nothing for
//!   [`body_stall_timeout`](Server::body_stall_timeout) is cut off, and the
//!   bodies being read hold at most
//!   [`max_body_bytes`](Server::max_body_bytes) between them
//!   ([`BodyError`]; the handler answers 400 and the connection closes).
//! * **Answers**: a write that makes no progress for
//!   [`write_timeout`](Server::write_timeout) closes the connection, so a
//!   client that stops reading pins its answer no longer than that.
//!
//! Memory is then bounded in total: each connection holds at most its read
//! buffer ([`max_buf_size`](Server::max_buf_size)) and the answer being
//! written, and the bodies being read at most
//! [`max_body_bytes`](Server::max_body_bytes) together.
//!
//! Every timeout runs on the server's [`Timer`], hyper's own too
//! ([`HyperTimer`]): on a [`ManualClock`](purgatorio::ManualClock), a test
//! moves them all.

mod body;
mod io;
mod stall;
mod timer;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use purgatorio::Timer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

pub use body::BodyError;
pub use timer::HyperTimer;

use body::{Budget, GuardedBody};
use io::GuardedIo;
use stall::Stall;

/// Serves an axum [`Router`] over HTTP/1.1 with bounded connections,
/// header and body reads, and writes. See the [module](self) for what
/// each bound does.
///
/// # Examples
///
/// ```no_run
/// use purgatorio_web::{long_poll::LongPoll, server::Server, shared_timer};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let app = LongPoll::new(shared_timer())?.router();
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8500").await?;
/// Server::new(shared_timer()).max_connections(10_000).serve(listener, app).await;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Server {
    /// Where every timeout goes.
    timer: Timer,
    /// The most connections served at once.
    max_connections: usize,
    /// How long a request's headers may take.
    header_read_timeout: Duration,
    /// How long a body may send nothing.
    body_stall_timeout: Duration,
    /// How long a write may make no progress.
    write_timeout: Duration,
    /// A connection's read buffer.
    max_buf_size: usize,
    /// The bytes of request bodies held at once.
    budget: Arc<Budget>,
    /// Connections open now.
    open: Arc<AtomicUsize>,
}

impl Server {
    /// The default [`max_connections`](Self::max_connections): 4,096.
    pub const MAX_CONNECTIONS: usize = 4096;
    /// The default [`header_read_timeout`](Self::header_read_timeout): 30 s.
    pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
    /// The default [`body_stall_timeout`](Self::body_stall_timeout): 30 s.
    pub const BODY_STALL_TIMEOUT: Duration = Duration::from_secs(30);
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
            max_connections: Self::MAX_CONNECTIONS,
            header_read_timeout: Self::HEADER_READ_TIMEOUT,
            body_stall_timeout: Self::BODY_STALL_TIMEOUT,
            write_timeout: Self::WRITE_TIMEOUT,
            max_buf_size: Self::MAX_BUF_SIZE,
            budget: Arc::new(Budget::new(Self::MAX_BODY_BYTES)),
            open: Arc::default(),
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
        self.max_connections = max.max(1);
        self
    }

    /// Closes a connection whose request headers do not all arrive within
    /// `timeout`, counted from when it waits for them: an idle keep-alive
    /// connection is closed after it too.
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
        self.header_read_timeout = timeout;
        self
    }

    /// Cuts off a request body that sends nothing for `timeout`
    /// ([`BodyError::Stalled`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let server = purgatorio_web::server::Server::new(purgatorio_web::shared_timer())
    ///     .body_stall_timeout(Duration::from_secs(10));
    /// # drop(server);
    /// ```
    pub fn body_stall_timeout(mut self, timeout: Duration) -> Self {
        self.body_stall_timeout = timeout;
        self
    }

    /// Closes a connection whose write makes no progress for `timeout`: a
    /// client that stops reading.
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
    /// they are read; a body that would pass it fails with
    /// [`BodyError::Busy`].
    ///
    /// # Examples
    ///
    /// ```
    /// let server = purgatorio_web::server::Server::new(purgatorio_web::shared_timer())
    ///     .max_body_bytes(16 << 20);
    /// # drop(server);
    /// ```
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.budget = Arc::new(Budget::new(bytes));
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
        self.open.load(Ordering::Relaxed)
    }

    /// Bytes of request bodies held now, across connections.
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
    /// process ends. An accept that fails (too many open files, say) is
    /// tried again after 100 ms; a connection's own errors close only it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// use purgatorio_web::server::Server;
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// Server::new(purgatorio_web::shared_timer()).serve(listener, axum::Router::new()).await;
    /// # Ok(()) }
    /// ```
    pub async fn serve(&self, listener: TcpListener, app: Router) {
        let slots = Arc::new(Semaphore::new(self.max_connections));
        loop {
            let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
                unreachable!("the semaphore is never closed");
            };
            match listener.accept().await {
                Ok((tcp, _)) => {
                    tokio::spawn(self.clone().connection(tcp, app.clone(), slot));
                }
                Err(_) => self.timer.sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Serves one connection, holding `slot` until it closes.
    async fn connection(self, tcp: TcpStream, app: Router, slot: OwnedSemaphorePermit) {
        let _open = Open::count(&self.open);
        // Answers go out at once: no Nagle delay on keep-alive connections.
        let _ = tcp.set_nodelay(true);
        let io = GuardedIo::new(tcp, Stall::new(&self.timer, self.write_timeout));
        let (timer, stall, budget) = (
            self.timer.clone(),
            self.body_stall_timeout,
            Arc::clone(&self.budget),
        );
        let app = app.map_request(move |request: Request<hyper::body::Incoming>| {
            let stall = Stall::new(&timer, stall);
            request.map(|body| {
                Body::new(GuardedBody::new(
                    Body::new(body),
                    stall,
                    Arc::clone(&budget),
                ))
            })
        });
        // A connection's errors (a client gone, a timeout) end only it.
        let _ = hyper::server::conn::http1::Builder::new()
            .timer(HyperTimer::new(&self.timer))
            .header_read_timeout(self.header_read_timeout)
            .max_buf_size(self.max_buf_size)
            .serve_connection(TokioIo::new(io), TowerToHyperService::new(app))
            .await;
        drop(slot);
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
