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
//! parser crate.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// A module's path from the crate root (`["timer", "service"]`; empty for
/// the root).
type ModPath = Vec<String>;

/// The most re-exports one path is followed through before the resolver
/// gives up (a guard against a re-export loop, which rustc would refuse).
const MAX_HOPS: usize = 16;

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

/// The lexer's first pass: comments and string and char literals become
/// spaces (newlines stay, so positions keep their line numbers).
#[test]
fn blanking_keeps_lines_and_hides_paths_in_comments_and_strings() {
    let src = "use a; // crate::x\n/* crate::y /* nested */ */ let s = \"crate::z\\\"\";\nlet c = '\"'; fn f<'a>() {}\nlet r = r#\"crate::w\"#;";
    let blanked = blank_comments_and_literals(src);
    assert_eq!(blanked.lines().count(), src.lines().count());
    assert!(!blanked.contains("crate::"), "{blanked}");
    assert!(blanked.contains("fn f<'a>() {}"), "{blanked}");
}

/// Test-only items go; everything else stays.
#[test]
fn test_only_items_are_removed() {
    let src = "use crate::a::A;\n#[cfg(test)]\nmod tests {\n    use crate::b::B;\n}\n#[cfg(all(test, not(loom)))]\nuse crate::c::C;\nstruct S {\n    #[cfg(test)]\n    check: Vec<u8>,\n    kept: crate::d::D,\n}\n#[cfg(not(test))]\nuse crate::e::E;\n";
    let code = remove_test_only(&blank_comments_and_literals(src));
    for gone in ["crate::b", "crate::c", "check"] {
        assert!(!code.contains(gone), "{gone} should be gone:\n{code}");
    }
    for kept in ["crate::a", "crate::d", "crate::e"] {
        assert!(code.contains(kept), "{kept} should stay:\n{code}");
    }
    assert_eq!(code.lines().count(), src.lines().count());
}

/// A nested `use` group expands to one path per leaf.
#[test]
fn use_groups_expand_to_every_leaf() {
    let code = "use crate::{a,\n    b::{c, d::E as F}, self as g};";
    let stmt = parse_uses(code).pop().expect("one use statement");
    let leaves: Vec<String> = stmt
        .leaves
        .iter()
        .map(|leaf| format!("{}={}@{}", leaf.path.join("::"), leaf.name, leaf.line))
        .collect();
    assert_eq!(
        leaves,
        [
            "crate::a=a@1",
            "crate::b::c=c@2",
            "crate::b::d::E=F@2",
            "crate=g@2"
        ]
    );
}

/// One module of the crate: a file's, or an inline `mod x { .. }` in it.
#[derive(Debug, Default)]
struct Module {
    /// The file the module's code is in (an inline module's is its file's).
    file: ModPath,
    /// Child modules by name.
    children: BTreeSet<String>,
    /// Names brought in by `use` (re-exports included), each with its path
    /// made absolute.
    imports: BTreeMap<String, ModPath>,
}

/// A source file, with its code blanked and stripped of test-only items.
#[derive(Debug)]
struct SourceFile {
    /// The file's module.
    module: ModPath,
    /// The file's path, relative to the package (`src/timer/service.rs`).
    shown: String,
    /// The code: comments and literals blanked, test-only items removed.
    code: String,
    /// Inline modules: their byte range in `code` and their path.
    inline: Vec<(usize, usize, ModPath)>,
}

/// The crate as the compiler sees it outside tests.
#[derive(Debug, Default)]
struct Crate {
    /// Every compiled file, by its module.
    files: BTreeMap<ModPath, SourceFile>,
    /// Every module (files' and inline ones).
    modules: BTreeMap<ModPath, Module>,
}

/// An import of one file by another, with where it was written.
#[derive(Debug, Clone)]
struct Edge {
    /// The importing file's module.
    from: ModPath,
    /// The file that defines what is imported.
    to: ModPath,
    /// 1-based line of the path in the importing file.
    line: usize,
    /// The path as written (`crate::timer::handle::TimerHandle`).
    text: String,
}

impl Crate {
    /// Reads `src/` starting at `lib.rs`, following the `mod` lines that
    /// survive the removal of test-only items.
    fn load(src: &Path) -> Crate {
        let mut crate_ = Crate::default();
        let mut queue = VecDeque::from([(ModPath::new(), src.join("lib.rs"))]);
        while let Some((module, path)) = queue.pop_front() {
            let text = fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let code = remove_test_only(&blank_comments_and_literals(&text));
            let shown = format!("src/{}", path.strip_prefix(src).unwrap_or(&path).display());
            let inline = inline_modules(&code, &module);
            crate_
                .modules
                .entry(module.clone())
                .or_default()
                .file
                .clone_from(&module);
            for (_, _, inner) in &inline {
                crate_.modules.entry(inner.clone()).or_default().file = module.clone();
                let (name, parent) = inner.split_last().expect("an inline module has a name");
                crate_
                    .modules
                    .entry(parent.to_vec())
                    .or_default()
                    .children
                    .insert(name.clone());
            }
            for name in file_modules(&code) {
                let dir = module_dir(src, &module, &path);
                let file = [
                    dir.join(format!("{name}.rs")),
                    dir.join(&name).join("mod.rs"),
                ]
                .into_iter()
                .find(|p| p.exists())
                .unwrap_or_else(|| panic!("{shown}: no file for `mod {name};`"));
                let mut child = module.clone();
                child.push(name.clone());
                crate_
                    .modules
                    .entry(module.clone())
                    .or_default()
                    .children
                    .insert(name);
                queue.push_back((child, file));
            }
            crate_.files.insert(
                module.clone(),
                SourceFile {
                    module,
                    shown,
                    code,
                    inline,
                },
            );
        }
        crate_.collect_imports();
        crate_
    }

    /// Fills each module's table of `use`d names.
    fn collect_imports(&mut self) {
        // Twice: a `use` may start with a name another `use` brought in.
        for _ in 0..2 {
            self.collect_imports_once();
        }
    }

    /// One pass of [`Crate::collect_imports`].
    fn collect_imports_once(&mut self) {
        let mut tables = Vec::new();
        for file in self.files.values() {
            for stmt in parse_uses(&file.code) {
                let module = file.module_at(stmt.offset);
                for leaf in stmt.leaves {
                    if leaf.name == "*" {
                        continue;
                    }
                    if let Some(path) = self.absolute(&module, &leaf.path) {
                        tables.push((module.clone(), leaf.name, path));
                    }
                }
            }
        }
        for (module, name, path) in tables {
            self.modules
                .entry(module)
                .or_default()
                .imports
                .insert(name, path);
        }
    }

    /// Makes a path written in `module` absolute, or `None` if it leaves the
    /// crate (`std::..`, another crate's name).
    fn absolute(&self, module: &ModPath, path: &[String]) -> Option<ModPath> {
        let (first, rest) = path.split_first()?;
        let mut base = match first.as_str() {
            "crate" => ModPath::new(),
            "self" => module.clone(),
            "super" => module.split_last().map(|(_, up)| up.to_vec())?,
            name if self.modules.get(module)?.children.contains(name) => {
                let mut child = module.clone();
                child.push(name.to_string());
                child
            }
            name => {
                // A name a `use` of this module brought in (`use crate::timer;
                // timer::Timer`), unless it is the path's only segment.
                if rest.is_empty() {
                    return None;
                }
                self.modules.get(module)?.imports.get(name)?.clone()
            }
        };
        let mut rest = rest;
        while let Some(("super", tail)) = rest.split_first().map(|(s, t)| (s.as_str(), t)) {
            base.pop()?;
            rest = tail;
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The file that defines the item an absolute path names, following
    /// modules and then re-exports.
    fn defining_file(&self, path: &[String]) -> ModPath {
        let mut path = path.to_vec();
        for _ in 0..MAX_HOPS {
            let mut module = ModPath::new();
            let mut redirected = None;
            for (i, segment) in path.iter().enumerate() {
                let here = &self.modules[&module];
                if here.children.contains(segment) {
                    module.push(segment.clone());
                } else if let Some(target) = here.imports.get(segment) {
                    let mut next = target.clone();
                    next.extend(path[i + 1..].iter().cloned());
                    redirected = Some(next);
                    break;
                } else {
                    break;
                }
            }
            match redirected {
                Some(next) if next != path => path = next,
                _ => return self.modules[&module].file.clone(),
            }
        }
        panic!("re-exports of `{}` do not end", path.join("::"))
    }

    /// Every import of one file by another, with its line. A folder's
    /// `mod.rs` (or `lib.rs`) re-exporting what its own files define is its
    /// table of contents, not an import, and makes no edge.
    fn edges(&self) -> Vec<Edge> {
        let mut edges = Vec::new();
        for (from, file) in &self.files {
            let table_of_contents = from.is_empty() || file.shown.ends_with("mod.rs");
            for (offset, path, reexport) in crate_paths(&file.code) {
                let module = file.module_at(offset);
                let Some(absolute) = self.absolute(&module, &path) else {
                    continue;
                };
                let to = self.defining_file(&absolute);
                if reexport && table_of_contents && to.starts_with(from) {
                    continue;
                }
                if &to != from {
                    edges.push(Edge {
                        from: from.clone(),
                        to,
                        line: line_of(&file.code, offset),
                        text: path.join("::"),
                    });
                }
            }
        }
        edges
    }

    /// The file of a module, as shown in reports.
    fn shown(&self, module: &ModPath) -> &str {
        &self.files[module].shown
    }
}

impl SourceFile {
    /// The module whose code is at `offset`: the innermost inline module
    /// around it, else the file's own.
    fn module_at(&self, offset: usize) -> ModPath {
        self.inline
            .iter()
            .filter(|(start, end, _)| (*start..*end).contains(&offset))
            .max_by_key(|(_, _, path)| path.len())
            .map_or_else(|| self.module.clone(), |(_, _, path)| path.clone())
    }
}

/// The folder a file's child modules live in: `src/` for `lib.rs`, the
/// file's own folder for a `mod.rs`, `src/x/` for `src/x.rs`.
fn module_dir(src: &Path, module: &ModPath, file: &Path) -> PathBuf {
    if module.is_empty() || file.ends_with("mod.rs") {
        file.parent().expect("a file has a folder").to_path_buf()
    } else {
        module.iter().fold(src.to_path_buf(), |dir, m| dir.join(m))
    }
}

/// One `use` statement's leaves.
#[derive(Debug)]
struct UseStmt {
    /// Byte offset of the `use` keyword.
    offset: usize,
    /// Whether it is a re-export (`pub use`, `pub(crate) use`, ..).
    public: bool,
    /// One per imported name.
    leaves: Vec<UseLeaf>,
}

/// One imported name of a `use` statement.
#[derive(Debug)]
struct UseLeaf {
    /// The full path, as written (`crate`, `timer`, `Timer`).
    path: Vec<String>,
    /// The name it is known by here (an `as` rename, the last segment, or
    /// `*` for a glob).
    name: String,
    /// 1-based line of the leaf.
    line: usize,
    /// Byte offset of the leaf's last segment.
    offset: usize,
}

/// A token of the little lexer: an identifier or one punctuation mark
/// (`::` is one token), with its byte offset.
#[derive(Debug, Clone, PartialEq)]
struct Token {
    /// The token's text.
    text: String,
    /// Its byte offset in the code.
    offset: usize,
}

/// Splits blanked code into identifiers and punctuation.
fn tokens(code: &str) -> Vec<Token> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'_' || c.is_ascii_alphanumeric() || c == b'$' {
            let start = i;
            i += 1;
            while i < bytes.len() && (bytes[i] == b'_' || bytes[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            out.push(Token {
                text: code[start..i].to_string(),
                offset: start,
            });
        } else if c == b':' && bytes.get(i + 1) == Some(&b':') {
            out.push(Token {
                text: "::".into(),
                offset: i,
            });
            i += 2;
        } else {
            // One byte of punctuation (or a whole non-ASCII character).
            let len = code[i..].chars().next().map_or(1, char::len_utf8);
            out.push(Token {
                text: code[i..i + len].to_string(),
                offset: i,
            });
            i += len;
        }
    }
    out
}

/// Every `use` statement of the code, its groups expanded.
fn parse_uses(code: &str) -> Vec<UseStmt> {
    let toks = tokens(code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let after_path = i == 0 || toks[i - 1].text != "::";
        if toks[i].text == "use" && after_path {
            let end = (i..toks.len())
                .find(|&j| toks[j].text == ";")
                .unwrap_or(toks.len());
            let mut leaves = Vec::new();
            let mut pos = i + 1;
            expand_tree(&toks[..end], &mut pos, &[], code, &mut leaves);
            out.push(UseStmt {
                offset: toks[i].offset,
                public: is_public(&toks[..i]),
                leaves,
            });
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// Whether the tokens before a `use` end in a visibility (`pub`,
/// `pub(crate)`, `pub(in crate::x)`).
fn is_public(before: &[Token]) -> bool {
    match before.last().map(|t| t.text.as_str()) {
        Some("pub") => true,
        Some(")") => before
            .iter()
            .rposition(|t| t.text == "(")
            .is_some_and(|open| open > 0 && before[open - 1].text == "pub"),
        _ => false,
    }
}

/// Expands one use tree (`a::b::{c, d::*}`) starting at `toks[*pos]`.
fn expand_tree(
    toks: &[Token],
    pos: &mut usize,
    prefix: &[String],
    code: &str,
    out: &mut Vec<UseLeaf>,
) {
    let mut path = prefix.to_vec();
    if toks.get(*pos).is_some_and(|t| t.text == "::") {
        *pos += 1; // `use ::std::..`: a leading `::`, outside the crate
        path.push("::".into());
    }
    while let Some(tok) = toks.get(*pos) {
        match tok.text.as_str() {
            "{" => {
                *pos += 1;
                loop {
                    match toks.get(*pos).map(|t| t.text.as_str()) {
                        Some("}") => {
                            *pos += 1;
                            return;
                        }
                        Some(",") => *pos += 1,
                        Some(_) => expand_tree(toks, pos, &path, code, out),
                        None => return,
                    }
                }
            }
            "*" => {
                out.push(UseLeaf {
                    path: path.clone(),
                    name: "*".into(),
                    line: line_of(code, tok.offset),
                    offset: tok.offset,
                });
                *pos += 1;
                return;
            }
            "::" => *pos += 1,
            "," | "}" => return,
            name => {
                let line = line_of(code, tok.offset);
                *pos += 1;
                let is_last = toks.get(*pos).is_none_or(|t| t.text != "::");
                if !is_last {
                    path.push(name.to_string());
                    continue;
                }
                let mut alias = None;
                if toks.get(*pos).is_some_and(|t| t.text == "as") {
                    alias = toks.get(*pos + 1).map(|t| t.text.clone());
                    *pos += 2;
                }
                // `{self, ..}` names the prefix itself.
                let (leaf_path, own) = if name == "self" {
                    let own = path.last().cloned().unwrap_or_default();
                    (path.clone(), own)
                } else {
                    let mut p = path.clone();
                    p.push(name.to_string());
                    (p, name.to_string())
                };
                out.push(UseLeaf {
                    path: leaf_path,
                    name: alias.unwrap_or(own),
                    line,
                    offset: tok.offset,
                });
                return;
            }
        }
    }
}

/// A path found in code: where it is, its segments, and whether it is a
/// re-export (a leaf of a `pub use`).
type FoundPath = (usize, Vec<String>, bool);

/// Every path in code that may stay in the crate: `use` leaves, and paths
/// outside `use` statements that start with `crate`, `super` or `self`
/// (`$crate` counts as `crate`), or with any other name followed by `::`
/// (resolved later: a child module or an imported name stays, the rest
/// leaves the crate). Visibility (`pub(in crate::x)`) is skipped.
fn crate_paths(code: &str) -> Vec<FoundPath> {
    let mut out = Vec::new();
    let mut in_use = Vec::new();
    for stmt in parse_uses(code) {
        let end = code[stmt.offset..]
            .find(';')
            .map_or(code.len(), |e| stmt.offset + e);
        in_use.push(stmt.offset..end);
        for leaf in stmt.leaves {
            if leaf.path.first().is_some_and(|s| s != "::") {
                out.push((leaf.offset, leaf.path, stmt.public));
            }
        }
    }
    let toks = tokens(code);
    let mut i = 0;
    while i < toks.len() {
        let tok = &toks[i];
        let starts_path = toks.get(i + 1).is_some_and(|t| t.text == "::")
            && (i == 0 || toks[i - 1].text != "::")
            && tok
                .text
                .starts_with(|c: char| c == '_' || c == '$' || c.is_ascii_lowercase())
            && !(i > 0 && toks[i - 1].text == "in")
            && !in_use.iter().any(|r| r.contains(&tok.offset));
        if !starts_path {
            i += 1;
            continue;
        }
        let mut path = vec![tok.text.trim_start_matches('$').to_string()];
        let mut j = i + 1;
        while toks.get(j).is_some_and(|t| t.text == "::")
            && toks.get(j + 1).is_some_and(|t| {
                t.text
                    .starts_with(|c: char| c == '_' || c.is_alphanumeric())
            })
        {
            path.push(toks[j + 1].text.clone());
            j += 2;
        }
        out.push((tok.offset, path, false));
        i = j;
    }
    out
}

/// Names of the `mod x;` lines (child modules in files of their own).
fn file_modules(code: &str) -> Vec<String> {
    let toks = tokens(code);
    toks.windows(3)
        .filter(|w| w[0].text == "mod" && w[2].text == ";")
        .map(|w| w[1].text.clone())
        .collect()
}

/// Inline modules (`mod x { .. }`), nested ones included: their byte
/// range and their module path.
fn inline_modules(code: &str, file: &ModPath) -> Vec<(usize, usize, ModPath)> {
    let toks = tokens(code);
    let mut found: Vec<(usize, usize, String)> = Vec::new();
    for (i, w) in toks.windows(3).enumerate() {
        if w[0].text == "mod" && w[2].text == "{" {
            let end = matching_close(code, w[2].offset).unwrap_or(code.len());
            found.push((toks[i].offset, end, w[1].text.clone()));
        }
    }
    found
        .iter()
        .map(|(start, end, name)| {
            let mut path = file.clone();
            // Outer inline modules first: they start earlier and end later.
            for (s, e, outer) in &found {
                if s < start && end <= e {
                    path.push(outer.clone());
                }
            }
            path.push(name.clone());
            (*start, *end, path)
        })
        .collect()
}

/// The offset just past the bracket that closes the one at `open`.
fn matching_close(code: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' | '(' | '[' => depth += 1,
            '}' | ')' | ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// 1-based line of a byte offset.
fn line_of(code: &str, offset: usize) -> usize {
    code[..offset].matches('\n').count() + 1
}

/// Replaces comments, strings and char literals by spaces, keeping
/// newlines (and so every line number).
fn blank_comments_and_literals(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out: Vec<char> = chars.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(chars.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let ident = |c: char| c == '_' || c.is_alphanumeric();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let prev_ident = i > 0 && ident(chars[i - 1]);
        if c == '/' && next == Some('/') {
            let end = (i..chars.len())
                .find(|&j| chars[j] == '\n')
                .unwrap_or(chars.len());
            blank(&mut out, i, end);
            i = end;
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            let mut j = i;
            while j < chars.len() {
                if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if !prev_ident && (c == 'r' || (c == 'b' && next == Some('r'))) && {
            let k = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[k..].iter().take_while(|&&h| h == '#').count();
            chars.get(k + hashes) == Some(&'"')
        } {
            let k = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[k..].iter().take_while(|&&h| h == '#').count();
            let mut j = k + hashes + 1;
            while j < chars.len() {
                if chars[j] == '"' && chars[j + 1..].iter().take(hashes).all(|&h| h == '#') {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            blank(&mut out, i, j);
            i = j;
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                let end = (i + 2..chars.len())
                    .find(|&j| chars[j] == '\'')
                    .unwrap_or(i + 2);
                blank(&mut out, i, end + 1);
                i = end + 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                blank(&mut out, i, i + 3);
                i += 3;
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// Whether a `cfg` predicate holds only in test builds: `test`, or an
/// `all(..)` with `test` among its terms.
fn cfg_is_test_only(predicate: &str) -> bool {
    let p: String = predicate.chars().filter(|c| !c.is_whitespace()).collect();
    if p == "test" {
        return true;
    }
    let Some(inner) = p.strip_prefix("all(").and_then(|r| r.strip_suffix(')')) else {
        return false;
    };
    let mut depth = 0;
    let mut term = String::new();
    for c in inner.chars().chain([',']) {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                if term == "test" {
                    return true;
                }
                term.clear();
                continue;
            }
            _ => {}
        }
        term.push(c);
    }
    false
}

/// Blanks every item, field, statement or arm under a test-only `#[cfg]`
/// (and a whole file under a test-only `#![cfg]`), keeping newlines.
fn remove_test_only(code: &str) -> String {
    let mut out: Vec<u8> = code.as_bytes().to_vec();
    let bytes = code.as_bytes();
    let mut search = 0;
    while let Some(found) = code[search..].find("#") {
        let at = search + found;
        search = at + 1;
        let inner_attr = code[at..].starts_with("#!");
        let open = at + if inner_attr { 2 } else { 1 };
        if bytes.get(open) != Some(&b'[') {
            continue;
        }
        let Some(close) = matching_close(code, open) else {
            break;
        };
        let attr = code[open + 1..close - 1].trim();
        let Some(predicate) = attr
            .strip_prefix("cfg")
            .map(str::trim_start)
            .and_then(|r| r.strip_prefix('('))
            .and_then(|r| r.strip_suffix(')'))
        else {
            continue;
        };
        if !cfg_is_test_only(predicate) {
            continue;
        }
        let end = if inner_attr {
            code.len()
        } else {
            item_end(code, close)
        };
        for b in &mut out[at..end] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
        search = end;
    }
    String::from_utf8(out).expect("only ASCII bytes were replaced")
}

/// Where the item that starts after an attribute (at `from`) ends: past its
/// `;` or its `{ .. }` body, or at a `,` that ends a field or arm, or before
/// the bracket that closes its container.
fn item_end(code: &str, from: usize) -> usize {
    let bytes = code.as_bytes();
    let rest = code[from..].trim_start();
    let first_word: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    let is_item = matches!(
        first_word.as_str(),
        "fn" | "impl"
            | "mod"
            | "struct"
            | "enum"
            | "trait"
            | "const"
            | "static"
            | "type"
            | "use"
            | "let"
            | "pub"
            | "unsafe"
            | "extern"
            | "macro_rules"
            | "async"
    );
    let (mut depth, mut angle) = (0i32, 0i32);
    let mut i = from;
    while i < bytes.len() {
        match bytes[i] {
            b'#' if depth == 0 && bytes.get(i + 1) == Some(&b'[') => {
                // Another attribute on the same item.
                i = matching_close(code, i + 1).unwrap_or(bytes.len());
                continue;
            }
            b'(' | b'[' => depth += 1,
            b')' | b']' if depth == 0 => return i,
            b')' | b']' => depth -= 1,
            b'{' if depth == 0 => return matching_close(code, i).unwrap_or(bytes.len()),
            b'{' => depth += 1,
            b'}' if depth == 0 => return i,
            b'}' => depth -= 1,
            b'<' if depth == 0 => angle += 1,
            b'>' if depth == 0 && i > 0 && bytes[i - 1] != b'-' && bytes[i - 1] != b'=' => {
                angle -= 1;
            }
            b';' if depth == 0 => return i + 1,
            b',' if depth == 0 && angle <= 0 && !is_item => return i + 1,
            _ => {}
        }
        i += 1;
    }
    bytes.len()
}

/// What a top-level module may import, from the doc's table.
#[derive(Debug)]
enum Allowed {
    /// `everything` / `anything`.
    Any,
    /// The named top-level modules.
    Only(BTreeSet<String>),
}

/// The first table of `docs/architecture.md`: top-level module (`""` for
/// `lib.rs`) to what it may import, in the table's order.
#[derive(Debug)]
struct Rules(Vec<(String, Allowed)>);

impl Rules {
    /// Reads the rows of the table whose header has a `may import` column.
    fn parse(doc: &str) -> Rules {
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
    fn get(&self, module: &str) -> Option<&Allowed> {
        self.0.iter().find(|(m, _)| m == module).map(|(_, a)| a)
    }

    /// The doc's own claim, "dependencies point down this page": every
    /// module a row names lies in a row below it. One line per name that
    /// does not.
    fn upward(&self) -> Vec<String> {
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
fn backticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// `timer/` and `keyed.rs` to `timer` and `keyed`; `lib.rs` to `""`.
fn top_name(name: String) -> String {
    if name == "lib.rs" {
        return String::new();
    }
    name.trim_end_matches('/')
        .trim_end_matches(".rs")
        .to_string()
}

/// A cycle found in one folder, ready to print.
#[derive(Debug)]
struct Cycle {
    /// The folder (`src/timer/`).
    folder: String,
    /// One line per arrow: `a.rs -> b.rs (a.rs:12: crate::x::Y)`.
    steps: Vec<String>,
}

/// Import cycles among the files of each folder (a sub-folder counts as one
/// node, its files' imports merged), one shortest cycle per strongly
/// connected group.
fn find_cycles(crate_: &Crate, edges: &[Edge]) -> Vec<Cycle> {
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
fn shortest_cycle(
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
fn forbidden_arrows(crate_: &Crate, edges: &[Edge], rules: &Rules) -> Vec<String> {
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
