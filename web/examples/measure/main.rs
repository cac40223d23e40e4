//! The measurements of the web member, each beside the tokio way in the same
//! run (the tables of `web/README.md`). Not a test: figures are reported,
//! never asserted. Run each under the machine's benchmark lock:
//!
//! ```text
//! cargo build --release -p purgatorio-web --example measure
//! flock /tmp/bench.lock target/release/examples/measure layer
//! flock /tmp/bench.lock target/release/examples/measure http
//! flock /tmp/bench.lock target/release/examples/measure parked
//! target/release/examples/measure alloc
//! ```
//!
//! * `layer`: the layer's own CPU per call on both workers of a 2-worker
//!   runtime: no layer, `tower::timeout`, ours.
//! * `http`: `wrk` keep-alive against the long-poll service under each of
//!   the three: requests/s and the server's CPU per request.
//! * `parked`: 10,000 and 50,000 parked long-polls, and expiries, against
//!   the purgatory service and a `tokio::sync::watch` + `tokio::time::timeout`
//!   one: RSS per parked request, CPU while idle, wake latency, lateness.
//! * `alloc`: what one parked GET allocates in each of those two services,
//!   counted in process by this program's allocator (exact, not timed).
//! * `layer --only V --inner I`: one layer and inner service alone, for an
//!   instruction count under `valgrind --tool=callgrind`.
//!
//! The servers run as child processes of this program (`measure serve`),
//! so their CPU and memory are theirs alone.

mod alloc;
mod client;
mod http;
mod layer;
mod parked;
mod serve;
mod watch;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Measures purgatorio-web beside the tokio way.
#[derive(Debug, Parser)]
struct Args {
    /// What to measure.
    #[command(subcommand)]
    what: What,
}

/// The measurements, and the server they start.
#[derive(Debug, Subcommand)]
enum What {
    /// The layer's own cost per call, in process.
    Layer(layer::Args),
    /// Requests/s and CPU per request through HTTP, with wrk.
    Http(http::Args),
    /// Parked long-polls: memory, idle CPU, wake latency, expiries.
    Parked(parked::Args),
    /// What one parked GET allocates, counted in process.
    Alloc(alloc::Args),
    /// The server the others start (one of the variants).
    #[command(hide = true)]
    Serve(serve::Args),
}

fn main() -> ExitCode {
    let result = match Args::parse().what {
        What::Layer(args) => layer::run(&args),
        What::Http(args) => http::run(&args),
        What::Parked(args) => parked::run(&args),
        What::Alloc(args) => alloc::run(&args),
        What::Serve(args) => serve::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
