//! One kernel a prebuilt module package is built for: its release string
//! (`uname -r`), the flavour its metapackage follows, its architecture and
//! build tree, and the Debian packages that carry it (docs/fleet.md, "How
//! distributions bind a module package to one kernel").

use crate::distro::Distro;
use anyhow::{Result, bail, ensure};
use std::path::{Path, PathBuf};

/// A kernel release, checked to be usable in a Debian package name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    /// `6.1.0-56-amd64`, `6.12.95+deb12-amd64`, `6.8.0-45-generic`.
    pub release: String,
    /// `amd64`, `cloud-amd64`, `generic`: what `linux-image-<flavour>`
    /// follows.
    pub flavour: String,
    /// The build tree (`/lib/modules/<release>/build` unless --kernel-root
    /// says otherwise).
    pub build_dir: PathBuf,
    /// The Debian architecture of the kernel (from its `.config`).
    pub arch: Arch,
}

/// The architectures the module is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    /// The Debian architecture name.
    pub fn debian(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// The kernel's ARCH= and MLNX_OFED's directory name (`uname -m`).
    pub fn kbuild(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64",
            Arch::Arm64 => "arm64",
        }
    }

    pub fn machine(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64",
            Arch::Arm64 => "aarch64",
        }
    }

    /// The architecture this program runs on.
    pub fn host() -> Option<Arch> {
        match std::env::consts::ARCH {
            "x86_64" => Some(Arch::Amd64),
            "aarch64" => Some(Arch::Arm64),
            _ => None,
        }
    }

    /// From a kernel `.config`: CONFIG_X86_64=y or CONFIG_ARM64=y.
    fn from_config(config: &str) -> Option<Arch> {
        config.lines().find_map(|line| match line.trim() {
            "CONFIG_X86_64=y" => Some(Arch::Amd64),
            "CONFIG_ARM64=y" => Some(Arch::Arm64),
            _ => None,
        })
    }
}

/// Checks @release as a kernel release that can be part of a Debian
/// package name (Policy 5.6.1: lowercase letters, digits, `+ - .`, starting
/// alphanumeric) and finds its flavour.
pub fn parse_release(release: &str) -> Result<(String, String)> {
    let fix = "pass the release as `uname -r` prints it, e.g. --kernel 6.1.0-56-amd64";
    ensure!(
        !release.is_empty()
            && release.bytes().next().is_some_and(|b| b.is_ascii_digit())
            && release
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b)),
        "--kernel {release:?} is not a kernel release usable in a package name (digits, lowercase letters, + - . only); {fix}"
    );
    Ok((release.to_owned(), flavour(release).map_or_else(
        || bail!("--kernel {release}: no flavour after the version (Debian: <version>-<abi>-<flavour>, 6.1.0-56-amd64; Ubuntu: 6.8.0-45-generic); {fix}"),
        |f| Ok(f.to_owned()),
    )?))
}

/// The flavour of a Debian or Ubuntu kernel release: what follows the
/// version and, when there is one, the numeric ABI. `6.1.0-56-amd64` ->
/// `amd64`, `6.1.0-56-cloud-amd64` -> `cloud-amd64`, `6.12.95+deb12-amd64`
/// (a backports kernel names its ABI in the version) -> `amd64`,
/// `6.8.0-1015-aws` -> `aws`. Debian's kernel releases are
/// `<version>-<abi>-<flavour>` (linux source package, debian/config); the
/// flavour metapackage is `linux-image-<flavour>`.
pub fn flavour(release: &str) -> Option<&str> {
    let (_version, rest) = release.split_once('-')?;
    let rest = match rest.split_once('-') {
        Some((abi, flavour)) if abi.bytes().all(|b| b.is_ascii_digit()) => flavour,
        _ => rest,
    };
    (!rest.is_empty() && !rest.bytes().all(|b| b.is_ascii_digit())).then_some(rest)
}

impl Kernel {
    /// The kernel @release with its build tree under @modules_root
    /// (`/lib/modules`); refuses one without a configured build tree,
    /// naming the headers package of @distro's family.
    pub fn find(release: &str, modules_root: &Path) -> Result<Kernel> {
        let (release, flavour) = parse_release(release)?;
        let build_dir = modules_root.join(&release).join("build");
        let headers = format!("linux-headers-{release}");
        ensure!(
            build_dir.join("Makefile").is_file(),
            "--kernel {release}: no kernel build tree at {}; install its headers (apt install {headers}) on this build host",
            build_dir.display()
        );
        let config = std::fs::read_to_string(build_dir.join(".config")).unwrap_or_default();
        let Some(arch) = Arch::from_config(&config) else {
            bail!(
                "--kernel {release}: {} has no .config naming x86_64 or arm64 (CONFIG_X86_64=y / CONFIG_ARM64=y); reinstall {headers}",
                build_dir.display()
            );
        };
        Ok(Kernel {
            release,
            flavour,
            build_dir,
            arch,
        })
    }

    /// `CONFIG_MODULE_SIG_HASH` of the kernel (sign-file's first argument),
    /// sha256 where the config does not say (what Debian and Ubuntu configure).
    pub fn signature_hash(&self) -> String {
        let config = std::fs::read_to_string(self.build_dir.join(".config")).unwrap_or_default();
        config
            .lines()
            .find_map(|l| l.strip_prefix("CONFIG_MODULE_SIG_HASH="))
            .map(|v| v.trim_matches('"').to_owned())
            .unwrap_or_else(|| "sha256".to_owned())
    }
}

/// The Debian/Ubuntu packages that install this kernel's image, any of
/// which satisfies the module package: the distro's `kernel_image_packages`
/// patterns with `{release}` filled in.
pub fn image_packages(distro: &Distro, release: &str) -> Vec<String> {
    distro
        .kernel_image_packages
        .iter()
        .map(|pattern| pattern.replace("{release}", release))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavours_of_debian_and_ubuntu_releases() {
        for (release, want) in [
            ("6.1.0-56-amd64", Some("amd64")),
            ("6.1.0-56-cloud-amd64", Some("cloud-amd64")),
            ("6.1.0-56-rt-arm64", Some("rt-arm64")),
            ("6.12.95+deb12-amd64", Some("amd64")),
            ("6.12.95+deb12-cloud-arm64", Some("cloud-arm64")),
            ("6.8.0-45-generic", Some("generic")),
            ("6.8.0-1015-aws", Some("aws")),
            ("6.8.0-45-generic-64k", Some("generic-64k")),
            ("6.1.0-56", None),
            ("6.1.0", None),
        ] {
            assert_eq!(flavour(release), want, "{release}");
        }
    }

    #[test]
    fn releases_that_cannot_name_a_package_are_refused() {
        for bad in [
            "",
            "6.1.0-56-AMD64",
            "../6.1.0-56-amd64",
            "6.1.0_56-amd64",
            "linux-6.1",
            "6.1.0",
        ] {
            let error = parse_release(bad).unwrap_err().to_string();
            assert!(error.contains("--kernel"), "{bad}: {error}");
        }
        assert_eq!(
            parse_release("6.12.95+deb12-amd64").unwrap(),
            ("6.12.95+deb12-amd64".to_owned(), "amd64".to_owned())
        );
    }

    #[test]
    fn architecture_comes_from_the_config() {
        assert_eq!(
            Arch::from_config("CONFIG_64BIT=y\nCONFIG_X86_64=y\n"),
            Some(Arch::Amd64)
        );
        assert_eq!(Arch::from_config("CONFIG_ARM64=y\n"), Some(Arch::Arm64));
        assert_eq!(Arch::from_config("# CONFIG_X86_64 is not set\n"), None);
    }
}
