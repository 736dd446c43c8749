//! `cargo xtask build-deb`: writes `nvidia-peer-memory_<ver>.orig.tar.gz`,
//! which unpacks to `nvidia-peer-memory-<ver>/` with a rendered `debian/`
//! inside, ready for `dpkg-buildpackage -us -uc` (the layout the original
//! build_module.sh produced; see docs/packaging.md). Also
//! `cargo xtask bench-deb`.
//!
//! A thin route over the packaging pipeline (pipeline/): besides the source
//! tree every route ships, the tarball holds `debian/`, rendered from
//! debian/ (see render.rs for the rules), plus
//! `debian/nvidia-peer-memory.nv_peer_mem.service`, a copy of the unit, so
//! that dh_installsystemd installs it where each release expects units.

use crate::bench_writer::{BenchArgs, bench_writer};
use crate::distro::{Distro, Family};
use crate::pipeline::{self, Plan, Release, Request, Route, SourceTree};
use crate::render::{self, RenderedFile};
use crate::workspace;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// Debian source package name (and the tarball's name).
pub const SOURCE_PACKAGE: &str = "nvidia-peer-memory";

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
    #[arg(long, value_name = "N")]
    pub release: Option<Release>,
}

impl BuildDebArgs {
    pub fn request(&self) -> Request {
        Request {
            out: self.out.clone(),
            distro: self.distro.clone(),
            release: self.release,
        }
    }
}

/// The Debian route.
pub struct Deb;

impl Route for Deb {
    const COMMAND: &'static str = "build-deb";
    const FAMILY: Family = Family::Deb;
    const FALLBACK_DISTRO: &'static str = "debian12";
    const SOURCE_NAME: &'static str = SOURCE_PACKAGE;
    type Rendered = ();

    fn check_distro(distro: &Distro) -> Result<()> {
        distro.validate_deb()
    }

    fn package_version(workspace_version: &str) -> Result<String> {
        debian_upstream_version(workspace_version)
    }

    fn add_context(plan: &Plan, context: &mut tera::Context) {
        context.insert("upstream_version", &plan.package_version);
        context.insert("debian_version", &debian_version(plan));
    }

    fn render(_plan: &Plan, context: &tera::Context, tree: &mut SourceTree) -> Result<()> {
        for file in debian_files(context)? {
            tree.add(file)?;
        }
        Ok(())
    }

    fn assemble(_plan: &Plan, tree_tar_gz: Vec<u8>, (): ()) -> Result<Vec<u8>> {
        Ok(tree_tar_gz)
    }

    fn artifact_name(plan: &Plan) -> String {
        format!("{SOURCE_PACKAGE}_{}.orig.tar.gz", plan.package_version)
    }

    fn report(plan: &Plan, artifact: &Path) -> String {
        let dir = plan.out.display();
        let file = artifact.file_name().unwrap_or_default().to_string_lossy();
        format!(
            "Built: {path}\n\nTo install on {name}:\n    cd {dir}\n    tar xzf {file}\n    cd {prefix}\n    dpkg-buildpackage -us -uc\n    dpkg -i ../{SOURCE_PACKAGE}_{v}_all.deb ../{SOURCE_PACKAGE}-dkms_{v}_all.deb\n",
            path = artifact.display(),
            name = plan.distro.name,
            prefix = plan.tree_prefix(Deb::SOURCE_NAME),
            v = debian_version(plan),
        )
    }
}

/// `cargo xtask build-deb`: build, then tell the user what to run next, as
/// build_module.sh did.
pub fn build_deb_command(args: &BuildDebArgs) -> Result<()> {
    pipeline::build_command::<Deb>(&args.request())
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

/// The packages' version for the plan's suite: upstream, revision, and the
/// suite's version_suffix (packaging/distros.yaml), e.g. `1.4.0-1~deb12`.
pub fn debian_version(plan: &Plan) -> String {
    format!(
        "{}-{}{}",
        plan.package_version, plan.release, plan.distro.version_suffix
    )
}

/// The rendered debian/ files and the unit's copy, with their paths in the
/// source tree.
pub fn debian_files(context: &tera::Context) -> Result<Vec<RenderedFile>> {
    // debian/control's Rust dependencies carry the module's minimum rustc.
    let mut context = context.clone();
    context.insert("rust_min", &workspace::module_rust_version()?);
    let debian = render::render_dir(&workspace::path("debian"), &context)?;
    for required in REQUIRED_DEBIAN_FILES {
        if !debian.iter().any(|f| f.path == required) {
            bail!("debian/{required} (or debian/{required}.tera) is missing; restore it from git");
        }
    }
    let mut files: Vec<RenderedFile> = debian
        .into_iter()
        .map(|f| RenderedFile {
            path: format!("debian/{}", f.path),
            ..f
        })
        .collect();
    let unit = "packaging/nv_peer_mem.service";
    files.push(RenderedFile {
        path: format!("debian/{SOURCE_PACKAGE}.nv_peer_mem.service"),
        contents: std::fs::read_to_string(workspace::path(unit))
            .with_context(|| format!("reading {unit}; restore it from git"))?,
        executable: false,
    });
    Ok(files)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distro::Packaging;
    use std::collections::BTreeMap;

    /// Fixed inputs for the golden files, so that they change only when a
    /// template or distros.yaml does (not with every commit or version bump).
    const GOLDEN_VERSION: &str = "1.4.0";
    const GOLDEN_EPOCH: u64 = 1_795_305_600; // 2026-11-22 00:00:00 UTC
    const BLESS_VAR: &str = "UPDATE_GOLDEN"; // the same switch as the srpm golden test

    fn golden_dir(id: &str) -> PathBuf {
        workspace::path("xtask/golden/deb").join(id)
    }

    /// dkms.conf and debian/ as build-deb renders them for @distro with the
    /// golden inputs.
    fn golden_render(packaging: &Packaging, distro: &Distro) -> BTreeMap<String, String> {
        let plan = Plan {
            packaging: packaging.clone(),
            distro: distro.clone(),
            workspace_version: GOLDEN_VERSION.to_owned(),
            package_version: debian_upstream_version(GOLDEN_VERSION).unwrap(),
            release: 1,
            source_date_epoch: GOLDEN_EPOCH,
            out: PathBuf::from("/nonexistent"),
        };
        let mut context = plan.base_context();
        Deb::add_context(&plan, &mut context);
        std::iter::once(pipeline::dkms_conf(&context).unwrap())
            .chain(debian_files(&context).unwrap())
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
                "rustc-web (>= 1.85), rust-web-src (>= 1.85), mlnx-ofed-kernel-dkms | mlnx-ofed-kernel-modules"
            ),
            "{control}"
        );
        assert!(
            files["debian/changelog"]
                .starts_with("nvidia-peer-memory (1.4.0-1~deb12) bookworm; urgency=medium\n")
        );
        assert!(files["debian/changelog"].contains("  Sun, 22 Nov 2026 00:00:00 +0000\n"));
        assert!(files["dkms.conf"].contains("PACKAGE_VERSION=\"1.4.0\""));
        assert!(
            files["debian/nvidia-peer-memory-dkms.install"].contains("usr/src/nv_peer_mem-1.4.0/")
        );
        let ubuntu = golden_render(&packaging, packaging.find("ubuntu2404").unwrap());
        assert!(
            ubuntu["debian/control"]
                .contains("rustc-1.85 (>= 1.85), rust-1.85-src (>= 1.85), mlnx")
        );
        assert!(
            ubuntu["debian/changelog"]
                .starts_with("nvidia-peer-memory (1.4.0-1~ubuntu24.04.1) noble; urgency=medium\n")
        );
        let trixie = golden_render(&packaging, packaging.find("debian13").unwrap());
        assert!(
            trixie["debian/changelog"]
                .starts_with("nvidia-peer-memory (1.4.0-1) trixie; urgency=medium\n")
        );
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
    fn same_inputs_give_the_same_bytes_and_the_expected_layout() {
        let scratch = |name: &str| {
            let dir = std::env::temp_dir().join(format!("xtask-deb-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            dir
        };
        let (a, b) = (scratch("det-a"), scratch("det-b"));
        let request = |out: &Path| Request {
            out: out.to_owned(),
            distro: Some("debian12".to_owned()),
            release: None,
        };
        let first = pipeline::build::<Deb>(&request(&a)).unwrap().path;
        let second = pipeline::build::<Deb>(&request(&b)).unwrap().path;
        let bytes = std::fs::read(&first).unwrap();
        assert_eq!(bytes, std::fs::read(&second).unwrap());
        assert_eq!(
            first.file_name().unwrap().to_string_lossy(),
            format!("nvidia-peer-memory_{}.orig.tar.gz", workspace::version())
        );

        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes.as_slice()));
        let paths: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
            .collect();
        let prefix = format!("nvidia-peer-memory-{}/", workspace::version());
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
