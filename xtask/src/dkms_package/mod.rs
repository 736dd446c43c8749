//! `cargo xtask build-dkms`: the binary DKMS packages,
//! `nvidia-peer-memory-dkms_<ver>-<rel>_all.deb` and
//! `nvidia_peer_memory-dkms-<ver>-<rel><dist>.noarch.rpm`, straight from the
//! workspace, without dpkg-buildpackage, debhelper or rpmbuild.
//!
//! Two routes over the packaging pipeline (pipeline/), one per format:
//! deb_route.rs reads the rendered `debian/` files and does debhelper's
//! part; rpm_route.rs reads the rendered spec's `%package dkms` sections.
//! Both take their files from the pipeline's source tree (tree_files.rs),
//! so the packages hold what the distro-built ones hold; ci/test-dkms.sh
//! builds those too and compares. Every artifact is prepared before any is
//! written: bad input for one format leaves no file of the other.
//! docs/packaging.md says why this writes the packages itself rather than
//! calling cargo-deb or cargo-generate-rpm.

pub(crate) mod deb_archive;
pub(crate) mod deb_control;
mod deb_route;
mod rpm_route;
mod spec_subpackage;
pub(crate) mod tree_files;

use crate::distro::{Family, Packaging};
use crate::error::{BadInput, print_report};
use crate::pipeline::{self, Request, SingleArtifact};
use anyhow::Result;
use deb_route::DkmsDeb;
use rpm_route::DkmsRpm;
use std::path::Path;

/// `build-dkms --help`'s description.
pub const BUILD_LONG_ABOUT: &str = "Build the DKMS binary packages \
nvidia-peer-memory-dkms_<version>-<release>_all.deb and/or \
nvidia_peer_memory-dkms-<version>-<release><dist>.noarch.rpm (<dist>: the distro's %dist, \
e.g. .el9, .el10; none for SLES and Fedora) directly, without dpkg-buildpackage, \
debhelper or rpmbuild. They hold what the -dkms packages built from build-deb's and \
build-srpm's sources hold (the module sources in /usr/src/nv_peer_mem-<version>, dkms.conf, \
the same dependencies and scripts); installing one makes DKMS build the module for every \
kernel with headers. The same sources, data and SOURCE_DATE_EPOCH (default: the last \
commit's time) give byte-identical files.\n\n\
Exit status: 0 on success; 2 on bad input (unknown distro, a --distro of the other family \
than --format, malformed packaging data, a version the format cannot carry, unusable --out), \
with a message naming the fix; 1 on other failures. No partial file is left behind, and \
with --format both neither file is written when either has bad input.";

/// Which packages to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Deb,
    Rpm,
    Both,
}

/// `--distro`'s help on build-dkms.
pub const DISTRO_HELP: &str = "Target distribution: an id of packaging/distros.yaml \
(debian12, ubuntu2404, rhel9, sles15, ...). It picks the dependencies and names of its \
family's package; the other family's package (with --format both) is built for that \
family's default. Default: this host's distribution (/etc/os-release) when listed, else \
debian12 / rhel9.";

/// Options of `cargo xtask build-dkms`.
#[derive(Debug, clap::Args)]
pub struct BuildDkmsArgs {
    #[command(flatten)]
    pub request: Request,
    /// Which packages: deb, rpm or both. Default: the family of --distro,
    /// or both without --distro.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
}

/// `cargo xtask build-dkms`: prepares every requested package, then writes
/// them and prints where.
pub fn build_dkms_command(args: &BuildDkmsArgs) -> Result<()> {
    let family = match &args.request.distro {
        Some(id) => Some(
            Packaging::load()
                .and_then(|packaging| packaging.find(id).map(|d| d.family))
                .map_err(BadInput::wrap)?,
        ),
        None => None,
    };
    let format = args.format.unwrap_or(match family {
        Some(Family::Deb) => Format::Deb,
        Some(Family::Rpm) => Format::Rpm,
        None => Format::Both,
    });
    // --distro goes to its family's package; a --format that does not
    // include that family is refused by the route (the distro's family
    // does not match).
    let request = |route_family: Family| Request {
        distro: match (family, format) {
            (Some(f), Format::Both) if f != route_family => None,
            _ => args.request.distro.clone(),
        },
        ..args.request.clone()
    };
    type Report = fn(&pipeline::Plan, &Path) -> String;
    let mut prepared: Vec<(pipeline::Prepared, Report)> = Vec::new();
    if matches!(format, Format::Deb | Format::Both) {
        prepared.push((
            pipeline::prepare::<DkmsDeb>(&request(Family::Deb))?,
            DkmsDeb::report,
        ));
    }
    if matches!(format, Format::Rpm | Format::Both) {
        prepared.push((
            pipeline::prepare::<DkmsRpm>(&request(Family::Rpm))?,
            DkmsRpm::report,
        ));
    }
    let mut reports = String::new();
    for (artifact, report) in prepared {
        let built = artifact.write()?;
        reports.push_str(&report(&built.plan, &built.path));
    }
    print_report(&reports)
}

#[cfg(test)]
mod golden_tests;
