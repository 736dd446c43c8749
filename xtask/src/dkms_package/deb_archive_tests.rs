use super::*;
use crate::tar_gz_entries::tar_gz_entries;

fn sample() -> DebPackage {
    DebPackage {
        control: vec![
            ("Package".into(), "p".into()),
            ("Description".into(), "short\n long".into()),
        ],
        scripts: vec![("postinst".into(), "#!/bin/sh\nset -e\n".into())],
        files: vec![
            DebFile {
                path: "usr/src/p-1/kmod/run.sh".into(),
                mode: 0o755,
                contents: b"#!/bin/sh\n".to_vec(),
            },
            DebFile {
                path: "usr/share/doc/p/copyright".into(),
                mode: 0o644,
                contents: b"abc".to_vec(),
            },
            DebFile {
                path: "usr/src/p-1/dkms.conf".into(),
                mode: 0o644,
                contents: vec![b'x'; 1025],
            },
        ],
        mtime: 1_700_000_000,
    }
}

/// The members of an ar archive: (header line, data).
fn ar_members(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    assert_eq!(&bytes[..8], b"!<arch>\n");
    let mut at = 8;
    let mut members = Vec::new();
    while at < bytes.len() {
        let header = String::from_utf8(bytes[at..at + 60].to_vec()).unwrap();
        assert!(header.ends_with("`\n"), "{header:?}");
        let size: usize = header[48..58].trim().parse().unwrap();
        members.push((header, bytes[at + 60..at + 60 + size].to_vec()));
        at += 60 + size + size % 2;
    }
    members
}

#[test]
fn deb_is_an_ar_of_debian_binary_control_and_data() {
    let bytes = write_deb(&sample()).unwrap();
    let members = ar_members(&bytes);
    let names: Vec<&str> = members.iter().map(|m| m.0[..16].trim_end()).collect();
    assert_eq!(names, ["debian-binary", "control.tar.gz", "data.tar.gz"]);
    assert_eq!(members[0].1, b"2.0\n");
    for (header, _) in &members {
        assert_eq!(header[16..28].trim_end(), "1700000000", "{header:?}");
    }

    let control = tar_gz_entries(&members[1].1);
    let paths: Vec<&str> = control.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["./", "./control", "./md5sums", "./postinst"]);
    assert_eq!(control[3].mode, 0o755, "scripts are executable");
    assert_eq!(control[1].data, b"Package: p\nDescription: short\n long\n");
    // md5("abc") is RFC 1321's test vector.
    let md5sums = String::from_utf8(control[2].data.clone()).unwrap();
    assert!(
        md5sums.contains("900150983cd24fb0d6963f7d28e17f72  usr/share/doc/p/copyright\n"),
        "{md5sums}"
    );
    assert_eq!(md5sums.lines().count(), 3);

    let data = tar_gz_entries(&members[2].1);
    let paths: Vec<&str> = data.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "./",
            "./usr/",
            "./usr/share/",
            "./usr/share/doc/",
            "./usr/share/doc/p/",
            "./usr/share/doc/p/copyright",
            "./usr/src/",
            "./usr/src/p-1/",
            "./usr/src/p-1/dkms.conf",
            "./usr/src/p-1/kmod/",
            "./usr/src/p-1/kmod/run.sh",
        ]
    );
    for e in &data {
        let path = &e.path;
        assert_eq!((e.uid, e.gid, e.owner.as_str()), (0, 0, "root"), "{path}");
        let want = if path.ends_with('/') || path.ends_with(".sh") {
            0o755
        } else {
            0o644
        };
        assert_eq!(e.mode, want, "{path}");
    }
}

#[test]
fn same_package_gives_the_same_bytes_in_any_file_order() {
    let a = sample();
    let mut b = sample();
    b.files.reverse();
    assert_eq!(write_deb(&a).unwrap(), write_deb(&b).unwrap());
}

#[test]
fn installed_size_counts_kib_per_file_and_one_per_directory() {
    let package = sample();
    // Files: 1 + 1 + 2 KiB; directories usr, usr/share, usr/share/doc,
    // usr/share/doc/p, usr/src, usr/src/p-1, usr/src/p-1/kmod and the root: 8;
    // DEBIAN/ and its one script: 2.
    assert_eq!(
        installed_size_kib(&package.files, &package.scripts),
        4 + 8 + 2
    );
    assert_eq!(installed_size_kib(&package.files, &[]), 4 + 8);
}

#[test]
fn long_paths_use_the_ustar_prefix() {
    let mut package = sample();
    let long = format!("usr/src/p-1/{}/file.c", "d".repeat(120));
    package.files.push(DebFile {
        path: long.clone(),
        mode: 0o644,
        contents: b"x".to_vec(),
    });
    let members = ar_members(&write_deb(&package).unwrap());
    let found = tar_gz_entries(&members[2].1)
        .iter()
        .any(|e| e.path == format!("./{long}"));
    assert!(found, "{long} not in the data archive");
}

#[test]
fn bad_paths_duplicates_and_empty_fields_are_refused() {
    for bad in ["/etc/x", "a/../b", "a//b", "./a", "dir/"] {
        let mut package = sample();
        package.files[0].path = bad.into();
        assert!(write_deb(&package).is_err(), "{bad:?}");
    }
    let mut package = sample();
    package.files[1].path = package.files[0].path.clone();
    let error = write_deb(&package).unwrap_err().to_string();
    assert!(error.contains("both installed as"), "{error}");
    let mut package = sample();
    package.files[1].path = "usr/src/p-1/kmod".into();
    assert!(write_deb(&package).is_err(), "a file where a directory is");
    let mut package = sample();
    package.control.push(("Depends".into(), " ".into()));
    let error = write_deb(&package).unwrap_err().to_string();
    assert!(error.contains("Depends is empty"), "{error}");
}
