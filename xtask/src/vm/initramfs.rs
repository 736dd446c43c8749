//! The guest image: busybox-static, the guest's init script, the scenarios
//! it sources and the modules under test, packed as an uncompressed newc
//! cpio (the kernel unpacks it before init runs).

use super::builds::Doubles;
use super::command::run;
use crate::workspace;
use anyhow::{Context, Result, bail};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Lays out @work/initramfs (@busybox: a static one of the guest's
/// architecture, init, the doubles, the scenario
/// driver, nv_peer_mem.ko and its no-persistent-API build) and packs it
/// into @work/initramfs.cpio. @extra: more (file, path in the image), the
/// oracle phase's (oracle.rs).
pub fn make_initramfs(
    work: &Path,
    busybox: &Path,
    d: &Doubles,
    module: &Path,
    no_persistent: &Path,
    extra: &[(PathBuf, String)],
) -> Result<PathBuf> {
    if !busybox.is_file() || !is_static(busybox) {
        bail!(
            "{} is missing or not static: apt-get install busybox-static",
            busybox.display()
        );
    }
    let root = work.join("initramfs");
    let _ = fs::remove_dir_all(&root);
    for dir in ["bin", "lib/nvpm", "proc", "sys", "dev", "tmp"] {
        fs::create_dir_all(root.join(dir))?;
    }
    fs::copy(busybox, root.join("bin/busybox"))?;
    fs::copy(
        workspace::path("kmod/tests/vm/guest/init"),
        root.join("init"),
    )?;
    fs::copy(
        workspace::path("kmod/tests/vm/guest/scenarios.sh"),
        root.join("lib/nvpm/scenarios.sh"),
    )?;
    for (from, name) in [
        (&d.nv_ko, "nv_p2p_double.ko"),
        (&d.core_ko, "mofed_peer_core.ko"),
        (&d.scen_ko, "nvpm_scenarios.ko"),
        (&module.to_path_buf(), "nv_peer_mem.ko"),
        (&no_persistent.to_path_buf(), "nv_peer_mem_no_persistent.ko"),
    ] {
        fs::copy(from, root.join("lib/nvpm").join(name))
            .with_context(|| format!("copying {}", from.display()))?;
    }
    // MLNX_OFED's configure decisions for the core (scenarios.sh reads them).
    fs::copy(
        d.src_dir.join("peer_core/mofed_config.h"),
        root.join("lib/nvpm/mofed_config.h"),
    )
    .context("copying the core's mofed_config.h")?;
    // NCCL's own test (nccl_probe.rs), or why the guest cannot run it.
    match &d.nccl {
        Ok(probe) => {
            fs::copy(&probe.binary, root.join("lib/nvpm/nccl_gdr_files"))?;
            fs::copy(&probe.list, root.join("lib/nvpm/nccl_gdr_files.list"))?;
        }
        Err(why) => fs::write(root.join("lib/nvpm/nccl_gdr_files.skip"), why)?,
    }
    for (from, to) in extra {
        let to = root.join(to);
        fs::create_dir_all(to.parent().expect("a path in the image"))?;
        fs::copy(from, &to).with_context(|| format!("copying {}", from.display()))?;
    }
    run(
        Command::new("chmod")
            .args(["0755"])
            .arg(root.join("init"))
            .args(d.nccl.is_ok().then(|| root.join("lib/nvpm/nccl_gdr_files")))
            .arg(root.join("bin/busybox")),
        "chmod",
    )?;
    let cpio = work.join("initramfs.cpio");
    pack_cpio(&root, &cpio)?;
    Ok(cpio)
}

/// A guest without a dynamic loader runs only a static busybox: `file -L`
/// says "statically linked", or `ldd` says "not a dynamic executable".
fn is_static(program: &Path) -> bool {
    let says = |tool: &str, args: &[&str], needle: &str| {
        Command::new(tool)
            .args(args)
            .arg(program)
            .output()
            .map(|out| {
                let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
                text.push_str(&String::from_utf8_lossy(&out.stderr));
                text.contains(needle)
            })
            .unwrap_or(false)
    };
    says("file", &["-L"], "static") || says("ldd", &[], "not a dynamic")
}

/// `cpio -o -H newc -R 0:0` over every path below @root, "." first, in byte
/// order (what `find . | LC_ALL=C sort` gives), so the archive's order does
/// not depend on the filesystem's.
fn pack_cpio(root: &Path, cpio: &Path) -> Result<()> {
    let mut names = vec![".".to_string()];
    list_below(root, ".", &mut names)?;
    names.sort();
    let what = "packing the initramfs with cpio (apt-get install cpio)";
    let out = fs::File::create(cpio).with_context(|| format!("creating {}", cpio.display()))?;
    let mut child = Command::new("cpio")
        .args(["--quiet", "-o", "-H", "newc", "-R", "0:0"])
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(out)
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("{what}: cannot run cpio"))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let mut list = names.join("\n");
    list.push('\n');
    stdin.write_all(list.as_bytes())?;
    drop(stdin);
    let result = child.wait_with_output()?;
    if !result.status.success() {
        bail!(
            "{what} failed ({}):\n{}",
            result.status,
            String::from_utf8_lossy(&result.stderr).trim()
        );
    }
    Ok(())
}

/// Appends "@prefix/<name>" for every entry below @dir, recursively.
fn list_below(dir: &Path, prefix: &str, names: &mut Vec<String>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let name = format!("{prefix}/{}", entry.file_name().to_string_lossy());
        if entry.file_type()?.is_dir() {
            list_below(&entry.path(), &name, names)?;
        }
        names.push(name);
    }
    Ok(())
}
