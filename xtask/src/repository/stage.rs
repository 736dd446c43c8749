//! A repository is never half-updated: build-repo works on a staged copy
//! (pool files hard-linked, they never change once published) and swaps it
//! for the served directory in one renameat2(RENAME_EXCHANGE), so a client
//! or a web server sees the old repository or the new one, never a mix;
//! any failure before the swap leaves the old one untouched.
//!
//! One publisher at a time: a `flock` on `.<name>.lock` beside the
//! repository (reprepro keeps a lock file in its database directory, aptly
//! one on its database, for the same reason) is held from the first read
//! of the repository to the swap, so a second publisher waits and then
//! builds on the first one's result: nothing published is lost. The kernel
//! drops the lock with its holder, so a killed publisher leaves none; a
//! publisher stopped by SIGTERM, SIGINT or SIGHUP removes its staged copy
//! itself (interrupt.rs), and one killed outright (SIGKILL) leaves it
//! (`.<name>.staging-<pid>`) to the next publisher, which alone may hold
//! the lock.

use anyhow::{Context, Result, bail};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The exclusive right to change one repository, held until dropped.
pub struct Lock {
    _file: std::fs::File,
    /// The repository's real directory (a symbolic link --repo resolved).
    pub target: PathBuf,
}

impl Lock {
    /// Takes the lock of @repo, waiting (and saying so) while another
    /// publisher holds it. A --repo that is a symbolic link stays one:
    /// the directory it points at is the repository.
    pub fn take(repo: &Path) -> Result<Lock> {
        let target = match std::fs::symlink_metadata(repo) {
            Ok(m) if m.file_type().is_symlink() => {
                std::fs::canonicalize(repo).with_context(|| {
                    format!(
                        "--repo {} is a symbolic link to nothing; point it at the repository",
                        repo.display()
                    )
                })?
            }
            _ => repo.to_owned(),
        };
        let (parent, name) = split(&target)?;
        let path = parent.join(format!(".{name}.lock"));
        let file = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| {
                format!(
                    "creating the lock {} (--repo's parent must be writable)",
                    path.display()
                )
            })?;
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            eprintln!(
                "build-repo: waiting for another build-repo to finish with {} (lock {})",
                target.display(),
                path.display()
            );
            flock(&file, libc::LOCK_EX)?;
        }
        Ok(Lock {
            _file: file,
            target,
        })
    }
}

/// flock(2) @operation on @file: false when LOCK_NB found it held.
fn flock(file: &std::fs::File, operation: libc::c_int) -> Result<bool> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: the descriptor is @file's, open for the whole call;
        // flock takes no pointer and changes nothing but the lock.
        let rc = unsafe { libc::flock(file.as_raw_fd(), operation) };
        if rc == 0 {
            return Ok(true);
        }
        let error = std::io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EWOULDBLOCK) if operation & libc::LOCK_NB != 0 => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(error).context("locking the repository (flock)"),
        }
    }
}

/// @target's parent directory and file name.
fn split(target: &Path) -> Result<(PathBuf, String)> {
    let parent = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .context("--repo must name a directory")?
        .to_string_lossy()
        .into_owned();
    Ok((parent.to_owned(), name))
}

/// The staged copy of a repository, removed when dropped unless published.
pub struct Stage<'a> {
    pub dir: PathBuf,
    target: PathBuf,
    _lock: &'a Lock,
}

impl<'a> Stage<'a> {
    /// Stages the locked repository (created if it does not exist) next
    /// to it, after removing what killed publishers left.
    pub fn new(lock: &'a Lock) -> Result<Stage<'a>> {
        let target = &lock.target;
        let (parent, name) = split(target)?;
        let prefix = format!(".{name}.staging-");
        // Only the lock's holder stages: any staged copy there now is a
        // dead publisher's.
        if let Ok(entries) = std::fs::read_dir(&parent) {
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    std::fs::remove_dir_all(entry.path()).with_context(|| {
                        format!(
                            "removing {}, left by a killed build-repo",
                            entry.path().display()
                        )
                    })?;
                }
            }
        }
        let dir = parent.join(format!("{prefix}{}", std::process::id()));
        std::fs::create_dir(&dir).with_context(|| {
            format!(
                "creating {} (--repo's parent must be writable)",
                dir.display()
            )
        })?;
        super::interrupt::staged(Some(dir.clone()));
        let stage = Stage {
            dir,
            target: target.to_owned(),
            _lock: lock,
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

impl Drop for Stage<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        super::interrupt::staged(None);
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
        let lock = Lock::take(&repo).unwrap();
        {
            let stage = Stage::new(&lock).unwrap();
            std::fs::write(stage.dir.join("pool/b.deb"), b"b").unwrap();
            std::fs::remove_file(stage.dir.join("Release")).unwrap();
            std::fs::write(stage.dir.join("Release"), b"new").unwrap();
            // dropped: a failure before publish
        }
        assert!(!repo.join("pool/b.deb").exists());
        assert_eq!(std::fs::read(repo.join("Release")).unwrap(), b"old");
        let stage = Stage::new(&lock).unwrap();
        std::fs::write(stage.dir.join("pool/b.deb"), b"b").unwrap();
        std::fs::remove_file(stage.dir.join("Release")).unwrap();
        std::fs::write(stage.dir.join("Release"), b"new").unwrap();
        stage.publish().unwrap();
        drop(lock);
        assert_eq!(std::fs::read(repo.join("Release")).unwrap(), b"new");
        assert_eq!(std::fs::read(repo.join("pool/a.deb")).unwrap(), b"a");
        let left: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left.len(), 2, "no staging left: {left:?}");
        assert!(left.contains(&".repo.lock".to_owned()));
        std::fs::remove_dir_all(&root).unwrap();
    }
}

#[cfg(test)]
mod lock_tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn scratch(name: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("xtask-lock-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        root
    }

    #[test]
    fn a_second_publisher_waits_for_the_first() {
        let root = scratch("wait");
        let repo = root.join("repo");
        let first = Lock::take(&repo).unwrap();
        let (tx, rx) = mpsc::channel();
        let waiter = {
            let repo = repo.clone();
            std::thread::spawn(move || {
                let _second = Lock::take(&repo).unwrap();
                tx.send(()).unwrap();
            })
        };
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "the second took the lock while the first held it"
        );
        drop(first);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the second gets it once released");
        waiter.join().unwrap();
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_killed_publishers_staging_is_removed_and_a_linked_repo_stays_a_link() {
        let root = scratch("stale");
        let real = root.join("real");
        std::fs::create_dir_all(real.join("dists")).unwrap();
        std::fs::write(real.join("dists/Release"), b"old").unwrap();
        std::os::unix::fs::symlink("real", root.join("repo")).unwrap();
        std::fs::create_dir_all(root.join(".real.staging-999999/dists")).unwrap();
        let lock = Lock::take(&root.join("repo")).unwrap();
        assert_eq!(lock.target, std::fs::canonicalize(&real).unwrap());
        let stage = Stage::new(&lock).unwrap();
        assert!(!root.join(".real.staging-999999").exists());
        std::fs::remove_file(stage.dir.join("dists/Release")).unwrap();
        std::fs::write(stage.dir.join("dists/Release"), b"new").unwrap();
        stage.publish().unwrap();
        assert!(
            std::fs::symlink_metadata(root.join("repo"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read(root.join("repo/dists/Release")).unwrap(),
            b"new"
        );
        drop(lock);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
