//! The lists of test suites a reader meets are the suites `ci/test.sh`
//! runs (issue 60): every `ci/test-*.sh` is run by ci/test.sh, and each
//! one it runs is named in its own header, in README.md's test table and in
//! docs/ARCHITECTURE.md's "Tests". A suite added to ci/ and forgotten in
//! ci/test.sh never runs in CI; one run but missing from the documents is
//! a suite a newcomer cannot find. The same for the documents: README.md
//! links every design document of docs/ and every guide of docs/guide/.

use std::collections::BTreeSet;
use std::path::PathBuf;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `ci/test-*.sh` scripts the `suite "NAME" COMMAND...` lines of
/// @test_sh run (whatever the command's wrapper: `bash ci/...`).
fn suites_run(test_sh: &str) -> BTreeSet<String> {
    test_sh
        .lines()
        .map(str::trim_start)
        .filter_map(|line| {
            // `suite "NAME" ...` alone on its line or as a function's body.
            let at = line.find("suite \"")?;
            let rest = &line[at + "suite \"".len()..];
            let command = &rest[rest.find('"')? + 1..];
            Some(command.to_owned())
        })
        .flat_map(|command| {
            command
                .split_whitespace()
                .map(|w| w.trim_end_matches(';'))
                .filter(|w| w.starts_with("ci/test-") && w.ends_with(".sh"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The `ci/test-*.sh` files in ci/.
fn suites_present() -> BTreeSet<String> {
    std::fs::read_dir(workspace().join("ci"))
        .expect("ci/")
        .map(|e| {
            e.expect("ci/ entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.starts_with("test-") && n.ends_with(".sh"))
        .map(|n| format!("ci/{n}"))
        .collect()
}

/// ci/test.sh's leading comment block.
fn header(test_sh: &str) -> String {
    test_sh
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// README.md's test table: its rows that start with a `bash ci/...` cell.
fn readme_table(readme: &str) -> String {
    readme
        .lines()
        .filter(|l| l.starts_with("| `bash ci/"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// docs/ARCHITECTURE.md's "## Tests" section.
fn architecture_tests(architecture: &str) -> String {
    let start = architecture
        .find("\n## Tests")
        .expect("docs/ARCHITECTURE.md has a ## Tests section");
    let rest = &architecture[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_owned()
}

/// The suites of @run that @text does not name.
fn unnamed<'a>(run: &'a BTreeSet<String>, text: &str) -> Vec<&'a str> {
    run.iter()
        .map(String::as_str)
        .filter(|s| !text.contains(s))
        .collect()
}

#[test]
fn suites_are_found_in_every_form_of_suite_line() {
    let run = suites_run(
        "suite \"a\" bash ci/test-a.sh\n    suite \"b (x)\" env X=1 bash ci/test-b.sh --y\n\
         f() { suite \"c\" bash ci/test-c.sh; }\nsuite \"d\" cargo xtask test-vm\n# ci/test-e.sh\n",
    );
    let want: BTreeSet<String> = ["ci/test-a.sh", "ci/test-b.sh", "ci/test-c.sh"]
        .map(String::from)
        .into();
    assert_eq!(run, want);
    let table = readme_table("text ci/test-a.sh\n| `bash ci/test-b.sh` | b |\n");
    assert_eq!(unnamed(&want, &table), ["ci/test-a.sh", "ci/test-c.sh"]);
}

#[test]
fn every_suite_in_ci_is_run_by_ci_test_sh() {
    let run = suites_run(&read("ci/test.sh"));
    let orphans: Vec<_> = suites_present().difference(&run).cloned().collect();
    assert!(
        orphans.is_empty(),
        "ci/test.sh runs no `suite` line for {orphans:?}: CI would never run them"
    );
    assert!(
        run.len() >= 10,
        "ci/test.sh's suite lines were not read: {run:?}"
    );
}

#[test]
fn the_documents_name_every_suite_ci_test_sh_runs() {
    let test_sh = read("ci/test.sh");
    let run = suites_run(&test_sh);
    let places = [
        ("ci/test.sh's header", header(&test_sh)),
        ("README.md's test table", readme_table(&read("README.md"))),
        (
            "docs/ARCHITECTURE.md's \"Tests\"",
            architecture_tests(&read("docs/ARCHITECTURE.md")),
        ),
    ];
    let missing: Vec<String> = places
        .iter()
        .filter_map(|(place, text)| {
            let gone = unnamed(&run, text);
            (!gone.is_empty()).then(|| format!("{place} lacks {gone:?}"))
        })
        .collect();
    assert!(missing.is_empty(), "{}", missing.join("; "));
}

/// The `*.md` files of @dir (relative to the workspace), as @dir/NAME.
fn documents(dir: &str) -> BTreeSet<String> {
    std::fs::read_dir(workspace().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("{dir}/{n}"))
        .collect()
}

/// README.md's section @heading (`## ...`), up to the next one.
fn readme_section(readme: &str, heading: &str) -> String {
    let start = readme
        .find(&format!("\n## {heading}"))
        .unwrap_or_else(|| panic!("README.md has no `## {heading}`"));
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_owned()
}

#[test]
fn readme_links_every_design_document_and_every_guide() {
    let readme = read("README.md");
    let linked = |section: &str, docs: BTreeSet<String>| -> Vec<String> {
        let text = readme_section(&readme, section);
        docs.into_iter()
            .filter(|d| !text.contains(&format!("]({d})")))
            .collect()
    };
    let design = linked("Design documents", documents("docs"));
    let guides = linked("Where to read on", documents("docs/guide"));
    assert!(
        design.is_empty() && guides.is_empty(),
        "README.md does not link the design documents {design:?} (under `## Design documents`) or the guides {guides:?} (under `## Where to read on`)"
    );
}
