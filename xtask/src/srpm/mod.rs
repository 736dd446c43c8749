//! `cargo xtask build-srpm`: the source RPM that `rpmbuild --rebuild` turns
//! into the kmod and DKMS packages, written without rpmbuild; and
//! `cargo xtask bench-srpm`, its wall time.

pub mod spec;
pub mod writer;

use crate::bench_writer::{BenchArgs, bench_writer};
use crate::distro::{DATA_FILE, Distro, Family, Packaging};
use crate::tarball::{Tarball, write_atomically};
use crate::{BadInput, render, workspace};
use anyhow::{Context, Result, bail, ensure};
use std::path::{Path, PathBuf};
use std::process::Command;
use writer::{SourceFile, SourcePackage};

/// The distro built for when neither --distro nor /etc/os-release names one.
pub const FALLBACK_DISTRO: &str = "rhel9";

/// `build-srpm --help`'s description (main.rs puts it on the subcommand:
/// a variant's doc comment would override one given here).
pub const BUILD_LONG_ABOUT: &str = "Build the source RPM nvidia_peer_memory-<version>-<release>.src.rpm, \
without rpmbuild. `rpmbuild --rebuild` turns it into nvidia_peer_memory (nv_peer_mem.ko for \
one kernel, the boot service and /etc/infiniband/nv_peer_mem.conf) and \
nvidia_peer_memory-dkms (the module sources, built by DKMS for every kernel); pass \
--define 'KVERSION <kernel release>' to build for another kernel than the newest installed \
kernel-devel. The same sources, data and SOURCE_DATE_EPOCH (default: the last commit's \
time) give a byte-identical file.\n\n\
Exit status: 0 on success; 2 on bad input (unknown distro, malformed packaging data, a \
version RPM cannot carry, unusable --out), with a message naming the fix; 1 on other \
failures. No partial file is left behind.";

/// `bench-srpm --help`'s description.
pub const BENCH_LONG_ABOUT: &str = "Run `build-srpm` with this (already built) xtask binary \
RUNS times into a scratch directory and print the wall time per run: min, median, mean \
and max. Figures only; the target is 20 ms or less (the original build_module.sh took \
~115 ms).";

/// Options of `cargo xtask build-srpm`.
#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// Directory the .src.rpm is written to (must exist and be writable).
    #[arg(long, value_name = "DIR", default_value = "/tmp")]
    pub out: PathBuf,
    /// Target distribution: the id of an rpm-family entry of
    /// packaging/distros.yaml (e.g. rhel8, rhel9, rocky9, alma9, fedora,
    /// sles15; an unknown id is answered with the full list). It selects the
    /// spec's BuildRequires, the -dkms package's Requires and the Group tag.
    /// Default: the distribution /etc/os-release names when it has an entry
    /// (RHEL/CentOS, Rocky, Alma, Fedora, SLES/Leap), else rhel9.
    #[arg(long, value_name = "ID")]
    pub distro: Option<String>,
    /// Package release (RPM Release), a positive number. Default: `release`
    /// in packaging/distros.yaml.
    #[arg(long, value_name = "N")]
    pub release: Option<u32>,
}

/// `cargo xtask build-srpm`: builds and prints where, and the next steps.
pub fn build_srpm_command(args: &BuildArgs) -> Result<()> {
    let path = build(args)?;
    let name = path.display();
    println!("Built: {name}\n");
    println!("To install run on RPM based OS:");
    println!("    # rpmbuild --rebuild {name}");
    println!("    # rpm -ivh <path to generated binary rpm file>");
    println!("(for another kernel than the newest installed kernel-devel:");
    println!("    rpmbuild --rebuild --define 'KVERSION <kernel release>' {name})");
    Ok(())
}

/// Builds the source rpm and returns its path. Problems with the inputs
/// (data, templates, options, --out) are `BadInput` (exit status 2).
pub fn build(args: &BuildArgs) -> Result<PathBuf> {
    let (package, path) = inputs(args).map_err(BadInput::wrap)?;
    let bytes = writer::write_source_rpm(&package)?;
    write_atomically(&path, &bytes).map_err(BadInput::wrap)?;
    Ok(path)
}

/// Everything the source rpm holds, and where it goes; checks every input
/// before anything is written.
fn inputs(args: &BuildArgs) -> Result<(SourcePackage, PathBuf)> {
    writer::check_version_part(
        "the workspace version (root Cargo.toml)",
        workspace::VERSION,
    )?;
    let packaging = Packaging::load()?;
    let distro = choose_distro(&packaging, args.distro.as_deref())?;
    spec::validate_rpm_distro(distro)?;
    let release = args.release.unwrap_or(packaging.release);
    ensure!(
        release >= 1,
        "--release {release}: RPM releases start at 1; pass --release 1 or more"
    );
    check_out_dir(&args.out)?;
    let epoch = workspace::source_date_epoch()?;
    let build_time = u32::try_from(epoch)
        .context("SOURCE_DATE_EPOCH is past 2106, which rpm cannot store; set it to a real date")?;

    let spec_text = spec::render(&packaging, distro, workspace::VERSION, release, epoch)?;
    let tarball = source_tarball(&packaging, distro, release, epoch)?;
    let (summary, description) = spec::summary_and_description(&spec_text)?;
    let package = SourcePackage {
        name: spec::PACKAGE_NAME.to_owned(),
        version: workspace::VERSION.to_owned(),
        release: release.to_string(),
        summary,
        description,
        license: env!("CARGO_PKG_LICENSE").to_owned(),
        group: spec_value(&spec_text, "Group")?,
        url: spec_value(&spec_text, "URL")?,
        build_requires: spec::build_requires(&spec_text)?,
        changelog: spec::changelog(&spec_text)?,
        build_time,
        // A fixed name: the real host would make the bytes depend on it.
        build_host: "reproducible".to_owned(),
        arch: rpm_arch().to_owned(),
        spec: SourceFile {
            name: format!("{}.spec", spec::PACKAGE_NAME),
            contents: spec_text.into_bytes(),
            permissions: 0o644,
        },
        sources: vec![SourceFile {
            name: tarball_name(),
            contents: tarball,
            permissions: 0o644,
        }],
    };
    let path = args.out.join(format!(
        "{}-{}-{}.src.rpm",
        package.name, package.version, package.release
    ));
    Ok((package, path))
}

/// `nvidia_peer_memory-<ver>.tar.gz`, the spec's Source0.
fn tarball_name() -> String {
    format!("{}-{}.tar.gz", spec::PACKAGE_NAME, workspace::VERSION)
}

/// The `--distro` entry, or the default (see `BuildArgs::distro`).
fn choose_distro<'a>(packaging: &'a Packaging, requested: Option<&str>) -> Result<&'a Distro> {
    let rpm_ids = packaging.ids(Some(Family::Rpm)).join(", ");
    match requested {
        Some(id) => {
            let distro = packaging.find(id).map_err(|_| {
                anyhow::anyhow!(
                    "unknown distro `{id}`; build-srpm knows: {rpm_ids} (or add an entry to {DATA_FILE})"
                )
            })?;
            ensure!(
                distro.family == Family::Rpm,
                "distro `{id}` is a {} distribution; build-srpm knows: {rpm_ids} (use `cargo xtask build-deb` for {id})",
                distro.family
            );
            Ok(distro)
        }
        None => {
            let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
            let host = distro_id_from_os_release(&os_release);
            let id = host
                .as_deref()
                .filter(|id| packaging.family(Family::Rpm).any(|d| d.id == *id))
                .unwrap_or(FALLBACK_DISTRO);
            packaging.find(id).with_context(|| {
                format!("{DATA_FILE} lacks the default rpm distro `{id}`; pass --distro (one of: {rpm_ids})")
            })
        }
    }
}

/// The distros.yaml id an os-release file describes (`rhel9`, `fedora`,
/// `sles15` ...), whether or not the data file has it.
fn distro_id_from_os_release(text: &str) -> Option<String> {
    let field = |key: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
            .map(|value| value.trim().trim_matches('"').to_owned())
    };
    let id = field("ID")?;
    let major = field("VERSION_ID")
        .unwrap_or_default()
        .split('.')
        .next()
        .unwrap_or_default()
        .to_owned();
    Some(match id.as_str() {
        "fedora" => "fedora".to_owned(),
        "rhel" | "centos" => format!("rhel{major}"),
        "rocky" => format!("rocky{major}"),
        "almalinux" => format!("alma{major}"),
        "sles" | "sled" | "opensuse-leap" => format!("sles{major}"),
        other => format!("{other}{major}"),
    })
}

/// rpm's name for this host's architecture (what rpmbuild records in a
/// source package; it does not limit where the package can be rebuilt).
fn rpm_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x86_64",
        "aarch64" => "aarch64",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        _ => "noarch",
    }
}

/// The value of a `Tag: value` line of the spec.
fn spec_value(spec: &str, tag: &str) -> Result<String> {
    spec.lines()
        .find_map(|line| line.strip_prefix(tag)?.strip_prefix(':'))
        .map(|value| value.trim().to_owned())
        .with_context(|| {
            format!(
                "the rendered spec has no `{tag}:` line; fix {}",
                spec::TEMPLATE
            )
        })
}

/// Fails unless `dir` is an existing directory this process can create files
/// in (probed with a file that is removed at once), so a bad --out is
/// reported before any work and never leaves a partial file.
fn check_out_dir(dir: &Path) -> Result<()> {
    let fix = "pass --out with an existing, writable directory";
    let metadata = std::fs::metadata(dir)
        .with_context(|| format!("--out {}: no such directory; {fix}", dir.display()))?;
    ensure!(
        metadata.is_dir(),
        "--out {} is not a directory; {fix}",
        dir.display()
    );
    let probe = dir.join(format!(".build-srpm-probe-{}", std::process::id()));
    std::fs::File::create(&probe)
        .with_context(|| format!("--out {} is not writable; {fix}", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// The files shipped beside the module sources, from `packaging/`: the
/// boot service, its configuration and the helper the service runs.
const PACKAGING_FILES: [&str; 3] = ["nv_peer_mem.conf", "nv_peer_mem.service", spec::HELPER_NAME];

/// `nvidia_peer_memory-<ver>.tar.gz`: `nvidia_peer_memory-<ver>/` holding
/// the module sources (`kmod/`, git-tracked files except `kmod/tests/`), a
/// generated `kmod/VERSION`, `packaging/`'s shared files and the rendered
/// `dkms.conf`.
fn source_tarball(
    packaging: &Packaging,
    distro: &Distro,
    release: u32,
    epoch: u64,
) -> Result<Vec<u8>> {
    let root = workspace::root();
    let mut tarball = Tarball::new(&format!("{}-{}", spec::PACKAGE_NAME, workspace::VERSION));
    tarball.set_mtime(epoch);
    for path in module_sources()? {
        tarball.add_path(&path, &root.join(&path))?;
    }
    tarball.add_file("kmod/VERSION", format!("{}\n", workspace::VERSION), false)?;
    for name in PACKAGING_FILES {
        let path = format!("packaging/{name}");
        tarball
            .add_path(&path, &root.join(&path))
            .with_context(|| format!("{path} is missing; restore it from git"))?;
    }
    let mut context = render::base_context(packaging, distro, workspace::VERSION, release, epoch);
    // DKMS's PACKAGE_VERSION: the /usr/src/nv_peer_mem-<version> suffix.
    context.insert("package_version", workspace::VERSION);
    let dkms_conf = render::render_file(&workspace::path("dkms/dkms.conf.tera"), &context)?;
    tarball.add_file("dkms.conf", dkms_conf, false)?;
    tarball.to_tar_gz()
}

/// Git-tracked files under `kmod/` except its tests and a tracked
/// `kmod/VERSION` (the tarball's is generated), sorted.
fn module_sources() -> Result<Vec<String>> {
    let output = Command::new("git")
        .args(["ls-files", "-z", "--", "kmod"])
        .current_dir(workspace::root())
        .output()
        .context("running `git ls-files kmod`; install git and build from a git checkout")?;
    if !output.status.success() {
        bail!(
            "`git ls-files kmod` failed in {}: {}; build from a git checkout of the project",
            workspace::root().display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let listing = String::from_utf8(output.stdout)
        .context("a file name under kmod/ is not UTF-8; rename it")?;
    let mut paths: Vec<String> = listing
        .split('\0')
        .filter(|path| {
            !path.is_empty() && !path.starts_with("kmod/tests/") && *path != "kmod/VERSION"
        })
        .map(str::to_owned)
        .collect();
    paths.sort();
    ensure!(
        !paths.is_empty(),
        "git tracks no files under kmod/; the module sources are missing"
    );
    Ok(paths)
}

/// `cargo xtask bench-srpm`: times build-srpm runs of this very binary.
pub fn bench_srpm_command(args: &BenchArgs) -> Result<()> {
    bench_writer(
        "build-srpm",
        args,
        "target <= 20 ms; the original build_module.sh: ~115 ms",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ];
        for (text, want) in cases {
            assert_eq!(
                distro_id_from_os_release(text).as_deref(),
                Some(want),
                "{text}"
            );
        }
        assert_eq!(distro_id_from_os_release(""), None);
    }

    #[test]
    fn default_distro_is_an_rpm_one_and_bad_ids_list_the_known_ones() {
        let packaging = Packaging::load().unwrap();
        assert_eq!(choose_distro(&packaging, None).unwrap().family, Family::Rpm);
        let error = choose_distro(&packaging, Some("plan9"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("rhel9") && error.contains("sles15") && !error.contains("debian12"),
            "{error}"
        );
        let error = choose_distro(&packaging, Some("debian12"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("build-deb"), "{error}");
    }

    #[test]
    fn bad_out_dirs_are_named() {
        let missing = Path::new("/nonexistent/build-srpm-out");
        let error = check_out_dir(missing).unwrap_err().to_string();
        assert!(
            error.contains("--out") && error.contains("no such directory"),
            "{error}"
        );
        let file =
            std::env::temp_dir().join(format!("build-srpm-test-file-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        let error = check_out_dir(&file).unwrap_err().to_string();
        std::fs::remove_file(&file).unwrap();
        assert!(error.contains("not a directory"), "{error}");
    }
}
