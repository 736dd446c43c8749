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

mod data_errors;
mod host;
mod names;
pub mod rpm;

use anyhow::{Context, Result, bail};
use data_errors::{data_error, id_lines};
pub use host::host_distro_id;
pub use names::is_debian_package_name;
use names::{is_backport_suffix, is_distro_id, is_dotted_number};
pub use rpm::{Compression, ModuleRoute, RpmPackaging};
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
    /// The project's home page (Homepage, Source, URL); none until it has
    /// one (docs/packaging.md, "Package metadata").
    #[serde(default)]
    pub homepage: Option<String>,
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

impl Family {
    /// The subcommand that builds this family's source package (named in
    /// messages that send a user to the other route).
    pub fn source_package_command(self) -> &'static str {
        match self {
            Family::Deb => "build-deb",
            Family::Rpm => "build-srpm",
        }
    }
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
    /// Appended to the Debian revision so that each suite's packages have
    /// their own version (`~deb12`, `~ubuntu22.04.1`); empty for the
    /// newest Debian release. See packaging/distros.yaml.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version_suffix: String,
    /// Packages installing one kernel's image (`{release}`: its release),
    /// any of which a build-modules package depends on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_image_packages: Vec<String>,
    /// The packages of which the -dkms package needs one: MLNX_OFED's
    /// kernel modules by every name the distro's OFED packages have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ofed_packages: Vec<String>,
    // --- rpm family ---
    /// The distribution's `%dist` macro (`.el9`, `.el10`; empty where the
    /// build hosts define none, as on SLES): the suffix rpmbuild there puts
    /// after the release. Required in rpm entries (srpm/spec.rs checks it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dist: Option<String>,
    /// How the distribution packages a kernel module (distro/rpm.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<RpmPackaging>,
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
        if !self.version_suffix.is_empty() && !is_backport_suffix(&self.version_suffix) {
            bail!(
                "{DATA_FILE}: distro `{}` has version_suffix `{}`; it must start with `~` (so it sorts below the newest suite's version) and use only letters, digits and . + ~, e.g. ~deb12",
                self.id,
                self.version_suffix
            );
        }
        // backports.debian.org/Contribute: "~bpo<release>+<build>" marks an
        // upload to Debian's backports archive; this package is not one.
        if self.version_suffix.starts_with("~bpo") {
            bail!(
                "{DATA_FILE}: distro `{}` has version_suffix `{}`, Debian's form for uploads to its backports archive, which this package is not; use the release's own suffix, e.g. ~deb12",
                self.id,
                self.version_suffix
            );
        }
        if self.ofed_packages.is_empty() {
            bail!(
                "{DATA_FILE}: distro `{}` has no `ofed_packages`; list the packages of MLNX_OFED's kernel modules, e.g. [mlnx-ofed-kernel-dkms, mlnx-ofed-kernel-modules]",
                self.id
            );
        }
        for (field, packages) in [
            ("rust_packages", &self.rust_packages),
            ("ofed_packages", &self.ofed_packages),
        ] {
            if let Some(package) = packages.iter().find(|p| !is_debian_package_name(p)) {
                bail!(
                    "{DATA_FILE}: distro `{}` lists `{package}` in {field}, which is not a Debian package name (lowercase letters, digits, + - .)",
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

    /// Parses and validates the data file's text. YAML and type errors are
    /// reported in the data file's terms (line, field, what it must be),
    /// not the YAML library's.
    pub fn parse(text: &str) -> Result<Packaging> {
        let packaging: Packaging =
            serde_saphyr::from_str(text).map_err(|error| data_error(text, &error, DATA_FILE))?;
        packaging.validate(text)?;
        Ok(packaging)
    }

    fn validate(&self, text: &str) -> Result<()> {
        let looks_like_address = self.maintainer.trim().ends_with('>')
            && self.maintainer.contains(" <")
            && self.maintainer.contains('@');
        if !looks_like_address {
            bail!(
                "maintainer `{}` must look like `Name <email@example.org>`; fix `maintainer:` in {DATA_FILE}",
                self.maintainer
            );
        }
        let bad = |h: &&str| !h.starts_with("https://") || h.len() <= 8 || h.contains(' ');
        if let Some(homepage) = self.homepage.as_deref().filter(bad) {
            bail!(
                "homepage `{homepage}` must be an https:// URL without spaces; fix `homepage:` in {DATA_FILE} (or remove it: the packages then name no home page)"
            );
        }
        // The same rule as `--release` (one parser for both): 1 to 999999999.
        if self
            .release
            .to_string()
            .parse::<crate::release::Release>()
            .is_err()
        {
            bail!(
                "`release: {}` in {DATA_FILE}: {}",
                self.release,
                crate::release::RELEASE_HELP
                    .replace("pass e.g. --release 2", "set e.g. `release: 1`")
            );
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
                let line = id_lines(text, &distro.id)
                    .get(1)
                    .map(|line| format!("line {line}: "))
                    .unwrap_or_default();
                bail!(
                    "{line}distro id `{}` appears twice; keep one entry (ids are what --distro takes)",
                    distro.id
                );
            }
            if distro.name.trim().is_empty() {
                bail!("distro `{}` has an empty `name`; give it one", distro.id);
            }
        }
        // Each deb suite's packages must have their own version, or two
        // suites' debs of one release collide in a shared pool.
        let mut suffixes = std::collections::BTreeMap::new();
        for distro in self.distros.iter().filter(|d| d.family == Family::Deb) {
            if let Some(other) = suffixes.insert(distro.version_suffix.as_str(), &distro.id) {
                bail!(
                    "deb distros `{other}` and `{}` have the same version_suffix `{}`, so their packages would have the same version; give each deb entry its own (see the comment at the top of {DATA_FILE})",
                    distro.id,
                    distro.version_suffix
                );
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

    /// The entry a route builds for: @requested (`--distro`), which must be
    /// of @family; else the entry /etc/os-release names, if it is of
    /// @family; else @fallback. @command names the route in messages.
    pub fn choose(
        &self,
        family: Family,
        command: &str,
        requested: Option<&str>,
        fallback: &str,
    ) -> Result<&Distro> {
        let known = self.ids(Some(family)).join(", ");
        let Some(id) = requested else {
            let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
            let id = host_distro_id(&os_release)
                .filter(|id| self.family(family).any(|d| d.id == *id))
                .unwrap_or_else(|| fallback.to_owned());
            return self.find(&id).with_context(|| {
                format!(
                    "{DATA_FILE} lacks {command}'s default distro `{id}`; pass --distro (one of: {known})"
                )
            });
        };
        let Some(distro) = self.distros.iter().find(|d| d.id == id) else {
            bail!(
                "unknown distro `{id}`; {command} knows: {known} (or add an entry to {DATA_FILE})"
            );
        };
        if distro.family != family {
            bail!(
                "distro `{id}` is a{} {} distribution; {command} knows: {known} (use `cargo xtask {}` for {id})",
                if distro.family == Family::Rpm {
                    "n"
                } else {
                    ""
                },
                distro.family,
                distro.family.source_package_command()
            );
        }
        Ok(distro)
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

#[cfg(test)]
mod tests;
