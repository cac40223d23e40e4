//! `purgatorio-redis`: run a scheduler node or a consumer of durable timers,
//! schedule timers in bulk, or measure the throughput.
//!
//! ```text
//! purgatorio-redis scheduler --url redis://127.0.0.1:6379 --namespace payments
//! purgatorio-redis consumer  --url redis://127.0.0.1:6379 --namespace payments --name worker-1
//! ```

use std::io::Write;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use purgatorio_redis::{Config, Consumer, Misfire, Scheduler, Timers, Verdict};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Durable timers on Redis: scheduler nodes and consumers"
)]
struct Cli {
    /// The Redis to use.
    #[arg(long, default_value = "redis://127.0.0.1:6379", global = true)]
    url: String,
    /// The namespace of the timers (one hash tag).
    #[arg(long, default_value = "timers", global = true)]
    namespace: String,
    /// How long Redis may take to answer one call, ms, before the try
    /// fails (a stalled or unreachable Redis).
    #[arg(long, default_value_t = 2_000, global = true)]
    response_timeout_ms: u64,
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
    /// clock and round trips per timer.
    Bench {
        #[arg(long, default_value_t = 100_000)]
        count: u64,
        #[arg(long, default_value_t = 1)]
        schedulers: usize,
        #[arg(long, default_value_t = 5_000)]
        spread_ms: u64,
    },
    /// Schedule `count` timers `t0`, `t1`… due over the next `spread_ms`
    /// (from `start_ms` after now by Redis's clock), in pipelined batches.
    Schedule {
        #[arg(long)]
        count: u64,
        #[arg(long, default_value_t = 1_000)]
        start_ms: u64,
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

fn run(cli: Cli) -> Result<(), purgatorio_redis::Error> {
    let mut config = Config::new(&cli.namespace);
    config.response_timeout = Duration::from_millis(cli.response_timeout_ms);
    match cli.command {
        Command::Scheduler { misfire } => {
            config.misfire = match misfire.as_str() {
                "skip" => Misfire::Skip,
                "reschedule" => Misfire::Reschedule(Duration::from_secs(1)),
                _ => Misfire::FireNow,
            };
            let timers = Timers::connect(&cli.url, config)?;
            Scheduler::new(timers).run()
        }
        Command::Consumer {
            name,
            visibility_ms,
        } => {
            config.visibility_timeout = Duration::from_millis(visibility_ms);
            let timers = Timers::connect(&cli.url, config)?;
            let consumer = Consumer::new(timers, &name)?;
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
        } => bench(&cli.url, config, count, schedulers, spread_ms),
        Command::Schedule {
            count,
            start_ms,
            spread_ms,
            prefix,
        } => {
            let timers = Timers::connect(&cli.url, config)?;
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
                timers.schedule_many(&batch)?;
            }
            let secs = started.elapsed().as_secs_f64();
            println!(
                "scheduled {count} in {secs:.3} s: {:.0} schedules/s",
                count as f64 / secs
            );
            Ok(())
        }
    }
}

/// The `bench` command.
fn bench(
    url: &str,
    config: Config,
    count: u64,
    schedulers: usize,
    spread_ms: u64,
) -> Result<(), purgatorio_redis::Error> {
    use std::sync::{Arc, Mutex};

    let timers = Timers::connect(url, config)?;
    // Redis's clock from this machine's: read once, so that handling a
    // delivery costs no round trip for the measurement.
    let local_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as i64
    };
    let offset = timers.server_time_ms()? as i64 - local_ms();
    let nodes: Vec<_> = (0..schedulers)
        .map(|_| {
            let node = Scheduler::new(timers.clone());
            let stop = node.stop_handle();
            (stop, std::thread::spawn(move || node.run()))
        })
        .collect();
    let lateness = Arc::new(Mutex::new(Vec::with_capacity(count as usize)));
    let consumers: Vec<_> = (0..2)
        .map(|i| {
            let consumer = Consumer::new(timers.clone(), &format!("bench-{i}"))?;
            let lateness = Arc::clone(&lateness);
            let stop = consumer.stop_handle();
            Ok((
                stop,
                std::thread::spawn(move || {
                    consumer.run(|delivery| {
                        let late = local_ms() + offset - delivery.deadline_ms as i64;
                        lateness.lock().expect("lateness").push(late);
                        Verdict::Ack
                    })
                }),
            ))
        })
        .collect::<Result<_, purgatorio_redis::Error>>()?;
    let trips_before = timers.round_trips();
    // The first deadline comes after scheduling has ended (at 20,000
    // schedules/s or more), so that lateness is the timers' own.
    let lead_ms = 2_000 + count / 20;
    let base = timers.server_time_ms()? + lead_ms;
    let ids: Vec<String> = (0..count).map(|i| format!("b{i}")).collect();
    let started = Instant::now();
    for (c, chunk) in ids.chunks(1_000).enumerate() {
        let batch: Vec<(&str, u64, &[u8])> = chunk
            .iter()
            .enumerate()
            .map(|(j, id)| {
                let i = (c * 1_000 + j) as u64;
                (
                    id.as_str(),
                    base + i * spread_ms / count.max(1),
                    &b"payload"[..],
                )
            })
            .collect();
        timers.schedule_many(&batch)?;
    }
    let schedule_secs = started.elapsed().as_secs_f64();
    // Deliveries start when the first deadline passes, or when scheduling
    // ends if that is later.
    let first_due = (started + Duration::from_millis(lead_ms)).max(Instant::now());
    let deadline = Instant::now() + Duration::from_millis(spread_ms + 60_000);
    while (lateness.lock().expect("lateness").len() as u64) < count && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let deliver_secs = Instant::now()
        .saturating_duration_since(first_due)
        .as_secs_f64();
    for (node, thread) in nodes {
        node.stop();
        let _ = thread.join();
    }
    for (stop, thread) in consumers {
        stop.stop();
        let _ = thread.join();
    }
    let mut late = lateness.lock().expect("lateness").clone();
    late.sort_unstable();
    let at = |q: f64| {
        late.get(((late.len().max(1) - 1) as f64 * q) as usize)
            .copied()
            .unwrap_or(0)
    };
    let early = late.iter().filter(|l| **l < 0).count();
    println!("timers                 {count} over {spread_ms} ms, {schedulers} scheduler node(s), 2 consumers");
    println!("schedules/s            {:.0}", count as f64 / schedule_secs);
    println!(
        "deliveries/s           {:.0} ({} delivered in {deliver_secs:.2} s; the deadlines span {spread_ms} ms)",
        late.len() as f64 / deliver_secs.max(0.001),
        late.len()
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
        "round trips per timer  {:.3}",
        (timers.round_trips() - trips_before) as f64 / count as f64
    );
    Ok(())
}
