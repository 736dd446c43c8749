//! How test-vm's oracle builds the other clients (oracle.rs says which):
//! the other generation's NVIDIA double, NVIDIA's nvidia-peermem.c (with the
//! result of its own conftest.sh where the tree has one), Mellanox's
//! nv_peer_mem.c, and the benchmark module, each with Kbuild against the
//! guest kernel's headers.

use super::builds::{Doubles, kbuild};
use super::nvidia::{Generation, Tree};
use super::sync::{sync_bytes, sync_file};
use crate::workspace;
use anyhow::{Context, Result, bail};
use flate2::read::GzDecoder;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A build of the NVIDIA double: its module and Module.symvers.
#[derive(Clone)]
pub(super) struct DoubleBuild {
    pub ko: PathBuf,
    pub symvers: PathBuf,
}

/// The NVIDIA double of generation @g built against @tree's nv-p2p.h,
/// beside the boot's own (its Kbuild includes ../include).
pub(super) fn build_double(
    kver: &str,
    kdir: &Path,
    d: &Doubles,
    g: Generation,
    tree: &Tree,
) -> Result<DoubleBuild> {
    let dir = d.src_dir.join(format!("nv_p2p_double_{}", g.id()));
    for f in ["Kbuild", "nv_p2p_double.c"] {
        sync_file(&d.src_dir.join("nv_p2p_double").join(f), &dir.join(f))?;
    }
    kbuild(
        kdir,
        &dir,
        &[("NVPM_NV_INC", tree.dir.join("nvidia").display().to_string())],
        &format!("building the {}-style NVIDIA double for {kver}", g.id()),
    )?;
    Ok(DoubleBuild {
        ko: dir.join("nv_p2p_double.ko"),
        symvers: dir.join("Module.symvers"),
    })
}

/// Where another client is built: the kernel, the work directory, and the
/// Module.symvers of the doubles it links against.
pub(super) struct Target<'a> {
    pub kver: &'a str,
    pub kdir: &'a Path,
    pub work: &'a Path,
    pub extra_symbols: &'a str,
}

/// One other client's build: its name, upstream source, the directory of
/// the nv-p2p.h it is built against, extra compiler flags, and the
/// conftest.h it reads (NVIDIA's own result, or the shim's).
struct OracleSource<'a> {
    name: &'a str,
    source: &'a [u8],
    nv_inc: &'a Path,
    cflags: &'a str,
    conftest: Option<&'a [u8]>,
}

/// Lays out @work/oracle/@name (Kbuild and shim/ from kmod/tests/vm/oracle,
/// the upstream source as @name.c) and runs Kbuild there.
fn build_oracle(t: &Target, d: &Doubles, o: &OracleSource) -> Result<PathBuf> {
    let OracleSource {
        name,
        source,
        nv_inc,
        cflags,
        conftest,
    } = *o;
    let dir = t.work.join("oracle").join(name);
    let ours = workspace::path("kmod/tests/vm/oracle");
    sync_file(&ours.join("Kbuild"), &dir.join("Kbuild"))?;
    match conftest {
        Some(text) => {
            fs::create_dir_all(dir.join("shim"))?;
            sync_bytes(&dir.join("shim/conftest.h"), text)?
        }
        None => sync_file(&ours.join("shim/conftest.h"), &dir.join("shim/conftest.h"))?,
    }
    sync_bytes(&dir.join(format!("{name}.c")), source)?;
    kbuild(
        t.kdir,
        &dir,
        &[
            ("NVPM_ORACLE", name.to_string()),
            ("NVPM_NV_INC", nv_inc.display().to_string()),
            (
                "NVPM_OFA_INC",
                d.ofa_dir.join("include").display().to_string(),
            ),
            ("NVPM_ORACLE_CFLAGS", cflags.to_string()),
            ("KBUILD_EXTRA_SYMBOLS", t.extra_symbols.to_string()),
        ],
        &format!("building {name}.ko for {}", t.kver),
    )?;
    Ok(dir.join(format!("{name}.ko")))
}

pub(super) fn build_nvidia_peermem(
    t: &Target,
    d: &Doubles,
    name: &str,
    tree: &Tree,
) -> Result<PathBuf> {
    let file = tree.dir.join("nvidia-peermem/nvidia-peermem.c");
    let source = fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let conftest = if tree.has_conftest {
        Some(run_conftest(t, d, tree, name)?)
    } else {
        None
    };
    build_oracle(
        t,
        d,
        &OracleSource {
            name,
            source: &source,
            nv_inc: &tree.dir.join("nvidia"),
            cflags: &format!("-DNV_VERSION_STRING=\\\"{}\\\"", tree.version),
            conftest: conftest.as_deref(),
        },
    )
}

/// The conftest.h NVIDIA's own build would generate for nvidia-peermem.c:
/// @tree's conftest.sh, test `ib_peer_memory_symbols` (the one result
/// nvidia-peermem.c reads), run against a kernel output directory whose
/// Module.symvers is the guest kernel's plus the PeerDirect core's, as on
/// a kernel whose ib_core exports the peer memory API. (conftest.sh also
/// looks in /usr/src/ofa_kernel and /var/lib/dkms/mlnx-ofed-kernel, where
/// a real MLNX_OFED puts its Module.symvers; this host's are not the
/// guest's.) Fails unless the script says "present": without it
/// nvidia-peermem compiles to a module that refuses to load.
fn run_conftest(t: &Target, d: &Doubles, tree: &Tree, name: &str) -> Result<Vec<u8>> {
    let out_dir = t.work.join("oracle").join(format!("{name}-conftest"));
    fs::create_dir_all(&out_dir)?;
    let mut symvers = fs::read(t.kdir.join("Module.symvers")).unwrap_or_default();
    symvers.extend(fs::read(d.ofa_dir.join("Module.symvers"))?);
    sync_bytes(&out_dir.join("Module.symvers"), &symvers)?;
    let out = Command::new("sh")
        .arg(tree.dir.join("conftest.sh"))
        .arg("cc")
        .arg("x86_64") // the oracle phase runs on x86_64 guests only
        .arg(t.kdir)
        .arg(&out_dir)
        .args(["compile_tests", "", "ib_peer_memory_symbols"])
        .output()
        .context("running NVIDIA's conftest.sh")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || !text.contains("#define NV_MLNX_IB_PEER_MEM_SYMBOLS_PRESENT") {
        bail!(
            "NVIDIA {}'s conftest.sh did not find the peer memory symbols: {}",
            tree.version,
            text.trim()
        );
    }
    Ok(format!(
        "/* conftest.sh of NVIDIA {} (ib_peer_memory_symbols), run by xtask/src/vm/oracle.rs */\n{text}",
        tree.version
    )
    .into_bytes())
}

/// Mellanox 1.3 against 535's nv-p2p.h (the one its 1.3 release predates
/// least; it runs against the 535-style double).
pub(super) fn build_mellanox(
    t: &Target,
    d: &Doubles,
    name: &str,
    tarball: &Path,
    nv_535: &Path,
) -> Result<PathBuf> {
    let source = file_from_tarball(tarball, "nv_peer_mem.c")?;
    build_oracle(
        t,
        d,
        &OracleSource {
            name,
            source: &source,
            nv_inc: &nv_535.join("nvidia"),
            cflags: "",
            conftest: None,
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

pub(super) fn build_bench(kver: &str, kdir: &Path, d: &Doubles) -> Result<PathBuf> {
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
