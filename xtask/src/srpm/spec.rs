//! The spec: rendered from `rpm/nvidia_peer_memory.spec.tera` for one rpm
//! distro entry, and read back for what the source package header repeats
//! (BuildRequires, the changelog), so the spec stays the one source of both.

use super::writer::{ChangelogEntry, parse_dependency};
use crate::distro::{DATA_FILE, Distro, Family, Packaging};
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

/// Checks that an rpm-family entry has everything the spec template uses,
/// with a message naming the entry, the field and the file.
pub fn validate_rpm_distro(distro: &Distro) -> Result<()> {
    ensure!(
        distro.family == Family::Rpm,
        "distro `{}` is a {} distribution; build-srpm needs an rpm one (see {DATA_FILE})",
        distro.id,
        distro.family
    );
    distro.require("rpm_group", distro.rpm_group.as_ref())?;
    for (field, list) in [
        ("build_requires", &distro.build_requires),
        ("dkms_requires", &distro.dkms_requires),
    ] {
        if list.is_empty() {
            bail!(
                "{DATA_FILE}: distro `{}` has no `{field}`; list the package names, e.g. [kernel-devel, gcc, make]",
                distro.id
            );
        }
        for item in list {
            parse_dependency(item).with_context(|| {
                format!(
                    "{DATA_FILE}: distro `{}`, `{field}` item {item:?}",
                    distro.id
                )
            })?;
        }
    }
    Ok(())
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
    validate_rpm_distro(distro)?;
    let mut context = render::base_context(packaging, distro, version, release, source_date_epoch);
    context.insert("license", env!("CARGO_PKG_LICENSE"));
    context.insert("helper_name", HELPER_NAME);
    context.insert("helper_dir", HELPER_DIR);
    render::render_file(&crate::workspace::path(TEMPLATE), &context)
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
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Fixed inputs of the golden specs (Sun Nov 22 2026 03:30:45 UTC), so
    /// they change only when a template, the data or the version does.
    const GOLDEN_EPOCH: u64 = 1_795_318_245;
    const GOLDEN_RELEASE: u32 = 1;
    /// A fixed version too: a version bump alone does not touch the goldens.
    const GOLDEN_VERSION: &str = "1.4.0";

    /// The golden copy of the spec rendered for `distro_id`.
    fn golden_path(distro_id: &str) -> PathBuf {
        crate::workspace::path(&format!("xtask/golden/rpm/{distro_id}.spec"))
    }

    /// Every rpm distro entry's rendered spec equals `xtask/golden/rpm/<id>.spec`.
    /// Regenerate after an intended change with
    /// `UPDATE_GOLDEN=1 cargo test -p xtask golden` (the same switch as the
    /// deb golden test) and review the diff.
    #[test]
    fn rendered_specs_match_their_golden_files() {
        let packaging = Packaging::load().unwrap();
        let update = std::env::var_os("UPDATE_GOLDEN").is_some();
        let mut stale = Vec::new();
        let mut checked = 0;
        for distro in packaging.family(Family::Rpm) {
            let spec = render(
                &packaging,
                distro,
                GOLDEN_VERSION,
                GOLDEN_RELEASE,
                GOLDEN_EPOCH,
            )
            .unwrap();
            let path = golden_path(&distro.id);
            if update {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &spec).unwrap();
            } else if std::fs::read_to_string(&path).ok().as_deref() != Some(spec.as_str()) {
                stale.push(path.display().to_string());
            }
            checked += 1;
        }
        assert!(
            checked >= 7,
            "rhel8/9/10, rocky9, alma9, fedora, sles15 expected"
        );
        assert!(
            stale.is_empty(),
            "rendered spec differs from (or lacks) its golden file: {stale:?}\n\
             if the change is intended, run `UPDATE_GOLDEN=1 cargo test -p xtask golden` and review `git diff xtask/golden/rpm`"
        );
        // No golden file without a distro entry (a removed entry's leftover).
        let ids: Vec<String> = packaging
            .family(Family::Rpm)
            .map(|d| format!("{}.spec", d.id))
            .collect();
        for entry in std::fs::read_dir(crate::workspace::path("xtask/golden/rpm")).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            assert!(
                ids.contains(&name),
                "xtask/golden/rpm/{name} has no rpm distro entry; delete it"
            );
        }
    }

    #[test]
    fn the_spec_carries_version_data_and_kernel_handling() {
        let packaging = Packaging::load().unwrap();
        let sles = packaging.find("sles15").unwrap();
        let spec = render(&packaging, sles, "2.0.1", 3, GOLDEN_EPOCH).unwrap();
        assert!(spec.contains("\nVersion:        2.0.1\n"));
        assert!(spec.contains("\nRelease:        3\n"));
        assert!(spec.contains("BuildRequires:  kernel-default-devel\n"));
        assert!(spec.contains("make -C kmod KVER=%{KVERSION}"));
        assert!(spec.contains("%config(noreplace) %{_sysconfdir}/infiniband/nv_peer_mem.conf"));
        assert!(spec.contains("\n/lib/modules/%{KVERSION}/extra/%{module}.ko\n"));
        assert!(
            !spec.contains("%dir /lib/modules"),
            "the kernel's directories are not ours"
        );
        assert!(
            !spec.contains("{{") && !spec.contains("{%"),
            "unrendered template syntax"
        );
        let requires: Vec<_> = build_requires(&spec)
            .unwrap()
            .into_iter()
            .map(|d| d.name)
            .collect();
        assert_eq!(requires, sles.build_requires);
    }

    #[test]
    fn changelog_and_description_are_read_back() {
        let packaging = Packaging::load().unwrap();
        let spec = render(
            &packaging,
            packaging.find("rhel9").unwrap(),
            "2.0.1",
            1,
            GOLDEN_EPOCH,
        )
        .unwrap();
        let entries = changelog(&spec).unwrap();
        assert_eq!(entries.len(), 1);
        // Sun Nov 22 2026, 12:00 UTC.
        assert_eq!(entries[0].time, 1_795_348_800);
        assert!(entries[0].name.ends_with("- 2.0.1-1"));
        assert!(entries[0].text.starts_with("- Version "));
        let (summary, description) = summary_and_description(&spec).unwrap();
        assert_eq!(
            summary,
            "NVIDIA GPUDirect RDMA peer memory client kernel module"
        );
        assert!(description.starts_with("nv_peer_mem lets"));
        assert!(
            !description.contains("%package"),
            "description stops at the next section"
        );
    }

    #[test]
    fn changelog_parsing_rejects_bad_headings() {
        let spec = "%changelog\n* Sun Nox 22 2026 A <a@b> - 1-1\n- x\n";
        assert!(changelog(spec).is_err());
        let spec = "%changelog\n- text before any heading\n";
        assert!(changelog(spec).is_err());
        assert_eq!(noon_utc("Jan", "1", "1970").unwrap(), 43_200);
        assert_eq!(noon_utc("Feb", "29", "2000").unwrap(), 951_825_600);
    }

    #[test]
    fn an_incomplete_rpm_entry_or_a_deb_entry_is_refused_by_name() {
        let packaging = Packaging::parse(
            "maintainer: A B <a@b.example>\ndistros:\n  - {id: el1, name: A, family: rpm, rpm_group: G, build_requires: [gcc]}\n  - {id: deb1, name: B, family: deb}\n  - {id: el2, name: C, family: rpm, rpm_group: G, build_requires: ['gcc >> 1'], dkms_requires: [dkms]}\n",
        )
        .unwrap();
        let error = format!(
            "{:#}",
            validate_rpm_distro(packaging.find("el1").unwrap()).unwrap_err()
        );
        assert!(
            error.contains("el1") && error.contains("dkms_requires"),
            "{error}"
        );
        let error = format!(
            "{:#}",
            validate_rpm_distro(packaging.find("deb1").unwrap()).unwrap_err()
        );
        assert!(error.contains("rpm one"), "{error}");
        let error = format!(
            "{:#}",
            validate_rpm_distro(packaging.find("el2").unwrap()).unwrap_err()
        );
        assert!(
            error.contains("el2") && error.contains("operator"),
            "{error}"
        );
    }
}
