//! The target distributions: `packaging/distros.yaml`, loaded and validated.
//!
//! YAML is read with `serde-saphyr`: `serde_yaml` is deprecated (archived
//! upstream), and serde-saphyr is pure Rust (no libyaml) and maintained.
//!
//! Family-specific fields are `Option`s (or defaulted) so that one file can
//! hold every family; each packaging command asks for the fields it needs
//! through `Distro::require`, which names the entry and the missing field.
//! Unknown fields are refused, so a typo in the data file is an error rather
//! than a silently ignored setting.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;

/// Where the data file lives, relative to the workspace root.
pub const DATA_FILE: &str = "packaging/distros.yaml";

/// The whole data file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Packaging {
    /// `Name <email>` written to debian/control, debian/changelog and the
    /// spec's changelog.
    pub maintainer: String,
    /// Package release (Debian revision, RPM Release) when `--release` is
    /// not given.
    #[serde(default = "default_release")]
    pub release: u32,
    pub distros: Vec<Distro>,
}

fn default_release() -> u32 {
    1
}

/// Which package format a distribution uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Deb,
    Rpm,
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::Deb => "deb",
            Family::Rpm => "rpm",
        })
    }
}

/// One distribution entry. Serialised as-is into template contexts
/// (`distro.<field>`), so templates see exactly the names of the data file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Distro {
    /// What `--distro` takes, e.g. `debian12`.
    pub id: String,
    /// Human-readable name, e.g. `Debian 12 (bookworm)`.
    pub name: String,
    pub family: Family,

    // --- deb family ---
    /// Suite written to debian/changelog, e.g. `bookworm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codename: Option<String>,
    /// Newest Debian Policy version the distro's lintian knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standards_version: Option<String>,
    /// Rust toolchain packages the DKMS module build depends on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rust_packages: Vec<String>,
    /// Build-Depends entry providing debhelper's dkms sequence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dkms_addon_build_depends: Option<String>,
    /// debian/rules must pass `--with dkms` (the addon package is not a
    /// `dh-sequence-*` one).
    #[serde(default)]
    pub dh_with_dkms: bool,
    // --- rpm family ---
    /// The spec's `Group:` tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm_group: Option<String>,
    /// The spec's `BuildRequires`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub build_requires: Vec<String>,
    /// `Requires` of the -dkms binary package.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dkms_requires: Vec<String>,
    // --- facts, both families ---
    /// The Rust toolchains the distribution ships (docs/toolchains.md);
    /// data for CI's checks (xtask/tests/toolchains.rs), not rendered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rust_toolchains: Vec<RustToolchain>,
}

/// One Rust toolchain a distribution ships: the compiler and library
/// source packages, the upstream version, and the suite or pocket that has it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RustToolchain {
    pub packages: Vec<String>,
    pub version: String,
    pub suite: String,
}

impl Distro {
    /// The value of an optional field this command needs, or an error naming
    /// the entry, the field and the file to fix.
    pub fn require<'a>(&self, field: &str, value: Option<&'a String>) -> Result<&'a str> {
        match value {
            Some(v) if !v.trim().is_empty() => Ok(v),
            _ => bail!(
                "{DATA_FILE}: distro `{}` has no `{field}`; add `{field}: ...` to its entry",
                self.id
            ),
        }
    }

    /// Checks that a deb-family entry has every field the Debian templates use.
    pub fn validate_deb(&self) -> Result<()> {
        if self.family != Family::Deb {
            bail!(
                "distro `{}` is a {} distribution; build-deb needs a deb one (see {DATA_FILE})",
                self.id,
                self.family
            );
        }
        self.require("codename", self.codename.as_ref())?;
        let standards = self.require("standards_version", self.standards_version.as_ref())?;
        if !is_dotted_number(standards) {
            bail!(
                "{DATA_FILE}: distro `{}` has standards_version `{standards}`; write a Policy version such as 4.6.2",
                self.id
            );
        }
        self.require(
            "dkms_addon_build_depends",
            self.dkms_addon_build_depends.as_ref(),
        )?;
        if self.rust_packages.is_empty() {
            bail!(
                "{DATA_FILE}: distro `{}` has no `rust_packages`; list the Rust toolchain packages, e.g. [rustc, rust-src]",
                self.id
            );
        }
        for package in &self.rust_packages {
            if !is_debian_package_name(package) {
                bail!(
                    "{DATA_FILE}: distro `{}` lists `{package}` in rust_packages, which is not a Debian package name (lowercase letters, digits, + - .)",
                    self.id
                );
            }
        }
        Ok(())
    }
}

impl Packaging {
    /// Loads and checks `packaging/distros.yaml` below the workspace root.
    pub fn load() -> Result<Packaging> {
        Packaging::load_from(&crate::workspace::path(DATA_FILE))
    }

    pub fn load_from(path: &Path) -> Result<Packaging> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading {}; restore it from git", path.display()))?;
        Packaging::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses and validates the data file's text.
    pub fn parse(text: &str) -> Result<Packaging> {
        let packaging: Packaging = serde_saphyr::from_str(text).map_err(|e| {
            anyhow::anyhow!(
                "malformed packaging data: {e}\nfix the YAML (schema at the top of {DATA_FILE})"
            )
        })?;
        packaging.validate()?;
        Ok(packaging)
    }

    fn validate(&self) -> Result<()> {
        let looks_like_address = self.maintainer.trim().ends_with('>')
            && self.maintainer.contains(" <")
            && self.maintainer.contains('@');
        if !looks_like_address {
            bail!(
                "maintainer `{}` must look like `Name <email@example.org>`; fix `maintainer:` in {DATA_FILE}",
                self.maintainer
            );
        }
        if self.release == 0 {
            bail!("`release: 0`: Debian and RPM releases start at 1; set `release: 1`");
        }
        if self.distros.is_empty() {
            bail!("no distros listed; add entries under `distros:`");
        }
        let mut seen = std::collections::BTreeSet::new();
        for distro in &self.distros {
            if !is_distro_id(&distro.id) {
                bail!(
                    "distro id `{}` must be lowercase letters and digits only (e.g. debian12)",
                    distro.id
                );
            }
            if !seen.insert(distro.id.as_str()) {
                bail!("distro id `{}` appears twice; keep one entry", distro.id);
            }
            if distro.name.trim().is_empty() {
                bail!("distro `{}` has an empty `name`; give it one", distro.id);
            }
        }
        Ok(())
    }

    /// The entry with this id, or an error listing the known ids.
    pub fn find(&self, id: &str) -> Result<&Distro> {
        self.distros.iter().find(|d| d.id == id).with_context(|| {
            format!(
                "unknown distro `{id}`; use one of: {} (or add it to {DATA_FILE})",
                self.ids(None).join(", ")
            )
        })
    }

    /// Ids of all entries, or of one family's entries.
    pub fn ids(&self, family: Option<Family>) -> Vec<&str> {
        self.distros
            .iter()
            .filter(|d| family.is_none_or(|f| d.family == f))
            .map(|d| d.id.as_str())
            .collect()
    }

    /// Entries of one family, in file order.
    pub fn family(&self, family: Family) -> impl Iterator<Item = &Distro> {
        self.distros.iter().filter(move |d| d.family == family)
    }
}

fn is_distro_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

fn is_dotted_number(text: &str) -> bool {
    !text.is_empty()
        && text
            .split('.')
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
}

/// Debian Policy 5.6.1: lowercase letters, digits, `+ - .`, at least two
/// characters, starting with an alphanumeric.
fn is_debian_package_name(name: &str) -> bool {
    name.len() >= 2
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "maintainer: A B <a@b.example>\ndistros:\n  - id: debian12\n    name: Debian 12\n    family: deb\n    codename: bookworm\n    standards_version: 4.6.2\n    rust_packages: [rustc-web, rust-web-src]\n    dkms_addon_build_depends: dh-sequence-dkms\n  - id: rhel9\n    name: RHEL 9\n    family: rpm\n";

    #[test]
    fn the_workspace_data_file_loads_and_every_deb_entry_is_complete() {
        let packaging = Packaging::load().unwrap();
        let debs: Vec<_> = packaging.family(Family::Deb).collect();
        assert!(
            debs.len() >= 4,
            "debian12, debian13, ubuntu2204, ubuntu2404 expected"
        );
        for distro in debs {
            distro.validate_deb().unwrap();
        }
        assert_eq!(
            packaging.find("debian12").unwrap().rust_packages,
            ["rustc-web", "rust-web-src"]
        );
    }

    #[test]
    fn release_defaults_to_one_and_family_fields_are_optional() {
        let packaging = Packaging::parse(MINIMAL).unwrap();
        assert_eq!(packaging.release, 1);
        let rhel = packaging.find("rhel9").unwrap();
        assert_eq!(rhel.family, Family::Rpm);
        assert!(rhel.codename.is_none());
        assert_eq!(packaging.ids(Some(Family::Deb)), ["debian12"]);
    }

    #[test]
    fn unknown_distro_lists_the_known_ones() {
        let packaging = Packaging::parse(MINIMAL).unwrap();
        let error = packaging.find("plan9").unwrap_err().to_string();
        assert!(error.contains("debian12, rhel9"), "{error}");
    }

    #[test]
    fn malformed_data_is_refused() {
        const M: &str = "maintainer: A B <a@b.example>\n";
        for (text, expected) in [
            ("distros: [".to_owned(), "malformed"),
            (
                "distros:\n  - {id: a, name: A, family: deb}\n".to_owned(),
                "malformed",
            ),
            (
                "maintainer: nobody\ndistros:\n  - {id: a, name: A, family: deb}\n".to_owned(),
                "Name <email",
            ),
            (
                format!("{M}distros:\n  - id: x\n    name: y\n    family: nix\n"),
                "malformed",
            ),
            (
                format!("{M}distros:\n  - id: a1\n    name: A\n    family: deb\n    codenmae: x\n"),
                "malformed",
            ),
            (
                format!("{M}release: 0\ndistros:\n  - {{id: a, name: A, family: deb}}\n"),
                "release: 0",
            ),
            (format!("{M}distros: []\n"), "no distros"),
            (
                format!("{M}distros:\n  - {{id: Debian12, name: A, family: deb}}\n"),
                "lowercase",
            ),
            (
                format!(
                    "{M}distros:\n  - {{id: a, name: A, family: deb}}\n  - {{id: a, name: B, family: rpm}}\n"
                ),
                "twice",
            ),
        ] {
            let error = format!("{:#}", Packaging::parse(&text).unwrap_err());
            assert!(error.contains(expected), "{text:?} gave {error}");
        }
    }

    #[test]
    fn a_deb_entry_missing_a_field_is_named() {
        let packaging = Packaging::parse(
            "maintainer: A B <a@b.example>\ndistros:\n  - {id: deb1, name: A, family: deb, codename: x, rust_packages: [rustc], dkms_addon_build_depends: dh-sequence-dkms}\n",
        )
        .unwrap();
        let error = packaging
            .find("deb1")
            .unwrap()
            .validate_deb()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("deb1") && error.contains("standards_version"),
            "{error}"
        );
    }

    #[test]
    fn an_rpm_entry_is_refused_for_deb() {
        let packaging = Packaging::parse(MINIMAL).unwrap();
        let error = packaging
            .find("rhel9")
            .unwrap()
            .validate_deb()
            .unwrap_err()
            .to_string();
        assert!(error.contains("rpm distribution"), "{error}");
    }
}
