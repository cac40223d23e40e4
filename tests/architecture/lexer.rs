//! A small lexer: comments and literals blanked (lines kept), test-only
//! items removed, code split into tokens.

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

/// A token of the little lexer: an identifier or one punctuation mark
/// (`::` is one token), with its byte offset.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    /// The token's text.
    pub(crate) text: String,
    /// Its byte offset in the code.
    pub(crate) offset: usize,
}

/// Splits blanked code into identifiers and punctuation.
pub(crate) fn tokens(code: &str) -> Vec<Token> {
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

/// The offset just past the bracket that closes the one at `open`.
pub(crate) fn matching_close(code: &str, open: usize) -> Option<usize> {
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
pub(crate) fn line_of(code: &str, offset: usize) -> usize {
    code[..offset].matches('\n').count() + 1
}

/// Replaces comments, strings and char literals by spaces, keeping
/// newlines (and so every line number).
pub(crate) fn blank_comments_and_literals(src: &str) -> String {
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
pub(crate) fn cfg_is_test_only(predicate: &str) -> bool {
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
pub(crate) fn remove_test_only(code: &str) -> String {
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
pub(crate) fn item_end(code: &str, from: usize) -> usize {
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
