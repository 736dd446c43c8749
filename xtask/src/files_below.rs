//! The files of one kind below a directory, in a stable order: what a
//! repository's pool holds, what rpmbuild wrote under RPMS/.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The files below @dir (recursively) whose extension is @extension,
/// sorted; none when @dir does not exist.
pub fn files_below(dir: &Path, extension: &str) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if !dir.exists() {
        return Ok(out);
    }
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            out.extend(files_below(&path, extension)?);
        } else if path.extension().is_some_and(|e| e == extension) {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}
