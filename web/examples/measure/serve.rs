//! `measure serve`: one variant of the service on loopback ports; prints
//! `ports P1,P2,..` once listening, and `GET /stats` answers how many GETs
//! wait.

use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::http::StatusCode;
use axum::routing::get;
use axum::serve::ListenerExt;
use axum::Router;
use clap::ValueEnum;
use purgatorio_web::long_poll::{LongPoll, MAX_WAIT};
use purgatorio_web::{shared_timer, BoxError, TimeoutLayer};
use tower::ServiceBuilder;

/// The server's variant.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where GETs wait.
    #[arg(long, value_enum)]
    pub store: Waits,
    /// The timeout layer around every request.
    #[arg(long, value_enum, default_value = "none")]
    pub layer: Layer,
    /// How many ports to listen on (a client needs several for more than
    /// about 28,000 connections from one address).
    #[arg(long, default_value_t = 1)]
    pub ports: usize,
}

/// Where a GET waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Waits {
    /// Parked in a purgatory (`long_poll::LongPoll`).
    Purgatory,
    /// On a `tokio::sync::watch` under `tokio::time::timeout`.
    Watch,
    /// The same, its handler freeing the request's strings before it
    /// waits, as `long_poll`'s does.
    WatchLean,
}

/// The timeout layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Layer {
    /// None.
    None,
    /// `tower::timeout::TimeoutLayer`.
    Tower,
    /// `purgatorio_web::TimeoutLayer`.
    Purgatorio,
}

/// How long the layer gives a request: past the longest wait.
const LAYER_TIMEOUT: Duration = MAX_WAIT.saturating_add(Duration::from_secs(10));

/// 408 for a timeout, 503 for anything else.
async fn status_of(err: BoxError) -> StatusCode {
    if err.is::<tower::timeout::error::Elapsed>() {
        StatusCode::REQUEST_TIMEOUT
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

/// The variant's router, with `/stats`.
fn router(args: &Args) -> Result<Router, BoxError> {
    let router = match args.store {
        Waits::Purgatory => {
            let service = LongPoll::new(shared_timer())?;
            let stats = service.clone();
            let waiting = move || std::future::ready(stats.purgatory().delayed().to_string());
            service.router().route("/stats", get(waiting))
        }
        Waits::Watch | Waits::WatchLean => {
            let service = crate::watch::WatchLongPoll::default();
            let stats = service.clone();
            let waiting = move || std::future::ready(stats.waiting().to_string());
            let routes = if args.store == Waits::Watch {
                service.router()
            } else {
                service.lean_router()
            };
            routes.route("/stats", get(waiting))
        }
    };
    let errors = HandleErrorLayer::new(status_of);
    Ok(match args.layer {
        Layer::None => router,
        Layer::Tower => router.layer(
            ServiceBuilder::new()
                .layer(errors)
                .layer(tower::timeout::TimeoutLayer::new(LAYER_TIMEOUT)),
        ),
        Layer::Purgatorio => router.layer(
            ServiceBuilder::new()
                .layer(errors)
                .layer(TimeoutLayer::new(LAYER_TIMEOUT)),
        ),
    })
}

/// Serves until killed.
pub fn run(args: &Args) -> Result<(), BoxError> {
    let runtime = crate::client::two_workers()?;
    runtime.block_on(async {
        let router = router(args)?;
        let mut ports = Vec::new();
        for _ in 0..args.ports {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            ports.push(listener.local_addr()?.port().to_string());
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let serving = axum::serve(listener, router.clone());
            tokio::spawn(async move { serving.await });
        }
        println!("ports {}", ports.join(","));
        std::future::pending::<()>().await;
        Ok(())
    })
}
