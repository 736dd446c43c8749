//! build-dkms's golden files (xtask/golden/dkms/<distro>/): the deb's
//! control fields and maintainer scripts for every deb distro, the rpm's
//! header, dependencies and scriptlets for every rpm distro, rendered with
//! fixed inputs; and whole-package checks (same bytes twice, the rpm read
//! back by the `rpm` crate).

use super::deb_route::DkmsDeb;
use super::rpm_route::DkmsRpm;
use crate::distro::{Distro, Family, Packaging};
use crate::pipeline::{self, Plan, Request, Route, SourceTree};
use crate::workspace;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const GOLDEN_VERSION: &str = "1.4.0";
const GOLDEN_EPOCH: u64 = 1_795_305_600; // 2026-11-22 00:00:00 UTC
const BLESS_VAR: &str = "UPDATE_GOLDEN"; // the switch of the other golden tests

fn golden_plan<R: Route>(
    packaging: &Packaging,
    distro: &Distro,
) -> (Plan, tera::Context, SourceTree) {
    let plan = Plan {
        packaging: packaging.clone(),
        distro: distro.clone(),
        workspace_version: GOLDEN_VERSION.to_owned(),
        package_version: R::package_version(GOLDEN_VERSION).unwrap(),
        release: 1,
        source_date_epoch: GOLDEN_EPOCH,
        out: PathBuf::from("/nonexistent"),
    };
    let mut context = plan.base_context();
    R::add_context(&plan, &mut context);
    let tree = SourceTree::new(&plan, "golden", &[], &context).unwrap();
    (plan, context, tree)
}

/// file name -> contents, for one distro.
fn golden_render(packaging: &Packaging, distro: &Distro) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    if distro.family == Family::Deb {
        let (plan, context, mut tree) = golden_plan::<DkmsDeb>(packaging, distro);
        let parts = DkmsDeb::render(&plan, &context, &mut tree).unwrap();
        let control: String = parts
            .control
            .iter()
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect();
        files.insert("control".to_owned(), control);
        for (name, text) in parts.scripts {
            files.insert(name, text);
        }
        let installs: String = parts
            .installs
            .iter()
            .map(|(source, destination)| format!("{source} -> /{destination}/\n"))
            .chain(std::iter::once(format!(
                "dkms.conf -> /{}\n",
                parts.dkms_conf.0
            )))
            .collect();
        files.insert("installs".to_owned(), installs);
    } else {
        let (plan, context, mut tree) = golden_plan::<DkmsRpm>(packaging, distro);
        let parts = DkmsRpm::render(&plan, &context, &mut tree).unwrap();
        let package = parts.package;
        let mut header = format!("Name: {}\n", package.name);
        for (tag, value) in &package.tags {
            header.push_str(&format!("{tag}: {value}\n"));
        }
        for (tag, qualifiers, text) in &package.dependencies {
            match qualifiers.is_empty() {
                true => header.push_str(&format!("{tag}: {text}\n")),
                false => header.push_str(&format!("{tag}({}): {text}\n", qualifiers.join(","))),
            }
        }
        for (directory, path) in &package.files {
            header.push_str(&format!(
                "%files: {}{path}\n",
                if *directory { "%dir " } else { "" }
            ));
        }
        header.push_str(&format!("\n{}\n", package.description));
        for entry in &parts.changelog {
            header.push_str(&format!(
                "\n* {} {}\n{}\n",
                entry.time, entry.name, entry.text
            ));
        }
        files.insert("header".to_owned(), header);
        for (name, body) in package.scriptlets {
            files.insert(name, body + "\n");
        }
        let mut triggers = String::new();
        for (path, body) in package.trans_file_triggers_in {
            triggers.push_str(&format!("-- {path}\n{body}\n"));
        }
        if !triggers.is_empty() {
            files.insert("transfiletriggerin".to_owned(), triggers);
        }
    }
    files
}

fn files_below(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect()
}

/// `UPDATE_GOLDEN=1 cargo test -p xtask golden` rewrites them.
#[test]
fn build_dkms_packages_match_golden_files_for_every_distro() {
    let packaging = Packaging::load().unwrap();
    let bless = std::env::var_os(BLESS_VAR).is_some();
    let mut failures = Vec::new();
    for distro in &packaging.distros {
        let rendered = golden_render(&packaging, distro);
        let dir = workspace::path("xtask/golden/dkms").join(&distro.id);
        if bless {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            for (name, contents) in &rendered {
                std::fs::write(dir.join(name), contents).unwrap();
            }
            continue;
        }
        let golden = files_below(&dir);
        for name in rendered.keys().chain(golden.keys()) {
            if rendered.get(name) != golden.get(name) {
                failures.push(format!("{}/{name}", dir.display()));
            }
        }
    }
    failures.dedup();
    assert!(
        failures.is_empty(),
        "rendered files differ from their golden files:\n  {}\nIf the change is intended, run `{BLESS_VAR}=1 cargo test -p xtask golden` and review `git diff xtask/golden`.",
        failures.join("\n  ")
    );
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xtask-dkms-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn request(out: &Path, distro: &str) -> Request {
    Request {
        out: out.to_owned(),
        distro: Some(distro.to_owned()),
        release: None,
    }
}

#[test]
fn same_inputs_give_the_same_packages() {
    let out = scratch("same");
    let deb = |_| {
        pipeline::prepare::<DkmsDeb>(&request(&out, "debian12"))
            .unwrap()
            .bytes
    };
    assert_eq!(deb(1), deb(2));
    let rpm = |_| {
        pipeline::prepare::<DkmsRpm>(&request(&out, "rhel9"))
            .unwrap()
            .bytes
    };
    assert_eq!(rpm(1), rpm(2));
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn the_rpm_reads_back_with_its_name_files_and_scriptlets() {
    let out = scratch("rpm");
    let prepared = pipeline::prepare::<DkmsRpm>(&request(&out, "rhel9")).unwrap();
    // rhel9's dist (.el9, packaging/distros.yaml) is in the name and the
    // header's release, as rpmbuild on RHEL 9 writes them.
    assert_eq!(
        prepared.path.file_name().unwrap().to_string_lossy(),
        format!(
            "nvidia_peer_memory-dkms-{}-1.el9.noarch.rpm",
            workspace::version()
        )
    );
    let package = rpm::Package::parse(&mut prepared.bytes.as_slice()).unwrap();
    let metadata = &package.metadata;
    assert_eq!(metadata.get_name().unwrap(), "nvidia_peer_memory-dkms");
    assert_eq!(metadata.get_release().unwrap(), "1.el9");
    // SLES has no %dist: no suffix.
    let sles = pipeline::prepare::<DkmsRpm>(&request(&out, "sles15")).unwrap();
    assert_eq!(
        sles.path.file_name().unwrap().to_string_lossy(),
        format!(
            "nvidia_peer_memory-dkms-{}-1.noarch.rpm",
            workspace::version()
        )
    );
    assert_eq!(metadata.get_arch().unwrap(), "noarch");
    let dkms_dir = format!("/usr/src/nv_peer_mem-{}", workspace::version());
    let paths: Vec<String> = metadata
        .get_file_paths()
        .unwrap()
        .into_iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    for want in [
        "",
        "/dkms.conf",
        "/kmod",
        "/kmod/Makefile",
        "/kmod/VERSION",
        "/nv_peer_mem-dkms-rebuild",
    ] {
        assert!(
            paths.contains(&format!("{dkms_dir}{want}")),
            "{want} missing: {paths:?}"
        );
    }
    assert!(!paths.iter().any(|p| p.contains("/kmod/tests/")));
    let conflicts: Vec<String> = metadata
        .get_conflicts()
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    // The prebuilt module packages of the RPM families (rpm/ spec), by name,
    // so neither blocks an upgrade of the other.
    assert_eq!(
        conflicts,
        ["kmod-nvidia_peer_memory", "nvidia_peer_memory-kmp-default"]
    );
    let post = metadata.get_post_install_script().unwrap();
    assert!(
        post.script.contains("dkms add -m nv_peer_mem"),
        "{}",
        post.script
    );
    std::fs::remove_dir_all(&out).unwrap();
}
