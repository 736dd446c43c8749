//! `build-repo` for dnf as a repository operator and the nodes meet it
//! (issue 40, "signed end to end"): the built xtask binary publishing a
//! small package made with rpmbuild into a dnf repository signed with a
//! throwaway gpg key, installed by real dnf on a scratch root with
//! `gpgcheck=1` (the package's own signature) and `repo_gpgcheck=1`, as
//! build-repo's printed node configuration says. A package changed after
//! signing is refused; the same package published again is the same
//! package; the same inputs give the same repository; a node that read
//! repomd.xml just before a publish still gets the files it names.

mod repository_common;

use repository_common::{key, ok, scratch};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A noarch package @name built by rpmbuild (no files, no requirements
/// beyond rpmlib's).
fn rpm(dir: &Path, name: &str) -> PathBuf {
    let top = dir.join(format!("rpmbuild-{name}"));
    let spec = dir.join(format!("{name}.spec"));
    std::fs::write(
        &spec,
        format!(
            "Name: {name}\nVersion: 1\nRelease: 1\nSummary: a test package\nLicense: MIT\nBuildArch: noarch\n%description\nA test package.\n%files\n"
        ),
    )
    .unwrap();
    ok(Command::new("rpmbuild")
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .arg("--define")
        .arg(format!("_topdir {}", top.display()))
        .args([
            "--define",
            "use_source_date_epoch_as_buildtime 1",
            "--quiet",
            "-bb",
        ])
        .arg(&spec)
        .output()
        .unwrap());
    top.join(format!("RPMS/noarch/{name}-1-1.noarch.rpm"))
}

/// `cargo xtask build-repo --repo @repo --sign-key` with the test key.
fn build_repo(repo: &Path, (gnupg, key): &(PathBuf, String), rpms: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .env("GNUPGHOME", gnupg)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .arg("build-repo")
        .arg("--repo")
        .arg(repo)
        .args(["--sign-key", key])
        .args(rpms)
        .output()
        .unwrap()
}

/// dnf on a fresh scratch root @root following @repo alone, the test key
/// as its gpgkey, package signatures checked (gpgcheck=1) and the
/// metadata's when @repo_gpgcheck: `dnf install @package`.
fn dnf_install(dir: &Path, root: &str, repo: &Path, repo_gpgcheck: bool, package: &str) -> Output {
    dnf(dir, root, repo, repo_gpgcheck, &["install", package])
}

/// dnf @args on a fresh scratch root, as dnf_install.
fn dnf(dir: &Path, root: &str, repo: &Path, repo_gpgcheck: bool, args: &[&str]) -> Output {
    let root = dir.join(root);
    let _ = std::fs::remove_dir_all(&root);
    Command::new("dnf")
        .arg("-y")
        .arg(format!("--installroot={}", root.display()))
        .args(["--releasever=9", "--setopt=reposdir=/nonexistent"])
        .arg(format!("--repofrompath=nvpm,file://{}", repo.display()))
        .args([
            "--repo=nvpm",
            "--setopt=nvpm.gpgcheck=1",
            "--setopt=nvpm.skip_if_unavailable=False",
        ])
        .arg(format!(
            "--setopt=nvpm.repo_gpgcheck={}",
            u8::from(repo_gpgcheck)
        ))
        .arg(format!(
            "--setopt=nvpm.gpgkey=file://{}",
            dir.join("key.asc").display()
        ))
        .args(args)
        .output()
        .unwrap()
}

/// Whether rpm's database on the scratch root @root holds @package.
fn installed_in(dir: &Path, root: &str, package: &str) -> bool {
    Command::new("rpm")
        .arg("--root")
        .arg(dir.join(root))
        .args(["-q", package])
        .output()
        .unwrap()
        .status
        .success()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn dnf_with_gpgcheck_installs_the_published_package_and_refuses_a_changed_one() {
    let dir = scratch("rpm-gpgcheck");
    let key = key(&dir);
    let package = rpm(&dir, "nvpm-test");
    let repo = dir.join("repo");
    ok(build_repo(&repo, &key, &[&package]));

    // gpgcheck=1 and repo_gpgcheck=1, as the printed .repo file says: the
    // package is signed with the repository's key, so dnf installs it.
    let installed = dnf_install(&dir, "node", &repo, true, "nvpm-test");
    assert!(installed.status.success(), "{}", text(&installed));
    assert!(installed_in(&dir, "node", "nvpm-test"));

    // A mirror that changes the package after it was signed (its Summary,
    // in the signed header) and indexes it again: the metadata matches the
    // package, only the package's signature can tell. dnf refuses it.
    let mirror = dir.join("mirror");
    ok(Command::new("cp")
        .arg("-a")
        .arg(&repo)
        .arg(&mirror)
        .output()
        .unwrap());
    let published = mirror.join("packages/nvpm-test-1-1.noarch.rpm");
    let mut bytes = std::fs::read(&published).unwrap();
    let at = bytes
        .windows(14)
        .position(|w| w == b"a test package")
        .expect("the Summary is in the header");
    bytes[at] = b'A';
    std::fs::write(&published, bytes).unwrap();
    ok(Command::new("createrepo_c")
        .args(["--quiet", "--update"])
        .arg(&mirror)
        .output()
        .unwrap());
    let refused = dnf_install(&dir, "node-mirror", &mirror, false, "nvpm-test");
    assert!(!refused.status.success(), "{}", text(&refused));
    let said = text(&refused);
    assert!(
        said.contains("nvpm-test-1-1.noarch.rpm"),
        "dnf names the package it refused: {said}"
    );
    assert!(!installed_in(&dir, "node-mirror", "nvpm-test"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_same_package_published_again_is_the_same_and_the_same_inputs_give_the_same_repository() {
    let dir = scratch("rpm-again");
    let key = key(&dir);
    let package = rpm(&dir, "nvpm-test");
    let (first, second) = (dir.join("first"), dir.join("second"));
    ok(build_repo(&first, &key, &[&package]));
    ok(build_repo(&second, &key, &[&package]));
    // The unsigned input and the signed package in the repository are one
    // package: publishing it again adds nothing and is not refused.
    let again = ok(build_repo(&first, &key, &[&package]));
    assert!(
        text(&again).contains("1 package(s) were already published with the same contents"),
        "{}",
        text(&again)
    );
    // Same package, key and SOURCE_DATE_EPOCH: the same signed package and
    // metadata (the detached repomd.xml.asc is dated when it is made).
    let diff = Command::new("diff")
        .args(["-r", "-x", "repomd.xml.asc"])
        .arg(&first)
        .arg(&second)
        .output()
        .unwrap();
    assert!(diff.status.success(), "{}", text(&diff));
    // --keep-newest is apt's: a kmod rpm's kernel is in its release, not
    // its name. Refused as bad input, the repository as it was.
    let keep = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .env("GNUPGHOME", &key.0)
        .args(["build-repo", "--keep-newest", "1", "--repo"])
        .arg(&first)
        .output()
        .unwrap();
    assert_eq!(keep.status.code(), Some(2), "{}", text(&keep));
    assert!(
        text(&keep).contains("--keep-newest is for apt repositories"),
        "{}",
        text(&keep)
    );
    let unchanged = Command::new("diff")
        .args(["-r", "-x", "repomd.xml.asc"])
        .arg(&first)
        .arg(&second)
        .output()
        .unwrap();
    assert!(unchanged.status.success(), "{}", text(&unchanged));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_node_holding_the_previous_repomd_gets_its_files_and_older_ones_go() {
    let dir = scratch("rpm-window");
    let key = key(&dir);
    let (a, b, c) = (
        rpm(&dir, "nvpm-a"),
        rpm(&dir, "nvpm-b"),
        rpm(&dir, "nvpm-c"),
    );
    let repo = dir.join("repo");
    ok(build_repo(&repo, &key, &[&a]));
    // What a node read just before the next publish swapped repodata/.
    let held = dir.join("held");
    std::fs::create_dir_all(&held).unwrap();
    for name in ["repomd.xml", "repomd.xml.asc"] {
        std::fs::copy(repo.join("repodata").join(name), held.join(name)).unwrap();
    }
    ok(build_repo(&repo, &key, &[&b]));
    // The node goes on with the repomd.xml it holds against the new tree:
    // every file it names is there with the contents it names (dnf checks
    // each one's checksum), so it installs nvpm-a and does not see nvpm-b.
    let node = dir.join("node-view");
    ok(Command::new("cp")
        .arg("-a")
        .arg(&repo)
        .arg(&node)
        .output()
        .unwrap());
    for name in ["repomd.xml", "repomd.xml.asc"] {
        std::fs::copy(held.join(name), node.join("repodata").join(name)).unwrap();
    }
    let listed = dnf(&dir, "node", &node, true, &["repoquery", "--available"]);
    assert!(listed.status.success(), "{}", text(&listed));
    let said = text(&listed);
    assert!(
        said.contains("nvpm-a-0:1-1.noarch") && !said.contains("nvpm-b"),
        "{said}"
    );
    let installed = dnf_install(&dir, "node", &node, true, "nvpm-a");
    assert!(installed.status.success(), "{}", text(&installed));
    // One generation back is kept, no more: after a third publish the
    // first one's primary is gone, the second's and the third's are there.
    let primaries = |repo: &Path| {
        std::fs::read_dir(repo.join("repodata"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with("-primary.xml.gz")
            })
            .count()
    };
    assert_eq!(primaries(&repo), 2);
    ok(build_repo(&repo, &key, &[&c]));
    assert_eq!(primaries(&repo), 2);
    // The first generation's repomd.xml against the third tree: its files
    // are gone, so such a node must fetch repomd.xml again.
    for name in ["repomd.xml", "repomd.xml.asc"] {
        std::fs::copy(held.join(name), repo.join("repodata").join(name)).unwrap();
    }
    let stale = dnf(
        &dir,
        "node-stale",
        &repo,
        true,
        &["repoquery", "--available"],
    );
    assert!(!stale.status.success(), "{}", text(&stale));
    let _ = std::fs::remove_dir_all(&dir);
}
