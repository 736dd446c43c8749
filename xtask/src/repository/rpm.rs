//! The dnf/zypper repository: the packages in `packages/` and `repodata/`
//! written by createrepo_c (the tool Fedora's and openSUSE's repositories
//! are built with), with `repodata/repomd.xml.asc` signed by gpg for dnf's
//! `repo_gpgcheck=1` and zypper's `repo_gpgcheck`. Timestamps come from
//! the repository's epoch (`--set-timestamp-to-revision`), so the same
//! packages give the same metadata. With a key, each package put in is
//! signed too (rpmsign, as Fedora's and NVIDIA's repositories are), for
//! dnf's and zypper's `gpgcheck=1`: repo_gpgcheck vouches for the
//! metadata, gpgcheck for a package wherever it came from (a mirror, a
//! local copy).

use super::gpg::{self, Signature};
use crate::error::BadInput;
use crate::tool::stdout as tool;
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;

/// The package's canonical file name (`<name>-<version>-<release>.<arch>.rpm`)
/// from its header; a file rpm cannot read is bad input.
pub fn file_name(path: &Path) -> Result<String> {
    let out = query(path, "%{NAME}-%{VERSION}-%{RELEASE}.%{ARCH}")?;
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

/// The package's identity apart from its signature: rpm's SHA256HEADER
/// (the main header's digest; the header holds the payload's digest), so
/// the package signed in the repository and the unsigned one published
/// again are the same package. None for a package without one (rpm
/// before 4.14 wrote none).
pub fn identity(path: &Path) -> Result<Option<String>> {
    let out = query(path, "%{SHA256HEADER}")?;
    let digest = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    Ok((out.status.success() && digest.len() == 64).then_some(digest))
}

/// When build-repo dates the rpm signatures it makes with @key: at
/// @epoch, or when the key was made if that is later, so the same
/// package, key and epoch give the same bytes with the deterministic
/// signature schemes (RSA, EdDSA) and a signature never predates its key
/// (gpg::created). Asked once a publish.
pub fn signing_date(key: &str, epoch: u64) -> Result<u64> {
    Ok(epoch.max(gpg::created(key)?))
}

/// Signs the package at @path in place with @key (rpmsign --addsign,
/// which replaces any signature it had), dated at @date (signing_date).
pub fn sign(path: &Path, key: &str, date: u64) -> Result<()> {
    // rpm runs %__gpg by path, and its default differs by distribution
    // (Debian's rpm says /usr/bin/gpg2, which Debian does not ship): the
    // gpg that signs the metadata signs the packages.
    let gpg = crate::tool::find("gpg").context("no gpg in PATH (install gnupg)")?;
    let out = Command::new("rpmsign")
        .arg("--addsign")
        .arg("--define")
        .arg(format!("__gpg {}", gpg.display()))
        .arg("--define")
        .arg(format!("_gpg_name {key}"))
        .args(["--define", "_gpg_digest_algo sha256"])
        .arg("--define")
        .arg(format!(
            "_gpg_sign_cmd_extra_args --batch --faked-system-time {date}!"
        ))
        .arg(path)
        .output()
        .context("running rpmsign (install rpm)")?;
    if !out.status.success() {
        bail!(
            "rpmsign could not sign {} with {key}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// `rpm -qp --qf @format` on the package file, its signature and digests
/// unchecked (the repository's key is not in rpm's keyring here).
fn query(path: &Path, format: &str) -> Result<std::process::Output> {
    Command::new("rpm")
        .args(["-qp", "--nosignature", "--nodigest", "--qf", format])
        .arg(path)
        .output()
        .context("running rpm (install rpm)")
}

/// Where a package goes in the repository.
pub fn pool_path(file_name: &str) -> String {
    format!("packages/{file_name}")
}

/// Writes repodata/ for the packages in @repo, signed with @key when given.
///
/// dnf reads repomd.xml first and the files it names afterwards, so a node
/// that read the previous repomd.xml just before the swap asks for that
/// generation's files: they are named by their checksum (createrepo_c's
/// default, not `--simple-md-filenames`, whose fixed names would then hold
/// other contents) and kept beside the new ones for one publish, as the apt
/// side keeps the previous Release's by-hash indexes; older generations go.
pub fn index(repo: &Path, key: Option<&str>, epoch: u64) -> Result<()> {
    let repodata = repo.join("repodata");
    // Out of createrepo_c's way while it writes the new repodata/ (it reads
    // only .rpm files, so a hidden directory beside them is left alone).
    let previous = repo.join(".repodata-previous");
    if previous.exists() {
        std::fs::remove_dir_all(&previous)?;
    }
    let kept = if repodata.exists() {
        let names = referenced_files(&repodata)?;
        std::fs::rename(&repodata, &previous)?;
        names
    } else {
        Vec::new()
    };
    tool(
        Command::new("createrepo_c")
            .args(["--quiet", "--workers", "1", "--no-database"])
            .arg("--revision")
            .arg(epoch.to_string())
            .arg("--set-timestamp-to-revision")
            .arg(repo),
    )?;
    for name in kept {
        let new = repodata.join(&name);
        if !new.exists() {
            std::fs::hard_link(previous.join(&name), &new)
                .with_context(|| format!("keeping the previous repodata/{name}"))?;
        }
    }
    if previous.exists() {
        std::fs::remove_dir_all(&previous)?;
    }
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

/// The files of @repodata that its repomd.xml names (`<location
/// href="repodata/NAME"/>`), NAME a plain file name: what a node holding
/// that repomd.xml fetches next. An href of another shape names nothing
/// kept (never a path outside repodata/).
fn referenced_files(repodata: &Path) -> Result<Vec<String>> {
    let repomd = repodata.join("repomd.xml");
    if !repomd.exists() {
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(&repomd)
        .with_context(|| format!("reading {}", repomd.display()))?;
    Ok(text
        .split("<location href=\"repodata/")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|name| {
            !name.is_empty()
                && !name.starts_with('.')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                && repodata.join(name).is_file()
        })
        .map(str::to_owned)
        .collect())
}
