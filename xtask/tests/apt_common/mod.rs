//! What the apt repository tests share (repositories.rs,
//! repository_removal.rs): test packages made with dpkg-deb, build-repo
//! run as an operator runs it, and a scratch node's real apt-get. Each
//! test file uses a part of them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A binary package @name @version (architecture all) built by dpkg-deb,
/// with @source as its Source field when given.
pub fn deb(dir: &Path, name: &str, version: &str, source: Option<&str>) -> PathBuf {
    let source = source.map_or(String::new(), |s| format!("Source: {s}\n"));
    deb_with(dir, name, version, &source)
}

/// The same with @fields (whole control lines) added.
pub fn deb_with(dir: &Path, name: &str, version: &str, fields: &str) -> PathBuf {
    let tree = dir.join(format!("tree-{name}-{version}"));
    std::fs::create_dir_all(tree.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(tree.join(format!("usr/share/doc/{name}"))).unwrap();
    std::fs::write(tree.join(format!("usr/share/doc/{name}/README")), name).unwrap();
    std::fs::write(
        tree.join("DEBIAN/control"),
        format!("Package: {name}\n{fields}Version: {version}\nArchitecture: all\nMaintainer: tests <test@invalid>\nDescription: a test package\n"),
    )
    .unwrap();
    let out = dir.join(format!("{name}_{version}.deb"));
    let built = Command::new("dpkg-deb")
        .args(["--root-owner-group", "--nocheck", "--build"])
        .arg(&tree)
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    out
}

/// `cargo xtask build-repo` into @repo, signed by @gnupg's @key.
pub fn build_repo(
    repo: &Path,
    (gnupg, key): &(PathBuf, String),
    args: &[&str],
    debs: &[&Path],
) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xtask"));
    c.env("GNUPGHOME", gnupg)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .arg("build-repo")
        .arg("--repo")
        .arg(repo)
        .args(["--suite", "bookworm", "--sign-key", key])
        .args(args)
        .args(debs);
    c
}

/// A scratch node that follows @repo (signed-by the test key): its
/// APT_CONFIG file. Nothing of this machine's apt configuration reaches it
/// (Dir::Etc::parts too: a build machine may turn Check-Valid-Until off).
pub fn node(dir: &Path, repo: &Path, name: &str) -> PathBuf {
    let n = dir.join(format!("node-{name}"));
    for d in [
        "state/lists/partial",
        "cache/archives/partial",
        "empty",
        "log",
    ] {
        std::fs::create_dir_all(n.join(d)).unwrap();
    }
    std::fs::write(n.join("status"), "").unwrap();
    std::fs::write(
        n.join("sources.list"),
        format!(
            "deb [signed-by={}] file://{} bookworm main\n",
            dir.join("key.gpg").display(),
            repo.display()
        ),
    )
    .unwrap();
    let p = |s: &str| n.join(s).display().to_string();
    let conf = format!(
        "Dir::State \"{}\";\nDir::State::status \"{}\";\nDir::Cache \"{}\";\nDir::Etc::sourcelist \"{}\";\nDir::Etc::sourceparts \"{}\";\nDir::Etc::preferencesparts \"{}\";\nDir::Etc::trustedparts \"{}\";\nDir::Etc::trusted \"{}\";\nDir::Etc::parts \"{}\";\nDir::Log \"{}\";\nAPT::Architecture \"amd64\";\nAPT::Architectures {{ \"amd64\"; }};\nDebug::NoLocking \"true\";\n",
        p("state"),
        p("status"),
        p("cache"),
        p("sources.list"),
        p("empty"),
        p("empty"),
        p("empty"),
        p("empty/none.gpg"),
        p("empty"),
        p("log"),
    );
    std::fs::write(n.join("apt.conf"), conf).unwrap();
    n.join("apt.conf")
}

pub fn apt(conf: &Path, args: &[&str]) -> Output {
    Command::new("apt-get")
        .env("APT_CONFIG", conf)
        .args(args)
        .output()
        .unwrap()
}

pub fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

pub fn packages(repo: &Path) -> String {
    std::fs::read_to_string(repo.join("dists/bookworm/main/binary-amd64/Packages")).unwrap()
}

pub fn release_field(repo: &Path, field: &str) -> String {
    std::fs::read_to_string(repo.join("dists/bookworm/Release"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}: ")).map(str::to_owned))
        .unwrap_or_default()
}

/// Every file of @repo with its SHA-256, in name order: equal before and
/// after a run that must change nothing.
pub fn tree_hash(repo: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg("find . -type f | LC_ALL=C sort | xargs sha256sum")
        .current_dir(repo)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The SHA-256 the Release of @repo gives main/binary-amd64/Packages.gz:
/// its name under by-hash/SHA256/.
pub fn packages_gz_sha256(repo: &Path) -> String {
    std::fs::read_to_string(repo.join("dists/bookworm/Release"))
        .unwrap()
        .split("SHA256:")
        .nth(1)
        .unwrap()
        .lines()
        .find(|l| l.ends_with("main/binary-amd64/Packages.gz"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// Where @repo keeps the Packages.gz whose SHA-256 is @digest.
pub fn by_hash(repo: &Path, digest: &str) -> PathBuf {
    repo.join("dists/bookworm/main/binary-amd64/by-hash/SHA256")
        .join(digest)
}
