//! `measure parked`: long-polls parked by the thousands, in the purgatory
//! service and in the `tokio::sync::watch` one (as a user writes it, and
//! with its GET handler freeing the request's strings before it waits, as
//! ours does).
//!
//! * **Parked**: `count` GETs wait on one key (a PUT first gives it index
//!   1; each asks for a write past 1 with a 10-minute wait). Reported: the
//!   server's RSS growth per parked GET (connection included), its CPU while
//!   they all wait (5 s), and the wake latency from sending one PUT to each
//!   waiter's answer (p50, p99, max), checking every answer is the PUT's.
//! * **Expiries**: `expiries` GETs whose waits spread over 1-3 s, no PUT:
//!   how many answered before their wait (measured from before the request
//!   was written, so a server that answered early shows), and the lateness.

use std::sync::Arc;
use std::time::{Duration, Instant};

use purgatorio_web::BoxError;
use tokio::sync::Semaphore;

use crate::client::{ms, percentile, Answer, Connection, Server};

/// What to run.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How many GETs park, one run each, over HTTP/1.1: a connection each.
    #[arg(long, value_delimiter = ',', default_value = "10000")]
    counts: Vec<usize>,
    /// How many GETs park, one run each, as HTTP/2 streams (h2c, prior
    /// knowledge), 200 to a connection (hyper's default limit).
    #[arg(long, value_delimiter = ',', default_value = "10000,50000")]
    h2_counts: Vec<usize>,
    /// How many GETs expire in the expiry run.
    #[arg(long, default_value_t = 10_000)]
    expiries: usize,
    /// Seconds of idle CPU measurement.
    #[arg(long, default_value_t = 5)]
    idle_seconds: u64,
}

/// The server's ports (connections from one address to one port are
/// limited by the ~28,000 ephemeral ports).
const PORTS: usize = 4;

/// Connections being opened at once.
const OPENING: usize = 256;

/// The longest any step may take.
const LIMIT: Duration = Duration::from_secs(300);

/// The services: ours, the watch one as a user writes it, and the watch
/// one with its handler written with the care ours is.
const STORES: [&str; 3] = ["purgatory", "watch", "watch-lean"];

/// One parked run's figures.
struct Parked {
    /// RSS growth per parked GET, bytes.
    rss_per_get: f64,
    /// Server CPU while idle, ms per s.
    idle_cpu: f64,
    /// Wake latencies, sorted.
    wake: Vec<Duration>,
}

/// Opens a connection to one of `server`'s ports and writes `path`'s GET,
/// holding an opening permit meanwhile; returns it and when it was written.
async fn park(
    server: &Server,
    i: usize,
    path: &str,
    opening: &Semaphore,
) -> Result<(Connection, Instant), BoxError> {
    let _permit = opening.acquire().await?;
    let mut connection = Connection::open(server.addrs[i % server.addrs.len()]).await?;
    let sent = Instant::now();
    connection.write("GET", path, "").await?;
    Ok((connection, sent))
}

/// Starts `store`'s server with a key `hot` at index 1.
async fn started(store: &str) -> Result<Server, BoxError> {
    let server = Server::start(&["--store", store, "--ports", &PORTS.to_string()])?;
    let mut connection = Connection::open(server.addrs[0]).await?;
    let answer = connection.send("PUT", "/keys/hot", "v1").await?;
    assert_eq!(answer.index, 1, "the first write");
    Ok(server)
}

/// The GET every parked request sends.
const PARK: &str = "/keys/hot?index=1&wait=10m";

/// How many streams hyper's HTTP/2 server allows on a connection.
const STREAMS: usize = 200;

/// A parked GET's answer, and when it came.
type Woken = tokio::task::JoinHandle<Result<(Answer, Instant), BoxError>>;

/// `count` GETs, each on a connection of its own.
fn h1_gets(server: &Arc<Server>, count: usize) -> Vec<Woken> {
    let opening = Arc::new(Semaphore::new(OPENING));
    (0..count)
        .map(|i| {
            let (server, opening) = (Arc::clone(server), Arc::clone(&opening));
            tokio::spawn(async move {
                let (mut connection, _) = park(&server, i, PARK, &opening).await?;
                let answer = connection.read().await?;
                Ok((answer, Instant::now()))
            })
        })
        .collect()
}

/// `count` GETs as HTTP/2 streams, [`STREAMS`] to a connection (a client
/// each).
fn h2_gets(server: &Arc<Server>, count: usize) -> Result<Vec<Woken>, BoxError> {
    let mut gets = Vec::with_capacity(count);
    for (c, first) in (0..count).step_by(STREAMS).enumerate() {
        let client = reqwest::Client::builder().http2_prior_knowledge().build()?;
        let url = format!("http://{}{PARK}", server.addrs[c % server.addrs.len()]);
        for _ in first..count.min(first + STREAMS) {
            let (client, url) = (client.clone(), url.clone());
            gets.push(tokio::spawn(async move {
                let response = client.get(url).send().await?;
                let at = Instant::now();
                let status = response.status().as_u16();
                let index = response
                    .headers()
                    .get("x-index")
                    .and_then(|v| v.to_str().ok()?.parse().ok())
                    .unwrap_or(0);
                let body = response.text().await?;
                Ok((
                    Answer {
                        status,
                        index,
                        body,
                    },
                    at,
                ))
            }));
        }
    }
    Ok(gets)
}

async fn parked(store: &str, count: usize, h2: bool, args: &Args) -> Result<Parked, BoxError> {
    let server = Arc::new(started(store).await?);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss = server.rss_bytes();
    let gets = if h2 {
        h2_gets(&server, count)?
    } else {
        h1_gets(&server, count)
    };
    server.until_waiting(count, LIMIT).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_per_get = (server.rss_bytes() as f64 - rss as f64) / count as f64;
    let cpu = server.cpu_seconds();
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let idle_cpu = (server.cpu_seconds() - cpu) * 1e3 / args.idle_seconds as f64;

    let mut writer = Connection::open(server.addrs[0]).await?;
    let put_at = Instant::now();
    let written = writer.send("PUT", "/keys/hot", "v2").await?;
    let mut wake = Vec::with_capacity(count);
    for get in gets {
        let (answer, at) = tokio::time::timeout(LIMIT, get).await???;
        if (answer.status, answer.index, answer.body.as_str()) != (200, written.index, "v2") {
            return Err(format!("a waiter got {answer:?}").into());
        }
        wake.push(at - put_at);
    }
    wake.sort();
    Ok(Parked {
        rss_per_get,
        idle_cpu,
        wake,
    })
}

/// Early answers, and sorted lateness, of `count` GETs that expire.
async fn expiries(store: &str, count: usize) -> Result<(usize, Vec<Duration>), BoxError> {
    let server = Arc::new(started(store).await?);
    let opening = Arc::new(Semaphore::new(OPENING));
    let gets: Vec<_> = (0..count)
        .map(|i| {
            let (server, opening) = (Arc::clone(&server), Arc::clone(&opening));
            let wait = Duration::from_millis(1_000 + (i as u64 * 7919) % 2_000);
            tokio::spawn(async move {
                let path = format!("/keys/hot?index=1&wait={}ms", wait.as_millis());
                let (mut connection, sent) = park(&server, i, &path, &opening).await?;
                let answer = connection.read().await?;
                let took = sent.elapsed();
                if (answer.status, answer.index) != (200, 1) {
                    return Err(format!("an expiry got {answer:?}").into());
                }
                Ok::<_, BoxError>((took, wait))
            })
        })
        .collect();
    let (mut early, mut late) = (0, Vec::with_capacity(count));
    for get in gets {
        let (took, wait) = tokio::time::timeout(LIMIT, get).await???;
        match took.checked_sub(wait) {
            Some(lateness) => late.push(lateness),
            None => early += 1,
        }
    }
    late.sort();
    Ok((early, late))
}

pub fn run(args: &Args) -> Result<(), BoxError> {
    let runtime = crate::client::two_workers()?;
    runtime.block_on(async {
        println!("| parked | over | service | RSS/parked B | idle CPU ms/s | wake p50 ms | p99 ms | max ms |");
        println!("|---|---|---|---|---|---|---|---|");
        let runs = args.counts.iter().map(|&n| (n, false));
        for (count, h2) in runs.chain(args.h2_counts.iter().map(|&n| (n, true))) {
            let over = if h2 { "HTTP/2" } else { "HTTP/1.1" };
            for store in STORES {
                let run = parked(store, count, h2, args).await?;
                println!(
                    "| {count} | {over} | {store} | {:.0} | {:.1} | {} | {} | {} |",
                    run.rss_per_get,
                    run.idle_cpu,
                    ms(percentile(&run.wake, 50.0)),
                    ms(percentile(&run.wake, 99.0)),
                    ms(percentile(&run.wake, 100.0)),
                );
            }
        }
        println!();
        println!("| expiring | service | early | lateness p50 ms | p99 ms | max ms |");
        println!("|---|---|---|---|---|---|");
        for store in STORES {
            let (early, late) = expiries(store, args.expiries).await?;
            println!(
                "| {} | {store} | {early} | {} | {} | {} |",
                args.expiries,
                ms(percentile(&late, 50.0)),
                ms(percentile(&late, 99.0)),
                ms(percentile(&late, 100.0)),
            );
        }
        Ok(())
    })
}
