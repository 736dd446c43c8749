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
//!   - Mellanox's nv_peer_mem.c from the nv_peer_memory 1.3 fixture.
//!
//! It also times the full registration lifecycle with nv_peer_mem.ko and
//! with nvidia-peermem (550, else 535) alternately. Only nv_peer_mem's own
//! results decide the run. This file builds the other clients and says
//! what runs; oracle_console.rs reads what the guest printed and
//! oracle_report.rs prints the scenario x module table, one line per row
//! where nv_peer_mem deliberately differs from nvidia-peermem
//! (`DIFFERENCES`), and the benchmark's figures.

use super::builds::{Doubles, kbuild};
use super::sync::{sync_bytes, sync_file};
use crate::{fixtures, workspace};
use anyhow::{Context, Result, bail};
use flate2::read::GzDecoder;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Mellanox's nv_peer_memory 1.3 source tarball (a fixture).
pub const MELLANOX_TARBALL: &str = "nv_peer_memory-1.3.tar.gz";

/// The other clients, in the order the guest runs them: (module name, which
/// is also the name the upstream source is built under, column label).
pub const ORACLES: [(&str, &str); 3] = [
    ("nvidia_peermem_535", "nvidia-peermem 535"),
    ("nvidia_peermem_550", "nvidia-peermem 550"),
    ("mellanox_nv_peer_mem_1_3", "mellanox 1.3"),
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
        "a failed nvidia_p2p_put_pages (535/550: -ENOMEM before RM) leaves the page table pinned with its free callback due: ours keeps the context and a module reference until that callback comes and frees the table there; nvidia-peermem forgets it, so its callback skips nvidia_p2p_free_page_table (flagged by the double, a no-op on 535) and the module can be unloaded with the callback due",
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
    pub ko: std::result::Result<PathBuf, String>,
}

/// What the oracle phase needs in the initramfs.
pub struct Plan {
    pub oracles: Vec<Prepared>,
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
        let mut names = String::new();
        for o in &self.oracles {
            if let Ok(ko) = &o.ko {
                files.push((ko.clone(), format!("lib/nvpm/oracle/{}.ko", o.name)));
                names.push_str(o.name);
                names.push('\n');
            }
        }
        sync_bytes(&dir.join("modules"), names.as_bytes())?;
        files.push((dir.join("modules"), "lib/nvpm/oracle/modules".to_string()));
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

/// Builds every other client and the benchmark module for @kver. Nothing
/// here fails the run: a client that cannot be fetched or built becomes a
/// skipped column with the reason.
pub fn prepare(kver: &str, kdir: &Path, work: &Path, d: &Doubles, nv_535: &Path) -> Plan {
    let nv_550 = fetch_550();
    let mellanox = fixtures::file(MELLANOX_TARBALL);
    let mut oracles = Vec::new();
    for (name, label) in ORACLES {
        let source = match name {
            "nvidia_peermem_535" => Ok(NvidiaTree(nv_535.to_path_buf())),
            "nvidia_peermem_550" => nv_550.clone().map(NvidiaTree),
            _ => Err(String::new()),
        };
        let ko = if name.starts_with("nvidia_peermem") {
            source.and_then(|tree| {
                build_nvidia_peermem(kver, kdir, work, d, name, &tree.0)
                    .map_err(|e| format!("build failed: {e:#}"))
            })
        } else {
            mellanox.clone().and_then(|tarball| {
                build_mellanox(kver, kdir, work, d, name, &tarball, nv_535)
                    .map_err(|e| format!("build failed: {e:#}"))
            })
        };
        oracles.push(Prepared { name, label, ko });
    }
    let bench_reference = ["nvidia_peermem_550", "nvidia_peermem_535"]
        .iter()
        .find_map(|want| {
            oracles
                .iter()
                .find(|o| o.name == *want && o.ko.is_ok())
                .map(|o| (o.name, o.label))
        });
    let bench_ko = build_bench(kver, kdir, d).map_err(|e| format!("build failed: {e:#}"));
    Plan {
        oracles,
        bench_ko,
        bench_reference,
    }
}

/// An unpacked nvidia-open-kernel-dkms source tree (holds nvidia/nv-p2p.h
/// and nvidia-peermem/nvidia-peermem.c).
struct NvidiaTree(PathBuf);

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

/// The driver version of an unpacked tree, from its directory name
/// (usr/src/nvidia-current-open-535.261.03 -> 535.261.03): NVIDIA's build
/// passes it to nvidia-peermem.c as NV_VERSION_STRING.
fn nvidia_version(tree: &Path) -> Result<String> {
    let name = tree
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.rsplit_once('-') {
        Some((_, v)) if v.chars().next().is_some_and(|c| c.is_ascii_digit()) => Ok(v.to_string()),
        _ => bail!("cannot read the driver version from {}", tree.display()),
    }
}

/// Lays out @work/oracle/@name (Kbuild and shim/ from kmod/tests/vm/oracle,
/// the upstream source as @name.c) and runs Kbuild there.
/// One other client's build: its name, upstream source, the directory of
/// the nv-p2p.h it is built against, and extra compiler flags.
struct OracleSource<'a> {
    name: &'a str,
    source: &'a [u8],
    nv_inc: &'a Path,
    cflags: &'a str,
}

fn build_oracle(
    kver: &str,
    kdir: &Path,
    work: &Path,
    d: &Doubles,
    o: &OracleSource,
) -> Result<PathBuf> {
    let OracleSource {
        name,
        source,
        nv_inc,
        cflags,
    } = *o;
    let dir = work.join("oracle").join(name);
    let ours = workspace::path("kmod/tests/vm/oracle");
    sync_file(&ours.join("Kbuild"), &dir.join("Kbuild"))?;
    sync_file(&ours.join("shim/conftest.h"), &dir.join("shim/conftest.h"))?;
    sync_bytes(&dir.join(format!("{name}.c")), source)?;
    kbuild(
        kdir,
        &dir,
        &[
            ("NVPM_ORACLE", name.to_string()),
            ("NVPM_NV_INC", nv_inc.display().to_string()),
            (
                "NVPM_OFA_INC",
                d.ofa_dir.join("include").display().to_string(),
            ),
            ("NVPM_ORACLE_CFLAGS", cflags.to_string()),
            ("KBUILD_EXTRA_SYMBOLS", d.extra_symbols()),
        ],
        &format!("building {name}.ko for {kver}"),
    )?;
    Ok(dir.join(format!("{name}.ko")))
}

fn build_nvidia_peermem(
    kver: &str,
    kdir: &Path,
    work: &Path,
    d: &Doubles,
    name: &str,
    tree: &Path,
) -> Result<PathBuf> {
    let file = tree.join("nvidia-peermem/nvidia-peermem.c");
    let source = fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let version = nvidia_version(tree)?;
    build_oracle(
        kver,
        kdir,
        work,
        d,
        &OracleSource {
            name,
            source: &source,
            nv_inc: &tree.join("nvidia"),
            cflags: &format!("-DNV_VERSION_STRING=\\\"{version}\\\""),
        },
    )
}

/// Mellanox 1.3 against the NVIDIA double's own nv-p2p.h (535's).
fn build_mellanox(
    kver: &str,
    kdir: &Path,
    work: &Path,
    d: &Doubles,
    name: &str,
    tarball: &Path,
    nv_535: &Path,
) -> Result<PathBuf> {
    let source = file_from_tarball(tarball, "nv_peer_mem.c")?;
    build_oracle(
        kver,
        kdir,
        work,
        d,
        &OracleSource {
            name,
            source: &source,
            nv_inc: &nv_535.join("nvidia"),
            cflags: "",
        },
    )
}

/// The bytes of the file called @file_name directly below the tarball's
/// top directory.
fn file_from_tarball(tarball: &Path, file_name: &str) -> Result<Vec<u8>> {
    let file = fs::File::open(tarball).with_context(|| format!("opening {}", tarball.display()))?;
    let mut archive = tar::Archive::new(GzDecoder::new(file));
    for entry in archive
        .entries()
        .with_context(|| format!("reading {}", tarball.display()))?
    {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        if path.components().count() == 2 && path.file_name() == Some(file_name.as_ref()) {
            let mut data = Vec::new();
            entry.read_to_end(&mut data)?;
            return Ok(data);
        }
    }
    bail!("{} holds no */{file_name}", tarball.display())
}

fn build_bench(kver: &str, kdir: &Path, d: &Doubles) -> Result<PathBuf> {
    let dir = d.src_dir.join("oracle/bench");
    kbuild(
        kdir,
        &dir,
        &[
            ("NVPM_NV_INC", d.nv_dir.join("nvidia").display().to_string()),
            (
                "NVPM_OFA_INC",
                d.ofa_dir.join("include").display().to_string(),
            ),
            ("KBUILD_EXTRA_SYMBOLS", d.extra_symbols()),
        ],
        &format!("building nvpm_bench.ko for {kver}"),
    )?;
    Ok(dir.join("nvpm_bench.ko"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_driver_versions_from_tree_names() {
        assert_eq!(
            nvidia_version(Path::new("/x/usr/src/nvidia-current-open-535.261.03")).unwrap(),
            "535.261.03"
        );
        assert!(nvidia_version(Path::new("/x/usr/src/nvidia")).is_err());
    }
}
