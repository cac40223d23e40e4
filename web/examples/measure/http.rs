//! `measure http`: `wrk` keep-alive against the long-poll service under no
//! layer, `tower::timeout` and ours: requests/s and the server's CPU per
//! request. A GET without `index` answers at once.

use std::process::Command;

use purgatorio_testkit::require_program;
use purgatorio_web::BoxError;

use crate::client::{Connection, Server};

/// What to run.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// wrk's connections.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Seconds per run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Runs of each variant, in rotation.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
}

/// One wrk run: requests/s, and the server's CPU microseconds per request.
fn wrk(
    layer: &str,
    args: &Args,
    runtime: &tokio::runtime::Runtime,
) -> Result<(f64, f64), BoxError> {
    let server = Server::start(&["--store", "purgatory", "--layer", layer])?;
    let addr = server.addrs[0];
    runtime.block_on(async {
        let mut connection = Connection::open(addr).await?;
        connection.send("PUT", "/keys/k", "value").await?;
        Ok::<_, BoxError>(())
    })?;
    let cpu = server.cpu_seconds();
    let output = Command::new(require_program("wrk", "wrk"))
        .args(["-t2", &format!("-c{}", args.connections)])
        .arg(format!("-d{}s", args.seconds))
        .arg(format!("http://{addr}/keys/k"))
        .output()?;
    let cpu = server.cpu_seconds() - cpu;
    let text = String::from_utf8_lossy(&output.stdout);
    let requests: f64 = text
        .lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no request count in wrk's output: {text}"))?;
    let per_second: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or("no Requests/sec")?;
    if text.contains("Non-2xx") || text.contains("Socket errors") {
        return Err(format!("wrk saw errors: {text}").into());
    }
    Ok((per_second, cpu / requests * 1e6))
}

pub fn run(args: &Args) -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let layers = ["none", "tower", "purgatorio"];
    let mut results: Vec<Vec<(f64, f64)>> = vec![Vec::new(); layers.len()];
    for _ in 0..args.rounds {
        for (layer, runs) in layers.iter().zip(&mut results) {
            runs.push(wrk(layer, args, &runtime)?);
        }
    }
    println!(
        "wrk -t2 -c{} -d{}s, GET /keys/k answered at once; mean of {} rounds (each round's figures in brackets)",
        args.connections, args.seconds, args.rounds
    );
    println!("| layer | req/s | server CPU/request µs |");
    println!("|---|---|---|");
    for (layer, runs) in layers.iter().zip(&results) {
        let n = runs.len() as f64;
        let rate = runs.iter().map(|r| r.0).sum::<f64>() / n;
        let cpu = runs.iter().map(|r| r.1).sum::<f64>() / n;
        let each: Vec<String> = runs
            .iter()
            .map(|r| format!("{:.0}/{:.2}", r.0, r.1))
            .collect();
        println!("| {layer} | {rate:.0} | {cpu:.2} | [{}]", each.join(", "));
    }
    Ok(())
}
