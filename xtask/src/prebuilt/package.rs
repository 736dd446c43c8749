//! The binary packages of build-modules, from the templates in
//! prebuilt/deb/: per kernel `nvidia-peer-memory-modules-<release>` (the
//! module in /lib/modules/<release>/updates/, depmod in its scripts, the
//! symbol versions it was built against in its doc directory) and per
//! kernel series the metapackage that follows `linux-image-<flavour>`:
//! `nvidia-peer-memory-modules-<flavour>` for the suite's own kernels,
//! `nvidia-peer-memory-modules-<flavour>-backports` for its backports
//! kernels (docs/fleet.md, "Naming and dependencies").

use crate::dkms_package::deb_archive::{DebFile, DebPackage, installed_size_kib, write_deb};
use crate::dkms_package::deb_control::paragraphs;
use crate::render::{RenderedFile, render_file};
use crate::workspace;
use anyhow::{Context, Result, ensure};
use flate2::{Compression, GzBuilder};
use std::io::Write;

/// The templates' directory, relative to the workspace root.
pub const TEMPLATES: &str = "prebuilt/deb";

/// The per-kernel package's name.
pub fn module_package(release: &str) -> String {
    format!("nvidia-peer-memory-modules-{release}")
}

/// The kernel series a kernel metapackage version belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Series {
    /// The suite's own kernels (bookworm's 6.1).
    Stable,
    /// Its backports suite's (bookworm-backports' 6.12): Debian marks a
    /// backport's version `~bpo<release>+<n>` (`6.12.95-1~bpo12+1`, what
    /// `apt-cache show linux-image-amd64` gives for bookworm-backports),
    /// so that it sorts before the same version in the next release.
    Backports,
}

impl Series {
    /// The series of the kernel that @kernel_meta_version of
    /// `linux-image-<flavour>` installs.
    pub fn of(kernel_meta_version: &str) -> Series {
        if kernel_meta_version.contains("~bpo") {
            Series::Backports
        } else {
            Series::Stable
        }
    }
}

/// The metapackage's name for a kernel metapackage's track (what follows
/// `linux-image-`: `amd64`, `cloud-amd64`, Ubuntu's `generic-hwe-24.04`)
/// and series. One per series: the two series share
/// `linux-image-<flavour>`, and one metapackage following both would be
/// uninstallable on a node that follows the suite's kernels once the
/// backports kernel's is published (its newest version would need the
/// backports `linux-image-<flavour>`). Ubuntu names its kernel tracks the
/// same way, by a suffix on the flavour (`linux-image-generic-hwe-24.04`),
/// and the track is kept in the name.
pub fn meta_package(track: &str, series: Series) -> String {
    match series {
        Series::Stable => format!("nvidia-peer-memory-modules-{track}"),
        Series::Backports => format!("nvidia-peer-memory-modules-{track}-backports"),
    }
}

/// The metapackage's version: the kernel metapackage's version it follows,
/// then our upstream version and release, so that it rises with either
/// (`6.1.192-2+1.4.0.1`; an epoch of the kernel's stays in front). The
/// suite needs no mark of its own: the kernel's version has one. Short,
/// because lintian warns about file names over 80 characters.
pub fn meta_version(kernel_meta_version: &str, upstream: &str, release: u32) -> String {
    format!("{kernel_meta_version}+{upstream}.{release}")
}

/// What goes into one kernel's packages.
pub struct KernelPackages<'a> {
    pub context: &'a tera::Context,
    pub release: &'a str,
    pub ko: &'a [u8],
    pub imports: &'a [String],
    /// (copyright, changelog) rendered from debian/.
    pub debian: &'a [RenderedFile],
    pub mtime: u64,
    pub with_meta: bool,
}

/// (file name, bytes) of the per-kernel package and, with `with_meta`, the
/// metapackage.
pub fn debs(parts: &KernelPackages) -> Result<Vec<(String, Vec<u8>)>> {
    let dir = workspace::path(TEMPLATES);
    let control = render_file(&dir.join("control.tera"), parts.context)?;
    let paragraphs = paragraphs(&control)?;
    ensure!(
        paragraphs.len() == 1 + usize::from(parts.with_meta),
        "{TEMPLATES}/control.tera gave {} paragraphs; it must give the module package and, when asked, the metapackage",
        paragraphs.len()
    );
    let script = |name: &str| -> Result<(String, String)> {
        Ok((
            name.to_owned(),
            render_file(&dir.join(format!("{name}.tera")), parts.context)?,
        ))
    };
    let scripts = vec![script("postinst")?, script("postrm")?];
    let debian = |name: &str| {
        parts
            .debian
            .iter()
            .find(|f| f.path == format!("debian/{name}"))
            .map(|f| f.contents.clone())
            .with_context(|| format!("debian/{name} is missing; restore it from git"))
    };
    let copyright = debian("copyright")?;
    let changelog = gzip_n(&debian("changelog")?)?;
    let docs = |package: &str| {
        vec![
            DebFile {
                path: format!("usr/share/doc/{package}/copyright"),
                mode: 0o644,
                contents: copyright.as_bytes().to_vec(),
            },
            DebFile {
                path: format!("usr/share/doc/{package}/changelog.Debian.gz"),
                mode: 0o644,
                contents: changelog.clone(),
            },
        ]
    };
    let mut out = Vec::new();
    for (index, fields) in paragraphs.into_iter().enumerate() {
        let name = field(&fields, "Package")?;
        let mut files = docs(&name);
        if index == 1 {
            files.push(DebFile {
                path: format!("usr/share/lintian/overrides/{name}"),
                mode: 0o644,
                contents: meta_overrides(&name).into_bytes(),
            });
        }
        let mut package_scripts = Vec::new();
        if index == 0 {
            files.push(DebFile {
                path: format!("lib/modules/{}/updates/nv_peer_mem.ko", parts.release),
                mode: 0o644,
                contents: parts.ko.to_vec(),
            });
            files.push(DebFile {
                path: format!("usr/share/doc/{name}/symbol-versions"),
                mode: 0o644,
                contents: symbol_versions(parts.release, parts.imports).into_bytes(),
            });
            package_scripts = scripts.clone();
        }
        let mut control = fields.clone();
        let size = installed_size_kib(&files, &package_scripts);
        let at = control
            .iter()
            .position(|(k, _)| k == "Maintainer")
            .map_or(control.len(), |i| i + 1);
        control.insert(at, ("Installed-Size".to_owned(), size.to_string()));
        let version = field(&fields, "Version")?;
        let arch = field(&fields, "Architecture")?;
        let bytes = write_deb(&DebPackage {
            control,
            scripts: package_scripts,
            files,
            mtime: parts.mtime,
        })?;
        let file_version = version.split_once(':').map_or(version.as_str(), |(_, v)| v);
        out.push((format!("{name}_{file_version}_{arch}.deb"), bytes));
    }
    Ok(out)
}

fn field(fields: &[(String, String)], name: &str) -> Result<String> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .with_context(|| format!("{TEMPLATES}/control.tera: a paragraph has no {name}"))
}

/// The doc file listing the symbol versions the module was built against.
fn symbol_versions(release: &str, imports: &[String]) -> String {
    let mut text = format!(
        "# nv_peer_mem.ko for Linux {release}: the symbols it imports from MLNX_OFED and the\n# NVIDIA driver, with the CRC it was built against (the kernel refuses the module\n# when the loaded provider exports another).\n# crc\tsymbol\texporting module\tread from\n"
    );
    for line in imports {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// The metapackage's lintian overrides: its version is the kernel
/// metapackage's with ours appended, which puts more dots in the revision
/// than lintian's heuristic expects (Lintian::Check::Fields::Version allows
/// two); the order it gives is the point (see meta_version). Name and
/// version together make the backports series' file name longer than the
/// 80 characters lintian warns above.
fn meta_overrides(package: &str) -> String {
    format!(
        "# The version is linux-image-<flavour>'s with ours appended, so it rises with either.\n{package}: debian-revision-not-well-formed\n# The name says flavour and series, the version the kernel's and ours: over 80 characters for a backports kernel.\n{package}: package-has-long-file-name\n"
    )
}

/// gzip without name or time, as dh_compress (`gzip -9n`).
fn gzip_n(text: &str) -> Result<Vec<u8>> {
    let mut gz = GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), Compression::best());
    gz.write_all(text.as_bytes())?;
    Ok(gz.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_versions() {
        assert_eq!(
            module_package("6.12.95+deb12-amd64"),
            "nvidia-peer-memory-modules-6.12.95+deb12-amd64"
        );
        assert_eq!(
            meta_package("cloud-amd64", Series::Stable),
            "nvidia-peer-memory-modules-cloud-amd64"
        );
        assert_eq!(
            meta_package("amd64", Series::Backports),
            "nvidia-peer-memory-modules-amd64-backports"
        );
        assert_eq!(Series::of("6.12.95-1~bpo12+1"), Series::Backports);
        assert_eq!(Series::of("6.1.192-2"), Series::Stable);
        // An epoch or a security update's mark is not a backport.
        assert_eq!(Series::of("1:6.1.192-2+deb12u1"), Series::Stable);
        assert_eq!(meta_version("6.1.192-2", "1.4.0", 1), "6.1.192-2+1.4.0.1");
    }
}
