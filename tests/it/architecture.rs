//! The shape ARCHITECTURE.md draws, checked on the source itself: the
//! modules of `src/` name one another without a cycle, the top-level ones
//! only downward in [`LAYERS`], nothing crosses the seams the faces rest on,
//! and every file of `src/` is named in ARCHITECTURE.md.
//!
//! A module "names" another when it writes a path into it (`use`, or a path
//! in code) starting at `crate`, `super` or `self`. A module and its own
//! ancestors or descendants are one unit here: a `mod.rs` declares and
//! re-exports its children, and a child may use what its parent defines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules of `src/`, lowest first: each may name only those
/// before it (ARCHITECTURE.md draws the same order).
const LAYERS: &[&str] = &[
    "redact",
    "cpus",
    "descriptors",
    "stdio_pipes",
    "telemetry",
    "metrics",
    "jsonrpc",
    "auth",
    "config",
    "protocol",
    "seal",
    "modelcontext",
    "tenant",
    "store",
    "output",
    "cache",
    "upstream",
    "error",
    "dispatch",
    "http",
    "demo",
    "app",
    "stdio_mode",
    "fuzzing",
];

/// Which modules each module names, by module path.
type Edges = BTreeMap<Vec<String>, BTreeSet<Vec<String>>>;

struct Module {
    /// Its path in the crate (`["http", "agent"]`).
    path: Vec<String>,
    file: PathBuf,
    /// Its text without its unit tests.
    text: String,
    /// The same without comments.
    code: String,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

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

/// Every module of the library (the binary's `main.rs` and the crate root
/// left out: they are the top, naming everything).
fn modules() -> Vec<Module> {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    let mut modules = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&root).unwrap().with_extension("");
        let mut path: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if path.last().is_some_and(|l| l == "mod") {
            path.pop();
        }
        // Unit tests, in a module's own file or a tests.rs beside it, are
        // not the module: they may name what it may not.
        if path == ["lib"] || path == ["main"] || path.last().is_some_and(|l| l == "tests") {
            continue;
        }
        let mut text = std::fs::read_to_string(&file).unwrap();
        if let Some(at) = text.find("#[cfg(test)]\nmod tests") {
            text.truncate(at);
        }
        let code = text
            .lines()
            .map(|line| match line.trim_start().starts_with("//") {
                true => "",
                false => line,
            })
            .collect::<Vec<_>>()
            .join("\n");
        modules.push(Module {
            path,
            file,
            text,
            code,
        });
    }
    modules
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e` (whitespace removed).
fn expand(tree: &str, prefix: &str, out: &mut Vec<String>) {
    let mut depth = 0;
    let mut start = 0;
    let bytes: Vec<char> = tree.chars().collect();
    let mut items = Vec::new();
    for (i, &c) in bytes.iter().enumerate() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(bytes[start..i].iter().collect::<String>());
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(bytes[start..].iter().collect::<String>());
    for item in items.into_iter().filter(|i| !i.is_empty()) {
        match (item.find('{'), item.rfind('}')) {
            (Some(open), Some(close)) => expand(
                &item[open + 1..close],
                &format!("{prefix}{}", &item[..open]),
                out,
            ),
            _ => out.push(format!("{prefix}{}", item.split(" as ").next().unwrap())),
        }
    }
}

/// The paths a module writes that start at `crate`, `super` or `self`.
fn written_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + 4..];
        if before.is_some_and(is_ident) {
            continue;
        }
        let end = rest.find(';').unwrap_or(rest.len());
        let tree: String = rest[..end].chars().filter(|c| !c.is_whitespace()).collect();
        expand(&tree, "", &mut paths);
    }
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(start) {
            let at = from + at;
            from = at + start.len();
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| is_ident(c) || c == ':' || c == '$') {
                continue;
            }
            let len = code[at..]
                .find(|c: char| !(is_ident(c) || c == ':'))
                .unwrap_or(code.len() - at);
            paths.push(code[at..at + len].trim_end_matches(':').to_owned());
        }
    }
    paths
}

/// The module each written path lands in, as the longest known prefix.
fn named_modules(module: &Module, known: &BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    let mut named = BTreeSet::new();
    for path in written_paths(&module.code) {
        let mut segments = path.split("::").peekable();
        let mut absolute: Vec<String> = match segments.peek().copied() {
            Some("crate") => {
                segments.next();
                Vec::new()
            }
            Some("self") => {
                segments.next();
                module.path.clone()
            }
            Some("super") => {
                let mut up = module.path.clone();
                while segments.peek() == Some(&"super") {
                    segments.next();
                    up.pop();
                }
                up
            }
            _ => continue,
        };
        absolute.extend(segments.map(str::to_owned));
        let target = (1..=absolute.len())
            .rev()
            .map(|n| absolute[..n].to_vec())
            .find(|prefix| known.contains(prefix));
        if let Some(target) = target {
            let related = target.starts_with(&module.path) || module.path.starts_with(&target);
            if !related {
                named.insert(target);
            }
        }
    }
    named
}

fn graph() -> (Vec<Module>, Edges) {
    let modules = modules();
    let known: BTreeSet<Vec<String>> = modules.iter().map(|m| m.path.clone()).collect();
    let edges = modules
        .iter()
        .map(|m| (m.path.clone(), named_modules(m, &known)))
        .collect();
    (modules, edges)
}

/// The same graph between siblings: `a/b/c` naming `a/d/e` is `a/b`
/// naming `a/d`, so a cycle through a parent's children is one between
/// siblings.
fn sibling_graph(edges: &Edges) -> Edges {
    let mut siblings = Edges::new();
    for (from, targets) in edges {
        for to in targets {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            siblings
                .entry(from[..=common].to_vec())
                .or_default()
                .insert(to[..=common].to_vec());
        }
    }
    siblings
}

/// One cycle of the graph, when there is one.
fn a_cycle(edges: &Edges) -> Option<Vec<Vec<String>>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &Vec<String>,
        edges: &Edges,
        marks: &mut BTreeMap<Vec<String>, Mark>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = stack.iter().position(|n| n == node).unwrap();
                let mut cycle = stack[from..].to_vec();
                cycle.push(node.clone());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.clone(), Mark::Open);
        stack.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, marks, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        marks.insert(node.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut marks, &mut Vec::new()))
}

#[test]
fn modules_name_each_other_without_a_cycle() {
    let (_, edges) = graph();
    // The graph is not empty by accident of parsing: the faces name the core.
    let v1 = edges
        .get(&vec!["dispatch".to_owned(), "v1".to_owned()])
        .unwrap();
    assert!(v1.contains(&vec!["error".to_owned()]), "{v1:?}");
    if let Some(cycle) = a_cycle(&sibling_graph(&edges)) {
        let cycle: Vec<String> = cycle.iter().map(|m| m.join("/")).collect();
        panic!("src/ names itself in a cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn top_level_modules_name_only_lower_layers() {
    let (modules, edges) = graph();
    let rank = |top: &str| LAYERS.iter().position(|l| *l == top);
    let mut upward = Vec::new();
    for module in &modules {
        let top = &module.path[0];
        let Some(own) = rank(top) else {
            panic!("{top} (src/{top}) is in no layer: add it to LAYERS and ARCHITECTURE.md");
        };
        for target in &edges[&module.path] {
            if target[0] != *top && rank(&target[0]).is_none_or(|r| r > own) {
                upward.push(format!("{} -> {}", module.path.join("/"), target.join("/")));
            }
        }
    }
    assert!(upward.is_empty(), "arrows up the layers: {upward:#?}");
}

#[test]
fn the_seams_hold() {
    let mut crossings = Vec::new();
    for module in modules() {
        let top = module.path[0].as_str();
        let file = module.file.display().to_string();
        if top != "upstream" && module.code.contains("Dialect::") {
            crossings.push(format!(
                "{file}: which protocol an upstream speaks, above upstream/"
            ));
        }
        if top == "protocol" && module.text.contains("modelcontext") {
            crossings.push(format!("{file}: the official protocol under protocol/"));
        }
        if top == "dispatch" {
            for http in ["axum", "hyper", "http::", "StatusCode", "HeaderMap"] {
                let found = module.code.match_indices(http).any(|(at, _)| {
                    !module.code[..at]
                        .chars()
                        .next_back()
                        .is_some_and(|c| is_ident(c) || c == ':')
                });
                if found {
                    crossings.push(format!("{file}: an HTTP type ({http}) in the RPC tier"));
                }
            }
        }
    }
    assert!(crossings.is_empty(), "{crossings:#?}");
}

#[test]
fn architecture_names_every_file() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
            .unwrap();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let unnamed: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let name = f.file_name()?.to_string_lossy().into_owned();
            let dir = f.parent()?.file_name()?.to_string_lossy().into_owned();
            let named = match name.as_str() {
                "mod.rs" => doc.contains(&format!("{dir}/")),
                _ => doc.contains(&name),
            };
            (!named).then(|| f.display().to_string())
        })
        .collect();
    assert!(
        unnamed.is_empty(),
        "files ARCHITECTURE.md does not name: {unnamed:#?}"
    );
}

#[test]
fn use_trees_expand() {
    let mut out = Vec::new();
    expand("super::{a::B,c::{d,e as f}}", "", &mut out);
    assert_eq!(out, ["super::a::B", "super::c::d", "super::c::e"]);
}
