//! `build-repo --remove` as an operator and the nodes meet it (issue 58):
//! an old kernel's module package taken out, a removal that would strand
//! a published dependent refused with the repository unchanged, and a
//! node's real apt no longer seeing what went.

#[allow(dead_code)]
mod apt_common;
mod repository_common;

use apt_common::{apt, build_repo, deb_with, node, packages, text, tree_hash};
use repository_common::{key, ok, scratch};
use std::path::Path;
use std::process::Command;

/// Issue 58: an old kernel's module package taken out; the one a published
/// metapackage depends on is refused (exit 2, the repository unchanged)
/// unless the metapackage goes too; the node's apt no longer sees them.
#[test]
fn remove_takes_packages_out_without_stranding_a_dependent() {
    let dir = scratch("remove");
    let k = key(&dir);
    let repo = dir.join("repo");
    let old = deb_with(&dir, "modules-old", "1.0-1", "");
    let cur = deb_with(&dir, "modules-cur", "1.0-1", "");
    let meta = deb_with(
        &dir,
        "modules-meta",
        "2.0-1",
        "Depends: modules-cur (= 1.0-1), kernel-image\n",
    );
    ok(build_repo(&repo, &k, &[], &[&old, &cur, &meta])
        .output()
        .unwrap());
    let before = tree_hash(&repo);
    let refused = build_repo(&repo, &k, &["--remove", "modules-cur"], &[])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains(
            "would leave modules-meta 2.0-1 (published) depending on modules-cur (= 1.0-1)"
        ),
        "{}",
        text(&refused)
    );
    assert_eq!(
        tree_hash(&repo),
        before,
        "a refused removal changes nothing"
    );
    let nothing = build_repo(&repo, &k, &["--remove", "modules-none"], &[])
        .output()
        .unwrap();
    assert_eq!(nothing.status.code(), Some(2), "{}", text(&nothing));
    assert_eq!(tree_hash(&repo), before);
    let removed = ok(
        build_repo(&repo, &k, &["--remove", "modules-old=1.0-1"], &[])
            .output()
            .unwrap(),
    );
    assert!(text(&removed).contains("Removed: "), "{}", text(&removed));
    assert!(!packages(&repo).contains("Package: modules-old"));
    assert!(
        !repo.join("pool/bookworm/main/m/modules-old").exists(),
        "its pool directory goes"
    );
    ok(build_repo(
        &repo,
        &k,
        &["--remove", "modules-cur", "--remove", "modules-meta"],
        &[],
    )
    .output()
    .unwrap());
    assert!(
        !packages(&repo).contains("Package: modules-"),
        "{}",
        packages(&repo)
    );
    let conf = node(&dir, &repo, "remove");
    ok(apt(&conf, &["update"]));
    let show = Command::new("apt-cache")
        .env("APT_CONFIG", &conf)
        .args(["show", "modules-cur"])
        .output()
        .unwrap();
    assert!(
        !show.status.success(),
        "the node still sees it: {}",
        text(&show)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 58: `--keep-newest N` prunes each kernel series to its newest N
/// kernels' module packages, keeps the one the metapackage's newest
/// version needs and takes the older metapackage versions that need what
/// goes; nothing to prune leaves the repository byte for byte; an rpm
/// repository is refused (exit 2); a node's apt sees what stays.
#[test]
fn keep_newest_prunes_each_kernel_series() {
    let dir = scratch("keep-newest");
    let k = key(&dir);
    let repo = dir.join("repo");
    let module = |kernel: &str| {
        deb_with(
            &dir,
            &format!("nvidia-peer-memory-modules-{kernel}"),
            "1.4.0-1",
            &format!("Depends: linux-image-{kernel}\n"),
        )
    };
    let meta = |version: &str, kernel: &str| {
        deb_with(
            &dir,
            "nvidia-peer-memory-modules-amd64",
            version,
            &format!("Depends: nvidia-peer-memory-modules-{kernel} (= 1.4.0-1)\n"),
        )
    };
    let debs = [
        module("6.1.0-9-amd64"),
        module("6.1.0-10-amd64"),
        module("6.1.0-11-amd64"),
        module("6.12.95+deb12-amd64"),
        meta("6.1.1-1+1.4.0.1", "6.1.0-9-amd64"),
        meta("6.1.2-1+1.4.0.1", "6.1.0-10-amd64"),
    ];
    let refs: Vec<&Path> = debs.iter().map(|p| p.as_path()).collect();
    ok(build_repo(&repo, &k, &[], &refs).output().unwrap());
    let listed = |repo: &Path| {
        let text = packages(repo);
        let mut out: Vec<String> = text
            .split("\n\n")
            .filter_map(|p| {
                let field = |f: &str| p.lines().find_map(|l| l.strip_prefix(f)).map(str::to_owned);
                Some(format!("{}={}", field("Package: ")?, field("Version: ")?))
            })
            .collect();
        out.sort();
        out
    };
    // The newest one of 6.1 is 11 (dpkg's order, not the text's 9), and
    // 10 stays: the metapackage's newest version needs it.
    let pruned = ok(build_repo(&repo, &k, &["--keep-newest", "1"], &[])
        .output()
        .unwrap());
    assert!(
        text(&pruned).contains("Pruned to the newest 1 kernel(s) of each series"),
        "{}",
        text(&pruned)
    );
    assert_eq!(
        listed(&repo),
        [
            "nvidia-peer-memory-modules-6.1.0-10-amd64=1.4.0-1",
            "nvidia-peer-memory-modules-6.1.0-11-amd64=1.4.0-1",
            "nvidia-peer-memory-modules-6.12.95+deb12-amd64=1.4.0-1",
            "nvidia-peer-memory-modules-amd64=6.1.2-1+1.4.0.1",
        ]
    );
    let before = tree_hash(&repo);
    let again = ok(build_repo(&repo, &k, &["--keep-newest", "1"], &[])
        .output()
        .unwrap());
    assert!(
        text(&again).contains("Nothing to prune"),
        "{}",
        text(&again)
    );
    assert_eq!(tree_hash(&repo), before, "nothing to prune changes nothing");
    let zero = build_repo(&repo, &k, &["--keep-newest", "0"], &[])
        .output()
        .unwrap();
    assert_eq!(zero.status.code(), Some(2), "{}", text(&zero));
    assert_eq!(tree_hash(&repo), before);
    let conf = node(&dir, &repo, "keep-newest");
    ok(apt(&conf, &["update"]));
    let policy = |name: &str| {
        Command::new("apt-cache")
            .env("APT_CONFIG", &conf)
            .args(["show", name])
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(!policy("nvidia-peer-memory-modules-6.1.0-9-amd64"));
    assert!(policy("nvidia-peer-memory-modules-6.1.0-10-amd64"));
    assert!(policy("nvidia-peer-memory-modules-6.12.95+deb12-amd64"));
    std::fs::remove_dir_all(&dir).unwrap();
}
