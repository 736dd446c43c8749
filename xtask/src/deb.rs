//! `cargo xtask build-deb`: writes `nvidia-peer-memory_<ver>.orig.tar.gz`,
//! which unpacks to `nvidia-peer-memory-<ver>/` with a rendered `debian/`
//! inside, ready for `dpkg-buildpackage -us -uc` (the layout the original
//! build_module.sh produced, FIELD-NOTES §1). Also `cargo xtask bench-deb`.
//!
//! Tarball contents, below `nvidia-peer-memory-<ver>/`:
//! - `kmod/`: every git-tracked file under kmod/ except kmod/tests/, plus a
//!   generated `kmod/VERSION` (kmod/Makefile reads it when the workspace
//!   Cargo.toml is absent, as in the DKMS tree);
//! - `dkms.conf`, rendered from dkms/dkms.conf.tera;
//! - `packaging/`: the config file, systemd unit and helper shared with the
//!   rpm packages;
//! - `debian/`, rendered from debian/ (see render.rs for the rules), plus
//!   `debian/nvidia-peer-memory.nv_peer_mem.service`, a copy of the unit,
//!   so that dh_installsystemd installs it where each release expects units.
//!
//! Every input is checked before anything is written; bad input is a
//! `BadInput` error (exit status 2) that names the fix.

use crate::BadInput;
use crate::bench_writer::{BenchArgs, bench_writer};
use crate::distro::{Distro, Family, Packaging};
use crate::render::{self, RenderedFile};
use crate::tarball::Tarball;
use crate::workspace;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// Debian source package name (and the tarball's name).
pub const SOURCE_PACKAGE: &str = "nvidia-peer-memory";

/// Files of packaging/ that both the deb and the rpm packages install.
pub const SHARED_PACKAGING_FILES: [&str; 3] = [
    "nv_peer_mem.conf",
    "nv_peer_mem.service",
    "nv_peer_mem-service",
];

/// The entry used when neither --distro nor /etc/os-release names a known
/// deb distribution.
const FALLBACK_DISTRO: &str = "debian12";

/// Debian files a buildable source package cannot do without.
const REQUIRED_DEBIAN_FILES: [&str; 5] = [
    "changelog",
    "control",
    "copyright",
    "rules",
    "source/format",
];

#[derive(clap::Args, Debug, Clone)]
pub struct BuildDebArgs {
    /// Directory to write nvidia-peer-memory_<version>.orig.tar.gz into; it
    /// must exist and be writable. An existing file of that name is replaced.
    #[arg(long, value_name = "DIR", default_value = "/tmp")]
    pub out: PathBuf,
    /// Target distribution: the `id` of a deb entry in
    /// packaging/distros.yaml (debian12, debian13, ubuntu2204, ubuntu2404).
    /// It decides the changelog suite, Standards-Version and the Rust
    /// toolchain packages the -dkms package depends on. Default: this host's
    /// distribution (from /etc/os-release) when listed, else debian12.
    #[arg(long, value_name = "ID")]
    pub distro: Option<String>,
    /// Debian revision of the packages (the N in <version>-N), 1 or more.
    /// Default: `release:` in packaging/distros.yaml.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub release: Option<u32>,
}

/// Everything build-deb needs, checked.
#[derive(Debug)]
struct Plan {
    packaging: Packaging,
    distro: Distro,
    release: u32,
    upstream_version: String,
    source_date_epoch: u64,
    out: PathBuf,
}

impl Plan {
    fn prefix(&self) -> String {
        format!("{SOURCE_PACKAGE}-{}", self.upstream_version)
    }

    fn tarball_path(&self) -> PathBuf {
        self.out.join(format!(
            "{SOURCE_PACKAGE}_{}.orig.tar.gz",
            self.upstream_version
        ))
    }

    fn context(&self) -> tera::Context {
        deb_context(
            &self.packaging,
            &self.distro,
            workspace::VERSION,
            &self.upstream_version,
            self.release,
            self.source_date_epoch,
        )
    }
}

/// `cargo xtask build-deb`: build, then tell the user what to run next, as
/// build_module.sh did.
pub fn build_deb_command(args: &BuildDebArgs) -> Result<()> {
    // `git ls-files` runs while the inputs are checked (and `git log` reads
    // the timestamp): a third of build-deb's ~10 ms budget is git start-up.
    let sources = ModuleSources::spawn()?;
    let plan = plan(args)?;
    let path = build(&plan, &sources.wait()?)?;
    let dir = plan.out.display();
    let file = path.file_name().expect("built a file").to_string_lossy();
    println!("Built: {}", path.display());
    println!();
    println!("To install on {}:", plan.distro.name);
    println!("    cd {dir}");
    println!("    tar xzf {file}");
    println!("    cd {}", plan.prefix());
    println!("    dpkg-buildpackage -us -uc");
    println!(
        "    dpkg -i ../{SOURCE_PACKAGE}_{v}-{r}_all.deb ../{SOURCE_PACKAGE}-dkms_{v}-{r}_all.deb",
        v = plan.upstream_version,
        r = plan.release
    );
    Ok(())
}

/// `cargo xtask bench-deb`: wall time of the built xtask binary running
/// build-deb, as a user would run it (process start included).
pub fn bench_deb_command(args: &BenchArgs) -> Result<()> {
    bench_writer(
        "build-deb",
        args,
        "target <= 10 ms; the original build_module.sh: ~52 ms",
    )
}

/// Checks every input; nothing is written here.
fn plan(args: &BuildDebArgs) -> Result<Plan> {
    let packaging = Packaging::load().map_err(BadInput::wrap)?;
    let id = match &args.distro {
        Some(id) => id.clone(),
        None => host_distro(&packaging).unwrap_or_else(|| FALLBACK_DISTRO.to_owned()),
    };
    let distro = packaging.find(&id).map_err(BadInput::wrap)?.clone();
    if distro.family != Family::Deb {
        return Err(BadInput::error(format!(
            "distro `{id}` is an rpm distribution: use `cargo xtask build-srpm --distro {id}`, or one of the deb ones: {}",
            packaging.ids(Some(Family::Deb)).join(", ")
        )));
    }
    distro.validate_deb().map_err(BadInput::wrap)?;
    let release = args.release.unwrap_or(packaging.release);
    let upstream_version = debian_upstream_version(workspace::VERSION).map_err(BadInput::wrap)?;
    check_out_dir(&args.out).map_err(BadInput::wrap)?;
    let source_date_epoch = workspace::source_date_epoch().map_err(BadInput::wrap)?;
    Ok(Plan {
        packaging,
        distro,
        release,
        upstream_version,
        source_date_epoch,
        out: args.out.clone(),
    })
}

fn build(plan: &Plan, module_sources: &[String]) -> Result<PathBuf> {
    let mut tarball = Tarball::new(&plan.prefix());
    tarball.set_mtime(plan.source_date_epoch);
    for path in module_sources {
        tarball.add_path(path, &workspace::path(path))?;
    }
    tarball.add_file("kmod/VERSION", format!("{}\n", workspace::VERSION), false)?;
    for name in SHARED_PACKAGING_FILES {
        tarball.add_path(
            &format!("packaging/{name}"),
            &workspace::path(&format!("packaging/{name}")),
        )?;
    }
    for file in rendered_files(&plan.context())? {
        tarball.add_file(&file.path, file.contents, file.executable)?;
    }
    let path = plan.tarball_path();
    tarball.write_atomically(&path)?;
    Ok(path)
}

/// Template variables for the Debian files and dkms.conf.
fn deb_context(
    packaging: &Packaging,
    distro: &Distro,
    version: &str,
    upstream_version: &str,
    release: u32,
    source_date_epoch: u64,
) -> tera::Context {
    let mut context = render::base_context(packaging, distro, version, release, source_date_epoch);
    context.insert("upstream_version", upstream_version);
    context.insert("debian_version", &format!("{upstream_version}-{release}"));
    // dkms.conf's PACKAGE_VERSION = the /usr/src/<name>-<version> directory.
    context.insert("package_version", upstream_version);
    context
}

/// The rendered dkms.conf and debian/ files, with their paths in the
/// source tree (what the golden files hold).
fn rendered_files(context: &tera::Context) -> Result<Vec<RenderedFile>> {
    let mut files = vec![RenderedFile {
        path: "dkms.conf".to_owned(),
        contents: render::render_file(&workspace::path("dkms/dkms.conf.tera"), context)?,
        executable: false,
    }];
    let debian = render::render_dir(&workspace::path("debian"), context)?;
    for required in REQUIRED_DEBIAN_FILES {
        if !debian.iter().any(|f| f.path == required) {
            bail!("debian/{required} (or debian/{required}.tera) is missing; restore it from git");
        }
    }
    files.extend(debian.into_iter().map(|f| RenderedFile {
        path: format!("debian/{}", f.path),
        ..f
    }));
    let unit = "packaging/nv_peer_mem.service";
    files.push(RenderedFile {
        path: format!("debian/{SOURCE_PACKAGE}.nv_peer_mem.service"),
        contents: std::fs::read_to_string(workspace::path(unit))
            .with_context(|| format!("reading {unit}; restore it from git"))?,
        executable: false,
    });
    Ok(files)
}

/// Git-tracked files under kmod/ except its host tests, sorted; the
/// generated kmod/VERSION replaces a tracked one. Read by a `git ls-files`
/// started early (`spawn`) and collected later (`wait`).
struct ModuleSources(std::process::Child);

impl ModuleSources {
    fn spawn() -> Result<ModuleSources> {
        std::process::Command::new("git")
            .args(["ls-files", "-z", "--", "kmod"])
            .current_dir(workspace::root())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map(ModuleSources)
            .context("running `git ls-files kmod`; build-deb needs git and a git checkout")
    }

    fn wait(self) -> Result<Vec<String>> {
        let output = self
            .0
            .wait_with_output()
            .context("reading `git ls-files kmod`")?;
        if !output.status.success() {
            bail!(
                "`git ls-files kmod` failed in {}: {}; build from a git checkout of the workspace",
                workspace::root().display(),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let mut paths: Vec<String> = output
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| {
                String::from_utf8(p.to_vec())
                    .context("a file name under kmod/ is not UTF-8; rename it")
            })
            .collect::<Result<_>>()?;
        paths.retain(|p| !p.starts_with("kmod/tests/") && p != "kmod/VERSION");
        paths.sort();
        if paths.is_empty() {
            bail!("git tracks no files under kmod/; commit the module sources first");
        }
        Ok(paths)
    }
}

/// The Debian upstream version for a Cargo version: a SemVer pre-release
/// (`1.4.0-rc.1`) becomes `1.4.0~rc.1` so it sorts before the release.
/// Refuses what Debian cannot carry (Policy 5.6.12).
pub fn debian_upstream_version(cargo_version: &str) -> Result<String> {
    let version = cargo_version.replacen('-', "~", 1);
    let starts_with_digit = version.bytes().next().is_some_and(|b| b.is_ascii_digit());
    let allowed = version
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b".+~-".contains(&b));
    if !starts_with_digit || !allowed {
        bail!(
            "version `{cargo_version}` cannot be a Debian upstream version (it must start with a digit and use only letters, digits and . + ~ -); fix `version` under [workspace.package] in Cargo.toml"
        );
    }
    Ok(version)
}

/// --out must be an existing, writable directory. Checked by creating (and
/// removing) an empty probe file, since permission bits do not tell about
/// read-only mounts or root.
fn check_out_dir(out: &Path) -> Result<()> {
    if !out.is_dir() {
        bail!(
            "--out {}: no such directory; create it (mkdir -p {}) or pick another",
            out.display(),
            out.display()
        );
    }
    let probe = out.join(format!(".{SOURCE_PACKAGE}-probe-{}", std::process::id()));
    std::fs::File::create(&probe).with_context(|| {
        format!(
            "--out {} is not writable; pick a writable directory",
            out.display()
        )
    })?;
    std::fs::remove_file(&probe)
        .with_context(|| format!("removing the probe file {}", probe.display()))?;
    Ok(())
}

/// The deb entry matching /etc/os-release (`debian` 12 -> debian12,
/// `ubuntu` 22.04 -> ubuntu2204), if packaging/distros.yaml lists it.
fn host_distro(packaging: &Packaging) -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    host_distro_id(&text).filter(|id| packaging.ids(Some(Family::Deb)).contains(&id.as_str()))
}

fn host_distro_id(os_release: &str) -> Option<String> {
    let field = |key: &str| {
        os_release.lines().find_map(|line| {
            line.strip_prefix(key)?
                .strip_prefix('=')
                .map(|v| v.trim().trim_matches('"').to_owned())
        })
    };
    let id = field("ID")?;
    let version = field("VERSION_ID")?;
    Some(format!("{id}{}", version.replace('.', "")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Fixed inputs for the golden files, so that they change only when a
    /// template or distros.yaml does (not with every commit or version bump).
    const GOLDEN_VERSION: &str = "1.4.0";
    const GOLDEN_EPOCH: u64 = 1_795_305_600; // 2026-11-22 00:00:00 UTC
    const BLESS_VAR: &str = "UPDATE_GOLDEN"; // the same switch as the srpm golden test

    fn golden_dir(id: &str) -> PathBuf {
        workspace::path("xtask/golden/deb").join(id)
    }

    fn golden_render(packaging: &Packaging, distro: &Distro) -> BTreeMap<String, String> {
        let upstream = debian_upstream_version(GOLDEN_VERSION).unwrap();
        let context = deb_context(
            packaging,
            distro,
            GOLDEN_VERSION,
            &upstream,
            1,
            GOLDEN_EPOCH,
        );
        rendered_files(&context)
            .unwrap()
            .into_iter()
            .map(|f| (f.path, f.contents))
            .collect()
    }

    fn files_below(dir: &Path) -> BTreeMap<String, String> {
        fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(root, &path, out);
                } else {
                    let key = path
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    out.insert(key, std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(dir, dir, &mut out);
        out
    }

    /// Fails when a template or the data file changes without the golden
    /// files; `UPDATE_GOLDEN=1 cargo test -p xtask golden` rewrites them
    /// (review with `git diff xtask/golden`).
    #[test]
    fn rendered_debian_matches_golden_files_for_every_deb_distro() {
        let packaging = Packaging::load().unwrap();
        let bless = std::env::var_os(BLESS_VAR).is_some();
        let mut failures = Vec::new();
        for distro in packaging.family(Family::Deb) {
            let rendered = golden_render(&packaging, distro);
            let dir = golden_dir(&distro.id);
            if bless {
                let _ = std::fs::remove_dir_all(&dir);
                for (path, contents) in &rendered {
                    let target = dir.join(path);
                    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
                    std::fs::write(target, contents).unwrap();
                }
                continue;
            }
            let golden = files_below(&dir);
            for path in rendered
                .keys()
                .chain(golden.keys())
                .collect::<std::collections::BTreeSet<_>>()
            {
                if rendered.get(path) != golden.get(path) {
                    failures.push(format!("{}/{path}", dir.display()));
                }
            }
        }
        assert!(
            failures.is_empty(),
            "rendered files differ from their golden files:\n  {}\nIf the change is intended, run `{BLESS_VAR}=1 cargo test -p xtask golden` and review `git diff xtask/golden`.",
            failures.join("\n  ")
        );
    }

    #[test]
    fn golden_render_has_the_debian_essentials() {
        let packaging = Packaging::load().unwrap();
        let distro = packaging.find("debian12").unwrap();
        let files = golden_render(&packaging, distro);
        assert_eq!(files["debian/source/format"], "3.0 (quilt)\n");
        let control = &files["debian/control"];
        assert!(
            control.contains("debhelper-compat (= 13), dh-sequence-dkms"),
            "{control}"
        );
        assert!(control.contains("Standards-Version: 4.6.2"), "{control}");
        assert!(
            control.contains(
                "rustc-web, rust-web-src, mlnx-ofed-kernel-dkms | mlnx-ofed-kernel-modules"
            ),
            "{control}"
        );
        assert!(
            files["debian/changelog"]
                .starts_with("nvidia-peer-memory (1.4.0-1) bookworm; urgency=medium\n")
        );
        assert!(files["debian/changelog"].contains("  Sun, 22 Nov 2026 00:00:00 +0000\n"));
        assert!(files["dkms.conf"].contains("PACKAGE_VERSION=\"1.4.0\""));
        assert!(
            files["debian/nvidia-peer-memory-dkms.install"].contains("usr/src/nv_peer_mem-1.4.0/")
        );
        let ubuntu = golden_render(&packaging, packaging.find("ubuntu2404").unwrap());
        assert!(ubuntu["debian/control"].contains("rustc-1.85, rust-1.85-src, mlnx"));
    }

    #[test]
    fn debian_versions() {
        assert_eq!(debian_upstream_version("1.4.0").unwrap(), "1.4.0");
        assert_eq!(debian_upstream_version("1.4.0-rc.1").unwrap(), "1.4.0~rc.1");
        assert_eq!(debian_upstream_version("1.4.0+git5").unwrap(), "1.4.0+git5");
        for bad in ["", "v1.4.0", "1:1.4", "1.4_0", "1.4 0"] {
            let error = debian_upstream_version(bad).unwrap_err().to_string();
            assert!(error.contains("Cargo.toml"), "{bad:?}: {error}");
        }
    }

    #[test]
    fn host_distro_ids() {
        assert_eq!(
            host_distro_id("ID=debian\nVERSION_ID=\"12\"\n").as_deref(),
            Some("debian12")
        );
        assert_eq!(
            host_distro_id("NAME=x\nID=ubuntu\nVERSION_ID=\"22.04\"\n").as_deref(),
            Some("ubuntu2204")
        );
        assert_eq!(
            host_distro_id("ID=debian\n"),
            None,
            "testing/sid have no VERSION_ID"
        );
    }

    fn args(out: &Path, distro: &str) -> BuildDebArgs {
        BuildDebArgs {
            out: out.to_owned(),
            distro: Some(distro.to_owned()),
            release: None,
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-deb-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn bad_input_is_refused_before_anything_is_written() {
        let dir = scratch("bad");
        for (args, expected) in [
            (args(&dir, "plan9"), "debian12, debian13"),
            (args(&dir, "rhel9"), "build-srpm"),
            (args(&dir.join("absent"), "debian12"), "no such directory"),
        ] {
            let error = plan(&args).unwrap_err();
            assert!(
                error.chain().any(|e| e.is::<BadInput>()),
                "{error:#} is not BadInput"
            );
            assert!(format!("{error:#}").contains(expected), "{error:#}");
        }
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "nothing written"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn same_inputs_give_the_same_bytes_and_the_expected_layout() {
        let (a, b) = (scratch("det-a"), scratch("det-b"));
        let sources = ModuleSources::spawn().unwrap().wait().unwrap();
        let first = build(&plan(&args(&a, "debian12")).unwrap(), &sources).unwrap();
        let second = build(&plan(&args(&b, "debian12")).unwrap(), &sources).unwrap();
        let bytes = std::fs::read(&first).unwrap();
        assert_eq!(bytes, std::fs::read(&second).unwrap());
        assert_eq!(
            first.file_name().unwrap().to_string_lossy(),
            format!("nvidia-peer-memory_{}.orig.tar.gz", workspace::VERSION)
        );

        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes.as_slice()));
        let paths: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
            .collect();
        let prefix = format!("nvidia-peer-memory-{}/", workspace::VERSION);
        assert!(paths.iter().all(|p| p.starts_with(&prefix)), "{paths:?}");
        for want in [
            "kmod/VERSION",
            "dkms.conf",
            "debian/rules",
            "debian/control",
            "packaging/nv_peer_mem-service",
        ] {
            assert!(
                paths.contains(&format!("{prefix}{want}")),
                "{want} missing from {paths:?}"
            );
        }
        assert!(
            !paths.iter().any(|p| p.contains("/kmod/tests/")),
            "host tests are not module sources"
        );
        std::fs::remove_dir_all(&a).unwrap();
        std::fs::remove_dir_all(&b).unwrap();
    }
}
