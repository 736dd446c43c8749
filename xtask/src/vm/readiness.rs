//! gpudirect-rdma-check (readiness/) in test-vm's busybox guest: a static
//! x86_64 build (the guest has no C library) and
//! kmod/tests/vm/guest/readiness.sh, which runs it over the booted kernel's
//! real sysfs and procfs and reports like a scenario (docs/readiness.md).
//! arm64 guests go without: the host has no arm64 Rust standard library.

use super::command::run;
use crate::workspace;
use anyhow::Result;
use std::path::PathBuf;
use std::process::Command;

/// The guest's readiness scenarios, in the order it reports them.
pub const SCENARIOS: &[&str] = &["readiness_bare", "readiness_peer_core"];

/// Builds the check statically linked (glibc's static libc, from
/// libc6-dev) in its own target directory, so the workspace's builds keep
/// their flags; cargo makes it once per run.
pub fn static_build() -> Result<PathBuf> {
    let target = workspace::path("target/readiness-static");
    run(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
            .current_dir(workspace::root())
            .args([
                "build",
                "--quiet",
                "--locked",
                "--release",
                "-p",
                "readiness",
                "--target-dir",
            ])
            .arg(&target)
            .env("RUSTFLAGS", "-C target-feature=+crt-static"),
        "cargo build -p readiness (static)",
    )?;
    Ok(target.join("release/gpudirect-rdma-check"))
}

/// (file, path in the initramfs) of the check and its guest script.
pub fn files(binary: PathBuf) -> Vec<(PathBuf, String)> {
    vec![
        (binary, "lib/nvpm/gpudirect-rdma-check".to_owned()),
        (
            workspace::path("kmod/tests/vm/guest/readiness.sh"),
            "lib/nvpm/readiness.sh".to_owned(),
        ),
    ]
}
