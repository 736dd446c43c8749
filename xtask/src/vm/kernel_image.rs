//! The kernel images test-vm boots: Debian's linux-image-<kver>-unsigned at
//! exactly the installed headers' version, fetched with `apt-get download`
//! once, its vmlinuz extracted once, both kept in a cache across runs.

use super::command::run;
use crate::workspace;
use anyhow::{Context, Result, bail};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Kernel images are cached with the NVIDIA sources (NVPM_CACHE, default
/// /var/cache/nv-peer-mem-ci), falling back to target/ when not writable.
pub fn cache_dir() -> Result<PathBuf> {
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

/// vmlinuz of linux-image-<kver>-unsigned at exactly the installed headers'
/// version (modules built against the headers must match the image's
/// symbol CRCs), downloaded once and extracted once.
pub fn kernel_image(kver: &str, cache: &Path) -> Result<PathBuf> {
    let out = cache.join(kver).join(format!("vmlinuz-{kver}"));
    let version = dpkg_version(&format!("linux-headers-{kver}"))?;
    let stamp = cache.join(kver).join("version");
    if out.is_file() && fs::read_to_string(&stamp).ok().as_deref() == Some(version.as_str()) {
        return Ok(out);
    }
    let pkg = format!("linux-image-{kver}-unsigned");
    let deb = match find_deb(cache, &pkg, &version)? {
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
    extract_vmlinuz(&deb, kver, &tmp)?;
    fs::rename(tmp.join(format!("boot/vmlinuz-{kver}")), &out)?;
    fs::remove_dir_all(&tmp)?;
    fs::write(&stamp, &version)?;
    Ok(out)
}

/// `dpkg-deb --fsys-tarfile DEB | tar -x -C INTO ./boot/vmlinuz-KVER`, as two
/// processes joined by a pipe. Only the image: the package's 100+ MB of
/// modules are not needed.
fn extract_vmlinuz(deb: &Path, kver: &str, into: &Path) -> Result<()> {
    let what = format!("extracting vmlinuz from {}", deb.display());
    let mut dpkg_deb = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("{what}: cannot run dpkg-deb"))?;
    let tar_input = dpkg_deb.stdout.take().expect("stdout is piped");
    let tar = run(
        Command::new("tar")
            .arg("-x")
            .arg("-C")
            .arg(into)
            .arg(format!("./boot/vmlinuz-{kver}"))
            .stdin(tar_input),
        &what,
    );
    let dpkg_status = dpkg_deb.wait()?;
    tar?;
    if !dpkg_status.success() {
        bail!("{what} failed: dpkg-deb --fsys-tarfile exited with {dpkg_status}");
    }
    Ok(())
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

/// A `<pkg>_*.deb` in @cache whose control file says Version: @version.
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
