//! Deterministic `.tar.gz` writer: the same entries give the same bytes on
//! every run and every host (reproducible-builds.org practice).
//!
//! - entries are sorted by path, parent directories are added explicitly;
//! - owner 0/0 named root, modes normalised to 0644 (0755 for executables
//!   and directories), mtime of every entry = one fixed timestamp
//!   (`workspace::source_date_epoch()` unless set);
//! - gzip header without file name and with mtime 0;
//! - written to a temporary file beside the target and renamed into place
//!   only when complete, so a failure never leaves a partial archive.

use anyhow::{Context, Result, bail};
use flate2::{Compression, GzBuilder};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

#[derive(Debug)]
enum Entry {
    Directory,
    File { bytes: Vec<u8>, executable: bool },
}

/// An archive being assembled in memory; every path sits below `prefix/`.
#[derive(Debug)]
pub struct Tarball {
    prefix: String,
    entries: BTreeMap<String, Entry>,
    mtime: Option<u64>,
}

impl Tarball {
    /// A new archive whose entries all live under `prefix/` (e.g.
    /// `nvidia-peer-memory-1.4.0`).
    pub fn new(prefix: &str) -> Tarball {
        Tarball {
            prefix: prefix.trim_end_matches('/').to_owned(),
            entries: BTreeMap::new(),
            mtime: None,
        }
    }

    /// Stamps every entry with `seconds` instead of
    /// `workspace::source_date_epoch()`.
    pub fn set_mtime(&mut self, seconds: u64) {
        self.mtime = Some(seconds);
    }

    /// Adds a regular file at `path_in_tar` (relative to the prefix).
    /// Mode 0755 when `executable`, else 0644. Adding a path twice is an error.
    pub fn add_file(
        &mut self,
        path_in_tar: &str,
        bytes: impl Into<Vec<u8>>,
        executable: bool,
    ) -> Result<()> {
        check_relative(path_in_tar)?;
        let full = format!("{}/{}", self.prefix, path_in_tar);
        if self.entries.contains_key(&full) {
            bail!(
                "{full} added to the tarball twice (a template and a source file with the same name?)"
            );
        }
        if self.entries.contains_key(&format!("{full}/")) {
            bail!("{full} is both a directory and a file in the tarball");
        }
        // Parent directories: explicit 0755 entries, so extraction does not
        // depend on the unpacking user's umask.
        let mut parent = Path::new(&full).parent();
        while let Some(dir) = parent.filter(|d| !d.as_os_str().is_empty()) {
            let key = format!("{}/", dir.to_str().expect("paths are built from &str"));
            if let Some(Entry::File { .. }) = self.entries.get(key.trim_end_matches('/')) {
                bail!("{key} is both a file and a directory in the tarball");
            }
            self.entries.insert(key, Entry::Directory);
            parent = dir.parent();
        }
        self.entries.insert(
            full,
            Entry::File {
                bytes: bytes.into(),
                executable,
            },
        );
        Ok(())
    }

    /// Adds the file at `source` on disk as `path_in_tar`; executable when
    /// any execute bit is set on disk (git records only that bit).
    pub fn add_path(&mut self, path_in_tar: &str, source: &Path) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let metadata = std::fs::metadata(source)
            .with_context(|| format!("reading {} for the tarball", source.display()))?;
        if !metadata.is_file() {
            bail!(
                "{} is not a regular file; only files go into the tarball",
                source.display()
            );
        }
        let bytes = std::fs::read(source)
            .with_context(|| format!("reading {} for the tarball", source.display()))?;
        self.add_file(
            path_in_tar,
            bytes,
            metadata.permissions().mode() & 0o111 != 0,
        )
    }

    /// The finished `.tar.gz`, in memory.
    pub fn to_tar_gz(&self) -> Result<Vec<u8>> {
        let mtime = match self.mtime {
            Some(seconds) => seconds,
            None => crate::workspace::source_date_epoch()?,
        };
        // No file name, mtime 0 and a fixed OS byte in the gzip header.
        // Level 1: on the module sources (~130 KB of tar) it is ~20% larger
        // than level 6 (34 vs 28 KB) in a third of the time, which matters
        // for build-deb's 10 ms budget more than 6 KB do.
        let gzip = GzBuilder::new()
            .mtime(0)
            .operating_system(255)
            .write(Vec::new(), Compression::fast());
        let mut builder = tar::Builder::new(gzip);
        for (path, entry) in &self.entries {
            let mut header = tar::Header::new_gnu();
            header.set_uid(0);
            header.set_gid(0);
            header.set_username("root")?;
            header.set_groupname("root")?;
            header.set_mtime(mtime);
            match entry {
                Entry::Directory => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_mode(0o755);
                    header.set_size(0);
                    builder.append_data(&mut header, path, std::io::empty())?;
                }
                Entry::File { bytes, executable } => {
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_mode(if *executable { 0o755 } else { 0o644 });
                    header.set_size(bytes.len() as u64);
                    builder.append_data(&mut header, path, bytes.as_slice())?;
                }
            }
        }
        let gzip = builder.into_inner().context("finishing the tar stream")?;
        gzip.finish().context("finishing the gzip stream")
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory
/// and a rename, so `path` is either absent/unchanged or complete.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("{} has no file name", path.display()))?;
    let temp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> Result<()> {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(bytes)?;
        // No fsync: the rename already guarantees that no reader ever sees a
        // partial file from a failed run; surviving a power cut is not worth
        // several milliseconds for an artifact that one command rebuilds.
        std::fs::rename(&temp, path)?;
        Ok(())
    })();
    if let Err(error) = result {
        let _ = std::fs::remove_file(&temp);
        return Err(error).with_context(|| {
            format!(
                "writing {}; check that {} exists and is writable",
                path.display(),
                dir.display()
            )
        });
    }
    Ok(())
}

fn check_relative(path: &str) -> Result<()> {
    if path.is_empty()
        || path.starts_with('/')
        || path.ends_with('/')
        || path
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        bail!("tarball path {path:?} must be relative, without `.`/`..` or empty components");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tar_gz_entries::tar_gz_entries;

    fn sample(order: &[(&str, &str, bool)]) -> Tarball {
        let mut tarball = Tarball::new("pkg-1.0");
        tarball.set_mtime(1_700_000_000);
        for (path, text, executable) in order {
            tarball
                .add_file(path, text.as_bytes(), *executable)
                .unwrap();
        }
        tarball
    }

    /// path, mode, uid, gid, mtime, owner name, contents
    #[test]
    fn insertion_order_does_not_change_the_bytes() {
        let a = sample(&[
            ("b/x.c", "x", false),
            ("a", "a", false),
            ("b/run", "#!", true),
        ]);
        let b = sample(&[
            ("b/run", "#!", true),
            ("a", "a", false),
            ("b/x.c", "x", false),
        ]);
        assert_eq!(a.to_tar_gz().unwrap(), b.to_tar_gz().unwrap());
    }

    #[test]
    fn entries_are_sorted_owned_by_root_stamped_and_mode_normalised() {
        let bytes = sample(&[
            ("kmod/z.c", "z", false),
            ("debian/rules", "#!/usr/bin/make -f", true),
        ])
        .to_tar_gz()
        .unwrap();
        let got = tar_gz_entries(&bytes);
        let paths: Vec<_> = got.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "pkg-1.0/",
                "pkg-1.0/debian/",
                "pkg-1.0/debian/rules",
                "pkg-1.0/kmod/",
                "pkg-1.0/kmod/z.c"
            ]
        );
        for e in &got {
            let path = &e.path;
            assert_eq!(
                (e.uid, e.gid, e.mtime, e.owner.as_str()),
                (0, 0, 1_700_000_000, "root"),
                "{path}"
            );
            let want = if path.ends_with('/') || path.ends_with("rules") {
                0o755
            } else {
                0o644
            };
            assert_eq!(e.mode, want, "{path}");
        }
        assert_eq!(got[2].data, b"#!/usr/bin/make -f");
    }

    #[test]
    fn gzip_header_has_no_name_and_no_timestamp() {
        let bytes = sample(&[("a", "a", false)]).to_tar_gz().unwrap();
        assert_eq!(&bytes[..3], [0x1f, 0x8b, 8]);
        assert_eq!(bytes[3], 0, "FLG: no FNAME/FEXTRA/FCOMMENT");
        assert_eq!(&bytes[4..8], [0, 0, 0, 0], "MTIME");
    }

    #[test]
    fn long_paths_survive() {
        let long = format!("kmod/{}/file.c", "d".repeat(150));
        let bytes = sample(&[(long.as_str(), "x", false)]).to_tar_gz().unwrap();
        assert!(
            tar_gz_entries(&bytes)
                .iter()
                .any(|e| e.path == format!("pkg-1.0/{long}"))
        );
    }

    #[test]
    fn bad_paths_and_duplicates_are_refused() {
        let mut tarball = Tarball::new("p");
        for bad in ["", "/etc/x", "a/../b", "a//b", "./a", "dir/"] {
            assert!(tarball.add_file(bad, "x", false).is_err(), "{bad:?}");
        }
        tarball.add_file("a/b", "x", false).unwrap();
        assert!(tarball.add_file("a/b", "y", false).is_err());
        assert!(
            tarball.add_file("a/b/c", "y", false).is_err(),
            "a/b is a file"
        );
    }

    #[test]
    fn atomic_write_replaces_completely_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("xtask-tarball-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("out.tar.gz");
        write_atomically(&target, b"first").unwrap();
        write_atomically(&target, b"second").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"second");
        // A directory that does not exist: error names the fix, nothing written.
        let missing = dir.join("missing/out.tar.gz");
        let error = format!("{:#}", write_atomically(&missing, b"x").unwrap_err());
        assert!(error.contains("exists and is writable"), "{error}");
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, [std::ffi::OsString::from("out.tar.gz")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
