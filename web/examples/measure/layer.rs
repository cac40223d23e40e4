//! `measure layer`: the layer's own CPU per call. Tasks on both workers of a
//! 2-worker runtime call a service through no layer, `tower::timeout`, and
//! ours; the CPU per call above the no-layer run is the layer's.
//!
//! Two inner services: one that answers at its first poll (the timeout
//! never reaches a timer: ours makes no entry, tower's makes a
//! `tokio::time::Sleep` it never registers), and one that answers after
//! yielding once (the timeout registers its sleep, then cancels it: every
//! request of a handler that awaits anything).

use std::convert::Infallible;
use std::time::{Duration, Instant};

use purgatorio_web::{shared_timer, BoxError, TimeoutLayer};
use tower::{Layer, Service, ServiceExt};

/// What to run.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Tasks calling at once, spread over both workers.
    #[arg(long, default_value_t = 64)]
    tasks: usize,
    /// Calls per task per run.
    #[arg(long, default_value_t = 20_000)]
    calls: usize,
    /// Runs of each variant, in rotation; the median is reported.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Call one service per task, instead of a clone per call (what
    /// axum's routes do with their service for every request).
    #[arg(long)]
    reuse: bool,
    /// Run only this layer with only `--inner`'s service, once, and print
    /// nothing: for an instruction count (`valgrind --tool=callgrind`),
    /// taken at two `--calls` and subtracted.
    #[arg(long, value_enum, requires = "inner")]
    only: Option<Variant>,
    /// The inner service of an `--only` run.
    #[arg(long, value_enum)]
    inner: Option<Inner>,
}

/// A layer, for `--only`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Variant {
    /// No layer.
    None,
    /// `tower::timeout`.
    Tower,
    /// Ours.
    Ours,
}

/// An inner service, for `--only`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Inner {
    /// Answers at its first poll.
    AtOnce,
    /// Answers after one yield (the timeout registers).
    Yield,
}

/// The timeout each layer gives (never reached).
const TIMEOUT: Duration = Duration::from_secs(30);

/// The three ways to call.
const VARIANTS: [&str; 3] = ["no layer", "tower::timeout", "purgatorio-web"];

/// The process's CPU time in seconds, to the nanosecond: the sum of its
/// threads' (`/proc/self/task/*/schedstat`; the runtime's and the timer's
/// threads live through a whole run).
fn cpu_seconds() -> f64 {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    let ns: u64 = tasks
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
            stat.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum();
    ns as f64 / 1e9
}

/// CPU seconds and wall seconds of `tasks` × `calls` calls of `service`.
async fn drive<S>(service: S, args: &Args) -> (f64, f64)
where
    S: Service<u64, Response = u64> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
{
    let (cpu, wall) = (cpu_seconds(), Instant::now());
    let tasks: Vec<_> = (0..args.tasks)
        .map(|_| {
            let mut service = service.clone();
            let (calls, reuse) = (args.calls as u64, args.reuse);
            tokio::spawn(async move {
                let mut sum = 0;
                for i in 0..calls {
                    let answer = if reuse {
                        service.ready().await.map_err(Into::into).expect("ready");
                        service.call(i).await
                    } else {
                        service.clone().oneshot(i).await
                    };
                    sum += answer.map_err(Into::into).expect("answer");
                }
                sum
            })
        })
        .collect();
    for task in tasks {
        std::hint::black_box(task.await.expect("a task"));
    }
    (cpu_seconds() - cpu, wall.elapsed().as_secs_f64())
}

/// `inner` through each variant, `rounds` times in rotation: nanoseconds of
/// CPU per call, per variant (the median round).
async fn measure<S>(inner: S, args: &Args) -> [f64; 3]
where
    S: Service<u64, Response = u64, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    let calls = (args.tasks * args.calls) as f64;
    let mut runs: [Vec<f64>; 3] = Default::default();
    for _ in 0..args.rounds {
        let tower = tower::timeout::TimeoutLayer::new(TIMEOUT).layer(inner.clone());
        let ours = TimeoutLayer::new(TIMEOUT).layer(inner.clone());
        runs[0].push(drive(inner.clone(), args).await.0);
        runs[1].push(drive(tower, args).await.0);
        runs[2].push(drive(ours, args).await.0);
    }
    runs.map(|mut cpu| {
        cpu.sort_by(f64::total_cmp);
        cpu[cpu.len() / 2] / calls * 1e9
    })
}

/// Prints one inner service's table rows.
fn report(shape: &str, ns: [f64; 3]) {
    for (variant, ns_per_call) in VARIANTS.iter().zip(ns) {
        let above = ns_per_call - ns[0];
        println!("| {shape} | {variant} | {ns_per_call:.0} | {above:.0} |");
    }
    let (tower, ours) = (ns[1] - ns[0], ns[2] - ns[0]);
    println!(
        "| {shape} | ours / tower's layer cost | | {:.2} |",
        ours / tower
    );
}

/// `inner` through `variant` only, once.
async fn only<S>(variant: Variant, inner: S, args: &Args)
where
    S: Service<u64, Response = u64, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    match variant {
        Variant::None => drive(inner, args).await,
        Variant::Tower => {
            drive(
                tower::timeout::TimeoutLayer::new(TIMEOUT).layer(inner),
                args,
            )
            .await
        }
        Variant::Ours => drive(TimeoutLayer::new(TIMEOUT).layer(inner), args).await,
    };
}

pub fn run(args: &Args) -> Result<(), BoxError> {
    let runtime = crate::client::two_workers()?;
    runtime.block_on(async {
        // The shared timer's thread starts before the first round.
        let _ = shared_timer();
        let at_once = tower::service_fn(|x: u64| async move { Ok::<_, Infallible>(x) });
        let after_a_yield = tower::service_fn(|x: u64| async move {
            tokio::task::yield_now().await;
            Ok::<_, Infallible>(x)
        });
        if let (Some(variant), Some(inner)) = (args.only, args.inner) {
            match inner {
                Inner::AtOnce => only(variant, at_once, args).await,
                Inner::Yield => only(variant, after_a_yield, args).await,
            }
            return;
        }
        let how = if args.reuse { "one service per task" } else { "a clone per call, as axum" };
        println!(
            "{} tasks x {} calls ({how}) on 2 workers, median of {} rounds; ns of process CPU per call",
            args.tasks, args.calls, args.rounds
        );
        println!("| inner service | layer | CPU/call ns | above no layer ns |");
        println!("|---|---|---|---|");
        report("answers at once", measure(at_once, args).await);
        report("answers after a yield", measure(after_a_yield, args).await);
    });
    Ok(())
}
