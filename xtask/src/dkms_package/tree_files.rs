//! The pipeline's source tree (pipeline/source_tree.rs) read back as
//! files: both binary DKMS packages are made of the same files that every
//! route ships, so they take them from the route's `.tar.gz` rather than
//! listing them a second time.

use anyhow::{Context, Result};
use std::io::Read;

/// A regular file of the source tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeFile {
    /// Path below the tree's top directory (`kmod/Makefile`, `dkms.conf`).
    pub path: String,
    /// Permission bits as the tree has them (0o644, 0o755).
    pub mode: u32,
    pub contents: Vec<u8>,
}

/// The regular files of @tar_gz, their `<name>-<version>/` prefix removed.
pub fn read(tar_gz: &[u8]) -> Result<Vec<TreeFile>> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tar_gz));
    let mut files = Vec::new();
    for entry in archive.entries().context("reading the source tree")? {
        let mut entry = entry.context("reading the source tree")?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let path = entry.path()?.to_string_lossy().into_owned();
        let path = match path.split_once('/') {
            Some((_, below)) => below.to_owned(),
            None => path,
        };
        let mode = entry.header().mode()? & 0o7777;
        let mut contents = Vec::new();
        entry.read_to_end(&mut contents)?;
        files.push(TreeFile {
            path,
            mode,
            contents,
        });
    }
    Ok(files)
}

/// The files of @tree at @source (a file, or a directory and everything
/// below it), each with its path relative to @source's parent: what
/// `cp -a` or dh_install copies into a destination directory.
pub fn select<'a>(tree: &'a [TreeFile], source: &str) -> Vec<(String, &'a TreeFile)> {
    let source = source.trim_end_matches('/');
    let base = source.rfind('/').map_or(0, |slash| slash + 1);
    tree.iter()
        .filter(|f| {
            f.path == source
                || f.path
                    .strip_prefix(source)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
        .map(|f| (f.path[base..].to_owned(), f))
        .collect()
}
