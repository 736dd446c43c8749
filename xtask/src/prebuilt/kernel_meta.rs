//! Which kernel metapackage (`linux-image-amd64`, `linux-image-generic`,
//! or an Ubuntu hardware enablement track's `linux-image-generic-hwe-24.04`)
//! installs a given kernel, and at which version: what the module
//! metapackage depends on with `=`, read from apt's package lists
//! (`apt-cache show`, `apt-cache pkgnames`) on the build host, where the
//! kernel's suite is configured. Ubuntu names its HWE tracks by a suffix
//! on the flavour (`linux-generic-hwe-24.04` depends on
//! `linux-image-generic-hwe-24.04`, packages.ubuntu.com/noble/kernel/
//! linux-generic-hwe-24.04, read 2026-11-27; docs/fleet.md).

use crate::dkms_package::deb_control::paragraphs;
use anyhow::{Context, Result, bail};
use std::process::Command;

/// The highest version of @meta (from `apt-cache show` @text) whose Depends
/// names one of @images (any relation); None if none does.
pub fn version_for(text: &str, images: &[String]) -> Result<Option<String>> {
    let mut found: Vec<String> = Vec::new();
    for paragraph in paragraphs(text)? {
        let get = |name: &str| {
            paragraph
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let (Some(version), Some(depends)) = (get("Version"), get("Depends")) else {
            continue;
        };
        let names_image = depends
            .split([',', '|'])
            .map(|item| item.split_whitespace().next().unwrap_or(""))
            .any(|name| images.iter().any(|image| image == name));
        if names_image && !found.iter().any(|v| v == version) {
            found.push(version.to_owned());
        }
    }
    let mut best: Option<String> = None;
    for version in found {
        if best.as_ref().is_none_or(|b| dpkg_greater(&version, b)) {
            best = Some(version);
        }
    }
    Ok(best)
}

/// `apt-cache show @meta`, empty when apt knows no such package.
pub fn apt_cache_show(meta: &str) -> Result<String> {
    let out = Command::new("apt-cache")
        .arg("show")
        .arg(meta)
        .output()
        .context("running apt-cache (build-modules runs on a Debian or Ubuntu build host)")?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether @a is a later version than @b in Debian's order (false where
/// dpkg cannot be run).
pub fn dpkg_greater(a: &str, b: &str) -> bool {
    crate::dpkg_version::order(a, b).is_ok_and(|o| o == std::cmp::Ordering::Greater)
}

/// `apt-cache pkgnames @prefix`: the package names apt knows that start
/// with it, sorted.
pub fn apt_cache_pkgnames(prefix: &str) -> Result<Vec<String>> {
    let out = Command::new("apt-cache")
        .arg("pkgnames")
        .arg(prefix)
        .output()
        .context("running apt-cache (build-modules runs on a Debian or Ubuntu build host)")?;
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    names.sort();
    Ok(names)
}

/// The kernel metapackage's track for a kernel of @flavour (`amd64`,
/// `generic-hwe-24.04`: what follows `linux-image-`) and the version of it
/// that installs the kernel, or an error that says how to make apt know
/// it: `linux-image-<flavour>` first, then Ubuntu's HWE tracks
/// `linux-image-<flavour>-hwe-*`.
pub fn find(flavour: &str, release: &str, images: &[String]) -> Result<(String, String)> {
    choose(
        flavour,
        release,
        images,
        &apt_cache_show,
        &apt_cache_pkgnames,
    )
}

/// find() over @show (`apt-cache show`) and @names (`apt-cache pkgnames`).
pub fn choose(
    flavour: &str,
    release: &str,
    images: &[String],
    show: &dyn Fn(&str) -> Result<String>,
    names: &dyn Fn(&str) -> Result<Vec<String>>,
) -> Result<(String, String)> {
    let hwe_prefix = format!("linux-image-{flavour}-hwe-");
    let mut tried = vec![format!("linux-image-{flavour}")];
    tried.extend(names(&hwe_prefix)?);
    for meta in &tried {
        if let Some(version) = version_for(&show(meta)?, images)? {
            let track = meta.strip_prefix("linux-image-").unwrap_or(meta).to_owned();
            return Ok((track, version));
        }
    }
    bail!(
        "--kernel {release}: apt knows no {} that installs {}; add the suite that carries it to this build host's sources and run apt-get update, or pass --no-metapackage",
        tried.join(" or "),
        images.join(" or ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metapackage_version_that_installs_the_kernel() {
        let shown = "Package: linux-image-amd64\nVersion: 6.12.95-1~bpo12+1\nDepends: linux-image-6.12.95+deb12-amd64 (= 6.12.95-1~bpo12+1)\n\nPackage: linux-image-amd64\nVersion: 6.1.192-2\nDepends: linux-image-6.1.0-56-amd64 (= 6.1.192-2)\n\nPackage: linux-image-amd64\nVersion: 6.1.176-1\nDepends: linux-image-6.1.0-50-amd64 (= 6.1.176-1)\n";
        let images = |k: &str| {
            vec![
                format!("linux-image-{k}"),
                format!("linux-image-{k}-unsigned"),
            ]
        };
        assert_eq!(
            version_for(shown, &images("6.1.0-56-amd64"))
                .unwrap()
                .as_deref(),
            Some("6.1.192-2")
        );
        assert_eq!(
            version_for(shown, &images("6.12.95+deb12-amd64"))
                .unwrap()
                .as_deref(),
            Some("6.12.95-1~bpo12+1")
        );
        assert_eq!(version_for(shown, &images("6.1.0-40-amd64")).unwrap(), None);
        // A prefix of another kernel's name is not that kernel.
        assert_eq!(version_for(shown, &images("6.1.0-5")).unwrap(), None);
    }

    #[test]
    fn an_ubuntu_hwe_kernel_follows_its_track() {
        let images = |k: &str| {
            vec![
                format!("linux-image-{k}"),
                format!("linux-image-unsigned-{k}"),
            ]
        };
        let show = |meta: &str| -> Result<String> {
            Ok(match meta {
                "linux-image-generic" => "Package: linux-image-generic\nVersion: 6.8.0-90.91\nDepends: linux-image-6.8.0-90-generic, linux-modules-extra-6.8.0-90-generic\n",
                "linux-image-generic-hwe-24.04" => "Package: linux-image-generic-hwe-24.04\nVersion: 7.0.0-28.28~24.04.1\nDepends: linux-image-7.0.0-28-generic, linux-modules-extra-7.0.0-28-generic\n",
                _ => "",
            }
            .to_owned())
        };
        let names = |prefix: &str| -> Result<Vec<String>> {
            assert_eq!(prefix, "linux-image-generic-hwe-");
            Ok(vec!["linux-image-generic-hwe-24.04".to_owned()])
        };
        assert_eq!(
            choose(
                "generic",
                "6.8.0-90-generic",
                &images("6.8.0-90-generic"),
                &show,
                &names
            )
            .unwrap(),
            ("generic".to_owned(), "6.8.0-90.91".to_owned())
        );
        assert_eq!(
            choose(
                "generic",
                "7.0.0-28-generic",
                &images("7.0.0-28-generic"),
                &show,
                &names
            )
            .unwrap(),
            (
                "generic-hwe-24.04".to_owned(),
                "7.0.0-28.28~24.04.1".to_owned()
            )
        );
        let none = choose(
            "generic",
            "7.0.0-1-generic",
            &images("7.0.0-1-generic"),
            &show,
            &names,
        )
        .unwrap_err()
        .to_string();
        assert!(
            none.contains(
                "apt knows no linux-image-generic or linux-image-generic-hwe-24.04 that installs"
            ),
            "{none}"
        );
    }
}
