use super::*;

const MINIMAL: &str = "maintainer: A B <a@b.example>\ndistros:\n  - id: debian12\n    name: Debian 12\n    family: deb\n    codename: bookworm\n    standards_version: 4.6.2\n    rust_packages: [rustc-web, rust-web-src]\n    dkms_addon_build_depends: dh-sequence-dkms\n  - id: rhel9\n    name: RHEL 9\n    family: rpm\n";

#[test]
fn the_workspace_data_file_loads_and_every_deb_entry_is_complete() {
    let packaging = Packaging::load().unwrap();
    let debs: Vec<_> = packaging.family(Family::Deb).collect();
    assert!(
        debs.len() >= 5,
        "debian12, debian13, ubuntu2204, ubuntu2404, ubuntu2604 expected"
    );
    for distro in debs {
        distro.validate_deb().unwrap();
    }
    assert_eq!(
        packaging.find("debian12").unwrap().rust_packages,
        ["rustc-web", "rust-web-src"]
    );
}

#[test]
fn release_defaults_to_one_and_family_fields_are_optional() {
    let packaging = Packaging::parse(MINIMAL).unwrap();
    assert_eq!(packaging.release, 1);
    let rhel = packaging.find("rhel9").unwrap();
    assert_eq!(rhel.family, Family::Rpm);
    assert!(rhel.codename.is_none());
    assert_eq!(packaging.ids(Some(Family::Deb)), ["debian12"]);
}

#[test]
fn os_release_maps_to_distro_ids() {
    let cases = [
        ("ID=\"rhel\"\nVERSION_ID=\"9.4\"\n", "rhel9"),
        ("ID=\"centos\"\nVERSION_ID=\"8\"\n", "rhel8"),
        ("ID=\"rocky\"\nVERSION_ID=\"9.3\"\n", "rocky9"),
        ("ID=\"almalinux\"\nVERSION_ID=\"9.4\"\n", "alma9"),
        ("ID=fedora\nVERSION_ID=41\n", "fedora"),
        ("ID=\"sles\"\nVERSION_ID=\"15.6\"\n", "sles15"),
        ("ID=debian\nVERSION_ID=\"12\"\n", "debian12"),
        ("NAME=x\nID=ubuntu\nVERSION_ID=\"22.04\"\n", "ubuntu2204"),
        ("ID=ubuntu\nVERSION_ID=\"26.04\"\n", "ubuntu2604"),
        ("ID=\"sles\"\nVERSION_ID=\"16.0\"\n", "sles16"),
    ];
    for (text, want) in cases {
        assert_eq!(host_distro_id(text).as_deref(), Some(want), "{text}");
    }
    assert_eq!(host_distro_id(""), None);
    assert_eq!(
        host_distro_id("ID=debian\n"),
        None,
        "testing/sid have no VERSION_ID"
    );
}

#[test]
fn choosing_a_distro_names_the_route_and_its_family() {
    let packaging = Packaging::parse(MINIMAL).unwrap();
    let rpm = packaging
        .choose(Family::Rpm, "build-srpm", None, "rhel9")
        .unwrap();
    assert_eq!(rpm.family, Family::Rpm);
    let error = packaging
        .choose(Family::Rpm, "build-srpm", Some("plan9"), "rhel9")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("build-srpm knows: rhel9") && !error.contains("debian12"),
        "{error}"
    );
    let error = packaging
        .choose(Family::Rpm, "build-srpm", Some("debian12"), "rhel9")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("is a deb distribution") && error.contains("build-deb"),
        "{error}"
    );
    let error = packaging
        .choose(Family::Deb, "build-deb", Some("rhel9"), "debian12")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("is an rpm distribution") && error.contains("build-srpm"),
        "{error}"
    );
}

#[test]
fn unknown_distro_lists_the_known_ones() {
    let packaging = Packaging::parse(MINIMAL).unwrap();
    let error = packaging.find("plan9").unwrap_err().to_string();
    assert!(error.contains("debian12, rhel9"), "{error}");
}

#[test]
fn malformed_data_is_refused() {
    const M: &str = "maintainer: A B <a@b.example>\n";
    for (text, expected) in [
        ("distros: [".to_owned(), "malformed"),
        (
            "distros:\n  - {id: a, name: A, family: deb}\n".to_owned(),
            "missing field `maintainer`",
        ),
        (
            "maintainer: nobody\ndistros:\n  - {id: a, name: A, family: deb}\n".to_owned(),
            "Name <email",
        ),
        (
            format!("{M}distros:\n  - id: x\n    name: y\n    family: nix\n"),
            "`family` must be",
        ),
        (
            format!("{M}distros:\n  - id: a1\n    name: A\n    family: deb\n    codenmae: x\n"),
            "codenmae",
        ),
        (
            format!("{M}release: 0\ndistros:\n  - {{id: a, name: A, family: deb}}\n"),
            "release: 0",
        ),
        (
            format!("{M}release: 1000000000\ndistros:\n  - {{id: a, name: A, family: deb}}\n"),
            "1 to 999999999",
        ),
        (format!("{M}distros: []\n"), "no distros"),
        (
            format!(
                "{M}homepage: http://h.example\ndistros:\n  - {{id: a, name: A, family: deb}}\n"
            ),
            "https:// URL",
        ),
        (
            format!("{M}homepage: https://\ndistros:\n  - {{id: a, name: A, family: deb}}\n"),
            "https:// URL",
        ),
        (
            format!(
                "{M}distros:\n  - {{id: a, name: A, family: deb}}\n  - {{id: b, name: B, family: deb}}\n"
            ),
            "same version_suffix",
        ),
        (
            format!("{M}distros:\n  - {{id: Debian12, name: A, family: deb}}\n"),
            "lowercase",
        ),
        (
            format!(
                "{M}distros:\n  - {{id: a, name: A, family: deb}}\n  - {{id: a, name: B, family: rpm}}\n"
            ),
            "twice",
        ),
    ] {
        let error = format!("{:#}", Packaging::parse(&text).unwrap_err());
        assert!(error.contains(expected), "{text:?} gave {error}");
    }
}

#[test]
fn data_errors_name_the_line_and_the_field_in_our_words() {
    const M: &str = "maintainer: A B <a@b.example>\n";
    for (text, expected) in [
        (
            format!(
                "{M}distros:\n  - id: a1\n    name: A\n    family: deb\n  - id: a1\n    name: B\n    family: rpm\n"
            ),
            "line 6: distro id `a1` appears twice",
        ),
        (
            format!("{M}distros:\n  - id: a1\n    name: A\n    name: B\n    family: deb\n"),
            "line 5: `name` is given twice at the same level",
        ),
        (
            format!("{M}release: 1\nrelease: 2\ndistros: []\n"),
            "line 3: `release` is given twice",
        ),
        (
            format!(
                "{M}distros:\n  - id: a1\n    name: A\n    family: deb\n    dh_with_dkms: maybe\n"
            ),
            "line 6: `dh_with_dkms` must be true or false, not `maybe`",
        ),
        (
            format!(
                "{M}distros:\n  - id: a1\n    name: A\n    family: deb\n    rust_packages: rustc\n"
            ),
            "line 6: `rust_packages` must be a list of package names",
        ),
        (
            format!("{M}release: x\ndistros: []\n"),
            "line 2: `release` must be a whole number",
        ),
        (
            format!("{M}distros:\n  - id: a1\n    name: A\n    family: nix\n"),
            "line 5: `family` must be `deb` or `rpm`, not `nix`",
        ),
    ] {
        let error = format!("{:#}", Packaging::parse(&text).unwrap_err());
        assert!(error.contains(expected), "{text:?} gave {error}");
        assert!(!error.contains("DuplicateKeyPolicy"), "{error}");
    }
}

#[test]
fn a_deb_entry_missing_a_field_is_named() {
    let packaging = Packaging::parse(
        "maintainer: A B <a@b.example>\ndistros:\n  - {id: deb1, name: A, family: deb, codename: x, rust_packages: [rustc], dkms_addon_build_depends: dh-sequence-dkms}\n",
    )
    .unwrap();
    let error = packaging
        .find("deb1")
        .unwrap()
        .validate_deb()
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("deb1") && error.contains("standards_version"),
        "{error}"
    );
}

#[test]
fn an_rpm_entry_is_refused_for_deb() {
    let packaging = Packaging::parse(MINIMAL).unwrap();
    let error = packaging
        .find("rhel9")
        .unwrap()
        .validate_deb()
        .unwrap_err()
        .to_string();
    assert!(error.contains("rpm distribution"), "{error}");
}

#[test]
fn a_version_suffix_that_would_not_sort_below_the_bare_revision_is_refused() {
    for (suffix, ok) in [
        ("~deb12", true),
        ("~ubuntu22.04.1", true),
        // Debian's backports form: this package is no backport.
        ("~bpo12+1", false),
        ("+deb12u1", false),
        ("bpo12", false),
        ("~", false),
        ("~a_b", false),
    ] {
        let text = format!(
            "maintainer: A B <a@b.example>\ndistros:\n  - {{id: deb1, name: A, family: deb, codename: x, standards_version: 4.6.2, rust_packages: [rustc], dkms_addon_build_depends: dh-sequence-dkms, ofed_packages: [mlnx-ofed-kernel-dkms], version_suffix: \"{suffix}\"}}\n"
        );
        let packaging = Packaging::parse(&text).unwrap();
        let result = packaging.find("deb1").unwrap().validate_deb();
        assert_eq!(result.is_ok(), ok, "{suffix}: {result:?}");
        if let Err(error) = result {
            assert!(error.to_string().contains("version_suffix"), "{error}");
        }
    }
}

#[test]
fn a_deb_entry_without_ofed_packages_or_with_a_bad_name_is_refused() {
    for (ofed, expected) in [
        ("", "has no `ofed_packages`"),
        (
            ", ofed_packages: [Doca_OFED]",
            "`Doca_OFED` in ofed_packages",
        ),
    ] {
        let text = format!(
            "maintainer: A B <a@b.example>\ndistros:\n  - {{id: deb1, name: A, family: deb, codename: x, standards_version: 4.6.2, rust_packages: [rustc], dkms_addon_build_depends: dh-sequence-dkms{ofed}}}\n"
        );
        let packaging = Packaging::parse(&text).unwrap();
        let error = packaging.find("deb1").unwrap().validate_deb().unwrap_err();
        assert!(error.to_string().contains(expected), "{ofed}: {error}");
    }
}
