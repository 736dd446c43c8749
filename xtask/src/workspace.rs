//! Facts about the workspace every subcommand shares: where it is, its one
//! version, and the timestamp reproducible outputs are stamped with.
//!
//! The workspace is found when xtask runs, not when it is compiled: a
//! copied checkout (`cp -a`, no rebuild) packages and boots its own
//! sources. In order: `$XTASK_WORKSPACE` if set; else the nearest directory
//! at or above the current directory that is this project's workspace (a
//! Cargo.toml with `[workspace]` next to `xtask/` and `kmod/`); else the
//! one holding the running binary (`target/release/xtask` run from
//! elsewhere, e.g. from a CI scratch directory).

use crate::error::BadInput;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The variable that names the workspace explicitly.
pub const WORKSPACE_VAR: &str = "XTASK_WORKSPACE";

struct Workspace {
    root: PathBuf,
    version: String,
}

static WORKSPACE: OnceLock<Workspace> = OnceLock::new();

/// Finds the workspace (see the module comment) and reads its version;
/// main calls it first, so that a run outside a checkout is bad input
/// (exit 2) rather than a panic later.
pub fn locate() -> Result<()> {
    if WORKSPACE.get().is_some() {
        return Ok(());
    }
    let root = find_root().map_err(BadInput::wrap)?;
    let version = read_version(&root).map_err(BadInput::wrap)?;
    let _ = WORKSPACE.set(Workspace { root, version });
    Ok(())
}

fn get() -> &'static Workspace {
    if WORKSPACE.get().is_none() {
        // Unit tests do not run main; cargo runs them inside the checkout.
        if let Err(error) = locate() {
            panic!("{error:#}");
        }
    }
    WORKSPACE.get().expect("located above")
}

/// The workspace root (the directory holding the root Cargo.toml).
pub fn root() -> &'static Path {
    &get().root
}

/// The workspace version (`[workspace.package] version` in the root
/// Cargo.toml): the project's one version source.
pub fn version() -> &'static str {
    &get().version
}

/// A path below the workspace root.
pub fn path(relative: &str) -> PathBuf {
    root().join(relative)
}

fn find_root() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(WORKSPACE_VAR) {
        let dir = PathBuf::from(dir);
        if !is_workspace(&dir) {
            bail!(
                "{WORKSPACE_VAR}={} is not an nv_peer_mem checkout (no Cargo.toml with [workspace] beside xtask/ and kmod/); unset it or point it at one",
                dir.display()
            );
        }
        return Ok(dir);
    }
    let cwd = std::env::current_dir().context("reading the current directory")?;
    if let Some(dir) = cwd.ancestors().find(|dir| is_workspace(dir)) {
        return Ok(dir.to_owned());
    }
    let exe = std::env::current_exe().ok();
    if let Some(dir) = exe
        .as_deref()
        .and_then(|exe| exe.ancestors().find(|dir| is_workspace(dir)))
    {
        return Ok(dir.to_owned());
    }
    bail!(
        "{} is not inside an nv_peer_mem checkout; run from the checkout (or below it), or set {WORKSPACE_VAR}=<checkout>",
        cwd.display()
    )
}

/// This project's workspace: a Cargo.toml declaring `[workspace]`, with
/// xtask/ and kmod/ beside it.
fn is_workspace(dir: &Path) -> bool {
    dir.join("xtask").is_dir()
        && dir.join("kmod").is_dir()
        && std::fs::read_to_string(dir.join("Cargo.toml"))
            .is_ok_and(|text| text.lines().any(|line| line.trim() == "[workspace]"))
}

/// `version = "..."` under `[workspace.package]` of @root/Cargo.toml.
fn read_version(root: &Path) -> Result<String> {
    let manifest = root.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    version_in_manifest(&text).with_context(|| {
        format!(
            "{} has no `version = \"...\"` under [workspace.package]; restore it from git",
            manifest.display()
        )
    })
}

fn version_in_manifest(text: &str) -> Option<String> {
    let mut in_section = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_section = line == "[workspace.package]";
            continue;
        }
        let Some(value) = line.strip_prefix("version").map(str::trim_start) else {
            continue;
        };
        if let (true, Some(value)) = (in_section, value.strip_prefix('=')) {
            let value = value.trim();
            return Some(value.strip_prefix('"')?.strip_suffix('"')?.to_owned());
        }
    }
    None
}

/// Seconds since the epoch that reproducible artifacts carry as their mtime
/// and build time: `SOURCE_DATE_EPOCH` when set (reproducible-builds.org),
/// else the last commit's time, so the same commit gives the same bytes.
pub fn source_date_epoch() -> Result<u64> {
    if let Ok(value) = std::env::var("SOURCE_DATE_EPOCH") {
        return value.trim().parse().with_context(|| {
            format!("SOURCE_DATE_EPOCH={value:?} is not a number of seconds; unset it or set e.g. SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)")
        });
    }
    let out = Command::new("git")
        .args(["log", "-1", "--format=%ct"])
        .current_dir(root())
        .output()
        .context("running git to read the last commit's time (set SOURCE_DATE_EPOCH to build outside a git checkout)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.trim().parse() {
        Ok(seconds) if out.status.success() => Ok(seconds),
        _ => bail!(
            "cannot read the last commit's time from git in {}; set SOURCE_DATE_EPOCH to build outside a git checkout",
            root().display()
        ),
    }
}

/// The module's minimum rustc: `rust-version` in kmod/Cargo.toml, the one
/// place it is declared (docs/toolchains.md). The spec and the -dkms deb
/// require the distribution's Rust packages at that version or newer.
pub fn module_rust_version() -> Result<String> {
    let manifest = path("kmod/Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("reading {}; restore it from git", manifest.display()))?;
    text.lines()
        .find_map(|line| {
            let value = line
                .strip_prefix("rust-version")?
                .trim_start()
                .strip_prefix('=')?;
            Some(value.trim().trim_matches('"').to_owned())
        })
        .filter(|version| {
            !version.is_empty()
                && version
                    .split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .with_context(|| {
            format!(
                "{} declares no `rust-version = \"1.NN\"`; restore it (the module's minimum rustc)",
                manifest.display()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_comes_from_workspace_package() {
        let text = "[workspace]\nmembers = []\n\n[workspace.package]\nversion.x = 1\nedition = \"2024\"\nversion = \"1.4.0\"\n[profile.release]\nversion = \"9\"\n";
        assert_eq!(version_in_manifest(text).as_deref(), Some("1.4.0"));
        assert_eq!(version_in_manifest("[package]\nversion = \"1\"\n"), None);
        // The crate inherits the same line, so the compiled-in one agrees.
        assert_eq!(version(), env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn this_checkout_is_a_workspace_and_its_parts_are_not() {
        assert!(is_workspace(root()));
        assert!(!is_workspace(&root().join("xtask")));
        assert!(!is_workspace(&root().join("kmod")));
    }
}
