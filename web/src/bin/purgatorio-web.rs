//! The long-poll service on a port, every request under purgatorio's
//! timeout layer: the program to copy.
//!
//! ```text
//! cargo run --release -p purgatorio-web -- 127.0.0.1:8500
//! curl -X PUT --data-binary v1 127.0.0.1:8500/keys/config        # 1
//! curl -i '127.0.0.1:8500/keys/config?index=1&wait=30s'          # waits for a PUT
//! ```

use std::process::ExitCode;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::http::StatusCode;
use axum::serve::ListenerExt;
use clap::Parser;
use purgatorio_web::long_poll::{LongPoll, MAX_WAIT};
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
    // One timer for the process: the layer's timeouts and the parked GETs.
    let service = match LongPoll::new(shared_timer()) {
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
    // Answers go out at once: no Nagle delay on keep-alive connections.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    if let Err(e) = axum::serve(listener, app).await {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
