//! The peers report behaves as a command-line program: `--help` prints the
//! usage and exits 0 without measuring anything, an unknown argument exits 2
//! with the usage, its outputs default to the workspace's `target/` (never to
//! the tracked `docs/peers.svg`) wherever it is run from, and an output it
//! cannot write is a one-line error and exit status 1, found before the
//! minutes of measuring.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use purgatorio_testkit::{output_within, TempDir};
use purgatorio_workloads::cli::target_dir;

/// Far more than a program that exits at once needs on a loaded machine, far
/// less than the shortest report (the quick one takes minutes in a debug
/// build).
const LIMIT: Duration = Duration::from_secs(30);

/// Runs the report with `args` from the directory `cwd`.
fn peers(cwd: &Path, args: &[&str]) -> Output {
    output_within(
        Command::new(env!("CARGO_BIN_EXE_purgatorio-peers"))
            .args(args)
            .current_dir(cwd),
        LIMIT,
    )
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_exits_0_and_names_the_default_outputs_under_target() {
    let elsewhere = TempDir::new("peers-cli");
    let out = peers(elsewhere.path(), &["--help"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("Usage: purgatorio-peers"), "{stdout}");
    // Measuring prints each structure's name on standard error.
    assert!(stderr.is_empty(), "--help started measuring: {stderr}");
    for file in ["peers.json", "peers.svg"] {
        let default = format!("[default: {}]", target_dir().join(file).display());
        assert!(stdout.contains(&default), "no {default} in {stdout}");
    }
    // Nothing was written where it ran.
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}

#[test]
fn an_unknown_argument_exits_2_with_the_usage() {
    let out = peers(Path::new("."), &["--bogus"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("'--bogus'"), "{stderr}");
    assert!(stderr.contains("Usage: purgatorio-peers"), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
}

#[test]
fn an_output_it_cannot_write_is_an_error_before_measuring() {
    let dir = TempDir::new("peers-cli");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    // A directory cannot be made below a file.
    let json = file.join("peers.json");
    let out = peers(dir.path(), &["--quick", "--json", json.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let error = format!("error: cannot write {}: ", json.display());
    assert!(stderr.starts_with(&error), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
}
