//! Running the host tools test-vm needs (apt-get, dpkg-deb, make, cpio) and
//! reporting a failure with the tail of what the tool printed.

use anyhow::{Context, Result, bail};
use std::process::Command;

/// Runs @cmd to completion; on failure the error carries @what and the last
/// 30 lines of the tool's output, which is where make and apt explain.
pub fn run(cmd: &mut Command, what: &str) -> Result<()> {
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
