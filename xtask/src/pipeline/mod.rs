//! The one packaging pipeline every route runs:
//!
//! choose the distro -> plan (version, release, timestamp, names) -> one
//! source tree (the files every route ships) -> render the family's
//! templates -> write the artifact atomically.
//!
//! A route (deb.rs, srpm/) is a [`Route`]: its names, its family's
//! templates, and how its artifact wraps the source tree. Every input is
//! checked before anything is written; a failure up to the write is bad
//! input (exit 2, see error.rs), the same on every route.

mod plan;

mod route;
mod source_tree;

pub use crate::release::Release;
pub use plan::{Plan, Request};
pub use route::{Route, SingleArtifact};
pub use source_tree::{DKMS_CONF_TEMPLATE, HELPER_NAME, SourceTree, dkms_conf};

use crate::distro::Packaging;
use crate::error::{BadInput, print_report};
use crate::tarball::write_atomically;
use crate::workspace;
use anyhow::Result;
use plan::check_out_dir;
use source_tree::ModuleSources;
use std::path::PathBuf;

/// A written artifact and the plan it was built from.
pub struct Built {
    pub plan: Plan,
    pub path: PathBuf,
}

/// An artifact assembled in memory, not yet written: a command that makes
/// several artifacts (build-dkms) prepares them all before writing any, so
/// bad input for one leaves no file of another.
pub struct Prepared {
    pub plan: Plan,
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

impl Prepared {
    /// Writes the artifact atomically.
    pub fn write(self) -> Result<Built> {
        write_atomically(&self.path, &self.bytes)?;
        Ok(Built {
            plan: self.plan,
            path: self.path,
        })
    }
}

/// Runs the pipeline for route @R.
pub fn build<R: SingleArtifact>(request: &Request) -> Result<Built> {
    prepare::<R>(request)?.write()
}

/// Runs the pipeline for route @R up to the write.
pub fn prepare<R: SingleArtifact>(request: &Request) -> Result<Prepared> {
    let (plan, tree, rendered) = source_tree::<R>(request)?;
    let bytes = R::assemble(&plan, tree.to_tar_gz()?, rendered)?;
    let path = plan.out.join(R::artifact_name(&plan));
    Ok(Prepared { plan, path, bytes })
}

/// The pipeline's steps every route shares: the checked plan and the
/// source tree with the route's rendered files; nothing is written. A
/// failure is bad input (exit 2).
pub fn source_tree<R: Route>(request: &Request) -> Result<(Plan, SourceTree, R::Rendered)> {
    let lister = ModuleSources::spawn().map_err(BadInput::wrap)?;
    let plan = plan::<R>(request).map_err(BadInput::wrap)?;
    let module_sources = lister.wait().map_err(BadInput::wrap)?;
    let (tree, rendered) = render::<R>(&plan, &module_sources).map_err(BadInput::wrap)?;
    Ok((plan, tree, rendered))
}

/// Checks every input of @request for route @R; nothing is written.
fn plan<R: Route>(request: &Request) -> Result<Plan> {
    let packaging = Packaging::load()?;
    let distro = packaging
        .choose(
            R::FAMILY,
            R::COMMAND,
            request.distro.as_deref(),
            R::FALLBACK_DISTRO,
        )?
        .clone();
    R::check_distro(&distro)?;
    let release = request.release.map_or(packaging.release, Release::get);
    let workspace_version = workspace::version().to_owned();
    let package_version = R::package_version(&workspace_version)?;
    check_out_dir(&request.out)?;
    let source_date_epoch = workspace::source_date_epoch()?;
    Ok(Plan {
        packaging,
        distro,
        workspace_version,
        package_version,
        release,
        source_date_epoch,
        out: request.out.clone(),
    })
}

/// The source tree with the route's rendered files in it, and what else
/// the route rendered.
fn render<R: Route>(plan: &Plan, module_sources: &[String]) -> Result<(SourceTree, R::Rendered)> {
    let mut context = plan.base_context();
    R::add_context(plan, &mut context);
    let mut tree = SourceTree::new(
        plan,
        &plan.tree_prefix(R::SOURCE_NAME),
        module_sources,
        &context,
    )?;
    let rendered = R::render(plan, &context, &mut tree)?;
    Ok((tree, rendered))
}

/// A route's subcommand: build, then print the route's report.
pub fn build_command<R: SingleArtifact>(request: &Request) -> Result<()> {
    let built = build::<R>(request)?;
    print_report(&R::report(&built.plan, &built.path))
}
