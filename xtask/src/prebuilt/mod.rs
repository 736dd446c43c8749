//! `cargo xtask build-modules`: prebuilt nv_peer_mem module packages, one
//! per kernel, for fleets whose nodes have no compiler (issue 21; design and
//! sources in docs/fleet.md).
//!
//! A route of the one packaging pipeline: the plan and the source tree are
//! the pipeline's (the same tree the -dkms package ships), the module is
//! built from that tree for each `--kernel` on this build host, and each
//! kernel gets `nvidia-peer-memory-modules-<release>`; the newest kernel of
//! each flavour also gets the metapackage `nvidia-peer-memory-modules-<flavour>`.
//! Every input (each kernel's headers, MLNX_OFED build, NVIDIA source,
//! flavour metapackage; the signing key) is checked before anything is
//! built, and every package is built before any is written.

mod build;
mod deb;
pub(crate) mod kernel;
mod kernel_meta;
mod modsign;
mod package;
mod prerequisites;
mod rpm;

use crate::distro::{Distro, Family};
use crate::error::BadInput;
use crate::pipeline::Request;
use crate::workspace;
use anyhow::{Context, Result, ensure};
use std::path::PathBuf;

/// `build-modules --help`'s description.
pub const BUILD_LONG_ABOUT: &str = "Build nv_peer_mem.ko on this build host for each \
--kernel and write prebuilt binary packages, so that nodes install GPUDirect RDMA with \
no compiler, kernel headers or DKMS:\n\n\
  nvidia-peer-memory-modules-<release>_<version>_<arch>.deb   the module in \
/lib/modules/<release>/updates/, depending on that kernel's image and on the MLNX_OFED \
package it was built against (=), with the symbol versions it imports in its doc \
directory;\n\
  nvidia-peer-memory-modules-<flavour>_<kernel meta version>+<version>.<release>_<arch>.deb   \
for the newest kernel of each flavour: depends on it and on linux-image-<flavour> of \
that version, so a kernel update brings its module package, and is held back until \
the repository has one (a kernel of an Ubuntu HWE track, which only \
linux-image-<flavour>-hwe-<release> installs: nvidia-peer-memory-modules-<flavour>-hwe-<release>, \
following that).\n\n\
Each kernel needs its headers (/lib/modules/<release>/build), MLNX_OFED's build for it \
(<ofed root>/<machine>/<release> with Module.symvers exporting \
ib_register_peer_memory_client and include/rdma/peer_mem.h) and the NVIDIA driver \
source (nv-p2p.h). They and the Rust toolchain stay on the build host. Put the packages \
and the nvidia-peer-memory service package (dpkg-buildpackage of build-deb's source) in \
a repository with `cargo xtask build-repo`.\n\n\
RHEL family (--distro rhel9, or a RHEL-family host): build-srpm's source rpm is \
rebuilt with this host's rpmbuild once per --kernel (kernel-devel in /usr/src/kernels), \
each kmod-nvidia_peer_memory with the kernel in its release; -common and -dkms once. \
SLES (--distro sles15, sles16): the one kernel /usr/src/linux-obj names (kernel-syms; SLES 16: kernel-macros).\n\n\
Exit status: 0 on success; 2 on bad input (a kernel without headers, MLNX_OFED's \
symbols or a known flavour metapackage; a bad --kernel, --ofed-package or signing \
option; unusable --out), with a message naming the fix, before anything is built; 1 on \
other failures (a build failed). Nothing is written to --out unless every package was \
built.";

/// `--distro`'s help on build-modules.
pub const DISTRO_HELP: &str = "Target distribution: an id of packaging/distros.yaml \
(debian12, ubuntu2404; rhel9, rocky9, sles15 for their kmod/KMP packages). Default: this \
host's distribution when listed, else debian12.";

/// Options of `cargo xtask build-modules`.
#[derive(Debug, clap::Args)]
pub struct BuildModulesArgs {
    /// Kernel release to build for, as `uname -r` prints it (repeatable):
    /// 6.1.0-56-amd64, 6.8.0-45-generic.
    #[arg(long = "kernel", value_name = "RELEASE", required = true)]
    pub kernels: Vec<String>,
    #[command(flatten)]
    pub request: Request,
    /// Where MLNX_OFED keeps its per-kernel builds: <DIR>/<machine>/<release>.
    #[arg(long, value_name = "DIR", default_value = "/usr/src/ofa_kernel")]
    pub ofed_root: PathBuf,
    /// The MLNX_OFED package (NAME=VERSION) the modules depend on with `=`,
    /// when no package owns the MLNX_OFED build (a hand-built tree);
    /// `{release}` in NAME and VERSION stands for each kernel's release
    /// (mlnx-ofed-kernel-modules=25.10.OFED.25.10.1.7.1.1-1.kver.{release};
    /// Ubuntu 26.04: linux-main-modules-doca-ofed-26.01-{release}=7.0.0-29.29).
    #[arg(long, value_name = "NAME=VERSION")]
    pub ofed_package: Option<String>,
    /// NVIDIA driver source with nv-p2p.h. Default: the first
    /// /usr/src/nvidia-* that has one.
    #[arg(long, value_name = "DIR")]
    pub nvidia_src: Option<PathBuf>,
    /// Kernel build trees are <DIR>/<release>/build.
    #[arg(long, value_name = "DIR", default_value = "/lib/modules")]
    pub modules_root: PathBuf,
    /// Private key to sign the modules with (Secure Boot), with
    /// --modsign-cert: a PEM file, or a PKCS#11 URI (pkcs11:token=...;
    /// object=...?pin-source=file:...) for a key in a token or HSM, which
    /// the kernel's sign-file opens through OpenSSL's pkcs11 provider
    /// (Debian: pkcs11-provider; PKCS11_PROVIDER_MODULE names the token's
    /// PKCS#11 module; see docs/fleet.md, "A key in a token or HSM").
    #[arg(long, value_name = "FILE|URI", requires = "modsign_cert")]
    pub modsign_key: Option<String>,
    /// X.509 certificate of --modsign-key (DER or PEM), as sign-file takes it.
    #[arg(long, value_name = "FILE", requires = "modsign_key")]
    pub modsign_cert: Option<PathBuf>,
    /// Write no flavour metapackage (apt cannot tell which
    /// linux-image-<flavour> installs the kernel).
    #[arg(long)]
    pub no_metapackage: bool,
    /// The compiled Rust core shared by every kernel's build. Default: as
    /// root /var/cache/nv_peer_mem (DKMS's), else target/nv_peer_mem-core-cache.
    #[arg(long, value_name = "DIR")]
    pub core_cache: Option<PathBuf>,
    /// RHEL family: kernel build trees are <DIR>/<release> (kernel-devel).
    #[arg(long, value_name = "DIR", default_value = "/usr/src/kernels")]
    pub kernel_devel_root: PathBuf,
    /// SLES: the KMP macros' kernel build trees, <DIR>/<cpu>/<flavor>.
    #[arg(long, value_name = "DIR", default_value = "/usr/src/linux-obj")]
    pub suse_obj_root: PathBuf,
    /// RHEL family: one more option for each rpmbuild --rebuild (repeatable),
    /// e.g. --rpmbuild-option=--define='ofa_kernel /usr/src/ofa_kernel/default'.
    #[arg(
        long = "rpmbuild-option",
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    pub rpmbuild_options: Vec<String>,
}

/// `cargo xtask build-modules`: Debian and Ubuntu in deb.rs, the RHEL
/// family in rpm.rs.
pub fn build_modules_command(args: &BuildModulesArgs) -> Result<()> {
    if let Some(distro) = rpm_distro(args).map_err(BadInput::wrap)? {
        return rpm::build(args, &distro);
    }
    ensure!(
        args.rpmbuild_options.is_empty(),
        BadInput::error("--rpmbuild-option is for the RHEL family (--distro rhel9, ...)")
    );
    deb::build(args)
}

/// The rpm distro entry this run builds for: --distro's, else this host's
/// (/etc/os-release) when it is an rpm one; None for the deb family.
fn rpm_distro(args: &BuildModulesArgs) -> Result<Option<Distro>> {
    let packaging = crate::distro::Packaging::load()?;
    let id = match &args.request.distro {
        Some(id) => Some(id.clone()),
        None => std::fs::read_to_string("/etc/os-release")
            .ok()
            .and_then(|text| crate::distro::host_distro_id(&text))
            .filter(|id| packaging.find(id).is_ok()),
    };
    let Some(id) = id else { return Ok(None) };
    let distro = packaging.find(&id)?;
    Ok((distro.family == Family::Rpm).then(|| distro.clone()))
}

/// What build-modules says after building modules without a signing key:
/// a kernel that enforces module signatures (module.sig_enforce=1, or the
/// lockdown Secure Boot brings: module_sig_check() in
/// kernel/module/signing.c) refuses them (docs/fleet.md, "Module signing").
pub(crate) fn unsigned_warning(args: &BuildModulesArgs) -> &'static str {
    if args.modsign_key.is_some() && args.modsign_cert.is_some() {
        ""
    } else {
        "\nWARNING: the modules are not signed (no --modsign-key/--modsign-cert): a node whose kernel enforces module signatures (Secure Boot's lockdown, or module.sig_enforce=1) refuses to load them. Sign them with a key the nodes trust (docs/fleet.md, \"Module signing\").\n"
    }
}

/// --core-cache, else kmod/Makefile's choice for root, else one under
/// target/ (a scratch tree's own cache would be lost per kernel).
pub(crate) fn core_cache(args: &BuildModulesArgs) -> PathBuf {
    if let Some(dir) = &args.core_cache {
        return dir.clone();
    }
    let is_root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if is_root {
        PathBuf::from("/var/cache/nv_peer_mem")
    } else {
        workspace::path("target/nv_peer_mem-core-cache")
    }
}

/// A scratch directory for the builds, removed when dropped (also when a
/// build fails).
pub(crate) struct Scratch(pub PathBuf);

impl Scratch {
    pub(crate) fn new() -> Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("nvpm-build-modules-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
