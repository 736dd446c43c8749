//! `cargo xtask build-repo`: turns packages into a signed apt or dnf/zypper
//! repository, or adds them to one, with the distributions' own tools
//! (apt-ftparchive, createrepo_c, gpg). Packages already published stay
//! (nodes still on the previous kernel need theirs); publishing a file name
//! again with other contents is refused. Every input is checked before the
//! repository is staged, and the staged repository replaces the old one in
//! one step (stage.rs), so a failure leaves the old one as it was.
//! docs/fleet.md says how a site serves it and how nodes trust it.

mod apt;
mod check;
mod gpg;
mod interrupt;
mod prune;
mod removal;
mod report;
mod rpm;
mod stage;

use crate::error::{BadInput, print_report};
use crate::workspace;
use anyhow::{Context, Result};
use check::{Checked, check};
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
    /// apt only: hours an index stays under by-hash/ once no Release names
    /// it, so that a node or a mirror that read an older InRelease still
    /// finds it: longer than the slowest node's update and the mirrors'
    /// sync. Give it on every publish (the cron line too): a run without
    /// it keeps 24.
    #[arg(long, value_name = "HOURS", default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..=8760))]
    pub by_hash_hours: u64,
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
        by_hash_keep: args.by_hash_hours * 3_600,
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

/// Writes @bytes to @path through a new inode (a temporary file renamed
/// over it): the staged repository shares inodes with the served one.
pub fn replace_file(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::tarball::write_atomically(path, bytes)
}
