//! Renders packaging templates with Tera.
//!
//! A template directory (e.g. `debian/`) is walked in sorted order: files
//! named `*.tera` are rendered and lose the suffix, every other file is
//! copied verbatim (so shell code with `${#x}` needs no escaping). The
//! execute bit comes from the file on disk. Undefined variables are errors,
//! so a template that outgrows its data fails loudly.
//!
//! Every template sees `base_context`: `version`, `release`, `maintainer`,
//! `homepage` (null when distros.yaml has none),
//! `distro.*` (the `packaging/distros.yaml` entry as written), `dkms_name`,
//! and the reproducible timestamp in the formats changelogs need
//! (`date_rfc2822`, `date_rpm_changelog`, `year`). Callers add their
//! family's variables (e.g. build-deb's `debian_version`).

use crate::distro::{Distro, Packaging};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// The kernel module's name: DKMS module name, `/usr/src/<dkms_name>-<ver>`,
/// the systemd unit and the config file all use it.
pub const DKMS_NAME: &str = "nv_peer_mem";

/// One rendered or copied file of a template directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedFile {
    /// Path relative to the template directory, `.tera` suffix removed.
    pub path: String,
    pub contents: String,
    pub executable: bool,
}

/// Variables every template may use. `version` is the workspace version
/// (pass `workspace::version()`; tests pass a fixed one).
pub fn base_context(
    packaging: &Packaging,
    distro: &Distro,
    version: &str,
    release: u32,
    source_date_epoch: u64,
) -> tera::Context {
    let mut context = tera::Context::new();
    context.insert("version", version);
    // The first version of the next major release: module packages accept
    // the service package from their own version up to it (docs/fleet.md,
    // "The service relation").
    let major: u64 = version
        .split('.')
        .next()
        .and_then(|major| major.parse().ok())
        .unwrap_or(0);
    context.insert("next_major", &(major + 1));
    context.insert("release", &release);
    context.insert("maintainer", &packaging.maintainer);
    context.insert("homepage", &packaging.homepage);
    context.insert("distro", distro);
    context.insert("dkms_name", DKMS_NAME);
    context.insert("source_date_epoch", &source_date_epoch);
    let date = CivilDate::from_epoch(source_date_epoch);
    // debian/changelog (RFC 5322), %changelog ("Sun Nov 22 2026").
    context.insert("date_rfc2822", &date.rfc2822());
    context.insert("date_rpm_changelog", &date.rpm_changelog());
    context.insert("year", &date.year);
    context
}

/// @seconds since the epoch as RFC 2822 (`Sun, 09 Sep 2001 01:46:40
/// +0000`): debian/changelog's dates, and an apt Release file's Date.
pub fn rfc2822(seconds: u64) -> String {
    CivilDate::from_epoch(seconds).rfc2822()
}

/// Renders (or copies) every file below `dir`, sorted by path.
pub fn render_dir(dir: &Path, context: &tera::Context) -> Result<Vec<RenderedFile>> {
    if !dir.is_dir() {
        bail!(
            "template directory {} is missing; restore it from git",
            dir.display()
        );
    }
    let mut sources = Vec::new();
    collect_files(dir, dir, &mut sources)?;
    sources.sort();
    let mut rendered = Vec::with_capacity(sources.len());
    for relative in sources {
        let source = dir.join(&relative);
        let relative = relative
            .to_str()
            .with_context(|| format!("{} is not UTF-8", source.display()))?;
        let (path, contents) = match relative.strip_suffix(".tera") {
            Some(stripped) => (stripped.to_owned(), render_file(&source, context)?),
            None => (
                relative.to_owned(),
                std::fs::read_to_string(&source).with_context(|| {
                    format!(
                        "reading {}; packaging files must be UTF-8 text",
                        source.display()
                    )
                })?,
            ),
        };
        rendered.push(RenderedFile {
            path,
            contents,
            executable: is_executable(&source)?,
        });
    }
    Ok(rendered)
}

/// Renders one template file.
pub fn render_file(template: &Path, context: &tera::Context) -> Result<String> {
    let text = std::fs::read_to_string(template).with_context(|| {
        format!(
            "template {} is missing or unreadable; restore it from git",
            template.display()
        )
    })?;
    let name = template.to_string_lossy();
    let mut tera = tera::Tera::default();
    tera.autoescape_on(vec![]);
    tera.add_raw_template(&name, &text)
        .map_err(|e| anyhow::anyhow!("{}", tera_chain(&e)))
        .with_context(|| {
            format!(
                "parsing template {}; fix its Tera syntax",
                template.display()
            )
        })?;
    tera.render(&name, context)
        .map_err(|e| anyhow::anyhow!("{}", tera_chain(&e)))
        .with_context(|| {
            format!(
                "rendering {}; a variable it uses is missing from packaging/distros.yaml or the template has a typo",
                template.display()
            )
        })
}

/// Tera puts the useful part (which variable, which line) in the source
/// chain; flatten it into one message.
fn tera_chain(error: &tera::Error) -> String {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(root, &path, out)?;
        } else {
            out.push(
                path.strip_prefix(root)
                    .expect("walked below root")
                    .to_owned(),
            );
        }
    }
    Ok(())
}

fn is_executable(path: &Path) -> Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o111 != 0)
}

/// Seconds since the epoch of an RFC 2822 date in UTC as [`rfc2822`] and
/// apt-ftparchive write it (`Fri, 27 Nov 2026 01:55:23 +0000`, or `UTC`
/// for the zone); None for anything else.
pub fn parse_rfc2822(text: &str) -> Option<u64> {
    let mut words = text.split_whitespace();
    let _weekday = words.next()?;
    let day: i64 = words.next()?.parse().ok()?;
    let month = words.next()?;
    let month = MONTHS.iter().position(|m| *m == month)? as i64 + 1;
    let year: i64 = words.next()?.parse().ok()?;
    let time: Vec<i64> = words
        .next()?
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let ["+0000" | "UTC" | "GMT"] = [words.next()?] else {
        return None;
    };
    let [h, m, sec] = time[..] else { return None };
    // Howard Hinnant's days_from_civil (proleptic Gregorian).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + h * 3600 + m * 60 + sec).ok()
}

/// A UTC calendar date and time, from seconds since the epoch (no chrono:
/// Tera is built without its date features, and two formats do not need a
/// calendar library).
#[derive(Debug, PartialEq, Eq)]
struct CivilDate {
    year: i64,
    month: u32,
    day: u32,
    weekday: u32, // 0 = Sunday
    seconds_of_day: u64,
}

const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

impl CivilDate {
    fn from_epoch(seconds: u64) -> CivilDate {
        let days = (seconds / 86_400) as i64;
        // Howard Hinnant's days_from_civil inverse (proleptic Gregorian).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        CivilDate {
            year,
            month,
            day,
            weekday: ((days + 4).rem_euclid(7)) as u32, // 1970-01-01 was a Thursday
            seconds_of_day: seconds % 86_400,
        }
    }

    fn rfc2822(&self) -> String {
        let s = self.seconds_of_day;
        format!(
            "{}, {:02} {} {} {:02}:{:02}:{:02} +0000",
            WEEKDAYS[self.weekday as usize],
            self.day,
            MONTHS[self.month as usize - 1],
            self.year,
            s / 3600,
            s / 60 % 60,
            s % 60
        )
    }

    fn rpm_changelog(&self) -> String {
        format!(
            "{} {} {:02} {}",
            WEEKDAYS[self.weekday as usize],
            MONTHS[self.month as usize - 1],
            self.day,
            self.year
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc2822_dates_parse_back() {
        for t in [0, 951_782_400, 1_795_744_523, 4_102_444_799] {
            assert_eq!(super::parse_rfc2822(&super::rfc2822(t)), Some(t));
        }
        assert_eq!(
            super::parse_rfc2822("Fri, 27 Nov 2026 01:55:23 UTC"),
            Some(1_795_744_523)
        );
        assert_eq!(
            super::parse_rfc2822("Fri, 27 Nov 2026 01:55:23 +0100"),
            None
        );
        assert_eq!(super::parse_rfc2822("yesterday"), None);
    }

    use super::*;

    #[test]
    fn dates_match_known_values() {
        // `date -u -R -d @0`, `@951782400` (a leap day), `@1795305600`.
        assert_eq!(
            CivilDate::from_epoch(0).rfc2822(),
            "Thu, 01 Jan 1970 00:00:00 +0000"
        );
        assert_eq!(
            CivilDate::from_epoch(951_782_400).rfc2822(),
            "Tue, 29 Feb 2000 00:00:00 +0000"
        );
        assert_eq!(
            CivilDate::from_epoch(1_795_318_245).rfc2822(),
            "Sun, 22 Nov 2026 03:30:45 +0000"
        );
        assert_eq!(
            CivilDate::from_epoch(1_795_318_245).rpm_changelog(),
            "Sun Nov 22 2026"
        );
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-render-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        dir
    }

    #[test]
    fn tera_files_are_rendered_and_others_copied_verbatim() {
        let dir = scratch("dir");
        std::fs::write(dir.join("b.tera"), "v={{ version }} r={{ release }}\n").unwrap();
        std::fs::write(dir.join("sub/a.sh"), "echo ${#x} {{ version }}\n").unwrap();
        let mut context = tera::Context::new();
        context.insert("version", "9.9");
        context.insert("release", &3);
        let files = render_dir(&dir, &context).unwrap();
        let got: Vec<_> = files
            .iter()
            .map(|f| (f.path.as_str(), f.contents.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("b", "v=9.9 r=3\n"),
                ("sub/a.sh", "echo ${#x} {{ version }}\n")
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn undefined_variables_and_missing_templates_are_clear_errors() {
        let dir = scratch("errors");
        std::fs::write(dir.join("x.tera"), "{{ distro.no_such_field }}").unwrap();
        let error = format!("{:#}", render_dir(&dir, &tera::Context::new()).unwrap_err());
        assert!(
            error.contains("x.tera") && error.contains("distros.yaml"),
            "{error}"
        );
        let error = format!(
            "{:#}",
            render_file(&dir.join("absent.tera"), &tera::Context::new()).unwrap_err()
        );
        assert!(
            error.contains("absent.tera") && error.contains("restore it from git"),
            "{error}"
        );
        let error = format!(
            "{:#}",
            render_dir(&dir.join("nope"), &tera::Context::new()).unwrap_err()
        );
        assert!(error.contains("missing"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
