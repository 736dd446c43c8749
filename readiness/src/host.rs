//! The files the check reads, under roots that tests replace: sysfs
//! (`NV_PEER_MEM_SYSFS`, default `/sys`) and procfs (`NV_PEER_MEM_PROC`,
//! default `/proc`), the same variables as `nv_peer_mem-service`. Reading is
//! all the check does: nothing here writes.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Where sysfs and procfs are.
#[derive(Debug, Clone)]
pub struct Host {
    pub sys: PathBuf,
    pub proc: PathBuf,
}

/// A file or directory that could not be read, and why: becomes a line of
/// the report ("could not read ..."), never a crash or a guessed verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub path: PathBuf,
    pub why: String,
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "could not read {}: {}", self.path.display(), self.why)
    }
}

impl Unreadable {
    pub fn new(path: &Path, why: impl Into<String>) -> Self {
        Unreadable {
            path: path.to_path_buf(),
            why: why.into(),
        }
    }

    fn io(path: &Path, error: &io::Error) -> Self {
        let why = match error.kind() {
            io::ErrorKind::NotFound => "no such file".to_owned(),
            io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
            _ => error.to_string(),
        };
        Unreadable::new(path, why)
    }
}

impl Host {
    /// The roots from the environment, as the service helper takes them.
    pub fn from_env() -> Self {
        let root = |var: &str, default: &str| {
            std::env::var_os(var)
                .filter(|v| !v.is_empty())
                .map_or_else(|| PathBuf::from(default), PathBuf::from)
        };
        Host {
            sys: root("NV_PEER_MEM_SYSFS", "/sys"),
            proc: root("NV_PEER_MEM_PROC", "/proc"),
        }
    }

    pub fn sys_path(&self, relative: &str) -> PathBuf {
        self.sys.join(relative)
    }

    pub fn proc_path(&self, relative: &str) -> PathBuf {
        self.proc.join(relative)
    }

    pub fn exists(path: &Path) -> bool {
        fs::symlink_metadata(path).is_ok()
    }

    /// A text file, trailing newline removed.
    pub fn text(path: &Path) -> Result<String, Unreadable> {
        let bytes = fs::read(path).map_err(|e| Unreadable::io(path, &e))?;
        let text = String::from_utf8(bytes).map_err(|_| Unreadable::new(path, "not UTF-8 text"))?;
        Ok(text.trim_end_matches('\n').to_owned())
    }

    /// A binary file (PCI config space).
    pub fn bytes(path: &Path) -> Result<Vec<u8>, Unreadable> {
        fs::read(path).map_err(|e| Unreadable::io(path, &e))
    }

    /// A hexadecimal sysfs attribute such as `vendor` (`0x10de`).
    pub fn hex(path: &Path) -> Result<u64, Unreadable> {
        let text = Self::text(path)?;
        let digits = text.trim().strip_prefix("0x").unwrap_or(text.trim());
        u64::from_str_radix(digits, 16).map_err(|_| {
            Unreadable::new(
                path,
                format!("`{}` is not a hexadecimal number", text.trim()),
            )
        })
    }

    /// The names in a directory, sorted (sysfs order is not stable across
    /// kernels; the report's is).
    pub fn names(path: &Path) -> Result<Vec<String>, Unreadable> {
        let mut names = Vec::new();
        for entry in fs::read_dir(path).map_err(|e| Unreadable::io(path, &e))? {
            let entry = entry.map_err(|e| Unreadable::io(path, &e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    /// Where a symlink points, resolved against its directory and
    /// normalised (`..` removed) without touching the target, so that a fake
    /// tree's links resolve inside the fake tree.
    pub fn link_target(path: &Path) -> Result<PathBuf, Unreadable> {
        let target = fs::read_link(path).map_err(|e| Unreadable::io(path, &e))?;
        let joined = match path.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
        let mut out = PathBuf::new();
        for part in joined.components() {
            match part {
                std::path::Component::ParentDir => {
                    out.pop();
                }
                std::path::Component::CurDir => {}
                other => out.push(other),
            }
        }
        Ok(out)
    }
}
