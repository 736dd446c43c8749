use super::*;

const PACKAGE: &str = "nvidia-peer-memory-dkms";

#[test]
fn misc_depends_is_substituted_and_merged_as_dpkg_does() {
    let merged = expand_substvars(
        "dkms, make, a | b, ${misc:Depends}, ${shlibs:Depends}",
        "dkms (>= 2.1.0.0)",
    )
    .unwrap();
    assert_eq!(merged, "dkms (>= 2.1.0.0), make, a | b");
    // Two versioned entries of one package both stay; an alternative is
    // not merged with a plain entry; exact duplicates go.
    assert_eq!(
        expand_substvars(
            "dkms (<< 9), dkms | x, make, ${misc:Depends}, make",
            "dkms (>= 2)"
        )
        .unwrap(),
        "dkms (<< 9), dkms | x, make, dkms (>= 2)"
    );
    assert_eq!(
        expand_substvars("no variables, here", "x").unwrap(),
        "no variables, here"
    );
    let error = expand_substvars("${foo:Bar}", "x").unwrap_err().to_string();
    assert!(error.contains("${foo:Bar}"), "{error}");
}

#[test]
fn control_paragraphs_keep_continuation_lines() {
    let text = "Source: s\nSection: kernel\n\n# comment\nPackage: p\nDescription: short\n long line\n .\n more\n";
    let parsed = paragraphs(text).unwrap();
    assert_eq!(parsed.len(), 2);
    assert_eq!(
        parsed[1],
        [
            ("Package".to_owned(), "p".to_owned()),
            (
                "Description".to_owned(),
                "short\n long line\n .\n more".to_owned()
            )
        ]
    );
    assert!(paragraphs(" starts indented\n").is_err());
    assert!(paragraphs("no colon\n").is_err());
}

#[test]
fn binary_fields_come_in_dpkg_order_with_the_source_fields_inherited() {
    let control = format!(
        "Source: {SOURCE_PACKAGE}\nSection: kernel\nPriority: optional\nMaintainer: M <m@x>\nBuild-Depends: debhelper-compat (= 13)\nHomepage: https://h\n\n\
         Package: other\nArchitecture: all\nDescription: x\n y\n\n\
         Package: {PACKAGE}\nArchitecture: all\nDepends: dkms, ${{misc:Depends}}\nConflicts: c\nDescription: d\n long\n"
    );
    let fields = control_fields(&control, PACKAGE, "1.0-2", "dkms (>= 2.1.0.0)").unwrap();
    let names: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "Package",
            "Source",
            "Version",
            "Architecture",
            "Maintainer",
            "Depends",
            "Conflicts",
            "Section",
            "Priority",
            "Homepage",
            "Description"
        ]
    );
    assert_eq!(fields[2].1, "1.0-2");
    assert_eq!(fields[5].1, "dkms (>= 2.1.0.0)");
    assert_eq!(fields[10].1, "d\n long");

    let unknown = control.replace("Conflicts: c", "X-Custom: c");
    let error = control_fields(&unknown, PACKAGE, "1.0-2", "dkms")
        .unwrap_err()
        .to_string();
    assert!(error.contains("X-Custom"), "{error}");
    let missing = control.replace(&format!("Package: {PACKAGE}"), "Package: renamed");
    assert!(control_fields(&missing, PACKAGE, "1.0-2", "dkms").is_err());
}
