//! The crate's module tree, and a path resolved to the file that defines
//! what it names.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

use crate::lexer::{blank_comments_and_literals, line_of, remove_test_only};
use crate::paths::{crate_paths, file_modules, inline_modules, parse_uses};
use crate::ModPath;

/// The most re-exports one path is followed through before the resolver
/// gives up (a guard against a re-export loop, which rustc would refuse).
pub(crate) const MAX_HOPS: usize = 16;

/// One module of the crate: a file's, or an inline `mod x { .. }` in it.
#[derive(Debug, Default)]
pub(crate) struct Module {
    /// The file the module's code is in (an inline module's is its file's).
    pub(crate) file: ModPath,
    /// Child modules by name.
    pub(crate) children: BTreeSet<String>,
    /// Names brought in by `use` (re-exports included), each with its path
    /// made absolute.
    pub(crate) imports: BTreeMap<String, ModPath>,
}

/// A source file, with its code blanked and stripped of test-only items.
#[derive(Debug)]
pub(crate) struct SourceFile {
    /// The file's module.
    pub(crate) module: ModPath,
    /// The file's path, relative to the package (`src/timer/service.rs`).
    pub(crate) shown: String,
    /// The code: comments and literals blanked, test-only items removed.
    pub(crate) code: String,
    /// Inline modules: their byte range in `code` and their path.
    pub(crate) inline: Vec<(usize, usize, ModPath)>,
}

/// The crate as the compiler sees it outside tests.
#[derive(Debug, Default)]
pub(crate) struct Crate {
    /// Every compiled file, by its module.
    pub(crate) files: BTreeMap<ModPath, SourceFile>,
    /// Every module (files' and inline ones).
    pub(crate) modules: BTreeMap<ModPath, Module>,
}

/// An import of one file by another, with where it was written.
#[derive(Debug, Clone)]
pub(crate) struct Edge {
    /// The importing file's module.
    pub(crate) from: ModPath,
    /// The file that defines what is imported.
    pub(crate) to: ModPath,
    /// 1-based line of the path in the importing file.
    pub(crate) line: usize,
    /// The path as written (`crate::timer::handle::TimerHandle`).
    pub(crate) text: String,
}

impl Crate {
    /// Reads `src/` starting at `lib.rs`, following the `mod` lines that
    /// survive the removal of test-only items.
    pub(crate) fn load(src: &Path) -> Crate {
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
    pub(crate) fn collect_imports(&mut self) {
        // Twice: a `use` may start with a name another `use` brought in.
        for _ in 0..2 {
            self.collect_imports_once();
        }
    }

    /// One pass of [`Crate::collect_imports`].
    pub(crate) fn collect_imports_once(&mut self) {
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
    pub(crate) fn absolute(&self, module: &ModPath, path: &[String]) -> Option<ModPath> {
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
    pub(crate) fn defining_file(&self, path: &[String]) -> ModPath {
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
    pub(crate) fn edges(&self) -> Vec<Edge> {
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
    pub(crate) fn shown(&self, module: &ModPath) -> &str {
        &self.files[module].shown
    }
}

impl SourceFile {
    /// The module whose code is at `offset`: the innermost inline module
    /// around it, else the file's own.
    pub(crate) fn module_at(&self, offset: usize) -> ModPath {
        self.inline
            .iter()
            .filter(|(start, end, _)| (*start..*end).contains(&offset))
            .max_by_key(|(_, _, path)| path.len())
            .map_or_else(|| self.module.clone(), |(_, _, path)| path.clone())
    }
}

/// The folder a file's child modules live in: `src/` for `lib.rs`, the
/// file's own folder for a `mod.rs`, `src/x/` for `src/x.rs`.
pub(crate) fn module_dir(src: &Path, module: &ModPath, file: &Path) -> PathBuf {
    if module.is_empty() || file.ends_with("mod.rs") {
        file.parent().expect("a file has a folder").to_path_buf()
    } else {
        module.iter().fold(src.to_path_buf(), |dir, m| dir.join(m))
    }
}
