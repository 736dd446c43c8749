//! The spec: rendered from `rpm/nvidia_peer_memory.spec.tera` for one rpm
//! distro entry, and read back for what the source package header repeats
//! (BuildRequires, the changelog), so the spec stays the one source of both.

use super::writer::{ChangelogEntry, parse_dependency, parse_rich_dependency};
use crate::distro::{Compression, DATA_FILE, Distro, Family, ModuleRoute, Packaging, RpmPackaging};
use crate::pipeline::HELPER_NAME;
use crate::render;
use anyhow::{Context, Result, bail, ensure};
use rpm::Dependency;

/// Template of the spec, relative to the workspace root.
pub const TEMPLATE: &str = "rpm/nvidia_peer_memory.spec.tera";

/// The binary and source package name (the original's, so upgrades and
/// documentation carry over).
pub const PACKAGE_NAME: &str = "nvidia_peer_memory";

/// Where the binary package installs the boot helper (pipeline's
/// HELPER_NAME). The unit names the path; `%{_libexecdir}` is /usr/lib on
/// SUSE, so the spec spells it out.
pub const HELPER_DIR: &str = "/usr/libexec/nv_peer_mem";

/// Checks that an rpm-family entry has everything the spec template uses
/// for its route, with a message naming the entry, the field and the file.
pub fn validate_rpm_distro(distro: &Distro) -> Result<&RpmPackaging> {
    ensure!(
        distro.family == Family::Rpm,
        "distro `{}` is a {} distribution; build-srpm needs an rpm one (see {DATA_FILE})",
        distro.id,
        distro.family
    );
    let id = &distro.id;
    let Some(rpm) = distro.rpm.as_ref() else {
        bail!(
            "{DATA_FILE}: distro `{id}` has no `rpm:` block; add one (route, group, arches, kernel_devel, build_requires, rust_packages, dkms_requires; see the comment above the rpm entries)"
        );
    };
    dist(distro)?;
    for (field, value) in [("group", &rpm.group), ("kernel_devel", &rpm.kernel_devel)] {
        ensure!(
            !value.trim().is_empty(),
            "{DATA_FILE}: distro `{id}` has an empty `rpm.{field}`; give it a value"
        );
    }
    for (field, list) in [
        ("build_requires", &rpm.build_requires),
        ("rust_packages", &rpm.rust_packages),
        ("dkms_requires", &rpm.dkms_requires),
    ] {
        if list.is_empty() {
            bail!(
                "{DATA_FILE}: distro `{id}` has no `rpm.{field}`; list the package names, e.g. [gcc, make]"
            );
        }
        for item in list {
            parse_dependency(item).with_context(|| {
                format!("{DATA_FILE}: distro `{id}`, `rpm.{field}` item {item:?}")
            })?;
        }
    }
    for item in &rpm.prerequisites {
        let parsed = if item.starts_with('(') {
            parse_rich_dependency(item)
        } else {
            parse_dependency(item)
        };
        parsed.with_context(|| {
            format!("{DATA_FILE}: distro `{id}`, `rpm.prerequisites` item {item:?}")
        })?;
    }
    ensure!(
        !rpm.arches.is_empty()
            && rpm.arches.iter().all(|arch| {
                !arch.is_empty()
                    && arch
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            }),
        "{DATA_FILE}: distro `{id}` needs `rpm.arches`: a list of rpm architectures such as [x86_64, aarch64]"
    );
    if rpm.route != ModuleRoute::Dkms {
        for (field, value) in [
            ("macros", &rpm.macros),
            ("flavor", &rpm.flavor),
            ("module_dir", &rpm.module_dir),
        ] {
            ensure!(
                value.as_ref().is_some_and(|v| !v.trim().is_empty()),
                "{DATA_FILE}: distro `{id}` (route {}) has no `rpm.{field}`; the module package needs it",
                rpm.route
            );
        }
        ensure!(
            rpm.compression.is_some(),
            "{DATA_FILE}: distro `{id}` (route {}) has no `rpm.compression`; say how the distro compresses its modules (xz, zstd or none)",
            rpm.route
        );
        if rpm.route == ModuleRoute::Kmod {
            // kmodtool's %post and %preun look for modules in extra/<name>.
            let expected = format!("extra/{PACKAGE_NAME}");
            ensure!(
                rpm.module_dir.as_deref() == Some(expected.as_str()),
                "{DATA_FILE}: distro `{id}` (route kmod) must have `module_dir: {expected}`: kmodtool's scriptlets look for the module there"
            );
        }
    } else {
        for (field, set) in [
            ("macros", rpm.macros.is_some()),
            ("flavor", rpm.flavor.is_some()),
            ("module_dir", rpm.module_dir.is_some()),
            ("compression", rpm.compression.is_some()),
        ] {
            ensure!(
                !set,
                "{DATA_FILE}: distro `{id}` has route dkms, which builds no module package: remove `rpm.{field}` (DKMS decides it on the machine)"
            );
        }
    }
    Ok(rpm)
}

/// The entry's `dist` (the distribution's `%dist` macro, possibly empty),
/// or an error naming the entry and the fix.
pub fn dist(distro: &Distro) -> Result<&str> {
    let id = &distro.id;
    let Some(dist) = distro.dist.as_deref() else {
        bail!(
            "{DATA_FILE}: distro `{id}` has no `dist`; add the distribution's %dist macro (`rpm --eval %{{?dist}}` on it), e.g. `dist: .el9`, or `dist: \"\"` where it defines none"
        );
    };
    ensure!(
        dist.is_empty()
            || (dist.starts_with('.')
                && dist.len() > 1
                && dist[1..]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_')),
        "{DATA_FILE}: distro `{id}` has `dist: {dist}`; write the %dist macro's value: a dot and letters, digits, `.` or `_` (e.g. .el9, .el10), or \"\""
    );
    Ok(dist)
}

/// Renders the spec for `distro` of `packaging` at `version` (the
/// workspace version; tests pass a fixed one).
pub fn render(
    packaging: &Packaging,
    distro: &Distro,
    version: &str,
    release: u32,
    source_date_epoch: u64,
) -> Result<String> {
    let context = context(packaging, distro, version, release, source_date_epoch)?;
    render::render_file(&crate::workspace::path(TEMPLATE), &context)
}

/// The spec's other sources besides the tarball, as (file name, text): for
/// the kmod and kmp routes, the module package's extra header tags
/// (Source1) and file list (Source2) the kernel-module macros read from
/// %_sourcedir; nothing for the dkms route.
pub fn render_module_sources(
    packaging: &Packaging,
    distro: &Distro,
    version: &str,
    release: u32,
    source_date_epoch: u64,
) -> Result<Vec<(String, String)>> {
    let rpm = validate_rpm_distro(distro)?;
    if rpm.route == ModuleRoute::Dkms {
        return Ok(Vec::new());
    }
    let context = context(packaging, distro, version, release, source_date_epoch)?;
    MODULE_SOURCES
        .iter()
        .map(|(name, template)| {
            let text = render::render_file(&crate::workspace::path(template), &context)?;
            Ok(((*name).to_owned(), text))
        })
        .collect()
}

/// Source1 and Source2 of the kmod and kmp routes: (name in the source
/// rpm, template).
pub const MODULE_SOURCES: [(&str, &str); 2] = [
    (
        "nvidia_peer_memory-kmod.preamble",
        "rpm/nvidia_peer_memory-kmod.preamble.tera",
    ),
    (
        "nvidia_peer_memory-kmod.files",
        "rpm/nvidia_peer_memory-kmod.files.tera",
    ),
];

fn context(
    packaging: &Packaging,
    distro: &Distro,
    version: &str,
    release: u32,
    source_date_epoch: u64,
) -> Result<tera::Context> {
    let rpm = validate_rpm_distro(distro)?;
    let mut context = render::base_context(packaging, distro, version, release, source_date_epoch);
    context.insert("license", env!("CARGO_PKG_LICENSE"));
    context.insert("helper_name", HELPER_NAME);
    context.insert("helper_dir", HELPER_DIR);
    context.insert("rust_min", &crate::workspace::module_rust_version()?);
    context.insert(
        "compression_suffix",
        match rpm.compression {
            Some(Compression::Xz) => ".xz",
            Some(Compression::Zstd) => ".zst",
            Some(Compression::None) | None => "",
        },
    );
    Ok(context)
}

/// The spec's `BuildRequires`, in spec order (one per line, as the
/// template writes them).
pub fn build_requires(spec: &str) -> Result<Vec<Dependency>> {
    spec.lines()
        .filter_map(|line| line.strip_prefix("BuildRequires:"))
        .map(|value| parse_dependency(value.trim()))
        .collect()
}

/// The spec's `Summary:` and `%description` of the main package.
pub fn summary_and_description(spec: &str) -> Result<(String, String)> {
    let summary = spec
        .lines()
        .find_map(|line| line.strip_prefix("Summary:"))
        .context("the rendered spec has no Summary: line; fix the template")?
        .trim()
        .to_owned();
    let description = section(spec, "%description")
        .context("the rendered spec has no %description section; fix the template")?
        .trim()
        .to_owned();
    // The source package header holds the text as written; rpmbuild would
    // have expanded macros first, so the template must not use any there.
    ensure!(
        !summary.contains('%') && !description.contains('%'),
        "the main package's Summary or %description in {TEMPLATE} uses an rpm macro; write it out (the source package header cannot expand it)"
    );
    Ok((summary, description))
}

/// The `%changelog` entries, newest first, with the times rpm records for
/// them (noon UTC of the entry's day; rpmbuild uses noon local time).
pub fn changelog(spec: &str) -> Result<Vec<ChangelogEntry>> {
    let Some(body) = section(spec, "%changelog") else {
        return Ok(Vec::new());
    };
    let mut entries: Vec<ChangelogEntry> = Vec::new();
    for line in body.lines() {
        if let Some(heading) = line.strip_prefix("* ") {
            let words: Vec<&str> = heading.splitn(5, ' ').collect();
            let [_weekday, month, day, year, name] = words.as_slice() else {
                bail!(
                    "%changelog heading {line:?} is not `* Www Mmm DD YYYY Name <email> - version-release`"
                );
            };
            entries.push(ChangelogEntry {
                time: noon_utc(month, day, year)
                    .with_context(|| format!("%changelog heading {line:?}"))?,
                name: (*name).to_owned(),
                text: String::new(),
            });
        } else if let Some(entry) = entries.last_mut() {
            if !entry.text.is_empty() {
                entry.text.push('\n');
            }
            entry.text.push_str(line);
        } else if !line.trim().is_empty() {
            bail!("%changelog must start with a `* ` heading line, not {line:?}");
        }
    }
    for entry in &mut entries {
        entry.text = entry.text.trim_end().to_owned();
    }
    Ok(entries)
}

/// The text of a spec section from the line after its heading to the next
/// section heading (a line starting with `%` and a known section name).
fn section<'a>(spec: &'a str, heading: &str) -> Option<&'a str> {
    const SECTIONS: [&str; 14] = [
        "%package",
        "%description",
        "%prep",
        "%build",
        "%install",
        "%check",
        "%clean",
        "%pre",
        "%post",
        "%preun",
        "%postun",
        "%files",
        "%changelog",
        "%triggerin",
    ];
    let mut offset = 0;
    let mut start = None;
    for line in spec.split_inclusive('\n') {
        let word = line.split_whitespace().next().unwrap_or("");
        if let Some(from) = start {
            if SECTIONS.contains(&word) {
                return Some(&spec[from..offset]);
            }
        } else if line.trim_end() == heading {
            start = Some(offset + line.len());
        }
        offset += line.len();
    }
    start.map(|from| &spec[from..])
}

fn noon_utc(month: &str, day: &str, year: &str) -> Result<u32> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS
        .iter()
        .position(|m| *m == month)
        .with_context(|| format!("unknown month {month:?}; use Jan..Dec"))? as i64
        + 1;
    let day: i64 = day
        .parse()
        .with_context(|| format!("day {day:?} is not a number"))?;
    let year: i64 = year
        .parse()
        .with_context(|| format!("year {year:?} is not a number"))?;
    ensure!((1..=31).contains(&day), "day {day} out of range");
    // Howard Hinnant's days_from_civil (proleptic Gregorian calendar).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u32::try_from(days * 86_400 + 12 * 3_600).context("date before 1970 or after 2106")
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
