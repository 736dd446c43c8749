//! build-deb's tests: golden files, version mapping, rendering.

use super::*;
use crate::distro::Packaging;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Fixed inputs for the golden files, so that they change only when a
/// template or distros.yaml does (not with every commit or version bump).
const GOLDEN_VERSION: &str = "1.4.0";
const GOLDEN_EPOCH: u64 = 1_795_305_600; // 2026-11-22 00:00:00 UTC
const BLESS_VAR: &str = "UPDATE_GOLDEN"; // the same switch as the srpm golden test

fn golden_dir(id: &str) -> PathBuf {
    workspace::path("xtask/golden/deb").join(id)
}

/// dkms.conf and debian/ as build-deb renders them for @distro with the
/// golden inputs.
fn golden_render(packaging: &Packaging, distro: &Distro) -> BTreeMap<String, String> {
    let plan = Plan {
        packaging: packaging.clone(),
        distro: distro.clone(),
        workspace_version: GOLDEN_VERSION.to_owned(),
        package_version: debian_upstream_version(GOLDEN_VERSION).unwrap(),
        release: 1,
        source_date_epoch: GOLDEN_EPOCH,
        out: PathBuf::from("/nonexistent"),
    };
    let mut context = plan.base_context();
    Deb::add_context(&plan, &mut context);
    std::iter::once(pipeline::dkms_conf(&context).unwrap())
        .chain(debian_files(&context).unwrap())
        .map(|f| (f.path, f.contents))
        .collect()
}

fn files_below(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let key = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(key, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Fails when a template or the data file changes without the golden
/// files; `UPDATE_GOLDEN=1 cargo test -p xtask golden` rewrites them
/// (review with `git diff xtask/golden`).
#[test]
fn rendered_debian_matches_golden_files_for_every_deb_distro() {
    let packaging = Packaging::load().unwrap();
    let bless = std::env::var_os(BLESS_VAR).is_some();
    let mut failures = Vec::new();
    for distro in packaging.family(Family::Deb) {
        let rendered = golden_render(&packaging, distro);
        let dir = golden_dir(&distro.id);
        if bless {
            let _ = std::fs::remove_dir_all(&dir);
            for (path, contents) in &rendered {
                let target = dir.join(path);
                std::fs::create_dir_all(target.parent().unwrap()).unwrap();
                std::fs::write(target, contents).unwrap();
            }
            continue;
        }
        let golden = files_below(&dir);
        for path in rendered
            .keys()
            .chain(golden.keys())
            .collect::<std::collections::BTreeSet<_>>()
        {
            if rendered.get(path) != golden.get(path) {
                failures.push(format!("{}/{path}", dir.display()));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "rendered files differ from their golden files:\n  {}\nIf the change is intended, run `{BLESS_VAR}=1 cargo test -p xtask golden` and review `git diff xtask/golden`.",
        failures.join("\n  ")
    );
}

#[test]
fn golden_render_has_the_debian_essentials() {
    let packaging = Packaging::load().unwrap();
    let distro = packaging.find("debian12").unwrap();
    let files = golden_render(&packaging, distro);
    assert_eq!(files["debian/source/format"], "3.0 (quilt)\n");
    let control = &files["debian/control"];
    assert!(
        control.contains("debhelper-compat (= 13), dh-sequence-dkms"),
        "{control}"
    );
    assert!(control.contains("Standards-Version: 4.6.2"), "{control}");
    assert!(
        control.contains(
            "rustc-web (>= 1.85), rust-web-src (>= 1.85), mlnx-ofed-kernel-dkms | mlnx-ofed-kernel-modules"
        ),
        "{control}"
    );
    assert!(
        files["debian/changelog"]
            .starts_with("nvidia-peer-memory (1.4.0-1~deb12) bookworm; urgency=medium\n")
    );
    assert!(files["debian/changelog"].contains("  Sun, 22 Nov 2026 00:00:00 +0000\n"));
    assert!(files["dkms.conf"].contains("PACKAGE_VERSION=\"1.4.0\""));
    assert!(files["debian/nvidia-peer-memory-dkms.install"].contains("usr/src/nv_peer_mem-1.4.0/"));
    let ubuntu = golden_render(&packaging, packaging.find("ubuntu2404").unwrap());
    assert!(
        ubuntu["debian/control"].contains("rustc-1.85 (>= 1.85), rust-1.85-src (>= 1.85), mlnx")
    );
    assert!(
        ubuntu["debian/changelog"]
            .starts_with("nvidia-peer-memory (1.4.0-1~ubuntu24.04.1) noble; urgency=medium\n")
    );
    // Ubuntu 26.04's -dkms accepts MLNX_OFED's names and Ubuntu's own
    // DOCA-OFED packages (packaging/distros.yaml, ofed_packages).
    let resolute = golden_render(&packaging, packaging.find("ubuntu2604").unwrap());
    assert!(resolute["debian/control"].contains(
        "rustc (>= 1.85), rust-src (>= 1.85), mlnx-ofed-kernel-dkms | mlnx-ofed-kernel-modules | doca-ofed-26.01-dkms | doca-ofed-3.4-dkms | linux-modules-doca-ofed-26.01-generic | linux-modules-doca-ofed-3.4-generic, ${misc:Depends}"
    ));
    assert!(
        resolute["debian/changelog"]
            .starts_with("nvidia-peer-memory (1.4.0-1~ubuntu26.04.1) resolute; urgency=medium\n")
    );
    let trixie = golden_render(&packaging, packaging.find("debian13").unwrap());
    assert!(
        trixie["debian/changelog"]
            .starts_with("nvidia-peer-memory (1.4.0-1) trixie; urgency=medium\n")
    );
}

#[test]
fn debian_versions() {
    assert_eq!(debian_upstream_version("1.4.0").unwrap(), "1.4.0");
    assert_eq!(debian_upstream_version("1.4.0-rc.1").unwrap(), "1.4.0~rc.1");
    assert_eq!(debian_upstream_version("1.4.0+git5").unwrap(), "1.4.0+git5");
    for bad in ["", "v1.4.0", "1:1.4", "1.4_0", "1.4 0"] {
        let error = debian_upstream_version(bad).unwrap_err().to_string();
        assert!(error.contains("Cargo.toml"), "{bad:?}: {error}");
    }
}

#[test]
fn same_inputs_give_the_same_bytes_and_the_expected_layout() {
    let scratch = |name: &str| {
        let dir = std::env::temp_dir().join(format!("xtask-deb-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    };
    let (a, b) = (scratch("det-a"), scratch("det-b"));
    let request = |out: &Path| Request {
        out: out.to_owned(),
        distro: Some("debian12".to_owned()),
        release: None,
    };
    let first = pipeline::build::<Deb>(&request(&a)).unwrap().path;
    let second = pipeline::build::<Deb>(&request(&b)).unwrap().path;
    let bytes = std::fs::read(&first).unwrap();
    assert_eq!(bytes, std::fs::read(&second).unwrap());
    assert_eq!(
        first.file_name().unwrap().to_string_lossy(),
        format!("nvidia-peer-memory_{}.orig.tar.gz", workspace::version())
    );

    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes.as_slice()));
    let paths: Vec<String> = archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
        .collect();
    let prefix = format!("nvidia-peer-memory-{}/", workspace::version());
    assert!(paths.iter().all(|p| p.starts_with(&prefix)), "{paths:?}");
    for want in [
        "kmod/VERSION",
        "dkms.conf",
        "debian/rules",
        "debian/control",
        "packaging/nv_peer_mem-service",
    ] {
        assert!(
            paths.contains(&format!("{prefix}{want}")),
            "{want} missing from {paths:?}"
        );
    }
    assert!(
        !paths.iter().any(|p| p.contains("/kmod/tests/")),
        "host tests are not module sources"
    );
    std::fs::remove_dir_all(&a).unwrap();
    std::fs::remove_dir_all(&b).unwrap();
}

/// The home page fields come from distros.yaml's `homepage:` alone: with
/// none, debian/control, debian/copyright and the unit name no page (in
/// particular not Mellanox's nv_peer_memory, another project); with one,
/// Homepage and Source carry it.
#[test]
fn home_page_fields_follow_distros_yaml() {
    let mut packaging = Packaging::load().unwrap();
    let distro = packaging.family(Family::Deb).next().unwrap().clone();
    packaging.homepage = None;
    let rendered = golden_render(&packaging, &distro);
    for (path, contents) in &rendered {
        for word in [
            "Homepage:",
            "Source: http",
            "Documentation=http",
            "Mellanox/nv_peer_memory",
        ] {
            assert!(
                !contents.contains(word),
                "{path} has {word:?} with no homepage set:\n{contents}"
            );
        }
    }
    packaging.homepage = Some("https://h.example.org/nv".to_owned());
    let rendered = golden_render(&packaging, &distro);
    let control = &rendered["debian/control"];
    assert!(
        control.contains("\nHomepage: https://h.example.org/nv\nRules-Requires-Root: no\n"),
        "{control}"
    );
    let copyright = &rendered["debian/copyright"];
    assert!(
        copyright.contains("\nSource: https://h.example.org/nv\nComment:"),
        "{copyright}"
    );
}
