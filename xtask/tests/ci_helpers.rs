//! Each shell helper of ci/ is defined once (issue 60): a helper two
//! suites need lives in ci/lib/ and both source it, so that a fix reaches
//! every suite and two copies never drift apart (they had: test-image.sh
//! and test-fleet-image.sh gave their disks different room under one name,
//! test-deb.sh and test-service.sh tested the service helper twice).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The names of the shell functions @text defines (`name() {`, at any
/// indentation, as ci/'s scripts write them).
fn functions(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let (name, rest) = line.split_once("()")?;
            let is_name = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            (is_name && rest.trim_start().starts_with('{')).then(|| name.to_owned())
        })
        .collect()
}

/// The shell scripts of ci/ and ci/lib/.
fn scripts() -> Vec<PathBuf> {
    let root = workspace();
    ["ci", "ci/lib"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(root.join(dir)).expect("ci/"))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sh"))
        .collect()
}

#[test]
fn functions_are_found_as_ci_writes_them() {
    let text = "f() { :; }\n    g_2() {\nh () { x; }\n# k() {\necho \"l() {\"\nM() {\nx=n()\n";
    assert_eq!(functions(text), ["f", "g_2"]);
}

#[test]
fn no_helper_is_defined_in_two_ci_scripts() {
    let root = workspace();
    let mut defined: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let scripts = scripts();
    assert!(scripts.len() > 20, "ci/ was not read: {scripts:?}");
    for path in &scripts {
        let text = std::fs::read_to_string(path).expect("script");
        let name = path
            .strip_prefix(&root)
            .unwrap_or(Path::new(""))
            .display()
            .to_string();
        let mut seen = functions(&text);
        seen.sort();
        seen.dedup();
        for f in seen {
            defined.entry(f).or_default().push(name.clone());
        }
    }
    let twice: Vec<String> = defined
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(f, files)| format!("{f}: {}", files.join(", ")))
        .collect();
    assert!(
        twice.is_empty(),
        "helpers defined in more than one ci script (move each to ci/lib/ once, or name apart what differs): {}",
        twice.join("; ")
    );
}
