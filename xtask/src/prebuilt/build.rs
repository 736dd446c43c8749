//! Builds nv_peer_mem.ko for one kernel from the pipeline's source tree,
//! as DKMS would on a node (kmod/Makefile, the same tree the -dkms package
//! ships), in a scratch copy, with one core cache for every kernel; then
//! checks what was built: its vermagic names the kernel, and every symbol
//! it imports from MLNX_OFED and NVIDIA is recorded with the CRC it was
//! built against and the module that exports it.

use super::kernel::{Arch, Kernel};
use super::modsign::ModSign;
use super::prerequisites::{NvidiaSource, OfedTree, provider};
use crate::bench_kmod::timed;
use crate::dkms_package::tree_files::TreeFile;
use crate::pipeline::Plan;
use crate::tool;
use anyhow::{Context, Result, bail, ensure};
use std::path::Path;
use std::process::Command;

/// A module built for one kernel, with what it cost.
pub struct BuiltModule {
    pub ko: Vec<u8>,
    /// One line per imported symbol a prerequisite exports:
    /// `<crc>\t<symbol>\t<exporting module>\t<where that was read>`.
    pub imports: Vec<String>,
    pub seconds: f64,
    pub peak_rss_kib: Option<u64>,
}

/// Writes @tree (the pipeline's source tree) under @dir.
pub fn materialize(tree: &[TreeFile], dir: &Path) -> Result<()> {
    for file in tree {
        let path = dir.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, &file.contents)
            .with_context(|| format!("writing {}", path.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(file.mode))?;
    }
    Ok(())
}

/// Builds the module of the tree at @tree_dir for @kernel.
pub fn build(
    tree_dir: &Path,
    kernel: &Kernel,
    ofed: &OfedTree,
    nvidia: &NvidiaSource,
    core_cache: &Path,
    modsign: Option<&ModSign>,
    plan: &Plan,
) -> Result<BuiltModule> {
    let version = plan.package_version.as_str();
    let kmod = tree_dir.join("kmod");
    let mut make = Command::new("make");
    make.arg("-C")
        .arg(&kmod)
        .arg(format!("KVER={}", kernel.release))
        .arg(format!("KDIR={}", kernel.build_dir.display()))
        .arg(format!("OFA_KERNEL={}", ofed.dir.display()))
        .arg(format!("NV_SRC={}", nvidia.dir.display()))
        .arg(format!("NVPM_RUST_CACHE={}", core_cache.display()));
    // The same bytes from any scratch directory (reproducible builds): the
    // tree's path in debug info, and so in the build-id that survives
    // stripping, is the one DKMS builds in. KCFLAGS and KRUSTFLAGS are the
    // kernel's variables for extra compiler flags (kbuild.rst); KCFLAGS
    // also reaches the .mod.c that modpost writes.
    let tree = tree_dir.display();
    let mapped = format!("/usr/src/nv_peer_mem-{version}");
    make.arg(format!("KCFLAGS=-ffile-prefix-map={tree}={mapped}"))
        .arg(format!("KRUSTFLAGS=--remap-path-prefix={tree}={mapped}"));
    // The kernel's own switch for reproducible builds: with
    // KBUILD_BUILD_TIMESTAMP set, scripts/Makefile.btf (6.12) leaves out
    // pahole's -j, "[which] makes its output unreproducible", unless
    // pahole >= 1.27 can encode in parallel reproducibly (bookworm's
    // dwarves is 1.24): the module's .BTF section otherwise differs from
    // build to build (ci/test-fleet.sh caught it on 6.12). Any value
    // switches it; the package's date is the one that belongs there.
    make.env(
        "KBUILD_BUILD_TIMESTAMP",
        format!("@{}", plan.source_date_epoch),
    );
    if let Some(symvers) = &nvidia.symvers {
        make.arg(format!("NV_SYMVERS={}", symvers.display()));
    }
    if Arch::host() != Some(kernel.arch) {
        make.arg(format!("ARCH={}", kernel.arch.kbuild()));
        make.arg(format!(
            "CROSS_COMPILE={}-linux-gnu-",
            kernel.arch.machine()
        ));
    }
    let step = timed(
        make,
        &format!("building nv_peer_mem for {}", kernel.release),
    )?;
    let ko_path = kmod.join("nv_peer_mem.ko");
    ensure!(
        ko_path.is_file(),
        "the build for {} made no nv_peer_mem.ko:\n{}",
        kernel.release,
        step.output
    );
    let vermagic = tool::stdout(
        Command::new("modinfo")
            .args(["-F", "vermagic"])
            .arg(&ko_path),
    )
    .context(tool::KMOD)?;
    ensure!(
        vermagic.split_whitespace().next() == Some(kernel.release.as_str()),
        "nv_peer_mem.ko built for {} has vermagic {:?}; the build tree at {} is another kernel's",
        kernel.release,
        vermagic.trim(),
        kernel.build_dir.display()
    );
    // As the kernel's `make modules_install INSTALL_MOD_STRIP=1`
    // (scripts/Makefile.modinst: $(STRIP) --strip-debug) and Debian's own
    // module packages: no debug info, whose build paths would also make
    // the module differ per build directory. Before signing: stripping a
    // signed module drops its signature.
    let strip = if Arch::host() == Some(kernel.arch) {
        "strip".to_owned()
    } else {
        format!("{}-linux-gnu-strip", kernel.arch.machine())
    };
    tool::stdout(Command::new(&strip).arg("--strip-debug").arg(&ko_path))?;
    if let Some(sign) = modsign {
        let sign_file = kernel.build_dir.join("scripts/sign-file");
        ensure!(
            sign_file.is_file(),
            "--modsign-key: {} is missing; install the kernel's build tools (Debian: linux-kbuild-<version>)",
            sign_file.display()
        );
        sign.sign(
            &sign_file,
            &kernel.signature_hash(),
            &ko_path,
            &kernel.release,
        )?;
    }
    let imports = imports(&ko_path, ofed, nvidia)?;
    let ko = std::fs::read(&ko_path).with_context(|| format!("reading {}", ko_path.display()))?;
    Ok(BuiltModule {
        ko,
        imports,
        seconds: step.seconds,
        peak_rss_kib: step.peak_rss_kib,
    })
}

/// The module's symbol versions (`modprobe --dump-modversions`, its
/// `__versions` section) of symbols MLNX_OFED or NVIDIA export, each with
/// its provider; refuses a module that imports the PeerDirect core with
/// another CRC than MLNX_OFED's build exports (it would not load).
fn imports(ko: &Path, ofed: &OfedTree, nvidia: &NvidiaSource) -> Result<Vec<String>> {
    let versions = tool::stdout(Command::new("modprobe").arg("--dump-modversions").arg(ko))
        .context(tool::KMOD)?;
    let ofed_symvers_path = ofed.dir.join("Module.symvers");
    let ofed_symvers = std::fs::read_to_string(&ofed_symvers_path)?;
    let nv_symvers = match &nvidia.symvers {
        Some(p) => Some((p, std::fs::read_to_string(p)?)),
        None => None,
    };
    let mut lines = Vec::new();
    for line in versions.lines() {
        let Some((crc, symbol)) = line.split_once('\t') else {
            continue;
        };
        let crc = normalize_crc(crc);
        if let Some((want, module)) = provider(&ofed_symvers, symbol) {
            if normalize_crc(want) != crc {
                bail!(
                    "nv_peer_mem.ko imports {symbol} with CRC {crc}, but {} exports it with {want}; rebuild against this MLNX_OFED",
                    ofed_symvers_path.display()
                );
            }
            lines.push(format!(
                "{crc}\t{symbol}\t{}\t{}",
                module_name(module),
                ofed_symvers_path.display()
            ));
        } else if symbol.starts_with("nvidia_p2p_") {
            let (module, source) = match &nv_symvers {
                Some((path, text)) => (
                    module_name(provider(text, symbol).map_or("nvidia", |(_, m)| m)).to_owned(),
                    path.display().to_string(),
                ),
                None => ("nvidia".to_owned(), "no NVIDIA Module.symvers".to_owned()),
            };
            lines.push(format!("{crc}\t{symbol}\t{module}\t{source}"));
        }
    }
    // Symbols built without a CRC (no Module.symvers for them) are absent
    // from __versions; list what the module needs from NVIDIA anyway.
    if nvidia.symvers.is_none() {
        lines.push("none\tnvidia_p2p_*\tnvidia\tbuilt without the NVIDIA build's Module.symvers: the kernel does not check these symbols' versions".to_owned());
    }
    ensure!(
        lines
            .iter()
            .any(|l| l.contains(super::prerequisites::PEER_CORE_SYMBOL)),
        "nv_peer_mem.ko does not import {} with a version; it was not built against MLNX_OFED's Module.symvers",
        super::prerequisites::PEER_CORE_SYMBOL
    );
    lines.sort();
    Ok(lines)
}

/// A Module.symvers module column as modprobe names the module: an
/// external build writes its path (`/var/lib/dkms/.../ib_core`).
fn module_name(column: &str) -> &str {
    column.rsplit('/').next().unwrap_or(column)
}

/// `0x0000abcd` as modprobe and Module.symvers write CRCs, lowercased, with
/// eight hex digits.
fn normalize_crc(crc: &str) -> String {
    let hex = crc.trim().trim_start_matches("0x");
    match u64::from_str_radix(hex, 16) {
        Ok(value) => format!("0x{value:08x}"),
        Err(_) => crc.trim().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::normalize_crc;

    #[test]
    fn crcs_compare_in_one_spelling() {
        assert_eq!(normalize_crc("0x1A2B"), "0x00001a2b");
        assert_eq!(normalize_crc("0x0000abcd"), "0x0000abcd");
        assert_eq!(normalize_crc("0x00000000"), "0x00000000");
    }
}
