//! `cargo xtask bench-kmod`: what the module build costs, beside the C
//! module it replaces (Mellanox's nv_peer_memory 1.3 `nv_peer_mem.c`, from
//! the fixtures, built against the same kernel headers and the compat ABI
//! descriptions in kmod/compat). For each: a cold build, a build for a
//! second kernel (ours with the core cache warm, as DKMS after a kernel
//! update), a no-op rebuild, the peak RSS, the module's text/data and its
//! size with debug info stripped, and the ratio ours/C, against the targets
//! of issue 14. Figures only: a target not met is printed, never an error;
//! the run fails only if a build fails. Both are built in copies under a
//! temporary directory, so the checkout's own build is left alone.

use crate::bench_kmod_report::{Figures, Step, core_compile_seconds, report};
use crate::tool;
use crate::workspace;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Mellanox's C module, the baseline (a fixture, never copied into the repo).
const C_TARBALL: &str = "nv_peer_memory-1.3.tar.gz";
const C_SOURCE: &str = "nv_peer_memory-1.3/nv_peer_mem.c";
/// The parts of kmod/ a build reads.
const KMOD_PARTS: [&str; 8] = [
    "Makefile",
    "Kbuild",
    "Cargo.toml",
    "glue",
    "rt",
    "scripts",
    "src",
    "compat",
];

#[derive(clap::Args)]
pub struct BenchKmodArgs {
    /// Kernel release to build for; its build tree must be installed
    /// (/lib/modules/<kver>/build). Default: the running kernel if its
    /// headers are installed, else the newest installed headers.
    #[arg(long, value_name = "KVER")]
    kver: Option<String>,
    /// The "second kernel" (a kernel update DKMS rebuilds for). Default:
    /// another installed kernel whose Rust flag set equals --kver's (so it
    /// shares the cached core), else --kver itself in a fresh build tree.
    #[arg(long, value_name = "KVER")]
    second_kver: Option<String>,
    /// Parallel make jobs (default: the number of CPUs).
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
}

pub fn bench_kmod_command(args: &BenchKmodArgs) -> Result<()> {
    let kver = match &args.kver {
        Some(kver) => kver.clone(),
        None => default_kver()?,
    };
    for k in std::iter::once(&kver).chain(args.second_kver.iter()) {
        if !kdir(k).join("Makefile").exists() {
            return Err(crate::error::BadInput::error(format!(
                "no kernel build tree for {k} in /lib/modules/{k}/build; install linux-headers-{k} or pass --kver/--second-kver"
            )));
        }
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let work = tempdir()?;
    let result = bench(args, &kver, jobs, &work);
    std::fs::remove_dir_all(&work).ok();
    result
}

fn bench(args: &BenchKmodArgs, kver: &str, jobs: usize, work: &Path) -> Result<()> {
    let kmod = copy_kmod(work)?;
    let second = match &args.second_kver {
        Some(k) => k.clone(),
        None => same_flags_kernel(&kmod, kver)?.unwrap_or_else(|| kver.to_string()),
    };
    let second_note = if second == kver {
        "same kernel after make clean: a fresh build tree, as DKMS has for a kernel update with the same flag set".to_string()
    } else {
        format!("{second}, same Rust flag set as {kver}")
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("bench-kmod: kernel {kver}, second kernel: {second_note}");
    println!(
        "bench-kmod: make -j{jobs}, load average at start: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );

    let c = match crate::fixtures::file(C_TARBALL) {
        Ok(tarball) => {
            eprintln!("bench-kmod: C module (nv_peer_memory 1.3)...");
            Some(bench_c(&tarball, &kmod, kver, &second, jobs, work)?)
        }
        Err(why) => {
            println!("bench-kmod: C column skipped: {why}");
            None
        }
    };
    eprintln!("bench-kmod: ours, cold (compiles core into an empty cache)...");
    let ours = bench_ours(&kmod, kver, &second, jobs, work)?;

    let core_seconds = ours
        .cold
        .output
        .lines()
        .find_map(core_compile_seconds)
        .context("the cold build printed no `RUSTC   core (N s, ...)` line")?;
    report(&ours, c.as_ref(), core_seconds);
    Ok(())
}

fn bench_c(
    tarball: &Path,
    kmod: &Path,
    kver: &str,
    second: &str,
    jobs: usize,
    work: &Path,
) -> Result<Figures> {
    let dir = work.join("c");
    std::fs::create_dir_all(&dir)?;
    let source = crate::fixtures::read_member(tarball, C_SOURCE)?;
    std::fs::write(dir.join("nv_peer_mem.c"), source)?;
    // The same ABI descriptions our build uses without MLNX_OFED/NVIDIA.
    std::fs::write(
        dir.join("Kbuild"),
        format!(
            "obj-m := nv_peer_mem.o\nccflags-y := -I{} -I{}\n",
            kmod.join("compat/mofed").display(),
            kmod.join("compat/nvidia").display()
        ),
    )?;
    let make = |k: &str, target: &str| -> Result<Step> {
        let mut cmd = Command::new("make");
        cmd.arg("-C")
            .arg(kdir(k))
            .arg(format!("M={}", dir.display()))
            .arg(format!("-j{jobs}"))
            .arg(target)
            // The prerequisites' Module.symvers are absent, as in ours.
            .arg("KBUILD_MODPOST_WARN=1");
        timed(cmd, &format!("C module: make {target} for {k}"))
    };
    measure(make, kver, second, &dir.join("nv_peer_mem.ko"), work)
}

fn bench_ours(kmod: &Path, kver: &str, second: &str, jobs: usize, work: &Path) -> Result<Figures> {
    let cache = work.join("core-cache");
    let make = |k: &str, target: &str| -> Result<Step> {
        let mut cmd = Command::new("make");
        cmd.arg("-C")
            .arg(kmod)
            .arg(format!("-j{jobs}"))
            .arg(target)
            .arg(format!("KVER={k}"))
            .env("NVPM_RUST_CACHE", &cache);
        timed(cmd, &format!("our module: make {target} for {k}"))
    };
    measure(make, kver, second, &kmod.join("nv_peer_mem.ko"), work)
}

/// The one build sequence both modules are measured with: a cold build for
/// `kver`, a clean build for `second` (ours reuses `kver`'s cached core
/// there), a no-op rebuild, then the sizes of the resulting `module`.
fn measure(
    make: impl Fn(&str, &str) -> Result<Step>,
    kver: &str,
    second: &str,
    module: &Path,
    work: &Path,
) -> Result<Figures> {
    make(kver, "clean")?;
    let cold = make(kver, "modules")?;
    eprintln!("bench-kmod: second kernel {second}...");
    make(kver, "clean")?;
    let second_build = make(second, "modules")?;
    let noop = make(second, "modules")?;
    let (text, data, stripped) = sizes(module, work)?;
    Ok(Figures {
        cold,
        second: second_build,
        noop,
        text,
        data,
        stripped,
    })
}

/// Copies what a module build reads into `work/kmod`, with kmod/VERSION (as
/// the packaged trees carry it), so the checkout's own build is untouched.
fn copy_kmod(work: &Path) -> Result<PathBuf> {
    let from = workspace::path("kmod");
    let to = work.join("kmod");
    std::fs::create_dir_all(&to)?;
    let mut cp = Command::new("cp");
    cp.arg("-R");
    for part in KMOD_PARTS {
        cp.arg(from.join(part));
    }
    tool::stdout(cp.arg(&to))?;
    std::fs::write(to.join("VERSION"), format!("{}\n", workspace::version()))?;
    Ok(to)
}

/// Another installed kernel whose Rust flag set (kmod/scripts/rust-flags.sh)
/// equals `kver`'s, so its build reuses `kver`'s cached core.
fn same_flags_kernel(kmod: &Path, kver: &str) -> Result<Option<String>> {
    let rustc = tool::stdout(Command::new("sh").arg(kmod.join("scripts/find-rustc.sh")))?;
    let flags = |k: &str| -> Result<String> {
        tool::stdout(
            Command::new("sh")
                .arg(kmod.join("scripts/rust-flags.sh"))
                .arg(kdir(k).join(".config"))
                .arg(rustc.trim()),
        )
    };
    let want = flags(kver)?;
    for other in installed_kernels() {
        if other != kver && flags(&other).is_ok_and(|f| f == want) {
            return Ok(Some(other));
        }
    }
    Ok(None)
}

/// Runs a command under GNU time (for the peak RSS, if it is installed),
/// timing it; fails with its output if it fails.
pub(crate) fn timed(cmd: Command, what: &str) -> Result<Step> {
    let gnu_time = Path::new("/usr/bin/time");
    let rss_file = std::env::temp_dir().join(format!("nvpm-bench-rss-{}", std::process::id()));
    let mut wrapped = if gnu_time.exists() {
        let mut w = Command::new(gnu_time);
        w.arg("-f").arg("%M").arg("-o").arg(&rss_file);
        w.arg(cmd.get_program()).args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => w.env(k, v),
                None => w.env_remove(k),
            };
        }
        w
    } else {
        cmd
    };
    let start = Instant::now();
    let out = wrapped.output().with_context(|| {
        format!(
            "{what}: running make (install make and the kernel headers: sudo bash ci/setup-host.sh)"
        )
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("{what} failed:\n{output}");
    }
    let peak_rss_kib = std::fs::read_to_string(&rss_file)
        .ok()
        .and_then(|s| s.lines().last().and_then(|l| l.trim().parse().ok()));
    std::fs::remove_file(&rss_file).ok();
    Ok(Step {
        seconds,
        peak_rss_kib,
        output,
    })
}

/// text, data (size(1)) and the file size with debug info stripped.
fn sizes(ko: &Path, work: &Path) -> Result<(u64, u64, u64)> {
    let stripped = work.join("stripped.ko");
    tool::stdout(
        Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(&stripped)
            .arg(ko),
    )?;
    let (text, data, _bss) = parse_size(&tool::stdout(Command::new("size").arg(&stripped))?)?;
    let file = std::fs::metadata(&stripped)?.len();
    std::fs::remove_file(&stripped).ok();
    Ok((text, data, file))
}

fn kdir(kver: &str) -> PathBuf {
    PathBuf::from(format!("/lib/modules/{kver}/build"))
}

fn installed_kernels() -> Vec<String> {
    let mut installed: Vec<String> = std::fs::read_dir("/lib/modules")
        .map(|dir| {
            dir.flatten()
                .filter(|e| e.path().join("build/Makefile").exists())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    installed.sort_by_key(|release| version_key(release));
    installed
}

fn default_kver() -> Result<String> {
    let running = tool::stdout(Command::new("uname").arg("-r"))?
        .trim()
        .to_string();
    if kdir(&running).join("Makefile").exists() {
        return Ok(running);
    }
    installed_kernels().pop().ok_or_else(|| {
        crate::error::BadInput::error("no kernel headers installed under /lib/modules/*/build; install linux-headers-<kver> (sudo bash ci/setup-host.sh) or pass --kver")
    })
}

/// Orders kernel releases numerically (6.12 after 6.1).
fn version_key(release: &str) -> Vec<u64> {
    release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect()
}

fn parse_size(output: &str) -> Result<(u64, u64, u64)> {
    let line = output
        .lines()
        .nth(1)
        .context("unexpected output of size(1)")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .take(3)
        .map(|f| f.parse())
        .collect::<Result<_, _>>()?;
    match fields[..] {
        [text, data, bss] => Ok((text, data, bss)),
        _ => bail!("unexpected output of size(1): {line}"),
    }
}

fn tempdir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("nvpm-bench-kmod-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases_order_numerically() {
        let mut v = vec!["6.12.95+deb12-amd64", "6.1.0-56-amd64", "6.1.0-9-amd64"];
        v.sort_by_key(|release| version_key(release));
        assert_eq!(
            v,
            ["6.1.0-9-amd64", "6.1.0-56-amd64", "6.12.95+deb12-amd64"]
        );
    }

    #[test]
    fn size_output_parses() {
        let out = "   text\t   data\t    bss\t    dec\t    hex\tfilename\n  10808\t   1228\t     33\t  12069\t   2f25\tx.ko\n";
        assert_eq!(parse_size(out).unwrap(), (10808, 1228, 33));
        assert!(parse_size("garbage").is_err());
    }
}
