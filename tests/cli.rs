//! Every example behaves as a command-line program: `--help` prints the
//! usage and exits 0 without starting its run, an unknown argument or value
//! exits 2 with the usage, and the load tool reports the machine's load
//! beside its verdict.
//!
//! `cargo test` builds the examples next to this test's own binary, in
//! `target/debug/examples/`, and they run here as programs, each bounded in
//! time so that one that starts its long run instead fails quickly
//! (`cargo test --test cli` alone does not build them: `cargo build
//! --examples` first).
//! `long_poll` is built as a test only (its socket tests) and checks its own
//! parser; the peers report is checked in `peers/tests/cli.rs`.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use purgatorio_testkit::output_within;

/// Far more than a program that exits at once needs on a loaded machine;
/// less than any example's default run in a debug build.
const LIMIT: Duration = Duration::from_secs(30);

/// Each example, and text that only its run prints (on either stream): if
/// it shows, the example ran when it should only have answered.
const EXAMPLES: [(&str, &str); 6] = [
    ("async_timers", "round 1/"),
    ("purgatory_load", "verdict:"),
    ("realtime", "scheduled in"),
    ("session_timeouts", "still connected"),
    ("simulation", "virtual time in"),
    ("workloads", "wake-ups for"),
];

/// The example `name`'s binary, built beside this test's.
fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("this test's own path");
    // target/debug/deps/cli-<hash> → target/debug/examples/<name>
    let debug = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/debug");
    let path = debug
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    // `cargo test` builds the examples; `cargo test --test cli` alone does
    // not, and would run what an earlier build left.
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/{name}.rs"));
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    assert!(
        modified(&path) >= modified(&source),
        "{} is missing or older than its source: run `cargo test` or `cargo build --examples`",
        path.display()
    );
    path
}

/// Runs the example `name` with `args`; its exit status and both streams.
fn run(name: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = output_within(std::process::Command::new(binary(name)).args(args), LIMIT);
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    (status.code(), text(stdout), text(stderr))
}

#[test]
fn help_exits_0_with_the_usage_and_runs_nothing() {
    for (name, ran) in EXAMPLES {
        for help in ["--help", "-h"] {
            let (code, stdout, stderr) = run(name, &[help]);
            assert_eq!(code, Some(0), "{name} {help}: {stdout}{stderr}");
            assert!(
                stdout.contains(&format!("Usage: {name}")),
                "{name} {help}: {stdout}"
            );
            assert!(stderr.is_empty(), "{name} {help}: {stderr}");
            assert!(!stdout.contains(ran), "{name} {help} ran: {stdout}");
        }
    }
}

#[test]
fn an_unknown_argument_exits_2_with_the_usage_and_runs_nothing() {
    for (name, ran) in EXAMPLES {
        let (code, stdout, stderr) = run(name, &["--bogus"]);
        assert_eq!(code, Some(2), "{name} --bogus: {stdout}{stderr}");
        assert!(stderr.contains("'--bogus'"), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("Usage: {name}")),
            "{name}: {stderr}"
        );
        assert!(
            !stdout.contains(ran) && !stderr.contains(ran),
            "{name} --bogus ran: {stdout}{stderr}"
        );
    }
}

#[test]
fn a_bad_value_exits_2_before_running() {
    let cases: [(&str, &[&str], &str); 5] = [
        (
            "workloads",
            &["w1", "w9"],
            "possible values: w1, w1-clock, w1-timer, w1-timer-id",
        ),
        ("realtime", &["0"], "invalid value '0'"),
        ("realtime", &["many"], "invalid value 'many'"),
        (
            "purgatory_load",
            &["--rate", "0"],
            "--rate must be a positive",
        ),
        (
            "purgatory_load",
            &["--pct50", "50", "--pct75", "20"],
            "--pct75",
        ),
    ];
    for (name, args, says) in cases {
        let (code, stdout, stderr) = run(name, args);
        assert_eq!(code, Some(2), "{name} {args:?}: {stdout}{stderr}");
        assert!(stderr.contains(says), "{name} {args:?}: {stderr}");
        assert!(stdout.is_empty(), "{name} {args:?} ran: {stdout}");
    }
}

#[test]
fn the_load_tool_prints_the_load_beside_its_verdict() {
    // A short run: 2,000 requests at 20,000/s, a 20 ms timeout.
    let short = ["--num", "2000", "--rate", "20000", "--timeout", "20"];
    let (code, stdout, stderr) = run("purgatory_load", &short);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let verdict = lines.iter().position(|l| l.starts_with("verdict: "));
    let verdict = verdict.unwrap_or_else(|| panic!("no verdict in {stdout}"));
    let machine = lines.get(verdict + 1).copied().unwrap_or_default();
    assert!(
        machine.starts_with("machine: load average ")
            && machine.contains(" cores during the run: "),
        "{stdout}"
    );
    assert!(
        machine.ends_with(": quiet") || machine.contains(": busy, so falling behind"),
        "{machine}"
    );

    let (code, stdout, stderr) = run("purgatory_load", &[&short[..], &["--json"]].concat());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    for field in [
        "\"load_average\":[",
        "\"other_processes_cores\":",
        "\"busy\":",
    ] {
        assert!(stdout.contains(field), "no {field} in {stdout}");
    }
}
