//! Tests of spec.rs: the rendered specs against their golden files, each
//! route's module package, the data checks and the header fields read back.

use super::*;
use std::path::PathBuf;

/// Fixed inputs of the golden specs (Sun Nov 22 2026 03:30:45 UTC), so
/// they change only when a template, the data or the version does.
const GOLDEN_EPOCH: u64 = 1_795_318_245;
const GOLDEN_RELEASE: u32 = 1;
/// A fixed version too: a version bump alone does not touch the goldens.
const GOLDEN_VERSION: &str = "1.4.0";

/// The golden copy of the spec rendered for `distro_id`.
fn golden_path(distro_id: &str) -> PathBuf {
    crate::workspace::path(&format!("xtask/golden/rpm/{distro_id}.spec"))
}

/// Every rpm distro entry's rendered spec equals `xtask/golden/rpm/<id>.spec`.
/// Regenerate after an intended change with
/// `UPDATE_GOLDEN=1 cargo test -p xtask golden` (the same switch as the
/// deb golden test) and review the diff.
#[test]
fn rendered_specs_match_their_golden_files() {
    let packaging = Packaging::load().unwrap();
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut stale = Vec::new();
    let mut checked = 0;
    for distro in packaging.family(Family::Rpm) {
        let spec = render(
            &packaging,
            distro,
            GOLDEN_VERSION,
            GOLDEN_RELEASE,
            GOLDEN_EPOCH,
        )
        .unwrap();
        let path = golden_path(&distro.id);
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &spec).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(spec.as_str()) {
            stale.push(path.display().to_string());
        }
        checked += 1;
    }
    assert!(
        checked >= 8,
        "rhel8/9/10, rocky9, alma9, fedora, sles15, sles16 expected"
    );
    assert!(
        stale.is_empty(),
        "rendered spec differs from (or lacks) its golden file: {stale:?}\n\
         if the change is intended, run `UPDATE_GOLDEN=1 cargo test -p xtask golden` and review `git diff xtask/golden/rpm`"
    );
    // No golden file without a distro entry (a removed entry's leftover).
    let ids: Vec<String> = packaging
        .family(Family::Rpm)
        .map(|d| format!("{}.spec", d.id))
        .collect();
    for entry in std::fs::read_dir(crate::workspace::path("xtask/golden/rpm")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            ids.contains(&name),
            "xtask/golden/rpm/{name} has no rpm distro entry; delete it"
        );
    }
}

#[test]
fn each_route_renders_its_own_module_package() {
    let packaging = Packaging::load().unwrap();
    let sles = packaging.find("sles15").unwrap();
    let spec = render(&packaging, sles, "2.0.1", 3, GOLDEN_EPOCH).unwrap();
    assert!(spec.contains("\nVersion:        2.0.1\n"));
    assert!(spec.contains("\nRelease:        3%{?dist}\n"));
    assert!(spec.contains("\nExclusiveArch:  x86_64 aarch64\n"));
    assert!(spec.contains("\n%suse_kernel_module_package -n %{name} "));
    assert!(!spec.contains("\n%kernel_module_package "));
    assert!(spec.contains("%config(noreplace) %{_sysconfdir}/infiniband/nv_peer_mem.conf"));
    assert!(spec.contains("xz --check=crc32"));
    // SLES 16: the same KMP route, zstd modules, kernel-macros for the
    // KMP macros (packaging/distros.yaml, sles16).
    let sles16 = render(
        &packaging,
        packaging.find("sles16").unwrap(),
        "2.0.1",
        3,
        GOLDEN_EPOCH,
    )
    .unwrap();
    assert!(sles16.contains("\n%suse_kernel_module_package -n %{name} "));
    assert!(sles16.contains("zstd -q -T0 --rm \"$ko\"") && !sles16.contains("xz --check"));
    assert!(sles16.contains("\nBuildRequires:  kernel-macros\n"));
    assert!(sles16.contains("install kernel-macros and the kernel's devel package"));
    assert!(
        !spec.contains("%dir /lib/modules"),
        "the kernel's directories are not ours"
    );
    assert!(
        !spec.contains("{{") && !spec.contains("{%"),
        "unrendered template syntax"
    );
    let requires: Vec<_> = build_requires(&spec)
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    let rpm = sles.rpm.as_ref().unwrap();
    for package in rpm.build_requires.iter().chain(&rpm.rust_packages) {
        assert!(requires.contains(package), "{package} in {requires:?}");
    }
    assert!(requires.contains(&rpm.kernel_devel));

    let rhel = render(
        &packaging,
        packaging.find("rhel9").unwrap(),
        "2.0.1",
        3,
        GOLDEN_EPOCH,
    )
    .unwrap();
    assert!(rhel.contains(
        "\n%global kmod_rel %{release}%{?kmod_kernel_tag:.%{kmod_kernel_tag}}\n%kernel_module_package -n %{name} -r %{kmod_rel} -p %{SOURCE1} -f %{SOURCE2} default\n"
    ));
    assert!(rhel.contains("BuildRequires:  rust-src >= "));
    let fedora = render(
        &packaging,
        packaging.find("fedora").unwrap(),
        "2.0.1",
        3,
        GOLDEN_EPOCH,
    )
    .unwrap();
    assert!(!fedora.contains("_module_package") && !fedora.contains("Source1:"));
    assert!(fedora.contains("\n%package dkms\n") && fedora.contains("\n%package common\n"));
    let sources = render_module_sources(&packaging, sles, "2.0.1", 3, GOLDEN_EPOCH).unwrap();
    assert_eq!(sources.len(), 2);
    assert!(
        sources[1]
            .1
            .contains("%{kernel_module_directory}/%2-%1/updates/nv_peer_mem.ko.xz")
    );
    assert!(
        render_module_sources(
            &packaging,
            packaging.find("fedora").unwrap(),
            "2.0.1",
            3,
            GOLDEN_EPOCH
        )
        .unwrap()
        .is_empty()
    );
}

#[test]
fn changelog_and_description_are_read_back() {
    let packaging = Packaging::load().unwrap();
    let spec = render(
        &packaging,
        packaging.find("rhel9").unwrap(),
        "2.0.1",
        1,
        GOLDEN_EPOCH,
    )
    .unwrap();
    let entries = changelog(&spec).unwrap();
    assert_eq!(entries.len(), 1);
    // Sun Nov 22 2026, 12:00 UTC.
    assert_eq!(entries[0].time, 1_795_348_800);
    assert!(entries[0].name.ends_with("- 2.0.1-1"));
    assert!(entries[0].text.starts_with("- Version "));
    let (summary, description) = summary_and_description(&spec).unwrap();
    assert_eq!(
        summary,
        "NVIDIA GPUDirect RDMA peer memory client kernel module"
    );
    assert!(description.starts_with("nv_peer_mem lets"));
    assert!(
        !description.contains("%package"),
        "description stops at the next section"
    );
}

#[test]
fn changelog_parsing_rejects_bad_headings() {
    let spec = "%changelog\n* Sun Nox 22 2026 A <a@b> - 1-1\n- x\n";
    assert!(changelog(spec).is_err());
    let spec = "%changelog\n- text before any heading\n";
    assert!(changelog(spec).is_err());
    assert_eq!(noon_utc("Jan", "1", "1970").unwrap(), 43_200);
    assert_eq!(noon_utc("Feb", "29", "2000").unwrap(), 951_825_600);
}

#[test]
fn an_incomplete_rpm_entry_or_a_deb_entry_is_refused_by_name() {
    let base = "{route: kmod, group: G, arches: [x86_64], kernel_devel: kernel-devel, macros: m, flavor: default, module_dir: extra/nvidia_peer_memory, compression: xz, build_requires: [gcc], rust_packages: [rust], dkms_requires: [dkms], prerequisites: ['(a or b)']";
    let entry = |id: &str, extra: &str| {
        format!("  - {{id: {id}, name: A, family: rpm, dist: .el1, rpm: {base}{extra}}}}}\n")
    };
    let text = format!(
        "maintainer: A B <a@b.example>\ndistros:\n{}{}{}  - {{id: deb1, name: B, family: deb}}\n  - {{id: el4, name: D, family: rpm}}\n",
        entry("el1", ""),
        entry("el2", ", module_dir: updates").replace("module_dir: extra/nvidia_peer_memory, ", ""),
        entry("el3", "").replace("[gcc]", "['gcc >> 1']"),
    );
    let packaging = Packaging::parse(&text).unwrap();
    assert!(validate_rpm_distro(packaging.find("el1").unwrap()).is_ok());
    let error = |id: &str| {
        format!(
            "{:#}",
            validate_rpm_distro(packaging.find(id).unwrap()).unwrap_err()
        )
    };
    let e = error("el2");
    assert!(
        e.contains("el2") && e.contains("module_dir: extra/nvidia_peer_memory"),
        "{e}"
    );
    let e = error("el3");
    assert!(e.contains("el3") && e.contains("operator"), "{e}");
    let e = error("deb1");
    assert!(e.contains("rpm one"), "{e}");
    let e = error("el4");
    assert!(e.contains("el4") && e.contains("rpm:"), "{e}");
    // `dist` must be there (empty is a value: SLES) and look like %dist.
    let dists = Packaging::parse(&format!(
        "maintainer: A B <a@b.example>\ndistros:\n{}{}{}",
        entry("d1", "").replace("dist: .el1, ", ""),
        entry("d2", "").replace("dist: .el1", "dist: el9"),
        entry("d3", "").replace("dist: .el1", "dist: \"\""),
    ))
    .unwrap();
    let e = format!(
        "{:#}",
        validate_rpm_distro(dists.find("d1").unwrap()).unwrap_err()
    );
    assert!(e.contains("d1") && e.contains("no `dist`"), "{e}");
    let e = format!(
        "{:#}",
        validate_rpm_distro(dists.find("d2").unwrap()).unwrap_err()
    );
    assert!(e.contains("d2") && e.contains("dist: el9"), "{e}");
    assert_eq!(dist(dists.find("d3").unwrap()).unwrap(), "");
    assert_eq!(dist(packaging.find("el1").unwrap()).unwrap(), ".el1");
    // A dkms-route entry must not carry module-package fields.
    let dkms = Packaging::parse(&format!(
        "maintainer: A B <a@b.example>\ndistros:\n{}",
        entry("f1", "").replace("route: kmod", "route: dkms")
    ))
    .unwrap();
    let e = format!(
        "{:#}",
        validate_rpm_distro(dkms.find("f1").unwrap()).unwrap_err()
    );
    assert!(e.contains("route dkms") && e.contains("remove"), "{e}");
}
