//! Wall time of a source-package writer (`bench-srpm`, `bench-deb`): runs
//! this very xtask binary (already built, so compile time is not measured)
//! once to warm the page cache and git's index, then N times, and prints
//! min/median/mean/max. Figures only: targets are read, never asserted.

use anyhow::{Context, Result, bail};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Options shared by `bench-srpm` and `bench-deb`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Timed runs (after one untimed warm-up run).
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub runs: u32,
    /// Passed on to the build command as --distro.
    #[arg(long, value_name = "ID")]
    pub distro: Option<String>,
}

/// Times `xtask <subcommand> --out <tmp> [--distro ID]` and prints the
/// figures with `target` (the goal and what the original took).
pub fn bench_writer(subcommand: &str, args: &BenchArgs, target: &str) -> Result<()> {
    let exe = std::env::current_exe().context("finding the running xtask binary")?;
    let out = std::env::temp_dir().join(format!("xtask-{subcommand}-bench-{}", std::process::id()));
    std::fs::create_dir_all(&out).with_context(|| {
        format!(
            "creating {}; set TMPDIR to a writable directory",
            out.display()
        )
    })?;
    let run = || -> Result<Duration> {
        let mut command = Command::new(&exe);
        command
            .arg(subcommand)
            .arg("--out")
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(distro) = &args.distro {
            command.args(["--distro", distro]);
        }
        let start = Instant::now();
        let output = command
            .output()
            .with_context(|| format!("running {subcommand}"))?;
        let elapsed = start.elapsed();
        if !output.status.success() {
            bail!(
                "{subcommand} failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(elapsed)
    };
    let result = (|| -> Result<Vec<Duration>> {
        run()?;
        (0..args.runs).map(|_| run()).collect()
    })();
    let _ = std::fs::remove_dir_all(&out);
    let mut times = result?;
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mean = times.iter().map(|d| ms(*d)).sum::<f64>() / times.len() as f64;
    println!(
        "{subcommand} wall time over {} runs of {}:",
        times.len(),
        exe.display()
    );
    println!(
        "  min {:.1} ms  median {:.1} ms  mean {:.1} ms  max {:.1} ms",
        ms(times[0]),
        ms(times[times.len() / 2]),
        mean,
        ms(times[times.len() - 1])
    );
    println!("  ({target})");
    Ok(())
}
