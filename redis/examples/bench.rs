//! Measures the throughput on one Redis: schedules `--count` timers
//! (pipelined), fires them with `--schedulers` scheduler nodes and delivers
//! them to 2 consumers, all in this process; prints schedules/s,
//! deliveries/s, lateness by Redis's clock, early, lost and duplicated counts, and
//! Redis's commands and CPU per timer (`INFO commandstats`, commands inside
//! scripts included; `INFO cpu`). `--poller` measures the baseline instead:
//! the common sorted-set poller (`ZADD` + `HSET` to schedule; every 100 ms
//! `ZRANGEBYSCORE`, then `ZREM` + `HGET` + `HDEL` per due timer). Run it
//! against a Redis of its own; `redis/bench/compare.sh` does, beside
//! BullMQ.
//!
//! ```text
//! cargo run --release -p purgatorio-redis --example bench -- --url redis://127.0.0.1:6379 --count 100000
//! cargo run --release -p purgatorio-redis --example bench -- --poller
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use purgatorio_redis::{Config, Consumer, Scheduler, Timers, Verdict};

#[derive(Parser, Debug)]
#[command(about = "Throughput of purgatorio-redis, or of a sorted-set poller, on one Redis")]
struct Args {
    /// The Redis to use: one of its own, emptied (the figures are Redis's
    /// counters over the run).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    url: String,
    /// The namespace of the timers.
    #[arg(long, default_value = "bench")]
    namespace: String,
    /// How many timers.
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// Scheduler nodes (threads of this process).
    #[arg(long, default_value_t = 1)]
    schedulers: usize,
    /// The deadlines span this many ms.
    #[arg(long, default_value_t = 5_000)]
    spread_ms: u64,
    /// The schedulers' least wait after a step that moved timers, ms
    /// (`Config::promote_pace`).
    #[arg(long, default_value_t = 10)]
    pace_ms: u64,
    /// Measure the baseline instead: the common sorted-set poller.
    #[arg(long)]
    poller: bool,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = measure(&args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn measure(args: &Args) -> Result<(), purgatorio_redis::Error> {
    let mut config = Config::new(&args.namespace);
    config.promote_pace = Duration::from_millis(args.pace_ms);
    let timers = Timers::connect(&args.url, config)?;
    let mut redis = redis::Client::open(args.url.as_str())
        .and_then(|client| client.get_connection())
        .map_err(purgatorio_redis::Error::Redis)?;
    let run = Run::new(&timers, &mut redis, args.count, args.spread_ms)?;
    let report = if args.poller {
        bench_poller(&args.url, run)?
    } else {
        bench(&timers, run, args.schedulers)?
    };
    report.print(&mut redis);
    Ok(())
}

/// One run: its timers, clocks and what it saw.
struct Run {
    /// How many timers.
    count: u64,
    /// The span of their deadlines, ms.
    spread_ms: u64,
    /// The first deadline, ms by Redis's clock.
    base_ms: u64,
    /// How long before the first deadline scheduling starts, ms.
    lead_ms: u64,
    /// Redis's clock minus this machine's, µs: measured once (see
    /// [`clock_offset_us`]), so that handling a delivery costs no round trip
    /// for the measurement.
    offset_us: i64,
    /// What the consumers saw.
    deliveries: std::sync::Mutex<Deliveries>,
    /// What Redis had done before the run.
    usage_before: Usage,
}

/// The deliveries of a run.
#[derive(Default)]
struct Deliveries {
    /// The lateness of each delivery, µs by Redis's clock.
    lateness: Vec<i64>,
    /// Each timer delivered.
    ids: std::collections::HashSet<String>,
    /// Deliveries of a timer delivered before.
    duplicated: u64,
}

/// This machine's clock, µs since the epoch.
fn local_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as i64
}

/// Redis's clock minus this machine's, µs: of 20 `TIME` round trips, the
/// shortest, against the middle of its local readings, so that the error is
/// at most half that round trip (tens of µs) and a delivery at its deadline
/// never reads as early because one reading was slow.
fn clock_offset_us(redis: &mut redis::Connection) -> Result<i64, purgatorio_redis::Error> {
    let mut best = (i64::MAX, 0);
    for _ in 0..20 {
        let before = local_us();
        let (secs, micros): (i64, i64) = redis::cmd("TIME")
            .query(redis)
            .map_err(purgatorio_redis::Error::Redis)?;
        let after = local_us();
        let round_trip = after - before;
        if round_trip < best.0 {
            best = (round_trip, secs * 1_000_000 + micros - (before + after) / 2);
        }
    }
    Ok(best.1)
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
        let offset_us = clock_offset_us(redis)?;
        // The first deadline comes after scheduling has ended (at 20,000
        // schedules/s or more), so that lateness is the timers' own.
        let lead_ms = 2_000 + count / 20;
        Ok(Run {
            count,
            spread_ms,
            base_ms: timers.server_time_ms()? + lead_ms,
            lead_ms,
            offset_us,
            deliveries: Default::default(),
            usage_before: Usage::read(redis),
        })
    }

    /// Timer `i`'s id and deadline.
    fn timer(&self, i: u64) -> (String, u64) {
        let at = u128::from(self.base_ms)
            + u128::from(i) * u128::from(self.spread_ms) / u128::from(self.count.max(1));
        (format!("b{i}"), u64::try_from(at).unwrap_or(u64::MAX))
    }

    /// Records a delivery of timer `id`, due at `deadline_ms`.
    fn delivered(&self, id: &str, deadline_ms: u64) {
        let late = local_us() + self.offset_us - deadline_ms as i64 * 1000;
        let mut deliveries = self.deliveries.lock().expect("deliveries");
        deliveries.lateness.push(late);
        if !deliveries.ids.insert(id.to_owned()) {
            deliveries.duplicated += 1;
        }
    }

    /// Waits until every timer is delivered (or a minute past the last
    /// deadline); the report, given how long scheduling took.
    fn finish(&self, started: Instant, schedule_secs: f64, label: String) -> Report {
        // Deliveries start when the first deadline passes, or when
        // scheduling ends if that is later.
        let first_due = (started + Duration::from_millis(self.lead_ms)).max(Instant::now());
        let deadline = Instant::now() + Duration::from_millis(self.spread_ms + 60_000);
        while (self.deliveries.lock().expect("deliveries").ids.len() as u64) < self.count
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let deliver_secs = Instant::now()
            .saturating_duration_since(first_due)
            .as_secs_f64();
        let deliveries = self.deliveries.lock().expect("deliveries");
        let mut late = deliveries.lateness.clone();
        late.sort_unstable();
        let (delivered, duplicated) = (deliveries.ids.len() as u64, deliveries.duplicated);
        drop(deliveries);
        Report {
            label,
            count: self.count,
            spread_ms: self.spread_ms,
            schedule_secs,
            deliver_secs,
            late,
            delivered,
            duplicated,
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
    /// Each delivery's lateness, sorted, µs.
    late: Vec<i64>,
    /// Timers delivered at least once.
    delivered: u64,
    /// Deliveries of a timer delivered before.
    duplicated: u64,
    /// What Redis had done before the run.
    usage_before: Usage,
}

impl Report {
    /// Prints the figures (Redis's usage read now through `redis`).
    fn print(&self, redis: &mut redis::Connection) {
        let usage = Usage::read(redis);
        let (count, late) = (self.count, &self.late);
        // In whole ms, rounded down: -1 is early by up to a millisecond.
        let at = |q: f64| {
            late.get(((late.len().max(1) - 1) as f64 * q) as usize)
                .copied()
                .unwrap_or(0)
                .div_euclid(1000)
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
            "lateness p50/p99/max   {} / {} / {} ms (Redis's clock; min {} ms)",
            at(0.5),
            at(0.99),
            at(1.0),
            at(0.0)
        );
        println!(
            "early, lost, duplicated {early}, {}, {}",
            count.saturating_sub(self.delivered),
            self.duplicated
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
                        run.delivered(&delivery.id, delivery.deadline_ms);
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
                for ((id, deadline), (won, _payload)) in page.iter().zip(&claimed) {
                    if *won == 1 {
                        run.delivered(id, *deadline);
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
