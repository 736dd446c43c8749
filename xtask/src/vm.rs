//! `cargo xtask test-vm`: proves nv_peer_mem.ko in booted Debian kernels.
//!
//! Per kernel: fetch the kernel image (`apt-get download`, cached), build the
//! two test doubles (kmod/tests/vm: NVIDIA P2P and PeerDirect core), the
//! scenario driver and nv_peer_mem.ko against the installed headers, pack
//! them with busybox into an initramfs, boot QEMU (TCG, 2 vCPUs), stream
//! the console, and print one line per scenario and `N passed, M failed`.
//! The run fails on any failed or missing scenario, on any kernel splat in
//! the console, and on a guest that does not finish within a bound.

use crate::fixtures;
use crate::workspace;
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Scenarios the guest's init script reports, in order. One that never
/// prints a line (guest crashed, hung, init broke) counts as failed.
const SCENARIOS: &[&str] = &[
    "load",
    "register",
    "acquire",
    "lifecycle",
    "several",
    "dma_map_refusals",
    "invalidate",
    "free_during_get",
    "nc",
    "inject",
    "race",
    "bench",
    "no_slab_growth",
    "rmmod_busy",
    "unregister",
    "load_cycles",
    "persistent_off",
    "no_persistent_api",
    "legacy",
    "invalidate_legacy",
    "peerdirect_invalid",
    "register_rollback",
    "final",
];

/// Console text that fails a run wherever it appears: kernel warnings,
/// oopses, module loader complaints, refcount/lockdep splats, SLUB debug
/// reports (slub_debug=FZP makes double frees and use-after-free writes
/// print "BUG <cache> (...): Object already free / Poison overwritten").
const SPLATS: &[&str] = &[
    "WARNING:",
    "BUG:",
    "kernel BUG",
    "Oops",
    "Unknown symbol",
    "disagrees about version",
    "refcount_t:",
    "lockdep",
    "possible circular locking",
    "possible recursive locking",
    "Kernel panic",
    "general protection fault",
    "Call Trace:",
    "INFO: task",
    "Object already free",
    "Poison overwritten",
    "Redzone overwritten",
    "Freepointer corrupt",
];

const BOOT_BOUND: Duration = Duration::from_secs(120);
const QUIET_NOTICE: Duration = Duration::from_secs(30);

#[derive(clap::Args)]
pub struct TestVmArgs {
    /// Kernel to test: 6.1 (bookworm), 6.12 (bookworm-backports) or all
    #[arg(long, default_value = "all", value_parser = ["6.1", "6.12", "all"])]
    kernel: String,
    /// Seconds one guest may run before it is killed and failed
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Test prebuilt modules, DIR/<kernel release>/nv_peer_mem.ko, instead of
    /// building kmod/ (e.g. a deliberately broken build)
    #[arg(long, value_name = "DIR")]
    prebuilt: Option<PathBuf>,
}

struct Outcome {
    passed: usize,
    failed: usize,
}

/// The subcommand: fails (exit 1) when any kernel had a failure.
pub fn test_vm_command(args: &TestVmArgs) -> Result<()> {
    if test_vm(args)? {
        Ok(())
    } else {
        bail!(
            "test-vm: some scenarios failed (lines marked FAIL above; console logs under target/test-vm/<kernel>/console.log)"
        )
    }
}

fn test_vm(args: &TestVmArgs) -> Result<bool> {
    let started = Instant::now();
    let (bookworm, backports) = kernels()?;
    let kvers: Vec<String> = match args.kernel.as_str() {
        "6.1" => vec![bookworm],
        "6.12" => vec![backports],
        _ => vec![bookworm, backports],
    };
    // Every scenario runs against MLNX_OFED's own PeerDirect core: without
    // that fixture there is nothing honest to run, so all are skipped.
    let mofed = match fixtures::file(fixtures::MOFED_TARBALL) {
        Ok(path) => path,
        Err(why) => {
            println!("==> test-vm: skipped: {why}");
            println!(
                "0 passed, 0 failed, {} skipped",
                SCENARIOS.len() * kvers.len()
            );
            return Ok(true);
        }
    };
    let cache = cache_dir()?;
    let nv_src = nvidia_src()?;
    let mut all_ok = true;
    let mut summary = Vec::new();
    for kver in &kvers {
        let t0 = Instant::now();
        println!("==> [{kver}] preparing");
        let outcome = match prepare_and_boot(kver, &cache, &nv_src, &mofed, args) {
            Ok(o) => o,
            Err(e) => {
                // A setup failure fails every scenario of this kernel.
                println!("  FAIL setup: {e:#}");
                Outcome {
                    passed: 0,
                    failed: SCENARIOS.len(),
                }
            }
        };
        let line = format!("{} passed, {} failed", outcome.passed, outcome.failed);
        println!("==> [{kver}] {line} ({:.0} s)", t0.elapsed().as_secs_f64());
        println!("{line}");
        all_ok &= outcome.failed == 0;
        summary.push(format!("{kver}: {line}"));
    }
    println!(
        "==> test-vm: {} in {:.0} s",
        summary.join("; "),
        started.elapsed().as_secs_f64()
    );
    Ok(all_ok)
}

/// KVER_BOOKWORM and KVER_BACKPORTS, resolved by ci/kernels.sh from the
/// linux-headers-amd64 metapackages (one place decides which kernels CI uses).
fn kernels() -> Result<(String, String)> {
    let out = Command::new("bash")
        .arg("-c")
        .arg(". ci/kernels.sh && echo \"$KVER_BOOKWORM $KVER_BACKPORTS\"")
        .current_dir(workspace::root())
        .output()
        .context("running bash ci/kernels.sh")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace();
    match (out.status.success(), it.next(), it.next()) {
        (true, Some(a), Some(b)) => Ok((a.to_string(), b.to_string())),
        _ => bail!(
            "ci/kernels.sh could not name the kernels ({}); run: sudo bash ci/setup-host.sh",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    }
}

/// Kernel images are cached with the NVIDIA sources (NVPM_CACHE, default
/// /var/cache/nv-peer-mem-ci), falling back to target/ when not writable.
fn cache_dir() -> Result<PathBuf> {
    let preferred = std::env::var_os("NVPM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/nv-peer-mem-ci"));
    let kernels = preferred.join("kernels");
    if fs::create_dir_all(&kernels).is_ok() && is_writable(&kernels) {
        return Ok(kernels);
    }
    let fallback = workspace::path("target/test-vm/cache");
    fs::create_dir_all(&fallback).with_context(|| format!("creating {}", fallback.display()))?;
    Ok(fallback)
}

fn is_writable(dir: &Path) -> bool {
    let probe = dir.join(".write-probe");
    let ok = fs::write(&probe, b"").is_ok();
    let _ = fs::remove_file(probe);
    ok
}

/// The NVIDIA 535 driver source tree (ci/fetch-nvidia-src.sh downloads and
/// unpacks it once); its nvidia/nv-p2p.h advertises the persistent API.
fn nvidia_src() -> Result<PathBuf> {
    let out = Command::new("bash")
        .arg("ci/fetch-nvidia-src.sh")
        .current_dir(workspace::root())
        .stderr(Stdio::inherit())
        .output()
        .context("running bash ci/fetch-nvidia-src.sh")?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || !dir.join("nvidia/nv-p2p.h").is_file() {
        bail!(
            "ci/fetch-nvidia-src.sh did not provide nvidia/nv-p2p.h; run: sudo bash ci/setup-host.sh (needs bookworm contrib)"
        );
    }
    Ok(dir)
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("{what}: cannot run {cmd:?}"))?;
    if !out.status.success() {
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!("{what} failed ({}):\n{}", out.status, tail.join("\n"));
    }
    Ok(())
}

fn prepare_and_boot(
    kver: &str,
    cache: &Path,
    nv_src: &Path,
    mofed: &Path,
    args: &TestVmArgs,
) -> Result<Outcome> {
    let kdir = PathBuf::from(format!("/usr/src/linux-headers-{kver}"));
    if !kdir.join("Makefile").is_file() {
        bail!(
            "no headers at {}: install linux-headers-{kver} (sudo bash ci/setup-host.sh)",
            kdir.display()
        );
    }
    let work = workspace::path(&format!("target/test-vm/{kver}"));
    fs::create_dir_all(&work)?;

    let t = Instant::now();
    let vmlinuz = kernel_image(kver, cache)?;
    println!(
        "  [{kver}] kernel image {} ({:.1} s)",
        vmlinuz.display(),
        t.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let mods = build_doubles(kver, &kdir, &work, nv_src, mofed)?;
    println!(
        "  [{kver}] test doubles and scenario driver built ({:.1} s)",
        t.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let module = match &args.prebuilt {
        Some(dir) => {
            let ko = dir.join(kver).join("nv_peer_mem.ko");
            if !ko.is_file() {
                bail!("--prebuilt: {} does not exist", ko.display());
            }
            println!("  [{kver}] using prebuilt {}", ko.display());
            ko
        }
        None => {
            println!(
                "  [{kver}] building nv_peer_mem.ko against the doubles (first build per kernel compiles core: ~1 min)"
            );
            let ko = build_module(kver, &kdir, &work, &mods, Variant::Doubles)?;
            println!(
                "  [{kver}] nv_peer_mem.ko built ({:.1} s)",
                t.elapsed().as_secs_f64()
            );
            ko
        }
    };

    // Built from kmod/ even with --prebuilt: it checks the build-time
    // detection of the persistent API, not the module under test.
    let no_persistent = build_module(kver, &kdir, &work, &mods, Variant::NoPersistentApi)?;
    let initrd = make_initramfs(&work, &mods, &module, &no_persistent)?;
    boot(
        kver,
        &vmlinuz,
        &initrd,
        &work,
        Duration::from_secs(args.timeout),
    )
}

/// vmlinuz of linux-image-<kver>-unsigned at exactly the installed headers'
/// version (modules built against the headers must match the image's
/// symbol CRCs), downloaded once and extracted once.
fn kernel_image(kver: &str, cache: &Path) -> Result<PathBuf> {
    let out = cache.join(kver).join(format!("vmlinuz-{kver}"));
    let version = dpkg_version(&format!("linux-headers-{kver}"))?;
    let stamp = cache.join(kver).join("version");
    if out.is_file() && fs::read_to_string(&stamp).ok().as_deref() == Some(version.as_str()) {
        return Ok(out);
    }
    let pkg = format!("linux-image-{kver}-unsigned");
    let deb = find_deb(cache, &pkg, &version)?;
    let deb = match deb {
        Some(d) => d,
        None => {
            println!(
                "  [{kver}] downloading {pkg}={version} (once; cached in {})",
                cache.display()
            );
            // apt's _apt sandbox user may not write to the cache: download as us.
            run(
                Command::new("apt-get")
                    .args(["download", "-q", "-o", "APT::Sandbox::User=root"])
                    .arg(format!("{pkg}={version}"))
                    .current_dir(cache),
                &format!(
                    "apt-get download {pkg}={version} (run `sudo apt-get update`; the 6.12 kernel needs bookworm-backports from ci/apt-sources.sh)"
                ),
            )?;
            find_deb(cache, &pkg, &version)?.with_context(|| {
                format!(
                    "apt-get download left no {pkg} {version} .deb in {}",
                    cache.display()
                )
            })?
        }
    };
    let dir = cache.join(kver);
    let tmp = dir.join("extract.tmp");
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    // Only the image: the package's 100+ MB of modules are not needed.
    run(
        Command::new("sh").arg("-c").arg(format!(
            "dpkg-deb --fsys-tarfile '{}' | tar -x -C '{}' ./boot/vmlinuz-{kver}",
            deb.display(),
            tmp.display()
        )),
        &format!("extracting vmlinuz from {}", deb.display()),
    )?;
    fs::rename(tmp.join(format!("boot/vmlinuz-{kver}")), &out)?;
    fs::remove_dir_all(&tmp)?;
    fs::write(&stamp, &version)?;
    Ok(out)
}

fn dpkg_version(pkg: &str) -> Result<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", pkg])
        .output()?;
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || v.is_empty() {
        bail!("{pkg} is not installed: run sudo bash ci/setup-host.sh");
    }
    Ok(v)
}

fn find_deb(cache: &Path, pkg: &str, version: &str) -> Result<Option<PathBuf>> {
    for entry in fs::read_dir(cache)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if !name.starts_with(&format!("{pkg}_")) || !name.ends_with(".deb") {
            continue;
        }
        let out = Command::new("dpkg-deb")
            .args(["-f"])
            .arg(&path)
            .arg("Version")
            .output()?;
        if String::from_utf8_lossy(&out.stdout).trim() == version {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

/// Copies @from to @to unless identical, so make sees unchanged mtimes and
/// a warm rerun rebuilds nothing.
fn sync_file(from: &Path, to: &Path) -> Result<()> {
    let data = fs::read(from).with_context(|| format!("reading {}", from.display()))?;
    if fs::read(to).ok().as_deref() != Some(&data[..]) {
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(to, &data).with_context(|| format!("writing {}", to.display()))?;
    }
    Ok(())
}

/// Source files below @from (recursively), skipping build products and
/// the directories in @skip.
fn sync_tree(from: &Path, to: &Path, skip: &[&str]) -> Result<()> {
    for entry in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if skip.contains(&name.as_str()) || name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            sync_tree(&path, &to.join(&name), &[])?;
        } else if ![".o", ".ko", ".mod", ".mod.c", ".symvers", ".order", ".cmd"]
            .iter()
            .any(|ext| name.ends_with(ext))
        {
            sync_file(&path, &to.join(&name))?;
        }
    }
    Ok(())
}

struct Doubles {
    nv_ko: PathBuf,
    core_ko: PathBuf,
    scen_ko: PathBuf,
    /// dirs laid out as nv_peer_mem's Makefile expects for OFA_KERNEL= and
    /// NV_SRC=: the header each double was built with and its Module.symvers
    ofa_dir: PathBuf,
    nv_dir: PathBuf,
    /// The same for a driver whose nv-p2p.h does not advertise the
    /// persistent API: the project's own description of the P2P ABI, with
    /// the double's Module.symvers (same prototypes, so the same CRCs).
    nv_dir_no_persistent: PathBuf,
}

fn kbuild(kdir: &Path, dir: &Path, vars: &[(&str, String)], what: &str) -> Result<()> {
    let mut cmd = Command::new("make");
    cmd.arg("-C")
        .arg(kdir)
        .arg(format!("M={}", dir.display()))
        .arg("modules");
    for (k, v) in vars {
        cmd.arg(format!("{k}={v}"));
    }
    run(&mut cmd, what)
}

fn build_doubles(
    kver: &str,
    kdir: &Path,
    work: &Path,
    nv_src: &Path,
    mofed: &Path,
) -> Result<Doubles> {
    let src = work.join("doubles");
    sync_tree(&workspace::path("kmod/tests/vm"), &src, &["guest"])?;
    let nv_inc = nv_src.join("nvidia");
    // MLNX_OFED's rdma/peer_mem.h is the header every module here is built
    // against; its peer_mem.c and ib_peer_mem.h go beside the HCA driver.
    let ofa_dir = work.join("ofa_kernel");
    let ofa_inc = ofa_dir.join("include");
    fixtures::unpack_mofed_core(mofed, &src.join("peer_core"), &ofa_inc)?;
    kbuild(
        kdir,
        &src.join("nv_p2p_double"),
        &[("NVPM_NV_INC", nv_inc.display().to_string())],
        &format!("building nv_p2p_double.ko for {kver}"),
    )?;
    kbuild(
        kdir,
        &src.join("peer_core"),
        &[("NVPM_OFA_INC", ofa_inc.display().to_string())],
        &format!("building mofed_peer_core.ko (MLNX_OFED's peer_mem.c) for {kver}"),
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
    Ok(Doubles {
        nv_ko: src.join("nv_p2p_double/nv_p2p_double.ko"),
        core_ko: src.join("peer_core/mofed_peer_core.ko"),
        scen_ko: src.join("scenarios/nvpm_scenarios.ko"),
        ofa_dir,
        nv_dir,
        nv_dir_no_persistent,
    })
}

/// Which NVIDIA header a module build sees.
#[derive(Clone, Copy)]
enum Variant {
    /// The double's, advertising the persistent API: both clients.
    Doubles,
    /// One without the persistent API: nv_mem only (scenario
    /// no_persistent_api).
    NoPersistentApi,
}

/// Builds nv_peer_mem.ko with kmod/'s own Makefile, in a per-kernel copy of
/// kmod/ (so kernels do not clean each other's objects, a warm rerun is
/// incremental, and a build in the developer's kmod/ is left alone).
fn build_module(
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
    // The Makefile reads the version from ../Cargo.toml or, in packaged
    // trees, from kmod/VERSION: this copy is such a tree.
    sync_bytes(
        &copy.join("VERSION"),
        format!("{}\n", workspace::VERSION).as_bytes(),
    )?;
    let mut cmd = Command::new("make");
    cmd.arg("-C")
        .arg(&copy)
        .arg(format!("KVER={kver}"))
        .arg(format!("KDIR={}", kdir.display()))
        .arg(format!("OFA_KERNEL={}", d.ofa_dir.display()))
        .arg(format!("NV_SRC={}", nv_dir.display()));
    run(
        &mut cmd,
        &format!("make -C kmod KVER={kver} (nv_peer_mem.ko against the test doubles)"),
    )?;
    let ko = copy.join("nv_peer_mem.ko");
    if !ko.is_file() {
        bail!("make succeeded but left no {}", ko.display());
    }
    Ok(ko)
}

fn sync_bytes(to: &Path, data: &[u8]) -> Result<()> {
    if fs::read(to).ok().as_deref() != Some(data) {
        fs::write(to, data)?;
    }
    Ok(())
}

/// busybox-static, the guest's init script and the modules (the doubles,
/// the scenario driver, nv_peer_mem.ko and its no-persistent-API build), as an
/// uncompressed newc cpio (the kernel unpacks it before init runs).
fn make_initramfs(
    work: &Path,
    d: &Doubles,
    module: &Path,
    no_persistent: &Path,
) -> Result<PathBuf> {
    let busybox = Path::new("/bin/busybox");
    let is_static = Command::new("sh")
        .arg("-c")
        .arg("file -L /bin/busybox 2>/dev/null | grep -q static || ldd /bin/busybox 2>&1 | grep -q 'not a dynamic'")
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !busybox.is_file() || !is_static {
        bail!("/bin/busybox is missing or not static: apt-get install busybox-static");
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
    run(
        Command::new("chmod")
            .args(["0755"])
            .arg(root.join("init"))
            .arg(root.join("bin/busybox")),
        "chmod",
    )?;
    let cpio = work.join("initramfs.cpio");
    run(
        Command::new("sh").arg("-c").arg(format!(
            "cd '{}' && find . | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0 > '{}'",
            root.display(),
            cpio.display()
        )),
        "packing the initramfs with cpio (apt-get install cpio)",
    )?;
    Ok(cpio)
}

enum Event {
    Line(String),
    Eof,
}

fn boot(
    kver: &str,
    vmlinuz: &Path,
    initrd: &Path,
    work: &Path,
    bound: Duration,
) -> Result<Outcome> {
    let log_path = work.join("console.log");
    let mut log = fs::File::create(&log_path)?;
    // slub_debug=FZP: sanity checks, red zones and poisoning, so a double
    // free or a write after free is reported (and fails the run) instead of
    // passing silently. oops=panic + panic=-1 + -no-reboot: a crash ends
    // QEMU at once. loglevel=5: warnings and worse reach the console as
    // they happen; init dumps the full dmesg at the end.
    let append = "console=ttyS0 panic=-1 oops=panic loglevel=5 slub_debug=FZP";
    println!(
        "  [{kver}] booting qemu-system-x86_64 (TCG, 2 vCPUs); console log: {}",
        log_path.display()
    );
    let mut child = Command::new("qemu-system-x86_64")
        .args([
            "-accel", "tcg", "-cpu", "max", "-m", "1024", "-smp", "2", "-kernel",
        ])
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", append, "-nographic", "-no-reboot"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting qemu-system-x86_64 (apt-get install qemu-system-x86)")?;
    let (tx, rx) = mpsc::channel();
    for stream in [
        Box::new(child.stdout.take().expect("piped")) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().expect("piped")),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stream);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf)
                            .trim_end_matches(['\r', '\n'])
                            .to_string();
                        if tx.send(Event::Line(line)).is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = tx.send(Event::Eof);
        });
    }
    drop(tx);

    let start = Instant::now();
    let mut last_output = Instant::now();
    let mut booted = false;
    let mut ended = false;
    let mut eofs = 0;
    let mut results: BTreeMap<String, (bool, String)> = BTreeMap::new();
    let mut splats: Vec<String> = Vec::new();
    let mut last_scenario = String::from("boot");
    let mut guest_summary = None;
    let mut failure: Option<String> = None;
    while eofs < 2 {
        let limit = if booted { bound } else { BOOT_BOUND };
        if start.elapsed() > limit {
            failure = Some(if booted {
                format!(
                    "guest did not finish within {} s (stuck after \"{last_scenario}\")",
                    bound.as_secs()
                )
            } else {
                format!(
                    "kernel did not boot to init within {} s",
                    BOOT_BOUND.as_secs()
                )
            });
            break;
        }
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(Event::Line(line)) => {
                writeln!(log, "{line}")?;
                last_output = Instant::now();
                if line.contains("NVPMTEST-BOOTED") {
                    booted = true;
                    println!(
                        "  [{kver}] booted in {:.1} s: {}",
                        start.elapsed().as_secs_f64(),
                        line.split("NVPMTEST-BOOTED").nth(1).unwrap_or("").trim()
                    );
                } else if let Some(rest) = line.split("NVPMTEST-SUMMARY ").nth(1) {
                    guest_summary = Some(rest.trim().to_string());
                } else if line.contains("NVPMTEST-END") {
                    ended = true;
                } else if let Some((pass, name, detail)) = parse_result(&line) {
                    println!("  {} {name}: {detail}", if pass { "PASS" } else { "FAIL" });
                    last_scenario = name.clone();
                    results.insert(name, (pass, detail));
                }
                if !line.contains("NVPMTEST ") && SPLATS.iter().any(|s| line.contains(s)) {
                    if splats.is_empty() {
                        // Scenario lines print when a scenario ends: a splat
                        // belongs to the one after the last reported.
                        let during = SCENARIOS
                            .iter()
                            .position(|s| *s == last_scenario)
                            .and_then(|i| SCENARIOS.get(i + 1))
                            .unwrap_or(&"boot");
                        println!("  [{kver}] kernel splat during \"{during}\": {line}");
                        splats.push(format!("(during \"{during}\") {line}"));
                        continue;
                    }
                    splats.push(line);
                }
            }
            Ok(Event::Eof) => eofs += 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if last_output.elapsed() > QUIET_NOTICE {
                    println!(
                        "  [{kver}] ... still running after \"{last_scenario}\" ({:.0} s)",
                        start.elapsed().as_secs_f64()
                    );
                    last_output = Instant::now();
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // QEMU exits by itself after poweroff -f; give it a moment, then kill.
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait()?.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    if child.try_wait()?.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    if failure.is_none() && !ended {
        failure = Some(format!(
            "guest stopped before finishing (after \"{last_scenario}\"): crash or panic, see {}",
            log_path.display()
        ));
    }

    let mut passed = 0;
    let mut failed = 0;
    for name in SCENARIOS {
        match results.get(*name) {
            Some((true, _)) => passed += 1,
            Some((false, _)) => failed += 1,
            None => {
                failed += 1;
                println!(
                    "  FAIL {name}: did not run{}",
                    failure
                        .as_ref()
                        .map(|f| format!(" ({f})"))
                        .unwrap_or_default()
                );
            }
        }
    }
    for (name, _) in results
        .iter()
        .filter(|(n, _)| !SCENARIOS.contains(&n.as_str()))
    {
        println!("  note: the guest reported an unlisted scenario \"{name}\"");
    }
    // The console as a whole is one more check.
    if splats.is_empty() && failure.is_none() {
        passed += 1;
        println!(
            "  PASS console: no WARNING/BUG/Oops/Unknown symbol/version/refcount/lockdep/slub report"
        );
    } else {
        failed += 1;
        if let Some(f) = &failure {
            println!("  FAIL console: {f}");
        }
        for s in splats.iter().take(5) {
            println!("  FAIL console: {s}");
        }
        if splats.len() > 5 {
            println!(
                "  FAIL console: ... {} more splat lines in {}",
                splats.len() - 5,
                log_path.display()
            );
        }
    }
    if let Some(s) = guest_summary {
        println!("  [{kver}] guest's own count: {s}");
    }
    Ok(Outcome { passed, failed })
}

/// "NVPMTEST PASS name: detail" (possibly after other console text).
fn parse_result(line: &str) -> Option<(bool, String, String)> {
    let rest = &line[line.find("NVPMTEST ")? + "NVPMTEST ".len()..];
    let (verdict, rest) = rest.split_once(' ')?;
    let pass = match verdict {
        "PASS" => true,
        "FAIL" => false,
        _ => return None,
    };
    let (name, detail) = rest.split_once(": ").unwrap_or((rest, ""));
    Some((pass, name.trim().to_string(), detail.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::parse_result;

    #[test]
    fn parses_scenario_lines() {
        assert_eq!(
            parse_result("NVPMTEST PASS acquire: mine/not mine"),
            Some((true, "acquire".into(), "mine/not mine".into()))
        );
        assert_eq!(
            parse_result("[   3.1] x NVPMTEST FAIL race: iteration 3: boom"),
            Some((false, "race".into(), "iteration 3: boom".into()))
        );
        assert_eq!(parse_result("NVPMTEST-END"), None);
        assert_eq!(parse_result("nothing"), None);
    }
}
