//! Tests that keep the workspace's shape (in the manner of rust-analyzer's
//! tidy checks):
//!
//! - no module imports from a module that imports it, directly or around a
//!   longer loop (a child that uses its parent's items while the parent
//!   uses the child's is such a loop), in every crate (CRATE_SOURCES:
//!   xtask, readiness, kmod); test modules are left out, and a path in a
//!   doc comment counts as a use;
//! - no source file of xtask is longer than MAX_LINES unless its first
//!   comment says why, with the words "longer than" (readiness and kmod
//!   have files of up to 1,500 lines that issue 59 splits first).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 400;

/// Every .rs file below @dir.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file below src/ (`deb`, `vm::boot`, `` for main).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "main")) {
        parts.pop();
    }
    parts
}

/// Test-only files: children declared as `mod tests;` or by #[path].
fn is_test_file(file: &Path) -> bool {
    let name = file.file_stem().unwrap().to_string_lossy();
    name == "tests" || name.ends_with("_tests")
}

/// The code of a file without its inline test module.
fn non_test_code(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests {")
        .map_or(text, |at| &text[..at])
}

/// The module paths @code refers to through `crate::` and `super::`,
/// resolved against @module (grouped imports `crate::{a, b::c}` included).
fn references(module: &[String], code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    for (index, _) in code
        .match_indices("crate::")
        .chain(code.match_indices("super::"))
    {
        if index > 0 && code[..index].ends_with(is_ident) {
            continue; // e.g. `xcrate::`
        }
        // The base module and the rest of the path.
        let mut base: Vec<String>;
        let mut rest = &code[index..];
        if let Some(after) = rest.strip_prefix("crate::") {
            base = Vec::new();
            rest = after;
        } else {
            // `super` of x/mod.rs (module x) is x's parent, as for x.rs.
            base = module.to_vec();
            while let Some(after) = rest.strip_prefix("super::") {
                base.pop();
                rest = after;
            }
        }
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let first = item.trim().split("::").next().unwrap_or_default();
                if !first.is_empty() && first != "self" {
                    let mut path = base.clone();
                    path.push(first.to_owned());
                    found.push(path);
                }
            }
            continue;
        }
        let path_text: String = rest
            .chars()
            .take_while(|&c| is_ident(c) || c == ':')
            .collect();
        let mut path = base;
        path.extend(
            path_text
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        );
        found.push(path);
    }
    found
}

/// The import graph: module -> the modules its non-test code refers to.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|file| !is_test_file(file));
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_path(src, f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let module = module_path(src, file);
        let text = std::fs::read_to_string(file).unwrap();
        let edges = graph.entry(module.join("::")).or_default();
        for mut path in references(&module, non_test_code(&text)) {
            // The longest prefix that is a module: `crate::error::BadInput`
            // refers to `error`.
            while !path.is_empty() && !modules.contains(&path) {
                path.pop();
            }
            if path != module {
                edges.insert(path.join("::"));
            }
        }
    }
    graph
}

/// A loop in @graph through @start, as the modules along it.
fn find_loop(
    graph: &BTreeMap<String, BTreeSet<String>>,
    start: &str,
    at: &str,
    path: &mut Vec<String>,
    seen: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    for next in graph.get(at).into_iter().flatten() {
        if next == start {
            let mut found = path.clone();
            found.push(start.to_owned());
            return Some(found);
        }
        if seen.insert(next.clone()) {
            path.push(next.clone());
            if let Some(found) = find_loop(graph, start, next, path, seen) {
                return Some(found);
            }
            path.pop();
        }
    }
    None
}

fn src_dir() -> PathBuf {
    crate::workspace::path("xtask/src")
}

/// Every crate's source folder: the rules hold across the workspace.
const CRATE_SOURCES: [&str; 3] = ["xtask/src", "readiness/src", "kmod/src"];

#[test]
fn no_module_imports_from_a_module_that_imports_it() {
    let xtask = import_graph(&src_dir());
    assert!(
        xtask["deb"].contains("pipeline") && xtask["pipeline"].contains("error"),
        "the graph is read: {xtask:?}"
    );
    let readiness = import_graph(&crate::workspace::path("readiness/src"));
    assert!(
        readiness["check"].contains("host"),
        "the graph is read: {readiness:?}"
    );
    let mut loops = Vec::new();
    for source in CRATE_SOURCES {
        let graph = import_graph(&crate::workspace::path(source));
        for module in graph.keys() {
            let mut path = vec![module.clone()];
            if let Some(found) = find_loop(&graph, module, module, &mut path, &mut BTreeSet::new())
            {
                loops.push(format!("{source}: {}", found.join(" -> ")));
            }
        }
    }
    assert!(
        loops.is_empty(),
        "modules that import from each other (name the shared item's home in a module both can import):\n  {}",
        loops.join("\n  ")
    );
}

#[test]
fn a_loop_is_found() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    let found = find_loop(
        &graph,
        "a",
        "a",
        &mut vec!["a".into()],
        &mut BTreeSet::new(),
    );
    assert_eq!(found.unwrap(), ["a", "b", "c", "a"]);
    assert!(
        find_loop(
            &graph,
            "d",
            "d",
            &mut vec!["d".into()],
            &mut BTreeSet::new()
        )
        .is_none()
    );
    let child = vec!["vm".to_owned(), "boot".to_owned()];
    assert_eq!(
        references(
            &child,
            "use super::console::Console;\nuse crate::{error, workspace::root};"
        ),
        [
            vec!["error".to_owned()],
            vec!["workspace".to_owned()],
            vec!["vm".to_owned(), "console".to_owned(), "Console".to_owned()],
        ]
    );
}

#[test]
fn no_source_file_is_long_without_saying_why() {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    rust_files(&crate::workspace::path("xtask/tests"), &mut files);
    let mut long = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines = text.lines().count();
        let first_comment: String = text
            .lines()
            .take_while(|line| line.starts_with("//"))
            .collect::<Vec<_>>()
            .join(" ");
        if lines > MAX_LINES && !first_comment.to_lowercase().contains("longer than") {
            long.push(format!("{} ({lines} lines)", file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines whose first comment does not say why (\"longer than ...\"); split them by job or say why:\n  {}",
        long.join("\n  ")
    );
}
