//! The source tree every route ships, listed once: below
//! `<source name>-<version>/`,
//! - `kmod/`: every git-tracked file under kmod/ except kmod/tests/ (host
//!   and VM tests, not module sources), plus a generated `kmod/VERSION`
//!   (kmod/Makefile reads it when the workspace Cargo.toml is absent, as in
//!   the DKMS tree);
//! - `packaging/`: the boot service, its configuration and the helper the
//!   service runs ([`SHARED_PACKAGING_FILES`]);
//! - `readiness/`: gpudirect-rdma-check's sources and manual page
//!   ([`READINESS_FILES`]; std only, so the service package compiles it
//!   with rustc alone, docs/readiness.md);
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

/// Files of packaging/ that every route ships and every package installs:
/// the boot service, its helper and configuration; gpudirect-rdma-check's
/// timer, its service and options, and the NHC check (docs/monitoring.md);
/// the kernel hook; apt's kernel guard, which only the Debian service
/// package installs, and the provider watch, which it and Fedora's -common
/// (for dnf5) install (docs/fleet.md, "The kernel guard", "A provider
/// updated alone"); and the -dkms
/// packages' rebuild after a provider update (docs/next-boot.md,
/// "Provider updates"); dnf's kernel guard, which only the kmod route's
/// -common installs (docs/fleet.md, "The dnf guard"), and dnf5's, which
/// only Fedora's -common installs ("The dnf5 guard").
pub const SHARED_PACKAGING_FILES: [&str; 13] = [
    "nv_peer_mem.conf",
    "nv_peer_mem.service",
    HELPER_NAME,
    "gpudirect-rdma-check.service",
    "gpudirect-rdma-check.timer",
    "gpudirect-rdma-check.default",
    "nvpm_gpudirect.nhc",
    "nv_peer_mem-kernel-hook",
    "nv_peer_mem-apt-guard",
    "nv_peer_mem-provider-watch",
    "nv_peer_mem-dkms-rebuild",
    "nv_peer_mem-dnf-plugin.py",
    "nv_peer_mem-dnf5.actions",
];

/// gpudirect-rdma-check as the packages build it: the crate's sources
/// (not its tests) and its manual page. `readiness_files_are_listed` keeps
/// the list in step with readiness/src/.
pub const READINESS_FILES: [&str; 43] = [
    "readiness/Cargo.toml",
    "readiness/gpudirect-rdma-check.8",
    "readiness/src/boot_loader.rs",
    "readiness/src/c2c.rs",
    "readiness/src/check.rs",
    "readiness/src/config_space.rs",
    "readiness/src/consumers.rs",
    "readiness/src/cuda.rs",
    "readiness/src/data_direct.rs",
    "readiness/src/elf.rs",
    "readiness/src/gdr_reads.rs",
    "readiness/src/health.rs",
    "readiness/src/host.rs",
    "readiness/src/iommu.rs",
    "readiness/src/kernel_modules.rs",
    "readiness/src/lib.rs",
    "readiness/src/main.rs",
    "readiness/src/memory.rs",
    "readiness/src/nccl_ib.rs",
    "readiness/src/nccl_bandwidth.rs",
    "readiness/src/nccl_local_net.rs",
    "readiness/src/nccl_topo_file.rs",
    "readiness/src/nccl_version.rs",
    "readiness/src/next_boot.rs",
    "readiness/src/next_boot_dkms.rs",
    "readiness/src/next_boot_render.rs",
    "readiness/src/next_boot_tests.rs",
    "readiness/src/nfd.rs",
    "readiness/src/nvidia.rs",
    "readiness/src/nvlink.rs",
    "readiness/src/output_file.rs",
    "readiness/src/pci.rs",
    "readiness/src/peer_clients.rs",
    "readiness/src/pxn.rs",
    "readiness/src/rdma.rs",
    "readiness/src/registration.rs",
    "readiness/src/render.rs",
    "readiness/src/report.rs",
    "readiness/src/service.rs",
    "readiness/src/signing_keys.rs",
    "readiness/src/snapshot.rs",
    "readiness/src/topology.rs",
    "readiness/src/vm.rs",
];

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
        for path in READINESS_FILES {
            tarball
                .add_path(path, &workspace::path(path))
                .with_context(|| format!("{path} is missing; restore it from git"))?;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A source file added to readiness/src/ without being listed here
    /// would be missing from every package build.
    #[test]
    fn readiness_files_are_listed() {
        let mut on_disk: Vec<String> = std::fs::read_dir(workspace::path("readiness/src"))
            .unwrap()
            .map(|e| format!("readiness/src/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        on_disk.extend([
            "readiness/Cargo.toml".to_owned(),
            "readiness/gpudirect-rdma-check.8".to_owned(),
        ]);
        on_disk.sort();
        let mut listed: Vec<String> = READINESS_FILES.iter().map(|s| s.to_string()).collect();
        listed.sort();
        assert_eq!(listed, on_disk);
    }
}
