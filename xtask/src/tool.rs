//! Running a tool of the build host for its output: stdout when it
//! succeeds, else an error with the command and its stderr.

use anyhow::{Context, Result, ensure};
use std::process::Command;

/// What to install where modinfo or modprobe is missing.
pub const KMOD: &str = "modinfo and modprobe come with kmod (apt install kmod)";

/// @cmd's stdout; fails with the command and its stderr when it cannot
/// run or exits non-zero.
pub fn stdout(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    ensure!(
        out.status.success(),
        "{:?} failed: {}",
        cmd,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Where @tool is in PATH, as the shell would find it.
pub fn find(tool: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
}
