//! The packaging routes as a user meets them: the built xtask binary, run
//! in this checkout or in a copy of it.
//!
//! - every bad input exits 2 and writes nothing, on every route, and a bad
//!   --release gets the same message everywhere;
//! - a copied checkout (no rebuild) packages its own sources;
//! - a closed stdout ends a build quietly.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The routes that write packages, each with what it needs besides the
/// options every route takes (pipeline::Request): build-modules a kernel
/// (one no build host has: the checks before it come first).
/// `every_route_is_here` holds this list to `cargo xtask --help`.
const ROUTES: [(&str, &[&str]); 4] = [
    ("build-deb", &[]),
    ("build-srpm", &[]),
    ("build-dkms", &[]),
    ("build-modules", &["--kernel", "6.1.0-0-nvpm-test-amd64"]),
];

/// build-repo takes packages, not a distribution: not a route.
const NOT_ROUTES: [&str; 1] = ["build-repo"];

#[test]
fn every_route_is_here() {
    let help = run(xtask().arg("--help"));
    let commands: Vec<String> = stdout(&help)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.starts_with("build-") && !NOT_ROUTES.contains(w))
        .map(str::to_owned)
        .collect();
    let mut ours: Vec<&str> = ROUTES.iter().map(|(r, _)| *r).collect();
    let mut theirs: Vec<&str> = commands.iter().map(String::as_str).collect();
    ours.sort();
    theirs.sort();
    assert_eq!(
        ours, theirs,
        "cargo xtask --help's build-* commands are the routes here"
    );
}

/// A fixed timestamp, so copies without git history build too.
const EPOCH: &str = "1700000000";

fn xtask() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
    command
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .env_remove("XTASK_WORKSPACE");
    command
}

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xtask-routes-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn is_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().next().is_none()
}

fn run(command: &mut Command) -> Output {
    command.output().expect("running the xtask binary")
}

/// `xtask ROUTE NEEDS... --out OUT`: a route of ROUTES, writing to @out.
fn route_into(route: &str, needs: &[&str], out: &Path) -> Command {
    let mut command = xtask();
    command.arg(route).args(needs).arg("--out").arg(out);
    command
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `cp -a` of the checkout without target/ and .git, made a git repository
/// of its own (the routes list the module sources with `git ls-files`).
fn copy_checkout(name: &str) -> PathBuf {
    let copy = scratch(name);
    for entry in std::fs::read_dir(checkout()).unwrap() {
        let entry = entry.unwrap();
        let file_name = entry.file_name();
        if file_name == "target" || file_name == ".git" {
            continue;
        }
        let status = Command::new("cp")
            .arg("-a")
            .arg(entry.path())
            .arg(&copy)
            .status()
            .unwrap();
        assert!(status.success(), "cp -a {}", entry.path().display());
    }
    git(&copy, &["init", "-q"]);
    git(&copy, &["add", "-A"]);
    copy
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?} in {}", dir.display());
}

#[test]
fn bad_options_exit_2_and_write_nothing_on_every_route() {
    let out = scratch("bad-options");
    let not_a_dir = out.with_extension("file");
    std::fs::write(&not_a_dir, b"").unwrap();
    let long = "9".repeat(40);
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("empty release", vec!["--release".into(), String::new()]),
        ("release 1-2", vec!["--release".into(), "1-2".into()]),
        ("release 'a b'", vec!["--release".into(), "a b".into()]),
        ("release 01", vec!["--release".into(), "01".into()]),
        ("release +1", vec!["--release".into(), "+1".into()]),
        ("release 0", vec!["--release".into(), "0".into()]),
        ("over-long release", vec!["--release".into(), long]),
        ("unknown distro", vec!["--distro".into(), "plan9".into()]),
        (
            "missing --out",
            vec!["--out".into(), "/nonexistent/xtask-out".into()],
        ),
        (
            "--out a file",
            vec!["--out".into(), not_a_dir.display().to_string()],
        ),
    ];
    for (what, args) in &cases {
        let mut messages = Vec::new();
        for (route, needs) in ROUTES {
            let output = run(route_into(route, needs, &out)
                .args(args)
                .current_dir(checkout()));
            assert_eq!(
                output.status.code(),
                Some(2),
                "{route}, {what}: {}",
                stderr(&output)
            );
            assert!(is_empty(&out), "{route}, {what}: wrote something");
            assert!(!stderr(&output).contains("panicked"), "{route}, {what}");
            messages.push(stderr(&output));
        }
        if what.contains("release") {
            assert_eq!(
                messages[0], messages[1],
                "{what}: one message on every route"
            );
            assert!(
                messages[0].contains("a release numbers the packages")
                    && messages[0].contains("pass e.g. --release 2"),
                "{what}: {}",
                messages[0]
            );
        }
    }
    // Each route refuses the other family's distros the same way.
    for (route, other) in [("build-deb", "rhel9"), ("build-srpm", "debian12")] {
        let output = run(xtask()
            .args([route, "--distro", other, "--out"])
            .arg(&out)
            .current_dir(checkout()));
        assert_eq!(output.status.code(), Some(2), "{route} --distro {other}");
        assert!(is_empty(&out));
    }
    std::fs::remove_file(&not_a_dir).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
}

/// Breaks a file of a copied checkout in turn and runs every route on it.
#[test]
fn bad_data_templates_and_checkouts_exit_2_and_write_nothing_on_every_route() {
    let copy = copy_checkout("bad-data");
    let out = scratch("bad-data-out");
    let data = copy.join("packaging/distros.yaml");
    let good_data = std::fs::read_to_string(&data).unwrap();
    let dkms = copy.join("dkms/dkms.conf.tera");
    let good_dkms = std::fs::read_to_string(&dkms).unwrap();
    /// What is broken, how, and what the message must say.
    type Fault<'a> = (&'a str, Box<dyn Fn() + 'a>, &'a str);
    let faults: Vec<Fault> = vec![
        (
            "duplicate distro id",
            Box::new(|| {
                let text = good_data.replace("  - id: debian13\n", "  - id: debian12\n");
                std::fs::write(&data, text).unwrap();
            }),
            "appears twice",
        ),
        (
            "duplicate key",
            Box::new(|| {
                let text = good_data.replacen("release: 1\n", "release: 1\nrelease: 2\n", 1);
                std::fs::write(&data, text).unwrap();
            }),
            "`release` is given twice",
        ),
        (
            "wrong type",
            Box::new(|| {
                let text = good_data.replacen("release: 1\n", "release: one\n", 1);
                std::fs::write(&data, text).unwrap();
            }),
            "`release` must be a whole number",
        ),
        (
            "broken template",
            Box::new(|| std::fs::write(&dkms, "{{ no_such_variable }}\n").unwrap()),
            "dkms.conf.tera",
        ),
        (
            "not a git checkout",
            Box::new(|| std::fs::remove_dir_all(copy.join(".git")).unwrap()),
            "git",
        ),
    ];
    for (what, break_it, expected) in &faults {
        break_it();
        for (route, needs) in ROUTES {
            let output = run(route_into(route, needs, &out).current_dir(&copy));
            let message = stderr(&output);
            assert_eq!(output.status.code(), Some(2), "{route}, {what}: {message}");
            assert!(message.contains(expected), "{route}, {what}: {message}");
            assert!(!message.contains("DuplicateKeyPolicy"), "{message}");
            assert!(is_empty(&out), "{route}, {what}: wrote something");
        }
        std::fs::write(&data, &good_data).unwrap();
        std::fs::write(&dkms, &good_dkms).unwrap();
    }
    std::fs::remove_dir_all(&copy).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
}

/// The files of a .tar.gz with their contents.
fn tar_gz_files(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    archive
        .entries()
        .unwrap()
        .map(|entry| {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mut contents = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut contents).unwrap();
            (path, contents)
        })
        .collect()
}

/// Built with this checkout's binary, without a rebuild, the copy's
/// artifacts carry the copy's sources.
#[test]
fn a_copied_checkout_packages_its_own_sources() {
    let copy = copy_checkout("copy");
    let source = std::fs::read_dir(copy.join("kmod/src"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .expect("kmod/src has Rust sources");
    let marker = format!("// changed in the copy {}\n", std::process::id());
    let mut text = std::fs::read_to_string(&source).unwrap();
    text.push_str(&marker);
    std::fs::write(&source, text).unwrap();
    let relative = source
        .strip_prefix(&copy)
        .unwrap()
        .to_string_lossy()
        .into_owned();

    for (route, from) in [("build-deb", copy.clone()), ("build-deb", checkout())] {
        let out = scratch(if from == copy { "copy-out" } else { "orig-out" });
        let output = run(xtask().arg(route).arg("--out").arg(&out).current_dir(&from));
        assert!(
            output.status.success(),
            "{route} in {}: {}",
            from.display(),
            stderr(&output)
        );
        let tarball = std::fs::read_dir(&out)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let files = tar_gz_files(&std::fs::read(&tarball).unwrap());
        let (_, contents) = files
            .iter()
            .find(|(path, _)| path.ends_with(&relative))
            .unwrap_or_else(|| panic!("{relative} missing from {}", tarball.display()));
        let carries = String::from_utf8_lossy(contents).contains(&marker);
        assert_eq!(carries, from == copy, "{route} in {}", from.display());
        std::fs::remove_dir_all(&out).unwrap();
    }

    // build-srpm too: the copy's source rpm differs from the checkout's
    // only because of the change (same timestamp, same everything else).
    let srpm = |from: &Path| {
        let out = scratch("srpm-out");
        let output = run(xtask()
            .args(["build-srpm", "--distro", "rhel9", "--out"])
            .arg(&out)
            .current_dir(from));
        assert!(output.status.success(), "{}", stderr(&output));
        let path = std::fs::read_dir(&out)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let bytes = std::fs::read(path).unwrap();
        std::fs::remove_dir_all(&out).unwrap();
        bytes
    };
    let from_copy = srpm(&copy);
    std::fs::write(&source, std::fs::read(checkout().join(&relative)).unwrap()).unwrap();
    assert_ne!(from_copy, srpm(&copy), "the change reached the source rpm");
    std::fs::remove_dir_all(&copy).unwrap();
}

/// `cargo xtask build-deb | head -1`: the reader may go before the report
/// is printed; the build is done and the run ends quietly.
#[test]
fn a_closed_stdout_ends_a_build_quietly() {
    // build-modules builds a real module against a kernel tree: not here
    // (ci/test-fleet.sh runs it).
    for (route, _) in ROUTES.iter().filter(|(_, needs)| needs.is_empty()) {
        let out = scratch("closed-stdout");
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let output = run(xtask()
            .arg(route)
            .arg("--out")
            .arg(&out)
            .current_dir(checkout())
            .stdout(Stdio::from(writer)));
        assert!(output.status.success(), "{route}: {}", stderr(&output));
        assert_eq!(stderr(&output), "", "{route}: quiet");
        assert!(!is_empty(&out), "{route}: the artifact is written");
        std::fs::remove_dir_all(&out).unwrap();
    }
}
