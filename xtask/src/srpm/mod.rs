//! `cargo xtask build-srpm`: the source RPM that `rpmbuild --rebuild` turns
//! into the kmod and DKMS packages, written without rpmbuild; and
//! `cargo xtask bench-srpm`, its wall time.
//!
//! A thin route over the packaging pipeline (pipeline/): the source tree
//! every route ships becomes the spec's Source0
//! (`nvidia_peer_memory-<ver>.tar.gz`), beside the spec rendered from
//! rpm/nvidia_peer_memory.spec.tera (spec.rs); writer.rs lays the two out
//! as a source rpm.

mod payload;
pub mod spec;
pub mod writer;

use crate::bench_writer::{BenchArgs, bench_writer};
use crate::distro::{Distro, Family, ModuleRoute};
use crate::pipeline::{self, Plan, Request, Route, SingleArtifact, SourceTree};
use anyhow::{Context, Result};
use std::path::Path;
use writer::{SourceFile, SourcePackage};

/// `build-srpm --help`'s description (main.rs puts it on the subcommand:
/// a variant's doc comment would override one given here).
pub const BUILD_LONG_ABOUT: &str = "Build the source RPM nvidia_peer_memory-<version>-<release>.src.rpm, \
without rpmbuild. `rpmbuild --rebuild` turns it into the --distro family's module package \
(RHEL/Rocky/Alma: kmod-nvidia_peer_memory, kABI-tracked, for --define 'kernel_version \
<kernel release>' or the newest kernel-devel; SLES: nvidia_peer_memory-kmp-default; Fedora: \
none), nvidia_peer_memory-dkms (the module sources, built by DKMS for every kernel) and \
nvidia_peer_memory-common (the boot service, its preset and /etc/infiniband/nv_peer_mem.conf). \
The same sources, data and SOURCE_DATE_EPOCH (default: the last commit's \
time) give a byte-identical file.\n\n\
Exit status: 0 on success; 2 on bad input (unknown distro, malformed packaging data, a \
version RPM cannot carry, unusable --out), with a message naming the fix; 1 on other \
failures. No partial file is left behind.";

/// `bench-srpm --help`'s description.
pub const BENCH_LONG_ABOUT: &str = "Run `build-srpm` with this (already built) xtask binary \
RUNS times into a scratch directory and print the wall time per run: min, median, mean \
and max. Figures only; the target is 20 ms or less (the original build_module.sh took \
~115 ms).";

/// `--distro`'s help on build-srpm.
pub const DISTRO_HELP: &str = "Target distribution: the id of an rpm-family entry of \
packaging/distros.yaml (e.g. rhel8, rhel9, rocky9, alma9, fedora, sles15; an unknown id is \
answered with the full list). It selects the spec's BuildRequires, the -dkms package's \
Requires and the Group tag. Default: the distribution /etc/os-release names when it has an \
entry (RHEL/CentOS, Rocky, Alma, Fedora, SLES/Leap), else rhel9.";

/// `cargo xtask build-srpm`: builds and prints where, and the next steps.
pub fn build_srpm_command(request: &Request) -> Result<()> {
    pipeline::build_command::<Srpm>(request)
}

/// The source rpm route.
pub struct Srpm;

impl Route for Srpm {
    const COMMAND: &'static str = "build-srpm";
    const FAMILY: Family = Family::Rpm;
    const FALLBACK_DISTRO: &'static str = "rhel9";
    const SOURCE_NAME: &'static str = spec::PACKAGE_NAME;
    /// The source package with the spec, without its Source0 yet.
    type Rendered = SourcePackage;

    fn check_distro(distro: &Distro) -> Result<()> {
        spec::validate_rpm_distro(distro).map(|_| ())
    }

    fn package_version(workspace_version: &str) -> Result<String> {
        writer::check_version_part("the workspace version (root Cargo.toml)", workspace_version)?;
        Ok(workspace_version.to_owned())
    }

    fn add_context(_plan: &Plan, _context: &mut tera::Context) {}

    /// The spec, and the header fields read back from it.
    fn render(
        plan: &Plan,
        _context: &tera::Context,
        _tree: &mut SourceTree,
    ) -> Result<SourcePackage> {
        let build_time = u32::try_from(plan.source_date_epoch).context(
            "SOURCE_DATE_EPOCH is past 2106, which rpm cannot store; set it to a real date",
        )?;
        let spec_text = spec::render(
            &plan.packaging,
            &plan.distro,
            &plan.package_version,
            plan.release,
            plan.source_date_epoch,
        )?;
        let (summary, description) = spec::summary_and_description(&spec_text)?;
        Ok(SourcePackage {
            name: spec::PACKAGE_NAME.to_owned(),
            version: plan.package_version.clone(),
            release: plan.release.to_string(),
            summary,
            description,
            license: env!("CARGO_PKG_LICENSE").to_owned(),
            group: spec_value(&spec_text, "Group")?,
            url: spec_value(&spec_text, "URL").ok(),
            build_requires: spec::build_requires(&spec_text)?,
            changelog: spec::changelog(&spec_text)?,
            build_time,
            // A fixed name: the real host would make the bytes depend on it.
            build_host: "reproducible".to_owned(),
            arch: rpm_arch().to_owned(),
            spec: SourceFile {
                name: format!("{}.spec", spec::PACKAGE_NAME),
                contents: spec_text.into_bytes(),
                permissions: 0o644,
            },
            sources: spec::render_module_sources(
                &plan.packaging,
                &plan.distro,
                &plan.package_version,
                plan.release,
                plan.source_date_epoch,
            )?
            .into_iter()
            .map(|(name, text)| SourceFile {
                name,
                contents: text.into_bytes(),
                permissions: 0o644,
            })
            .collect(),
        })
    }
}

impl SingleArtifact for Srpm {
    /// The spec's Source0 is the source tree.
    fn assemble(plan: &Plan, tree_tar_gz: Vec<u8>, mut package: SourcePackage) -> Result<Vec<u8>> {
        package.sources.insert(
            0,
            SourceFile {
                name: format!("{}.tar.gz", plan.tree_prefix(Srpm::SOURCE_NAME)),
                contents: tree_tar_gz,
                permissions: 0o644,
            },
        );
        writer::write_source_rpm(&package)
    }

    fn artifact_name(plan: &Plan) -> String {
        format!(
            "{}-{}-{}.src.rpm",
            spec::PACKAGE_NAME,
            plan.package_version,
            plan.release
        )
    }

    fn report(plan: &Plan, artifact: &Path) -> String {
        let name = artifact.display();
        let module = match plan.distro.rpm.as_ref().map(|rpm| rpm.route) {
            Some(ModuleRoute::Kmod) => "kmod-nvidia_peer_memory-<ver>-<rel>.<arch>.rpm",
            Some(ModuleRoute::Kmp) => {
                "nvidia_peer_memory-kmp-default-<ver>_k<kernel>-<rel>.<arch>.rpm"
            }
            _ => "nvidia_peer_memory-dkms-<ver>-<rel>.noarch.rpm",
        };
        format!(
            "Built: {name}\n\n\
             To install run on RPM based OS:\n\
             \x20   # rpmbuild --rebuild {name}\n\
             \x20   # rpm -Uvh {module} nvidia_peer_memory-common-<ver>-<rel>.<arch>.rpm\n\
             (docs/guide/packages.md, \"RPM fleets\", has each family's commands)\n"
        )
    }
}

/// rpm's name for this host's architecture (what rpmbuild records in a
/// source package; it does not limit where the package can be rebuilt).
fn rpm_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x86_64",
        "aarch64" => "aarch64",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        _ => "noarch",
    }
}

/// The value of a `Tag: value` line of the spec.
fn spec_value(spec: &str, tag: &str) -> Result<String> {
    spec.lines()
        .find_map(|line| line.strip_prefix(tag)?.strip_prefix(':'))
        .map(|value| value.trim().to_owned())
        .with_context(|| {
            format!(
                "the rendered spec has no `{tag}:` line; fix {}",
                spec::TEMPLATE
            )
        })
}

/// `cargo xtask bench-srpm`: times build-srpm runs of this very binary.
pub fn bench_srpm_command(args: &BenchArgs) -> Result<()> {
    bench_writer(
        "build-srpm",
        args,
        "target <= 20 ms; the original build_module.sh: ~115 ms",
    )
}
