//! NCCL's own GPUDirect RDMA test for the guest (issue 41): the files
//! NCCL's `ibGdrSupportInitOnce()` tests, read from NCCL's source in the
//! fixtures (both versions), and kmod/tests/vm/guest/nccl_gdr_files.c, which
//! makes NCCL's `access(path, F_OK)` call on each, built static for the
//! guest's architecture. scenarios.sh runs it while nv_peer_mem is loaded
//! and after it is gone.

use super::arch::Arch;
use crate::{fixtures, workspace};
use anyhow::{Context, Result, bail};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// NCCL's source tarballs and the file of each that holds
/// `ibGdrSupportInitOnce()`.
pub const NCCL_SOURCES: [(&str, &str); 2] = [
    ("nccl-2.28.9-1.tar.gz", "src/transport/net_ib.cc"),
    ("nccl-2.30.7-1.tar.gz", "src/transport/net_ib/gdr.cc"),
];

/// NCCL's definition of its test, which the probe repeats: a source whose
/// macro differs is refused rather than probed with another call.
const MACRO: &str = "#define KNL_MODULE_LOADED(a) ((access(a, F_OK) == -1) ? 0 : 1)";

/// The paths `ibGdrSupportInitOnce()` passes to `KNL_MODULE_LOADED` in
/// @source (one NCCL source file's text), in order.
pub fn gdr_files(source: &str) -> Result<Vec<String>> {
    if !source.lines().any(|l| l.trim() == MACRO) {
        bail!("no `{MACRO}` line: NCCL tests for its peer memory clients another way");
    }
    let start = source
        .find("static void ibGdrSupportInitOnce()")
        .context("no ibGdrSupportInitOnce()")?;
    let body = &source[start..];
    let body = &body[..body
        .find("\n}")
        .context("ibGdrSupportInitOnce() does not end")?];
    let paths: Vec<String> = body
        .split("KNL_MODULE_LOADED(\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect();
    if paths.is_empty() {
        bail!("ibGdrSupportInitOnce() tests no file");
    }
    Ok(paths)
}

/// The image's probe and its list ("<NCCL version> <path>" lines), built
/// in @work; Err(why) (the text the guest prints as skipped) when an NCCL
/// fixture is missing.
pub struct Probe {
    pub binary: PathBuf,
    pub list: PathBuf,
}

/// [`gdr_files`] of @member in the NCCL fixture @tarball (at @path).
fn fixture_gdr_files(path: &Path, tarball: &str, member: &str) -> Result<Vec<String>> {
    let top = tarball.trim_end_matches(".tar.gz");
    let text = fixtures::read_member(path, &format!("{top}/{member}"))?;
    let text = String::from_utf8(text).with_context(|| format!("{tarball}: {member}"))?;
    gdr_files(&text).with_context(|| format!("{tarball}: {member}"))
}

pub fn build(work: &Path, arch: Arch) -> Result<std::result::Result<Probe, String>> {
    let mut list = String::new();
    for (tarball, member) in NCCL_SOURCES {
        let path = match fixtures::file(tarball) {
            Ok(path) => path,
            Err(why) => return Ok(Err(why)),
        };
        let version = tarball
            .trim_start_matches("nccl-")
            .trim_end_matches(".tar.gz");
        for file in fixture_gdr_files(&path, tarball, member)? {
            list.push_str(&format!("{version} {file}\n"));
        }
    }
    fs::create_dir_all(work)?;
    let list_path = work.join("nccl_gdr_files.list");
    fs::write(&list_path, list)?;
    let binary = work.join("nccl_gdr_files");
    let gcc = match arch {
        Arch::X86_64 => "gcc",
        Arch::Arm64 => "aarch64-linux-gnu-gcc",
    };
    let out = Command::new(gcc)
        .args(["-static", "-O2", "-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&binary)
        .arg(workspace::path("kmod/tests/vm/guest/nccl_gdr_files.c"))
        .output()
        .with_context(|| format!("running {gcc}"))?;
    if !out.status.success() {
        bail!(
            "{gcc} -static could not build NCCL's access probe (run: bash ci/setup-host.sh, which installs libc6-dev and libc6-dev-arm64-cross): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(Ok(Probe {
        binary,
        list: list_path,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paths_are_read_from_nccls_own_source() {
        for (tarball, member) in NCCL_SOURCES {
            let path = match fixtures::file(tarball) {
                Ok(path) => path,
                Err(why) => {
                    // CI never passes what it did not test (issue 60).
                    assert!(
                        std::env::var("CI").as_deref() != Ok("true"),
                        "not run, and CI=true: {why}"
                    );
                    println!("SKIP: {why}");
                    continue;
                }
            };
            let files = fixture_gdr_files(&path, tarball, member).unwrap();
            assert_eq!(
                files,
                [
                    "/sys/kernel/mm/memory_peers/nv_mem/version",
                    "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
                    "/sys/module/nvidia_peermem/version"
                ],
                "{tarball}"
            );
        }
    }

    #[test]
    fn a_source_with_another_test_is_refused() {
        let other = "#define KNL_MODULE_LOADED(a) ((stat(a) == -1) ? 0 : 1)\nstatic void ibGdrSupportInitOnce() {\n  x = KNL_MODULE_LOADED(\"/a\");\n}\n";
        assert!(gdr_files(other).is_err());
        let none = format!("{MACRO}\nstatic void ibGdrSupportInitOnce() {{\n  x = 0;\n}}\n");
        assert!(gdr_files(&none).is_err());
    }
}
