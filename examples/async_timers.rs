//! purgatorio's async timers beside tokio's own, on a tokio runtime.
//!
//! ```text
//! cargo run --release --example async_timers            # 1,000,000 of each, 3 rounds
//! cargo run --release --example async_timers -- --quick # 100,000, 1 round
//! ```
//!
//! Tokio's alternative, per-worker timer (`Builder::enable_alt_timer`) is a
//! third subject when the example is built with `--cfg tokio_unstable`
//! (tokio's unstable features are opt-in at build time; a separate target
//! directory keeps that build apart):
//!
//! ```text
//! RUSTFLAGS="--cfg tokio_unstable" CARGO_TARGET_DIR=target/tokio-unstable \
//!     cargo run --release --example async_timers
//! ```
//!
//! Three cases, each subject in a fresh child process (so CPU and RSS are its
//! own), subjects alternating round by round:
//!
//! * **timeouts**: 1,000,000 `timeout`s around futures that are pending at
//!   first, all registered at once (1,000,000 pending timers), then the
//!   futures finish first and the timeouts are dropped: the request-timeout
//!   pattern, in one task on one of the runtime's workers, which creates and
//!   polls them.
//!   Reported: CPU per timeout (create, register, cancel; that thread's CPU
//!   time, the futures alone subtracted), the
//!   timer's bytes per pending timeout (RSS growth beside the same futures
//!   without a timeout), and what is left afterwards (pending timers, RSS).
//! * **both workers**: two tasks, one on each worker, started together,
//!   each creating as many `timeout`s one after the other (created, polled
//!   once while the future is pending, dropped): the timer's shared state
//!   as two cores use it at once. Reported: CPU per timeout (the two
//!   threads', from when both had started) and timeouts per second of both
//!   together.
//! * **handed over**: one task makes `timeout`s and hands them, 256 at a
//!   time, to a task on the other worker, which polls each once (its
//!   entry goes in there) and drops it: a timeout made where a request
//!   arrives and awaited where it is served. Reported: CPU per timeout
//!   (both threads') and timeouts per second.
//! * **sleeps**: 1,000,000 tasks that each sleep until a deadline uniform in
//!   [1, 2,000] ms after the task starts. Reported: lateness p50 / p99 / max (the real clock when
//!   the task resumes, against its deadline), early wake-ups, CPU per sleep
//!   (spawning and running the tasks included, the same for both).

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use purgatorio::Timer;
use purgatorio_workloads::cli::{exit_code, figures_from_child, ChildError};
use purgatorio_workloads::proc::{cpu_seconds, rss_bytes, thread_cpu_seconds};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A future that is pending until its gate opens: the request a timeout
/// guards.
struct Gate(Arc<AtomicBool>);

impl Future for Gate {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0.load(Ordering::Relaxed) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// purgatorio's async timers beside tokio's own: timeouts that finish
/// first, and sleeps that fire.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// 100,000 timers and one round, instead of 1,000,000 and three.
    #[arg(long)]
    quick: bool,
    #[command(subcommand)]
    internal: Option<Internal>,
}

/// How the comparison runs each case in a fresh copy of itself.
#[derive(Debug, Subcommand)]
enum Internal {
    /// Internal: runs one case and prints its figures.
    #[command(hide = true)]
    Child {
        case: Case,
        /// Timers in the case.
        n: usize,
        /// The timer; none measures the futures alone (timeouts only).
        subject: Option<Subject>,
    },
}

/// The cases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Case {
    /// Timeouts around futures that finish first.
    Timeouts,
    /// Timeouts made on both workers at once.
    BothWorkers,
    /// Timeouts made on one worker and polled on the other.
    HandedOver,
    /// Sleeps that fire.
    Sleeps,
}

/// The timers under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Subject {
    /// purgatorio's `Timer::timeout` and `Timer::sleep_until`.
    Purgatorio,
    /// `tokio::time`.
    Tokio,
    /// `tokio::time` on tokio's alternative, per-worker timer (only in a
    /// build with `--cfg tokio_unstable`).
    TokioAlt,
}

impl Subject {
    fn name(self) -> &'static str {
        match self {
            Subject::Purgatorio => "purgatorio",
            Subject::Tokio => "tokio::time",
            Subject::TokioAlt => "tokio::time, alt timer",
        }
    }

    /// The subjects this build can run.
    fn all() -> Vec<Subject> {
        let mut all = vec![Subject::Purgatorio, Subject::Tokio];
        if cfg!(tokio_unstable) {
            all.push(Subject::TokioAlt);
        }
        all
    }
}

/// One case's figures, as a child reports them.
#[derive(Default, Clone)]
struct Figures {
    cpu_ns: f64,
    bytes: f64,
    left_pending: u64,
    rss_after_mib: f64,
    rss_before_mib: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    early: u64,
    /// Timeouts per second, all tasks together, millions.
    rate_m: f64,
}

/// A multi-thread runtime with 2 workers; with tokio's alternative timer
/// for [`Subject::TokioAlt`].
fn runtime(subject: Option<Subject>) -> Result<tokio::runtime::Runtime, String> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(2).enable_time();
    if subject == Some(Subject::TokioAlt) {
        #[cfg(tokio_unstable)]
        builder.enable_alt_timer();
        #[cfg(not(tokio_unstable))]
        return Err(
            "tokio's alternative timer needs a build with RUSTFLAGS=\"--cfg tokio_unstable\""
                .into(),
        );
    }
    builder.build().map_err(|e| format!("runtime: {e}"))
}

/// Polls every future once with a no-op waker.
///
/// The futures live side by side in one allocation, so that freeing them
/// gives the memory back to the system and the RSS after the run shows what
/// the timer kept.
fn poll_all<F: Future>(futures: &mut [F]) -> usize {
    let mut cx = Context::from_waker(Waker::noop());
    let mut ready = 0;
    for future in futures.iter_mut() {
        // SAFETY: the vector is never grown, shrunk or moved after the first
        // poll, and its futures are dropped in place: they stay pinned.
        let future = unsafe { Pin::new_unchecked(future) };
        ready += usize::from(future.poll(&mut cx).is_ready());
    }
    ready
}

/// The timeouts case: `n` pending at once, then all finishing first.
/// `None` as the subject measures the futures alone (the baseline).
fn timeouts(subject: Option<Subject>, n: usize) -> Result<Figures, String> {
    let runtime = runtime(subject)?;
    let timer = Timer::builder().build().expect("timer");
    let open = Arc::new(AtomicBool::new(false));
    let rss_before = rss_bytes();
    let limit = Duration::from_secs(60);
    // One task on a worker thread (where a per-worker timer keeps its
    // wheel) creates, registers and cancels them all without yielding, so
    // it stays on that thread: its CPU time, to the nanosecond.
    let task_timer = timer.clone();
    let task = async move {
        let (timer, open) = (task_timer, open);
        let cpu_start = thread_cpu_seconds();
        macro_rules! run {
            ($make:expr) => {{
                let mut futures: Vec<_> = (0..n).map(|_| $make).collect();
                let ready = poll_all(&mut futures);
                let rss_pending = rss_bytes();
                open.store(true, Ordering::Relaxed);
                let finished = poll_all(&mut futures);
                assert_eq!(finished, n, "every future finishes first");
                drop(futures);
                (thread_cpu_seconds() - cpu_start, rss_pending, ready)
            }};
        }
        match subject {
            Some(Subject::Purgatorio) => run!(timer.timeout(limit, Gate(Arc::clone(&open)))),
            Some(Subject::Tokio | Subject::TokioAlt) => {
                run!(tokio::time::timeout(limit, Gate(Arc::clone(&open))))
            }
            None => run!(Gate(Arc::clone(&open))),
        }
    };
    let (cpu, rss_pending, ready) = runtime
        .block_on(runtime.spawn(task))
        .map_err(|e| format!("timeouts task: {e}"))?;
    assert_eq!(ready, 0, "nothing is ready at the first poll");
    Ok(Figures {
        cpu_ns: cpu * 1e9 / n as f64,
        bytes: rss_pending.saturating_sub(rss_before) as f64 / n as f64,
        left_pending: timer.len() as u64,
        rss_before_mib: rss_before as f64 / (1 << 20) as f64,
        rss_after_mib: rss_bytes() as f64 / (1 << 20) as f64,
        ..Figures::default()
    })
}

/// The both-workers case: two tasks, started together on the two workers,
/// each creating `n` timeouts one at a time around a pending future,
/// polling each once and dropping it.
fn both_workers(subject: Subject, n: usize) -> Result<Figures, String> {
    const TASKS: usize = 2;
    let runtime = runtime(Some(subject))?;
    let timer = Timer::builder().build().expect("timer");
    // Each task waits (a bounded spin on its worker) until both have
    // started, so they run at the same time on different workers; each
    // then counts its own thread's CPU and the time it started and ended.
    let arrived = Arc::new(AtomicU64::new(0));
    let spans = runtime.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let (timer, arrived) = (timer.clone(), Arc::clone(&arrived));
                tokio::spawn(async move {
                    arrived.fetch_add(1, Ordering::SeqCst);
                    let give_up = Instant::now() + Duration::from_secs(10);
                    while arrived.load(Ordering::SeqCst) < TASKS as u64 {
                        if Instant::now() > give_up {
                            return Err("the two tasks never ran at once".to_string());
                        }
                        std::hint::spin_loop();
                    }
                    let (start, cpu_start) = (Instant::now(), thread_cpu_seconds());
                    let mut cx = Context::from_waker(Waker::noop());
                    for _ in 0..n {
                        let limit = Duration::from_secs(60);
                        let pending = std::future::pending::<()>();
                        let waiting = match subject {
                            Subject::Purgatorio => std::pin::pin!(timer.timeout(limit, pending))
                                .poll(&mut cx)
                                .is_pending(),
                            Subject::Tokio | Subject::TokioAlt => {
                                std::pin::pin!(tokio::time::timeout(limit, pending))
                                    .poll(&mut cx)
                                    .is_pending()
                            }
                        };
                        assert!(waiting, "a 60 s timeout ended at once");
                    }
                    Ok((start, Instant::now(), thread_cpu_seconds() - cpu_start))
                })
            })
            .collect();
        let mut spans = Vec::new();
        for task in tasks {
            spans.push(task.await.map_err(|e| format!("timeout task: {e}"))??);
        }
        Ok::<_, String>(spans)
    })?;
    Ok(tasks_figures(&spans, TASKS * n, &timer))
}

/// The figures of tasks that each ran from a start to an end instant and
/// used the CPU seconds given, `timeouts` timeouts between them: CPU per
/// timeout and timeouts per second from the first start to the last end.
fn tasks_figures(spans: &[(Instant, Instant, f64)], timeouts: usize, timer: &Timer) -> Figures {
    let start = spans.iter().map(|s| s.0).min().expect("a task");
    let end = spans.iter().map(|s| s.1).max().expect("a task");
    let cpu: f64 = spans.iter().map(|s| s.2).sum();
    let total = timeouts as f64;
    Figures {
        cpu_ns: cpu * 1e9 / total,
        rate_m: total / (end - start).as_secs_f64() / 1e6,
        left_pending: timer.len() as u64,
        ..Figures::default()
    }
}

/// How many timeouts the handed-over case moves at a time.
const HAND: usize = 256;

/// The handed-over case: a task on one worker makes `n` timeouts around
/// pending futures and hands them, [`HAND`] at a time, to a task on the
/// other worker, which polls each once and drops it.
fn handed_over(subject: Subject, n: usize) -> Result<Figures, String> {
    let runtime = runtime(Some(subject))?;
    let timer = Timer::builder().build().expect("timer");
    let limit = Duration::from_secs(60);
    // Two in flight at most: the maker runs at most one hand ahead.
    let (give, take) = crossbeam_channel::bounded::<Hand>(1);
    let hands = n.div_ceil(HAND);
    let spans = runtime.block_on(async {
        let maker = {
            let timer = timer.clone();
            tokio::spawn(async move {
                let (start, cpu_start) = (Instant::now(), thread_cpu_seconds());
                for h in 0..hands {
                    let count = HAND.min(n - h * HAND);
                    let hand = match subject {
                        Subject::Purgatorio => Hand::Ours(
                            (0..count)
                                .map(|_| timer.timeout(limit, std::future::pending()))
                                .collect(),
                        ),
                        Subject::Tokio | Subject::TokioAlt => Hand::Tokio(
                            (0..count)
                                .map(|_| tokio::time::timeout(limit, std::future::pending()))
                                .collect(),
                        ),
                    };
                    // Blocks this worker while the other catches up: each
                    // task has a worker of its own.
                    give.send(hand)
                        .map_err(|_| "the poller stopped".to_string())?;
                }
                Ok::<_, String>((start, Instant::now(), thread_cpu_seconds() - cpu_start))
            })
        };
        let poller = tokio::spawn(async move {
            let (start, cpu_start) = (Instant::now(), thread_cpu_seconds());
            for _ in 0..hands {
                let hand = take
                    .recv_timeout(Duration::from_secs(60))
                    .map_err(|e| format!("no timeouts handed over: {e}"))?;
                let ready = match hand {
                    Hand::Ours(mut v) => poll_all(&mut v),
                    Hand::Tokio(mut v) => poll_all(&mut v),
                };
                if ready != 0 {
                    return Err(format!("{ready} timeouts of 60 s ended at once"));
                }
            }
            Ok((start, Instant::now(), thread_cpu_seconds() - cpu_start))
        });
        let made = maker.await.map_err(|e| format!("maker: {e}"))??;
        let polled = poller.await.map_err(|e| format!("poller: {e}"))??;
        Ok::<_, String>([made, polled])
    })?;
    Ok(tasks_figures(&spans, n, &timer))
}

/// A batch of timeouts handed from the task that made them to the task
/// that polls them, not yet polled (so not yet pinned).
enum Hand {
    Ours(Vec<purgatorio::Timeout<std::future::Pending<()>>>),
    Tokio(Vec<tokio::time::Timeout<std::future::Pending<()>>>),
}

/// The sleeps case: `n` tasks sleeping until deadlines in [1, 2,000] ms.
fn sleeps(subject: Subject, n: usize) -> Result<Figures, String> {
    let runtime = runtime(Some(subject))?;
    let timer = Timer::builder().build().expect("timer");
    let lateness: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let early = Arc::new(AtomicU64::new(0));
    let mut rng = SmallRng::seed_from_u64(7);
    let delays: Vec<u64> = (0..n).map(|_| rng.gen_range(1_000..=2_000_000)).collect();
    let cpu_start = cpu_seconds();
    runtime.block_on(async {
        let tasks: Vec<_> = delays
            .iter()
            .enumerate()
            .map(|(i, &delay_us)| {
                let (timer, lateness, early) =
                    (timer.clone(), Arc::clone(&lateness), Arc::clone(&early));
                tokio::spawn(async move {
                    // From when the task starts: how long spawning a million
                    // tasks takes is not the timer's lateness.
                    let deadline = Instant::now() + Duration::from_micros(delay_us);
                    match subject {
                        Subject::Purgatorio => timer.sleep_until(deadline).await,
                        Subject::Tokio | Subject::TokioAlt => {
                            tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await
                        }
                    }
                    match Instant::now().checked_duration_since(deadline) {
                        Some(late) => lateness[i].store(late.as_micros() as u64, Ordering::Relaxed),
                        None => {
                            early.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("sleeping task");
        }
    });
    let cpu = cpu_seconds() - cpu_start;
    let mut late: Vec<u64> = lateness.iter().map(|l| l.load(Ordering::Relaxed)).collect();
    late.sort_unstable();
    let at = |q: f64| late[((late.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    Ok(Figures {
        cpu_ns: cpu * 1e9 / n as f64,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: at(1.0),
        early: early.load(Ordering::Relaxed),
        left_pending: timer.len() as u64,
        ..Figures::default()
    })
}

/// Runs one case in a child process and reads its figures.
fn child(case: Case, subject: Option<Subject>, n: usize) -> Result<Figures, ChildError> {
    let mut args = vec!["child".to_string(), value_name(case), n.to_string()];
    args.extend(subject.map(value_name));
    let [cpu_ns, bytes, left_pending, rss_before_mib, rss_after_mib, p50_ms, p99_ms, max_ms, early, rate_m] =
        figures_from_child(&args)?;
    Ok(Figures {
        cpu_ns,
        bytes,
        left_pending: left_pending as u64,
        rss_before_mib,
        rss_after_mib,
        p50_ms,
        p99_ms,
        max_ms,
        early: early as u64,
        rate_m,
    })
}

/// How `value` is spelled on the command line.
fn value_name(value: impl ValueEnum) -> String {
    value
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_string())
}

/// The hidden `child` mode: runs one case here and prints its figures.
fn run_child(case: Case, subject: Option<Subject>, n: usize) -> Result<(), String> {
    let f = match (case, subject) {
        (Case::Timeouts, subject) => timeouts(subject, n)?,
        (Case::Sleeps, Some(subject)) => sleeps(subject, n)?,
        (Case::BothWorkers, Some(subject)) => both_workers(subject, n)?,
        (Case::HandedOver, Some(subject)) => handed_over(subject, n)?,
        (Case::Sleeps | Case::BothWorkers | Case::HandedOver, None) => {
            return Err("this case needs a subject".into())
        }
    };
    println!(
        "{} {} {} {} {} {} {} {} {} {}",
        f.cpu_ns,
        f.bytes,
        f.left_pending,
        f.rss_before_mib,
        f.rss_after_mib,
        f.p50_ms,
        f.p99_ms,
        f.max_ms,
        f.early,
        f.rate_m
    );
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A table cell: the median of `v` to `decimals` places, then its spread.
fn cell(v: &[f64], decimals: usize) -> String {
    format!("{:.*} ({})", decimals, median(v.to_vec()), spread(v))
}

fn spread(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::MAX, f64::min);
    let hi = v.iter().copied().fold(f64::MIN, f64::max);
    format!("{lo:.1}–{hi:.1}")
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.internal {
        Some(Internal::Child { case, n, subject }) => exit_code(run_child(case, subject, n)),
        None => exit_code(compare(args.quick)),
    }
}

/// Runs every case for both subjects and prints the tables.
fn compare(quick: bool) -> Result<(), Box<dyn std::error::Error>> {
    let (n, rounds) = if quick { (100_000, 1) } else { (1_000_000, 3) };
    let subjects = Subject::all();
    let mut timeout_runs: Vec<Vec<Figures>> = vec![Vec::new(); subjects.len()];
    let mut sleep_runs: Vec<Vec<Figures>> = vec![Vec::new(); subjects.len()];
    let mut both_runs: Vec<Vec<Figures>> = vec![Vec::new(); subjects.len()];
    let mut handed_runs: Vec<Vec<Figures>> = vec![Vec::new(); subjects.len()];
    let mut baseline = Vec::new();
    for round in 0..rounds {
        eprintln!("round {}/{rounds}", round + 1);
        baseline.push(child(Case::Timeouts, None, n)?);
        for (i, &s) in subjects.iter().enumerate() {
            timeout_runs[i].push(child(Case::Timeouts, Some(s), n)?);
            sleep_runs[i].push(child(Case::Sleeps, Some(s), n)?);
            both_runs[i].push(child(Case::BothWorkers, Some(s), n)?);
            handed_runs[i].push(child(Case::HandedOver, Some(s), n)?);
        }
    }
    let base_bytes = median(baseline.iter().map(|f| f.bytes).collect());
    let base_cpu = median(baseline.iter().map(|f| f.cpu_ns).collect());
    println!("{n} timers per run, {rounds} round(s), medians (spread over rounds); tokio multi-thread runtime, 2 workers");
    println!();
    println!("| timeouts that finish first | CPU per timeout, ns (net of the futures alone) | timer bytes per pending timeout | pending afterwards | RSS before → after, MiB |");
    println!("|---|---|---|---|---|");
    for (i, s) in subjects.iter().enumerate() {
        let runs = &timeout_runs[i];
        let cpu: Vec<f64> = runs.iter().map(|f| f.cpu_ns - base_cpu).collect();
        let bytes: Vec<f64> = runs.iter().map(|f| f.bytes - base_bytes).collect();
        let last = runs.last().expect("a run");
        println!(
            "| {} | {} | {} | {} | {:.1} → {:.1} |",
            s.name(),
            cell(&cpu, 0),
            cell(&bytes, 0),
            last.left_pending,
            last.rss_before_mib,
            last.rss_after_mib
        );
    }
    println!();
    for (title, all_runs) in [
        (
            "timeouts made on both workers at once, one pending per task",
            &both_runs,
        ),
        (
            "timeouts made on one worker, polled on the other, 256 pending at most",
            &handed_runs,
        ),
    ] {
        println!("| {title} | CPU per timeout, ns | timeouts per second, both tasks, millions |");
        println!("|---|---|---|");
        for (i, s) in subjects.iter().enumerate() {
            let runs = &all_runs[i];
            let cpu: Vec<f64> = runs.iter().map(|f| f.cpu_ns).collect();
            let rate: Vec<f64> = runs.iter().map(|f| f.rate_m).collect();
            println!("| {} | {} | {} |", s.name(), cell(&cpu, 0), cell(&rate, 1));
        }
        println!();
    }
    println!("| sleeps that fire, over 2 s | lateness p50, ms | p99, ms | max, ms | early | CPU per sleep, ns (task included) |");
    println!("|---|---|---|---|---|---|");
    for (i, s) in subjects.iter().enumerate() {
        let runs = &sleep_runs[i];
        let col = |f: fn(&Figures) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
        let (p50, p99, max, cpu) = (
            col(|f| f.p50_ms),
            col(|f| f.p99_ms),
            col(|f| f.max_ms),
            col(|f| f.cpu_ns),
        );
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            s.name(),
            cell(&p50, 2),
            cell(&p99, 2),
            cell(&max, 2),
            runs.iter().map(|f| f.early).sum::<u64>(),
            cell(&cpu, 0)
        );
    }
    let early: u64 = sleep_runs[0].iter().map(|f| f.early).sum();
    if early > 0 {
        return Err(format!("{early} purgatorio sleeps woke early").into());
    }
    Ok(())
}
