//! The purgatory load, modelled on Kafka's `TestPurgatoryPerformance`.
//!
//! ```text
//! cargo run --release --example purgatory_load -- --num 1000000 --rate 100000
//! cargo run --release --example purgatory_load -- --help
//! ```
//!
//! Requests arrive as a Poisson process at `--rate` per second. Each watches
//! `--keys` keys drawn from `--key-space-size`, and has a completion latency
//! drawn from a log-normal distribution fitted to `--pct50` and `--pct75`
//! (ms). A request whose latency is below `--timeout` is completed at that
//! time by a completion thread, which force-completes it through the handle
//! `Purgatory::park` returned (as Kafka's completion queue calls
//! `forceComplete`); the others expire. The report:
//! target and actual enqueue rate, process CPU time in total and per request,
//! peak RSS, completed versus expired, expiry lateness percentiles, and the
//! number of early expiries (which must be 0). RSS is sampled every 100 ms
//! so a long run shows whether memory stays flat.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use parking_lot::Mutex;
use purgatorio::{Completion, DelayedOperation, Executor, LocalTimer, Parked, Purgatory, Timer};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal};

use purgatorio_workloads::proc::{cpu_seconds, status_mib};

/// Command-line settings.
#[derive(Debug, Clone)]
struct Args {
    num: u64,
    rate: f64,
    keys: usize,
    key_space_size: u64,
    timeout_ms: u64,
    pct50_ms: f64,
    pct75_ms: f64,
    json: bool,
    /// Where expirations and purges run: `pool`, `inline` or `rayon`.
    executor: String,
}

const USAGE: &str = "usage: purgatory_load [--num N] [--rate PER_SEC] [--keys K] \
[--key-space-size S] [--timeout MS] [--pct50 MS] [--pct75 MS] [--executor pool|inline|rayon] [--json]";

impl Args {
    fn parse() -> Result<Args, String> {
        let mut args = Args {
            num: 200_000,
            rate: 50_000.0,
            keys: 3,
            key_space_size: 100,
            timeout_ms: 100,
            pct50_ms: 20.0,
            pct75_ms: 50.0,
            json: false,
            executor: "pool".to_string(),
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            if flag == "--json" {
                args.json = true;
                continue;
            }
            if flag == "--help" || flag == "-h" {
                return Err(USAGE.to_string());
            }
            let value = it
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
            let bad = || format!("{flag}: not a valid number: {value:?}\n{USAGE}");
            match flag.as_str() {
                "--num" => args.num = value.parse().map_err(|_| bad())?,
                "--rate" => args.rate = value.parse().map_err(|_| bad())?,
                "--keys" => args.keys = value.parse().map_err(|_| bad())?,
                "--key-space-size" => args.key_space_size = value.parse().map_err(|_| bad())?,
                "--timeout" => args.timeout_ms = value.parse().map_err(|_| bad())?,
                "--pct50" => args.pct50_ms = value.parse().map_err(|_| bad())?,
                "--pct75" => args.pct75_ms = value.parse().map_err(|_| bad())?,
                "--executor" => args.executor = value,
                _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
            }
        }
        if args.num == 0
            || args.keys == 0
            || args.key_space_size == 0
            || args.rate.is_nan()
            || args.rate <= 0.0
        {
            return Err(format!(
                "--num, --keys, --key-space-size and --rate must be positive\n{USAGE}"
            ));
        }
        if args.pct50_ms.is_nan()
            || args.pct50_ms <= 0.0
            || args.pct75_ms.is_nan()
            || args.pct75_ms <= args.pct50_ms
        {
            return Err(format!("need 0 < --pct50 < --pct75\n{USAGE}"));
        }
        Ok(args)
    }
}

/// One request of the load: completed by the completion thread, or expired.
struct FakeOperation {
    timeout: Duration,
    /// When the request was enqueued plus its timeout.
    deadline: Instant,
    stats: Arc<Mutex<Stats>>,
}

/// What the run observed.
#[derive(Default)]
struct Stats {
    /// Requests that ended (on_complete ran), by either path.
    ended: u64,
    /// Of those, the ones that expired.
    expired: u64,
    early: u64,
    /// Expiry lateness in microseconds.
    lateness_us: Vec<u64>,
}

impl DelayedOperation for FakeOperation {
    fn delay(&self) -> Duration {
        self.timeout
    }
    fn try_complete(&mut self) -> bool {
        false
    }
    fn on_complete(&mut self, completion: Completion) {
        self.stats.lock().ended += 1;
        if completion.is_timeout() {
            let now = Instant::now();
            let mut stats = self.stats.lock();
            stats.expired += 1;
            match now.checked_duration_since(self.deadline) {
                Some(late) => stats.lateness_us.push(late.as_micros() as u64),
                None => stats.early += 1,
            }
        }
    }
}

/// Samples the current RSS every 100 ms until `stop` is set.
fn sample_rss(stop: Arc<std::sync::atomic::AtomicBool>) -> thread::JoinHandle<Vec<f64>> {
    thread::spawn(move || {
        let mut samples = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            samples.push(status_mib("VmRSS:"));
            thread::sleep(Duration::from_millis(100));
        }
        samples
    })
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[at] as f64 / 1000.0
}

fn main() {
    let args = match Args::parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let executor = match args.executor.as_str() {
        "pool" => Executor::Pool,
        "inline" => Executor::Inline,
        #[cfg(feature = "rayon")]
        "rayon" => Executor::Rayon(std::sync::Arc::new(
            rayon::ThreadPoolBuilder::new().build().expect("rayon pool"),
        )),
        other => {
            eprintln!(
                "--executor {other}: pool, inline, or rayon (with --features rayon)\n{USAGE}"
            );
            std::process::exit(2);
        }
    };
    let purgatory: Purgatory<u64, FakeOperation> = Purgatory::builder()
        .timer(Timer::builder().executor(executor))
        .build()
        .expect("purgatory");
    let stats = Arc::new(Mutex::new(Stats::default()));
    let timeout = Duration::from_millis(args.timeout_ms);
    // Log-normal fitted to the median and the 75th percentile (ms).
    let mu = args.pct50_ms.ln();
    let sigma = (args.pct75_ms.ln() - mu) / 0.674_489_75;
    let latency_ms = LogNormal::new(mu, sigma).expect("validated percentiles");
    let gap_s = Exp::new(args.rate).expect("validated rate");
    let stop_sampling = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = sample_rss(Arc::clone(&stop_sampling));
    let progress = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(args.num)
    };
    progress.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} requests  {per_sec}  eta {eta}")
            .expect("template"),
    );

    // The completion thread: force-completes each request when its latency
    // passes. Its queue of due times is a LocalTimer on elapsed time.
    let origin = Instant::now();
    let (to_complete, completions) =
        crossbeam_channel::unbounded::<(Instant, Parked<FakeOperation>)>();
    let completer = thread::spawn(move || {
        let mut due: LocalTimer<Parked<FakeOperation>> = LocalTimer::builder()
            .tick(Duration::from_micros(100))
            .build()
            .expect("completion queue");
        let mut open = true;
        while open || !due.is_empty() {
            let wait = due
                .next_expiration()
                .map(|at| (origin + at).saturating_duration_since(Instant::now()))
                .unwrap_or(Duration::from_millis(50));
            match completions.recv_timeout(wait) {
                Ok((at, parked)) => {
                    due.schedule_at(at - origin, parked);
                    // Take whatever else is queued without waiting.
                    for (at, parked) in completions.try_iter() {
                        due.schedule_at(at - origin, parked);
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => open = false,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            }
            for e in due.advance(origin.elapsed()) {
                e.into_inner().force_complete();
            }
        }
    });

    let mut rng = SmallRng::seed_from_u64(42);
    let cpu_start = cpu_seconds();
    let start = Instant::now();
    let mut next_arrival = start;
    let mut keys = Vec::with_capacity(args.keys);
    for i in 0..args.num {
        // Poisson arrivals: exponential gaps.
        next_arrival += Duration::from_secs_f64(gap_s.sample(&mut rng));
        let now = Instant::now();
        if next_arrival > now {
            let ahead = next_arrival - now;
            if ahead > Duration::from_micros(200) {
                thread::sleep(ahead);
            }
        }
        keys.clear();
        keys.extend((0..args.keys).map(|_| rng.gen_range(0..args.key_space_size)));
        let latency = Duration::from_secs_f64(latency_ms.sample(&mut rng) / 1000.0);
        let enqueued = Instant::now();
        let op = FakeOperation {
            timeout,
            deadline: enqueued + timeout,
            stats: Arc::clone(&stats),
        };
        let parked = purgatory.park(op, &keys).expect("watched");
        if latency < timeout {
            to_complete
                .send((enqueued + latency, parked))
                .expect("completion thread");
        }
        if i % 4096 == 4095 {
            progress.inc(4096);
        }
    }
    let enqueue_elapsed = start.elapsed();
    progress.finish_and_clear();
    // RSS is judged over the steady part: while requests arrive.
    stop_sampling.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(to_complete);
    completer.join().expect("completion thread");
    // Wait for the last expirations (bounded: everything is due by now +
    // timeout).
    let deadline = Instant::now() + timeout + Duration::from_secs(5);
    loop {
        let s = stats.lock();
        if s.ended >= args.num || Instant::now() > deadline {
            break;
        }
        drop(s);
        thread::sleep(Duration::from_millis(5));
    }
    let elapsed = start.elapsed();
    let cpu = cpu_seconds() - cpu_start;
    let rss = sampler.join().expect("RSS sampler");
    // Flatness: the spread of RSS after the first tenth of the run.
    let settled = &rss[rss.len() / 10..];
    let rss_lo = settled.iter().copied().fold(f64::MAX, f64::min);
    let rss_hi = settled.iter().copied().fold(0.0, f64::max);
    let peak = status_mib("VmHWM:");
    let metrics = purgatory.metrics();
    let mut s = stats.lock();
    s.lateness_us.sort_unstable();
    let actual_rate = args.num as f64 / enqueue_elapsed.as_secs_f64();
    let cpu_per_request_us = cpu * 1e6 / args.num as f64;
    let (p50, p99, p999, max) = (
        percentile(&s.lateness_us, 0.5),
        percentile(&s.lateness_us, 0.99),
        percentile(&s.lateness_us, 0.999),
        s.lateness_us.last().map_or(0.0, |&v| v as f64 / 1000.0),
    );
    let completed = s.ended - s.expired;
    if args.json {
        let samples: Vec<String> = rss.iter().map(|v| format!("{v:.1}")).collect();
        println!(
            "{{\"num\":{},\"target_rate\":{},\"actual_rate\":{:.0},\"elapsed_s\":{:.3},\"cpu_s\":{:.3},\"cpu_per_request_us\":{:.3},\"peak_rss_mib\":{peak:.1},\"rss_settled_mib\":[{rss_lo:.1},{rss_hi:.1}],\"rss_samples_mib\":[{}],\"completed\":{completed},\"expired\":{},\"lateness_ms\":{{\"p50\":{p50:.3},\"p99\":{p99:.3},\"p999\":{p999:.3},\"max\":{max:.3}}},\"early\":{},\"purged\":{},\"panics\":{}}}",
            args.num, args.rate, actual_rate, elapsed.as_secs_f64(), cpu, cpu_per_request_us,
            samples.join(","), s.expired, s.early, metrics.purged, metrics.panics
        );
    } else {
        let rows = [
            ("requests", args.num.to_string()),
            ("elapsed", format!("{:.3} s", elapsed.as_secs_f64())),
            ("target enqueue rate", format!("{:.0} /s", args.rate)),
            ("actual enqueue rate", format!("{actual_rate:.0} /s")),
            ("CPU, process total", format!("{cpu:.3} s")),
            ("CPU per request", format!("{cpu_per_request_us:.3} µs")),
            ("peak RSS", format!("{peak:.1} MiB")),
            (
                "RSS while enqueuing, after 10 %",
                format!("{rss_lo:.1} – {rss_hi:.1} MiB ({} samples)", settled.len()),
            ),
            (
                "completed / expired",
                format!("{completed} / {}", s.expired),
            ),
            ("expiry lateness p50", format!("{p50:.3} ms")),
            ("expiry lateness p99", format!("{p99:.3} ms")),
            ("expiry lateness p99.9", format!("{p999:.3} ms")),
            ("expiry lateness max", format!("{max:.3} ms")),
            ("early expiries", s.early.to_string()),
            ("purged watch entries", metrics.purged.to_string()),
        ];
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in rows {
            println!("{k:<width$}  {v}");
        }
    }
    assert_eq!(s.early, 0, "an expiry fired early");
    assert_eq!(s.ended, args.num, "every request ends exactly once");
}
