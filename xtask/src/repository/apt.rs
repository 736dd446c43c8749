//! The apt repository: `pool/<suite>/<component>/<letter>/<source>/` for the
//! packages, `dists/<suite>/` for the indexes, written by apt-ftparchive
//! (apt-utils), the tool apt's own project maintains, and signed by gpg
//! into InRelease and Release.gpg. Every file is rewritten through a new
//! inode (write and rename): the staged copy shares the old ones with the
//! served repository.

use super::gpg::{self, Signature};
use super::replace_file;
use crate::error::BadInput;
use crate::files_below::files_below;
use crate::tool::stdout as tool;
use anyhow::{Context, Result, bail};
use flate2::{Compression, GzBuilder};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::Command;

/// A package to publish, read with dpkg-deb.
pub struct Deb {
    pub package: String,
    pub source: String,
    pub version: String,
    pub arch: String,
}

/// Reads @path's control fields; a file dpkg-deb cannot read is bad input.
pub fn read(path: &Path) -> Result<Deb> {
    let out = Command::new("dpkg-deb")
        .args([
            "--show",
            "--showformat",
            "${Package}\\t${source:Package}\\t${Version}\\t${Architecture}",
        ])
        .arg(path)
        .output()
        .context("running dpkg-deb (install dpkg)")?;
    if !out.status.success() {
        bail!(BadInput::error(format!(
            "{}: not a Debian package ({}); pass .deb files built by build-modules or dpkg-buildpackage",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = text.trim_end().split('\t').collect();
    let [package, source, version, arch] = fields[..] else {
        bail!("dpkg-deb --show gave {text:?} for {}", path.display());
    };
    Ok(Deb {
        package: package.to_owned(),
        source: if source.is_empty() { package } else { source }.to_owned(),
        version: version.to_owned(),
        arch: arch.to_owned(),
    })
}

/// Where @deb goes in the pool: Debian's layout (first letter, or `lib` and
/// the next letter, of the source package) below the suite and component.
pub fn pool_path(suite: &str, component: &str, deb: &Deb) -> String {
    let letter = if deb.source.starts_with("lib") && deb.source.len() > 3 {
        &deb.source[..4]
    } else {
        &deb.source[..1]
    };
    let version = deb
        .version
        .split_once(':')
        .map_or(deb.version.as_str(), |(_, v)| v);
    format!(
        "pool/{suite}/{component}/{letter}/{}/{}_{version}_{}.deb",
        deb.source, deb.package, deb.arch
    )
}

/// Writes the suite's Packages (per architecture) and Release into @repo,
/// signed with @key when given. @epoch dates the Release (SOURCE_DATE_EPOCH,
/// else the last commit's time).
pub fn index(
    repo: &Path,
    suite: &str,
    component: &str,
    key: Option<&str>,
    epoch: u64,
) -> Result<()> {
    let pool = format!("pool/{suite}/{component}");
    let debs = files_below(&repo.join(&pool), "deb")?;
    let mut archs: BTreeSet<String> = BTreeSet::new();
    for deb in &debs {
        let arch = read(deb)?.arch;
        if arch != "all" {
            archs.insert(arch);
        }
    }
    if archs.is_empty() {
        archs.insert(
            tool(Command::new("dpkg").arg("--print-architecture"))?
                .trim()
                .to_owned(),
        );
    }
    let dists = repo.join("dists").join(suite);
    if dists.exists() {
        std::fs::remove_dir_all(&dists)?;
    }
    for arch in &archs {
        let packages = tool(
            Command::new("apt-ftparchive")
                .current_dir(repo)
                .args(["--arch", arch, "packages", &pool]),
        )?;
        let sorted = sort_paragraphs(&packages);
        let dir = dists.join(component).join(format!("binary-{arch}"));
        std::fs::create_dir_all(&dir)?;
        replace_file(&dir.join("Packages"), sorted.as_bytes())?;
        let mut gz = GzBuilder::new()
            .mtime(0)
            .write(Vec::new(), Compression::best());
        gz.write_all(sorted.as_bytes())?;
        replace_file(&dir.join("Packages.gz"), &gz.finish()?)?;
    }
    let archs: Vec<&str> = archs.iter().map(String::as_str).collect();
    let release = tool(
        Command::new("apt-ftparchive")
            .current_dir(&dists)
            // apt-ftparchive 2.6 dates a Release with the current time
            // whatever SOURCE_DATE_EPOCH says; its Date option fixes it.
            .arg("-o")
            .arg(format!("APT::FTPArchive::Release::Date={}", crate::render::rfc2822(epoch)))
            .args(["-o", "APT::FTPArchive::Release::Origin=nv_peer_mem"])
            .args(["-o", "APT::FTPArchive::Release::Label=nv_peer_mem"])
            .arg("-o")
            .arg(format!("APT::FTPArchive::Release::Suite={suite}"))
            .arg("-o")
            .arg(format!("APT::FTPArchive::Release::Codename={suite}"))
            .arg("-o")
            .arg(format!("APT::FTPArchive::Release::Architectures={}", archs.join(" ")))
            .arg("-o")
            .arg(format!("APT::FTPArchive::Release::Components={component}"))
            .args(["-o", "APT::FTPArchive::Release::Description=GPUDirect RDMA peer memory client (nv_peer_mem)"])
            .args(["release", "."]),
    )?;
    replace_file(&dists.join("Release"), release.as_bytes())?;
    if let Some(key) = key {
        gpg::sign(
            key,
            Signature::Clear,
            &dists.join("Release"),
            &dists.join("InRelease"),
        )?;
        gpg::sign(
            key,
            Signature::Detached,
            &dists.join("Release"),
            &dists.join("Release.gpg"),
        )?;
    }
    Ok(())
}

/// apt-ftparchive lists packages in directory order; sorting the paragraphs
/// makes the index the same for the same pool.
pub fn sort_paragraphs(text: &str) -> String {
    let mut paragraphs: Vec<&str> = text
        .split("\n\n")
        .map(str::trim_end)
        .filter(|p| !p.trim().is_empty())
        .collect();
    paragraphs.sort();
    let mut out = String::new();
    for p in paragraphs {
        out.push_str(p);
        out.push_str("\n\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_paths_follow_debians_layout() {
        let deb = |package: &str, source: &str, version: &str| Deb {
            package: package.to_owned(),
            source: source.to_owned(),
            version: version.to_owned(),
            arch: "amd64".to_owned(),
        };
        assert_eq!(
            pool_path(
                "bookworm",
                "main",
                &deb(
                    "nvidia-peer-memory-modules-amd64",
                    "nvidia-peer-memory",
                    "1:6.1.192-2+1.4.0.1"
                )
            ),
            "pool/bookworm/main/n/nvidia-peer-memory/nvidia-peer-memory-modules-amd64_6.1.192-2+1.4.0.1_amd64.deb"
        );
        assert_eq!(
            pool_path("bookworm", "main", &deb("libfoo1", "libfoo", "1.0-1")),
            "pool/bookworm/main/libf/libfoo/libfoo1_1.0-1_amd64.deb"
        );
    }

    #[test]
    fn paragraphs_sort_whatever_the_directory_order() {
        let a = "Package: b\nVersion: 1\n\nPackage: a\nVersion: 2\n\n";
        let b = "Package: a\nVersion: 2\n\nPackage: b\nVersion: 1\n";
        assert_eq!(sort_paragraphs(a), sort_paragraphs(b));
        assert!(sort_paragraphs(a).starts_with("Package: a\n"));
    }
}
