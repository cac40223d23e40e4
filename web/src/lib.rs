//! # purgatorio-web
//!
//! purgatorio in the Rust web stack, through its public API only:
//!
//! * [`TimeoutLayer`]: a drop-in for `tower::timeout::TimeoutLayer` whose
//!   timeouts are purgatorio [`Sleep`](purgatorio::Sleep)s on a shared
//!   [`Timer`](purgatorio::Timer), with tower's error type, so axum's
//!   `HandleErrorLayer` and tonic work unchanged.
//! * [`long_poll`]: an axum service of Consul-style blocking queries, each
//!   waiting GET parked in a [`Purgatory`](purgatorio::Purgatory) until a PUT
//!   to its key or its wait.
//! * [`server`]: serves a router with every edge bounded (connections,
//!   header and body reads, stalled writes), its timeouts on the same timer;
//!   `axum::serve` bounds none of them.
//!
//! ```no_run
//! use std::time::Duration;
//! use axum::{error_handling::HandleErrorLayer, http::StatusCode};
//! use purgatorio_web::{long_poll::LongPoll, shared_timer, BoxError, Elapsed, TimeoutLayer};
//! use tower::ServiceBuilder;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), BoxError> {
//!     // One timer for the process: the layer's timeouts and the parked GETs.
//!     let service = LongPoll::new(shared_timer())?;
//!     let app = service.router().layer(
//!         ServiceBuilder::new()
//!             .layer(HandleErrorLayer::new(|err: BoxError| async move {
//!                 if err.is::<Elapsed>() { StatusCode::REQUEST_TIMEOUT } else { StatusCode::SERVICE_UNAVAILABLE }
//!             }))
//!             .layer(TimeoutLayer::new(Duration::from_secs(660))),
//!     );
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:8500").await?;
//!     purgatorio_web::server::Server::new(shared_timer()).serve(listener, app).await;
//!     Ok(())
//! }
//! ```
//!
//! The member's README has the measurements beside `tower::timeout` and a
//! `tokio::sync::watch` long-poll.

#![deny(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

pub mod long_poll;
pub mod server;
mod timeout;

pub use timeout::{
    shared_timer, BoxError, Elapsed, ResponseFuture, Timeout, TimeoutLayer, TimerShutDown,
};
