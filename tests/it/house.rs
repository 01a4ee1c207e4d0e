//! The house's size rules, checked on the source itself: a reader takes in
//! a file of `src/` whole (at most 600 lines, half of them at most 160) and
//! a function whole (at most 100 lines), except the plain tables named in
//! [`TABLES`] with why each stays long. The test files of `tests/it/` stay
//! under 1,000 lines, and no test patches a configuration's YAML by string
//! replacement: support::Doc changes it by path, so a change that no longer
//! applies fails instead of running the configuration it started from.

use std::path::{Path, PathBuf};

/// The most lines a file of src/ may have.
const MAX_LINES: usize = 600;
/// The most lines the median file of src/ may have.
const MEDIAN_LINES: usize = 160;
/// The most lines a function may have, signature to closing brace.
const MAX_FN_LINES: usize = 100;
/// The most lines a file of tests may have.
const MAX_TEST_LINES: usize = 1000;

/// Functions that may pass [`MAX_FN_LINES`]: plain tables, one entry after
/// another, that read better whole than cut at an arbitrary entry.
const TABLES: &[(&str, &str, &str)] = &[
    (
        "metrics.rs",
        "new",
        "every metric's registration, one after another, in the order /metrics shows them",
    ),
    (
        "error.rs",
        "to_wire",
        "the mapping of every gateway error to its JSON-RPC code and message, one arm each",
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every file under `dir` of the crate, with its path relative to `dir` and its text.
fn files(dir: &str) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut paths = Vec::new();
    rust_files(&root, &mut paths);
    paths.sort();
    paths
        .iter()
        .map(|f| {
            let rel = f
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (rel, std::fs::read_to_string(f).unwrap())
        })
        .collect()
}

#[test]
fn no_file_passes_600_lines() {
    let over: Vec<String> = files("src")
        .iter()
        .filter_map(|(rel, text)| {
            let lines = text.lines().count();
            (lines > MAX_LINES).then(|| format!("{rel}: {lines} lines (at most {MAX_LINES})"))
        })
        .collect();
    assert!(over.is_empty(), "split these along their jobs: {over:#?}");
}

#[test]
fn the_median_file_is_small() {
    let mut lines: Vec<usize> = files("src")
        .iter()
        .map(|(_, t)| t.lines().count())
        .collect();
    lines.sort_unstable();
    let median = lines[(lines.len() - 1) / 2];
    assert!(
        median <= MEDIAN_LINES,
        "the median file of src/ has {median} lines (at most {MEDIAN_LINES})"
    );
}

#[test]
fn no_function_passes_100_lines_but_the_tables() {
    let mut over = Vec::new();
    for (rel, text) in files("src") {
        for (name, lines) in functions(&text) {
            let table = TABLES.iter().any(|(f, n, _)| *f == rel && *n == name);
            if lines > MAX_FN_LINES && !table {
                over.push(format!(
                    "{rel}: fn {name}, {lines} lines (at most {MAX_FN_LINES})"
                ));
            }
        }
    }
    assert!(over.is_empty(), "break these into named steps: {over:#?}");
    // A table that has become short (or gone) leaves the list.
    for (file, name, why) in TABLES {
        let text = files("src")
            .into_iter()
            .find(|(rel, _)| rel == file)
            .map(|(_, t)| t)
            .unwrap_or_default();
        let longest = functions(&text)
            .into_iter()
            .filter(|(n, _)| n == name)
            .map(|(_, lines)| lines)
            .max();
        assert!(
            longest.is_some_and(|n| n > MAX_FN_LINES),
            "{file}: fn {name} is no longer a long table ({why}): take it off TABLES"
        );
    }
}

#[test]
fn no_test_file_passes_1000_lines() {
    let over: Vec<String> = files("tests")
        .iter()
        .filter(|(rel, _)| !rel.starts_with("fixtures/"))
        .filter_map(|(rel, text)| {
            let lines = text.lines().count();
            (lines > MAX_TEST_LINES).then(|| format!("tests/{rel}: {lines} lines"))
        })
        .collect();
    assert!(over.is_empty(), "split these by what they test: {over:#?}");
}

#[test]
fn no_test_patches_yaml_by_replacing_text() {
    // A `.replace(` whose pattern is YAML (a key and its colon, a flow
    // sequence or mapping) patches a configuration.
    let mut patched = Vec::new();
    for (rel, text) in files("tests/it") {
        if rel == "house.rs" {
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let Some((at, call)) = [".replace(", ".replacen("]
                .iter()
                .find_map(|call| line.find(call).map(|at| (at, call.len())))
            else {
                continue;
            };
            let rest = format!("{} {}", &line[at + call..], lines.get(n + 1).unwrap_or(&""));
            let pattern = first_string(rest.trim_start()).unwrap_or_default();
            if looks_like_yaml(pattern) {
                patched.push(format!("tests/it/{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        patched.is_empty(),
        "change these with support::Doc: {patched:#?}"
    );
}

/// Whether a pattern holds YAML: a key and its colon (`timeout_ms: `,
/// `protocol:`, `d: {`), or a flow sequence or mapping (`[ka, gone]`).
fn looks_like_yaml(pattern: &str) -> bool {
    let keyed = pattern.char_indices().any(|(i, c)| {
        c == ':'
            && pattern[..i].ends_with(|k: char| k.is_alphanumeric() || k == '_')
            && matches!(
                pattern[i + 1..].chars().next(),
                None | Some(' ' | '{' | '[')
            )
    });
    let flow = (pattern.starts_with('[') && pattern.ends_with(']'))
        || (pattern.starts_with('{') && pattern.contains(':'));
    keyed || flow
}

/// The string literal `text` starts with (a call's first argument), as written.
fn first_string(text: &str) -> Option<&str> {
    let body = text.strip_prefix('"')?;
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return Some(&body[..i]),
            _ => {}
        }
    }
    None
}

/// Each function of `text` with its length in lines, found by its `fn`
/// at the start of a line and measured to its body's closing brace (strings,
/// characters and comments skipped); declarations without a body are left out.
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        if let Some(end) = body_end(&lines[i..]) {
            found.push((name, end + 1));
        }
    }
    found
}

/// The name of the function a line declares, if it starts one.
fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.peek() {
        let qualifier = *w == "pub"
            || w.starts_with("pub(")
            || matches!(
                *w,
                "async" | "const" | "unsafe" | "extern" | "\"C\"" | "default"
            );
        if !qualifier {
            break;
        }
        words.next();
    }
    if words.next()? != "fn" {
        return None;
    }
    let name: String = words
        .next()?
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The index of the line that closes the body opened first in `lines`, or
/// `None` when a `;` ends the declaration before any body opens.
fn body_end(lines: &[&str]) -> Option<usize> {
    let mut depth = 0usize;
    let mut opened = false;
    let mut lexer = Lexer::default();
    for (i, line) in lines.iter().enumerate() {
        for c in lexer.code(line) {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => {
                    depth = depth.saturating_sub(1);
                    if opened && depth == 0 {
                        return Some(i);
                    }
                }
                ';' if !opened => return None,
                _ => {}
            }
        }
    }
    None
}

/// What of Rust's text is code, line by line: strings (raw ones too),
/// character literals and comments left out. Block comments and raw
/// strings may run across lines.
#[derive(Default)]
struct Lexer {
    /// Inside a block comment, this deep.
    comment: usize,
    /// Inside a raw string closed by a quote and this many `#`.
    raw: Option<usize>,
    /// Inside a plain string.
    plain: bool,
}

impl Lexer {
    fn code(&mut self, line: &str) -> Vec<char> {
        let chars: Vec<char> = line.chars().collect();
        let mut out = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let next = chars.get(i + 1).copied();
            if self.comment > 0 {
                if c == '*' && next == Some('/') {
                    self.comment -= 1;
                    i += 1;
                } else if c == '/' && next == Some('*') {
                    self.comment += 1;
                    i += 1;
                }
            } else if let Some(hashes) = self.raw {
                let closes = c == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#'));
                if closes {
                    self.raw = None;
                    i += hashes;
                }
            } else if self.plain {
                if c == '\\' {
                    i += 1;
                } else if c == '"' {
                    self.plain = false;
                }
            } else if c == '/' && next == Some('/') {
                break;
            } else if c == '/' && next == Some('*') {
                self.comment = 1;
                i += 1;
            } else if c == '"' {
                self.plain = true;
            } else if c == 'r' && matches!(next, Some('"' | '#')) && !ident_before(&chars, i) {
                let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
                if chars.get(i + 1 + hashes) == Some(&'"') {
                    self.raw = Some(hashes);
                    i += 1 + hashes;
                } else {
                    out.push(c);
                }
            } else if c == '\'' {
                i += char_literal(&chars[i..]);
            } else {
                out.push(c);
            }
            i += 1;
        }
        out
    }
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// How many characters after the quote a character literal at the start
/// of `chars` takes (`'a'`, `'\n'`, `'\u{7f}'`); 0 for a lifetime.
fn char_literal(chars: &[char]) -> usize {
    match chars.get(1) {
        Some('\\') => chars[2..]
            .iter()
            .position(|c| *c == '\'')
            .map_or(0, |p| p + 2),
        Some(_) if chars.get(2) == Some(&'\'') => 2,
        _ => 0,
    }
}

#[test]
fn functions_are_measured_past_strings_and_comments() {
    let text = "fn a() {\n    let s = \"}\";\n    // }\n    let c = '}';\n}\npub(crate) async fn b<'x>(v: &'x str) -> usize {\n    let r = r#\"{\"#;\n    /* { */\n    1\n}\nfn c();\n";
    assert_eq!(
        functions(text),
        [("a".to_string(), 5), ("b".to_string(), 5)]
    );
}
