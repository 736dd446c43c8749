//! Every Markdown document a tracked file names (`docs/packaging.md`,
//! `kmod/tests/vm/README.md`, `KMOD-BUILD.md`) is in the repository: a
//! comment or message that sends the reader to a document they cannot
//! open is a dead end (issue 20 item 5: ci/fetch-nvidia-p2p.sh cited one
//! that lived outside the repository). A name counts as found relative to
//! the repository root, to the naming file's directory, or to docs/.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The tracked files, as `git ls-files` lists them.
fn tracked(root: &Path) -> Vec<PathBuf> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output()
        .expect("git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    out.stdout
        .split(|b| *b == 0)
        .filter(|name| !name.is_empty())
        .map(|name| PathBuf::from(String::from_utf8_lossy(name).into_owned()))
        .collect()
}

/// The `*.md` names in @text: runs of path characters that end in `.md`.
fn md_names(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
        .map(|word| word.trim_end_matches('.'))
        .filter(|word| word.ends_with(".md") && word.len() > 3)
        .collect()
}

#[test]
fn names_are_found() {
    assert_eq!(md_names("see docs/a.md, \"B.md\"."), ["docs/a.md", "B.md"]);
    assert!(md_names("cmd.mdx or .md alone").is_empty());
}

/// This file: its examples name documents that do not exist on purpose.
const THIS_FILE: &str = "xtask/tests/doc_references.rs";

#[test]
fn every_markdown_document_named_in_a_tracked_file_exists() {
    let root = workspace();
    let mut missing = Vec::new();
    for file in tracked(&root) {
        if file == Path::new(THIS_FILE) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root.join(&file)) else {
            continue; // not text
        };
        let dir = file.parent().unwrap_or(Path::new(""));
        for name in md_names(&text) {
            let found = !name.starts_with('/')
                && [
                    root.join(name),
                    root.join(dir).join(name),
                    root.join("docs").join(name),
                ]
                .iter()
                .any(|path| path.is_file());
            if !found {
                missing.push(format!("{}: {name}", file.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documents named but not in the repository:\n  {}",
        missing.join("\n  ")
    );
}
