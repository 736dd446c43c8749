//! Which NVIDIA driver a boot's double stands in for, and where the NVIDIA
//! sources come from.
//!
//! The driver's page table changed layout at 580 (nv-p2p.h:
//! NVIDIA_P2P_PAGE_TABLE_VERSION 0x00010002 -> 0x00020000, `flags`
//! appended; docs/contracts.md, "NVIDIA 580 and 595"). The double takes its
//! generation from the nv-p2p.h it is built against, and every module of a
//! boot that calls nvidia_p2p_* (nv_peer_mem.ko above all) is built against
//! the same header, as DKMS builds them against the installed driver. A
//! module built against the other generation's header cannot load beside
//! it: the symbol CRCs of nvidia_p2p_* differ (CONFIG_MODVERSIONS), as they
//! would against the real driver.

use crate::workspace;
use anyhow::{Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A driver generation, named by the first release of its page-table
/// layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generation {
    /// 535 up to 575: page table 0x00010002 (Debian's 535, 550, 555).
    Nv535,
    /// 580 and later: page table 0x00020000 with `flags` (580.142, 595.45.04).
    Nv580,
}

impl Generation {
    /// The generation a boot uses: @choice is test-vm's `--nvidia`;
    /// `per-kernel` gives bookworm's kernel the driver bookworm packages
    /// (535) and the backports kernel the current production branch (580),
    /// so one run boots both generations.
    pub fn for_boot(choice: &str, kver: &str, bookworm: &str) -> Generation {
        match choice {
            "535" => Generation::Nv535,
            "580" => Generation::Nv580,
            _ if kver == bookworm => Generation::Nv535,
            _ => Generation::Nv580,
        }
    }

    /// Its short name: in file names of the guest and in the console.
    pub fn id(self) -> &'static str {
        match self {
            Generation::Nv535 => "535",
            Generation::Nv580 => "580",
        }
    }
}

/// The release whose nv-p2p.h the 580-style double is built against.
pub const NV580_RELEASE: &str = "580.142";
/// The newest release among the fixtures (the oracle's 595 column).
pub const NV595_RELEASE: &str = "595.45.04";

/// An unpacked NVIDIA source tree: nvidia/nv-p2p.h, and where the oracle
/// needs it nvidia-peermem/nvidia-peermem.c (and conftest.sh for the
/// fixture trees); with the driver version it belongs to.
#[derive(Clone, Debug)]
pub struct Tree {
    pub dir: PathBuf,
    pub version: String,
    /// Whether the tree carries NVIDIA's own conftest.sh (the fixture
    /// trees do; Debian's unpacked packages are read for their sources
    /// only, with the shim, see oracle/shim/conftest.h).
    pub has_conftest: bool,
}

/// An open-gpu-kernel-modules release from the fixtures
/// (ci/fixture-nvidia-src.sh), or why it is not there.
pub fn fixture_tree(release: &str) -> std::result::Result<Tree, String> {
    let out = Command::new("bash")
        .args(["ci/fixture-nvidia-src.sh", release])
        .current_dir(workspace::root())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run ci/fixture-nvidia-src.sh: {e}"))?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && dir.join("nvidia/nv-p2p.h").is_file() {
        Ok(Tree {
            dir,
            version: release.to_string(),
            has_conftest: true,
        })
    } else {
        Err(format!(
            "NVIDIA {release} fixture not available ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A tree Debian's nvidia-open-kernel-dkms unpacked
/// (usr/src/nvidia-current-open-535.261.03): the version is in its name.
pub fn debian_tree(dir: &Path) -> Result<Tree> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.rsplit_once('-') {
        Some((_, v)) if v.chars().next().is_some_and(|c| c.is_ascii_digit()) => Ok(Tree {
            dir: dir.to_path_buf(),
            version: v.to_string(),
            has_conftest: false,
        }),
        _ => bail!("cannot read the driver version from {}", dir.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_driver_versions_from_debian_tree_names() {
        let t = debian_tree(Path::new("/x/usr/src/nvidia-current-open-535.261.03")).unwrap();
        assert_eq!(t.version, "535.261.03");
        assert!(!t.has_conftest);
        assert!(debian_tree(Path::new("/x/usr/src/nvidia")).is_err());
    }

    #[test]
    fn per_kernel_boots_both_generations() {
        let (bookworm, backports) = ("6.1.0-56-amd64", "6.12.95+deb12-amd64");
        assert_eq!(
            Generation::for_boot("per-kernel", bookworm, bookworm),
            Generation::Nv535
        );
        assert_eq!(
            Generation::for_boot("per-kernel", backports, bookworm),
            Generation::Nv580
        );
        assert_eq!(
            Generation::for_boot("535", backports, bookworm),
            Generation::Nv535
        );
        assert_eq!(
            Generation::for_boot("580", bookworm, bookworm),
            Generation::Nv580
        );
    }
}
