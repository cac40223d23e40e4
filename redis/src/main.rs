//! `purgatorio-redis`: run a scheduler node or a consumer of durable timers,
//! schedule timers in bulk, or check a namespace for stranded timers. (The
//! throughput measurement is the example `bench`.)
//!
//! ```text
//! purgatorio-redis scheduler --url redis://127.0.0.1:6379 --namespace payments
//! purgatorio-redis consumer  --url redis://127.0.0.1:6379 --namespace payments --name worker-1
//! purgatorio-redis recurring --namespace reports --id weekly --cron "0 9 * * MON" --tz Europe/Berlin --payload report
//! purgatorio-redis --replicas-to-ack 1 schedule --count 1000
//! purgatorio-redis --namespace payments check
//! ```

use std::io::Write;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use purgatorio_redis::{
    wait_for_redis, Config, Consumer, Misfire, Recurrence, Scheduled, Scheduler, Timers, Verdict,
};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Durable timers on Redis: scheduler nodes and consumers"
)]
struct Cli {
    /// The Redis to use; with `--cluster`, nodes of the Redis Cluster,
    /// comma-separated.
    #[arg(long, default_value = "redis://127.0.0.1:6379", global = true)]
    url: String,
    /// `--url` names nodes of a Redis Cluster: the namespace's calls go to
    /// the master of its slot.
    #[cfg(feature = "cluster")]
    #[arg(long, global = true)]
    cluster: bool,
    /// The namespace of the timers (one hash tag).
    #[arg(long, default_value = "timers", global = true)]
    namespace: String,
    /// How long Redis may take to answer one call, ms, before the try
    /// fails (a stalled or unreachable Redis).
    #[arg(long, default_value_t = 2_000, global = true)]
    response_timeout_ms: u64,
    /// Every schedule waits until this many replicas hold it (`WAIT`), and
    /// fails if fewer do within `--replica-ack-timeout-ms`: bounds what a
    /// failover can lose (0: no wait, Redis's asynchronous replication).
    #[arg(long, default_value_t = 0, global = true)]
    replicas_to_ack: u32,
    /// How long a schedule waits for `--replicas-to-ack` replicas, ms (1 to
    /// 60,000); refused without `--replicas-to-ack`, which it would not
    /// change.
    #[arg(
        long,
        default_value_t = 500,
        global = true,
        requires = "replicas_to_ack"
    )]
    replica_ack_timeout_ms: u64,
    /// The CA certificates (a PEM file) that a `rediss://` server's
    /// certificate must chain to, in place of the system's roots.
    #[cfg(feature = "tls")]
    #[arg(long, value_name = "PEM_FILE", global = true)]
    tls_ca: Option<std::path::PathBuf>,
    /// How long a command waits for Redis at start, ms: while Redis is
    /// down or a key of the namespace holds another type, it tries again
    /// with the outage's backoff (50 ms doubling, at most 500 ms), logged
    /// once. Unset: it waits forever, as the loops ride out an outage.
    #[arg(long, value_name = "MS", global = true)]
    wait_ms: Option<u64>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a scheduler node: move due timers to the stream, until killed.
    Scheduler {
        /// What to do with timers that came due while no scheduler ran.
        #[arg(long, default_value = "fire", value_parser = ["fire", "skip", "reschedule"])]
        misfire: String,
        /// The least wait after a step that moved timers, ms (at most
        /// 1,000): timers coming due one after another go in batches,
        /// costing Redis less CPU, up to this much later.
        #[arg(long, default_value_t = 10)]
        pace_ms: u64,
    },
    /// Run a consumer: print each due timer as `id deadline_ms promoted_ms
    /// attempt` (both by Redis's clock) and acknowledge it, until killed.
    Consumer {
        /// This consumer's name in the group.
        #[arg(long)]
        name: String,
        /// Take over a dead consumer's entries after this many ms.
        #[arg(long, default_value_t = 30_000)]
        visibility_ms: u64,
    },
    /// Look for what a data error strands: keys of the namespace that hold
    /// another type (another application overwrote them), and timers no
    /// promotion reaches, one line each (`stranded <id> <why>`); the count
    /// goes to the metrics (`stranded`). Exits 0 when nothing is wrong, 3
    /// otherwise. Changes nothing else.
    Check,
    /// Schedule recurring timer `id`: an occurrence every `--every-ms`, or at
    /// the times of `--cron` (UTC, or `--tz`'s), each delivered with `--payload`;
    /// scheduling an id again replaces its series. Prints the first
    /// occurrence's deadline, ms by Redis's clock.
    #[command(group(clap::ArgGroup::new("recurrence").required(true).args(["every_ms", "cron"])))]
    Recurring {
        /// The timer's id.
        #[arg(long)]
        id: String,
        /// An occurrence every this many ms, the first one this long after
        /// now by Redis's clock.
        #[arg(long)]
        every_ms: Option<u64>,
        /// A cron expression: five fields (`"*/5 * * * *"`), or six with
        /// seconds first; in UTC unless `--tz`.
        #[arg(long)]
        cron: Option<String>,
        /// The IANA time zone of `--cron` (`Europe/Berlin`): its times are
        /// that zone's, summer and winter; a time in a spring-forward gap
        /// fires once just after it, one a fall-back overlap repeats fires
        /// once (as cronie).
        #[arg(long, requires = "cron")]
        tz: Option<String>,
        /// Each occurrence's payload.
        #[arg(long, default_value = "")]
        payload: String,
    },
    /// Schedule `count` timers `t0`, `t1`… due over the next `spread_ms`
    /// (from `start_ms` after now by Redis's clock), in pipelined batches.
    Schedule {
        /// How many timers.
        #[arg(long)]
        count: u64,
        /// The first deadline, ms after now by Redis's clock (refused if it
        /// passes the latest deadline accepted).
        #[arg(long, default_value_t = 1_000)]
        start_ms: u64,
        /// The deadlines span this many ms.
        #[arg(long, default_value_t = 10_000)]
        spread_ms: u64,
        /// Prefix of the ids.
        #[arg(long, default_value = "t")]
        prefix: String,
    },
}

/// Writes the library's log lines (outages, recoveries) to stderr.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            eprintln!(
                "{}: {}",
                record.level().as_str().to_lowercase(),
                record.args()
            );
        }
    }

    fn flush(&self) {}
}

fn main() {
    let cli = Cli::parse();
    static LOG: StderrLog = StderrLog;
    if log::set_logger(&LOG).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
    if let Err(e) = run(cli) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Connects to `--url`: one Redis, or with `--cluster` the Redis Cluster
/// its comma-separated nodes belong to; waits for it as `--wait-ms` says.
fn connect(cli: &Cli, config: Config) -> Result<Timers, purgatorio_redis::Error> {
    wait(cli, || {
        #[cfg(feature = "cluster")]
        if cli.cluster {
            let seeds: Vec<&str> = cli.url.split(',').collect();
            return Timers::connect_cluster(&seeds, config.clone());
        }
        Timers::connect(&cli.url, config.clone())
    })
}

/// `attempt` at start, waiting for Redis as `--wait-ms` says.
fn wait<T>(
    cli: &Cli,
    attempt: impl FnMut() -> Result<T, purgatorio_redis::Error>,
) -> Result<T, purgatorio_redis::Error> {
    let deadline = cli.wait_ms.map(Duration::from_millis);
    wait_for_redis(
        &format!("{} of {}", cli.command.name(), cli.namespace),
        deadline,
        attempt,
    )
}

impl Command {
    /// The command's name, for the log.
    fn name(&self) -> &'static str {
        match self {
            Command::Scheduler { .. } => "scheduler",
            Command::Consumer { .. } => "consumer",
            Command::Check => "check",
            Command::Recurring { .. } => "recurring",
            Command::Schedule { .. } => "schedule",
        }
    }
}

fn run(cli: Cli) -> Result<(), purgatorio_redis::Error> {
    let mut config = Config::new(&cli.namespace);
    config.response_timeout = Duration::from_millis(cli.response_timeout_ms);
    if cli.replicas_to_ack > 0 {
        config = config.replicas_to_ack(
            cli.replicas_to_ack,
            Duration::from_millis(cli.replica_ack_timeout_ms),
        );
    }
    #[cfg(feature = "tls")]
    if let Some(path) = &cli.tls_ca {
        let pem = std::fs::read(path).unwrap_or_else(|e| {
            eprintln!("error: cannot read --tls-ca {}: {e}", path.display());
            std::process::exit(1);
        });
        config.tls_ca_pem = Some(pem);
    }
    match &cli.command {
        Command::Scheduler { misfire, pace_ms } => {
            config.promote_pace = Duration::from_millis(*pace_ms);
            config.misfire = match misfire.as_str() {
                "skip" => Misfire::Skip,
                "reschedule" => Misfire::Reschedule(Duration::from_secs(1)),
                _ => Misfire::FireNow,
            };
            let timers = connect(&cli, config)?;
            Scheduler::new(timers).run()
        }
        Command::Consumer {
            name,
            visibility_ms,
        } => {
            config.visibility_timeout = Duration::from_millis(*visibility_ms);
            let timers = connect(&cli, config)?;
            let consumer = wait(&cli, || Consumer::new(timers.clone(), name))?;
            let stdout = std::io::stdout();
            consumer.run(|delivery| {
                // Redis's clock when the timer was promoted: the judge of
                // "never early", at no round trip. Printed before the ack,
                // so a consumer killed after the print re-delivers.
                let mut out = stdout.lock();
                let _ = writeln!(
                    out,
                    "{} {} {} {}",
                    delivery.id, delivery.deadline_ms, delivery.promoted_ms, delivery.attempt
                );
                let _ = out.flush();
                Verdict::Ack
            })
        }
        Command::Check => {
            let timers = connect(&cli, config)?;
            let check = timers.check()?;
            for wrong in &check.wrong_types {
                println!(
                    "wrong type {} holds a {}, not a {}",
                    wrong.key, wrong.holds, wrong.expected
                );
            }
            if let Some(why) = &check.records_unreadable {
                println!("unreadable records: {why}");
            }
            for timer in &check.stranded {
                println!("stranded {} {}", timer.id, timer.why);
            }
            println!(
                "{} stranded timers, {} keys of another type",
                check.stranded.len(),
                check.wrong_types.len()
            );
            if !check.is_clean() {
                std::process::exit(3);
            }
            Ok(())
        }
        Command::Recurring {
            id,
            every_ms,
            cron,
            tz,
            payload,
        } => {
            let recurrence = match (every_ms, cron, tz) {
                (Some(ms), None, None) => Recurrence::Every(Duration::from_millis(*ms)),
                (None, Some(cron), None) => Recurrence::Cron(cron.clone()),
                (None, Some(cron), Some(zone)) => Recurrence::CronIn {
                    expression: cron.clone(),
                    zone: zone.clone(),
                },
                // clap lets exactly one of the two through.
                _ => {
                    eprintln!("error: give one of --every-ms and --cron");
                    std::process::exit(2);
                }
            };
            let timers = connect(&cli, config)?;
            let first = timers.schedule_recurring(id, &recurrence, payload.as_bytes())?;
            println!("{id} recurs; first occurrence at {first} ms");
            Ok(())
        }
        Command::Schedule {
            count,
            start_ms,
            spread_ms,
            prefix,
        } => {
            let (count, start_ms, spread_ms) = (*count, *start_ms, *spread_ms);
            let timers = connect(&cli, config)?;
            let out_of_range = purgatorio_redis::Error::DeadlineOutOfRange {
                at_ms: u64::MAX,
                max_ms: purgatorio_redis::MAX_DEADLINE_MS,
            };
            let base = timers
                .server_time_ms()?
                .checked_add(start_ms)
                .ok_or(out_of_range)?;
            let started = Instant::now();
            let ids: Vec<String> = (0..count).map(|i| format!("{prefix}{i}")).collect();
            let mut not_replicated = 0;
            for chunk in ids.chunks(500).enumerate() {
                let (c, chunk) = chunk;
                let batch: Vec<(&str, u64, &[u8])> = chunk
                    .iter()
                    .enumerate()
                    .map(|(j, id)| {
                        let i = (c * 500 + j) as u128;
                        let offset = i * u128::from(spread_ms) / u128::from(count.max(1));
                        let at = u64::try_from(u128::from(base) + offset).unwrap_or(u64::MAX);
                        (id.as_str(), at, &b"x"[..])
                    })
                    .collect();
                // Stored either way; never scheduled again (it may fire).
                if let Scheduled::NotReplicated { .. } = timers.schedule_many(&batch)? {
                    not_replicated += batch.len();
                }
            }
            let secs = started.elapsed().as_secs_f64();
            println!(
                "scheduled {count} in {secs:.3} s: {:.0} schedules/s",
                count as f64 / secs
            );
            if not_replicated > 0 {
                println!(
                    "{not_replicated} stored but not replicated in time \
                     (--replicas-to-ack): a failover now may lose them"
                );
            }
            Ok(())
        }
    }
}
