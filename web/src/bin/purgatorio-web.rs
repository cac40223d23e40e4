//! The long-poll service on a port, every request under purgatorio's
//! timeout layer: the program to copy.
//!
//! ```text
//! cargo run --release -p purgatorio-web -- 127.0.0.1:8500
//! curl -X PUT --data-binary v1 127.0.0.1:8500/keys/config        # 1
//! curl -i '127.0.0.1:8500/keys/config?index=1&wait=30s'          # waits for a PUT
//! ```
//!
//! Every edge is bounded ([`Server`]): connections, header and body reads,
//! stalled writes, request bodies in flight and the store's keys and bytes
//! (`--help` lists the flags and their defaults).

use std::process::ExitCode;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::http::StatusCode;
use clap::Parser;
use purgatorio_web::long_poll::{LongPoll, StoreLimits, MAX_WAIT};
use purgatorio_web::server::Server;
use purgatorio_web::{shared_timer, BoxError, Elapsed, TimeoutLayer};
use tower::ServiceBuilder;

/// How much longer than the longest wait a request may take before the
/// layer cuts it off: a parked GET answers at its wait, well before.
const GRACE: Duration = Duration::from_secs(10);

/// A Consul-style long-poll service: `GET /keys/{key}?index=N&wait=30s`
/// waits for a `PUT /keys/{key}` past index N.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The address to listen on.
    #[arg(default_value = "127.0.0.1:8500")]
    listen: String,
    /// The most connections served at once (each parked GET holds one);
    /// more wait in the listen queue.
    #[arg(long, default_value_t = Server::MAX_CONNECTIONS)]
    max_connections: usize,
    /// Closes a connection whose request headers take longer (an idle
    /// keep-alive connection too).
    #[arg(long, default_value_t = Server::HEADER_READ_TIMEOUT.as_millis() as u64)]
    header_read_timeout_ms: u64,
    /// The most connections at once from one IP address; one more is
    /// closed at once.
    #[arg(long, default_value_t = Server::MAX_CONNECTIONS_PER_IP)]
    max_connections_per_ip: usize,
    /// A connection's read buffer: request headers past it are answered 431.
    #[arg(long, default_value_t = Server::MAX_BUF_SIZE)]
    max_buf_size: usize,
    /// Cuts off a request body still arriving this long after it first had
    /// to wait.
    #[arg(long, default_value_t = Server::BODY_TIMEOUT.as_millis() as u64)]
    body_timeout_ms: u64,
    /// Closes a connection whose answer has waited this long without the
    /// client reading 16 KiB of it (a client that stopped reading).
    #[arg(long, default_value_t = Server::WRITE_TIMEOUT.as_millis() as u64)]
    write_timeout_ms: u64,
    /// The bytes of request bodies held at once, across connections.
    #[arg(long, default_value_t = Server::MAX_BODY_BYTES)]
    max_body_bytes: usize,
    /// The most keys the store holds.
    #[arg(long, default_value_t = StoreLimits::default().max_keys)]
    max_keys: usize,
    /// The most bytes of keys and values the store holds.
    #[arg(long, default_value_t = StoreLimits::default().max_bytes)]
    max_store_bytes: usize,
}

/// A request the layer cut off is 408; one cut off by the timer's
/// shutdown is 503.
async fn timed_out(err: BoxError) -> StatusCode {
    if err.is::<Elapsed>() {
        StatusCode::REQUEST_TIMEOUT
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    // Listened for from here: a signal during start-up is not missed.
    let signal = stop_signal();
    // One timer for the process: the layer's timeouts and the parked GETs.
    let limits = StoreLimits {
        max_keys: args.max_keys,
        max_bytes: args.max_store_bytes,
    };
    let service = match LongPoll::with_limits(shared_timer(), limits) {
        Ok(service) => service,
        Err(e) => {
            eprintln!("error: cannot build the purgatory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let app = service.router().layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(timed_out))
            .layer(TimeoutLayer::new(MAX_WAIT + GRACE)),
    );
    let listener = match tokio::net::TcpListener::bind(&args.listen).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    if let Ok(local) = listener.local_addr() {
        println!("long-poll service on http://{local}/keys/{{key}}");
    }
    let server = Server::new(shared_timer())
        .max_connections(args.max_connections)
        .max_connections_per_ip(args.max_connections_per_ip)
        .header_read_timeout(Duration::from_millis(args.header_read_timeout_ms))
        .max_buf_size(args.max_buf_size)
        .body_timeout(Duration::from_millis(args.body_timeout_ms))
        .write_timeout(Duration::from_millis(args.write_timeout_ms))
        .max_body_bytes(args.max_body_bytes);
    // On Ctrl-C or SIGTERM: stop accepting, answer every parked GET 503,
    // let the requests being served finish, then exit.
    let parked = service.clone();
    let stop = async move {
        signal.await;
        parked.purgatory().shutdown();
    };
    match server.serve_with_shutdown(listener, app, stop).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot accept connections: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Ctrl-C, or SIGTERM where there are signals: listened for from this
/// call on, not from the future's first poll, so a signal that comes while
/// the server starts is not missed.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{signal, SignalKind};
        signal(SignalKind::terminate())
            .and_then(|term| Ok((term, signal(SignalKind::interrupt())?)))
    };
    async move {
        #[cfg(unix)]
        if let Ok((mut term, mut interrupt)) = signals {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
