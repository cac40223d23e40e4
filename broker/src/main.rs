//! `purgatorio-broker`: a small single-node broker that speaks the Kafka
//! wire protocol, for real Kafka clients, with every fetch that waits for
//! data parked in a purgatorio [`Purgatory`](purgatorio::Purgatory).
//!
//! ```text
//! cargo run --release -p purgatorio-broker -- --listen 127.0.0.1:9092
//! kcat -b 127.0.0.1:9092 -t orders -P <<< 'hello'
//! kcat -b 127.0.0.1:9092 -t orders -C -o beginning -e
//! ```
//!
//! What it serves: ApiVersions, Metadata (topics created on first use with
//! `--partitions`), Produce (acks 0, 1 and -1), Fetch (`max_wait_ms`,
//! `min_bytes`, `max_bytes`; a fetch without enough bytes waits in the
//! purgatory until a produce completes it or `max_wait_ms` passes, never
//! earlier), ListOffsets (earliest and latest), and consumer groups (see
//! `group`: joins and syncs wait in a purgatory, sessions are keyed timers).
//! Partitions are segment files read through sparse offset and time
//! indexes (`log`), deleted by `--retention-ms` / `--retention-bytes`.
//! With `--data-dir` they are kept there, an acks=-1 produce waits for the
//! group-commit fsync (`store`), and committed offsets are kept too;
//! without it the segments are anonymous temporary files and nothing
//! survives a restart. A request of an
//! API or version it does not serve closes the connection, as Kafka does
//! for an unknown one.
//!
//! The modules, one job each:
//!
//! | module | job |
//! |---|---|
//! | [`wire`] | frames in (bounded, growing as bytes arrive), answers out |
//! | [`api`] | one module per request family, one `async fn` per request |
//! | [`connection`] | the accept loop and each connection's loop |
//! | [`coordinator`] | consumer groups: joins and syncs parked, sessions as keyed timers |
//! | [`log`] | partitions' logs: segment files, their indexes, retention |
//! | [`cleaner`] | the retention task |
//! | [`roller`] | rolls' slow work (fsyncs, new segment files) off the partitions' locks |
//! | [`producers`] | idempotent producers: ids, epochs, the last five sequences |
//! | [`store`] | `--data-dir` files and the group commit |
//! | [`offsets`] | `--data-dir`: the committed offsets' internal log |
//! | [`topics`] | making and deleting topics, their disk work off the request path |
//! | [`topic_id`] | a topic's id, kept in its directory |
//! | [`acls`] | ACLs as Kafka defines and matches them (stored, not enforced) |
//! | [`scram`] | SCRAM credentials as Kafka checks them (stored, not used) |
//! | [`dynamic`] | the broker's dynamic SASL and TLS configs (kept, not used) |
//! | [`kept`] | a small set of records kept whole in one file of `--data-dir` |
//! | [`broker`] | the shared state, and start-up |

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::{CommandFactory, Parser};

mod acls;
mod api;
mod broker;
mod cleaner;
mod connection;
mod coordinator;
mod dynamic;
mod kept;
mod log;
mod offsets;
mod producers;
mod roller;
mod scram;
mod store;
mod topic_id;
mod topics;
mod wire;

/// `--retention-bytes` when not given and there is no `--data-dir`:
/// 1 GiB per partition.
const IN_MEMORY_RETENTION_BYTES: u64 = 1024 * 1024 * 1024;

/// The broker's command line.
#[derive(Parser, Debug)]
#[command(
    version,
    about = "A single-node broker that speaks the Kafka wire protocol; fetches, joins and syncs wait in purgatorio purgatories, sessions are keyed timers. Partitions are segment files; without --data-dir they are anonymous temporary files and nothing survives a restart."
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9092")]
    listen: String,
    /// Partitions of a topic created on first use.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=i64::from(topics::MAX_PARTITIONS)))]
    partitions: i32,
    /// Keep partitions (segment files) and committed offsets here
    /// (recovered at start; an acks=-1 produce is answered once a
    /// group-commit fsync covers it). Without it, segments are anonymous
    /// files in the temporary directory and nothing survives a restart.
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// Roll a partition's segment when it would pass this size, bytes
    /// (Kafka's log.segment.bytes).
    #[arg(long, default_value_t = 1024 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1024..=i32::MAX as u64))]
    segment_bytes: u64,
    /// Delete a closed segment once its newest record is older than this,
    /// ms; -1: never (Kafka's log.retention.ms, 7 days).
    #[arg(long, default_value_t = 7 * 24 * 60 * 60 * 1000, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..))]
    retention_ms: i64,
    /// Delete a partition's oldest closed segments while the rest still
    /// holds this many bytes; -1: no bound (Kafka's log.retention.bytes).
    /// Default: -1 with --data-dir; without it, 1 GiB (nothing survives a
    /// restart there, so the temporary files are bounded too).
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..))]
    retention_bytes: Option<i64>,
    /// How often retention looks for segments to delete, ms (Kafka's
    /// log.retention.check.interval.ms); the first look comes one interval
    /// after the start, at most 30 s.
    #[arg(long, default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(1..))]
    retention_check_interval_ms: u64,
    /// The largest request accepted, bytes (Kafka's
    /// socket.request.max.bytes); a larger one closes its connection.
    #[arg(long, default_value_t = 100 * 1024 * 1024, value_parser = clap::value_parser!(u32).range(8..=i32::MAX as i64))]
    max_request_bytes: u32,
    /// The bytes of requests read and not yet answered, across every
    /// connection (Kafka's queued.max.request.bytes); at least
    /// --max-request-bytes. A connection whose next request does not fit
    /// waits, reading nothing.
    #[arg(long, default_value_t = 200 * 1024 * 1024)]
    queued_max_request_bytes: u64,
    /// The most of --queued-max-request-bytes one connection holds,
    /// percent: while a request is served, the next is read ahead only
    /// within it (a connection served nothing may always read one request
    /// of up to --max-request-bytes). Frames larger than an eighth of the
    /// budget never take its last eighth, kept for small requests.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(1..=100))]
    queued_max_request_share: u8,
    /// Close a connection whose request has begun arriving and then sends
    /// nothing for this long, ms: its bytes hold the budget, so this is
    /// seconds, not --connections-max-idle-ms.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    request_read_timeout_ms: u64,
    /// Close a connection whose answer makes no progress for this long, ms
    /// (a client that stops reading). Nothing more is read from a
    /// connection until its answer is written.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    write_timeout_ms: u64,
    /// Close a connection that sends nothing for this long, ms, between
    /// requests or in the middle of one (Kafka's connections.max.idle.ms).
    #[arg(long, default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(1..))]
    connections_max_idle_ms: u64,
    /// The largest record batch accepted, bytes (Kafka's
    /// message.max.bytes); a larger one is answered MESSAGE_TOO_LARGE.
    #[arg(long, default_value_t = 1024 * 1024 + 12)]
    message_max_bytes: usize,
    /// The most one fetch answer holds, bytes, whatever the request asks
    /// (Kafka's fetch.max.bytes); only its first batch may exceed it.
    #[arg(long, default_value_t = 55 * 1024 * 1024)]
    fetch_max_bytes: usize,
    /// How long the first rebalance of an empty group waits for more
    /// members to join it, ms (Kafka's group.initial.rebalance.delay.ms).
    #[arg(long, default_value_t = 3_000)]
    group_initial_rebalance_delay_ms: u64,
    /// Whether a Metadata request that allows it creates the topics it
    /// names (Kafka's auto.create.topics.enable); with false only
    /// CreateTopics does.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    auto_create_topics: bool,
    /// The most members a consumer group holds (Kafka's group.max.size,
    /// unbounded by default there); a join beyond is answered
    /// GROUP_MAX_SIZE_REACHED.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..))]
    group_max_size: u32,
    /// The most partitions one request creates (CreateTopics, or Metadata
    /// creating the topics it names); a topic past it is answered
    /// POLICY_VIOLATION, as Kafka's controller answers a request of more
    /// than 10,000 records.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    max_partitions_per_request: u32,
    /// The most partitions the broker holds; a topic that would pass it is
    /// answered POLICY_VIOLATION.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u32).range(1..))]
    max_partitions: u32,
    /// Print a stats line (batches, parked fetches, timer wake-ups) to
    /// stderr this often, ms.
    #[arg(long, default_value_t = 10_000)]
    stats_ms: u64,
    /// Threads that serve connections (as Kafka's num.network.threads);
    /// by default one per CPU. Disk work runs on a pool of its own. An
    /// idle fleet costs least with one: each request then wakes one
    /// thread, where with more tokio also hands work between them.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    io_threads: Option<u32>,
}

fn main() {
    let args = Args::parse();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.io_threads {
        runtime.worker_threads(threads as usize);
    }
    match runtime.enable_all().build() {
        Ok(runtime) => runtime.block_on(serve(args)),
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    }
}

/// Starts the broker `args` describe and serves until the process is
/// killed, printing a stats line every `--stats-ms`.
async fn serve(args: Args) {
    let max_request = args.max_request_bytes as usize;
    if args.queued_max_request_bytes < u64::from(args.max_request_bytes) {
        Args::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                "--queued-max-request-bytes must be at least --max-request-bytes",
            )
            .exit();
    }
    let queued = usize::try_from(args.queued_max_request_bytes).unwrap_or(usize::MAX);
    let config = broker::Config {
        listen: args.listen.clone(),
        partitions: args.partitions,
        auto_create_topics: args.auto_create_topics,
        data_dir: args.data_dir.clone(),
        message_max_bytes: args.message_max_bytes,
        fetch_max_bytes: args.fetch_max_bytes,
        initial_rebalance_delay: Duration::from_millis(args.group_initial_rebalance_delay_ms),
        log: log::LogConfig {
            segment_bytes: args.segment_bytes,
            retention: log::Retention {
                ms: u64::try_from(args.retention_ms).ok(),
                bytes: match args.retention_bytes {
                    Some(bytes) => u64::try_from(bytes).ok(),
                    None if args.data_dir.is_some() => None,
                    None => Some(IN_MEMORY_RETENTION_BYTES),
                },
            },
        },
        retention_check: Duration::from_millis(args.retention_check_interval_ms),
        group_max_size: args.group_max_size as usize,
        partition_limits: topics::PartitionLimits {
            per_request: args.max_partitions_per_request as usize,
            per_broker: args.max_partitions as usize,
        },
        limits: wire::Limits::new(
            max_request,
            queued,
            queued / 100 * usize::from(args.queued_max_request_share),
            Duration::from_millis(args.connections_max_idle_ms),
            Duration::from_millis(args.request_read_timeout_ms),
            Duration::from_millis(args.write_timeout_ms),
        ),
    };
    let broker = match broker::start(&config).await {
        Ok(broker) => broker,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    match &args.data_dir {
        Some(dir) => println!(
            "purgatorio-broker listening on {} (partitions in {})",
            broker.addr,
            dir.display()
        ),
        None => println!(
            "purgatorio-broker listening on {} (partitions in anonymous temporary files)",
            broker.addr
        ),
    }
    // Report the timer's wake-ups and the parked fetches: the proof that it
    // does not wake between deadlines.
    let every = Duration::from_millis(args.stats_ms.max(1));
    for seq in 1u64.. {
        tokio::time::sleep(every).await;
        let m = broker.timer.metrics();
        let f = broker.fetches.metrics();
        let groups = broker.groups.figures();
        // Formatted first, then written at once: stderr is unbuffered, and
        // `eprintln!` would make a write of each piece (26 a line).
        let line = format!(
            "stats: seq={seq} batches={} segments_deleted={} parked={} satisfied={} expired={} cancelled={} timer_wakeups={} group_waits={} group_satisfied={} group_expired={} sessions_expired={} durable_acks={} refused={} idle_closed={} stalled_closed={} write_stalled={} budget_free={} encode_errors={} partition_fsyncs={}\n",
            broker.batches.load(Ordering::Relaxed),
            broker.segments_deleted.load(Ordering::Relaxed),
            broker.fetches.delayed(),
            f.satisfied,
            f.expired,
            f.cancelled,
            m.wakeups,
            groups.parked,
            groups.satisfied,
            groups.expired,
            broker.groups.sessions_expired(),
            broker.produces.metrics().satisfied,
            broker.refused.load(Ordering::Relaxed),
            broker.idle_closed.load(Ordering::Relaxed),
            broker.stalled_closed.load(Ordering::Relaxed),
            broker.write_stalled.load(Ordering::Relaxed),
            broker.limits.budget.available(),
            broker.encode_errors.load(Ordering::Relaxed),
            broker
                .store
                .as_ref()
                .map_or(0, |s| s.fsyncs.load(Ordering::Relaxed)),
        );
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
}
