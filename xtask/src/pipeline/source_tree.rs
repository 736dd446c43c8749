//! The source tree every route ships, listed once: below
//! `<source name>-<version>/`,
//! - `kmod/`: every git-tracked file under kmod/ except kmod/tests/ (host
//!   and VM tests, not module sources), plus a generated `kmod/VERSION`
//!   (kmod/Makefile reads it when the workspace Cargo.toml is absent, as in
//!   the DKMS tree);
//! - `packaging/`: the boot service, its configuration and the helper the
//!   service runs ([`SHARED_PACKAGING_FILES`]);
//! - `dkms.conf`, rendered from dkms/dkms.conf.tera.
//!
//! A route adds its family's rendered files (debian/) before the tree is
//! packed into a deterministic `.tar.gz` (tarball.rs).

use super::plan::Plan;
use crate::render::{self, RenderedFile};
use crate::tarball::Tarball;
use crate::workspace;
use anyhow::{Context, Result, bail};
use std::process::{Child, Command, Stdio};

/// The boot helper the systemd unit runs, as shipped in `packaging/`.
pub const HELPER_NAME: &str = "nv_peer_mem-service";

/// Files of packaging/ that every route ships and every package installs.
pub const SHARED_PACKAGING_FILES: [&str; 3] =
    ["nv_peer_mem.conf", "nv_peer_mem.service", HELPER_NAME];

/// The DKMS configuration template, relative to the workspace root.
pub const DKMS_CONF_TEMPLATE: &str = "dkms/dkms.conf.tera";

/// A source tree being assembled.
pub struct SourceTree {
    tarball: Tarball,
}

impl SourceTree {
    /// The files every route ships, under @prefix/, stamped with the plan's
    /// timestamp; @module_sources comes from [`ModuleSources`].
    pub fn new(
        plan: &Plan,
        prefix: &str,
        module_sources: &[String],
        context: &tera::Context,
    ) -> Result<SourceTree> {
        let mut tarball = Tarball::new(prefix);
        tarball.set_mtime(plan.source_date_epoch);
        for path in module_sources {
            tarball.add_path(path, &workspace::path(path))?;
        }
        tarball.add_file(
            "kmod/VERSION",
            format!("{}\n", plan.workspace_version),
            false,
        )?;
        for name in SHARED_PACKAGING_FILES {
            let path = format!("packaging/{name}");
            tarball
                .add_path(&path, &workspace::path(&path))
                .with_context(|| format!("{path} is missing; restore it from git"))?;
        }
        let mut tree = SourceTree { tarball };
        tree.add(dkms_conf(context)?)?;
        Ok(tree)
    }

    /// Adds a rendered file at its path below the prefix.
    pub fn add(&mut self, file: RenderedFile) -> Result<()> {
        self.tarball
            .add_file(&file.path, file.contents, file.executable)
    }

    /// The finished `.tar.gz`.
    pub fn to_tar_gz(&self) -> Result<Vec<u8>> {
        self.tarball.to_tar_gz()
    }
}

/// `dkms.conf`, rendered with @context (which needs `package_version`).
pub fn dkms_conf(context: &tera::Context) -> Result<RenderedFile> {
    Ok(RenderedFile {
        path: "dkms.conf".to_owned(),
        contents: render::render_file(&workspace::path(DKMS_CONF_TEMPLATE), context)?,
        executable: false,
    })
}

/// The module sources: git-tracked files under kmod/ except its tests and a
/// tracked kmod/VERSION (the tree's is generated), sorted. `git ls-files`
/// is started early (`spawn`) and collected later (`wait`): git's start-up
/// is a third of build-deb's ~10 ms, and it overlaps the input checks.
pub struct ModuleSources(Child);

impl ModuleSources {
    pub fn spawn() -> Result<ModuleSources> {
        Command::new("git")
            .args(["ls-files", "-z", "--", "kmod"])
            .current_dir(workspace::root())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map(ModuleSources)
            .context("running `git ls-files kmod`; install git and build from a git checkout")
    }

    pub fn wait(self) -> Result<Vec<String>> {
        let output = self
            .0
            .wait_with_output()
            .context("reading `git ls-files kmod`")?;
        if !output.status.success() {
            bail!(
                "`git ls-files kmod` failed in {}: {}; build from a git checkout of the project",
                workspace::root().display(),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let listing = String::from_utf8(output.stdout)
            .context("a file name under kmod/ is not UTF-8; rename it")?;
        let mut paths: Vec<String> = listing
            .split('\0')
            .filter(|path| {
                !path.is_empty() && !path.starts_with("kmod/tests/") && *path != "kmod/VERSION"
            })
            .map(str::to_owned)
            .collect();
        paths.sort();
        if paths.is_empty() {
            bail!("git tracks no files under kmod/; the module sources are missing");
        }
        Ok(paths)
    }
}
