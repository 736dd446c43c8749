//! Tests of writer.rs: the source rpm as rpm reads it back.

use super::*;
use rpm::{DigestStatus, IndexSignatureTag};

fn sample() -> SourcePackage {
    SourcePackage {
        name: "demo".into(),
        version: "1.2.3".into(),
        release: "4".into(),
        summary: "Demo package".into(),
        description: "A demo.".into(),
        license: "MIT".into(),
        group: "Development/Tools".into(),
        url: Some("https://example.org/demo".into()),
        build_requires: vec![
            parse_dependency("gcc").unwrap(),
            parse_dependency("rust >= 1.70").unwrap(),
        ],
        changelog: vec![ChangelogEntry {
            time: 1_700_000_000,
            name: "Dev <dev@example.org> - 1.2.3-4".into(),
            text: "- First.".into(),
        }],
        build_time: 1_700_000_000,
        build_host: "build.example.org".into(),
        arch: "x86_64".into(),
        spec: SourceFile {
            name: "demo.spec".into(),
            contents: b"Name: demo\n".to_vec(),
            permissions: 0o644,
        },
        sources: vec![SourceFile {
            name: "demo-1.2.3.tar.gz".into(),
            contents: vec![0x1f, 0x8b, 1, 2, 3],
            permissions: 0o644,
        }],
    }
}

fn parse(bytes: &[u8]) -> Package {
    Package::parse(&mut &bytes[..]).expect("the written package parses")
}

#[test]
fn lead_says_source_package() {
    let bytes = write_source_rpm(&sample()).unwrap();
    assert_eq!(&bytes[..4], &[0xed, 0xab, 0xee, 0xdb], "rpm lead magic");
    assert_eq!(u16::from_be_bytes([bytes[6], bytes[7]]), 1, "lead type");
    assert_eq!(&bytes[10..10 + 11], b"demo-1.2.3-");
}

#[test]
fn header_marks_a_source_package() {
    let package = parse(&write_source_rpm(&sample()).unwrap());
    let metadata = &package.metadata;
    assert!(metadata.is_source_package());
    assert!(!metadata.header.entry_is_present(IndexTag::RPMTAG_SOURCERPM));
    assert_eq!(metadata.get_name().unwrap(), "demo");
    assert_eq!(metadata.get_version().unwrap(), "1.2.3");
    assert_eq!(metadata.get_release().unwrap(), "4");
    assert_eq!(metadata.get_build_time().unwrap(), 1_700_000_000);
    assert_eq!(metadata.get_build_host().unwrap(), "build.example.org");
    assert_eq!(metadata.get_group().unwrap(), "Development/Tools");
    assert_eq!(metadata.get_url().unwrap(), "https://example.org/demo");
}

/// A spec without URL (no home page yet) gives a header without the tag,
/// as rpmbuild writes it.
#[test]
fn no_url_leaves_the_tag_out() {
    let package = parse(
        &write_source_rpm(&SourcePackage {
            url: None,
            ..sample()
        })
        .unwrap(),
    );
    assert!(
        !package
            .metadata
            .header
            .entry_is_present(IndexTag::RPMTAG_URL)
    );
}

#[test]
fn files_are_sorted_owned_by_root_and_the_spec_is_flagged() {
    let package = parse(&write_source_rpm(&sample()).unwrap());
    let entries = package.metadata.get_file_entries().unwrap();
    let names: Vec<_> = entries.iter().map(|e| e.basename().to_owned()).collect();
    assert_eq!(names, ["demo-1.2.3.tar.gz", "demo.spec"]);
    for entry in &entries {
        assert_eq!(entry.dirname(), "");
        assert_eq!((entry.user(), entry.group()), ("root", "root"));
        assert_eq!(entry.modified_at(), rpm::Timestamp(1_700_000_000));
    }
    assert!(!entries[0].flags().contains(FileFlags::SPECFILE));
    assert!(entries[1].flags().contains(FileFlags::SPECFILE));
    assert_eq!(
        entries[1].digest().unwrap().as_hex(),
        sha256_hex(b"Name: demo\n")
    );
}

#[test]
fn requires_carry_build_requires_then_rpmlib_features() {
    let package = parse(&write_source_rpm(&sample()).unwrap());
    let requires = package.metadata.get_requires().unwrap();
    let names: Vec<_> = requires.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "gcc",
            "rust",
            "rpmlib(CompressedFileNames)",
            "rpmlib(FileDigests)"
        ]
    );
    assert_eq!(requires[1].version, "1.70");
    assert_eq!(
        requires[1].flags,
        DependencyFlags::GREATER | DependencyFlags::EQUAL
    );
}

#[test]
fn digests_and_size_check_out() {
    let bytes = write_source_rpm(&sample()).unwrap();
    let package = parse(&bytes);
    let report = package.check_digests().unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert!(
        matches!(report.header_sha256, DigestStatus::Verified),
        "{report:?}"
    );
    assert!(
        matches!(report.payload_sha256, DigestStatus::Verified),
        "{report:?}"
    );
    let header_and_payload = package
        .metadata
        .signature
        .get_entry_data_as_u32(IndexSignatureTag::RPMSIGTAG_SIZE)
        .unwrap();
    let offsets = package.metadata.get_package_segment_offsets();
    assert_eq!(
        u64::from(header_and_payload),
        bytes.len() as u64 - offsets.header
    );
}

#[test]
fn payload_is_a_cpio_of_the_files_under_bare_names() {
    let package = parse(&write_source_rpm(&sample()).unwrap());
    let mut cpio = Vec::new();
    std::io::copy(
        &mut flate2::read::GzDecoder::new(&package.payload[..]),
        &mut cpio,
    )
    .unwrap();
    let archive = String::from_utf8_lossy(&cpio);
    let spec_at = archive.find("demo.spec\0").expect("spec in the archive");
    let tar_at = archive
        .find("demo-1.2.3.tar.gz\0")
        .expect("tarball in the archive");
    assert!(
        tar_at < spec_at,
        "archive order follows the sorted file list"
    );
    assert!(archive.contains("Name: demo\n"));
    assert!(archive.contains("TRAILER!!!"));
    assert_eq!(cpio.len() % 4, 0);
}

#[test]
fn same_inputs_give_the_same_bytes_and_any_change_shows() {
    let first = write_source_rpm(&sample()).unwrap();
    assert_eq!(first, write_source_rpm(&sample()).unwrap());
    let mut later = sample();
    later.build_time += 1;
    assert_ne!(first, write_source_rpm(&later).unwrap());
}

#[test]
fn versions_rpm_cannot_carry_are_refused() {
    for bad in ["1.4-0", "", "1 4", "1/4"] {
        let mut package = sample();
        package.version = bad.into();
        let error = write_source_rpm(&package).unwrap_err().to_string();
        assert!(
            error.contains("cannot be carried by RPM"),
            "{bad:?}: {error}"
        );
    }
    let mut package = sample();
    package.release = "1-2".into();
    assert!(write_source_rpm(&package).is_err());
    check_version_part("version", "1.4.0~rc1+git.2^3_x").unwrap();
}

#[test]
fn duplicate_or_pathlike_file_names_are_refused() {
    let mut package = sample();
    package.sources[0].name = "demo.spec".into();
    assert!(write_source_rpm(&package).is_err());
    let mut package = sample();
    package.sources[0].name = "sub/demo.tar.gz".into();
    assert!(write_source_rpm(&package).is_err());
}

#[test]
fn dependency_parsing() {
    assert_eq!(
        parse_dependency("make").unwrap().flags,
        DependencyFlags::ANY
    );
    let dep = parse_dependency("kernel-devel = 5.14.0").unwrap();
    assert_eq!(
        (dep.name.as_str(), dep.version.as_str()),
        ("kernel-devel", "5.14.0")
    );
    assert_eq!(dep.flags, DependencyFlags::EQUAL);
    assert!(parse_dependency("a b").is_err());
    assert!(parse_dependency("a => 1").is_err());
    assert!(parse_dependency("(a or b)").is_err());
    assert!(parse_dependency("").is_err());
}

#[test]
fn rich_dependency_parsing() {
    let dep = parse_rich_dependency("(nvidia-kmod or kmod(nvidia.ko))").unwrap();
    assert_eq!(dep.name, "(nvidia-kmod or kmod(nvidia.ko))");
    assert_eq!(
        (dep.flags, dep.version.as_str()),
        (DependencyFlags::ANY, "")
    );
    // No boolean operator, an unclosed group, a control character.
    assert!(parse_rich_dependency("(nvidia-kmod)").is_err());
    assert!(parse_rich_dependency("(a or b").is_err());
    assert!(parse_rich_dependency("(a or\nb)").is_err());
}
