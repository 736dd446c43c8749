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
mod kernel;
mod kernel_meta;
mod package;
mod prerequisites;

use crate::deb::{Deb, SOURCE_PACKAGE, debian_files, debian_upstream_version, debian_version};
use crate::distro::{DATA_FILE, Distro, Family};
use crate::dkms_package::tree_files;
use crate::error::{BadInput, print_report};
use crate::pipeline::{self, Plan, Release, Request, Route, SourceTree};
use crate::render::RenderedFile;
use crate::tarball::write_atomically;
use crate::workspace;
use anyhow::{Context, Result, ensure};
use build::ModSign;
use kernel::Kernel;
use prerequisites::{NvidiaSource, OfedTree};
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
the repository has one.\n\n\
Each kernel needs its headers (/lib/modules/<release>/build), MLNX_OFED's build for it \
(<ofed root>/<machine>/<release> with Module.symvers exporting \
ib_register_peer_memory_client and include/rdma/peer_mem.h) and the NVIDIA driver \
source (nv-p2p.h). They and the Rust toolchain stay on the build host. Put the packages \
and the nvidia-peer-memory service package (dpkg-buildpackage of build-deb's source) in \
a repository with `cargo xtask build-repo`.\n\n\
Exit status: 0 on success; 2 on bad input (a kernel without headers, MLNX_OFED's \
symbols or a known flavour metapackage; a bad --kernel, --ofed-package or signing \
option; unusable --out), with a message naming the fix, before anything is built; 1 on \
other failures (a build failed). Nothing is written to --out unless every package was \
built.";

/// Options of `cargo xtask build-modules`.
#[derive(Debug, clap::Args)]
pub struct BuildModulesArgs {
    /// Kernel release to build for, as `uname -r` prints it (repeatable):
    /// 6.1.0-56-amd64, 6.8.0-45-generic.
    #[arg(long = "kernel", value_name = "RELEASE", required = true)]
    pub kernels: Vec<String>,
    /// Directory the packages are written to (must exist and be writable).
    #[arg(long, value_name = "DIR", default_value = "/tmp")]
    pub out: PathBuf,
    /// Target distribution: a deb id of packaging/distros.yaml (debian12,
    /// ubuntu2404, ...). Default: this host's distribution when listed,
    /// else debian12.
    #[arg(long, value_name = "ID")]
    pub distro: Option<String>,
    /// Package release (the N in <version>-N). Default: `release` in
    /// packaging/distros.yaml.
    #[arg(long, value_name = "N")]
    pub release: Option<Release>,
    /// Where MLNX_OFED keeps its per-kernel builds: <DIR>/<machine>/<release>.
    #[arg(long, value_name = "DIR", default_value = "/usr/src/ofa_kernel")]
    pub ofed_root: PathBuf,
    /// The MLNX_OFED package (NAME=VERSION) the modules depend on with `=`,
    /// when no package owns the MLNX_OFED build (a hand-built tree);
    /// `{release}` in VERSION stands for each kernel's release
    /// (mlnx-ofed-kernel-modules=25.10.OFED.25.10.1.7.1.1-1.kver.{release}).
    #[arg(long, value_name = "NAME=VERSION")]
    pub ofed_package: Option<String>,
    /// NVIDIA driver source with nv-p2p.h. Default: the first
    /// /usr/src/nvidia-* that has one.
    #[arg(long, value_name = "DIR")]
    pub nvidia_src: Option<PathBuf>,
    /// Kernel build trees are <DIR>/<release>/build.
    #[arg(long, value_name = "DIR", default_value = "/lib/modules")]
    pub modules_root: PathBuf,
    /// Private key to sign the modules with (Secure Boot); with --modsign-cert.
    #[arg(long, value_name = "FILE", requires = "modsign_cert")]
    pub modsign_key: Option<PathBuf>,
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
}

/// The build-modules route: the pipeline's plan and source tree for the
/// deb family; the packages are made per kernel.
pub struct Prebuilt;

impl Route for Prebuilt {
    const COMMAND: &'static str = "build-modules";
    const FAMILY: Family = Family::Deb;
    const FALLBACK_DISTRO: &'static str = Deb::FALLBACK_DISTRO;
    const SOURCE_NAME: &'static str = SOURCE_PACKAGE;
    /// debian/'s rendered files (copyright and changelog for the packages'
    /// doc directories).
    type Rendered = Vec<RenderedFile>;

    fn check_distro(distro: &Distro) -> Result<()> {
        Deb::check_distro(distro)?;
        ensure!(
            !distro.kernel_image_packages.is_empty(),
            "{DATA_FILE}: distro `{}` has no kernel_image_packages; list the packages that install one kernel's image, e.g. [\"linux-image-{{release}}\"]",
            distro.id
        );
        for pattern in &distro.kernel_image_packages {
            ensure!(
                pattern.contains("{release}")
                    && crate::distro::is_debian_package_name(
                        &pattern.replace("{release}", "6.1.0-1-amd64")
                    ),
                "{DATA_FILE}: distro `{}` lists kernel image package `{pattern}`; it must name a package with {{release}} for the kernel release",
                distro.id
            );
        }
        Ok(())
    }

    fn package_version(workspace_version: &str) -> Result<String> {
        debian_upstream_version(workspace_version)
    }

    fn add_context(plan: &Plan, context: &mut tera::Context) {
        Deb::add_context(plan, context);
    }

    fn render(
        _plan: &Plan,
        context: &tera::Context,
        _tree: &mut SourceTree,
    ) -> Result<Vec<RenderedFile>> {
        debian_files(context)
    }
}

/// One kernel, checked, with what its module is built against.
struct Target {
    kernel: Kernel,
    ofed: OfedTree,
    images: Vec<String>,
    /// The flavour metapackage's version for this kernel, unless
    /// --no-metapackage.
    kernel_meta_version: Option<String>,
}

/// `cargo xtask build-modules`.
pub fn build_modules_command(args: &BuildModulesArgs) -> Result<()> {
    let request = Request {
        out: args.out.clone(),
        distro: args.distro.clone(),
        release: args.release,
    };
    let (plan, tree, debian) = pipeline::source_tree::<Prebuilt>(&request)?;
    let (targets, nvidia, modsign) = check_inputs(args, &plan).map_err(BadInput::wrap)?;
    let tree_files = tree_files::read(&tree.to_tar_gz()?)?;
    let core_cache = core_cache(args);
    let scratch = Scratch::new()?;
    let mut context = plan.base_context();
    Prebuilt::add_context(&plan, &mut context);
    let version = debian_version(&plan);
    // The metapackage of each flavour goes with its newest kernel.
    let newest_of_flavour = |target: &Target| {
        target.kernel_meta_version.as_ref().is_some_and(|mine| {
            !targets.iter().any(|other| {
                other.kernel.flavour == target.kernel.flavour
                    && other
                        .kernel_meta_version
                        .as_ref()
                        .is_some_and(|theirs| kernel_meta::dpkg_greater(theirs, mine))
            })
        })
    };
    let mut packages: Vec<(String, Vec<u8>)> = Vec::new();
    let mut costs = String::new();
    let mut done_flavours: Vec<String> = Vec::new();
    for (index, target) in targets.iter().enumerate() {
        let kernel = &target.kernel;
        eprintln!(
            "build-modules: [{}/{}] building nv_peer_mem for {} ({})...",
            index + 1,
            targets.len(),
            kernel.release,
            kernel.arch.debian()
        );
        let dir = scratch.0.join(&kernel.release);
        build::materialize(&tree_files, &dir)?;
        let built = build::build(
            &dir,
            kernel,
            &target.ofed,
            &nvidia,
            &core_cache,
            modsign.as_ref(),
            &plan.package_version,
        )?;
        let cost = format!(
            "{}: {:.1} s, peak RSS {}\n",
            kernel.release,
            built.seconds,
            built
                .peak_rss_kib
                .map_or("unknown (install GNU time)".to_owned(), |k| format!(
                    "{} MiB",
                    k / 1024
                ))
        );
        eprint!("build-modules: {cost}");
        costs.push_str(&cost);
        let with_meta = newest_of_flavour(target) && !done_flavours.contains(&kernel.flavour);
        if with_meta {
            done_flavours.push(kernel.flavour.clone());
        }
        let mut kernel_context = context.clone();
        kernel_context.insert("kernel", &kernel.release);
        kernel_context.insert("flavour", &kernel.flavour);
        kernel_context.insert("arch", kernel.arch.debian());
        kernel_context.insert("module_package", &package::module_package(&kernel.release));
        kernel_context.insert("image_packages", &target.images);
        kernel_context.insert("ofed_package", &target.ofed.package.0);
        kernel_context.insert("ofed_version", &target.ofed.package.1);
        kernel_context.insert("debian_version", &version);
        if with_meta {
            let meta_version = target.kernel_meta_version.clone().unwrap_or_default();
            kernel_context.insert("meta_package", &package::meta_package(&kernel.flavour));
            kernel_context.insert(
                "meta_version",
                &package::meta_version(&meta_version, &plan.package_version, plan.release),
            );
            kernel_context.insert("kernel_meta", &format!("linux-image-{}", kernel.flavour));
            kernel_context.insert("kernel_meta_version", &meta_version);
        } else {
            kernel_context.insert("meta_package", &false);
        }
        packages.extend(package::debs(&package::KernelPackages {
            context: &kernel_context,
            release: &kernel.release,
            ko: &built.ko,
            imports: &built.imports,
            debian: &debian,
            mtime: plan.source_date_epoch,
            with_meta,
        })?);
    }
    let mut report = String::new();
    for (name, bytes) in &packages {
        let path = plan.out.join(name);
        write_atomically(&path, bytes)?;
        report.push_str(&format!("Built: {}\n", path.display()));
    }
    report.push_str(&format!(
        "\nBuild cost per kernel (core cache {}):\n{costs}\nNext: put these and the nvidia-peer-memory package in a signed repository:\n    cargo xtask build-repo --repo <DIR> --suite {} --sign-key <KEY> {}/*.deb\n",
        core_cache.display(),
        plan.distro.codename.as_deref().unwrap_or("stable"),
        plan.out.display()
    ));
    print_report(&report)
}

/// Every input of build-modules, checked before anything is built.
fn check_inputs(
    args: &BuildModulesArgs,
    plan: &Plan,
) -> Result<(Vec<Target>, NvidiaSource, Option<ModSign>)> {
    let mut targets: Vec<Target> = Vec::new();
    for release in &args.kernels {
        ensure!(
            !targets.iter().any(|t| &t.kernel.release == release),
            "--kernel {release} is given twice"
        );
        let kernel = Kernel::find(release, &args.modules_root)?;
        let ofed =
            prerequisites::find_ofed(&args.ofed_root, &kernel, args.ofed_package.as_deref())?;
        let images = kernel::image_packages(&plan.distro, &kernel.release);
        let kernel_meta_version = if args.no_metapackage {
            None
        } else {
            Some(kernel_meta::find(
                &format!("linux-image-{}", kernel.flavour),
                &kernel.release,
                &images,
            )?)
        };
        targets.push(Target {
            kernel,
            ofed,
            images,
            kernel_meta_version,
        });
    }
    let nvidia = prerequisites::find_nvidia(args.nvidia_src.as_deref())?;
    let modsign = match (&args.modsign_key, &args.modsign_cert) {
        (Some(key), Some(cert)) => {
            for (option, file) in [("--modsign-key", key), ("--modsign-cert", cert)] {
                ensure!(
                    file.is_file(),
                    "{option} {}: no such file; pass the module signing key and its certificate (see docs/fleet.md, \"Module signing\")",
                    file.display()
                );
            }
            Some(ModSign {
                key: std::fs::canonicalize(key)?,
                cert: std::fs::canonicalize(cert)?,
            })
        }
        _ => None,
    };
    Ok((targets, nvidia, modsign))
}

/// --core-cache, else kmod/Makefile's choice for root, else one under
/// target/ (a scratch tree's own cache would be lost per kernel).
fn core_cache(args: &BuildModulesArgs) -> PathBuf {
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
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch> {
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
