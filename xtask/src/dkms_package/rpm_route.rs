//! build-dkms's rpm: `nvidia_peer_memory-dkms-<ver>-<rel><dist>.noarch.rpm` as
//! `rpmbuild --rebuild` of build-srpm's source rpm makes it, written by the
//! `rpm` crate's `PackageBuilder` (already xtask's dependency for the
//! source rpm). Everything the package says comes from the same rendered
//! spec (spec_subpackage.rs reads its `%package dkms` sections): name,
//! inherited header tags, Requires/Conflicts/Provides, description,
//! scriptlets, file triggers and the `%files` path; the files are the
//! source tree's `kmod/`, `dkms.conf` and the rebuild script the file
//! triggers run, which the spec's `%prep` copies into that path
//! ([`DKMS_TREE`]).

use super::spec_subpackage::{self, Subpackage};
use super::tree_files;
use crate::distro::{Distro, Family, ModuleRoute};
use crate::pipeline::{Plan, Route, SingleArtifact, SourceTree};
use crate::render::DKMS_NAME;
use crate::srpm::Srpm;
use crate::srpm::spec;
use crate::srpm::writer::{ChangelogEntry, parse_dependency, parse_rich_dependency};
use anyhow::{Context, Result, bail, ensure};
use rpm::{BuildConfig, CompressionType, Dependency, DependencyFlags, FileOptions, PackageBuilder};
use std::collections::BTreeSet;
use std::path::Path;

/// The subpackage of the spec this route builds (`%package dkms`).
const SUBPACKAGE: &str = "dkms";

/// What the spec's `%prep` copies into the DKMS tree, and the line that
/// does it: if the line changes, so must this list.
const DKMS_TREE: [&str; 3] = ["kmod", "dkms.conf", "packaging/nv_peer_mem-dkms-rebuild"];
const DKMS_TREE_COPY: &str = "cp -a kmod dkms.conf packaging/nv_peer_mem-dkms-rebuild dkms-tree/";

/// The subpackage as the spec says it, and the spec's `%changelog`
/// (rpmbuild gives every package of a spec the same changelog).
pub struct RpmParts {
    pub package: Subpackage,
    pub changelog: Vec<ChangelogEntry>,
}

/// The build-dkms rpm route.
pub struct DkmsRpm;

impl Route for DkmsRpm {
    const COMMAND: &'static str = "build-dkms";
    const FAMILY: Family = Family::Rpm;
    const FALLBACK_DISTRO: &'static str = Srpm::FALLBACK_DISTRO;
    const SOURCE_NAME: &'static str = spec::PACKAGE_NAME;
    type Rendered = RpmParts;

    fn check_distro(distro: &Distro) -> Result<()> {
        Srpm::check_distro(distro)
    }

    fn package_version(workspace_version: &str) -> Result<String> {
        Srpm::package_version(workspace_version)
    }

    fn add_context(plan: &Plan, context: &mut tera::Context) {
        Srpm::add_context(plan, context);
    }

    fn render(plan: &Plan, _context: &tera::Context, _tree: &mut SourceTree) -> Result<RpmParts> {
        let spec_text = spec::render(
            &plan.packaging,
            &plan.distro,
            &plan.package_version,
            plan.release,
            plan.source_date_epoch,
        )?;
        ensure!(
            spec_text.lines().any(|line| line.trim() == DKMS_TREE_COPY),
            "the spec's %prep no longer runs `{DKMS_TREE_COPY}`; update DKMS_TREE in xtask/src/dkms_package/rpm_route.rs to what it copies"
        );
        let subpackage = spec_subpackage::read(&spec_text, SUBPACKAGE, spec::dist(&plan.distro)?)?;
        let want = format!("/usr/src/{DKMS_NAME}-{}", plan.package_version);
        ensure!(
            subpackage.files == [(false, want.clone())],
            "`%files {SUBPACKAGE}` lists {:?}; build-dkms packs exactly {want} (extend xtask/src/dkms_package/rpm_route.rs)",
            subpackage.files
        );
        for (_, _, text) in &subpackage.dependencies {
            dependency_list(text)?;
        }
        subpackage.tag("Summary")?;
        // The file name (artifact_name) is made from the plan: the header
        // must say the same version and release (with the distro's dist).
        for (tag, want) in [
            ("Version", plan.package_version.clone()),
            ("Release", release_with_dist(plan)?),
        ] {
            let got = subpackage.tag(tag)?;
            ensure!(
                got == want,
                "the spec's {tag}: expands to {got:?} where build-dkms names the file with {want:?}; make artifact_name in xtask/src/dkms_package/rpm_route.rs follow the spec"
            );
        }
        Ok(RpmParts {
            package: subpackage,
            changelog: spec::changelog(&spec_text)?,
        })
    }
}

impl SingleArtifact for DkmsRpm {
    fn assemble(plan: &Plan, tree_tar_gz: Vec<u8>, parts: RpmParts) -> Result<Vec<u8>> {
        let package = parts.package;
        let tree = tree_files::read(&tree_tar_gz)?;
        let dkms_dir = &package.files[0].1;
        let version = package.tag("Version")?;
        let release = package.tag("Release")?;
        let arch = package
            .tags
            .get("BuildArch")
            .map_or("noarch", String::as_str);
        let mut builder = PackageBuilder::new(
            &package.name,
            version,
            package.tag("License")?,
            arch,
            package.tag("Summary")?,
        );
        builder
            .using_config(
                BuildConfig::default()
                    .compression(CompressionType::Gzip)
                    .source_date(u32::try_from(plan.source_date_epoch).context(
                    "SOURCE_DATE_EPOCH is past 2106, which rpm cannot store; set it to a real date",
                )?),
            )
            .release(release)
            .description(package.description.clone())
            // A fixed name: the real host would make the bytes depend on it.
            .build_host("reproducible");
        for (tag, value) in &package.tags {
            match tag.as_str() {
                "Group" => builder.group(value.clone()),
                "URL" => builder.url(value.clone()),
                "Vendor" => builder.vendor(value.clone()),
                "Name" | "Version" | "Release" | "License" | "Summary" | "BuildArch" => {
                    &mut builder
                }
                other => bail!(
                    "the spec's -{SUBPACKAGE} package sets {other}:, which build-dkms does not write; extend xtask/src/dkms_package/rpm_route.rs"
                ),
            };
        }
        for (tag, qualifiers, text) in &package.dependencies {
            for mut dependency in dependency_list(text)? {
                for qualifier in qualifiers {
                    dependency.flags |= match qualifier.as_str() {
                        "pre" => DependencyFlags::SCRIPT_PRE,
                        "post" => DependencyFlags::SCRIPT_POST,
                        "preun" => DependencyFlags::SCRIPT_PREUN,
                        "postun" => DependencyFlags::SCRIPT_POSTUN,
                        other => bail!("`{tag}({other})` is not a qualifier build-dkms knows"),
                    };
                }
                match tag.as_str() {
                    "Requires" => builder.requires(dependency),
                    "Conflicts" => builder.conflicts(dependency),
                    "Provides" => builder.provides(dependency),
                    "Obsoletes" => builder.obsoletes(dependency),
                    "Recommends" => builder.recommends(dependency),
                    "Suggests" => builder.suggests(dependency),
                    "Supplements" => builder.supplements(dependency),
                    "Enhances" => builder.enhances(dependency),
                    _ => builder.order_with_requires(dependency),
                };
            }
        }
        for entry in &parts.changelog {
            builder.add_changelog_entry(&entry.name, &entry.text, entry.time);
        }
        for (name, body) in &package.scriptlets {
            // rpmbuild records the interpreter (`/bin/sh`) of every scriptlet.
            let script = rpm::Scriptlet::new(body.clone()).prog(vec!["/bin/sh"]);
            match name.as_str() {
                "pretrans" => builder.pre_trans_script(script),
                "pre" => builder.pre_install_script(script),
                "post" => builder.post_install_script(script),
                "preun" => builder.pre_uninstall_script(script),
                "postun" => builder.post_uninstall_script(script),
                _ => builder.post_trans_script(script),
            };
        }
        for (path, body) in &package.trans_file_triggers_in {
            let script = rpm::Scriptlet::new(body.clone()).prog(vec!["/bin/sh"]);
            builder.trans_file_trigger_in(path, None, script);
        }

        let mut directories = BTreeSet::from([dkms_dir.clone()]);
        let mut files = Vec::new();
        for source in DKMS_TREE {
            let selected = tree_files::select(&tree, source);
            ensure!(!selected.is_empty(), "{source} is not in the source tree");
            for (relative, file) in selected {
                let path = format!("{dkms_dir}/{relative}");
                let mut parent = path.as_str();
                while let Some(slash) = parent.rfind('/') {
                    parent = &parent[..slash];
                    if parent.len() <= dkms_dir.len() {
                        break;
                    }
                    directories.insert(parent.to_owned());
                }
                files.push((path, file));
            }
        }
        for directory in &directories {
            builder.with_dir_entry(
                FileOptions::dir(directory.clone())
                    .permissions(0o755)
                    .user("root")
                    .group("root"),
            )?;
        }
        for (path, file) in files {
            builder.with_file_contents(
                file.contents.clone(),
                FileOptions::new(path)
                    .permissions(file.mode as u16)
                    .user("root")
                    .group("root"),
            )?;
        }
        let package = builder.build().context("building the -dkms rpm")?;
        let mut bytes = Vec::new();
        package
            .write(&mut bytes)
            .context("serialising the -dkms rpm")?;
        Ok(bytes)
    }

    fn artifact_name(plan: &Plan) -> String {
        // prepare() runs check_distro (validate_rpm_distro, which checks
        // `dist`) before it names the artifact.
        let release = release_with_dist(plan).expect("check_distro accepted the entry's dist");
        format!(
            "{}-{SUBPACKAGE}-{}-{release}.noarch.rpm",
            spec::PACKAGE_NAME,
            plan.package_version,
        )
    }

    fn report(plan: &Plan, artifact: &Path) -> String {
        // The KMP route is SUSE's (packaging/distros.yaml): zypper there,
        // dnf on the Red Hat family and Fedora. Each family's rpm carries
        // its own dependency names, so another family needs its own build.
        let installer = match plan.distro.rpm.as_ref().map(|rpm| rpm.route) {
            Some(ModuleRoute::Kmp) => "zypper",
            _ => "dnf",
        };
        format!(
            "Built: {path}\n\nTo install on {name} ({installer} pulls in dkms and the toolchain):\n    {installer} install {path}\nFor another rpm distribution, build its own: cargo xtask build-dkms --format rpm --distro <id> (the ids: packaging/distros.yaml)\n",
            path = artifact.display(),
            name = plan.distro.name,
        )
    }
}

/// The release as rpmbuild on the distribution writes it: `Release:
/// N%{?dist}` with the entry's `dist` (packaging/distros.yaml), so the
/// file is named as that family's rpmbuild names it (`-1.el9.noarch.rpm`,
/// `-1.el8.noarch.rpm`; `-1.noarch.rpm` on SUSE, which has no %dist, and for Fedora, whose entry names no release).
fn release_with_dist(plan: &Plan) -> Result<String> {
    Ok(format!("{}{}", plan.release, spec::dist(&plan.distro)?))
}

/// The dependencies of one tag's value: comma- or space-separated items,
/// each `name`, `name OP version` or a rich (boolean) dependency in
/// parentheses (rpm's spec syntax).
fn dependency_list(text: &str) -> Result<Vec<Dependency>> {
    let words = dependency_words(text)?;
    let mut dependencies = Vec::new();
    let mut at = 0;
    while at < words.len() {
        if words[at].starts_with('(') {
            dependencies.push(parse_rich_dependency(&words[at])?);
            at += 1;
            continue;
        }
        let is_operator = |w: &String| ["<", "<=", "=", "==", ">=", ">"].contains(&w.as_str());
        let item = if words.get(at + 1).is_some_and(is_operator) && at + 2 < words.len() {
            let item = words[at..at + 3].join(" ");
            at += 3;
            item
        } else {
            at += 1;
            words[at - 1].clone()
        };
        dependencies.push(parse_dependency(&item)?);
    }
    Ok(dependencies)
}

/// Splits a tag's value at commas and blanks, keeping each parenthesised
/// group (a rich dependency, which has blanks inside) as one word.
fn dependency_words(text: &str) -> Result<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .with_context(|| format!("dependency list {text:?}: a ')' without its '('"))?
            }
            ',' | ' ' | '\t' if depth == 0 => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                continue;
            }
            _ => {}
        }
        word.push(c);
    }
    ensure!(
        depth == 0,
        "dependency list {text:?}: a '(' without its ')'"
    );
    if !word.is_empty() {
        words.push(word);
    }
    Ok(words)
}
