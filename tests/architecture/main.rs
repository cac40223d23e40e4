//! Keeps `docs/architecture.md` true: no import cycle inside a folder of
//! `src/`, and no arrow between top-level modules that the doc's table does
//! not allow.
//!
//! The test reads every `.rs` file the crate compiles outside `cfg(test)`
//! (a file whose `mod` line is test-only, such as `loom/`, is skipped, and so
//! is every item under `#[cfg(test)]` or `#[cfg(all(test, ..))]`), collects
//! each crate-internal path (`use crate::..`, `use super::..`, multi-line
//! `use crate::{a, b::{c, d}}` groups, `crate::x::y` in code, a child module's
//! name), and resolves it through re-exports to the file that defines the
//! item. Each edge keeps the line that made it, so a failure names the
//! import to change.
//!
//! Two checks:
//!
//! * **Cycles.** In each folder (and in `src/` itself, with every folder
//!   counted as one module) the files' imports must form no cycle; a cycle
//!   is printed file by file, with the line behind each arrow.
//! * **Arrows.** The first table of `docs/architecture.md` says, per
//!   top-level module, which others it may import (`everything`/`anything`
//!   or backticked names); an import outside that list fails, and so does a
//!   module with no row.
//!
//! `PURGATORIO_ARCH_EDGES=1 cargo test --test architecture -- --nocapture`
//! prints every edge found.
//!
//! Std only: a small lexer (comments and literals blanked, lines kept), no
//! parser crate. The files: `lexer` (blanking, test-only items removed,
//! tokens), `paths` (`use` trees expanded, crate-internal paths, `mod`
//! lines), `crate_map` (the module tree, a path resolved to the file that
//! defines its item), `checks` (the doc's table, cycles, arrows).

mod checks;
mod crate_map;
mod lexer;
mod paths;

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use checks::{find_cycles, forbidden_arrows, Rules};
use crate_map::Crate;

/// A module's path from the crate root (`["timer", "service"]`; empty for
/// the root).
type ModPath = Vec<String>;

#[test]
fn no_import_cycle_in_a_folder_and_no_arrow_the_doc_forbids() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crate_ = Crate::load(&root.join("src"));
    let edges = crate_.edges();
    let doc = fs::read_to_string(root.join("docs/architecture.md"))
        .expect("docs/architecture.md is readable");
    let rules = Rules::parse(&doc);

    let mut report = String::new();
    let cycles = find_cycles(&crate_, &edges);
    for cycle in &cycles {
        writeln!(report, "import cycle in {}:", cycle.folder).unwrap();
        for step in &cycle.steps {
            writeln!(report, "  {step}").unwrap();
        }
    }
    let arrows = forbidden_arrows(&crate_, &edges, &rules);
    for arrow in &arrows {
        writeln!(report, "{arrow}").unwrap();
    }
    println!(
        "{} files, {} crate-internal imports between files",
        crate_.files.len(),
        edges.len()
    );
    if std::env::var_os("PURGATORIO_ARCH_EDGES").is_some() {
        for edge in &edges {
            println!(
                "{} -> {}   ({}:{}: {})",
                crate_.shown(&edge.from),
                crate_.shown(&edge.to),
                crate_.shown(&edge.from),
                edge.line,
                edge.text
            );
        }
    }
    assert!(
        report.is_empty(),
        "{} import cycle(s) and {} arrow(s) docs/architecture.md forbids:\n{report}",
        cycles.len(),
        arrows.len()
    );
}
