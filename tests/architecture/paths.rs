//! `use` trees expanded, crate-internal paths found, `mod` lines read.

use crate::lexer::{line_of, matching_close, tokens, Token};
use crate::ModPath;

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

/// One `use` statement's leaves.
#[derive(Debug)]
pub(crate) struct UseStmt {
    /// Byte offset of the `use` keyword.
    pub(crate) offset: usize,
    /// Whether it is a re-export (`pub use`, `pub(crate) use`, ..).
    pub(crate) public: bool,
    /// One per imported name.
    pub(crate) leaves: Vec<UseLeaf>,
}

/// One imported name of a `use` statement.
#[derive(Debug)]
pub(crate) struct UseLeaf {
    /// The full path, as written (`crate`, `timer`, `Timer`).
    pub(crate) path: Vec<String>,
    /// The name it is known by here (an `as` rename, the last segment, or
    /// `*` for a glob).
    pub(crate) name: String,
    /// 1-based line of the leaf.
    pub(crate) line: usize,
    /// Byte offset of the leaf's last segment.
    pub(crate) offset: usize,
}

/// Every `use` statement of the code, its groups expanded.
pub(crate) fn parse_uses(code: &str) -> Vec<UseStmt> {
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
pub(crate) fn is_public(before: &[Token]) -> bool {
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
pub(crate) fn expand_tree(
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
pub(crate) type FoundPath = (usize, Vec<String>, bool);

/// Every path in code that may stay in the crate: `use` leaves, and paths
/// outside `use` statements that start with `crate`, `super` or `self`
/// (`$crate` counts as `crate`), or with any other name followed by `::`
/// (resolved later: a child module or an imported name stays, the rest
/// leaves the crate). Visibility (`pub(in crate::x)`) is skipped.
pub(crate) fn crate_paths(code: &str) -> Vec<FoundPath> {
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
pub(crate) fn file_modules(code: &str) -> Vec<String> {
    let toks = tokens(code);
    toks.windows(3)
        .filter(|w| w[0].text == "mod" && w[2].text == ";")
        .map(|w| w[1].text.clone())
        .collect()
}

/// Inline modules (`mod x { .. }`), nested ones included: their byte
/// range and their module path.
pub(crate) fn inline_modules(code: &str, file: &ModPath) -> Vec<(usize, usize, ModPath)> {
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
