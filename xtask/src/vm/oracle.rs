//! The differential oracle and the side-by-side benchmark of test-vm.
//!
//! In the same boot as nv_peer_mem's own scenarios, and after all of them
//! have reported, the guest (kmod/tests/vm/oracle/guest.sh) runs the same
//! scenarios against other implementations of the same peer memory clients,
//! each built here at test time from its upstream source against the same
//! real MLNX_OFED core header and the same NVIDIA double:
//!   - NVIDIA's nvidia-peermem.c from Debian's nvidia-open-kernel-dkms 535
//!     (bookworm contrib, ci/fetch-nvidia-src.sh) and 550 (trixie contrib,
//!     ci/fetch-nvidia-p2p.sh trixie), downloaded and unpacked, never
//!     installed;
//!   - NVIDIA's nvidia-peermem.c of 580.142 and 595.45.04 from the
//!     open-gpu-kernel-modules fixtures, with the result of their own
//!     conftest.sh (its ib_peer_memory_symbols test);
//!   - Mellanox's nv_peer_mem.c from the nv_peer_memory 1.3 fixture.
//!
//! Each runs against the NVIDIA double of its own driver generation
//! (nvidia.rs): 535, 550 and Mellanox 1.3 against the 535-style double,
//! 580 and 595 against the 580-style one; the guest swaps the double (and
//! reloads the core and the scenario driver above it) between columns of
//! different generations, so every column runs in every x86_64 boot.
//!
//! It also times the full registration lifecycle with nv_peer_mem.ko and
//! with nvidia-peermem (550, else 535) alternately. Only nv_peer_mem's own
//! results decide the run. This file builds the other clients and says
//! what runs; oracle_console.rs reads what the guest printed and
//! oracle_report.rs prints the scenario x module table, one line per row
//! where nv_peer_mem deliberately differs from nvidia-peermem
//! (`DIFFERENCES`), and the benchmark's figures.

use super::builds::Doubles;
use super::nvidia::{Generation, NV595_RELEASE, Tree, debian_tree, fixture_tree};
use super::oracle_builds::{
    DoubleBuild, Target, build_bench, build_double, build_mellanox, build_nvidia_peermem,
};
use super::sync::sync_bytes;
use crate::{fixtures, workspace};
use anyhow::Result;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Mellanox's nv_peer_memory 1.3 source tarball (a fixture).
pub const MELLANOX_TARBALL: &str = "nv_peer_memory-1.3.tar.gz";

/// The other clients, in the order the guest runs them: (module name, which
/// is also the name the upstream source is built under, column label, the
/// driver generation whose double it runs against, insmod parameters).
/// 580 and 595 take `persistent_api_support=0`: their default (1, new
/// since 550) registers the persistent client alone as nv_mem; 0 registers
/// the invalidating nv_mem and the persistent nv_mem_nc, as 535/550 always
/// do and as ours is loaded for the same scenarios (like for like).
pub const ORACLES: [(&str, &str, Generation, &str); 5] = [
    (
        "nvidia_peermem_535",
        "nvidia-peermem 535",
        Generation::Nv535,
        "",
    ),
    (
        "nvidia_peermem_550",
        "nvidia-peermem 550",
        Generation::Nv535,
        "",
    ),
    (
        "mellanox_nv_peer_mem_1_3",
        "mellanox 1.3",
        Generation::Nv535,
        "",
    ),
    (
        "nvidia_peermem_580",
        "nvidia-peermem 580",
        Generation::Nv580,
        "persistent_api_support=0",
    ),
    (
        "nvidia_peermem_595",
        "nvidia-peermem 595",
        Generation::Nv580,
        "persistent_api_support=0",
    ),
];

/// The benchmark's reference per boot generation, in preference order: the
/// newest nvidia-peermem that loads beside the boot's own double.
const BENCH_REFERENCES: [(Generation, &[&str]); 2] = [
    (
        Generation::Nv535,
        &["nvidia_peermem_550", "nvidia_peermem_535"],
    ),
    (
        Generation::Nv580,
        &["nvidia_peermem_595", "nvidia_peermem_580"],
    ),
];

/// The scenarios the guest runs against each other client (the names of
/// nv_peer_mem's own scenarios in console::SCENARIOS), in table order.
/// Kept equal to what oracle/guest.sh reports by a test.
pub const ORACLE_SCENARIOS: &[&str] = &[
    "register",
    "acquire",
    "lifecycle",
    "several",
    "dma_map_refusals",
    "page_table_version",
    "invalidate",
    "nc",
    "inject",
    "rmmod_busy",
    "unregister",
    "legacy",
    "invalidate_legacy",
    "peerdirect_invalid",
    "free_during_get",
    "race",
];

/// Why nv_peer_mem's result deliberately differs from nvidia-peermem's in a
/// row of the table: (scenario, reason). The reasons are design facts of
/// this module (docs/testing.md, kmod/tests/vm/README.md); a test keeps
/// every scenario named here in ORACLE_SCENARIOS.
pub const DIFFERENCES: &[(&str, &str)] = &[
    (
        "nc",
        "580/595 only: their nv_mem_nc acquire probes with nvidia_p2p_get_pages_persistent/put_pages_persistent (nv_mem_acquire_nc, new since 550), so one nv_mem_nc registration pins the pages twice; ours, as 535/550, probes nv_mem_nc with nvidia_p2p_get_pages and makes one persistent pin (docs/contracts.md, \"NVIDIA 580 and 595\")",
    ),
    (
        "page_table_version",
        "ours refuses a page table whose version nv-p2p.h's NVIDIA_P2P_VERSION_COMPATIBLE rejects for the header it was built against (another layout: 580 bumped the major when it appended flags) before reading it, naming the rebuild; nvidia-peermem and Mellanox 1.3 never look at the page table's version and map it (docs/contracts.md, \"Versioned structures\")",
    ),
    (
        "acquire",
        "ours refuses a range whose end overflows (near the top of the address space) without asking nvidia.ko; nvidia-peermem's rounded end wraps and it asks the driver for the wrapped range",
    ),
    (
        "race",
        "ours' release waits for a free callback still inside the core, and ours makes no dma_unmap call on a table a free callback is tearing down (peer_mem.c: the client must protect itself against both); nvidia-peermem does neither: its callback writes callback_task = NULL into a context release freed (slub: Poison overwritten, 6.1), or dma_unmap runs on a page table the driver freed (6.12)",
    ),
    (
        "legacy",
        "ours registers peerdirect_support=1 as an old-style client (version[15]=0, what MLNX_OFED 4.9's core reads); nvidia-peermem sets the new-style byte with ex_size 0, which MOFED 25.10 also treats as legacy, so only the registration bytes differ",
    ),
    (
        "inject",
        "a failed nvidia_p2p_put_pages (535 through 595: -ENOMEM before RM) leaves the page table pinned with its free callback due: ours keeps the context and a module reference until that callback comes and frees the table there; nvidia-peermem forgets it, so its callback skips nvidia_p2p_free_page_table (flagged by the double, a no-op on 535) and the module can be unloaded with the callback due",
    ),
    (
        "free_during_get",
        "ours calls nvidia_p2p_free_page_table from a free callback that arrives before dma_map, as the double requires (a no-op in 535's driver); nvidia-peermem returns early ('invalid dma_mapping') without it: flagged by the double, harmless on 535",
    ),
];

/// One other client as prepared for the guest: its module, or why its
/// column is skipped.
pub struct Prepared {
    pub name: &'static str,
    pub label: &'static str,
    pub generation: Generation,
    /// insmod parameters for the scenarios (ORACLES)
    pub params: &'static str,
    pub ko: std::result::Result<PathBuf, String>,
}

/// What the oracle phase needs in the initramfs.
pub struct Plan {
    pub oracles: Vec<Prepared>,
    /// The boot's own generation (its double is loaded first).
    generation: Generation,
    /// The double of each generation some column runs against.
    doubles: Vec<(Generation, DoubleBuild)>,
    /// nvpm_bench.ko, or why the benchmark cannot run.
    pub bench_ko: std::result::Result<PathBuf, String>,
    /// The nvidia-peermem the benchmark compares with: (name, label).
    pub bench_reference: Option<(&'static str, &'static str)>,
}

impl Plan {
    /// (source, path inside the initramfs) of every file the guest's oracle
    /// phase reads, plus the files naming the modules to run.
    pub fn files(&self, work: &Path) -> Result<Vec<(PathBuf, String)>> {
        let dir = work.join("oracle");
        fs::create_dir_all(&dir)?;
        let mut files = vec![(
            workspace::path("kmod/tests/vm/oracle/guest.sh"),
            "lib/nvpm/oracle/guest.sh".to_string(),
        )];
        for (generation, double) in &self.doubles {
            files.push((
                double.ko.clone(),
                format!("lib/nvpm/oracle/double-{}.ko", generation.id()),
            ));
        }
        // One line per client: its name, the generation of its double and
        // its insmod parameters.
        let mut names = String::new();
        for o in &self.oracles {
            if let Ok(ko) = &o.ko {
                files.push((ko.clone(), format!("lib/nvpm/oracle/{}.ko", o.name)));
                names.push_str(&format!("{} {} {}\n", o.name, o.generation.id(), o.params));
            }
        }
        sync_bytes(&dir.join("modules"), names.as_bytes())?;
        files.push((dir.join("modules"), "lib/nvpm/oracle/modules".to_string()));
        sync_bytes(
            &dir.join("generation"),
            format!("{}\n", self.generation.id()).as_bytes(),
        )?;
        files.push((
            dir.join("generation"),
            "lib/nvpm/oracle/generation".to_string(),
        ));
        if let (Ok(ko), Some((name, _))) = (&self.bench_ko, self.bench_reference) {
            files.push((ko.clone(), "lib/nvpm/nvpm_bench.ko".to_string()));
            sync_bytes(&dir.join("bench_reference"), format!("{name}\n").as_bytes())?;
            files.push((
                dir.join("bench_reference"),
                "lib/nvpm/oracle/bench_reference".to_string(),
            ));
        }
        Ok(files)
    }
}

/// The NVIDIA sources a boot has: 535's tree, and the 580 fixture tree (or
/// why it is missing).
pub struct Sources<'a> {
    pub nv_535: &'a Path,
    pub nv_580: &'a std::result::Result<Tree, String>,
}

/// Builds every other client and the benchmark module for @kver, whose
/// boot runs the @generation double @d. Nothing here fails the run: a
/// client that cannot be fetched or built becomes a skipped column with
/// the reason.
pub fn prepare(
    kver: &str,
    kdir: &Path,
    work: &Path,
    d: &Doubles,
    generation: Generation,
    src: &Sources,
) -> Plan {
    let nv_535 = debian_tree(src.nv_535).map_err(|e| format!("{e:#}"));
    let nv_550 = fetch_550().and_then(|dir| debian_tree(&dir).map_err(|e| format!("{e:#}")));
    let nv_595 = fixture_tree(NV595_RELEASE);
    let mellanox = fixtures::file(MELLANOX_TARBALL);
    // The double of each generation: the boot's own, and the other one
    // built here against its header.
    let doubles: Vec<(Generation, std::result::Result<DoubleBuild, String>)> =
        [Generation::Nv535, Generation::Nv580]
            .into_iter()
            .map(|g| {
                let built = if g == generation {
                    Ok(DoubleBuild {
                        ko: d.nv_ko.clone(),
                        symvers: d.nv_dir.join("Module.symvers"),
                    })
                } else {
                    let tree = match g {
                        Generation::Nv535 => nv_535.clone(),
                        Generation::Nv580 => src.nv_580.clone(),
                    };
                    tree.and_then(|tree| {
                        build_double(kver, kdir, d, g, &tree).map_err(|e| format!("{e:#}"))
                    })
                };
                (g, built)
            })
            .collect();
    let mut oracles = Vec::new();
    for (name, label, g, params) in ORACLES {
        let double = doubles
            .iter()
            .find(|(dg, _)| *dg == g)
            .map(|(_, b)| b.clone())
            .unwrap_or_else(|| Err("no double of this generation".to_string()))
            .map_err(|e| format!("no {}-style NVIDIA double: {e}", g.id()));
        let ko = double.and_then(|double| {
            let extra = format!(
                "{} {}",
                double.symvers.display(),
                d.ofa_dir.join("Module.symvers").display()
            );
            let target = Target {
                kver,
                kdir,
                work,
                extra_symbols: &extra,
            };
            if name == "mellanox_nv_peer_mem_1_3" {
                mellanox.clone().and_then(|tarball| {
                    build_mellanox(&target, d, name, &tarball, src.nv_535)
                        .map_err(|e| format!("build failed: {e:#}"))
                })
            } else {
                let tree = match name {
                    "nvidia_peermem_535" => nv_535.clone(),
                    "nvidia_peermem_550" => nv_550.clone(),
                    "nvidia_peermem_580" => src.nv_580.clone(),
                    _ => nv_595.clone(),
                };
                tree.and_then(|tree| {
                    build_nvidia_peermem(&target, d, name, &tree)
                        .map_err(|e| format!("build failed: {e:#}"))
                })
            }
        });
        oracles.push(Prepared {
            name,
            label,
            generation: g,
            params,
            ko,
        });
    }
    let bench_reference = BENCH_REFERENCES
        .iter()
        .find(|(g, _)| *g == generation)
        .and_then(|(_, wanted)| {
            wanted.iter().find_map(|want| {
                oracles
                    .iter()
                    .find(|o| o.name == *want && o.ko.is_ok())
                    .map(|o| (o.name, o.label))
            })
        });
    let bench_ko = build_bench(kver, kdir, d).map_err(|e| format!("build failed: {e:#}"));
    Plan {
        oracles,
        generation,
        doubles: doubles
            .into_iter()
            .filter_map(|(g, b)| b.ok().map(|b| (g, b)))
            .collect(),
        bench_ko,
        bench_reference,
    }
}

/// NVIDIA 550 from trixie contrib, through a private apt state (never the
/// host's sources): ci/fetch-nvidia-p2p.sh, cached.
fn fetch_550() -> std::result::Result<PathBuf, String> {
    let out = Command::new("bash")
        .args(["ci/fetch-nvidia-p2p.sh", "trixie"])
        .current_dir(workspace::root())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run ci/fetch-nvidia-p2p.sh: {e}"))?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && dir.join("nvidia-peermem/nvidia-peermem.c").is_file() {
        Ok(dir)
    } else {
        Err("ci/fetch-nvidia-p2p.sh trixie did not provide nvidia-peermem/nvidia-peermem.c (trixie contrib unreachable?)".to_string())
    }
}
