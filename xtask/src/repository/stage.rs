//! A repository is never half-updated: build-repo works on a staged copy
//! (pool files hard-linked, they never change once published) and swaps it
//! for the served directory in one renameat2(RENAME_EXCHANGE), so a client
//! or a web server sees the old repository or the new one, never a mix;
//! any failure before the swap leaves the old one untouched.

use anyhow::{Context, Result, bail};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The staged copy of a repository, removed when dropped unless published.
pub struct Stage {
    pub dir: PathBuf,
    target: PathBuf,
}

impl Stage {
    /// Stages @target (created if it does not exist) next to it.
    pub fn new(target: &Path) -> Result<Stage> {
        let parent = target
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = target
            .file_name()
            .context("--repo must name a directory")?
            .to_string_lossy();
        let dir = parent.join(format!(".{name}.staging-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir(&dir).with_context(|| {
            format!(
                "creating {} (--repo's parent must be writable)",
                dir.display()
            )
        })?;
        let stage = Stage {
            dir,
            target: target.to_owned(),
        };
        if target.exists() {
            link_tree(target, &stage.dir)?;
        }
        Ok(stage)
    }

    /// Swaps the staged repository in; the old one is removed.
    pub fn publish(self) -> Result<()> {
        if self.target.exists() {
            exchange(&self.dir, &self.target)?;
        } else {
            std::fs::rename(&self.dir, &self.target)
                .with_context(|| format!("renaming into {}", self.target.display()))?;
        }
        // self.dir now holds the old repository; Drop removes it.
        Ok(())
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Copies the tree @from into @to: directories made, files hard-linked
/// (pool files are immutable; metadata is rewritten, never edited in
/// place, so the served copy is not changed through a link).
fn link_tree(from: &Path, to: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if kind.is_dir() {
            std::fs::create_dir(&dest)?;
            link_tree(&entry.path(), &dest)?;
        } else if kind.is_file() {
            std::fs::hard_link(entry.path(), &dest)
                .or_else(|_| std::fs::copy(entry.path(), &dest).map(|_| ()))
                .with_context(|| format!("staging {}", entry.path().display()))?;
        } else {
            bail!(
                "{}: not a file or directory; a repository built by build-repo holds none",
                entry.path().display()
            );
        }
    }
    Ok(())
}

/// Exchanges two paths atomically (Linux renameat2, RENAME_EXCHANGE).
fn exchange(a: &Path, b: &Path) -> Result<()> {
    let a_c = CString::new(a.as_os_str().as_bytes())?;
    let b_c = CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: both pointers are NUL-terminated strings that live until the
    // call returns; AT_FDCWD makes them relative to the working directory,
    // as std's own path calls are; renameat2 reads them and nothing else.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a_c.as_ptr(),
            libc::AT_FDCWD,
            b_c.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| {
            format!(
                "swapping the new repository {} for {} (renameat2 RENAME_EXCHANGE needs both on one Linux file system)",
                a.display(),
                b.display()
            )
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_stage_leaves_the_repository_as_it_was_and_publish_swaps() {
        let root = std::env::temp_dir().join(format!("xtask-stage-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let repo = root.join("repo");
        std::fs::create_dir_all(repo.join("pool")).unwrap();
        std::fs::write(repo.join("pool/a.deb"), b"a").unwrap();
        std::fs::write(repo.join("Release"), b"old").unwrap();
        {
            let stage = Stage::new(&repo).unwrap();
            std::fs::write(stage.dir.join("pool/b.deb"), b"b").unwrap();
            std::fs::remove_file(stage.dir.join("Release")).unwrap();
            std::fs::write(stage.dir.join("Release"), b"new").unwrap();
            // dropped: a failure before publish
        }
        assert!(!repo.join("pool/b.deb").exists());
        assert_eq!(std::fs::read(repo.join("Release")).unwrap(), b"old");
        let stage = Stage::new(&repo).unwrap();
        std::fs::write(stage.dir.join("pool/b.deb"), b"b").unwrap();
        std::fs::remove_file(stage.dir.join("Release")).unwrap();
        std::fs::write(stage.dir.join("Release"), b"new").unwrap();
        stage.publish().unwrap();
        assert_eq!(std::fs::read(repo.join("Release")).unwrap(), b"new");
        assert_eq!(std::fs::read(repo.join("pool/a.deb")).unwrap(), b"a");
        assert_eq!(
            std::fs::read_dir(&root).unwrap().count(),
            1,
            "no staging left"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
