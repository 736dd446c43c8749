//! `build-repo` as a repository operator and the nodes meet it (issue 40):
//! the built xtask binary publishing small packages made with dpkg-deb
//! into apt repositories signed with a throwaway gpg key, read by real
//! apt-get on scratch nodes. Publishes at once lose nothing, a node
//! updating throughout publishes never fails, a publish from an older
//! checkout reaches the node, an expired Release is refused and
//! `--refresh` renews it, indexes stay by hash, and control fields never
//! become paths outside the repository. (`--remove`: repository_removal.rs;
//! the helpers both use: apt_common/.) The key and
//! helpers shared with rpm_repositories.rs (dnf) are in repository_common/.

#[allow(dead_code)]
mod apt_common;
mod repository_common;

use apt_common::{
    apt, build_repo, by_hash, deb, node, packages, packages_gz_sha256, release_field, text,
};
use repository_common::{key, ok, scratch};
use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn publishes_at_once_lose_nothing() {
    let dir = scratch("concurrent");
    let k = key(&dir);
    let repo = dir.join("repo");
    let debs: Vec<PathBuf> = (0..6)
        .map(|i| deb(&dir, &format!("pkg{i}"), "1.0-1", None))
        .collect();
    let children: Vec<_> = debs
        .iter()
        .map(|d| build_repo(&repo, &k, &[], &[d]).spawn().unwrap())
        .collect();
    for child in children {
        ok(child.wait_with_output().unwrap());
    }
    let index = packages(&repo);
    for i in 0..6 {
        assert!(
            index.contains(&format!("Package: pkg{i}\n")),
            "pkg{i} lost:\n{index}"
        );
        assert!(
            repo.join(format!("pool/bookworm/main/p/pkg{i}/pkg{i}_1.0-1_all.deb"))
                .is_file()
        );
    }
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("staging"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_node_updating_throughout_publishes_never_fails() {
    let dir = scratch("update-loop");
    let k = key(&dir);
    let repo = dir.join("repo");
    ok(
        build_repo(&repo, &k, &[], &[&deb(&dir, "first", "1.0-1", None)])
            .output()
            .unwrap(),
    );
    let conf = node(&dir, &repo, "loop");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let updater = {
        let (conf, done) = (conf.clone(), done.clone());
        std::thread::spawn(move || {
            let mut runs = 0;
            let mut failures = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) || runs < 3 {
                let out = apt(&conf, &["update"]);
                runs += 1;
                if !out.status.success()
                    || text(&out).contains("Hash Sum mismatch")
                    || text(&out).contains("W: ")
                {
                    failures.push(text(&out));
                }
            }
            (runs, failures)
        })
    };
    for i in 0..6 {
        let d = deb(&dir, &format!("next{i}"), "1.0-1", None);
        ok(build_repo(&repo, &k, &[], &[&d]).output().unwrap());
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let (runs, failures) = updater.join().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {runs} updates failed:\n{}",
        failures.len(),
        failures.join("\n---\n")
    );
    // and the node has the last publish
    ok(apt(&conf, &["update"]));
    let show = Command::new("apt-cache")
        .env("APT_CONFIG", &conf)
        .args(["show", "next5"])
        .output()
        .unwrap();
    assert!(show.status.success(), "{}", text(&show));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_publish_from_an_older_checkout_reaches_the_node() {
    let dir = scratch("older");
    let k = key(&dir);
    let repo = dir.join("repo");
    ok(
        build_repo(&repo, &k, &[], &[&deb(&dir, "newer", "1.0-1", None)])
            .output()
            .unwrap(),
    );
    let first = release_field(&repo, "Date");
    let conf = node(&dir, &repo, "older");
    ok(apt(&conf, &["update"]));
    // an older checkout: an earlier SOURCE_DATE_EPOCH dated the Release
    // before the cached one, which apt kept
    let older = deb(&dir, "fromold", "1.0-1", None);
    ok(build_repo(&repo, &k, &[], &[&older])
        .env("SOURCE_DATE_EPOCH", "1000000000")
        .output()
        .unwrap());
    let second = release_field(&repo, "Date");
    let seconds = |d: &str| {
        let out = Command::new("date")
            .args(["-u", "-d", d, "+%s"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    // Never dated before the cached one (an equal Date is taken by apt).
    assert!(seconds(&second) >= seconds(&first), "{first} then {second}");
    ok(apt(&conf, &["update"]));
    let show = Command::new("apt-cache")
        .env("APT_CONFIG", &conf)
        .args(["show", "fromold"])
        .output()
        .unwrap();
    assert!(
        show.status.success(),
        "the node did not take the newer Release: {}",
        text(&show)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_expired_release_is_refused_and_refresh_renews_it() {
    let dir = scratch("expiry");
    let k = key(&dir);
    let repo = dir.join("repo");
    // published 40 days ago, valid for 30
    let then = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 40 * 86_400)
        .to_string();
    ok(
        build_repo(&repo, &k, &[], &[&deb(&dir, "pkg", "1.0-1", None)])
            .env("NVPM_PUBLISH_TIME", &then)
            .output()
            .unwrap(),
    );
    assert!(!release_field(&repo, "Valid-Until").is_empty());
    let conf = node(&dir, &repo, "expiry");
    let out = apt(&conf, &["update"]);
    let said = text(&out);
    assert!(
        said.contains("expired"),
        "apt did not refuse the expired Release:\n{said}"
    );
    // the refresh: no packages, dated and signed again
    let refreshed = ok(build_repo(&repo, &k, &["--refresh"], &[]).output().unwrap());
    assert!(String::from_utf8_lossy(&refreshed.stdout).contains("Refreshed:"));
    let out = ok(apt(&conf, &["update"]));
    assert!(!text(&out).contains("expired"), "{}", text(&out));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn indexes_stay_by_hash_for_a_day_or_while_a_release_names_them() {
    let dir = scratch("by-hash");
    let k = key(&dir);
    let repo = dir.join("repo");
    ok(
        build_repo(&repo, &k, &[], &[&deb(&dir, "aa", "1.0-1", None)])
            .output()
            .unwrap(),
    );
    assert_eq!(release_field(&repo, "Acquire-By-Hash"), "yes");
    let first = packages_gz_sha256(&repo);
    ok(
        build_repo(&repo, &k, &[], &[&deb(&dir, "bb", "1.0-1", None)])
            .output()
            .unwrap(),
    );
    let second = packages_gz_sha256(&repo);
    assert!(by_hash(&repo, &first).is_file() && by_hash(&repo, &second).is_file());
    ok(
        build_repo(&repo, &k, &[], &[&deb(&dir, "cc", "1.0-1", None)])
            .output()
            .unwrap(),
    );
    // Two Releases back, written less than a day ago: kept for a node or
    // mirror slower than the publishes (issue 58).
    let third = packages_gz_sha256(&repo);
    assert!(
        by_hash(&repo, &first).is_file(),
        "a copy of the last day is kept"
    );
    // A publish two days later: what neither of the last two Releases
    // names and is older than a day goes.
    let later = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 2 * 86_400)
        .to_string();
    ok(
        build_repo(&repo, &k, &[], &[&deb(&dir, "dd", "1.0-1", None)])
            .env("NVPM_PUBLISH_TIME", &later)
            .output()
            .unwrap(),
    );
    assert!(
        !by_hash(&repo, &first).exists(),
        "older than a day and unnamed: pruned"
    );
    assert!(
        !by_hash(&repo, &second).exists(),
        "older than a day and unnamed: pruned"
    );
    assert!(
        by_hash(&repo, &third).is_file() && by_hash(&repo, &packages_gz_sha256(&repo)).is_file()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--by-hash-hours`: a site whose nodes or mirrors lag more than a day
/// keeps the indexes longer; the same publishes as above, two days apart,
/// keep what the default would have pruned, and four days prune it.
#[test]
fn the_by_hash_window_is_the_operators() {
    let dir = scratch("by-hash-hours");
    let k = key(&dir);
    let repo = dir.join("repo");
    let days_on = |days: u64| {
        (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + days * 86_400)
            .to_string()
    };
    let publish = |name: &str, days: u64| {
        ok(build_repo(
            &repo,
            &k,
            &["--by-hash-hours", "72"],
            &[&deb(&dir, name, "1.0-1", None)],
        )
        .env("NVPM_PUBLISH_TIME", days_on(days))
        .output()
        .unwrap())
    };
    publish("aa", 0);
    let first = packages_gz_sha256(&repo);
    publish("bb", 0);
    publish("cc", 0);
    publish("dd", 2);
    assert!(
        by_hash(&repo, &first).is_file(),
        "unnamed for two days, kept for three"
    );
    publish("ee", 4);
    assert!(
        !by_hash(&repo, &first).exists(),
        "older than three days: pruned"
    );
    let zero = build_repo(&repo, &k, &["--by-hash-hours", "0", "--refresh"], &[])
        .output()
        .unwrap();
    assert_eq!(zero.status.code(), Some(2), "{}", text(&zero));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn control_fields_never_become_paths_outside_the_repository() {
    let dir = scratch("fields");
    let k = key(&dir);
    let repo = dir.join("repo");
    ok(
        build_repo(&repo, &k, &[], &[&deb(&dir, "good", "1.0-1", None)])
            .output()
            .unwrap(),
    );
    let before = packages(&repo);
    // dpkg-deb checks Package and Version itself; Source it takes as given
    for (name, source) in [("escape", "../../../../x"), ("escape2", "x/../../y")] {
        let bad = deb(&dir, name, "1.0-1", Some(source));
        let out = build_repo(&repo, &k, &[], &[&bad]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            text(&out).contains("not valid Debian Policy syntax"),
            "{}",
            text(&out)
        );
    }
    assert_eq!(packages(&repo), before);
    assert!(!dir.join("x").exists() && !Path::new("/x").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
