//! `purgatorio-redis`: run a scheduler node or a consumer of durable timers,
//! schedule timers in bulk, or measure the throughput.
//!
//! ```text
//! purgatorio-redis scheduler --url redis://127.0.0.1:6379 --namespace payments
//! purgatorio-redis consumer  --url redis://127.0.0.1:6379 --namespace payments --name worker-1
//! purgatorio-redis recurring --namespace reports --id weekly --cron "0 9 * * MON" --payload report
//! purgatorio-redis --replicas-to-ack 1 schedule --count 1000
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
    /// the master of its slot (not for `bench`, which measures one Redis).
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
    /// Measure: schedule `count` timers (pipelined), fire them with
    /// `schedulers` scheduler nodes and deliver them to 2 consumers, all in
    /// this process; print schedules/s, deliveries/s, lateness by Redis's
    /// clock, and Redis's commands and CPU per timer.
    ///
    /// Also prints what the run cost Redis, from `INFO commandstats`
    /// (commands, those inside scripts included) and `INFO cpu` (Redis's
    /// CPU time), per timer: run it against a Redis of its own.
    Bench {
        /// How many timers.
        #[arg(long, default_value_t = 100_000)]
        count: u64,
        /// Scheduler nodes (threads of this process).
        #[arg(long, default_value_t = 1)]
        schedulers: usize,
        /// The deadlines span this many ms.
        #[arg(long, default_value_t = 5_000)]
        spread_ms: u64,
        /// Measure the baseline instead: the common sorted-set poller
        /// (`ZADD` + `HSET` to schedule; every 100 ms `ZRANGEBYSCORE`, then
        /// `ZREM` + `HGET` + `HDEL` per due timer).
        #[arg(long)]
        poller: bool,
    },
    /// Look for what a data error strands: keys of the namespace that hold
    /// another type (another application overwrote them), and timers no
    /// promotion reaches, one line each (`stranded <id> <why>`); the count
    /// goes to the metrics (`stranded`). Exits 0 when nothing is wrong, 3
    /// otherwise. Changes nothing else.
    Check,
    /// Schedule recurring timer `id`: an occurrence every `--every-ms`, or at
    /// the times of `--cron` (UTC), each delivered with `--payload`;
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
        /// A cron expression, UTC: five fields (`"*/5 * * * *"`), or six
        /// with seconds first.
        #[arg(long)]
        cron: Option<String>,
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
            Command::Bench { .. } => "bench",
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
        Command::Scheduler { misfire } => {
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
        Command::Bench {
            count,
            schedulers,
            spread_ms,
            poller,
        } => {
            #[cfg(feature = "cluster")]
            if cli.cluster {
                eprintln!("error: bench measures one Redis: run it without --cluster");
                std::process::exit(2);
            }
            let (count, schedulers, spread_ms, poller) = (*count, *schedulers, *spread_ms, *poller);
            let timers = wait(&cli, || Timers::connect(&cli.url, config.clone()))?;
            let mut redis = redis::Client::open(cli.url.as_str())
                .and_then(|client| client.get_connection())
                .map_err(purgatorio_redis::Error::Redis)?;
            let run = Run::new(&timers, &mut redis, count, spread_ms)?;
            let report = if poller {
                bench_poller(&cli.url, run)?
            } else {
                bench(&timers, run, schedulers)?
            };
            report.print(&mut redis);
            Ok(())
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
            payload,
        } => {
            let recurrence = match (every_ms, cron) {
                (Some(ms), None) => Recurrence::Every(Duration::from_millis(*ms)),
                (None, Some(cron)) => Recurrence::Cron(cron.clone()),
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

/// One run of the `bench` command: its timers, clocks and what it saw.
struct Run {
    /// How many timers.
    count: u64,
    /// The span of their deadlines, ms.
    spread_ms: u64,
    /// The first deadline, ms by Redis's clock.
    base_ms: u64,
    /// How long before the first deadline scheduling starts, ms.
    lead_ms: u64,
    /// Redis's clock minus this machine's, ms: read once, so that handling
    /// a delivery costs no round trip for the measurement.
    offset_ms: i64,
    /// The lateness of each delivery, ms by Redis's clock.
    lateness: std::sync::Arc<std::sync::Mutex<Vec<i64>>>,
    /// What Redis had done before the run.
    usage_before: Usage,
}

/// This machine's clock, ms since the epoch.
fn local_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64
}

/// What Redis has done: commands called (scripts' own included; `INFO`
/// excluded) and its CPU time, µs.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    /// Commands.
    commands: u64,
    /// CPU time, user and system, µs.
    cpu_us: u64,
}

impl Usage {
    /// Reads `INFO commandstats` and `INFO cpu` through `redis`.
    fn read(redis: &mut redis::Connection) -> Usage {
        let mut info = |section: &str| {
            redis::cmd("INFO")
                .arg(section)
                .query::<String>(redis)
                .unwrap_or_default()
        };
        let (info, cpu) = (info("commandstats"), info("cpu"));
        let commands = info
            .lines()
            .filter(|line| line.starts_with("cmdstat_") && !line.starts_with("cmdstat_info"))
            .filter_map(|line| {
                let calls = line.split_once("calls=")?.1;
                calls.split(',').next()?.parse::<u64>().ok()
            })
            .sum();
        let seconds = |key: &str| {
            cpu.lines()
                .find_map(|line| line.strip_prefix(key)?.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let cpu_us = ((seconds("used_cpu_user:") + seconds("used_cpu_sys:")) * 1e6) as u64;
        Usage { commands, cpu_us }
    }
}

impl Run {
    /// A run of `count` timers whose deadlines span `spread_ms`.
    fn new(
        timers: &Timers,
        redis: &mut redis::Connection,
        count: u64,
        spread_ms: u64,
    ) -> Result<Run, purgatorio_redis::Error> {
        let offset_ms = timers.server_time_ms()? as i64 - local_ms();
        // The first deadline comes after scheduling has ended (at 20,000
        // schedules/s or more), so that lateness is the timers' own.
        let lead_ms = 2_000 + count / 20;
        Ok(Run {
            count,
            spread_ms,
            base_ms: timers.server_time_ms()? + lead_ms,
            lead_ms,
            offset_ms,
            lateness: Default::default(),
            usage_before: Usage::read(redis),
        })
    }

    /// Timer `i`'s id and deadline.
    fn timer(&self, i: u64) -> (String, u64) {
        let at = u128::from(self.base_ms)
            + u128::from(i) * u128::from(self.spread_ms) / u128::from(self.count.max(1));
        (format!("b{i}"), u64::try_from(at).unwrap_or(u64::MAX))
    }

    /// Records a delivery of a timer due at `deadline_ms`.
    fn delivered(&self, deadline_ms: u64) {
        let late = local_ms() + self.offset_ms - deadline_ms as i64;
        self.lateness.lock().expect("lateness").push(late);
    }

    /// Waits until every timer is delivered (or a minute past the last
    /// deadline); the report, given how long scheduling took.
    fn finish(&self, started: Instant, schedule_secs: f64, label: String) -> Report {
        // Deliveries start when the first deadline passes, or when
        // scheduling ends if that is later.
        let first_due = (started + Duration::from_millis(self.lead_ms)).max(Instant::now());
        let deadline = Instant::now() + Duration::from_millis(self.spread_ms + 60_000);
        while (self.lateness.lock().expect("lateness").len() as u64) < self.count
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let deliver_secs = Instant::now()
            .saturating_duration_since(first_due)
            .as_secs_f64();
        let mut late = self.lateness.lock().expect("lateness").clone();
        late.sort_unstable();
        Report {
            label,
            count: self.count,
            spread_ms: self.spread_ms,
            schedule_secs,
            deliver_secs,
            late,
            usage_before: self.usage_before,
        }
    }
}

/// What the `bench` command prints.
struct Report {
    /// What ran.
    label: String,
    /// How many timers.
    count: u64,
    /// The span of their deadlines, ms.
    spread_ms: u64,
    /// How long scheduling took, s.
    schedule_secs: f64,
    /// How long delivering took from the first deadline, s.
    deliver_secs: f64,
    /// Each delivery's lateness, sorted, ms.
    late: Vec<i64>,
    /// What Redis had done before the run.
    usage_before: Usage,
}

impl Report {
    /// Prints the figures (Redis's usage read now through `redis`).
    fn print(&self, redis: &mut redis::Connection) {
        let usage = Usage::read(redis);
        let (count, late) = (self.count, &self.late);
        let at = |q: f64| {
            late.get(((late.len().max(1) - 1) as f64 * q) as usize)
                .copied()
                .unwrap_or(0)
        };
        let early = late.iter().filter(|l| **l < 0).count();
        let per_timer = |n: u64, before: u64| n.saturating_sub(before) as f64 / count.max(1) as f64;
        println!(
            "timers                 {count} over {} ms, {}",
            self.spread_ms, self.label
        );
        println!(
            "schedules/s            {:.0}",
            count as f64 / self.schedule_secs
        );
        println!(
            "deliveries/s           {:.0} ({} delivered in {:.2} s; the deadlines span {} ms)",
            late.len() as f64 / self.deliver_secs.max(0.001),
            late.len(),
            self.deliver_secs,
            self.spread_ms
        );
        println!(
            "lateness p50/p99/max   {} / {} / {} ms (Redis's clock)",
            at(0.5),
            at(0.99),
            at(1.0)
        );
        println!(
            "early, lost            {early}, {}",
            count.saturating_sub(late.len() as u64)
        );
        println!(
            "redis commands/timer   {:.2}",
            per_timer(usage.commands, self.usage_before.commands)
        );
        println!(
            "redis CPU/timer        {:.1} µs",
            per_timer(usage.cpu_us, self.usage_before.cpu_us)
        );
    }
}

/// The `bench` command: `schedulers` nodes and 2 consumers, all in this
/// process.
fn bench(timers: &Timers, run: Run, schedulers: usize) -> Result<Report, purgatorio_redis::Error> {
    let run = std::sync::Arc::new(run);
    let nodes: Vec<_> = (0..schedulers)
        .map(|_| {
            let node = Scheduler::new(timers.clone());
            let stop = node.stop_handle();
            (stop, std::thread::spawn(move || node.run()))
        })
        .collect();
    let consumers: Vec<_> = (0..2)
        .map(|i| {
            let consumer = Consumer::new(timers.clone(), &format!("bench-{i}"))?;
            let run = std::sync::Arc::clone(&run);
            let stop = consumer.stop_handle();
            Ok((
                stop,
                std::thread::spawn(move || {
                    consumer.run(|delivery| {
                        run.delivered(delivery.deadline_ms);
                        Verdict::Ack
                    })
                }),
            ))
        })
        .collect::<Result<_, purgatorio_redis::Error>>()?;
    let started = Instant::now();
    for first in (0..run.count).step_by(1_000) {
        let chunk: Vec<(String, u64)> = (first..(first + 1_000).min(run.count))
            .map(|i| run.timer(i))
            .collect();
        let batch: Vec<(&str, u64, &[u8])> = chunk
            .iter()
            .map(|(id, at)| (id.as_str(), *at, &b"payload"[..]))
            .collect();
        timers.schedule_many(&batch)?;
    }
    let schedule_secs = started.elapsed().as_secs_f64();
    let report = run.finish(
        started,
        schedule_secs,
        format!("{schedulers} scheduler node(s), 2 consumers"),
    );
    for (node, thread) in nodes {
        node.stop();
        let _ = thread.join();
    }
    for (stop, thread) in consumers {
        stop.stop();
        let _ = thread.join();
    }
    Ok(report)
}

/// The poller's key prefix (its own hash tag).
const POLLER: &str = "{poller}";

/// The baseline: the common sorted-set poller, on plain commands (no
/// script): `ZADD` + `HSET` per timer, pipelined, to schedule; one thread
/// that every 100 ms asks for the due timers (`TIME`, `ZRANGEBYSCORE …
/// LIMIT 0 1000`) and claims each (`ZREM`, then `HGET` + `HDEL` of its
/// payload), pipelined.
fn bench_poller(url: &str, run: Run) -> Result<Report, purgatorio_redis::Error> {
    let redis_error = purgatorio_redis::Error::Redis;
    let client = redis::Client::open(url).map_err(redis_error)?;
    let mut connection = client.get_connection().map_err(redis_error)?;
    let (due, payloads) = (format!("{POLLER}:due"), format!("{POLLER}:payload"));
    let run = std::sync::Arc::new(run);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let (run, stop) = (std::sync::Arc::clone(&run), std::sync::Arc::clone(&stop));
        let (due, payloads) = (due.clone(), payloads.clone());
        let mut c = client.get_connection().map_err(redis_error)?;
        std::thread::spawn(move || -> redis::RedisResult<()> {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut c)?;
                let now = secs * 1_000 + micros / 1_000;
                let page: Vec<(String, u64)> = redis::cmd("ZRANGEBYSCORE")
                    .arg(&due)
                    .arg("-inf")
                    .arg(now)
                    .arg("WITHSCORES")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(1_000)
                    .query(&mut c)?;
                let mut pipe = redis::pipe();
                for (id, _) in &page {
                    pipe.cmd("ZREM").arg(&due).arg(id);
                    pipe.cmd("HGET").arg(&payloads).arg(id);
                    pipe.cmd("HDEL").arg(&payloads).arg(id).ignore();
                }
                let claimed: Vec<(u64, Option<Vec<u8>>)> = if page.is_empty() {
                    Vec::new()
                } else {
                    pipe.query(&mut c)?
                };
                for ((_, deadline), (won, _payload)) in page.iter().zip(&claimed) {
                    if *won == 1 {
                        run.delivered(*deadline);
                    }
                }
                if page.len() < 1_000 {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            Ok(())
        })
    };
    let started = Instant::now();
    for first in (0..run.count).step_by(1_000) {
        let mut pipe = redis::pipe();
        for i in first..(first + 1_000).min(run.count) {
            let (id, at) = run.timer(i);
            pipe.cmd("ZADD").arg(&due).arg(at).arg(&id).ignore();
            pipe.cmd("HSET")
                .arg(&payloads)
                .arg(&id)
                .arg("payload")
                .ignore();
        }
        pipe.query::<()>(&mut connection).map_err(redis_error)?;
    }
    let schedule_secs = started.elapsed().as_secs_f64();
    let report = run.finish(
        started,
        schedule_secs,
        "the 100 ms sorted-set poller".into(),
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = poller.join();
    Ok(report)
}
