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
    let name = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    // NAME-VERSION-RELEASE.ARCH becomes a path in the repository: rpm's
    // own character set for them (rpmbuild refuses others in a spec), no
    // leading dot, no slash.
    if name.starts_with('.')
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._+~^-".contains(&b))
    {
        bail!(BadInput::error(format!(
            "{}: its header names it {name:?}, which is not a package file name (letters, digits and . _ + ~ ^ -); rebuild it with a valid Name, Version, Release and arch",
            path.display()
        )));
    }
    Ok(format!("{name}.rpm"))
}

/// Where a package goes in the repository.
pub fn pool_path(file_name: &str) -> String {
    format!("packages/{file_name}")
}

/// Writes repodata/ for the packages in @repo, signed with @key when given.
pub fn index(repo: &Path, key: Option<&str>, epoch: u64) -> Result<()> {
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
