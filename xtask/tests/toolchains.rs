//! The toolchain facts of `packaging/distros.yaml` against the module's
//! minimum rustc (`rust-version` in kmod/Cargo.toml, declared nowhere else):
//! every deb entry's `rust_packages` must be a toolchain that distribution
//! ships (`rust_toolchains`) at that version or newer, so the -dkms package
//! never depends on a compiler too old to build the module
//! (docs/toolchains.md; issue 12 item 1).

use serde::Deserialize;
use std::path::PathBuf;

#[derive(Deserialize)]
struct Data {
    distros: Vec<Distro>,
}

#[derive(Deserialize)]
struct Distro {
    id: String,
    family: String,
    #[serde(default)]
    rust_packages: Vec<String>,
    #[serde(default)]
    rust_toolchains: Vec<Toolchain>,
    #[serde(default)]
    rpm: Option<RpmBlock>,
}

#[derive(Deserialize)]
struct RpmBlock {
    rust_packages: Vec<String>,
}

#[derive(Deserialize)]
struct Toolchain {
    packages: Vec<String>,
    version: String,
    suite: String,
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// "1.85" or "1.85.1" -> [1, 85] or [1, 85, 1].
fn version(text: &str) -> Vec<u32> {
    text.split('.')
        .map(|part| {
            part.parse()
                .unwrap_or_else(|_| panic!("not a version: {text}"))
        })
        .collect()
}

fn module_minimum() -> String {
    let manifest = std::fs::read_to_string(workspace().join("kmod/Cargo.toml")).unwrap();
    manifest
        .lines()
        .find_map(|line| {
            let value = line
                .strip_prefix("rust-version")?
                .trim_start()
                .strip_prefix('=')?;
            Some(value.trim().trim_matches('"').to_string())
        })
        .expect("kmod/Cargo.toml declares no rust-version")
}

#[test]
fn every_deb_entry_depends_on_a_shipped_toolchain_at_the_module_minimum_or_newer() {
    let min = module_minimum();
    let text = std::fs::read_to_string(workspace().join("packaging/distros.yaml")).unwrap();
    let data: Data = serde_saphyr::from_str(&text).unwrap();
    let debs: Vec<&Distro> = data.distros.iter().filter(|d| d.family == "deb").collect();
    assert!(
        debs.len() >= 5,
        "debian12, debian13, ubuntu2204, ubuntu2404, ubuntu2604"
    );
    for distro in debs {
        assert!(
            !distro.rust_toolchains.is_empty(),
            "{}: no rust_toolchains facts in packaging/distros.yaml",
            distro.id
        );
        let chosen = distro
            .rust_toolchains
            .iter()
            .find(|t| t.packages == distro.rust_packages)
            .unwrap_or_else(|| {
                panic!(
                    "{}: rust_packages {:?} is none of its rust_toolchains",
                    distro.id, distro.rust_packages
                )
            });
        assert!(
            version(&chosen.version) >= version(&min),
            "{}: rust_packages {:?} is rustc {} ({}), older than the module's minimum {min} (kmod/Cargo.toml)",
            distro.id,
            distro.rust_packages,
            chosen.version,
            chosen.suite
        );
    }
}

/// An rpm entry's Rust packages (`rpm.rust_packages`, required at the
/// module's minimum) are part of a toolchain it ships at that version or
/// newer: on SLES the library sources are `rust1.NN-src`, which no
/// unversioned name provides, so `rust-src` there would be a requirement
/// no repository meets (issue 23 item 4).
#[test]
fn every_rpm_entry_with_facts_requires_packages_of_a_shipped_toolchain() {
    let min = module_minimum();
    let text = std::fs::read_to_string(workspace().join("packaging/distros.yaml")).unwrap();
    let data: Data = serde_saphyr::from_str(&text).unwrap();
    let rpms: Vec<&Distro> = data
        .distros
        .iter()
        .filter(|d| d.family == "rpm" && !d.rust_toolchains.is_empty())
        .collect();
    assert!(
        rpms.len() >= 7,
        "rhel8-10, rocky9, alma9, sles15, sles16 have facts"
    );
    for distro in rpms {
        let wanted = &distro
            .rpm
            .as_ref()
            .expect("an rpm entry has an rpm block")
            .rust_packages;
        let fits = distro.rust_toolchains.iter().any(|t| {
            version(&t.version) >= version(&min) && wanted.iter().all(|p| t.packages.contains(p))
        });
        assert!(
            fits,
            "{}: rpm.rust_packages {wanted:?} is part of no toolchain at {min} or newer in rust_toolchains",
            distro.id
        );
    }
}

/// The -dkms deb's Depends name each Rust package with the module's minimum
/// (`rustc-web (>= 1.85)`), so apt never pairs the module with an older
/// toolchain of the same name (issue 23 item 4). Read from the golden
/// debian/control files, which the golden test keeps equal to what
/// build-deb renders.
#[test]
fn every_deb_entry_s_dkms_depends_carry_the_module_minimum() {
    let min = module_minimum();
    let text = std::fs::read_to_string(workspace().join("packaging/distros.yaml")).unwrap();
    let data: Data = serde_saphyr::from_str(&text).unwrap();
    for distro in data.distros.iter().filter(|d| d.family == "deb") {
        let path = workspace().join(format!("xtask/golden/deb/{}/debian/control", distro.id));
        let control =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let depends = control
            .split("\n\n")
            .find(|p| p.contains("Package: nvidia-peer-memory-dkms"))
            .and_then(|p| p.lines().find_map(|l| l.strip_prefix("Depends: ")))
            .unwrap_or_else(|| panic!("{}: no Depends in the -dkms paragraph", distro.id));
        let relations: Vec<&str> = depends.split(", ").collect();
        assert!(
            !distro.rust_packages.is_empty(),
            "{}: no rust_packages",
            distro.id
        );
        for package in &distro.rust_packages {
            let want = format!("{package} (>= {min})");
            assert!(
                relations.contains(&want.as_str()),
                "{}: -dkms Depends lacks {want:?}: {depends}",
                distro.id
            );
        }
    }
}

#[test]
fn the_minimum_is_edition_2024_or_later() {
    // kmod/Kbuild compiles the crate with --edition=2024, stable since 1.85.
    assert!(version(&module_minimum()) >= version("1.85"));
}
