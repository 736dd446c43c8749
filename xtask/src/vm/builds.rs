//! What test-vm builds per kernel against the installed headers: the NVIDIA
//! P2P double, MLNX_OFED's real PeerDirect core with the test HCA driver
//! (kmod/tests/vm), the scenario driver, and nv_peer_mem.ko itself with kmod/'s own Makefile.

use super::command::run;
use super::mofed_config;
use super::sync::{sync_bytes, sync_file, sync_tree};
use crate::{fixtures, workspace};
use anyhow::{Context, Result, bail};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The module names the two doubles are built under.
pub struct Names {
    pub core: &'static str,
    pub nv: &'static str,
}

/// test-vm's busybox guest insmods them by file, under names of their own.
pub const HARNESS_NAMES: Names = Names {
    core: "mofed_peer_core",
    nv: "nv_p2p_double",
};

/// The booted image (vm-standins) installs them as the modules they stand
/// in for: MLNX_OFED's ib_core and NVIDIA's nvidia, which
/// nv_peer_mem.service and modprobe load by these names.
pub const IMAGE_NAMES: Names = Names {
    core: "ib_core",
    nv: "nvidia",
};

pub struct Doubles {
    pub nv_ko: PathBuf,
    pub core_ko: PathBuf,
    pub scen_ko: PathBuf,
    /// dirs laid out as nv_peer_mem's Makefile expects for OFA_KERNEL= and
    /// NV_SRC=: the header each double was built with and its Module.symvers
    pub ofa_dir: PathBuf,
    pub nv_dir: PathBuf,
    /// the per-kernel copy of kmod/tests/vm the doubles were built in
    pub(super) src_dir: PathBuf,
    /// The same for a driver whose nv-p2p.h does not advertise the
    /// persistent API: the project's own description of the P2P ABI, with
    /// the double's Module.symvers (same prototypes, so the same CRCs).
    nv_dir_no_persistent: PathBuf,
    /// NCCL's access probe for the guest, or why not (an NCCL fixture is
    /// missing: the guest says NCCL's check was skipped).
    pub nccl: std::result::Result<super::nccl_probe::Probe, String>,
}

impl Doubles {
    /// KBUILD_EXTRA_SYMBOLS for a module linking against both doubles.
    pub(super) fn extra_symbols(&self) -> String {
        format!(
            "{} {}",
            self.nv_dir.join("Module.symvers").display(),
            self.ofa_dir.join("Module.symvers").display()
        )
    }
}

/// `make -C KDIR M=DIR modules VAR=value...`: an out-of-tree Kbuild build.
pub(super) fn kbuild(kdir: &Path, dir: &Path, vars: &[(&str, String)], what: &str) -> Result<()> {
    let mut cmd = Command::new("make");
    cmd.arg("-C")
        .arg(kdir)
        .arg(format!("M={}", dir.display()))
        .arg("modules");
    super::arch::cross_make_vars(&mut cmd);
    for (k, v) in vars {
        cmd.arg(format!("{k}={v}"));
    }
    run(&mut cmd, what)
}

/// Builds, in @work/doubles (a copy of kmod/tests/vm): the NVIDIA double
/// against the NVIDIA sources in @nv_src; MLNX_OFED's PeerDirect core
/// (peer_mem.c from the tarball @mofed) with the test HCA driver; the
/// scenario driver. The two doubles' module names are @names'.
pub fn build_doubles(
    kver: &str,
    kdir: &Path,
    work: &Path,
    nv_src: &Path,
    mofed: &Path,
    names: &Names,
) -> Result<Doubles> {
    let src = work.join("doubles");
    sync_tree(&workspace::path("kmod/tests/vm"), &src, &["guest"])?;
    let nv_inc = nv_src.join("nvidia");
    // MLNX_OFED's rdma/peer_mem.h is the header every module here is built
    // against; its peer_mem.c and ib_peer_mem.h go beside the HCA driver.
    let ofa_dir = work.join("ofa_kernel");
    let ofa_inc = ofa_dir.join("include");
    // The core as MLNX_OFED builds it: its sources from the fixture, its
    // backport 0271 applied, its switches decided for this kernel
    // (mofed_config.rs); nothing of ours in peer_mem.c.
    let fixture_core = work.join("mofed-core");
    fixtures::unpack_mofed_core(mofed, &fixture_core, &ofa_inc)?;
    let patch_text = fixtures::mofed_member(mofed, mofed_config::BACKPORT)?;
    let patch = work.join("mofed-core/0271.patch");
    sync_bytes(&patch, patch_text.as_bytes())?;
    let patched = work.join("mofed-core/peer_mem.patched.c");
    mofed_config::apply(&fixture_core.join("peer_mem.c"), &patch, &patched)?;
    sync_file(&patched, &src.join("peer_core/peer_mem.c"))?;
    sync_file(
        &fixture_core.join("ib_peer_mem.h"),
        &src.join("peer_core/ib_peer_mem.h"),
    )?;
    let m4 = fixtures::mofed_member(mofed, mofed_config::RDMA_M4)?;
    let defined = mofed_config::decide(kdir, work, &m4, &patch_text)?;
    mofed_config::check_recorded(kver, &defined)?;
    let config = mofed_config::config_h(&mofed_config::switches(&patch_text), &defined);
    println!(
        "==> [{kver}] MLNX_OFED's configure for backport 0271: {}",
        config
            .lines()
            .skip(1)
            .map(|l| l
                .trim_start_matches("#define ")
                .trim_end_matches(" 1")
                .replace("/* #undef ", "!")
                .replace(" */", ""))
            .collect::<Vec<_>>()
            .join(" ")
    );
    sync_bytes(&src.join("peer_core/mofed_config.h"), config.as_bytes())?;
    kbuild(
        kdir,
        &src.join("nv_p2p_double"),
        &[
            ("NVPM_NV_INC", nv_inc.display().to_string()),
            ("NVPM_NV_NAME", names.nv.to_string()),
        ],
        &format!("building {}.ko (the NVIDIA double) for {kver}", names.nv),
    )?;
    kbuild(
        kdir,
        &src.join("peer_core"),
        &[
            ("NVPM_OFA_INC", ofa_inc.display().to_string()),
            ("NVPM_CORE_NAME", names.core.to_string()),
        ],
        &format!(
            "building {}.ko (MLNX_OFED's peer_mem.c) for {kver}",
            names.core
        ),
    )?;
    // What was compiled is the fixture's core plus its backport, nothing of
    // ours: the tree tracks no copy that could shadow them, and the files
    // the build read are byte for byte the patched and fixture files.
    verify_core_sources(
        &src.join("peer_core"),
        &[
            ("peer_mem.c", patched.as_path()),
            (
                "ib_peer_mem.h",
                fixture_core.join("ib_peer_mem.h").as_path(),
            ),
        ],
    )?;
    let nv_symvers = src.join("nv_p2p_double/Module.symvers");
    let core_symvers = src.join("peer_core/Module.symvers");
    kbuild(
        kdir,
        &src.join("scenarios"),
        &[
            ("NVPM_NV_INC", nv_inc.display().to_string()),
            ("NVPM_OFA_INC", ofa_inc.display().to_string()),
            (
                "KBUILD_EXTRA_SYMBOLS",
                format!("{} {}", nv_symvers.display(), core_symvers.display()),
            ),
        ],
        &format!("building nvpm_scenarios.ko for {kver}"),
    )?;
    sync_file(&core_symvers, &ofa_dir.join("Module.symvers"))?;
    let nv_dir = work.join("nvidia_src");
    sync_file(&nv_inc.join("nv-p2p.h"), &nv_dir.join("nvidia/nv-p2p.h"))?;
    sync_file(&nv_symvers, &nv_dir.join("Module.symvers"))?;
    let nv_dir_no_persistent = work.join("nvidia_src_no_persistent");
    sync_file(
        &workspace::path("kmod/compat/nvidia/nv-p2p.h"),
        &nv_dir_no_persistent.join("nvidia/nv-p2p.h"),
    )?;
    sync_file(&nv_symvers, &nv_dir_no_persistent.join("Module.symvers"))?;
    let nccl = super::nccl_probe::build(&work.join("nccl-probe"), super::arch::build_arch())?;
    Ok(Doubles {
        nv_ko: src.join(format!("nv_p2p_double/{}.ko", names.nv)),
        core_ko: src.join(format!("peer_core/{}.ko", names.core)),
        scen_ko: src.join("scenarios/nvpm_scenarios.ko"),
        ofa_dir,
        nv_dir,
        nv_dir_no_persistent,
        nccl,
        src_dir: src,
    })
}

/// The stand-in ib_core of an MLNX_OFED update whose `ib_*` symbol versions
/// differ from @d's core: the same sources with `struct peer_memory_client`
/// renamed, so genksyms computes another CRC for
/// ib_register_peer_memory_client (it hashes the full type of the
/// exported function's parameters), as a change to that struct in a real
/// update does. Returns its ib_core.ko and Module.symvers.
pub fn build_core_abi_variant(
    kver: &str,
    kdir: &Path,
    d: &Doubles,
    names: &Names,
) -> Result<(PathBuf, PathBuf)> {
    // Beside peer_core/ in the doubles' tree: its Kbuild includes ../include.
    let dir = d.src_dir.join("peer_core_abi_variant");
    sync_tree(&d.src_dir.join("peer_core"), &dir, &[])?;
    kbuild(
        kdir,
        &dir,
        &[
            (
                "NVPM_OFA_INC",
                d.ofa_dir.join("include").display().to_string(),
            ),
            ("NVPM_CORE_NAME", names.core.to_string()),
            (
                "NVPM_CORE_ABI_CFLAGS",
                "-Dpeer_memory_client=nvpm_peer_memory_client_abi_variant".to_string(),
            ),
        ],
        &format!(
            "building {}.ko with other ib_* symbol versions for {kver}",
            names.core
        ),
    )?;
    Ok((
        dir.join(format!("{}.ko", names.core)),
        dir.join("Module.symvers"),
    ))
}

/// Which NVIDIA header a module build sees.
#[derive(Clone, Copy)]
pub enum Variant {
    /// The double's, advertising the persistent API: both clients.
    Doubles,
    /// One without the persistent API: nv_mem only (scenario
    /// no_persistent_api).
    NoPersistentApi,
}

/// Builds nv_peer_mem.ko with kmod/'s own Makefile, in a per-kernel copy of
/// kmod/ (so kernels do not clean each other's objects, a warm rerun is
/// incremental, and a build in the developer's kmod/ is left alone).
pub fn build_module(
    kver: &str,
    kdir: &Path,
    work: &Path,
    d: &Doubles,
    variant: Variant,
) -> Result<PathBuf> {
    let kmod = workspace::path("kmod");
    if !kmod.join("Makefile").is_file() {
        bail!("kmod/Makefile does not exist yet: nothing to test");
    }
    let (copy, nv_dir) = match variant {
        Variant::Doubles => (work.join("kmod"), &d.nv_dir),
        Variant::NoPersistentApi => (work.join("kmod-no-persistent"), &d.nv_dir_no_persistent),
    };
    sync_tree(&kmod, &copy, &["tests", "build", "target"])?;
    make_module(kver, kdir, &copy, d, nv_dir)
}

/// Builds nv_peer_mem.ko against the doubles from the kmod/ tree @src (a
/// mutant's, mutants.rs) in @copy, as `build_module` does with kmod/.
pub(super) fn build_module_from(
    kver: &str,
    kdir: &Path,
    src: &Path,
    copy: &Path,
    d: &Doubles,
) -> Result<PathBuf> {
    sync_tree(src, copy, &[])?;
    make_module(kver, kdir, copy, d, &d.nv_dir)
}

/// `make -C @copy` for @kver against the doubles and the NVIDIA tree @nv_dir.
fn make_module(
    kver: &str,
    kdir: &Path,
    copy: &Path,
    d: &Doubles,
    nv_dir: &Path,
) -> Result<PathBuf> {
    // The Makefile reads the version from ../Cargo.toml or, in packaged
    // trees, from kmod/VERSION: this copy is such a tree.
    sync_bytes(
        &copy.join("VERSION"),
        format!("{}\n", workspace::version()).as_bytes(),
    )?;
    let make = |target: Option<&str>| {
        let mut cmd = Command::new("make");
        cmd.arg("-C")
            .arg(copy)
            .arg(format!("KVER={kver}"))
            .arg(format!("KDIR={}", kdir.display()))
            .arg(format!("OFA_KERNEL={}", d.ofa_dir.display()))
            .arg(format!("NV_SRC={}", nv_dir.display()));
        super::arch::cross_make_vars(&mut cmd);
        cmd.args(target);
        cmd
    };
    // The symbol CRCs come from the doubles' Module.symvers, which make does
    // not track: a warm copy built against other ones (a double's exports
    // changed) would keep stale CRCs and fail to load. Key the build on them.
    let symvers_key = [
        d.ofa_dir.join("Module.symvers"),
        nv_dir.join("Module.symvers"),
    ]
    .iter()
    .map(|p| fs::read(p).map_err(|e| anyhow::anyhow!("reading {}: {e}", p.display())))
    .collect::<Result<Vec<_>>>()?
    .concat();
    let key_file = copy.with_extension("symvers-key");
    if fs::read(&key_file).ok().as_deref() != Some(&symvers_key[..]) {
        run(
            &mut make(Some("clean")),
            &format!("make -C kmod clean (the doubles' Module.symvers changed for {kver})"),
        )?;
    }
    run(
        &mut make(None),
        &format!("make -C kmod KVER={kver} (nv_peer_mem.ko against the test doubles)"),
    )?;
    sync_bytes(&key_file, &symvers_key)?;
    let ko = copy.join("nv_peer_mem.ko");
    if !ko.is_file() {
        bail!("make succeeded but left no {}", ko.display());
    }
    Ok(ko)
}

/// nvidia_peermem.ko: a module with only the name of NVIDIA's peer memory
/// client (kmod/tests/vm/nvidia_peermem_standin), built in @work/doubles.
pub fn build_nvidia_peermem_standin(kver: &str, kdir: &Path, work: &Path) -> Result<PathBuf> {
    let dir = work.join("doubles/nvidia_peermem_standin");
    sync_tree(
        &workspace::path("kmod/tests/vm/nvidia_peermem_standin"),
        &dir,
        &[],
    )?;
    kbuild(
        kdir,
        &dir,
        &[],
        &format!("building the nvidia_peermem stand-in for {kver}"),
    )?;
    Ok(dir.join("nvidia_peermem.ko"))
}

/// The core's sources in @dir (after its build) against what they must be:
/// each (name, expected file); and kmod/tests/vm/peer_core has none of
/// them of its own (the fixture's code is never copied into the repo).
fn verify_core_sources(dir: &Path, expected: &[(&str, &Path)]) -> Result<()> {
    let ours = workspace::path("kmod/tests/vm/peer_core");
    for (name, want) in expected {
        if ours.join(name).exists() {
            bail!(
                "kmod/tests/vm/peer_core/{name} exists: MLNX_OFED's core is compiled from the fixture only (remove it)"
            );
        }
        let built = std::fs::read(dir.join(name))
            .with_context(|| format!("reading the compiled {}", dir.join(name).display()))?;
        let want_bytes =
            std::fs::read(want).with_context(|| format!("reading {}", want.display()))?;
        if built != want_bytes {
            bail!(
                "the core's compiled {name} differs from {} (the fixture's, with backport 0271 for peer_mem.c)",
                want.display()
            );
        }
    }
    Ok(())
}
