//! `build-repo --keep-newest N`: the pruning an operator runs for years
//! (issue 58): of each kernel series' per-kernel module packages
//! (`nvidia-peer-memory-modules-<release>`, build-modules' names) only
//! those of the newest N kernels stay, with every metapackage version that
//! depends on one that goes, except a metapackage's newest version: its
//! module stays whatever its age, as the metapackage is what nodes follow.
//! A series is the kernels of one flavour and one upstream major.minor
//! (`6.1.0-57-amd64` and `6.1.0-58-amd64`; `6.12.95+deb12-amd64` is
//! another, as is `6.1.0-57-cloud-amd64`): a node follows one, and the
//! newest of one says nothing of another. apt repositories only: a kmod
//! rpm carries its kernel in its release, not its name (`--remove
//! NAME=VERSION` takes those out). What it plans goes through
//! removal::plan, so nothing left depends on what goes.

use super::removal::{Published, Removal};
use anyhow::Result;
use std::cmp::Ordering;

/// The per-kernel module package's name prefix (prebuilt::package).
const MODULE_PREFIX: &str = "nvidia-peer-memory-modules-";

/// A kernel release's series: its flavour (prebuilt::kernel::flavour, as
/// build-modules reads it) and upstream major.minor; None where @release
/// is not a kernel release (a metapackage's `amd64`, `amd64-backports`).
fn series(release: &str) -> Option<(String, String)> {
    let version = release.split(['-', '+']).next()?;
    let mut numbers = version.split('.');
    let (major, minor) = (numbers.next()?, numbers.next()?);
    let numeric = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    if !numeric(major) || !numeric(minor) {
        return None;
    }
    let flavour = crate::prebuilt::kernel::flavour(release)?;
    Some((flavour.to_owned(), format!("{major}.{minor}")))
}

/// The removals that keep the newest @keep kernels of each series among
/// @published (what the repository will hold after this run's additions).
pub fn plan(published: &[Published], keep: usize) -> Result<Vec<Removal>> {
    // Each series' kernels, newest first.
    let mut by_series: std::collections::BTreeMap<(String, String), Vec<String>> =
        Default::default();
    for p in published {
        let Some(release) = p.name.strip_prefix(MODULE_PREFIX) else {
            continue;
        };
        if let Some(s) = series(release) {
            let kernels = by_series.entry(s).or_default();
            if !kernels.iter().any(|k| k == release) {
                kernels.push(release.to_owned());
            }
        }
    }
    let mut old: Vec<String> = Vec::new();
    for kernels in by_series.values_mut() {
        let mut error = None;
        kernels.sort_by(|a, b| {
            crate::dpkg_version::order(b, a).unwrap_or_else(|e| {
                error = Some(e);
                Ordering::Equal
            })
        });
        if let Some(e) = error {
            return Err(e);
        }
        old.extend(
            kernels
                .iter()
                .skip(keep)
                .map(|k| format!("{MODULE_PREFIX}{k}")),
        );
    }
    // A metapackage's newest version keeps its module; its older versions
    // that need a module that goes, go with it.
    let needs = |p: &Published, module: &str| {
        p.depends
            .iter()
            .any(|group| group.iter().any(|(n, _)| n == module))
    };
    let dependents: Vec<&Published> = published
        .iter()
        .filter(|p| old.iter().any(|m| needs(p, m)))
        .collect();
    // The newest version of each dependent's name, found once per name.
    let mut newest: std::collections::BTreeMap<&str, &str> = Default::default();
    for p in &dependents {
        if newest.contains_key(p.name.as_str()) {
            continue;
        }
        let mut best = p.version.as_str();
        for q in published.iter().filter(|q| q.name == p.name) {
            if crate::dpkg_version::order(&q.version, best)? == Ordering::Greater {
                best = &q.version;
            }
        }
        newest.insert(&p.name, best);
    }
    let kept_for_meta: Vec<String> = old
        .iter()
        .filter(|m| {
            dependents
                .iter()
                .any(|p| needs(p, m) && newest.get(p.name.as_str()) == Some(&p.version.as_str()))
        })
        .cloned()
        .collect();
    old.retain(|m| !kept_for_meta.contains(m));
    let mut removals: Vec<Removal> = old
        .iter()
        .map(|name| Removal {
            name: name.clone(),
            version: None,
        })
        .collect();
    for p in published {
        if old.iter().any(|m| needs(p, m)) {
            removals.push(Removal {
                name: p.name.clone(),
                version: Some(p.version.clone()),
            });
        }
    }
    Ok(removals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_a_flavour_and_an_upstream_major_minor() {
        let s = |f: &str, v: &str| Some((f.to_owned(), v.to_owned()));
        assert_eq!(series("6.1.0-57-amd64"), s("amd64", "6.1"));
        assert_eq!(series("6.1.0-58-cloud-amd64"), s("cloud-amd64", "6.1"));
        assert_eq!(series("6.12.95+deb12-amd64"), s("amd64", "6.12"));
        assert_eq!(series("6.8.0-45-generic"), s("generic", "6.8"));
        assert_eq!(series("amd64"), None);
        assert_eq!(series("amd64-backports"), None);
        assert_eq!(series("6"), None);
    }

    use super::super::removal::test_package as p;

    fn names(removals: &[Removal]) -> Vec<String> {
        let mut out: Vec<String> = removals
            .iter()
            .map(|r| match &r.version {
                Some(v) => format!("{}={v}", r.name),
                None => r.name.clone(),
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn the_newest_kernels_of_each_series_stay_and_the_metapackage_keeps_its_own() {
        let m = |k: &str| format!("{MODULE_PREFIX}{k}");
        let repo = [
            p(&m("6.1.0-9-amd64"), "1.4.0-1", &[]),
            p(&m("6.1.0-10-amd64"), "1.4.0-1", &[]),
            p(&m("6.1.0-11-amd64"), "1.4.0-1", &[]),
            p(&m("6.12.95+deb12-amd64"), "1.4.0-1", &[]),
            p(
                "nvidia-peer-memory-modules-amd64",
                "6.1.1-1+1.4.0.1",
                &[&m("6.1.0-9-amd64")],
            ),
            p(
                "nvidia-peer-memory-modules-amd64",
                "6.1.2-1+1.4.0.1",
                &[&m("6.1.0-10-amd64")],
            ),
        ];
        // Newest two of 6.1 by dpkg's order (10 and 11, not 9 by text).
        assert_eq!(
            names(&plan(&repo, 2).unwrap()),
            [
                "nvidia-peer-memory-modules-6.1.0-9-amd64",
                "nvidia-peer-memory-modules-amd64=6.1.1-1+1.4.0.1"
            ]
        );
        // One: 11 stays, and 10 too, the metapackage's newest version's.
        assert_eq!(
            names(&plan(&repo, 1).unwrap()),
            [
                "nvidia-peer-memory-modules-6.1.0-9-amd64",
                "nvidia-peer-memory-modules-amd64=6.1.1-1+1.4.0.1"
            ]
        );
        assert!(plan(&repo, 3).unwrap().is_empty());
    }
}
