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

    /// Parses and validates the data file's text. YAML and type errors are
    /// reported in the data file's terms (line, field, what it must be),
    /// not the YAML library's.
    pub fn parse(text: &str) -> Result<Packaging> {
        let packaging: Packaging =
            serde_saphyr::from_str(text).map_err(|error| data_error(text, &error))?;
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

/// The distros.yaml id an os-release file describes, whether or not the
/// data file has it: `debian` 12 -> debian12, `ubuntu` 22.04 -> ubuntu2204,
/// RHEL/CentOS 9.4 -> rhel9, Rocky -> rocky9, AlmaLinux -> alma9, Fedora ->
/// fedora, SLES/SLED/Leap 15.6 -> sles15. Ubuntu's ids carry the whole
/// version (its releases are YY.MM), the others the major version. None
/// without an ID, or without a VERSION_ID (Debian testing/sid) except for
/// Fedora, whose id has no version.
pub fn host_distro_id(os_release: &str) -> Option<String> {
    let field = |key: &str| {
        os_release.lines().find_map(|line| {
            line.strip_prefix(key)?
                .strip_prefix('=')
                .map(|value| value.trim().trim_matches('"').to_owned())
        })
    };
    let id = field("ID")?;
    if id == "fedora" {
        return Some(id);
    }
    let version = field("VERSION_ID").filter(|v| !v.is_empty())?;
    let major = version.split('.').next().unwrap_or_default();
    Some(match id.as_str() {
        "ubuntu" => format!("ubuntu{}", version.replace('.', "")),
        "rhel" | "centos" => format!("rhel{major}"),
        "almalinux" => format!("alma{major}"),
        "sles" | "sled" | "opensuse-leap" => format!("sles{major}"),
        other => format!("{other}{major}"),
    })
}

/// What each field of the data file must be, for messages about a value of
/// the wrong type.
fn field_expectation(field: &str) -> Option<&'static str> {
    Some(match field {
        "maintainer" => "text such as `Name <email@example.org>`",
        "release" => "a whole number, 1 or more",
        "distros" => "a list of distro entries (`- id: ...`)",
        "id" => "an id of lowercase letters and digits, such as debian12",
        "family" => "`deb` or `rpm`",
        "name" | "codename" | "standards_version" | "dkms_addon_build_depends" | "rpm_group" => {
            "text"
        }
        "rust_packages" | "build_requires" | "dkms_requires" => {
            "a list of package names, such as [rustc, rust-src]"
        }
        "dh_with_dkms" => "true or false",
        _ => return None,
    })
}

/// A YAML or type error of the data file, in the data file's terms.
fn data_error(text: &str, error: &serde_saphyr::Error) -> anyhow::Error {
    let inner = error.without_snippet();
    let line = error
        .location()
        .map(|location| location.line())
        .unwrap_or(0);
    let at = if line > 0 {
        format!("line {line}: ")
    } else {
        String::new()
    };
    let line_text = usize::try_from(line)
        .ok()
        .and_then(|line| text.lines().nth(line.checked_sub(1)?))
        .unwrap_or_default();
    // `key: value` on the error's line (also as a list item `- key: value`);
    // not when the value opens a flow collection, whose error may be a
    // syntax error anywhere inside it.
    let entry = line_text
        .trim_start()
        .trim_start_matches("- ")
        .split_once(':')
        .map(|(key, value)| (key.trim(), value.trim()))
        .filter(|(_, value)| !value.starts_with(['[', '{']));
    match inner {
        serde_saphyr::Error::DuplicateMappingKey { key, .. } => {
            let key = key.as_deref().unwrap_or("a key");
            anyhow::anyhow!(
                "{at}`{key}` is given twice at the same level; keep one (schema at the top of {DATA_FILE})"
            )
        }
        // Not a value of the wrong type: the library's words, our line.
        serde_saphyr::Error::SerdeUnknownField { .. }
        | serde_saphyr::Error::SerdeMissingField { .. }
        | serde_saphyr::Error::Eof { .. } => {
            anyhow::anyhow!(
                "{at}{}; fix the entry (schema at the top of {DATA_FILE})",
                library_message(inner)
            )
        }
        _ => match entry.and_then(|(key, value)| Some((key, value, field_expectation(key)?))) {
            Some((field, value, expected)) => anyhow::anyhow!(
                "{at}`{field}` must be {expected}, not `{value}` (schema at the top of {DATA_FILE})"
            ),
            None => anyhow::anyhow!(
                "{at}malformed packaging data: {}; fix the YAML (schema at the top of {DATA_FILE})",
                library_message(inner)
            ),
        },
    }
}

/// The library's one-line message, without its "error: line L column C: "
/// prefix (the caller gives the line).
fn library_message(error: &serde_saphyr::Error) -> String {
    let text = error.to_string();
    let first = text.lines().next().unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    match first.split_once(": ") {
        Some((place, rest)) if place.starts_with("line ") => rest.to_owned(),
        _ => first.to_owned(),
    }
}

/// Line numbers (1-based) of the `id: @id` lines, block (`- id: x`) or
/// flow (`{id: x, ...}`) style.
fn id_lines(text: &str, id: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let line = line.trim_start().trim_start_matches('-').trim_start();
            let line = line.trim_start_matches('{').trim_start();
            line.strip_prefix("id:").is_some_and(|rest| {
                let value = rest.split([',', '}', '#']).next().unwrap_or_default();
                value.trim().trim_matches(['"', '\'']) == id
            })
        })
        .map(|(index, _)| index + 1)
        .collect()
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
    fn os_release_maps_to_distro_ids() {
        let cases = [
            ("ID=\"rhel\"\nVERSION_ID=\"9.4\"\n", "rhel9"),
            ("ID=\"centos\"\nVERSION_ID=\"8\"\n", "rhel8"),
            ("ID=\"rocky\"\nVERSION_ID=\"9.3\"\n", "rocky9"),
            ("ID=\"almalinux\"\nVERSION_ID=\"9.4\"\n", "alma9"),
            ("ID=fedora\nVERSION_ID=41\n", "fedora"),
            ("ID=\"sles\"\nVERSION_ID=\"15.6\"\n", "sles15"),
            ("ID=debian\nVERSION_ID=\"12\"\n", "debian12"),
            ("NAME=x\nID=ubuntu\nVERSION_ID=\"22.04\"\n", "ubuntu2204"),
        ];
        for (text, want) in cases {
            assert_eq!(host_distro_id(text).as_deref(), Some(want), "{text}");
        }
        assert_eq!(host_distro_id(""), None);
        assert_eq!(
            host_distro_id("ID=debian\n"),
            None,
            "testing/sid have no VERSION_ID"
        );
    }

    #[test]
    fn choosing_a_distro_names_the_route_and_its_family() {
        let packaging = Packaging::parse(MINIMAL).unwrap();
        let rpm = packaging
            .choose(Family::Rpm, "build-srpm", None, "rhel9")
            .unwrap();
        assert_eq!(rpm.family, Family::Rpm);
        let error = packaging
            .choose(Family::Rpm, "build-srpm", Some("plan9"), "rhel9")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("build-srpm knows: rhel9") && !error.contains("debian12"),
            "{error}"
        );
        let error = packaging
            .choose(Family::Rpm, "build-srpm", Some("debian12"), "rhel9")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("is a deb distribution") && error.contains("build-deb"),
            "{error}"
        );
        let error = packaging
            .choose(Family::Deb, "build-deb", Some("rhel9"), "debian12")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("is an rpm distribution") && error.contains("build-srpm"),
            "{error}"
        );
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
                "missing field `maintainer`",
            ),
            (
                "maintainer: nobody\ndistros:\n  - {id: a, name: A, family: deb}\n".to_owned(),
                "Name <email",
            ),
            (
                format!("{M}distros:\n  - id: x\n    name: y\n    family: nix\n"),
                "`family` must be",
            ),
            (
                format!("{M}distros:\n  - id: a1\n    name: A\n    family: deb\n    codenmae: x\n"),
                "codenmae",
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
    fn data_errors_name_the_line_and_the_field_in_our_words() {
        const M: &str = "maintainer: A B <a@b.example>\n";
        for (text, expected) in [
            (
                format!(
                    "{M}distros:\n  - id: a1\n    name: A\n    family: deb\n  - id: a1\n    name: B\n    family: rpm\n"
                ),
                "line 6: distro id `a1` appears twice",
            ),
            (
                format!("{M}distros:\n  - id: a1\n    name: A\n    name: B\n    family: deb\n"),
                "line 5: `name` is given twice at the same level",
            ),
            (
                format!("{M}release: 1\nrelease: 2\ndistros: []\n"),
                "line 3: `release` is given twice",
            ),
            (
                format!(
                    "{M}distros:\n  - id: a1\n    name: A\n    family: deb\n    dh_with_dkms: maybe\n"
                ),
                "line 6: `dh_with_dkms` must be true or false, not `maybe`",
            ),
            (
                format!(
                    "{M}distros:\n  - id: a1\n    name: A\n    family: deb\n    rust_packages: rustc\n"
                ),
                "line 6: `rust_packages` must be a list of package names",
            ),
            (
                format!("{M}release: x\ndistros: []\n"),
                "line 2: `release` must be a whole number",
            ),
            (
                format!("{M}distros:\n  - id: a1\n    name: A\n    family: nix\n"),
                "line 5: `family` must be `deb` or `rpm`, not `nix`",
            ),
        ] {
            let error = format!("{:#}", Packaging::parse(&text).unwrap_err());
            assert!(error.contains(expected), "{text:?} gave {error}");
            assert!(!error.contains("DuplicateKeyPolicy"), "{error}");
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
