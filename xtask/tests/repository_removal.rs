//! `build-repo --remove` as an operator and the nodes meet it (issue 58):
//! an old kernel's module package taken out, a removal that would strand
//! a published dependent refused with the repository unchanged, and a
//! node's real apt no longer seeing what went.

#[allow(dead_code)]
mod apt_common;
mod repository_common;

use apt_common::{apt, build_repo, deb_with, node, packages, text};
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
    let tree = |repo: &Path| {
        let out = Command::new("sh")
            .arg("-c")
            .arg("find . -type f | LC_ALL=C sort | xargs sha256sum")
            .current_dir(repo)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let before = tree(&repo);
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
    assert_eq!(tree(&repo), before, "a refused removal changes nothing");
    let nothing = build_repo(&repo, &k, &["--remove", "modules-none"], &[])
        .output()
        .unwrap();
    assert_eq!(nothing.status.code(), Some(2), "{}", text(&nothing));
    assert_eq!(tree(&repo), before);
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
