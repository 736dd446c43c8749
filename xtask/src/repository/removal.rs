//! `build-repo --remove NAME[=VERSION]`: taking published packages out of a
//! repository (issue 58: an old kernel's module packages stayed for ever,
//! and a pool file deleted by hand left the metapackage depending on a
//! module that was gone). The files go from the staged copy, under the
//! lock, and the indexes are written again, as for a publish. A removal
//! that would leave a published package depending on what goes (the
//! kernel series' metapackage on its module package) is refused: bad
//! input, the repository unchanged, naming the dependent to remove too.

use super::Format;
use crate::error::BadInput;
use anyhow::{Context, Result, bail};
use std::cmp::Ordering;
use std::path::Path;
use std::process::Command;

/// One `--remove` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    pub name: String,
    pub version: Option<String>,
}

impl Removal {
    /// `NAME` or `NAME=VERSION`, in the characters package names and
    /// versions are made of (Debian Policy 5.6.1 and 5.6.12; rpm's).
    pub fn parse(text: &str) -> Result<Removal> {
        let (name, version) = match text.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (text, None),
        };
        let name_ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+.-_".contains(&b));
        let version_ok = version.is_none_or(|v| {
            !v.is_empty()
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".+~-:_^".contains(&b))
        });
        if !name_ok || !version_ok {
            bail!(BadInput::error(format!(
                "--remove {text:?}: give a package name, or NAME=VERSION as `dpkg-deb -f` or `rpm -qp` print them"
            )));
        }
        Ok(Removal {
            name: name.to_owned(),
            version: version.map(str::to_owned),
        })
    }

    fn matches(&self, p: &Published) -> bool {
        p.name == self.name && self.version.as_ref().is_none_or(|v| *v == p.version)
    }
}

/// One relation: a package name and maybe an operator and a version.
type Relation = (String, Option<(String, String)>);

/// A published package: its file (relative to the repository), name,
/// version and what it depends on (each a list of alternatives, each a
/// name and maybe an operator and a version).
#[derive(Debug, Clone)]
pub struct Published {
    pub file: String,
    pub name: String,
    pub version: String,
    pub depends: Vec<Vec<Relation>>,
}

/// Every package published in @repo: the suite's pool (apt) or packages/
/// (rpm).
pub fn published(format: Format, repo: &Path, pool: &str) -> Result<Vec<Published>> {
    let (dir, extension) = match format {
        Format::Apt => (repo.join(pool), "deb"),
        Format::Rpm => (repo.join("packages"), "rpm"),
    };
    let mut out = Vec::new();
    for path in crate::files_below::files_below(&dir, extension)? {
        let file = path
            .strip_prefix(repo)
            .expect("below the repository")
            .to_string_lossy()
            .into_owned();
        out.push(read(format, &path, file)?);
    }
    Ok(out)
}

/// The package at @path as if published at @file.
pub fn read(format: Format, path: &Path, file: String) -> Result<Published> {
    match format {
        Format::Apt => read_deb(path, file),
        Format::Rpm => read_rpm(path, file),
    }
}

fn read_deb(path: &Path, file: String) -> Result<Published> {
    let out = Command::new("dpkg-deb")
        .args([
            "--show",
            "--showformat",
            "${Package}\\t${Version}\\t${Pre-Depends}, ${Depends}",
        ])
        .arg(path)
        .output()
        .context("running dpkg-deb (install dpkg)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.trim_end().splitn(3, '\t');
    let (Some(name), Some(version), Some(depends)) = (fields.next(), fields.next(), fields.next())
    else {
        bail!("dpkg-deb cannot read the published {}", path.display());
    };
    let depends = depends
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(|group| group.split('|').map(relation).collect())
        .collect();
    Ok(Published {
        file,
        name: name.to_owned(),
        version: version.to_owned(),
        depends,
    })
}

fn read_rpm(path: &Path, file: String) -> Result<Published> {
    let query = |args: &[&str]| -> Result<String> {
        let out = Command::new("rpm")
            .args(["-qp", "--nosignature", "--nodigest"])
            .args(args)
            .arg(path)
            .output()
            .context("running rpm (install rpm)")?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let id = query(&["--qf", "%{NAME}\\t%{VERSION}-%{RELEASE}"])?;
    let Some((name, version)) = id.trim().split_once('\t') else {
        bail!("rpm cannot read the published {}", path.display());
    };
    let depends = query(&["--requires"])?
        .lines()
        .filter(|l| !l.starts_with("rpmlib(") && !l.starts_with('/'))
        .map(|l| vec![relation(l)])
        .collect();
    Ok(Published {
        file,
        name: name.to_owned(),
        version: version.to_owned(),
        depends,
    })
}

/// `name (op version)` (Debian) or `name op version` (rpm).
fn relation(text: &str) -> Relation {
    let text = text.trim().replace(['(', ')'], " ");
    let mut words = text.split_whitespace();
    let name = words.next().unwrap_or_default();
    // An architecture qualifier (name:any) names the same package.
    let name = name.split(':').next().unwrap_or_default().to_owned();
    match (words.next(), words.next()) {
        (Some(op), Some(version)) => (name, Some((op.to_owned(), version.to_owned()))),
        _ => (name, None),
    }
}

/// The files of @published that @removals name; refused (bad input) when a
/// removal names nothing published, or when what is left depends on a
/// package that goes and that nothing left satisfies.
pub fn plan(format: Format, published: &[Published], removals: &[Removal]) -> Result<Vec<String>> {
    for r in removals {
        if !published.iter().any(|p| r.matches(p)) {
            bail!(BadInput::error(format!(
                "--remove {}{}: no such package is published here",
                r.name,
                r.version
                    .as_ref()
                    .map(|v| format!("={v}"))
                    .unwrap_or_default()
            )));
        }
    }
    let (going, staying): (Vec<&Published>, Vec<&Published>) = published
        .iter()
        .partition(|p| removals.iter().any(|r| r.matches(p)));
    for p in &staying {
        for group in &p.depends {
            // Only what this repository held matters: a dependency on
            // Debian's kernel or on MLNX_OFED is the nodes' other sources'.
            if !group
                .iter()
                .any(|(n, _)| going.iter().any(|g| g.name == *n))
            {
                continue;
            }
            let satisfied = group.iter().try_fold(false, |done, (name, constraint)| {
                if done {
                    return Ok(true);
                }
                let mut any = false;
                for s in staying.iter().filter(|s| s.name == *name) {
                    if satisfies(format, &s.version, constraint.as_ref())? {
                        any = true;
                    }
                }
                // A name this repository never held is satisfied elsewhere.
                let ours = published.iter().any(|x| x.name == *name);
                anyhow::Ok(any || !ours)
            })?;
            if !satisfied {
                let needed = group
                    .iter()
                    .map(|(n, c)| match c {
                        Some((op, v)) => format!("{n} ({op} {v})"),
                        None => n.clone(),
                    })
                    .collect::<Vec<_>>()
                    .join(" | ");
                bail!(BadInput::error(format!(
                    "removing that would leave {} {} (published) depending on {needed}, which would be gone: remove it too (--remove {}={}) or publish what it needs first",
                    p.name, p.version, p.name, p.version
                )));
            }
        }
    }
    Ok(going.iter().map(|p| p.file.clone()).collect())
}

/// Whether @version satisfies @constraint: dpkg's comparison for apt;
/// for rpm, `=` as the same version-release and any other operator by
/// rpm's own comparison (rpmdev-vercmp is not on every build host: `=`,
/// which this project's kmod relations use, is compared exactly, others
/// are taken as satisfied).
fn satisfies(format: Format, version: &str, constraint: Option<&(String, String)>) -> Result<bool> {
    let Some((op, wanted)) = constraint else {
        return Ok(true);
    };
    match format {
        Format::Apt => {
            // The orders each operator admits (Debian Policy 7.1).
            let admits: &[Ordering] = match op.as_str() {
                "=" => &[Ordering::Equal],
                ">=" => &[Ordering::Equal, Ordering::Greater],
                "<=" => &[Ordering::Equal, Ordering::Less],
                ">>" => &[Ordering::Greater],
                "<<" => &[Ordering::Less],
                other => bail!("unknown Debian relation operator {other:?}"),
            };
            Ok(admits.contains(&crate::dpkg_version::order(version, wanted)?))
        }
        Format::Rpm => Ok(match op.as_str() {
            "=" => {
                let strip = |v: &str| v.strip_prefix("0:").unwrap_or(v).to_owned();
                strip(version) == strip(wanted)
                    || strip(version).starts_with(&format!("{}-", strip(wanted)))
            }
            _ => true,
        }),
    }
}

/// A published package for tests: @depends as a Debian Depends field's
/// groups (`a (= 1) | b`).
#[cfg(test)]
pub fn test_package(name: &str, version: &str, depends: &[&str]) -> Published {
    Published {
        file: format!("pool/{name}_{version}.deb"),
        name: name.to_owned(),
        version: version.to_owned(),
        depends: depends
            .iter()
            .map(|g| g.split('|').map(relation).collect())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str, version: &str, depends: &[&str]) -> Published {
        test_package(name, version, depends)
    }

    #[test]
    fn a_metapackage_keeps_its_module_and_goes_with_it() {
        let repo = [
            p(
                "nvidia-peer-memory-modules-6.1.0-56-amd64",
                "1.4.0-1",
                &["linux-image-6.1.0-56-amd64"],
            ),
            p("nvidia-peer-memory-modules-6.1.0-57-amd64", "1.4.0-1", &[]),
            p(
                "nvidia-peer-memory-modules-amd64",
                "6.1.192-2+1.4.0.1",
                &[
                    "nvidia-peer-memory-modules-6.1.0-57-amd64 (= 1.4.0-1)",
                    "linux-image-amd64 (= 6.1.192-2)",
                ],
            ),
        ];
        let old = Removal::parse("nvidia-peer-memory-modules-6.1.0-56-amd64").unwrap();
        assert_eq!(
            plan(Format::Apt, &repo, &[old]).unwrap(),
            vec!["pool/nvidia-peer-memory-modules-6.1.0-56-amd64_1.4.0-1.deb"]
        );
        let current = Removal::parse("nvidia-peer-memory-modules-6.1.0-57-amd64=1.4.0-1").unwrap();
        let e = plan(Format::Apt, &repo, std::slice::from_ref(&current)).unwrap_err();
        assert!(e.to_string().contains("nvidia-peer-memory-modules-amd64 6.1.192-2+1.4.0.1 (published) depending on nvidia-peer-memory-modules-6.1.0-57-amd64 (= 1.4.0-1)"), "{e}");
        assert!(crate::error::is_bad_input(&e));
        let meta = Removal::parse("nvidia-peer-memory-modules-amd64").unwrap();
        assert_eq!(plan(Format::Apt, &repo, &[current, meta]).unwrap().len(), 2);
        let none = Removal::parse("nvidia-peer-memory-modules-5.10.0-1-amd64").unwrap();
        assert!(
            plan(Format::Apt, &repo, &[none])
                .unwrap_err()
                .to_string()
                .contains("no such package is published")
        );
        assert!(Removal::parse("../x").is_err() && Removal::parse("a=").is_err());
    }
}
