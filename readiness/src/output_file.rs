//! Writes a report file so that its reader sees the old file or the new
//! one, never a part: a temporary file in the same directory, flushed,
//! then renamed over the target (rename(2) replaces it atomically within
//! one file system). The temporary name starts with a dot, which neither
//! reader takes: node_exporter's textfile collector reads only `*.prom`,
//! NFD's local source skips dotfiles (docs/monitoring.md).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `contents` to `dir/name`; on failure nothing is left behind and
/// the message names the file and the reason.
pub fn write_atomically(
    dir: &Path,
    name: &str,
    contents: impl AsRef<[u8]>,
) -> Result<PathBuf, String> {
    let target = dir.join(name);
    let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut f = fs::File::create(&temporary)?;
        f.write_all(contents.as_ref())?;
        f.sync_all()?;
        fs::rename(&temporary, &target)
    })();
    match written {
        Ok(()) => Ok(target),
        Err(e) => {
            let _ = fs::remove_file(&temporary);
            Err(format!(
                "cannot write {}: {e} (does {} exist, and may this user write there?)",
                target.display(),
                dir.display()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("readiness-output-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let d = scratch("replace");
        fs::write(d.join("x.prom"), "old\n").unwrap();
        let path = write_atomically(&d, "x.prom", "new\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new\n");
        let names: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("x.prom")]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_it() {
        let d = scratch("missing").join("absent");
        let e = write_atomically(&d, "x.prom", "new\n").unwrap_err();
        assert!(e.contains("absent/x.prom") && e.contains("does"), "{e}");
    }
}
