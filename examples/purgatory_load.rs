//! The purgatory load, modelled on Kafka's `TestPurgatoryPerformance`.
//!
//! ```text
//! cargo run --release --example purgatory_load -- --num 1000000 --rate 1000000
//! cargo run --release --example purgatory_load -- --sweep
//! cargo run --release --example purgatory_load -- --help
//! ```
//!
//! Requests arrive as a Poisson process at `--rate` per second. Each watches
//! `--keys` keys: drawn at random from `--key-space-size` (`--key-mode
//! random`), or the same keys for every request (`--key-mode kafka`, as
//! Kafka's tool does). Each has a completion latency drawn from a log-normal
//! distribution fitted to `--pct50` and `--pct75` (ms). A request whose
//! latency is below `--timeout` is completed at that time by a completion
//! thread (which learns of it within 0.2 ms: requests are handed over in
//! batches), either through the handle `park` returned (`--complete-by force`,
//! as Kafka's completion queue calls `forceComplete`) or by making its
//! condition true and calling `check_and_complete` on its first key
//! (`--complete-by check`, as a broker's produce path does); the others
//! expire.
//!
//! The report: target and actual enqueue rate, process CPU time in total and
//! per request, peak RSS and RSS while enqueuing, completed versus expired,
//! expiry lateness percentiles (recorded per thread in an HDR histogram, no
//! shared lock), the number of early expiries (which must be 0), and a
//! verdict line: kept up, or fell behind and by how much. Beside the verdict,
//! the machine's load: the load average, and how much CPU other processes
//! took during the run; a run on a busy machine says so, since falling
//! behind there says little about the purgatory. `--sweep` raises the rate
//! until a run falls behind and reports the highest rate kept up.

use std::cell::RefCell;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser, ValueEnum};
use hdrhistogram::Histogram;
use indicatif::{HumanCount, ProgressBar, ProgressState, ProgressStyle};
use parking_lot::Mutex;
use purgatorio::{Completion, DelayedOperation, Executor, LocalTimer, Parked, Purgatory, Timer};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal};

use purgatorio_workloads::cli::exit_code;
use purgatorio_workloads::proc::{cpu_seconds, load_average, machine_busy_seconds, status_mib};

/// How requests pick their keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum KeyMode {
    /// `--keys` keys drawn at random from `--key-space-size` per request.
    Random,
    /// The same `--keys` keys for every request (Kafka's tool).
    Kafka,
}

/// How the completion thread completes a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CompleteBy {
    /// `Parked::force_complete` on the request's handle.
    Force,
    /// The request's condition turns true, then `check_and_complete` on its
    /// first key (every request watching that key is tried).
    Check,
}

/// Where expirations and purges run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ExecutorKind {
    /// The timer's own worker threads.
    Pool,
    /// The driver thread itself.
    Inline,
    /// A rayon pool (build with `--features rayon`).
    Rayon,
}

/// The purgatory load: Poisson arrivals parked in a purgatory, completed or
/// expired.
#[derive(Debug, Clone, Parser)]
// Named here: `Args::command()`, which reports the checks clap cannot make,
// would otherwise print the package's name in its usage line.
#[command(name = "purgatory_load", version)]
struct Args {
    /// Requests per run.
    #[arg(long, default_value_t = 200_000)]
    num: u64,
    /// Target arrival rate, requests per second.
    #[arg(long, default_value_t = 50_000.0)]
    rate: f64,
    /// Keys each request watches.
    #[arg(long, default_value_t = 3)]
    keys: usize,
    /// Number of distinct keys requests draw from (`--key-mode random`).
    #[arg(long, default_value_t = 100)]
    key_space_size: u64,
    /// How requests pick their keys.
    #[arg(long, value_enum, default_value_t = KeyMode::Random)]
    key_mode: KeyMode,
    /// How completions are delivered.
    #[arg(long, value_enum, default_value_t = CompleteBy::Force)]
    complete_by: CompleteBy,
    /// Request timeout, ms.
    #[arg(long = "timeout", default_value_t = 100)]
    timeout_ms: u64,
    /// Median completion latency, ms.
    #[arg(long = "pct50", default_value_t = 20.0)]
    pct50_ms: f64,
    /// 75th percentile completion latency, ms.
    #[arg(long = "pct75", default_value_t = 50.0)]
    pct75_ms: f64,
    /// Where expirations and purges run.
    #[arg(long, value_enum, default_value_t = ExecutorKind::Pool)]
    executor: ExecutorKind,
    /// Raise the rate from `--rate` by `--sweep-step` until a run falls
    /// behind; report the highest rate kept up.
    #[arg(long)]
    sweep: bool,
    /// The factor between a sweep's rates.
    #[arg(long, default_value_t = 1.25)]
    sweep_step: f64,
    /// A run keeps up if its enqueue rate is at least this fraction of the
    /// target...
    #[arg(long, default_value_t = 0.97)]
    keep_up_rate: f64,
    /// ...and its expiry lateness p99 is at most this many ms.
    #[arg(long, default_value_t = 5.0)]
    keep_up_p99_ms: f64,
    /// Print one JSON object per run instead of the table.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// Checks what clap's types cannot.
    fn validate(&self) -> Result<(), String> {
        if self.num == 0 || self.keys == 0 || self.key_space_size == 0 {
            return Err("--num, --keys and --key-space-size must be positive".into());
        }
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err("--rate must be a positive number".into());
        }
        if !(self.pct50_ms > 0.0 && self.pct75_ms > self.pct50_ms && self.pct75_ms.is_finite()) {
            return Err("need 0 < --pct50 < --pct75".into());
        }
        if !(self.sweep_step > 1.0 && self.sweep_step.is_finite()) {
            return Err("--sweep-step must be above 1".into());
        }
        if cfg!(not(feature = "rayon")) && self.executor == ExecutorKind::Rayon {
            return Err("--executor rayon needs the rayon feature: \
                        cargo run --release --features rayon --example purgatory_load"
                .into());
        }
        Ok(())
    }

    fn executor(&self) -> Executor {
        match self.executor {
            ExecutorKind::Pool => Executor::Pool,
            ExecutorKind::Inline => Executor::Inline,
            #[cfg(feature = "rayon")]
            ExecutorKind::Rayon => Executor::Rayon(Arc::new(
                rayon::ThreadPoolBuilder::new().build().expect("rayon pool"),
            )),
            #[cfg(not(feature = "rayon"))]
            ExecutorKind::Rayon => unreachable!("validated"),
        }
    }
}

/// One thread's lateness histogram, in microseconds.
type Shared = Arc<Mutex<Histogram<u64>>>;

/// Lateness histograms, one per thread that records, merged at the end:
/// recording takes only the recording thread's own (uncontended) lock.
#[derive(Default)]
struct Lateness {
    /// Every thread's histogram, registered on its first record.
    threads: Mutex<Vec<Shared>>,
    /// Which run the thread-local histograms belong to.
    run: u64,
}

/// Distinguishes the runs of a sweep, whose threads outlive none of them
/// but whose thread-locals might.
static RUNS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's histogram, and the run it records for.
    static LOCAL: RefCell<Option<(u64, Shared)>> = const { RefCell::new(None) };
}

impl Lateness {
    fn new() -> Self {
        Lateness {
            threads: Mutex::default(),
            run: RUNS.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Records `late_us` in this thread's histogram.
    fn record(&self, late_us: u64) {
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            let mine = match &*local {
                Some((run, histogram)) if *run == self.run => Arc::clone(histogram),
                _ => {
                    let histogram = Arc::new(Mutex::new(
                        Histogram::new_with_bounds(1, 60_000_000, 3).expect("bounds"),
                    ));
                    self.threads.lock().push(Arc::clone(&histogram));
                    *local = Some((self.run, Arc::clone(&histogram)));
                    histogram
                }
            };
            mine.lock().saturating_record(late_us.max(1));
        });
    }

    /// Every thread's records in one histogram.
    fn merged(&self) -> Histogram<u64> {
        let mut all = Histogram::new_with_bounds(1, 60_000_000, 3).expect("bounds");
        for histogram in self.threads.lock().iter() {
            all.add(&*histogram.lock()).expect("same bounds");
        }
        all
    }
}

/// What a run observed, counted without a shared lock.
struct Stats {
    /// Requests that ended (`on_complete` ran), by either path.
    ended: AtomicU64,
    /// Of those, the ones that expired.
    expired: AtomicU64,
    /// Expiries before their deadline (must stay 0).
    early: AtomicU64,
    /// Expiry lateness.
    lateness: Lateness,
}

/// One request of the load: completed by the completion thread, or expired.
struct FakeOperation {
    timeout: Duration,
    /// When the request was enqueued plus its timeout.
    deadline: Instant,
    /// Set by the completion thread in `--complete-by check` (none in
    /// `force`, which allocates nothing more per request than Kafka's tool).
    ready: Option<Arc<AtomicBool>>,
    stats: Arc<Stats>,
}

impl DelayedOperation for FakeOperation {
    fn delay(&self) -> Duration {
        self.timeout
    }
    fn try_complete(&mut self) -> bool {
        self.ready
            .as_ref()
            .is_some_and(|r| r.load(Ordering::Acquire))
    }
    fn on_complete(&mut self, completion: Completion) {
        self.stats.ended.fetch_add(1, Ordering::Relaxed);
        if completion.is_timeout() {
            self.stats.expired.fetch_add(1, Ordering::Relaxed);
            match Instant::now().checked_duration_since(self.deadline) {
                Some(late) => self.stats.lateness.record(late.as_micros() as u64),
                None => {
                    self.stats.early.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// The most completions the generator hands over at once.
const COMPLETION_BATCH: usize = 256;

/// The longest a completion waits in the generator's batch.
const COMPLETION_BATCH_WINDOW: Duration = Duration::from_micros(200);

/// What the completion thread needs to complete one request.
struct Pending {
    parked: Parked<FakeOperation>,
    ready: Option<Arc<AtomicBool>>,
    key: u64,
}

/// Samples the current RSS every 100 ms until `stop` is set.
fn sample_rss(stop: Arc<AtomicBool>) -> thread::JoinHandle<Vec<f64>> {
    thread::spawn(move || {
        let mut samples = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            samples.push(status_mib("VmRSS:"));
            thread::sleep(Duration::from_millis(100));
        }
        samples
    })
}

/// A run on a machine where other processes took at least this share of the
/// CPUs counts as a run on a busy machine. The load itself keeps two to three
/// threads busy (the generator, the completion thread, the timer's driver and
/// workers), so on a small machine even a quarter taken by others is felt.
const BUSY_SHARE: f64 = 0.25;

/// How busy the machine was during a run, beside the load's own work.
struct Machine {
    /// The load averages over 1, 5 and 15 minutes at the end of the run (the
    /// load's own threads included).
    load_average: [f64; 3],
    /// The machine's CPUs.
    cores: usize,
    /// How many CPUs' worth of time other processes took during the run.
    others_cores: f64,
}

impl Machine {
    /// The machine over the span in which it was busy for `busy_s` CPU
    /// seconds in all, `own_s` of them this process's, in `elapsed`. Both
    /// counts advance in 10 ms clock ticks per CPU, so a run shorter than a
    /// second measures the others coarsely.
    fn measure(busy_s: f64, own_s: f64, elapsed: Duration) -> Machine {
        let cores = thread::available_parallelism().map_or(1, |n| n.get());
        let others_s = (busy_s - own_s).max(0.0);
        Machine {
            load_average: load_average(),
            cores,
            others_cores: (others_s / elapsed.as_secs_f64()).min(cores as f64),
        }
    }

    /// Whether other processes took at least [`BUSY_SHARE`] of the CPUs.
    fn busy(&self) -> bool {
        self.others_cores >= BUSY_SHARE * self.cores as f64
    }

    /// One line for the report, ending with whether the machine was busy.
    fn describe(&self) -> String {
        let [one, five, fifteen] = self.load_average;
        let state = if self.busy() {
            "busy, so falling behind says little about the purgatory"
        } else {
            "quiet"
        };
        format!(
            "load average {one:.2} {five:.2} {fifteen:.2} on {} cores; \
             other processes took {:.1} cores during the run: {state}",
            self.cores, self.others_cores
        )
    }
}

/// The figures of one run.
struct Report {
    rate: f64,
    actual_rate: f64,
    elapsed: Duration,
    cpu_s: f64,
    cpu_per_request_us: f64,
    peak_mib: f64,
    rss_lo: f64,
    rss_hi: f64,
    rss_samples: Vec<f64>,
    completed: u64,
    expired: u64,
    early: u64,
    ended: u64,
    purged: u64,
    lateness_ms: [f64; 4],
    machine: Machine,
}

impl Report {
    /// Whether the run kept up, and if not, why and by how much.
    fn verdict(&self, args: &Args) -> Result<String, String> {
        let share = self.actual_rate / self.rate;
        let p99 = self.lateness_ms[1];
        let mut behind = Vec::new();
        if share < args.keep_up_rate {
            behind.push(format!(
                "enqueued {:.0}/s, {:.1} % of the target {:.0}/s",
                self.actual_rate,
                100.0 * share,
                self.rate
            ));
        }
        if p99 > args.keep_up_p99_ms {
            behind.push(format!(
                "expiry lateness p99 {p99:.2} ms, over {:.2} ms",
                args.keep_up_p99_ms
            ));
        }
        if behind.is_empty() {
            Ok(format!(
                "kept up: {:.0}/s ({:.1} % of target), expiry p99 {p99:.2} ms",
                self.actual_rate,
                100.0 * share
            ))
        } else {
            Err(format!("fell behind: {}", behind.join("; ")))
        }
    }

    fn print(&self, args: &Args) {
        let verdict = self.verdict(args);
        if args.json {
            let samples: Vec<String> = self.rss_samples.iter().map(|v| format!("{v:.1}")).collect();
            let [p50, p99, p999, max] = self.lateness_ms;
            let [one, five, fifteen] = self.machine.load_average;
            println!(
                "{{\"num\":{},\"target_rate\":{},\"actual_rate\":{:.0},\"elapsed_s\":{:.3},\"cpu_s\":{:.3},\"cpu_per_request_us\":{:.3},\"peak_rss_mib\":{:.1},\"rss_settled_mib\":[{:.1},{:.1}],\"rss_samples_mib\":[{}],\"completed\":{},\"expired\":{},\"lateness_ms\":{{\"p50\":{p50:.3},\"p99\":{p99:.3},\"p999\":{p999:.3},\"max\":{max:.3}}},\"early\":{},\"purged\":{},\"kept_up\":{},\"load_average\":[{one:.2},{five:.2},{fifteen:.2}],\"other_processes_cores\":{:.2},\"busy\":{}}}",
                args.num, self.rate, self.actual_rate, self.elapsed.as_secs_f64(), self.cpu_s,
                self.cpu_per_request_us, self.peak_mib, self.rss_lo, self.rss_hi,
                samples.join(","), self.completed, self.expired, self.early, self.purged,
                verdict.is_ok(), self.machine.others_cores, self.machine.busy()
            );
            return;
        }
        let [p50, p99, p999, max] = self.lateness_ms;
        let rows = [
            ("requests", args.num.to_string()),
            (
                "keys, completions",
                format!(
                    "{} per request ({:?}), by {:?}, executor {:?}",
                    args.keys, args.key_mode, args.complete_by, args.executor
                ),
            ),
            ("elapsed", format!("{:.3} s", self.elapsed.as_secs_f64())),
            ("target enqueue rate", format!("{:.0} /s", self.rate)),
            ("actual enqueue rate", format!("{:.0} /s", self.actual_rate)),
            ("CPU, process total", format!("{:.3} s", self.cpu_s)),
            (
                "CPU per request",
                format!("{:.3} µs", self.cpu_per_request_us),
            ),
            ("peak RSS", format!("{:.1} MiB", self.peak_mib)),
            (
                "RSS while enqueuing, after 10 %",
                format!("{:.1} – {:.1} MiB", self.rss_lo, self.rss_hi),
            ),
            (
                "completed / expired",
                format!("{} / {}", self.completed, self.expired),
            ),
            ("expiry lateness p50", format!("{p50:.3} ms")),
            ("expiry lateness p99", format!("{p99:.3} ms")),
            ("expiry lateness p99.9", format!("{p999:.3} ms")),
            ("expiry lateness max", format!("{max:.3} ms")),
            ("early expiries", self.early.to_string()),
            ("purged watch entries", self.purged.to_string()),
        ];
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in rows {
            println!("{k:<width$}  {v}");
        }
        match verdict {
            Ok(line) | Err(line) => println!("verdict: {line}"),
        }
        println!("machine: {}", self.machine.describe());
    }
}

/// The completion thread: completes each request when its latency passes.
/// Its queue of due times is a `LocalTimer` on elapsed time.
fn completer(
    origin: Instant,
    complete_by: CompleteBy,
    purgatory: Purgatory<u64, FakeOperation>,
    completions: crossbeam_channel::Receiver<Vec<(Instant, Pending)>>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut due: LocalTimer<Pending> = LocalTimer::builder()
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
                Ok(batch) => {
                    // Take whatever else is queued without waiting.
                    for batch in std::iter::once(batch).chain(completions.try_iter()) {
                        for (at, pending) in batch {
                            due.schedule_at(at - origin, pending);
                        }
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => open = false,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            }
            for expired in due.advance(origin.elapsed()) {
                let pending = expired.into_inner();
                match complete_by {
                    CompleteBy::Force => {
                        pending.parked.force_complete();
                    }
                    CompleteBy::Check => {
                        if let Some(ready) = &pending.ready {
                            ready.store(true, Ordering::Release);
                        }
                        let _ = purgatory.check_and_complete(&pending.key);
                    }
                }
            }
        }
    })
}

/// One run at `rate` requests per second.
fn run(args: &Args, rate: f64) -> Report {
    let purgatory: Purgatory<u64, FakeOperation> = Purgatory::builder()
        .timer(Timer::builder().executor(args.executor()))
        .build()
        .expect("purgatory");
    let stats = Arc::new(Stats {
        ended: AtomicU64::new(0),
        expired: AtomicU64::new(0),
        early: AtomicU64::new(0),
        lateness: Lateness::new(),
    });
    let timeout = Duration::from_millis(args.timeout_ms);
    // Log-normal fitted to the median and the 75th percentile (ms).
    let mu = args.pct50_ms.ln();
    let sigma = (args.pct75_ms.ln() - mu) / 0.674_489_75;
    let latency_ms = LogNormal::new(mu, sigma).expect("validated percentiles");
    let gap_s = Exp::new(rate).expect("validated rate");
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let sampler = sample_rss(Arc::clone(&stop_sampling));
    let progress = if args.json || args.sweep {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(args.num)
    };
    progress.set_style(
        ProgressStyle::with_template(
            "{bar:40} {human_pos}/{human_len} requests  {rate}  eta {eta}",
        )
        .expect("template")
        // Whole requests per second: indicatif's own `per_sec` shows four
        // decimals.
        .with_key(
            "rate",
            |state: &ProgressState, out: &mut dyn std::fmt::Write| {
                let _ = write!(out, "{}/s", HumanCount(state.per_sec() as u64));
            },
        ),
    );
    let origin = Instant::now();
    let (to_complete, completions) = crossbeam_channel::unbounded();
    let completing = completer(origin, args.complete_by, purgatory.clone(), completions);

    let mut rng = SmallRng::seed_from_u64(42);
    let (cpu_start, busy_start) = (cpu_seconds(), machine_busy_seconds());
    let start = Instant::now();
    let mut next_arrival = start;
    let mut keys = Vec::with_capacity(args.keys);
    // Completions go to the completion thread in batches, at least every
    // COMPLETION_BATCH_WINDOW: one channel operation per batch, so the
    // harness costs little beside what it measures.
    let mut batch = Vec::with_capacity(COMPLETION_BATCH);
    let mut batch_started = start;
    for i in 0..args.num {
        // Poisson arrivals: exponential gaps.
        next_arrival += Duration::from_secs_f64(gap_s.sample(&mut rng));
        let mut now = Instant::now();
        if next_arrival > now {
            let ahead = next_arrival - now;
            if ahead > Duration::from_micros(200) {
                thread::sleep(ahead);
                now = Instant::now();
            }
        }
        keys.clear();
        match args.key_mode {
            KeyMode::Random => {
                keys.extend((0..args.keys).map(|_| rng.gen_range(0..args.key_space_size)))
            }
            KeyMode::Kafka => keys.extend(0..args.keys as u64),
        }
        let latency = Duration::from_secs_f64(latency_ms.sample(&mut rng) / 1000.0);
        let enqueued = now;
        let ready =
            (args.complete_by == CompleteBy::Check).then(|| Arc::new(AtomicBool::new(false)));
        let op = FakeOperation {
            timeout,
            deadline: enqueued + timeout,
            ready: ready.clone(),
            stats: Arc::clone(&stats),
        };
        let parked = purgatory.park(op, &keys).expect("watched");
        if latency < timeout {
            let pending = Pending {
                parked,
                ready,
                key: keys[0],
            };
            batch.push((enqueued + latency, pending));
        }
        if batch.len() >= COMPLETION_BATCH || now - batch_started >= COMPLETION_BATCH_WINDOW {
            let full = std::mem::replace(&mut batch, Vec::with_capacity(COMPLETION_BATCH));
            to_complete.send(full).expect("completion thread");
            batch_started = now;
        }
        if i % 4096 == 4095 {
            progress.inc(4096);
        }
    }
    let enqueue_elapsed = start.elapsed();
    progress.finish_and_clear();
    // RSS is judged over the steady part: while requests arrive.
    stop_sampling.store(true, Ordering::Relaxed);
    to_complete.send(batch).expect("completion thread");
    drop(to_complete);
    completing.join().expect("completion thread");
    // Wait for the last expirations (bounded: everything is due by now +
    // timeout).
    let deadline = Instant::now() + timeout + Duration::from_secs(5);
    while stats.ended.load(Ordering::Relaxed) < args.num && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    let elapsed = start.elapsed();
    let cpu_s = cpu_seconds() - cpu_start;
    let rss_samples = sampler.join().expect("RSS sampler");
    // Flatness: the spread of RSS after the first tenth of the run.
    let settled = &rss_samples[rss_samples.len() / 10..];
    let rss_lo = settled.iter().copied().fold(f64::MAX, f64::min);
    let rss_hi = settled.iter().copied().fold(0.0, f64::max);
    let lateness = stats.lateness.merged();
    let ms = |q: f64| {
        if lateness.is_empty() {
            0.0
        } else {
            lateness.value_at_quantile(q) as f64 / 1000.0
        }
    };
    let ended = stats.ended.load(Ordering::Relaxed);
    let expired = stats.expired.load(Ordering::Relaxed);
    let report = Report {
        rate,
        actual_rate: args.num as f64 / enqueue_elapsed.as_secs_f64(),
        elapsed,
        cpu_s,
        cpu_per_request_us: cpu_s * 1e6 / args.num as f64,
        peak_mib: status_mib("VmHWM:"),
        rss_lo,
        rss_hi,
        rss_samples,
        completed: ended - expired,
        expired,
        early: stats.early.load(Ordering::Relaxed),
        ended,
        purged: purgatory.metrics().purged,
        lateness_ms: [ms(0.5), ms(0.99), ms(0.999), lateness.max() as f64 / 1000.0],
        machine: Machine::measure(machine_busy_seconds() - busy_start, cpu_s, elapsed),
    };
    purgatory.shutdown();
    report
}

/// Runs the load once, or a sweep; an error if a run breaks a guarantee.
fn load(args: &Args) -> Result<(), String> {
    let mut rate = args.rate;
    let mut best: Option<f64> = None;
    let busy = loop {
        if args.sweep && !args.json {
            println!("--- {rate:.0} requests/s");
        }
        let report = run(args, rate);
        report.print(args);
        if report.early > 0 {
            return Err(format!("{} expiries fired early", report.early));
        }
        if report.ended != args.num {
            return Err(format!("{} of {} requests ended", report.ended, args.num));
        }
        if !args.sweep {
            return Ok(());
        }
        if report.verdict(args).is_err() {
            break report.machine.busy();
        }
        best = Some(rate);
        rate *= args.sweep_step;
    };
    let busy = if busy { ", on a busy machine" } else { "" };
    match best {
        Some(best) => println!(
            "saturation: kept up at {best:.0}/s, fell behind at {rate:.0}/s{busy} (step ×{})",
            args.sweep_step
        ),
        None => println!("saturation: fell behind already at {rate:.0}/s{busy}"),
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(message) = args.validate() {
        Args::command()
            .error(clap::error::ErrorKind::ValueValidation, message)
            .exit();
    }
    exit_code(load(&args))
}
