use super::*;

const SPEC: &str = "\
%{!?KVERSION:%global KVERSION %(uname -r)}
%if \"%{KVERSION}\" == \"\"
%global ignored inside-if
%endif
%global module mod
%global dkms_dir /usr/src/%{module}-%{version}

Name:           foo
Version:        1.2
Release:        3%{?dist}
Summary:        main summary
License:        MIT
Group:          System/Kernel
URL:            https://example.org
Requires:       kernel
Conflicts:      %{name}-dkms

%description
main

%package dkms
Summary:        dkms summary
BuildArch:      noarch
Requires:       dkms, make gcc >= 12
Requires(post): coreutils
Conflicts:      %{name}

%description dkms
Sources in %{dkms_dir}; 100%% sure.

%post
depmod

%post dkms
dkms add -m %{module} -v %{version}
exit 0


%preun dkms
dkms remove -m %{module}

%files
/lib/x.ko

%files dkms
%{dkms_dir}

%changelog
* Sun Nov 22 2026 A <a@b> - 1.2-3
- first
";

#[test]
fn subpackage_has_its_tags_inherited_tags_dependencies_scripts_and_files() {
    let package = read(SPEC, "dkms", "").unwrap();
    assert_eq!(package.name, "foo-dkms");
    let tags: Vec<(&str, &str)> = package
        .tags
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        tags,
        [
            ("BuildArch", "noarch"),
            ("Group", "System/Kernel"),
            ("License", "MIT"),
            ("Release", "3"),
            ("Summary", "dkms summary"),
            ("URL", "https://example.org"),
            ("Version", "1.2"),
        ]
    );
    assert_eq!(
        package.dependencies,
        [
            ("Requires".into(), vec![], "dkms, make gcc >= 12".into()),
            ("Requires".into(), vec!["post".into()], "coreutils".into()),
            ("Conflicts".into(), vec![], "foo".into()),
        ]
    );
    assert_eq!(
        package.description,
        "Sources in /usr/src/mod-1.2; 100% sure."
    );
    let scripts: Vec<(&str, &str)> = package
        .scriptlets
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        scripts,
        [
            ("post", "dkms add -m mod -v 1.2\nexit 0"),
            ("preun", "dkms remove -m mod")
        ]
    );
    assert_eq!(package.files, [(false, "/usr/src/mod-1.2".to_owned())]);
}

#[test]
fn a_missing_subpackage_or_unknown_spec_language_is_refused() {
    let error = read(SPEC, "devel", "").unwrap_err().to_string();
    assert!(error.contains("no `%package devel`"), "{error}");

    for (change, expected) in [
        (
            ("%{module} -v %{version}", "%{module} -v %{undefined_macro}"),
            "undefined_macro",
        ),
        (("dkms add", "%if 1\ndkms add"), "conditional"),
        (
            (
                "%files dkms\n%{dkms_dir}",
                "%files dkms\n%config %{dkms_dir}",
            ),
            "%dir",
        ),
        (("%post dkms", "%post -p /bin/bash dkms"), "options"),
        (
            (
                "Conflicts:      %{name}\n",
                "Conflicts:      %{name}\n  stray line\n",
            ),
            "Tag: value",
        ),
        (
            ("%preun dkms", "%verifyscript dkms"),
            "does not build this section",
        ),
    ] {
        assert!(SPEC.contains(change.0), "{change:?}");
        let spec = SPEC.replace(change.0, change.1);
        let error = format!("{:#}", read(&spec, "dkms", "").unwrap_err());
        assert!(error.contains(expected), "{change:?}: {error}");
    }
}

#[test]
fn the_build_hosts_dist_reaches_release_and_what_uses_it() {
    let package = read(SPEC, "dkms", ".el9").unwrap();
    assert_eq!(package.tag("Release").unwrap(), "3.el9");
    let bare = read(SPEC, "dkms", "").unwrap();
    assert_eq!(bare.tag("Release").unwrap(), "3");
}

#[test]
fn the_real_spec_has_a_dkms_subpackage_build_dkms_can_read() {
    let packaging = crate::distro::Packaging::load().unwrap();
    for distro in packaging.family(crate::distro::Family::Rpm) {
        let spec =
            crate::srpm::spec::render(&packaging, distro, "1.4.0", 1, 1_795_305_600).unwrap();
        let dist = crate::srpm::spec::dist(distro).unwrap();
        let package = read(&spec, "dkms", dist).unwrap();
        assert_eq!(package.name, "nvidia_peer_memory-dkms", "{}", distro.id);
        // rpmbuild on that distribution's build host appends its %dist.
        assert_eq!(package.tag("Release").unwrap(), format!("1{dist}"));
        assert_eq!(package.tag("BuildArch").unwrap(), "noarch");
        assert_eq!(
            package.files,
            [(false, "/usr/src/nv_peer_mem-1.4.0".to_owned())]
        );
        assert!(package.scriptlets["post"].contains("dkms add -m nv_peer_mem -v 1.4.0"));
        assert!(package.scriptlets["preun"].contains("dkms remove -m nv_peer_mem -v 1.4.0"));
        for requirement in &distro.rpm.as_ref().unwrap().dkms_requires {
            assert!(
                package
                    .dependencies
                    .iter()
                    .any(|(tag, _, text)| tag == "Requires" && text == requirement),
                "{}: {requirement} not required",
                distro.id
            );
        }
    }
}
