//! `cargo xtask build-repo`: turns packages into a signed apt or dnf/zypper
//! repository, or adds them to one, with the distributions' own tools
//! (apt-ftparchive, createrepo_c, gpg). Packages already published stay
//! (nodes still on the previous kernel need theirs); publishing a file name
//! again with other contents is refused. Every input is checked before the
//! repository is staged, and the staged repository replaces the old one in
//! one step (stage.rs), so a failure leaves the old one as it was.
//! docs/fleet.md says how a site serves it and how nodes trust it.

mod apt;
mod gpg;
mod interrupt;
mod prune;
mod removal;
mod report;
mod rpm;
mod stage;

use crate::error::{BadInput, print_report};
use crate::workspace;
use anyhow::{Context, Result, bail, ensure};
use stage::{Lock, Stage};
use std::path::{Path, PathBuf};

/// `build-repo --help`'s description.
pub const BUILD_LONG_ABOUT: &str = "Put packages into a repository that nodes install \
from: .deb files into an apt repository (pool/<suite>/<component>/..., dists/<suite>/ \
with Packages, Release, InRelease and Release.gpg, by apt-ftparchive), .rpm files into a \
dnf/zypper repository (packages/, repodata/ with repomd.xml.asc, by createrepo_c). \
--repo is created when missing; packages already in it stay, so nodes still on an older \
kernel keep their module package. With --sign-key the metadata is signed with that gpg \
key (GNUPGHOME or ~/.gnupg), and so is each .rpm put in (rpmsign, for dnf's and \
zypper's gpgcheck=1); without it the repository is unsigned and apt and dnf \
refuse it unless told to trust it, which this project never does.\n\n\
Same packages, same SOURCE_DATE_EPOCH (default: the last commit's time): \
byte-identical repository (rpm signatures too, with an RSA or EdDSA key: they are \
dated at SOURCE_DATE_EPOCH, or when the key was made if later), the metadata's \
signatures and the apt Release's Date and Valid-Until apart: \
a Release is dated when it is published (never before the one it replaces, which \
nodes would keep, nor after the clock) and valid for --valid-for days (default: what \
the published Release has, else 30); run `build-repo --refresh` (from \
cron) well within that to date and sign it again. One build-repo at a time changes \
a repository: a second one waits for the first (a lock beside it, .<name>.lock) and \
adds to its result. NVPM_PUBLISH_TIME (seconds since the epoch) stands in for the \
clock, for tests.\n\n\
`--remove NAME[=VERSION]` takes published packages out (an old kernel's module packages), \
refusing, as bad input, to leave a published package depending on one that goes. \
`--keep-newest N` (apt) keeps the module packages of each kernel series' newest N kernels \
and of every metapackage's newest version, and takes the others out with the metapackage \
versions that need them (docs/fleet.md, \"build-repo\").\n\n\
Exit status: 0 on success; 2 on bad input (no packages, a file that is not a package, \
.deb and .rpm mixed, a file name already published with other contents, an unknown \
signing key, a --repo that is not a repository), with a message naming the fix, and the \
repository left exactly as it was; 1 on other failures (a tool failed), likewise \
leaving it as it was.";

/// Options of `cargo xtask build-repo`.
#[derive(Debug, clap::Args)]
pub struct BuildRepoArgs {
    /// The repository directory (created when missing).
    #[arg(long, value_name = "DIR")]
    pub repo: PathBuf,
    /// apt only: the suite (distribution) the packages are for, as in the
    /// nodes' sources.list: bookworm, trixie, noble.
    #[arg(long, value_name = "NAME")]
    pub suite: Option<String>,
    /// apt only: the component.
    #[arg(long, value_name = "NAME", default_value = "main")]
    pub component: String,
    /// Sign the metadata with this gpg key (fingerprint, key id or user id).
    #[arg(long, value_name = "KEY")]
    pub sign_key: Option<String>,
    /// Days an apt Release stays valid (its Valid-Until): nodes refuse it
    /// after that, so refresh it before. Default: what the repository's
    /// Release has now, else 30.
    #[arg(long, value_name = "DAYS", value_parser = clap::value_parser!(u64).range(1..=3650))]
    pub valid_for: Option<u64>,
    /// Date and sign the repository's metadata again (packages optional):
    /// what a cron job runs well within --valid-for.
    #[arg(long)]
    pub refresh: bool,
    /// Take a published package out (repeatable): NAME, every version of
    /// it, or NAME=VERSION. Refused when a package left would depend on
    /// it (the kernel series' metapackage on its module): remove that too.
    #[arg(long, value_name = "NAME[=VERSION]")]
    pub remove: Vec<String>,
    /// apt only: keep the module packages of each kernel series' newest N
    /// kernels (a series: one flavour, one upstream major.minor), and the
    /// one each metapackage's newest version needs; take the others out,
    /// with the older metapackage versions that need them.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10000))]
    pub keep_newest: Option<u64>,
    /// The packages: .deb (apt) or .rpm (dnf/zypper) files, not both.
    #[arg(value_name = "PACKAGE", required_unless_present_any = ["refresh", "remove", "keep_newest"])]
    pub packages: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Apt,
    Rpm,
}

/// `cargo xtask build-repo`.
pub fn build_repo_command(args: &BuildRepoArgs) -> Result<()> {
    // Checked before anything is created, then again under the lock,
    // where what is published cannot change under the check.
    // `link/` (as tab completion writes a directory) is `link`: one
    // repository, one lock, and a symbolic link resolved (stage.rs).
    let repo: PathBuf = args.repo.components().collect();
    interrupt::watch().context("blocking the signals build-repo cleans up after")?;
    check(args, &repo).map_err(BadInput::wrap)?;
    let lock = Lock::take(&repo)?;
    let Checked {
        format,
        additions,
        removed,
    } = check(args, &lock.target).map_err(BadInput::wrap)?;
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(value) => value.parse().map_err(|_| {
            BadInput::error(format!(
                "SOURCE_DATE_EPOCH={value:?} is not a number of seconds"
            ))
        })?,
        Err(_) => workspace::source_date_epoch()?,
    };
    let signing = match (format, args.sign_key.as_deref()) {
        (Format::Rpm, Some(key)) => Some((key, rpm::signing_date(key, epoch)?)),
        _ => None,
    };
    // --keep-newest alone with nothing to take out: the repository stays as
    // it is (a publish would date and sign it again for nothing).
    if additions.is_empty() && removed.is_empty() && !args.refresh {
        println!(
            "Nothing to prune: {} holds no more than the newest {} kernel(s) of each series, and what its metapackages need.",
            args.repo.display(),
            args.keep_newest.unwrap_or_default()
        );
        return Ok(());
    }
    let stage = Stage::new(&lock)?;
    let mut added = Vec::new();
    for (source, destination) in &additions {
        let path = stage.dir.join(destination);
        if path.exists() {
            continue;
        }
        std::fs::create_dir_all(path.parent().expect("pool paths have a parent"))?;
        std::fs::copy(source, &path)
            .with_context(|| format!("copying {} into the repository", source.display()))?;
        if let Some((key, date)) = signing {
            rpm::sign(&path, key, date)?;
        }
        // createrepo_c records file times: new files get the epoch; files
        // already published keep theirs (they are the served ones, linked)
        let file = std::fs::File::options().write(true).open(&path)?;
        file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(epoch))?;
        added.push(destination.clone());
    }
    for file in &removed {
        let path = stage.dir.join(file);
        std::fs::remove_file(&path)
            .with_context(|| format!("removing {file} from the staged repository"))?;
        // Its source's directory (and letter's) in the pool goes with its
        // last package; the pool itself stays, apt-ftparchive reads it.
        let pool = match format {
            Format::Apt => stage.dir.join(format!(
                "pool/{}/{}",
                args.suite.as_deref().unwrap_or_default(),
                args.component
            )),
            Format::Rpm => stage.dir.join("packages"),
        };
        let mut dir = path.parent();
        while let Some(d) =
            dir.filter(|d| d.starts_with(&pool) && *d != pool && std::fs::remove_dir(d).is_ok())
        {
            dir = d.parent();
        }
    }
    let now = match std::env::var("NVPM_PUBLISH_TIME") {
        Ok(value) => value.parse().map_err(|_| {
            BadInput::error(format!(
                "NVPM_PUBLISH_TIME={value:?} is not a number of seconds"
            ))
        })?,
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let suite = args.suite.as_deref().unwrap_or_default();
    let dating = apt::Dating {
        now,
        valid_for: valid_for(args, &lock.target),
    };
    let key = args.sign_key.as_deref();
    match format {
        Format::Apt => apt::index(&stage.dir, suite, &args.component, key, &dating)?,
        Format::Rpm => rpm::index(&stage.dir, key, epoch)?,
    }
    stage.publish()?;
    print_report(&report::report(
        args,
        format,
        (&added, additions.len(), &removed),
        dating.valid_for,
    ))
}

/// Seconds an apt Release is made valid for: --valid-for, else what the
/// published Release in @repo has, else 30 days.
fn valid_for(args: &BuildRepoArgs, repo: &Path) -> u64 {
    match args.valid_for {
        Some(days) => days * 86_400,
        None => apt::published_validity(repo, args.suite.as_deref().unwrap_or_default())
            .unwrap_or(30 * 86_400),
    }
}

/// Checks everything before the repository is touched: the packages and
/// where each goes, the format, the suite, the key and @repo (--repo, or
/// the directory it links to).
fn check(args: &BuildRepoArgs, repo: &Path) -> Result<Checked> {
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
struct Checked {
    format: Format,
    additions: Vec<(PathBuf, String)>,
    removed: Vec<String>,
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

/// Writes @bytes to @path through a new inode (a temporary file renamed
/// over it): the staged repository shares inodes with the served one.
pub fn replace_file(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::tarball::write_atomically(path, bytes)
}
