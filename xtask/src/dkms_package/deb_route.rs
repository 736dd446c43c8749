//! build-dkms's `.deb`: `nvidia-peer-memory-dkms_<ver>-<rel>_all.deb` as
//! `dpkg-buildpackage` makes it from build-deb's source, derived from the
//! same rendered `debian/` files, with what debhelper adds done here:
//!
//! - dh_install: `debian/<pkg>.install` lines (`source... destination`)
//!   copy files or directories of the source tree;
//! - dh_dkms: `debian/<pkg>.dkms` (a dkms.conf, or the name of the tree's
//!   one) goes to `/usr/src/<PACKAGE_NAME>-<PACKAGE_VERSION>/dkms.conf`;
//!   its postinst/prerm snippets (dkms/debhelper/, copied from dh-dkms) are
//!   put where the package's own scripts say `#DEBHELPER#`, or make the
//!   whole script; `${misc:Depends}` gets `dkms (>= 2.1.0.0)`
//!   (`>= 3.0.3-4~` with BUILD_EXCLUSIVE_CONFIG);
//! - dh_installdeb: `debian/<pkg>.triggers` goes to the control area as
//!   `triggers` (mode 0644);
//! - dh_installdocs/changelogs/compress: `copyright`, and
//!   `changelog.Debian.gz` in `/usr/share/doc/<pkg>/`;
//! - dpkg-gencontrol: the binary paragraph of `debian/control` with the
//!   source paragraph's Section, Priority, Maintainer and Homepage,
//!   Version, Installed-Size, substitution variables expanded and
//!   duplicate dependencies merged.
//!
//! Any other `debian/<pkg>.*` file (a .links, a .maintscript) is refused
//! with a message, so a packaging change cannot make the two routes differ
//! unnoticed; ci/test-dkms.sh compares this package with the built one.

use super::deb_archive::{DebFile, DebPackage, installed_size_kib, write_deb};
use super::deb_control::control_fields;
use super::tree_files;
use crate::deb::{Deb, SOURCE_PACKAGE, debian_files, debian_upstream_version, debian_version};
use crate::distro::{Distro, Family};
use crate::pipeline::{Plan, Route, SingleArtifact, SourceTree, dkms_conf};
use crate::workspace;
use anyhow::{Context, Result, ensure};
use flate2::{Compression, GzBuilder};
use std::io::Write;
use std::path::Path;

/// The binary package this route writes.
pub const PACKAGE: &str = "nvidia-peer-memory-dkms";

/// dh_dkms's maintainer script snippets, relative to the workspace root.
const DH_DKMS_SNIPPETS: &str = "dkms/debhelper";

/// What debhelper does with each `debian/<pkg>.<kind>` file this route
/// understands; any other kind is refused.
const KNOWN_PACKAGE_FILES: [&str; 7] = [
    "install", "dkms", "preinst", "postinst", "prerm", "postrm", "triggers",
];

/// The package, ready but for the source tree's files.
pub struct DebParts {
    pub control: Vec<(String, String)>,
    pub scripts: Vec<(String, String)>,
    /// dh_install lines: (source path in the tree, destination directory).
    pub installs: Vec<(String, String)>,
    /// (install path, contents) of dkms.conf.
    pub dkms_conf: (String, String),
    pub docs: Vec<DebFile>,
}

/// The build-dkms deb route.
pub struct DkmsDeb;

impl Route for DkmsDeb {
    const COMMAND: &'static str = "build-dkms";
    const FAMILY: Family = Family::Deb;
    const FALLBACK_DISTRO: &'static str = Deb::FALLBACK_DISTRO;
    const SOURCE_NAME: &'static str = SOURCE_PACKAGE;
    type Rendered = DebParts;

    fn check_distro(distro: &Distro) -> Result<()> {
        Deb::check_distro(distro)
    }

    fn package_version(workspace_version: &str) -> Result<String> {
        debian_upstream_version(workspace_version)
    }

    fn add_context(plan: &Plan, context: &mut tera::Context) {
        Deb::add_context(plan, context);
    }

    fn render(plan: &Plan, context: &tera::Context, _tree: &mut SourceTree) -> Result<DebParts> {
        let debian = debian_files(context)?;
        let file = |name: &str| {
            let path = format!("debian/{name}");
            debian
                .iter()
                .find(|f| f.path == path)
                .map(|f| f.contents.as_str())
        };
        let prefix = format!("debian/{PACKAGE}.");
        for rendered in &debian {
            if let Some(kind) = rendered.path.strip_prefix(&prefix) {
                ensure!(
                    KNOWN_PACKAGE_FILES.contains(&kind),
                    "{}: build-dkms does not do what debhelper does with a .{kind} file; extend xtask/src/dkms_package/deb_route.rs (its comparison test in ci/test-dkms.sh shows the difference)",
                    rendered.path
                );
            }
        }

        let dkms_file = file(&format!("{PACKAGE}.dkms"))
            .with_context(|| format!("debian/{PACKAGE}.dkms is missing; restore it from git"))?;
        let conf = if dkms_file.contains("PACKAGE_NAME=") {
            dkms_file.to_owned()
        } else {
            ensure!(
                dkms_file.trim() == "dkms.conf",
                "debian/{PACKAGE}.dkms names {:?}; build-dkms takes only the tree's dkms.conf (or a dkms.conf snippet)",
                dkms_file.trim()
            );
            dkms_conf(context)?.contents
        };
        let module_name = dkms_variable(&conf, "PACKAGE_NAME")?;
        let module_version = dkms_variable(&conf, "PACKAGE_VERSION")?;
        // dh_dkms: "dkms (>= 3.0.3-4~)" when BUILD_EXCLUSIVE_CONFIG is used
        // (dkms learnt it then), else "dkms (>= 2.1.0.0)".
        let misc_depends = if conf.contains("BUILD_EXCLUSIVE_CONFIG=") {
            "dkms (>= 3.0.3-4~)"
        } else {
            "dkms (>= 2.1.0.0)"
        };

        let mut scripts = Vec::new();
        for name in ["preinst", "postinst", "prerm", "postrm"] {
            let snippet = dh_dkms_snippet(name, &module_name, &module_version)?;
            let own = file(&format!("{PACKAGE}.{name}"));
            let script = match (own, snippet) {
                // debhelper replaces the token within its line and keeps
                // the line's newline after the snippet's own
                // (debhelper_script_subst, Debian/Debhelper/Dh_Lib.pm).
                (Some(own), Some(snippet)) => own.replace("#DEBHELPER#", &snippet),
                // dh_installdeb with nothing to add empties the token's
                // line but keeps it.
                (Some(own), None) => own.replace("#DEBHELPER#", ""),
                (None, Some(snippet)) => format!("#!/bin/sh\nset -e\n{snippet}"),
                (None, None) => continue,
            };
            scripts.push((name.to_owned(), script));
        }
        // dh_installdeb copies the triggers file as it is.
        if let Some(triggers) = file(&format!("{PACKAGE}.triggers")) {
            scripts.push(("triggers".to_owned(), triggers.to_owned()));
        }

        let install_file = file(&format!("{PACKAGE}.install")).unwrap_or("");
        let mut installs = Vec::new();
        for line in install_file.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            ensure!(
                words.len() >= 2 && !line.contains(['*', '?', '[']),
                "debian/{PACKAGE}.install line {line:?}: build-dkms takes `source... destination-directory` without wildcards"
            );
            let destination = words[words.len() - 1].trim_matches('/');
            for source in &words[..words.len() - 1] {
                installs.push(((*source).to_owned(), destination.to_owned()));
            }
        }

        let control = control_fields(
            file("control").context("debian/control is missing")?,
            PACKAGE,
            &debian_version(plan),
            misc_depends,
        )?;
        let doc = format!("usr/share/doc/{PACKAGE}");
        let docs = vec![
            DebFile {
                path: format!("{doc}/copyright"),
                mode: 0o644,
                contents: file("copyright")
                    .context("debian/copyright is missing")?
                    .as_bytes()
                    .to_vec(),
            },
            DebFile {
                path: format!("{doc}/changelog.Debian.gz"),
                mode: 0o644,
                contents: gzip_n(file("changelog").context("debian/changelog is missing")?)?,
            },
        ];
        Ok(DebParts {
            control,
            scripts,
            installs,
            dkms_conf: (
                format!("usr/src/{module_name}-{module_version}/dkms.conf"),
                conf,
            ),
            docs,
        })
    }
}

impl SingleArtifact for DkmsDeb {
    fn assemble(plan: &Plan, tree_tar_gz: Vec<u8>, parts: DebParts) -> Result<Vec<u8>> {
        let tree = tree_files::read(&tree_tar_gz)?;
        let mut files = parts.docs;
        for (source, destination) in &parts.installs {
            let selected = tree_files::select(&tree, source);
            ensure!(
                !selected.is_empty(),
                "debian/{PACKAGE}.install: {source} is not in the source tree"
            );
            for (relative, file) in selected {
                files.push(DebFile {
                    path: format!("{destination}/{relative}"),
                    mode: file.mode,
                    contents: file.contents.clone(),
                });
            }
        }
        files.push(DebFile {
            path: parts.dkms_conf.0,
            mode: 0o644,
            contents: parts.dkms_conf.1.into_bytes(),
        });
        let mut control = parts.control;
        let at = control
            .iter()
            .position(|(name, _)| name == "Maintainer")
            .map_or(control.len(), |i| i + 1);
        control.insert(
            at,
            (
                "Installed-Size".to_owned(),
                installed_size_kib(&files, &parts.scripts).to_string(),
            ),
        );
        write_deb(&DebPackage {
            control,
            scripts: parts.scripts,
            files,
            mtime: plan.source_date_epoch,
        })
    }

    fn artifact_name(plan: &Plan) -> String {
        // The suite's version, as dpkg-buildpackage names the deb.
        format!("{PACKAGE}_{}_all.deb", debian_version(plan))
    }

    fn report(plan: &Plan, artifact: &Path) -> String {
        format!(
            "Built: {path}\n\nTo install on {name} (apt pulls in dkms and the toolchain):\n    apt install {path}\n",
            path = artifact.display(),
            name = plan.distro.name,
        )
    }
}

/// `NAME="value"` (or unquoted) from a dkms.conf, as dh_dkms reads it.
fn dkms_variable(conf: &str, name: &str) -> Result<String> {
    conf.lines()
        .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix('='))
        .map(|value| value.trim().trim_matches(['"', '\'']).to_owned())
        .filter(|value| !value.is_empty())
        .with_context(|| {
            format!(
                "dkms.conf has no {name}=; fix {}",
                crate::pipeline::DKMS_CONF_TEMPLATE
            )
        })
}

/// dh_dkms's snippet for maintainer script @name, if it has one, between
/// debhelper's markers, with the module's name and version filled in.
fn dh_dkms_snippet(name: &str, module: &str, version: &str) -> Result<Option<String>> {
    let path = workspace::path(DH_DKMS_SNIPPETS).join(format!("{name}-dkms"));
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {}; restore it from git", path.display()))?;
    let text = text
        .replace("#MODULE_NAME#", module)
        .replace("#MODULE_VERSION#", version);
    Ok(Some(format!(
        "# Automatically added by cargo xtask build-dkms ({DH_DKMS_SNIPPETS}/{name}-dkms)\n{text}# End automatically added section\n"
    )))
}

/// gzip -9n: no name, no timestamp (dh_compress).
fn gzip_n(text: &str) -> Result<Vec<u8>> {
    let mut encoder = GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), Compression::best());
    encoder.write_all(text.as_bytes())?;
    Ok(encoder.finish()?)
}

#[cfg(test)]
#[path = "deb_route_tests.rs"]
mod tests;
