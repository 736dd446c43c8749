//! `cargo xtask bench-kmod`: prints what the module build costs: a cold
//! build (core compiled from source, empty cache), a no-op rebuild, and the
//! size of nv_peer_mem.ko with debug info stripped. Figures only: targets
//! (cold <= 45 s on 2 cores, module <= 64 KiB) are read by people, never
//! asserted by tests.

use crate::workspace;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

#[derive(clap::Args)]
pub struct BenchKmodArgs {
    /// Kernel release to build for; its build tree must be installed
    /// (/lib/modules/<kver>/build). Default: the running kernel if its
    /// headers are installed, else the newest installed headers.
    #[arg(long, value_name = "KVER")]
    kver: Option<String>,
    /// Parallel make jobs (default: the number of CPUs).
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
}

pub fn bench_kmod_command(args: &BenchKmodArgs) -> Result<()> {
    let kver = match &args.kver {
        Some(kver) => kver.clone(),
        None => default_kver()?,
    };
    if !Path::new(&format!("/lib/modules/{kver}/build/Makefile")).exists() {
        return Err(crate::error::BadInput::error(format!(
            "no kernel build tree for {kver} in /lib/modules/{kver}/build; install linux-headers-{kver} or pass --kver"
        )));
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let kmod = workspace::path("kmod");
    let cache = tempdir()?;
    let make = |target: &[&str]| -> Result<f64> {
        let start = Instant::now();
        let out = Command::new("make")
            .arg("-C")
            .arg(&kmod)
            .arg(format!("-j{jobs}"))
            .args(target)
            .arg(format!("KVER={kver}"))
            .env("NVPM_RUST_CACHE", &cache)
            .output()
            .context(
                "running make (install make and the kernel headers: sudo bash ci/setup-host.sh)",
            )?;
        let seconds = start.elapsed().as_secs_f64();
        if !out.status.success() {
            bail!(
                "make {} failed:\n{}{}",
                target.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(seconds)
    };
    eprintln!("bench-kmod: cold build for {kver} with -j{jobs} (compiles core, ~30-60 s)...");
    make(&["clean"])?;
    let cold = make(&[])?;
    eprintln!("bench-kmod: no-op rebuild...");
    let noop = make(&[])?;
    let stripped = cache.join("nv_peer_mem.stripped.ko");
    run(Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(&stripped)
        .arg(kmod.join("nv_peer_mem.ko")))?;
    let size = run(Command::new("size").arg(&stripped))?;
    let (text, data, bss) = parse_size(&size)?;
    let file = std::fs::metadata(&stripped)?.len();
    println!("kernel:              {kver}");
    println!("cold build:          {cold:.1} s   (target <= 45 s on 2 cores)");
    println!("no-op rebuild:       {noop:.1} s");
    println!("nv_peer_mem.ko text: {text} B");
    println!("nv_peer_mem.ko data: {data} B (bss {bss} B)");
    println!(
        "nv_peer_mem.ko total (text+data+bss): {} B",
        text + data + bss
    );
    println!(
        "nv_peer_mem.ko file, debug info stripped: {file} B = {:.1} KiB   (target <= 64 KiB)",
        file as f64 / 1024.0
    );
    make(&["clean"])?;
    std::fs::remove_dir_all(&cache).ok();
    Ok(())
}

fn default_kver() -> Result<String> {
    let running = run(Command::new("uname").arg("-r"))?.trim().to_string();
    if Path::new(&format!("/lib/modules/{running}/build/Makefile")).exists() {
        return Ok(running);
    }
    let mut installed: Vec<String> = std::fs::read_dir("/lib/modules")
        .map(|dir| {
            dir.flatten()
                .filter(|e| e.path().join("build/Makefile").exists())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    installed.sort_by_key(|release| version_key(release));
    installed.pop().ok_or_else(|| {
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

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn tempdir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("nvpm-bench-kmod-{}", std::process::id()));
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
