//! `cargo xtask build-deb`: writes `nvidia-peer-memory_<ver>.orig.tar.gz`,
//! which unpacks to `nvidia-peer-memory-<ver>/` with a rendered `debian/`
//! inside, ready for `dpkg-buildpackage -us -uc` (the layout the original
//! build_module.sh produced; see docs/packaging.md). Also
//! `cargo xtask bench-deb`.
//!
//! A thin route over the packaging pipeline (pipeline/): besides the source
//! tree every route ships, the tarball holds `debian/`, rendered from
//! debian/ (see render.rs for the rules), plus
//! `debian/nvidia-peer-memory.<unit>`, copies of the units of packaging/
//! (nv_peer_mem.service, gpudirect-rdma-check's service and timer), so
//! that dh_installsystemd installs them where each release expects units.

use crate::bench_writer::{BenchArgs, bench_writer};
use crate::distro::{Distro, Family};
use crate::pipeline::{self, Plan, Request, Route, SingleArtifact, SourceTree};
use crate::render::{self, RenderedFile};
use crate::workspace;
use anyhow::{Context, Result, bail};
use std::path::Path;

/// Debian source package name (and the tarball's name).
pub const SOURCE_PACKAGE: &str = "nvidia-peer-memory";

/// Debian files a buildable source package cannot do without.
const REQUIRED_DEBIAN_FILES: [&str; 5] = [
    "changelog",
    "control",
    "copyright",
    "rules",
    "source/format",
];

/// `--distro`'s help on build-deb.
pub const DISTRO_HELP: &str = "Target distribution: the `id` of a deb entry in \
packaging/distros.yaml (debian12, debian13, ubuntu2204, ubuntu2404, ubuntu2604). It decides \
the changelog suite, Standards-Version and the Rust toolchain packages the -dkms package \
depends on. Default: this host's distribution (from /etc/os-release) when listed, else \
debian12.";

/// The Debian route.
pub struct Deb;

impl Route for Deb {
    const COMMAND: &'static str = "build-deb";
    const FAMILY: Family = Family::Deb;
    const FALLBACK_DISTRO: &'static str = "debian12";
    const SOURCE_NAME: &'static str = SOURCE_PACKAGE;
    type Rendered = ();

    fn check_distro(distro: &Distro) -> Result<()> {
        distro.validate_deb()
    }

    fn package_version(workspace_version: &str) -> Result<String> {
        debian_upstream_version(workspace_version)
    }

    fn add_context(plan: &Plan, context: &mut tera::Context) {
        context.insert("upstream_version", &plan.package_version);
        context.insert("debian_version", &debian_version(plan));
    }

    fn render(_plan: &Plan, context: &tera::Context, tree: &mut SourceTree) -> Result<()> {
        for file in debian_files(context)? {
            tree.add(file)?;
        }
        Ok(())
    }
}

impl SingleArtifact for Deb {
    fn assemble(_plan: &Plan, tree_tar_gz: Vec<u8>, (): ()) -> Result<Vec<u8>> {
        Ok(tree_tar_gz)
    }

    fn artifact_name(plan: &Plan) -> String {
        format!("{SOURCE_PACKAGE}_{}.orig.tar.gz", plan.package_version)
    }

    fn report(plan: &Plan, artifact: &Path) -> String {
        let dir = plan.out.display();
        let file = artifact.file_name().unwrap_or_default().to_string_lossy();
        format!(
            "Built: {path}\n\nTo install on {name}:\n    cd {dir}\n    tar xzf {file}\n    cd {prefix}\n    dpkg-buildpackage -us -uc\n    dpkg -i ../{SOURCE_PACKAGE}_{v}_all.deb ../{SOURCE_PACKAGE}-dkms_{v}_all.deb\n",
            path = artifact.display(),
            name = plan.distro.name,
            prefix = plan.tree_prefix(Deb::SOURCE_NAME),
            v = debian_version(plan),
        )
    }
}

/// `cargo xtask build-deb`: build, then tell the user what to run next, as
/// build_module.sh did.
pub fn build_deb_command(request: &Request) -> Result<()> {
    pipeline::build_command::<Deb>(request)
}

/// `cargo xtask bench-deb`: wall time of the built xtask binary running
/// build-deb, as a user would run it (process start included).
pub fn bench_deb_command(args: &BenchArgs) -> Result<()> {
    bench_writer(
        "build-deb",
        args,
        "target <= 10 ms; the original build_module.sh: ~52 ms",
    )
}

/// The packages' version for the plan's suite: upstream, revision, and the
/// suite's version_suffix (packaging/distros.yaml), e.g. `1.4.0-1~deb12`.
pub fn debian_version(plan: &Plan) -> String {
    format!(
        "{}-{}{}",
        plan.package_version, plan.release, plan.distro.version_suffix
    )
}

/// The rendered debian/ files and the unit's copy, with their paths in the
/// source tree.
pub fn debian_files(context: &tera::Context) -> Result<Vec<RenderedFile>> {
    // debian/control's Rust dependencies carry the module's minimum rustc.
    let mut context = context.clone();
    context.insert("rust_min", &workspace::module_rust_version()?);
    let debian = render::render_dir(&workspace::path("debian"), &context)?;
    for required in REQUIRED_DEBIAN_FILES {
        if !debian.iter().any(|f| f.path == required) {
            bail!("debian/{required} (or debian/{required}.tera) is missing; restore it from git");
        }
    }
    let mut files: Vec<RenderedFile> = debian
        .into_iter()
        .map(|f| RenderedFile {
            path: format!("debian/{}", f.path),
            ..f
        })
        .collect();
    // dh_installsystemd finds units as debian/<package>.<unit>.
    for unit in [
        "nv_peer_mem.service",
        "gpudirect-rdma-check.service",
        "gpudirect-rdma-check.timer",
    ] {
        let source = format!("packaging/{unit}");
        files.push(RenderedFile {
            path: format!("debian/{SOURCE_PACKAGE}.{unit}"),
            contents: std::fs::read_to_string(workspace::path(&source))
                .with_context(|| format!("reading {source}; restore it from git"))?,
            executable: false,
        });
    }
    Ok(files)
}

/// The Debian upstream version for a Cargo version: a SemVer pre-release
/// (`1.4.0-rc.1`) becomes `1.4.0~rc.1` so it sorts before the release.
/// Refuses what Debian cannot carry (Policy 5.6.12).
pub fn debian_upstream_version(cargo_version: &str) -> Result<String> {
    let version = cargo_version.replacen('-', "~", 1);
    let starts_with_digit = version.bytes().next().is_some_and(|b| b.is_ascii_digit());
    let allowed = version
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b".+~-".contains(&b));
    if !starts_with_digit || !allowed {
        bail!(
            "version `{cargo_version}` cannot be a Debian upstream version (it must start with a digit and use only letters, digits and . + ~ -); fix `version` under [workspace.package] in Cargo.toml"
        );
    }
    Ok(version)
}

#[cfg(test)]
#[path = "deb_tests.rs"]
mod tests;
