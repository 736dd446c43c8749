//! `cargo xtask test-vm`: proves nv_peer_mem.ko in booted Debian kernels.
//!
//! Per kernel: fetch the kernel image (`apt-get download`, cached), build the
//! two test doubles (kmod/tests/vm: NVIDIA P2P and PeerDirect core), the
//! scenario driver and nv_peer_mem.ko against the installed headers, pack
//! them with busybox into an initramfs, boot QEMU (TCG, 2 vCPUs), stream
//! the console, and print one line per scenario and `N passed, M failed`.
//! The run fails on any failed or missing scenario, on any kernel splat in
//! the console, and on a guest that does not finish within a bound.

mod arch;
mod bench;
mod boot;
mod boot_image;
mod builds;
mod command;
mod console;
mod initramfs;
mod kernel_image;
mod mofed_config;
mod mutants;
mod nccl_probe;
mod nvidia;
mod oracle;
mod oracle_builds;
mod oracle_console;
mod oracle_report;
mod readiness;
mod standins;
mod sync;

use crate::{fixtures, workspace};
use anyhow::{Context, Result, bail};
use arch::{Arch, GuestKernel};
use builds::{HARNESS_NAMES, Variant, build_doubles, build_module};
use console::{Outcome, SCENARIOS};
use kernel_image::{cache_dir, kernel_image};
use nvidia::Generation;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use boot_image::{BootImageArgs, boot_image_command};
pub use standins::{VmStandinsArgs, vm_standins_command};

#[derive(clap::Args)]
pub struct TestVmArgs {
    /// Kernel to test: 6.1 (bookworm), 6.12 (bookworm-backports) or all
    #[arg(long, default_value = "all", value_parser = ["6.1", "6.12", "all"])]
    kernel: String,
    /// Guest architecture: x86_64, or arm64 (Debian's arm64 kernel of the
    /// same ABI, cross-built and booted in qemu-system-aarch64 with TCG;
    /// the scenarios' loops run a tenth of their iterations there, see
    /// `Arch::iter_divisor`; no oracle phase)
    #[arg(long, default_value = "x86_64", value_parser = ["x86_64", "arm64"])]
    arch: String,
    /// Seconds one guest may run before it is killed and failed
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Test prebuilt modules, DIR/<kernel release>/nv_peer_mem.ko, instead of
    /// building kmod/ (e.g. a deliberately broken build)
    #[arg(long, value_name = "DIR")]
    prebuilt: Option<PathBuf>,
    /// The mutation check instead of the normal run: the unmutated module
    /// and each mutant of kmod/tests/vm/mutants, on one kernel (--kernel;
    /// `all` means 6.1); fails unless the first passes and every mutant
    /// fails some scenario
    #[arg(long, conflicts_with = "prebuilt")]
    mutants: bool,
    /// Which NVIDIA driver the double stands in for, per boot: 535 (page
    /// table 0x00010002, Debian's 535/550/555), 580 (0x00020000 with
    /// `flags`, the 580/595 fixtures), or per-kernel: 535 on bookworm's
    /// kernel, 580 on the backports kernel. nv_peer_mem.ko is built
    /// against the same driver's nv-p2p.h.
    #[arg(long, default_value = "per-kernel", value_parser = ["per-kernel", "535", "580"])]
    nvidia: String,
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
        "6.1" => vec![bookworm.clone()],
        "6.12" => vec![backports],
        _ => vec![bookworm.clone(), backports],
    };
    let arch = Arch::parse(&args.arch);
    if args.mutants && arch != Arch::X86_64 {
        return Err(crate::error::BadInput::error(
            "--mutants runs on x86_64 guests only (KVM-less TCG time on arm64 goes to the scenarios); drop --arch arm64",
        ));
    }
    arch::set_build_arch(arch);
    // Every scenario runs against MLNX_OFED's own PeerDirect core: without
    // that fixture there is nothing honest to run, so all are skipped; under
    // CI=true that fails (ci/checks.sh, skip).
    let mofed = match fixtures::file(fixtures::MOFED_TARBALL) {
        Ok(path) => path,
        Err(why) => {
            let n = SCENARIOS.len() * kvers.len();
            let ci = std::env::var("CI").as_deref() == Ok("true");
            match ci {
                true => println!("FAIL: not run, and CI=true: test-vm: {why}\n0 passed, 1 failed"),
                false => println!("==> test-vm: skipped: {why}\n0 passed, 0 failed, {n} skipped"),
            }
            return Ok(!ci);
        }
    };
    let cache = cache_dir()?;
    let nv_src = nvidia_src()?;
    let nv_580 = nvidia::fixture_tree(nvidia::NV580_RELEASE);
    let sources = oracle::Sources {
        nv_535: &nv_src,
        nv_580: &nv_580,
    };
    if args.mutants {
        let generation = Generation::for_boot(&args.nvidia, &kvers[0], &bookworm);
        let tree = driver_tree(generation, &sources)?;
        return test_mutants(&kvers[0], &cache, &tree, &mofed, args);
    }
    let mut all_ok = true;
    let mut summary = Vec::new();
    for amd64_kver in &kvers {
        let t0 = Instant::now();
        // arm64: the kernel of the same ABI, fetched before anything else.
        let guest = arch.guest_kernel(amd64_kver);
        let kver = match &guest {
            Ok(g) => g.kver.clone(),
            Err(_) => format!("{amd64_kver} ({arch:?})"),
        };
        let generation = Generation::for_boot(&args.nvidia, amd64_kver, &bookworm);
        println!(
            "==> [{kver}] preparing (NVIDIA double: {}-style driver)",
            generation.id()
        );
        let prepared =
            guest.and_then(|g| prepare_and_boot(&g, &cache, generation, &sources, &mofed, args));
        let outcome = match prepared {
            Ok(o) => o,
            Err(e) => {
                // A setup failure fails every scenario of this kernel.
                println!("  FAIL setup: {e:#}");
                Outcome::setup_failed()
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

/// The NVIDIA 535 driver source tree (ci/fetch-nvidia-src.sh downloads and
/// unpacks it once); its nvidia/nv-p2p.h advertises the persistent API.
pub(super) fn nvidia_src() -> Result<PathBuf> {
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

/// The source tree whose nv-p2p.h a boot of @generation builds the double
/// and nv_peer_mem.ko against. A missing 580 fixture fails the boot with
/// the reason (the MLNX_OFED fixture beside it is there, or nothing would
/// run at all).
fn driver_tree(generation: Generation, src: &oracle::Sources) -> Result<PathBuf> {
    match generation {
        Generation::Nv535 => Ok(src.nv_535.to_path_buf()),
        Generation::Nv580 => match src.nv_580 {
            Ok(tree) => Ok(tree.dir.clone()),
            Err(why) => bail!("the 580-style NVIDIA double needs the 580 fixture: {why}"),
        },
    }
}

/// The guest kernel's work directory under target/test-vm, made once its
/// headers are known to be there (both the normal run and --mutants build
/// against them).
fn work_dir(guest: &GuestKernel) -> Result<PathBuf> {
    let kver = &guest.kver;
    if !guest.kdir.join("Makefile").is_file() {
        bail!(
            "no headers at {}: install linux-headers-{kver} (sudo bash ci/setup-host.sh)",
            guest.kdir.display()
        );
    }
    let work = workspace::path(&format!("target/test-vm/{kver}"));
    fs::create_dir_all(&work)?;
    Ok(work)
}

fn prepare_and_boot(
    guest: &GuestKernel,
    cache: &Path,
    generation: Generation,
    sources: &oracle::Sources,
    mofed: &Path,
    args: &TestVmArgs,
) -> Result<Outcome> {
    let nv_src = &driver_tree(generation, sources)?;
    let kver = guest.kver.as_str();
    let kdir = guest.kdir.clone();
    let work = work_dir(guest)?;

    let t = Instant::now();
    let vmlinuz = match &guest.vmlinuz {
        Some(image) => image.clone(),
        None => kernel_image(kver, cache)?,
    };
    println!(
        "  [{kver}] kernel image {} ({:.1} s)",
        vmlinuz.display(),
        t.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let mods = build_doubles(kver, &kdir, &work, nv_src, mofed, &HARNESS_NAMES)?;
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
    // The other clients and the benchmark (oracle.rs): information only,
    // so nothing here fails the run.
    // On arm64 there is no oracle phase: the other clients are x86 builds
    // of NVIDIA's and Mellanox's code, and TCG time goes to our scenarios.
    let plan = if guest.arch == Arch::X86_64 {
        let t = Instant::now();
        let plan = oracle::prepare(kver, &kdir, &work, &mods, generation, sources);
        println!(
            "  [{kver}] oracle clients and benchmark built ({:.1} s)",
            t.elapsed().as_secs_f64()
        );
        Some(plan)
    } else {
        println!(
            "  [{kver}] no oracle phase on {:?} (x86_64 only)",
            guest.arch
        );
        None
    };
    let mut extra = match &plan {
        Some(plan) => plan.files(&work)?,
        None => Vec::new(),
    };
    // The readiness check over this kernel's real sysfs (readiness.rs).
    let mut expected: Vec<String> = SCENARIOS.iter().map(|s| s.to_string()).collect();
    if guest.arch == Arch::X86_64 {
        extra.extend(readiness::files(readiness::static_build()?));
        expected.extend(readiness::SCENARIOS.iter().map(|s| s.to_string()));
    }
    let initrd = initramfs::make_initramfs(
        &work,
        &guest.busybox,
        &mods,
        &module,
        &no_persistent,
        &extra,
    )?;
    let outcome = boot::boot(
        kver,
        guest.arch,
        &vmlinuz,
        &initrd,
        &work,
        Duration::from_secs(args.timeout),
        expected,
    )?;
    // --mutants reuses a clean pass of the same inputs as its baseline.
    mutants::note_baseline(&work, &mods, &module, &no_persistent, outcome.failed == 0)?;
    if let Some(plan) = &plan {
        oracle_report::report(kver, plan, &outcome.ours, &outcome.oracle);
        // Information like the oracle; only its console check counts.
        if let Some(bench) = bench::run(kver, plan, &vmlinuz, &initrd, &work, args.timeout)? {
            let mut outcome = outcome;
            outcome.passed += bench.passed;
            outcome.failed += bench.failed;
            return Ok(outcome);
        }
    }
    Ok(outcome)
}

/// `--mutants` on @kver (mutants.rs): the same builds as the normal run
/// (so its caches serve both), then the baseline and every mutant booted
/// without the oracle phase.
fn test_mutants(
    kver: &str,
    cache: &Path,
    nv_src: &Path,
    mofed: &Path,
    args: &TestVmArgs,
) -> Result<bool> {
    let started = Instant::now();
    println!("==> [{kver}] mutation check: preparing");
    let guest = Arch::X86_64.guest_kernel(kver)?;
    let kdir = guest.kdir.clone();
    let work = work_dir(&guest)?;
    let vmlinuz = kernel_image(kver, cache)?;
    let mods = build_doubles(kver, &kdir, &work, nv_src, mofed, &HARNESS_NAMES)?;
    let module = build_module(kver, &kdir, &work, &mods, Variant::Doubles)?;
    let no_persistent = build_module(kver, &kdir, &work, &mods, Variant::NoPersistentApi)?;
    let ok = mutants::run(&mutants::Setup {
        kver,
        kdir: &kdir,
        vmlinuz: &vmlinuz,
        busybox: &guest.busybox,
        work: &work,
        mods: &mods,
        module: &module,
        no_persistent: &no_persistent,
        timeout: Duration::from_secs(args.timeout),
    })?;
    println!(
        "==> test-vm --mutants: {} in {:.0} s",
        if ok {
            "baseline passed, every mutant killed"
        } else {
            "FAILED (see the table above)"
        },
        started.elapsed().as_secs_f64()
    );
    Ok(ok)
}
