//! `purgatorio-redis`: run a scheduler node or a consumer of durable timers,
//! schedule timers in bulk, or measure the throughput.
//!
//! ```text
//! purgatorio-redis scheduler --url redis://127.0.0.1:6379 --namespace payments
//! purgatorio-redis consumer  --url redis://127.0.0.1:6379 --namespace payments --name worker-1
//! ```

use std::io::Write;
use std::sync::atomic::AtomicBool;
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
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a scheduler node: move due timers to the stream, until killed.
    Scheduler {
        /// Pretend this node's clock is off by this many ms (tests).
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        clock_skew_ms: i64,
        /// What to do with timers that came due while no scheduler ran.
        #[arg(long, default_value = "fire", value_parser = ["fire", "skip", "reschedule"])]
        misfire: String,
    },
    /// Run a consumer: print each due timer as `id deadline_ms redis_ms
    /// attempt` and acknowledge it, until killed.
    Consumer {
        /// This consumer's name in the group.
        #[arg(long)]
        name: String,
        /// Take over a dead consumer's entries after this many ms.
        #[arg(long, default_value_t = 30_000)]
        visibility_ms: u64,
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

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<(), purgatorio_redis::Error> {
    let mut config = Config::new(&cli.namespace);
    match cli.command {
        Command::Scheduler {
            clock_skew_ms,
            misfire,
        } => {
            config.misfire = match misfire.as_str() {
                "skip" => Misfire::Skip,
                "reschedule" => Misfire::Reschedule(Duration::from_secs(1)),
                _ => Misfire::FireNow,
            };
            let timers = Timers::connect(&cli.url, config)?;
            Scheduler::new(timers)
                .with_clock_skew_ms(clock_skew_ms)
                .run()
        }
        Command::Consumer {
            name,
            visibility_ms,
        } => {
            config.visibility_timeout = Duration::from_millis(visibility_ms);
            let timers = Timers::connect(&cli.url, config)?;
            let consumer = Consumer::new(timers.clone(), &name)?;
            let stdout = std::io::stdout();
            consumer.run(&AtomicBool::new(false), |delivery| {
                // Redis's clock when the timer is handled: the test's judge
                // of "never early". Printed before the ack, so a consumer
                // killed after the print re-delivers (at least once).
                let now = timers.server_time_ms().unwrap_or(0);
                let mut out = stdout.lock();
                let _ = writeln!(
                    out,
                    "{} {} {} {}",
                    delivery.id, delivery.deadline_ms, now, delivery.attempt
                );
                let _ = out.flush();
                Verdict::Ack
            })
        }
        Command::Schedule {
            count,
            start_ms,
            spread_ms,
            prefix,
        } => {
            let timers = Timers::connect(&cli.url, config)?;
            let base = timers.server_time_ms()? + start_ms;
            let started = Instant::now();
            let ids: Vec<String> = (0..count).map(|i| format!("{prefix}{i}")).collect();
            for chunk in ids.chunks(500).enumerate() {
                let (c, chunk) = chunk;
                let batch: Vec<(&str, u64, &[u8])> = chunk
                    .iter()
                    .enumerate()
                    .map(|(j, id)| {
                        let i = (c * 500 + j) as u64;
                        (id.as_str(), base + i * spread_ms / count.max(1), &b"x"[..])
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
