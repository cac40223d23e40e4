//! The checks: the doc's table of allowed imports, cycles inside a folder,
//! arrows the table does not allow.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::crate_map::{Crate, Edge};
use crate::ModPath;

/// What a top-level module may import, from the doc's table.
#[derive(Debug)]
pub(crate) enum Allowed {
    /// `everything` / `anything`.
    Any,
    /// The named top-level modules.
    Only(BTreeSet<String>),
}

/// The first table of `docs/architecture.md`: top-level module (`""` for
/// `lib.rs`) to what it may import, in the table's order.
#[derive(Debug)]
pub(crate) struct Rules(pub(crate) Vec<(String, Allowed)>);

impl Rules {
    /// Reads the rows of the table whose header has a `may import` column.
    pub(crate) fn parse(doc: &str) -> Rules {
        let mut rows = Vec::new();
        let mut in_table = false;
        for line in doc.lines() {
            let line = line.trim();
            if !in_table {
                in_table = line.starts_with('|') && line.contains("may import");
                continue;
            }
            if !line.starts_with('|') {
                break;
            }
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let Some(name) = backticked(cells[0]).into_iter().next() else {
                continue; // the |---| line
            };
            let last = cells.last().expect("a row has cells");
            let allowed = if last.contains("everything") || last.contains("anything") {
                Allowed::Any
            } else {
                Allowed::Only(backticked(last).into_iter().map(top_name).collect())
            };
            rows.push((top_name(name), allowed));
        }
        assert!(
            !rows.is_empty(),
            "docs/architecture.md has no table with a `may import` column"
        );
        Rules(rows)
    }

    /// What `module` may import, if it has a row.
    pub(crate) fn get(&self, module: &str) -> Option<&Allowed> {
        self.0.iter().find(|(m, _)| m == module).map(|(_, a)| a)
    }

    /// The doc's own claim, "dependencies point down this page": every
    /// module a row names lies in a row below it. One line per name that
    /// does not.
    pub(crate) fn upward(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (row, (module, allowed)) in self.0.iter().enumerate() {
            let Allowed::Only(names) = allowed else {
                continue;
            };
            for name in names {
                let below = self.0[row + 1..].iter().any(|(m, _)| m == name);
                if !below {
                    out.push(format!(
                        "docs/architecture.md: `{module}` may import `{name}`, which is not a row below it"
                    ));
                }
            }
        }
        out
    }
}

/// The backticked words of a table cell.
pub(crate) fn backticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// `timer/` and `keyed.rs` to `timer` and `keyed`; `lib.rs` to `""`.
pub(crate) fn top_name(name: String) -> String {
    if name == "lib.rs" {
        return String::new();
    }
    name.trim_end_matches('/')
        .trim_end_matches(".rs")
        .to_string()
}

/// A cycle found in one folder, ready to print.
#[derive(Debug)]
pub(crate) struct Cycle {
    /// The folder (`src/timer/`).
    pub(crate) folder: String,
    /// One line per arrow: `a.rs -> b.rs (a.rs:12: crate::x::Y)`.
    pub(crate) steps: Vec<String>,
}

/// Import cycles among the files of each folder (a sub-folder counts as one
/// node, its files' imports merged), one shortest cycle per strongly
/// connected group.
pub(crate) fn find_cycles(crate_: &Crate, edges: &[Edge]) -> Vec<Cycle> {
    let folders: BTreeSet<ModPath> = crate_
        .files
        .iter()
        .filter(|(m, f)| m.is_empty() || f.shown.ends_with("mod.rs"))
        .map(|(m, _)| m.clone())
        .collect();
    let mut cycles = Vec::new();
    for folder in folders {
        // The node of `module` in `folder`: the folder's child on the way to
        // it (the root's own file, lib.rs, is left out: re-exports only).
        let node = |module: &ModPath| -> Option<ModPath> {
            if !module.starts_with(&folder) || module.len() == folder.len() && folder.is_empty() {
                return None;
            }
            Some(module[..(folder.len() + 1).min(module.len())].to_vec())
        };
        let mut graph: BTreeMap<ModPath, BTreeMap<ModPath, &Edge>> = BTreeMap::new();
        for edge in edges {
            if let (Some(a), Some(b)) = (node(&edge.from), node(&edge.to)) {
                if a != b {
                    graph.entry(a).or_default().entry(b).or_insert(edge);
                }
            }
        }
        let shown_folder = if folder.is_empty() {
            "src/".to_string()
        } else {
            format!("src/{}/", folder.join("/"))
        };
        let mut seen: BTreeSet<ModPath> = BTreeSet::new();
        for start in graph.keys() {
            if seen.contains(start) {
                continue;
            }
            let Some(path) = shortest_cycle(&graph, start) else {
                continue;
            };
            seen.extend(path.iter().cloned());
            let name = |m: &ModPath| {
                crate_
                    .files
                    .get(m)
                    .map_or_else(|| format!("src/{}/", m.join("/")), |f| f.shown.clone())
            };
            let steps = path
                .iter()
                .zip(path.iter().skip(1).chain([&path[0]]))
                .map(|(a, b)| {
                    let edge = graph[a][b];
                    format!(
                        "{} -> {}   ({}:{}: {})",
                        name(a),
                        name(b),
                        crate_.shown(&edge.from),
                        edge.line,
                        edge.text
                    )
                })
                .collect();
            cycles.push(Cycle {
                folder: shown_folder.clone(),
                steps,
            });
        }
    }
    cycles
}

/// The shortest cycle through `start` (breadth-first), as its nodes.
pub(crate) fn shortest_cycle(
    graph: &BTreeMap<ModPath, BTreeMap<ModPath, &Edge>>,
    start: &ModPath,
) -> Option<Vec<ModPath>> {
    let mut parent: BTreeMap<&ModPath, &ModPath> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(at) = queue.pop_front() {
        for next in graph.get(at).into_iter().flat_map(BTreeMap::keys) {
            if next == start {
                let mut path = vec![at.clone()];
                let mut back = at;
                while back != start {
                    back = parent[back];
                    path.push(back.clone());
                }
                path.reverse();
                return Some(path);
            }
            if !parent.contains_key(next) && next != start {
                parent.insert(next, at);
                queue.push_back(next);
            }
        }
    }
    None
}

/// Imports between top-level modules that the doc's table does not allow,
/// one line each (every line of every forbidden arrow).
pub(crate) fn forbidden_arrows(crate_: &Crate, edges: &[Edge], rules: &Rules) -> Vec<String> {
    let top = |m: &ModPath| m.first().cloned().unwrap_or_default();
    let mut out = rules.upward();
    let mut missing = BTreeSet::new();
    for module in crate_.files.keys() {
        if rules.get(&top(module)).is_none() {
            missing.insert(top(module));
        }
    }
    for name in missing {
        out.push(format!(
            "module `{name}` has no row in docs/architecture.md's table"
        ));
    }
    for edge in edges {
        let (from, to) = (top(&edge.from), top(&edge.to));
        if from == to {
            continue;
        }
        let allowed = match rules.get(&from) {
            Some(Allowed::Any) => true,
            Some(Allowed::Only(names)) => names.contains(&to),
            None => continue, // reported above
        };
        if !allowed {
            let to_name = if to.is_empty() { "lib.rs".into() } else { to };
            out.push(format!(
                "arrow {from} -> {to_name} is not in the doc's table: {}:{}: {}",
                crate_.shown(&edge.from),
                edge.line,
                edge.text
            ));
        }
    }
    out
}

/// The shortest cycle through a node is found, and none where there is none.
#[test]
fn shortest_cycle_finds_the_loop_and_nothing_else() {
    let path = |s: &str| -> ModPath { s.split('/').map(str::to_string).collect() };
    let edge = |a: &str, b: &str| Edge {
        from: path(a),
        to: path(b),
        line: 1,
        text: format!("{a} -> {b}"),
    };
    let edges = [
        edge("t/service", "t/driver"),
        edge("t/driver", "t/handle"),
        edge("t/handle", "t/service"),
        edge("t/handle", "t/task"),
        edge("t/service", "t/handle"),
    ];
    let mut graph: BTreeMap<ModPath, BTreeMap<ModPath, &Edge>> = BTreeMap::new();
    for e in &edges {
        graph
            .entry(e.from.clone())
            .or_default()
            .insert(e.to.clone(), e);
    }
    let cycle = shortest_cycle(&graph, &path("t/service")).expect("a cycle");
    assert_eq!(cycle, [path("t/service"), path("t/handle")]);
    assert_eq!(shortest_cycle(&graph, &path("t/task")), None);
}

/// The table's last column is read per row, and a name that is not a row
/// below is reported.
#[test]
fn rules_read_the_table_and_check_its_order() {
    let doc = "intro\n\n| module | owns | may import |\n|---|---|---|\n| `lib.rs` | docs | everything |\n| `timer/` | the timer | `wheel`, `tick` (limits) |\n| `wheel/` | the core | `timer` |\n| `tick.rs` | ticks | nothing |\n\n| path | holds |\n| `web/` | x |\n";
    let rules = Rules::parse(doc);
    assert!(matches!(rules.get(""), Some(Allowed::Any)));
    assert!(matches!(rules.get("tick"), Some(Allowed::Only(n)) if n.is_empty()));
    assert!(matches!(rules.get("timer"), Some(Allowed::Only(n)) if n.len() == 2));
    assert!(rules.get("web").is_none());
    assert_eq!(
        rules.upward(),
        ["docs/architecture.md: `wheel` may import `timer`, which is not a row below it"]
    );
}
