//! The pipeline's first steps: the route's request (--out, --distro,
//! --release) and the data file become a checked `Plan`: the distro entry,
//! version, release, timestamp and output directory. Nothing is written
//! before a plan exists.

use crate::distro::{Distro, Packaging};
use crate::release::Release;
use crate::render;
use anyhow::{Context, Result, ensure};
use std::path::{Path, PathBuf};

/// What a user asks of a route: its options, the same on every route,
/// defined once here and flattened into each route's command line (each
/// route says in main.rs which distributions --distro takes there).
#[derive(Debug, Clone, clap::Args)]
pub struct Request {
    /// Directory the packages are written to (must exist and be writable).
    #[arg(long, value_name = "DIR", default_value = "/tmp")]
    pub out: PathBuf,
    /// Target distribution: an id of packaging/distros.yaml (an unknown id
    /// is answered with the list). Default: this host's distribution
    /// (/etc/os-release) when listed, else the route's default.
    #[arg(long, value_name = "ID")]
    pub distro: Option<String>,
    /// Package release (the N in <version>-N), a whole number from 1.
    /// Default: `release` in packaging/distros.yaml.
    #[arg(long, value_name = "N")]
    pub release: Option<Release>,
}

/// Everything a route builds from, checked.
#[derive(Debug, Clone)]
pub struct Plan {
    pub packaging: Packaging,
    pub distro: Distro,
    /// `[workspace.package] version` (what kmod/VERSION holds).
    pub workspace_version: String,
    /// The version in the family's spelling (a Debian upstream version, an
    /// RPM version): what package names and the DKMS directory carry.
    pub package_version: String,
    pub release: u32,
    /// SOURCE_DATE_EPOCH: every timestamp in the artifact.
    pub source_date_epoch: u64,
    pub out: PathBuf,
}

impl Plan {
    /// The variables every template sees (see render.rs), plus
    /// `package_version`: DKMS's PACKAGE_VERSION, the
    /// /usr/src/nv_peer_mem-<version> suffix.
    pub fn base_context(&self) -> tera::Context {
        let mut context = render::base_context(
            &self.packaging,
            &self.distro,
            &self.workspace_version,
            self.release,
            self.source_date_epoch,
        );
        context.insert("package_version", &self.package_version);
        context
    }

    /// The source tree's top directory: `<source name>-<package version>`.
    pub fn tree_prefix(&self, source_name: &str) -> String {
        format!("{source_name}-{}", self.package_version)
    }
}

/// Fails unless @dir is an existing directory this process can create files
/// in (probed with a file that is removed at once: permission bits do not
/// tell about read-only mounts or root), so a bad --out is reported before
/// any work and never leaves a partial file.
pub fn check_out_dir(dir: &Path) -> Result<()> {
    let fix = "pass --out with an existing, writable directory";
    let metadata = std::fs::metadata(dir)
        .with_context(|| format!("--out {}: no such directory; {fix}", dir.display()))?;
    ensure!(
        metadata.is_dir(),
        "--out {} is not a directory; {fix}",
        dir.display()
    );
    let probe = dir.join(format!(".xtask-probe-{}", std::process::id()));
    std::fs::File::create(&probe)
        .with_context(|| format!("--out {} is not writable; {fix}", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_out_dirs_are_named() {
        let missing = Path::new("/nonexistent/xtask-out");
        let error = check_out_dir(missing).unwrap_err().to_string();
        assert!(
            error.contains("--out") && error.contains("no such directory"),
            "{error}"
        );
        let file =
            std::env::temp_dir().join(format!("xtask-plan-test-file-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        let error = check_out_dir(&file).unwrap_err().to_string();
        std::fs::remove_file(&file).unwrap();
        assert!(error.contains("not a directory"), "{error}");
    }
}
