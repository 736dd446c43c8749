//! build-modules for the RHEL family (the kmod route): the source rpm of
//! build-srpm, rebuilt by the build host's rpmbuild once per `--kernel`
//! with the kernel in the kmod package's release (the spec's
//! `kmod_kernel_tag`), so the kmod packages of several kernels differ and
//! share a repository. `-common` and `-dkms` come once, from the first
//! build. SUSE's KMP macros build against the one kernel each flavour's
//! /usr/src/linux-obj/<cpu>/<flavor> points to (kernel-syms: the service
//! pack's kernel), and the KMP's name carries that kernel: one --kernel,
//! which must be that one, per build host; a list spans service packs, so
//! build hosts. Fedora has no prebuilt module: refused naming build-dkms.

use super::BuildModulesArgs;
use super::modsign::ModSign;
use crate::bench_kmod::timed;
use crate::distro::{Distro, ModuleRoute};
use crate::error::{BadInput, print_report};
use crate::files_below::files_below;
use crate::pipeline::{self, Request};
use crate::srpm::Srpm;
use crate::tarball::write_atomically;
use anyhow::{Context, Result, bail, ensure};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A kernel release as part of an rpm release: `-` is not allowed there,
/// and the architecture suffix says nothing the package's arch does not.
/// `5.14.0-427.13.1.el9_4.x86_64` -> `k5.14.0_427.13.1.el9_4`.
pub fn kernel_tag(release: &str) -> Result<String> {
    ensure!(
        !release.is_empty()
            && release.bytes().next().is_some_and(|b| b.is_ascii_digit())
            && release
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._+-".contains(&b)),
        "--kernel {release:?} is not a kernel release (uname -r, e.g. 5.14.0-427.13.1.el9_4.x86_64)"
    );
    let base = [".x86_64", ".aarch64"]
        .iter()
        .find_map(|arch| release.strip_suffix(arch))
        .unwrap_or(release);
    Ok(format!("k{}", base.replace('-', "_")))
}

/// `cargo xtask build-modules --distro <rpm distro>`.
pub fn build(args: &BuildModulesArgs, distro: &Distro) -> Result<()> {
    let (kernels, modsign, scratch) = check(args, distro).map_err(BadInput::wrap)?;
    let kmp = distro
        .rpm
        .as_ref()
        .is_some_and(|r| r.route == ModuleRoute::Kmp);
    let prepared = pipeline::prepare::<Srpm>(&Request {
        distro: Some(distro.id.clone()),
        ..args.request.clone()
    })?;
    let srpm = scratch.0.join(
        prepared
            .path
            .file_name()
            .context("the source rpm has no file name")?,
    );
    std::fs::write(&srpm, &prepared.bytes)?;
    let core_cache = super::core_cache(args);
    let mut packages: Vec<PathBuf> = Vec::new();
    let mut costs = String::new();
    for (index, (kernel, tag)) in kernels.iter().enumerate() {
        eprintln!(
            "build-modules: [{}/{}] rpmbuild --rebuild for {kernel}...",
            index + 1,
            kernels.len()
        );
        let top = scratch.0.join(tag);
        let mut rpmbuild = Command::new("rpmbuild");
        rpmbuild
            .arg("--rebuild")
            .arg("--define")
            .arg(format!("_topdir {}", top.display()))
            .env("NVPM_RUST_CACHE", &core_cache);
        if !kmp {
            rpmbuild
                .arg("--define")
                .arg(format!("kernel_version {kernel}"))
                .arg("--define")
                .arg(format!("kmod_kernel_tag {tag}"));
        }
        if let Some(sign) = &modsign {
            // The spec quotes both macros in %install; modsign.rs refuses a
            // URI with characters those quotes would not hold.
            let mut key = std::ffi::OsString::from("modsign_key ");
            key.push(sign.key_arg());
            let mut cert = std::ffi::OsString::from("modsign_cert ");
            cert.push(&sign.cert);
            rpmbuild
                .args(["--with", "modsign", "--define"])
                .arg(key)
                .arg("--define")
                .arg(cert);
        }
        rpmbuild.args(&args.rpmbuild_options).arg(&srpm);
        let step = timed(rpmbuild, &format!("rpmbuild --rebuild for {kernel}"))?;
        let cost = format!(
            "{kernel}: {:.1} s, peak RSS {}\n",
            step.seconds,
            step.peak_rss_kib
                .map_or("unknown (install GNU time)".to_owned(), |k| format!(
                    "{} MiB",
                    k / 1024
                ))
        );
        eprint!("build-modules: {cost}");
        costs.push_str(&cost);
        let built = files_below(&top.join("RPMS"), "rpm")?;
        // The module package: kmod-<name>-<ver>-<rel>.<tag>, or SUSE's
        // <name>-kmp-<flavor>-<ver>_k<kernel>-<rel>.
        let is_module = |p: &PathBuf| {
            let name = file_name(p);
            if kmp {
                name.contains("-kmp-")
            } else {
                name.starts_with("kmod-")
            }
        };
        let modules: Vec<&PathBuf> = built
            .iter()
            .filter(|p| is_module(p) && (kmp || file_name(p).contains(&format!(".{tag}"))))
            .collect();
        ensure!(
            modules.len() == 1,
            "rpmbuild for {kernel} made {} module packages for it, not one: {built:?}",
            modules.len()
        );
        packages.push(modules[0].clone());
        if index == 0 {
            packages.extend(built.iter().filter(|p| !is_module(p)).cloned());
        }
    }
    let mut report = String::new();
    let certificate = modsign.as_ref().map(|sign| &sign.der);
    for package in &packages {
        let path = args.request.out.join(file_name(package));
        write_atomically(&path, &std::fs::read(package)?)?;
        report.push_str(&format!("Built: {}\n", path.display()));
    }
    let cert_path = args.request.out.join(super::modsign::NODE_CERTIFICATE);
    if let Some(der) = certificate {
        write_atomically(&cert_path, der)?;
        report.push_str(&format!("Built: {}\n", cert_path.display()));
    }
    report.push_str(&format!(
        "\nBuild cost per kernel (core cache {}):\n{costs}\nNext: put these in a signed dnf repository:\n    cargo xtask build-repo --repo <DIR> --sign-key <KEY> {}/*.rpm\n",
        core_cache.display(),
        args.request.out.display()
    ));
    if certificate.is_some() {
        report.push_str(&ModSign::enrolment_note(&cert_path));
    }
    report.push_str(super::unsigned_warning(args));
    print_report(&report)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The rpm builds' checked inputs: each kernel with its kmod tag, the
/// signing key, the scratch directory.
type Checked = (Vec<(String, String)>, Option<ModSign>, super::Scratch);

/// Every input of the rpm builds, checked before any runs.
fn check(args: &BuildModulesArgs, distro: &Distro) -> Result<Checked> {
    let route = distro.rpm.as_ref().map(|r| r.route);
    match route {
        Some(ModuleRoute::Kmod) => {}
        Some(ModuleRoute::Kmp) => {
            let flavor = distro
                .rpm
                .as_ref()
                .and_then(|r| r.flavor.as_deref())
                .unwrap_or("default");
            // The package with SUSE's KMP macros: kernel-syms on SLES 15,
            // kernel-macros on SLES 16 (packaging/distros.yaml).
            let macros = distro
                .rpm
                .as_ref()
                .and_then(|r| r.macros.as_deref())
                .unwrap_or("kernel-syms");
            ensure!(
                args.kernels.len() == 1,
                "--distro {}: SUSE's KMP macros build for the one kernel of /usr/src/linux-obj (the kernel-{flavor}-devel installed, the service pack's kernel) in one rpmbuild, and the KMP then serves that service pack's kernels; pass that kernel alone, and build for other service packs on their own build hosts",
                distro.id
            );
            let obj = args.suse_obj_root.join(std::env::consts::ARCH).join(flavor);
            let release = make_kernelrelease(&obj);
            ensure!(
                release.as_deref() == Some(args.kernels[0].as_str()),
                "--kernel {}: this build host's KMP macros build for {} ({}); install that kernel's devel package and {macros} (zypper install kernel-{flavor}-devel {macros}), or run on a build host of its service pack",
                args.kernels[0],
                release.as_deref().unwrap_or("no kernel"),
                obj.display()
            );
        }
        _ => bail!(
            "--distro {}: this distribution gets no prebuilt module package (its kernel moves too fast); use the DKMS package: cargo xtask build-dkms --distro {0}",
            distro.id
        ),
    }
    ensure!(
        args.ofed_package.is_none() && args.nvidia_src.is_none() && !args.no_metapackage,
        "--ofed-package, --nvidia-src and --no-metapackage are for Debian and Ubuntu; the rpm build finds MLNX_OFED and the NVIDIA driver as its spec says (--rpmbuild-option=--define='ofa_kernel <dir>', 'nvidia_symvers <file>')"
    );
    ensure!(
        crate::tool::find("rpmbuild").is_some(),
        "rpmbuild is not installed; install rpm-build (dnf install rpm-build) on this build host"
    );
    let kmp = route == Some(ModuleRoute::Kmp);
    let mut kernels: Vec<(String, String)> = Vec::new();
    for kernel in &args.kernels {
        ensure!(
            !kernels.iter().any(|(k, _)| k == kernel),
            "--kernel {kernel} is given twice"
        );
        let tag = kernel_tag(kernel)?;
        if !kmp {
            let devel = args.kernel_devel_root.join(kernel);
            ensure!(
                devel.join("Makefile").is_file(),
                "--kernel {kernel}: no kernel build tree at {}; install it on this build host (dnf install kernel-devel-{kernel})",
                devel.display()
            );
        }
        kernels.push((kernel.clone(), tag));
    }
    let modsign =
        super::modsign::from_args(args.modsign_key.as_deref(), args.modsign_cert.as_deref())?;
    Ok((kernels, modsign, super::Scratch::new()?))
}

/// `make kernelrelease` of a kernel build tree, if it is one.
fn make_kernelrelease(dir: &Path) -> Option<String> {
    let out = Command::new("make")
        .args(["-s", "-C"])
        .arg(dir)
        .arg("kernelrelease")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::kernel_tag;

    #[test]
    fn kernel_tags_fit_an_rpm_release() {
        assert_eq!(
            kernel_tag("5.14.0-427.13.1.el9_4.x86_64").unwrap(),
            "k5.14.0_427.13.1.el9_4"
        );
        assert_eq!(
            kernel_tag("6.1.192-56.el.aarch64").unwrap(),
            "k6.1.192_56.el"
        );
        assert_eq!(kernel_tag("6.12.0-55.el10").unwrap(), "k6.12.0_55.el10");
        for bad in ["", "../5.14", "5.14 0", "x5.14"] {
            assert!(kernel_tag(bad).is_err(), "{bad}");
        }
    }
}
