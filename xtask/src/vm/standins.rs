//! `cargo xtask vm-standins`: the VM harness's modules for one kernel, built
//! as the booted-image test (ci/test-image.sh) packages and installs them in
//! a Debian system: MLNX_OFED's real PeerDirect core with the test HCA
//! driver as `ib_core.ko`, the NVIDIA P2P double as `nvidia.ko`, each with
//! the header and Module.symvers a real install puts where kmod/Makefile
//! (and so DKMS) looks; a module named `nvidia_peermem`; the scenario
//! driver; and nv_peer_mem.ko built against an nv-p2p.h without the
//! persistent API (the `no_persistent_api` scenario, as in test-vm); the
//! ib_core of an MLNX_OFED "update" whose ib_* symbol versions differ; and
//! the nvidia.ko of a driver of another branch (580's nv-p2p.h), whose
//! nvidia_p2p_* symbol versions differ.

use super::builds::{
    Doubles, IMAGE_NAMES, Names, Variant, build_core_abi_variant, build_doubles, build_module,
    build_nvidia_peermem_standin, kbuild,
};
use super::nvidia_src;
use super::sync::sync_file;
use super::sync::sync_tree;
use crate::{fixtures, workspace};
use anyhow::{Context, Result, bail};
use std::fs;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct VmStandinsArgs {
    /// Kernel release to build for (its linux-headers must be installed)
    #[arg(long, value_name = "KVER")]
    kernel: String,
    /// Directory to write into (made if missing; its files are replaced):
    /// ib_core.ko, nvidia.ko, nvidia_peermem.ko, nvpm_scenarios.ko,
    /// nv_peer_mem_no_persistent.ko, ofa_kernel/{include/rdma/peer_mem.h,
    /// Module.symvers}, nvidia/{nvidia/nv-p2p.h, Module.symvers},
    /// abi_variant/{ib_core.ko, Module.symvers} (an MLNX_OFED update with
    /// other ib_* symbol versions), driver_variant/{nvidia.ko, Module.symvers} (the NVIDIA
    /// double built against the 580 fixture's nv-p2p.h: other nvidia_p2p_*
    /// symbol versions)
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub fn vm_standins_command(args: &VmStandinsArgs) -> Result<()> {
    let kver = &args.kernel;
    let kdir = PathBuf::from(format!("/usr/src/linux-headers-{kver}"));
    if !kdir.join("Makefile").is_file() {
        bail!(
            "no headers at {}: install linux-headers-{kver} (sudo bash ci/setup-host.sh)",
            kdir.display()
        );
    }
    let mofed = fixtures::file(fixtures::MOFED_TARBALL).map_err(|why| anyhow::anyhow!(why))?;
    let nv_src = nvidia_src()?;
    // Its own work tree: the harness's target/test-vm/<kver> builds the
    // doubles under other names; and one per --out, as the suites that call
    // this run side by side (ci/test.sh: the booted image beside the fleet
    // node), each still reusing its own tree's last build.
    let out_key = std::path::absolute(&args.out)
        .with_context(|| format!("resolving {}", args.out.display()))?
        .to_string_lossy()
        .trim_start_matches('/')
        .replace('/', "_");
    let work = workspace::path(&format!("target/test-image/{kver}/{out_key}"));
    fs::create_dir_all(&work)?;
    let mods = build_doubles(kver, &kdir, &work, &nv_src, &mofed, &IMAGE_NAMES)?;
    let peermem = build_nvidia_peermem_standin(kver, &kdir, &work)?;
    let no_persistent = build_module(kver, &kdir, &work, &mods, Variant::NoPersistentApi)?;
    let (abi_ko, abi_symvers) = build_core_abi_variant(kver, &kdir, &mods, &IMAGE_NAMES)?;
    let nv_580 = super::nvidia::fixture_tree(super::nvidia::NV580_RELEASE)
        .map_err(|why| anyhow::anyhow!("the other driver branch's nvidia.ko needs it: {why}"))?;
    let (driver_ko, driver_symvers) =
        build_nvidia_branch_variant(kver, &kdir, &mods, &nv_580.dir, &IMAGE_NAMES)?;
    let out = &args.out;
    fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (from, name) in [
        (&mods.core_ko, "ib_core.ko"),
        (&mods.nv_ko, "nvidia.ko"),
        (&peermem, "nvidia_peermem.ko"),
        (&mods.scen_ko, "nvpm_scenarios.ko"),
        (&no_persistent, "nv_peer_mem_no_persistent.ko"),
        (&abi_ko, "abi_variant/ib_core.ko"),
        (&abi_symvers, "abi_variant/Module.symvers"),
        (&driver_ko, "driver_variant/nvidia.ko"),
        (&driver_symvers, "driver_variant/Module.symvers"),
    ] {
        sync_file(from, &out.join(name))?;
    }
    copy_provider(
        &mods.ofa_dir,
        "include/rdma/peer_mem.h",
        &out.join("ofa_kernel"),
    )?;
    copy_provider(&mods.nv_dir, "nvidia/nv-p2p.h", &out.join("nvidia"))?;
    // How MLNX_OFED's configure built the core, for the guest's scenarios.
    sync_file(
        &mods.src_dir.join("peer_core/mofed_config.h"),
        &out.join("mofed_config.h"),
    )?;
    // NCCL's own access test for the guest's scenarios (nccl_probe.rs);
    // without an NCCL fixture the guest says it was not run.
    if let Ok(probe) = &mods.nccl {
        sync_file(&probe.binary, &out.join("nccl_gdr_files"))?;
        sync_file(&probe.list, &out.join("nccl_gdr_files.list"))?;
    }
    println!("Built: the stand-ins for {kver} in {}", out.display());
    Ok(())
}

/// @header and Module.symvers from the provider tree @from into @to.
fn copy_provider(from: &Path, header: &str, to: &Path) -> Result<()> {
    sync_file(&from.join(header), &to.join(header))?;
    sync_file(&from.join("Module.symvers"), &to.join("Module.symvers"))
}

/// The stand-in nvidia.ko of another NVIDIA driver branch: the same double
/// built against @branch_src's nv-p2p.h (the 580 fixture's, whose
/// `struct nvidia_p2p_page_table` gained `flags`), so genksyms computes
/// other CRCs for the nvidia_p2p_* exports that reach it, as a real
/// driver update across that change does (docs/contracts.md, "NVIDIA 580
/// and 595"). Returns its .ko and Module.symvers.
pub fn build_nvidia_branch_variant(
    kver: &str,
    kdir: &Path,
    d: &Doubles,
    branch_src: &Path,
    names: &Names,
) -> Result<(PathBuf, PathBuf)> {
    // Beside nv_p2p_double/ in the doubles' tree: its Kbuild includes ../include.
    let dir = d.src_dir.join("nv_p2p_double_branch_variant");
    sync_tree(&d.src_dir.join("nv_p2p_double"), &dir, &[])?;
    kbuild(
        kdir,
        &dir,
        &[
            (
                "NVPM_NV_INC",
                branch_src.join("nvidia").display().to_string(),
            ),
            ("NVPM_NV_NAME", names.nv.to_string()),
        ],
        &format!(
            "building {}.ko against {}'s nv-p2p.h for {kver}",
            names.nv,
            branch_src.display()
        ),
    )?;
    Ok((
        dir.join(format!("{}.ko", names.nv)),
        dir.join("Module.symvers"),
    ))
}
