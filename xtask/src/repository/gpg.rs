//! Signing a repository's metadata with the admin's key (`--sign-key`,
//! from gpg's keyring: GNUPGHOME or ~/.gnupg): apt's InRelease (clearsigned
//! Release) and Release.gpg (detached), dnf's repomd.xml.asc (detached,
//! armored), as Debian's archive and dnf's repo_gpgcheck expect them
//! (docs/fleet.md, "Repositories").

use anyhow::{Context, Result, ensure};
use std::path::Path;
use std::process::Command;

/// Refuses a key gpg has no secret key for (before anything is staged).
pub fn check_key(key: &str) -> Result<()> {
    let out = Command::new("gpg")
        .args(["--batch", "--list-secret-keys", "--with-colons", "--"])
        .arg(key)
        .output()
        .context("running gpg (install gnupg)")?;
    ensure!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("sec:"),
        "--sign-key {key}: gpg has no secret key for it (GNUPGHOME={}); list yours with `gpg --list-secret-keys`, or import the repository key first",
        std::env::var("GNUPGHOME").unwrap_or_else(|_| "~/.gnupg".to_owned())
    );
    Ok(())
}

/// When @key's newest part was made (primary key or subkey: seconds since
/// the epoch, gpg's `--with-colons` field 6): a signature dated earlier
/// than the (sub)key that makes it is refused by OpenPGP verifiers such as
/// rpm-sequoia (RHEL 10).
pub fn created(key: &str) -> Result<u64> {
    let out = Command::new("gpg")
        .args(["--batch", "--list-secret-keys", "--with-colons", "--"])
        .arg(key)
        .output()
        .context("running gpg (install gnupg)")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| line.starts_with("sec:") || line.starts_with("ssb:"))
        .filter_map(|line| line.split(':').nth(5)?.parse().ok())
        .max()
        .with_context(|| format!("gpg gives no creation time for --sign-key {key}"))
}

/// How gpg signs @input into @output.
pub enum Signature {
    /// `--clearsign` (apt's InRelease).
    Clear,
    /// `--detach-sign` (apt's Release.gpg).
    Detached,
    /// `--detach-sign --armor` (dnf's repomd.xml.asc).
    DetachedArmored,
}

pub fn sign(key: &str, kind: Signature, input: &Path, output: &Path) -> Result<()> {
    let mut gpg = Command::new("gpg");
    gpg.args([
        "--batch",
        "--yes",
        "--quiet",
        "--local-user",
        key,
        "--digest-algo",
        "SHA512",
    ]);
    match kind {
        Signature::Clear => gpg.arg("--clearsign"),
        Signature::Detached => gpg.arg("--detach-sign"),
        Signature::DetachedArmored => gpg.args(["--detach-sign", "--armor"]),
    };
    let out = gpg
        .arg("--output")
        .arg(output)
        .arg(input)
        .output()
        .context("running gpg")?;
    ensure!(
        out.status.success(),
        "gpg could not sign {} with {key}: {}",
        input.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}
