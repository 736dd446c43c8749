//! What a prebuilt module is built against, per kernel: MLNX_OFED's kernel
//! tree for that kernel (its `include/rdma/peer_mem.h` and the
//! `Module.symvers` whose CRCs the module's imports get) and the NVIDIA
//! driver's source (`nv-p2p.h`, and its `Module.symvers` where the tree has
//! one). A kernel without MLNX_OFED's PeerDirect symbols is refused: the
//! module built there could never load (docs/fleet.md).

use super::kernel::Kernel;
use anyhow::{Context, Result, bail, ensure};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The symbol MLNX_OFED's PeerDirect core exports and the module imports;
/// without it no peer memory client loads.
pub const PEER_CORE_SYMBOL: &str = "ib_register_peer_memory_client";

/// MLNX_OFED's build for one kernel.
#[derive(Debug, Clone)]
pub struct OfedTree {
    /// `<ofed root>/<machine>/<release>`, MLNX_OFED's layout.
    pub dir: PathBuf,
    /// The Debian package that owns it and its version, which the module
    /// package depends on with `=`.
    pub package: (String, String),
}

/// Where MLNX_OFED keeps the build for @kernel under @root
/// (`/usr/src/ofa_kernel/<uname -m>/<release>`: its DKMS package's
/// POST_BUILD copy and its prebuilt modules package, fixture
/// mlnx-ofa_kernel 25.10 debian/rules and ofed_scripts/dkms_ofed_post_build.sh).
pub fn ofed_dir(root: &Path, kernel: &Kernel) -> PathBuf {
    root.join(kernel.arch.machine()).join(&kernel.release)
}

/// Finds and checks MLNX_OFED's build for @kernel; @package_override is
/// `--ofed-package NAME=VERSION`.
pub fn find_ofed(root: &Path, kernel: &Kernel, package_override: Option<&str>) -> Result<OfedTree> {
    let dir = ofed_dir(root, kernel);
    let install = format!(
        "install MLNX_OFED's kernel modules for {k} on this build host (mlnx-ofed-kernel-modules built for {k}, or mlnx-ofed-kernel-dkms and `dkms autoinstall -k {k}`), or pass --ofed-root",
        k = kernel.release
    );
    let symvers = dir.join("Module.symvers");
    let text = std::fs::read_to_string(&symvers).with_context(|| {
        format!(
            "--kernel {}: no MLNX_OFED build at {} (no Module.symvers); {install}",
            kernel.release,
            dir.display()
        )
    })?;
    ensure!(
        exports(&text).any(|(_, symbol)| symbol == PEER_CORE_SYMBOL),
        "--kernel {}: {} does not export {PEER_CORE_SYMBOL}, so a module built against it could never load (this MLNX_OFED build has no PeerDirect core); {install}",
        kernel.release,
        symvers.display()
    );
    ensure!(
        dir.join("include/rdma/peer_mem.h").is_file(),
        "--kernel {}: {} has no include/rdma/peer_mem.h; {install}",
        kernel.release,
        dir.display()
    );
    let package = match package_override {
        Some(spec) => parse_package(&spec.replace("{release}", &kernel.release))?,
        None => owning_package(&symvers).or_else(|_| dkms_package()).with_context(|| {
            format!(
                "--kernel {}: no Debian package owns {}, so the module package cannot depend on the MLNX_OFED package it was built against; and mlnx-ofed-kernel-dkms is not installed; pass --ofed-package NAME=VERSION (e.g. mlnx-ofed-kernel-modules=25.10.OFED.25.10.1.7.1.1-1.kver.{{release}})",
                kernel.release,
                symvers.display(),
            )
        })?,
    };
    let dir = std::fs::canonicalize(&dir)?;
    Ok(OfedTree { dir, package })
}

/// `NAME=VERSION` of --ofed-package, both checked as Debian's.
pub fn parse_package(spec: &str) -> Result<(String, String)> {
    let Some((name, version)) = spec.split_once('=') else {
        bail!(
            "--ofed-package {spec:?}: write NAME=VERSION, e.g. mlnx-ofed-kernel-modules=25.10.OFED.25.10.1.7.1.1-1.kver.6.1.0-56-amd64"
        );
    };
    ensure!(
        crate::distro::is_debian_package_name(name),
        "--ofed-package {spec:?}: {name:?} is not a Debian package name (lowercase letters, digits, + - .)"
    );
    ensure!(
        !version.is_empty()
            && version.bytes().next().is_some_and(|b| b.is_ascii_digit())
            && version
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".+~-:".contains(&b)),
        "--ofed-package {spec:?}: {version:?} is not a Debian version"
    );
    Ok((name.to_owned(), version.to_owned()))
}

/// MLNX_OFED's DKMS package, when installed: its POST_BUILD copies each
/// kernel's build to /usr/src/ofa_kernel/<machine>/<release>, which no
/// package owns (fixture mlnx-ofa_kernel 25.10, ofed_scripts/dkms_ofed_post_build.sh);
/// a node with the same package version builds the same exports.
fn dkms_package() -> Result<(String, String)> {
    let name = "mlnx-ofed-kernel-dkms";
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${Status}\t${Version}"])
        .arg(name)
        .output()
        .context("running dpkg-query")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (status, version) = text.split_once('\t').context("not installed")?;
    ensure!(
        out.status.success() && status.ends_with(" installed"),
        "{name} is not installed"
    );
    Ok((name.to_owned(), version.trim().to_owned()))
}

/// The package that installed @path and its version, from dpkg's database.
fn owning_package(path: &Path) -> Result<(String, String)> {
    let out = Command::new("dpkg-query")
        .arg("-S")
        .arg(path)
        .output()
        .context("running dpkg-query")?;
    ensure!(out.status.success(), "dpkg-query -S: not owned");
    let text = String::from_utf8_lossy(&out.stdout);
    let name = text
        .lines()
        .next()
        .and_then(|l| l.split_once(": "))
        .map(|(pkgs, _)| pkgs.split(", ").next().unwrap_or(pkgs))
        .map(|p| p.split(':').next().unwrap_or(p).to_owned())
        .context("dpkg-query -S printed nothing")?;
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}"])
        .arg(&name)
        .output()
        .context("running dpkg-query")?;
    ensure!(out.status.success(), "dpkg-query -W {name} failed");
    Ok((name, String::from_utf8_lossy(&out.stdout).trim().to_owned()))
}

/// The NVIDIA driver source a module is built against.
#[derive(Debug, Clone)]
pub struct NvidiaSource {
    pub dir: PathBuf,
    /// Its Module.symvers, where it has one: the nvidia_p2p_* CRCs.
    pub symvers: Option<PathBuf>,
}

/// @given (--nvidia-src), else the first `/usr/src/nvidia-*` with an
/// nv-p2p.h (where Debian's nvidia-kernel-dkms / nvidia-open-kernel-dkms
/// and NVIDIA's own packages put the driver source).
pub fn find_nvidia(given: Option<&Path>) -> Result<NvidiaSource> {
    let has_header = |d: &Path| d.join("nvidia/nv-p2p.h").is_file() || d.join("nv-p2p.h").is_file();
    let dir = match given {
        Some(dir) => {
            ensure!(
                has_header(dir),
                "--nvidia-src {}: no nvidia/nv-p2p.h or nv-p2p.h; point it at the NVIDIA driver source (e.g. /usr/src/nvidia-<version>)",
                dir.display()
            );
            std::fs::canonicalize(dir)?
        }
        None => {
            let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/src")
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("nvidia-"))
                        && has_header(p)
                })
                .collect();
            candidates.sort();
            candidates.into_iter().next().context(
                "no NVIDIA driver source with nv-p2p.h in /usr/src/nvidia-*; install the driver's source (Debian: nvidia-open-kernel-dkms or nvidia-kernel-dkms) or pass --nvidia-src DIR",
            )?
        }
    };
    let symvers = [
        dir.join("Module.symvers"),
        dir.join("nvidia/Module.symvers"),
    ]
    .into_iter()
    .find(|p| p.is_file());
    Ok(NvidiaSource { dir, symvers })
}

/// (crc, symbol) of each line of a Module.symvers
/// (`0x<crc>\t<symbol>\t<module>\t<export type>[\t<namespace>]`).
pub fn exports(symvers: &str) -> impl Iterator<Item = (&str, &str)> {
    symvers.lines().filter_map(|line| {
        let mut fields = line.split('\t');
        Some((fields.next()?, fields.next()?))
    })
}

/// The module that exports @symbol according to @symvers, with its CRC.
pub fn provider<'a>(symvers: &'a str, symbol: &str) -> Option<(&'a str, &'a str)> {
    symvers.lines().find_map(|line| {
        let mut fields = line.split('\t');
        let crc = fields.next()?;
        (fields.next()? == symbol).then_some(())?;
        Some((crc, fields.next()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYMVERS: &str = "0x1a2b3c4d\tib_register_peer_memory_client\tdrivers/infiniband/core/ib_core\tEXPORT_SYMBOL\t\n0x00000001\tnvidia_p2p_get_pages\tnvidia\tEXPORT_SYMBOL\t\n";

    #[test]
    fn providers_come_from_module_symvers() {
        assert_eq!(
            provider(SYMVERS, PEER_CORE_SYMBOL),
            Some(("0x1a2b3c4d", "drivers/infiniband/core/ib_core"))
        );
        assert_eq!(
            provider(SYMVERS, "nvidia_p2p_get_pages"),
            Some(("0x00000001", "nvidia"))
        );
        assert_eq!(provider(SYMVERS, "nvidia_p2p"), None);
        assert_eq!(exports(SYMVERS).count(), 2);
    }

    #[test]
    fn ofed_package_overrides_are_checked() {
        assert_eq!(
            parse_package("mlnx-ofed-kernel-modules=25.10-1.kver.6.1.0-56-amd64").unwrap(),
            (
                "mlnx-ofed-kernel-modules".to_owned(),
                "25.10-1.kver.6.1.0-56-amd64".to_owned()
            )
        );
        for bad in [
            "mlnx-ofed-kernel-modules",
            "MLNX=1",
            "mlnx=",
            "mlnx=v1",
            "mlnx=1 2",
        ] {
            assert!(parse_package(bad).is_err(), "{bad}");
        }
    }
}
