//! Facts about the workspace every subcommand shares: where it is, its one
//! version, and the timestamp reproducible outputs are stamped with.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace version (`[workspace.package] version` in the root
/// Cargo.toml, inherited by this crate): the project's one version source.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The workspace root (the directory holding the root Cargo.toml).
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
}

/// Seconds since the epoch that reproducible artifacts carry as their mtime
/// and build time: `SOURCE_DATE_EPOCH` when set (reproducible-builds.org),
/// else the last commit's time, so the same commit gives the same bytes.
pub fn source_date_epoch() -> Result<u64> {
    if let Ok(value) = std::env::var("SOURCE_DATE_EPOCH") {
        return value.trim().parse().with_context(|| {
            format!("SOURCE_DATE_EPOCH={value:?} is not a number of seconds; unset it or set e.g. SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)")
        });
    }
    let out = Command::new("git")
        .args(["log", "-1", "--format=%ct"])
        .current_dir(root())
        .output()
        .context("running git to read the last commit's time (set SOURCE_DATE_EPOCH to build outside a git checkout)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.trim().parse() {
        Ok(seconds) if out.status.success() => Ok(seconds),
        _ => bail!(
            "cannot read the last commit's time from git in {}; set SOURCE_DATE_EPOCH to build outside a git checkout",
            root().display()
        ),
    }
}

/// A path below the workspace root.
pub fn path(relative: &str) -> PathBuf {
    root().join(relative)
}
