//! The real upstream sources tests run against (MLNX_OFED's PeerDirect
//! core, Mellanox's nv_peer_memory 1.3, distro rpm macros). They are not
//! part of this repository: tests read them at run time from one directory,
//! `NVPM_FIXTURES` or else `../shared/fixtures` beside the workspace, and
//! a test whose fixture is missing reports itself skipped, naming it.

use anyhow::{Context, Result, bail};
use flate2::read::GzDecoder;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The MLNX_OFED kernel sources whose PeerDirect core the VM tests load.
pub const MOFED_TARBALL: &str = "mlnx-ofa_kernel-25.10.1.7.1.1.tar.gz";

/// The fixture directory in use, whether or not it exists.
pub fn dir() -> PathBuf {
    match std::env::var_os("NVPM_FIXTURES") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => crate::workspace::path("../shared/fixtures"),
    }
}

/// A fixture file, or why it cannot be had (the text a skipped test prints).
pub fn file(name: &str) -> std::result::Result<PathBuf, String> {
    let path = dir().join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "fixture {} not found (set NVPM_FIXTURES to the directory holding it)",
            path.display()
        ))
    }
}

/// The bytes of one member of a .tar.gz fixture, by its path in the archive.
pub fn read_member(tarball: &Path, member: &str) -> Result<Vec<u8>> {
    let file = fs::File::open(tarball).with_context(|| format!("opening {}", tarball.display()))?;
    let mut archive = tar::Archive::new(GzDecoder::new(file));
    for entry in archive
        .entries()
        .with_context(|| format!("reading {}", tarball.display()))?
    {
        let mut entry = entry.with_context(|| format!("reading {}", tarball.display()))?;
        if entry.path()? == Path::new(member) {
            let mut data = Vec::new();
            entry.read_to_end(&mut data)?;
            return Ok(data);
        }
    }
    bail!("{} has no {member}", tarball.display())
}

/// The files of MLNX_OFED's PeerDirect core the VM harness compiles, by
/// their path inside the source tree.
pub const MOFED_CORE_FILES: [&str; 3] = [
    "drivers/infiniband/core/peer_mem.c",
    "drivers/infiniband/core/ib_peer_mem.h",
    "include/rdma/peer_mem.h",
];

/// The text of @member (a path below the tarball's top directory) of the
/// MLNX_OFED tarball @tarball.
pub fn mofed_member(tarball: &Path, member: &str) -> Result<String> {
    let file = fs::File::open(tarball).with_context(|| format!("opening {}", tarball.display()))?;
    let mut archive = tar::Archive::new(GzDecoder::new(file));
    for entry in archive.entries()? {
        let mut entry = entry?;
        let inner: PathBuf = entry.path()?.components().skip(1).collect();
        if inner == Path::new(member) {
            let mut text = String::new();
            entry.read_to_string(&mut text)?;
            return Ok(text);
        }
    }
    bail!(
        "{} has no {member}: is it MLNX_OFED 25.10's mlnx-ofa_kernel source tarball?",
        tarball.display()
    )
}

/// Unpacks `MOFED_CORE_FILES` from the MLNX_OFED tarball: `peer_mem.c` and
/// `ib_peer_mem.h` into `core_dir`, `rdma/peer_mem.h` into
/// `include_dir/rdma/`. Files already identical are left alone, so Kbuild
/// does not rebuild them.
pub fn unpack_mofed_core(tarball: &Path, core_dir: &Path, include_dir: &Path) -> Result<()> {
    let file = fs::File::open(tarball).with_context(|| format!("opening {}", tarball.display()))?;
    let mut archive = tar::Archive::new(GzDecoder::new(file));
    let mut found = 0;
    for entry in archive
        .entries()
        .with_context(|| format!("reading {}", tarball.display()))?
    {
        let mut entry = entry.with_context(|| format!("reading {}", tarball.display()))?;
        let path = entry.path()?.into_owned();
        // The tarball's paths start with its top directory.
        let inner: PathBuf = path.components().skip(1).collect();
        let Some(wanted) = MOFED_CORE_FILES.iter().find(|f| inner == Path::new(f)) else {
            continue;
        };
        let dest = if wanted.starts_with("include/") {
            include_dir.join(inner.strip_prefix("include").expect("checked above"))
        } else {
            core_dir.join(inner.file_name().expect("a file"))
        };
        let mut data = Vec::new();
        entry.read_to_end(&mut data)?;
        if fs::read(&dest).ok().as_deref() != Some(&data[..]) {
            fs::create_dir_all(dest.parent().expect("a file in a directory"))?;
            fs::write(&dest, &data).with_context(|| format!("writing {}", dest.display()))?;
        }
        found += 1;
    }
    if found != MOFED_CORE_FILES.len() {
        bail!(
            "{} lacks some of {:?}: is it MLNX_OFED's mlnx-ofa_kernel source tarball?",
            tarball.display(),
            MOFED_CORE_FILES
        );
    }
    Ok(())
}
