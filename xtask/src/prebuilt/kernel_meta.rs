//! Which version of the flavour metapackage (`linux-image-amd64`,
//! `linux-image-generic`) installs a given kernel: the version the module
//! metapackage depends on with `=`, read from apt's package lists
//! (`apt-cache show`) on the build host, where the kernel's suite is
//! configured.

use crate::dkms_package::deb_control::paragraphs;
use anyhow::{Context, Result, ensure};
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

/// Debian's version order (`dpkg --compare-versions a gt b`).
pub fn dpkg_greater(a: &str, b: &str) -> bool {
    Command::new("dpkg")
        .args(["--compare-versions", a, "gt", b])
        .status()
        .is_ok_and(|s| s.success())
}

/// The version of `linux-image-<flavour>` for a kernel, or an error that
/// says how to make apt know it.
pub fn find(meta: &str, release: &str, images: &[String]) -> Result<String> {
    let text = apt_cache_show(meta)?;
    let version = version_for(&text, images)?;
    ensure!(
        version.is_some(),
        "--kernel {release}: apt knows no {meta} that installs {}; add the suite that carries it to this build host's sources and run apt-get update, or pass --no-metapackage",
        images.join(" or ")
    );
    Ok(version.unwrap_or_default())
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
}
