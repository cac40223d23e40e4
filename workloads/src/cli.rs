//! What the examples and the peers report share as command-line programs:
//! where their outputs go, how a measurement runs in a fresh copy of the
//! program, and how an error ends the program.
//!
//! Each program parses its own arguments with `clap` (so `--help` exits 0,
//! and an unknown argument exits 2 with the usage); an error found later,
//! such as a file that cannot be written, is printed as one line and exits 1
//! through [`exit_code`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The workspace's `target/` directory, wherever the program is run from:
/// `CARGO_TARGET_DIR` as it was when this crate was built (relative to the
/// workspace root, as `cargo` run from there reads it), else `target/` in the
/// workspace root. Cargo rebuilds this crate when `CARGO_TARGET_DIR` changes.
///
/// # Examples
///
/// ```
/// let dir = purgatorio_workloads::cli::target_dir();
/// assert!(dir.is_absolute());
/// ```
pub fn target_dir() -> PathBuf {
    // This crate's manifest sits one level below the workspace root.
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new(env!("CARGO_MANIFEST_DIR")));
    workspace.join(option_env!("CARGO_TARGET_DIR").unwrap_or("target"))
}

/// A copy of the program, started by [`figures_from_child`], that failed.
#[derive(Debug)]
pub enum ChildError {
    /// The program could not find its own executable or start it.
    Start(std::io::Error),
    /// The child exited unsuccessfully; its standard error is kept.
    Failed {
        /// How it exited.
        status: std::process::ExitStatus,
        /// What it printed on standard error.
        stderr: String,
    },
    /// The child printed something other than the numbers expected.
    Output(String),
}

impl fmt::Display for ChildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChildError::Start(e) => write!(f, "cannot start a copy of this program: {e}"),
            ChildError::Failed { status, stderr } => {
                write!(
                    f,
                    "a copy of this program failed ({status}): {}",
                    stderr.trim()
                )
            }
            ChildError::Output(out) => {
                write!(
                    f,
                    "a copy of this program printed {out:?}, not the numbers expected"
                )
            }
        }
    }
}

impl std::error::Error for ChildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ChildError::Start(e) => Some(e),
            _ => None,
        }
    }
}

/// Runs this program again with `args` and reads the `N` numbers it prints
/// on standard output, separated by white space.
///
/// A measurement of memory or CPU runs this way so that what earlier
/// measurements allocated, or the threads they left, do not count.
///
/// # Errors
///
/// [`ChildError`] if the copy cannot be started, exits unsuccessfully, or
/// prints anything but `N` numbers.
pub fn figures_from_child<const N: usize, S: AsRef<std::ffi::OsStr>>(
    args: &[S],
) -> Result<[f64; N], ChildError> {
    let exe = std::env::current_exe().map_err(ChildError::Start)?;
    let out = Command::new(exe)
        .args(args)
        .output()
        .map_err(ChildError::Start)?;
    if !out.status.success() {
        return Err(ChildError::Failed {
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let numbers: Option<Vec<f64>> = text.split_whitespace().map(|v| v.parse().ok()).collect();
    numbers
        .and_then(|numbers| numbers.try_into().ok())
        .ok_or_else(|| ChildError::Output(text.into_owned()))
}

/// The exit code of a program's `main` for `result`: success, or the error
/// printed as `error: …` on standard error and exit status 1.
///
/// # Examples
///
/// ```no_run
/// use std::process::ExitCode;
///
/// fn run() -> Result<(), std::io::Error> {
///     std::fs::write(purgatorio_workloads::cli::target_dir().join("out.txt"), "figures")
/// }
///
/// fn main() -> ExitCode {
///     purgatorio_workloads::cli::exit_code(run())
/// }
/// ```
pub fn exit_code<E: fmt::Display>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_dir_is_the_workspace_target() {
        let dir = target_dir();
        assert!(dir.is_absolute(), "{dir:?}");
        // The workspace root holds the manifest with the [workspace] table.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        assert!(manifest.contains("[workspace]"), "{root:?} is not the root");
        if option_env!("CARGO_TARGET_DIR").is_none() {
            assert_eq!(dir, root.join("target"));
        }
    }

    #[test]
    fn a_child_that_fails_is_an_error() {
        // This test binary run with an unknown flag exits unsuccessfully.
        let err = figures_from_child::<1, _>(&["--no-such-flag"]).unwrap_err();
        assert!(matches!(err, ChildError::Failed { .. }), "{err}");
    }

    #[test]
    fn a_child_that_prints_words_is_an_error() {
        // The test harness lists its tests: words, not numbers.
        let err = figures_from_child::<1, _>(&["--list"]).unwrap_err();
        assert!(matches!(err, ChildError::Output(_)), "{err}");
    }
}
