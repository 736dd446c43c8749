//! Mirroring source files into test-vm's per-kernel build directories.
//! A file is rewritten only when its bytes changed, so make sees unchanged
//! mtimes and a warm rerun rebuilds nothing.

use anyhow::{Context, Result};
use std::fs;
use std::path::Path;

/// Build products a source tree copy leaves out.
const BUILD_PRODUCTS: &[&str] = &[".o", ".ko", ".mod", ".mod.c", ".symvers", ".order", ".cmd"];

/// Copies @from to @to unless identical.
pub fn sync_file(from: &Path, to: &Path) -> Result<()> {
    let data = fs::read(from).with_context(|| format!("reading {}", from.display()))?;
    if fs::read(to).ok().as_deref() != Some(&data[..]) {
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(to, &data).with_context(|| format!("writing {}", to.display()))?;
    }
    Ok(())
}

/// Writes @data to @to unless it holds those bytes already.
pub fn sync_bytes(to: &Path, data: &[u8]) -> Result<()> {
    if fs::read(to).ok().as_deref() != Some(data) {
        fs::write(to, data)?;
    }
    Ok(())
}

/// Source files below @from (recursively), skipping build products, hidden
/// files and the top-level directories in @skip.
pub fn sync_tree(from: &Path, to: &Path, skip: &[&str]) -> Result<()> {
    for entry in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if skip.contains(&name.as_str()) || name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            sync_tree(&path, &to.join(&name), &[])?;
        } else if !BUILD_PRODUCTS.iter().any(|ext| name.ends_with(ext)) {
            sync_file(&path, &to.join(&name))?;
        }
    }
    Ok(())
}
