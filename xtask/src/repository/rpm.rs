//! The dnf/zypper repository: the packages in `packages/` and `repodata/`
//! written by createrepo_c (the tool Fedora's and openSUSE's repositories
//! are built with), with `repodata/repomd.xml.asc` signed by gpg for dnf's
//! `repo_gpgcheck=1` and zypper's `repo_gpgcheck`. Timestamps come from
//! the repository's epoch (`--set-timestamp-to-revision`), so the same
//! packages give the same metadata.

use super::gpg::{self, Signature};
use crate::error::BadInput;
use crate::tool::stdout as tool;
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, UNIX_EPOCH};

/// The package's canonical file name (`<name>-<version>-<release>.<arch>.rpm`)
/// from its header; a file rpm cannot read is bad input.
pub fn file_name(path: &Path) -> Result<String> {
    let out = Command::new("rpm")
        .args([
            "-qp",
            "--nosignature",
            "--nodigest",
            "--qf",
            "%{NAME}-%{VERSION}-%{RELEASE}.%{ARCH}",
        ])
        .arg(path)
        .output()
        .context("running rpm (install rpm)")?;
    if !out.status.success() {
        bail!(BadInput::error(format!(
            "{}: not an rpm package ({}); pass .rpm files built by rpmbuild or build-dkms",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(format!(
        "{}.rpm",
        String::from_utf8_lossy(&out.stdout).trim()
    ))
}

/// Where a package goes in the repository.
pub fn pool_path(file_name: &str) -> String {
    format!("packages/{file_name}")
}

/// Gives every package file @epoch as its mtime (createrepo_c records
/// file times in primary.xml).
pub fn settle_times(repo: &Path, epoch: u64) -> Result<()> {
    let dir = repo.join("packages");
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let file = std::fs::File::options().write(true).open(&path)?;
        file.set_modified(UNIX_EPOCH + Duration::from_secs(epoch))?;
    }
    Ok(())
}

/// Writes repodata/ for the packages in @repo, signed with @key when given.
pub fn index(repo: &Path, key: Option<&str>, epoch: u64) -> Result<()> {
    settle_times(repo, epoch)?;
    let repodata = repo.join("repodata");
    if repodata.exists() {
        std::fs::remove_dir_all(&repodata)?;
    }
    tool(
        Command::new("createrepo_c")
            .args([
                "--quiet",
                "--simple-md-filenames",
                "--workers",
                "1",
                "--no-database",
            ])
            .arg("--revision")
            .arg(epoch.to_string())
            .arg("--set-timestamp-to-revision")
            .arg(repo),
    )?;
    if let Some(key) = key {
        gpg::sign(
            key,
            Signature::DetachedArmored,
            &repodata.join("repomd.xml"),
            &repodata.join("repomd.xml.asc"),
        )?;
    }
    Ok(())
}
