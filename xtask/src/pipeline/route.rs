//! What a packaging route (build-deb, build-srpm, build-dkms, build-modules)
//! tells the pipeline: its family, its names, how it renders its family's
//! templates and, for a route with one artifact, how it wraps the source
//! tree into it. Everything else (choosing the distro, checking the inputs,
//! the shared files, the atomic write, exit statuses) is the pipeline's,
//! once for every route.

use super::plan::Plan;
use super::source_tree::SourceTree;
use crate::distro::{Distro, Family};
use anyhow::Result;
use std::path::Path;

pub trait Route {
    /// The subcommand, as messages name it (`build-deb`).
    const COMMAND: &'static str;
    /// Which entries of packaging/distros.yaml the route builds for.
    const FAMILY: Family;
    /// The entry built for when neither --distro nor /etc/os-release names
    /// one of the family.
    const FALLBACK_DISTRO: &'static str;
    /// The source package's name; the source tree is
    /// `<SOURCE_NAME>-<package version>/`.
    const SOURCE_NAME: &'static str;
    /// What rendering gives besides files in the source tree (the spec of a
    /// source rpm, say).
    type Rendered;

    /// Checks the family fields of the entry that the route's templates use.
    fn check_distro(distro: &Distro) -> Result<()>;

    /// The version the family's files carry, from the workspace version;
    /// refuses one the format cannot carry.
    fn package_version(workspace_version: &str) -> Result<String>;

    /// Variables the family adds to the context every template sees
    /// (`Plan::base_context`).
    fn add_context(plan: &Plan, context: &mut tera::Context);

    /// Renders the family's templates; files that belong in the source tree
    /// go into @tree.
    fn render(
        plan: &Plan,
        context: &tera::Context,
        tree: &mut SourceTree,
    ) -> Result<Self::Rendered>;
}

/// A route whose artifact is one file made from the source tree (a source
/// package, a DKMS package). build-modules is a route without it: it builds
/// the tree's module for many kernels and writes a package per kernel.
pub trait SingleArtifact: Route {
    /// The artifact's bytes, from the source tree's `.tar.gz` and what
    /// `render` gave.
    fn assemble(plan: &Plan, tree_tar_gz: Vec<u8>, rendered: Self::Rendered) -> Result<Vec<u8>>;

    /// The artifact's file name in --out.
    fn artifact_name(plan: &Plan) -> String;

    /// What to print once the artifact is written: where it is and what to
    /// run next.
    fn report(plan: &Plan, artifact: &Path) -> String;
}
