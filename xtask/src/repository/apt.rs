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
    // `Source: name (version)` names the source's version too
    let source = source.split_whitespace().next().unwrap_or("");
    let deb = Deb {
        package: package.to_owned(),
        source: if source.is_empty() { package } else { source }.to_owned(),
        version: version.to_owned(),
        arch: arch.to_owned(),
    };
    deb.check(path)?;
    Ok(deb)
}

impl Deb {
    /// The control fields that become parts of a pool path, held to
    /// Debian Policy's syntax before they do (a `Source: ../../x` would
    /// otherwise write outside the repository): package and source names
    /// 5.6.1/5.6.7 (`[a-z0-9][a-z0-9+.-]+`), the version 5.6.12 (an
    /// optional numeric epoch, then `[A-Za-z0-9.+~-]` starting with a
    /// digit), the architecture a dpkg architecture name.
    fn check(&self, path: &Path) -> Result<()> {
        let name = |s: &str| {
            s.len() >= 2
                && s.bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+.-".contains(&b))
        };
        let upstream =
            self.version
                .split_once(':')
                .map_or(Some(self.version.as_str()), |(epoch, rest)| {
                    (!epoch.is_empty() && epoch.bytes().all(|b| b.is_ascii_digit())).then_some(rest)
                });
        let version = upstream.is_some_and(|v| {
            v.bytes().next().is_some_and(|b| b.is_ascii_digit())
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".+~-".contains(&b))
        });
        let arch = !self.arch.is_empty()
            && self
                .arch
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        for (field, value, ok) in [
            ("Package", &self.package, name(&self.package)),
            ("Source", &self.source, name(&self.source)),
            ("Version", &self.version, version),
            ("Architecture", &self.arch, arch),
        ] {
            if !ok {
                bail!(BadInput::error(format!(
                    "{}: its {field} field {value:?} is not valid Debian Policy syntax, and it would become part of a path in the pool; rebuild the package with a valid {field}",
                    path.display()
                )));
            }
        }
        Ok(())
    }
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

/// How a Release is dated.
pub struct Dating {
    /// Now: the publish time (the Release is never dated before the one
    /// it replaces).
    pub now: u64,
    /// Seconds the Release stays valid (`Valid-Until`); nodes refuse it
    /// after that (apt.conf(5), Acquire::Check-Valid-Until), so a stale
    /// mirror or a replayed old Release cannot hold them back for good.
    pub valid_for: u64,
    /// Seconds a by-hash copy no Release names any more stays
    /// (`--by-hash-hours`; prune_by_hash).
    pub by_hash_keep: u64,
}

/// How long the suite's published Release in @repo is valid (Valid-Until
/// less Date, in seconds), if it has one: `--refresh` keeps it unless told
/// another --valid-for (issue 58: a repository published with
/// `--valid-for 1` was refreshed to the default 30 days).
pub fn published_validity(repo: &Path, suite: &str) -> Option<u64> {
    let text = std::fs::read_to_string(repo.join("dists").join(suite).join("Release")).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(crate::render::parse_rfc2822)
    };
    let (date, until) = (field("Date: ")?, field("Valid-Until: ")?);
    until.checked_sub(date).filter(|v| *v > 0)
}

/// Writes the suite's Packages (per architecture) and Release into @repo,
/// signed with @key when given. The Release is dated now, and never before
/// the Release it replaces: apt keeps a cached Release over a fetched one
/// whose Date is earlier (apt 2.6 acquire-item.cc, VerifyVendor: "Did we
/// get a file older than what we have?", `LastDate > Date`), so a publish
/// from a host whose clock is behind would never reach the nodes. An equal
/// Date is taken, so back-to-back publishes within a second share one and
/// the Date never runs ahead of the clock (apt refuses a Release dated
/// after its own clock: "is not valid yet", beyond Acquire::Max-FutureTime,
/// 10 s; issue 58). The indexes are also
/// kept by hash (`Acquire-By-Hash`, by-hash/<algorithm>/<digest>, written
/// by apt-ftparchive's DoByHash) for this Release, the one before it and
/// any written in the last day (BY_HASH_KEEP): a node that fetched an
/// older InRelease before the swap still finds the Packages it names (no
/// "Hash Sum mismatch"), as reprepro and Debian's archive keep them.
pub fn index(
    repo: &Path,
    suite: &str,
    component: &str,
    key: Option<&str>,
    dating: &Dating,
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
    let old = std::fs::read_to_string(dists.join("Release")).unwrap_or_default();
    let old_date = old
        .lines()
        .find_map(|l| l.strip_prefix("Date: "))
        .and_then(crate::render::parse_rfc2822);
    let date = dating.now.max(old_date.unwrap_or(0));
    // Every index but the by-hash copies goes: this Release's are written
    // again, the previous one's copies stay for nodes in between.
    remove_except_by_hash(&dists)?;
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
            .arg("-o")
            .arg(format!("APT::FTPArchive::Release::Date={}", crate::render::rfc2822(date)))
            .args(["-o", "APT::FTPArchive::DoByHash=1"])
            .args(["-o", "APT::FTPArchive::Release::Acquire-By-Hash=yes"])
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
    // Valid-Until after Date, as Debian's archive orders them; written
    // here because apt-ftparchive 2.6 has no Valid-Until option and
    // computes its ValidTime from the clock, not from the Date it is given.
    let until = format!(
        "Valid-Until: {}\n",
        crate::render::rfc2822(date + dating.valid_for)
    );
    let release = match release.find("\nMD5Sum:") {
        Some(at) => format!("{}\n{until}{}", &release[..at], &release[at + 1..]),
        None => bail!("apt-ftparchive wrote a Release without checksums:\n{release}"),
    };
    replace_file(&dists.join("Release"), release.as_bytes())?;
    prune_by_hash(&dists, &[&old, &release], date, dating.by_hash_keep)?;
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

/// Removes the files below @dir that are not by-hash copies (and the
/// directories left empty).
fn remove_except_by_hash(dir: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            if entry.file_name() != "by-hash" {
                remove_except_by_hash(&path)?;
                let _ = std::fs::remove_dir(&path); // kept if by-hash is inside
            }
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// Removes the by-hash copies below @dists that none of @releases names
/// (the digests in their checksum lists) and that are older than @keep
/// seconds at @now (their files' modification time: written when their
/// index was). A node or a mirror that read an InRelease up to @keep ago
/// still finds the indexes it names, however many publishes came since
/// (issue 58: keeping only the previous Release's failed 2 of 24 updates
/// with a publish every 0.8 s). The cost is one copy of each index per
/// publish within @keep.
fn prune_by_hash(dists: &Path, releases: &[&str], now: u64, keep: u64) -> Result<()> {
    let named: BTreeSet<&str> = releases
        .iter()
        .flat_map(|r| r.lines())
        .filter(|l| l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let oldest_kept = now.saturating_sub(keep);
    fn walk(dir: &Path, named: &BTreeSet<&str>, oldest_kept: u64) -> Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if !entry.file_type()?.is_dir() {
                continue;
            }
            if entry.file_name() != "by-hash" {
                walk(&entry.path(), named, oldest_kept)?;
                continue;
            }
            // by-hash/<algorithm>/<digest>
            for algorithm in std::fs::read_dir(entry.path())? {
                for copy in std::fs::read_dir(algorithm?.path())? {
                    let copy = copy?;
                    if named.contains(copy.file_name().to_string_lossy().as_ref()) {
                        continue;
                    }
                    let written = copy
                        .metadata()?
                        .modified()?
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    if written < oldest_kept {
                        std::fs::remove_file(copy.path())?;
                    }
                }
            }
        }
        Ok(())
    }
    walk(dists, &named, oldest_kept)
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
