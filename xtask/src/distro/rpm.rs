//! The `rpm:` block of an rpm-family entry of packaging/distros.yaml: how
//! that distribution packages a kernel module (route, flavour, module
//! directory, compression, arches, package names). The spec template reads
//! it as `distro.rpm.<field>`; build-srpm checks it (srpm/spec.rs).

use serde::{Deserialize, Serialize};
use std::fmt;

/// How a distribution gets the module as a prebuilt package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModuleRoute {
    /// `kmod-<name>` through Red Hat's `%kernel_module_package` (kmodtool).
    Kmod,
    /// `<name>-kmp-<flavor>` through SUSE's `%suse_kernel_module_package`.
    Kmp,
    /// No prebuilt module package: only `-dkms`.
    Dkms,
}

impl fmt::Display for ModuleRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ModuleRoute::Kmod => "kmod",
            ModuleRoute::Kmp => "kmp",
            ModuleRoute::Dkms => "dkms",
        })
    }
}

/// One rpm distribution's module packaging (field meanings: the comment
/// above the rpm entries of packaging/distros.yaml).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RpmPackaging {
    pub route: ModuleRoute,
    pub group: String,
    pub arches: Vec<String>,
    pub kernel_devel: String,
    #[serde(default)]
    pub macros: Option<String>,
    #[serde(default)]
    pub flavor: Option<String>,
    #[serde(default)]
    pub module_dir: Option<String>,
    #[serde(default)]
    pub compression: Option<Compression>,
    pub build_requires: Vec<String>,
    pub rust_packages: Vec<String>,
    pub dkms_requires: Vec<String>,
    pub prerequisites: Vec<String>,
    #[serde(default)]
    pub python3_sitelib: Option<String>,
    #[serde(default)]
    pub dnf5_actions: bool,
}

/// How a distribution compresses its kernel modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    Xz,
    Zstd,
    None,
}
