//! The comparison report: W1–W4 for purgatorio and every peer in one run,
//! printed as a Markdown table, saved as JSON and drawn as a chart.
//!
//! ```text
//! cargo run --release -p purgatorio-peers                 # everything (~4 minutes)
//! cargo run --release -p purgatorio-peers -- --quick      # 10k and 100k only, W3 at 1M
//! cargo run --release -p purgatorio-peers -- --svg docs/peers.svg   # redraw the README's chart
//! ```
//!
//! Writes `peers.json` and `peers.svg` in the workspace's `target/`, wherever
//! it is run from (other paths with `--json` and `--svg`; the README's chart,
//! `docs/peers.svg`, is redrawn only when asked for by name). W1 and W2 are
//! the median of three runs; W3 runs each structure in a fresh child process
//! so earlier runs' memory does not count.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use plotters::prelude::*;
use purgatorio_peers::{
    w3, w4, BTree, Churn, Expire, Heap, Kompact, Nexus, Purgatorio, Subject, Tokio,
};
use purgatorio_workloads::cli::{exit_code, figures_from_child, target_dir, ChildError};

/// W1–W4 for purgatorio and every peer: a Markdown table on standard
/// output, the figures as JSON and a chart as SVG.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// 10k and 100k pending only, one run each, W3 at 1M (instead of 10k,
    /// 100k and 1M, the median of three runs, W3 at 10M).
    #[arg(long)]
    quick: bool,
    /// Where to write the figures as JSON.
    #[arg(long, value_name = "PATH", default_value_os_t = target_dir().join("peers.json"))]
    json: PathBuf,
    /// Where to draw the chart as SVG; `--svg docs/peers.svg` redraws the
    /// README's chart.
    #[arg(long, value_name = "PATH", default_value_os_t = target_dir().join("peers.svg"))]
    svg: PathBuf,
    /// Internal: measure W3 for the structure at INDEX with N timers and
    /// print bytes per timer (how the report runs W3 in a fresh process).
    #[arg(long, hide = true, num_args = 2, value_names = ["INDEX", "N"])]
    w3_child: Option<Vec<usize>>,
}

/// One structure's figures.
struct Row {
    name: &'static str,
    eager: bool,
    /// W1 ns per schedule+cancel pair, per size in `sizes`.
    w1: Vec<f64>,
    /// W2 ns per fired timer, per size in `sizes`.
    w2: Vec<f64>,
    /// W3 bytes of RSS per pending timer.
    w3: f64,
    /// W4 wake-ups.
    w4: u64,
    /// Early firings over W2 and W4 (must be 0).
    early: u64,
    /// Firings more than a tick late in W2.
    late: u64,
}

struct Config {
    sizes: Vec<usize>,
    w3_size: usize,
    runs: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn measure<S: Subject>(index: usize, cfg: &Config) -> Result<Row, ChildError> {
    eprintln!("{} ...", S::NAME);
    let mut row = Row {
        name: S::NAME,
        eager: S::EAGER_CANCEL,
        w1: Vec::new(),
        w2: Vec::new(),
        w3: 0.0,
        w4: 0,
        early: 0,
        late: 0,
    };
    for &n in &cfg.sizes {
        let pairs = (2 * n as u64).max(1_000_000);
        let w1_runs = (0..cfg.runs)
            .map(|_| {
                let mut churn = Churn::<S>::new(n);
                let start = Instant::now();
                churn.run(pairs);
                let ns = start.elapsed().as_nanos() as f64 / pairs as f64;
                churn.finish();
                ns
            })
            .collect();
        row.w1.push(median(w1_runs));
        let w2_runs = (0..cfg.runs)
            .map(|_| {
                let expire = Expire::<S>::new(n);
                let start = Instant::now();
                let fired = expire.run();
                let ns = start.elapsed().as_nanos() as f64 / fired.fired as f64;
                row.early += fired.early;
                row.late += fired.late;
                ns
            })
            .collect();
        row.w2.push(median(w2_runs));
    }
    row.w3 = w3_in_child(index, cfg.w3_size)?;
    let sparse = w4::<S>();
    row.w4 = sparse.wakeups;
    row.early += sparse.fired.early;
    Ok(row)
}

/// Runs W3 for structure `index` in a fresh copy of this program.
fn w3_in_child(index: usize, n: usize) -> Result<f64, ChildError> {
    let [per] = figures_from_child(&["--w3-child".to_string(), index.to_string(), n.to_string()])?;
    Ok(per)
}

/// The structures in report order; `f` is called with each one's type.
macro_rules! for_each_subject {
    ($f:ident, $($arg:expr),*) => {
        [
            $f::<Purgatorio>(0, $($arg),*),
            $f::<Nexus>(1, $($arg),*),
            $f::<Kompact>(2, $($arg),*),
            $f::<Tokio>(3, $($arg),*),
            $f::<Heap>(4, $($arg),*),
            $f::<BTree>(5, $($arg),*),
        ]
    };
}

fn w3_only<S: Subject>(index: usize, want: usize, n: usize) -> Option<f64> {
    (index == want).then(|| w3::<S>(n))
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{model}, {cores} cores")
}

fn fmt_size(n: usize) -> String {
    match n {
        n if n >= 1_000_000 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

fn print_table(rows: &[Row], cfg: &Config) {
    let sizes: Vec<String> = cfg.sizes.iter().map(|&n| fmt_size(n)).collect();
    let mut head = String::from("| structure | cancel |");
    for s in &sizes {
        head += &format!(" W1 {s} ns/pair |");
    }
    for s in &sizes {
        head += &format!(" W2 {s} ns/fired |");
    }
    head += &format!(
        " W3 {} B/timer | W4 wake-ups | early | late |",
        fmt_size(cfg.w3_size)
    );
    println!("{head}");
    println!("|{}", "---|".repeat(2 + 2 * sizes.len() + 4));
    for r in rows {
        let mut line = format!(
            "| {} | {} |",
            r.name,
            if r.eager { "eager" } else { "lazy" }
        );
        for v in r.w1.iter().chain(&r.w2) {
            line += &format!(" {v:.0} |");
        }
        line += &format!(" {:.1} | {} | {} | {} |", r.w3, r.w4, r.early, r.late);
        println!("{line}");
    }
}

fn json(rows: &[Row], cfg: &Config, machine: &str) -> String {
    let list = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let sizes: Vec<String> = cfg.sizes.iter().map(|n| n.to_string()).collect();
    let rows: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "    {{\"name\": \"{}\", \"eager_cancel\": {}, \"w1_ns_per_pair\": [{}], \"w2_ns_per_fired\": [{}], \"w3_bytes_per_timer\": {:.1}, \"w4_wakeups\": {}, \"early\": {}, \"late\": {}}}",
                r.name, r.eager, list(&r.w1), list(&r.w2), r.w3, r.w4, r.early, r.late
            )
        })
        .collect();
    format!(
        "{{\n  \"machine\": \"{machine}\",\n  \"sizes\": [{}],\n  \"w3_size\": {},\n  \"rows\": [\n{}\n  ]\n}}\n",
        sizes.join(", "),
        cfg.w3_size,
        rows.join(",\n")
    )
}

/// Draws W1 and W2 cost against pending count, one line per structure.
fn chart(
    rows: &[Row],
    cfg: &Config,
    machine: &str,
    path: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1000, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(30);
    title.titled(
        &format!("purgatorio and its peers, lower is better ({machine})"),
        ("sans-serif", 16),
    )?;
    let panels = body.split_evenly((1, 2));
    let x_lo = *cfg.sizes.first().expect("sizes") as f64 / 1.5;
    let x_hi = *cfg.sizes.last().expect("sizes") as f64 * 1.5;
    for (panel, (caption, pick)) in panels.iter().zip([
        ("W1 churn: ns per schedule+cancel pair", 0usize),
        ("W2 expire: ns per fired timer", 1),
    ]) {
        let values = |r: &Row| {
            if pick == 0 {
                r.w1.clone()
            } else {
                r.w2.clone()
            }
        };
        let y_hi = rows.iter().flat_map(values).fold(1.0f64, f64::max) * 2.0;
        let y_lo = rows
            .iter()
            .flat_map(values)
            .fold(f64::MAX, f64::min)
            .max(1.0)
            / 2.0;
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(50)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("pending timers")
            .y_desc("ns")
            .x_label_formatter(&|v| fmt_size(*v as usize))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .light_line_style(TRANSPARENT)
            .draw()?;
        for (i, r) in rows.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let style = if i == 0 {
                color.stroke_width(3)
            } else {
                color.stroke_width(1)
            };
            let points: Vec<(f64, f64)> =
                cfg.sizes.iter().map(|&n| n as f64).zip(values(r)).collect();
            chart
                .draw_series(LineSeries::new(points.clone(), style))?
                .label(r.name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
            chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// Creates the directory `path` goes in, if it names one.
fn create_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir),
        _ => Ok(()),
    }
}

/// The report: measures, prints, writes the JSON and draws the chart.
fn report(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = if args.quick {
        Config {
            sizes: vec![10_000, 100_000],
            w3_size: 1_000_000,
            runs: 1,
        }
    } else {
        Config {
            sizes: vec![10_000, 100_000, 1_000_000],
            w3_size: 10_000_000,
            runs: 3,
        }
    };
    let (json_path, svg_path) = (&args.json, &args.svg);

    // Before the minutes of measuring, not after.
    let cannot =
        |path: &Path, e: &dyn std::fmt::Display| format!("cannot write {}: {e}", path.display());
    for path in [json_path, svg_path] {
        create_parent(path).map_err(|e| cannot(path, &e))?;
    }

    let machine = machine();
    let rows = for_each_subject!(measure, &cfg)
        .into_iter()
        .collect::<Result<Vec<Row>, ChildError>>()?;
    let quick = if args.quick { " -- --quick" } else { "" };
    println!("Machine: {machine}. Command: cargo run --release -p purgatorio-peers{quick}");
    println!();
    print_table(&rows, &cfg);
    for r in rows.iter().filter(|r| r.early > 0) {
        println!("\nWARNING: {} fired {} timers early", r.name, r.early);
    }
    std::fs::write(json_path, json(&rows, &cfg, &machine)).map_err(|e| cannot(json_path, &e))?;
    chart(&rows, &cfg, &machine, svg_path).map_err(|e| cannot(svg_path, &e))?;
    eprintln!("wrote {} and {}", json_path.display(), svg_path.display());
    Ok(())
}

/// The hidden `--w3-child INDEX N` mode: prints W3's bytes per timer.
fn w3_child(index: usize, n: usize) -> Result<(), String> {
    let per = for_each_subject!(w3_only, index, n)
        .into_iter()
        .flatten()
        .next()
        .ok_or_else(|| format!("no structure number {index}"))?;
    println!("{per}");
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.w3_child.as_deref() {
        Some(&[index, n]) => exit_code(w3_child(index, n)),
        _ => exit_code(report(&args)),
    }
}
