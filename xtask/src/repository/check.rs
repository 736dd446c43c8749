//! build-repo's inputs checked before the repository is touched (and
//! again under the lock, where what is published cannot change under the
//! check): the packages and where each goes, the format, the suite, the
//! key, --repo, and what --remove and --keep-newest take out.

use super::{BuildRepoArgs, Format, apt, gpg, prune, removal, rpm};
use anyhow::{Context, Result, bail, ensure};
use std::path::{Path, PathBuf};

/// Checks everything before the repository is touched: the packages and
/// where each goes, the format, the suite, the key and @repo (--repo, or
/// the directory it links to).
pub(super) fn check(args: &BuildRepoArgs, repo: &Path) -> Result<Checked> {
    let mut format = None;
    for path in &args.packages {
        let this = match path.extension().and_then(|e| e.to_str()) {
            Some("deb") => Format::Apt,
            Some("rpm") => Format::Rpm,
            _ => bail!(
                "{}: not a .deb or .rpm file; pass the packages to publish",
                path.display()
            ),
        };
        ensure!(path.is_file(), "{}: no such file", path.display());
        ensure!(
            format.is_none_or(|f| f == this),
            "both .deb and .rpm packages given; an apt and a dnf repository are built by separate runs with separate --repo directories"
        );
        format = Some(this);
    }
    let format = match format {
        Some(f) => f,
        // --refresh or --remove alone: the repository says which it is
        None if changes_alone(args) && repo.join("dists").is_dir() => Format::Apt,
        None if changes_alone(args) && repo.join("repodata").is_dir() => Format::Rpm,
        None if changes_alone(args) => bail!(
            "{}: {} is not a repository build-repo made (no dists/ or repodata/)",
            if args.refresh {
                "--refresh"
            } else if args.remove.is_empty() {
                "--keep-newest"
            } else {
                "--remove"
            },
            repo.display()
        ),
        None => bail!("no packages given; pass the .deb or .rpm files to publish"),
    };
    let mut additions: Vec<(PathBuf, String)> = Vec::new();
    match format {
        Format::Apt => {
            let suite = args.suite.as_deref().context(
                "--suite is needed for an apt repository (the distribution name in the nodes' sources.list, e.g. --suite bookworm)",
            )?;
            for (what, name) in [("--suite", suite), ("--component", args.component.as_str())] {
                ensure!(
                    !name.is_empty()
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                        && !name.starts_with('.'),
                    "{what} {name:?}: use letters, digits and - _ . (e.g. bookworm, main)"
                );
            }
            for path in &args.packages {
                let deb = apt::read(path)?;
                additions.push((path.clone(), apt::pool_path(suite, &args.component, &deb)));
            }
        }
        Format::Rpm => {
            ensure!(
                args.suite.is_none(),
                "--suite is for apt repositories; a dnf/zypper repository is one directory per distribution release (pass a --repo per release)"
            );
            for path in &args.packages {
                additions.push((path.clone(), rpm::pool_path(&rpm::file_name(path)?)));
            }
        }
    }
    for (i, (path, destination)) in additions.iter().enumerate() {
        if let Some((other, _)) = additions[..i].iter().find(|(_, d)| d == destination) {
            ensure!(
                same_bytes(path, other)?,
                "{} and {} are both {destination} with different contents; publish one",
                path.display(),
                other.display()
            );
        }
        let published = repo.join(destination);
        if published.exists() {
            ensure!(
                same_package(format, path, &published)?,
                "{destination} is already published with other contents; nodes may have installed it, so it is never replaced: build the package again with a new --release",
            );
        }
    }
    let parent = repo
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    ensure!(
        parent.is_dir(),
        "--repo {}: its parent directory {} does not exist; create it first (mkdir -p {})",
        repo.display(),
        parent.display(),
        parent.display()
    );
    if repo.exists() {
        ensure!(
            repo.is_dir(),
            "--repo {} is not a directory",
            repo.display()
        );
        let empty = std::fs::read_dir(repo)?.next().is_none();
        let marker = match format {
            Format::Apt => "dists",
            Format::Rpm => "repodata",
        };
        ensure!(
            empty || repo.join(marker).is_dir(),
            "--repo {} is neither empty nor a{} repository (no {marker}/); pass a new directory or one build-repo made",
            repo.display(),
            if format == Format::Apt {
                "n apt"
            } else {
                " dnf"
            }
        );
    }
    ensure!(
        args.keep_newest.is_none() || format == Format::Apt,
        "--keep-newest is for apt repositories: a kmod rpm carries its kernel in its release, not its name; take old ones out with --remove NAME=VERSION (rpm -qp --qf '%{{NAME}}=%{{VERSION}}-%{{RELEASE}}')"
    );
    let removed = if args.remove.is_empty() && args.keep_newest.is_none() {
        Vec::new()
    } else {
        let mut removals = args
            .remove
            .iter()
            .map(|r| removal::Removal::parse(r))
            .collect::<Result<Vec<_>>>()?;
        let pool = match format {
            Format::Apt => format!(
                "pool/{}/{}",
                args.suite.as_deref().unwrap_or_default(),
                args.component
            ),
            Format::Rpm => "packages".to_owned(),
        };
        let mut published = removal::published(format, repo, &pool)?;
        // What this run adds is there after it too: a metapackage may be
        // replaced by one that needs the removed module no more.
        for (source, destination) in &additions {
            if !published.iter().any(|p| p.file == *destination) {
                published.push(removal::read(format, source, destination.clone())?);
            }
        }
        if let Some(keep) = args.keep_newest {
            removals.extend(prune::plan(&published, keep as usize)?);
        }
        let files = removal::plan(format, &published, &removals)?;
        if let Some(both) = files
            .iter()
            .find(|f| additions.iter().any(|(_, d)| d == *f))
        {
            bail!("{both} is both given to publish and named by --remove; do one or the other");
        }
        files
    };
    if let Some(key) = &args.sign_key {
        gpg::check_key(key)?;
    }
    Ok(Checked {
        format,
        additions,
        removed,
    })
}

/// Whether @args change a repository without packages to publish.
fn changes_alone(args: &BuildRepoArgs) -> bool {
    args.refresh || !args.remove.is_empty() || args.keep_newest.is_some()
}

/// What check() found: the format, the packages to add (their source and
/// place) and the published files to remove.
pub(super) struct Checked {
    pub format: Format,
    pub additions: Vec<(PathBuf, String)>,
    pub removed: Vec<String>,
}

fn same_bytes(a: &Path, b: &Path) -> Result<bool> {
    Ok(std::fs::read(a)? == std::fs::read(b)?)
}

/// Whether @given is the package published as @published: the same bytes,
/// or for rpm the same package apart from its signature (build-repo signs
/// what it publishes, so the input published again differs there).
fn same_package(format: Format, given: &Path, published: &Path) -> Result<bool> {
    if same_bytes(given, published)? {
        return Ok(true);
    }
    Ok(format == Format::Rpm
        && rpm::identity(given)?
            .is_some_and(|id| rpm::identity(published).ok().flatten() == Some(id)))
}
