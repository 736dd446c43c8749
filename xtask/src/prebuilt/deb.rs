//! build-modules for Debian and Ubuntu: the route over the pipeline, the
//! checks of every kernel's inputs, the builds and the packages
//! (package.rs) of each kernel.

use super::kernel::{self, Kernel};
use super::modsign::{self, ModSign};
use super::prerequisites::{self, NvidiaSource, OfedTree};
use super::{BuildModulesArgs, Scratch, build, core_cache, kernel_meta, package};
use crate::deb::{Deb, SOURCE_PACKAGE, debian_files, debian_upstream_version, debian_version};
use crate::distro::{DATA_FILE, Distro, Family};
use crate::dkms_package::tree_files;
use crate::error::{BadInput, print_report};
use crate::pipeline::{self, Plan, Route, SourceTree};
use crate::render::RenderedFile;
use crate::tarball::write_atomically;
use anyhow::{Result, ensure};

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
    /// The kernel metapackage's track (`amd64`, `generic-hwe-24.04`) and
    /// its version that installs this kernel, unless --no-metapackage.
    kernel_meta: Option<(String, String)>,
}

/// build-modules for Debian and Ubuntu.
pub fn build(args: &BuildModulesArgs) -> Result<()> {
    let request = args.request.clone();
    let (plan, tree, debian) = pipeline::source_tree::<Prebuilt>(&request)?;
    let (targets, nvidia, modsign) = check_inputs(args, &plan).map_err(BadInput::wrap)?;
    let tree_files = tree_files::read(&tree.to_tar_gz()?)?;
    let core_cache = core_cache(args);
    let scratch = Scratch::new()?;
    let mut context = plan.base_context();
    Prebuilt::add_context(&plan, &mut context);
    let version = debian_version(&plan);
    let upstream = debian_upstream_version(&plan.workspace_version)?;
    // The metapackage of each flavour and series (package::Series) goes
    // with its newest kernel.
    let meta_name = |target: &Target| {
        target
            .kernel_meta
            .as_ref()
            .map(|(track, version)| package::meta_package(track, package::Series::of(version)))
    };
    let newest_of_series = |target: &Target| {
        target.kernel_meta.as_ref().is_some_and(|(_, mine)| {
            !targets.iter().any(|other| {
                meta_name(other) == meta_name(target)
                    && other
                        .kernel_meta
                        .as_ref()
                        .is_some_and(|(_, theirs)| kernel_meta::dpkg_greater(theirs, mine))
            })
        })
    };
    let mut packages: Vec<(String, Vec<u8>)> = Vec::new();
    let mut costs = String::new();
    let mut done_metapackages: Vec<String> = Vec::new();
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
            &plan,
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
        let meta = meta_name(target)
            .filter(|name| newest_of_series(target) && !done_metapackages.contains(name));
        let with_meta = meta.is_some();
        if let Some(name) = &meta {
            done_metapackages.push(name.clone());
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
        kernel_context.insert("service_floor", &upstream);
        if let Some(meta) = &meta {
            let (track, meta_version) = target.kernel_meta.clone().unwrap_or_default();
            kernel_context.insert("meta_package", meta);
            kernel_context.insert(
                "meta_backports",
                &(package::Series::of(&meta_version) == package::Series::Backports),
            );
            kernel_context.insert(
                "meta_version",
                &package::meta_version(&meta_version, &plan.package_version, plan.release),
            );
            kernel_context.insert("kernel_meta", &format!("linux-image-{track}"));
            // An Ubuntu HWE track (linux-image-<flavour>-hwe-<release>).
            kernel_context.insert("meta_track", &(track != kernel.flavour).then_some(&track));
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
    if let Some(sign) = &modsign {
        packages.push((modsign::NODE_CERTIFICATE.to_owned(), sign.der.clone()));
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
    if modsign.is_some() {
        report.push_str(&ModSign::enrolment_note(
            &plan.out.join(modsign::NODE_CERTIFICATE),
        ));
    }
    report.push_str(super::unsigned_warning(args));
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
        let kernel_meta = if args.no_metapackage {
            None
        } else {
            Some(kernel_meta::find(
                &kernel.flavour,
                &kernel.release,
                &images,
            )?)
        };
        targets.push(Target {
            kernel,
            ofed,
            images,
            kernel_meta,
        });
    }
    let nvidia = prerequisites::find_nvidia(args.nvidia_src.as_deref())?;
    let modsign = modsign::from_args(args.modsign_key.as_deref(), args.modsign_cert.as_deref())?;
    Ok((targets, nvidia, modsign))
}
