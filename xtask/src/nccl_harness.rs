//! `cargo xtask nccl-harness`: NCCL's own topology and GPUDirect RDMA
//! decision code, compiled from NCCL's source in the fixtures together with
//! nccl-harness/ (its main and the stubs for what that code references but
//! does not reach), then run over NCCL topology XML files (issue 42;
//! docs/nccl-harness.md). NCCL's .cc files are compiled unchanged, with
//! g++, as NCCL's own Makefile compiles them (it needs no nvcc for them).

use crate::{fixtures, workspace};
use anyhow::{Context, Result, bail, ensure};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The NCCL releases the harness builds: the fixtures' tarballs
/// `nccl-<release>.tar.gz` (2.28.9 is the NCCL PyTorch 2.11 ships, seen on
/// the lent H200 hosts; 2.30.7 the newest tag when they were added).
pub const RELEASES: [&str; 2] = ["2.28.9-1", "2.30.7-1"];

#[derive(clap::Args)]
pub struct NcclHarnessArgs {
    /// An NCCL release to build, as in the fixture's name
    /// nccl-<RELEASE>.tar.gz (repeatable; default: 2.28.9-1 and 2.30.7-1)
    #[arg(long = "nccl", value_name = "RELEASE")]
    releases: Vec<String>,
    /// NCCL topology XML files (NCCL_TOPO_FILE's and NCCL_TOPO_DUMP_FILE's
    /// format) to run each built harness over; without any, only build
    files: Vec<PathBuf>,
}

pub fn nccl_harness_command(args: &NcclHarnessArgs) -> Result<()> {
    let releases: Vec<String> = if args.releases.is_empty() {
        RELEASES.iter().map(|r| r.to_string()).collect()
    } else {
        args.releases.clone()
    };
    for file in &args.files {
        ensure!(file.is_file(), "{}: no such file", file.display());
    }
    for release in &releases {
        let harness = build(release)?;
        println!("Built: {}", harness.display());
        for file in &args.files {
            println!("== NCCL {release}: {}", file.display());
            let out = run(&harness, file)?;
            print!("{out}");
        }
    }
    Ok(())
}

/// The harness's output for @file, or the error with what it said.
pub fn run(harness: &Path, file: &Path) -> Result<String> {
    crate::tool::stdout(
        Command::new(harness)
            .arg(file)
            // A fixed host: NCCL hashes the host name and boot id otherwise
            // (misc/utils.cc, getHostHash), which only names the host.
            .env("NCCL_HOSTID", "nccl-harness")
            // NCCL reads the file this names before ~/.nccl.conf and
            // /etc/nccl.conf (misc/param.cc), which node_files.cc keeps
            // away from the build host's; a developer's own must not
            // change what the harness computes either.
            .env_remove("NCCL_CONF_FILE"),
    )
}

/// Builds target/nccl-harness/<release>/nccl-harness (again only what
/// changed) and returns its path.
pub fn build(release: &str) -> Result<PathBuf> {
    ensure!(
        !release.is_empty()
            && release
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-'),
        "--nccl {release:?}: a release is digits, dots and a dash, e.g. 2.28.9-1"
    );
    let tarball =
        fixtures::file(&format!("nccl-{release}.tar.gz")).map_err(|why| anyhow::anyhow!(why))?;
    let dir = workspace::path(&format!("target/nccl-harness/{release}"));
    let src = unpack(&tarball, &dir)?;
    let generated = dir.join("gen");
    generate_nccl_h(&src, &generated)?;
    let cuda = cuda_headers()?;
    let (major, minor) = cuda_version(&cuda)?;
    // From 2.30 NCCL's sysfs readers are in os/linux.cc behind NCCL_OS_LINUX
    // (its makefiles/common.mk defines it) and its parameters in param/.
    let os_layer = src.join("src/os/linux.cc").is_file();
    let mut units: Vec<PathBuf> = [
        "graph/topo.cc",
        "graph/paths.cc",
        "graph/xml.cc",
        "misc/utils.cc",
        "misc/param.cc",
        "misc/nvmlwrap.cc",
        "debug.cc",
    ]
    .iter()
    .map(|u| src.join("src").join(u))
    .collect();
    if os_layer {
        for u in ["os/linux.cc", "param/param.cc", "param/param_registry.cc"] {
            units.push(src.join("src").join(u));
        }
    }
    // NCCL's own IB plugin, which finds the node's RDMA devices over the
    // verbs double (docs/nccl-harness.md, "The IB plugin"): one file
    // before 2.30, a directory from it; its verbs and mlx5 wrappers and
    // the socket code that finds its IP interface.
    let ib_file = src.join("src/transport/net_ib.cc");
    if ib_file.is_file() {
        units.push(ib_file);
    } else {
        let ib_dir = src.join("src/transport/net_ib");
        let mut ib: Vec<PathBuf> = fs::read_dir(&ib_dir)
            .with_context(|| format!("{}: neither net_ib.cc nor net_ib/", ib_dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "cc"))
            .collect();
        ib.sort();
        units.extend(ib);
    }
    for u in [
        "misc/ibvwrap.cc",
        "misc/ibvsymbols.cc",
        "misc/mlx5dvwrap.cc",
        "misc/mlx5dvsymbols.cc",
        "misc/socket.cc",
    ] {
        units.push(src.join("src").join(u));
    }
    for u in ["harness.cc", "stubs.cc", "node_files.cc"] {
        units.push(workspace::path(&format!("nccl-harness/{u}")));
    }
    let mut flags: Vec<String> = vec![
        "-std=c++17".into(),
        "-O1".into(),
        // So that realpath, fopen and the rest are the plain symbols.
        "-D_FORTIFY_SOURCE=0".into(),
        format!("-DCUDA_MAJOR={major}"),
        format!("-DCUDA_MINOR={minor}"),
    ];
    if os_layer {
        flags.push("-DNCCL_OS_LINUX".into());
    }
    for inc in [
        src.join("src"),
        generated.clone(),
        src.join("src/include"),
        src.join("src/include/plugin"),
        cuda.clone(),
    ] {
        flags.push(format!("-I{}", inc.display()));
    }
    let obj = dir.join("obj");
    fs::create_dir_all(&obj)?;
    let objects = compile(&units, &obj, &flags, release)?;
    let harness = dir.join("nccl-harness");
    let newest = objects
        .iter()
        .filter_map(|o| fs::metadata(o).and_then(|m| m.modified()).ok())
        .max();
    let linked = fs::metadata(&harness).and_then(|m| m.modified()).ok();
    if linked.is_none() || newest > linked {
        let status = Command::new("g++")
            .arg("-o")
            .arg(&harness)
            .args(&objects)
            // node_files.cc: the files NCCL opens are the described node's
            // (its /sys tree, its /etc/nccl.conf), never the build host's.
            .arg("-Wl,--wrap=fopen,--wrap=realpath,--wrap=opendir,--wrap=access,--wrap=dlopen")
            .args(["-ldl", "-lpthread", "-lrt"])
            .status()
            .context("running g++ (apt install g++)")?;
        ensure!(
            status.success(),
            "linking the harness for NCCL {release} failed"
        );
    }
    // The verbs double NCCL's IB plugin dlopens in place of libibverbs and
    // libmlx5 (node_files.cc), beside the harness, with rdma-core's
    // symbol versions (verbs_double.map).
    let double = dir.join("libverbs-double.so");
    let sources = [
        workspace::path("nccl-harness/verbs_double.cc"),
        workspace::path("nccl-harness/verbs_double.map"),
    ];
    let built = fs::metadata(&double).and_then(|m| m.modified()).ok();
    let changed = sources
        .iter()
        .filter_map(|s| fs::metadata(s).and_then(|m| m.modified()).ok())
        .max();
    if built.is_none() || changed > built {
        println!("==> [NCCL {release}] g++ -shared {}", sources[0].display());
        let status = Command::new("g++")
            .args(&flags)
            .args(["-shared", "-fPIC", "-o"])
            .arg(&double)
            .arg(&sources[0])
            .arg(format!("-Wl,--version-script={}", sources[1].display()))
            .status()
            .context("running g++ (apt install g++)")?;
        ensure!(
            status.success(),
            "building the verbs double for NCCL {release} failed"
        );
    }
    Ok(harness)
}

/// The tarball's tree in @dir/src (once; a marker says it is whole).
fn unpack(tarball: &Path, dir: &Path) -> Result<PathBuf> {
    let src = dir.join("src");
    let done = dir.join("src.unpacked");
    if done.is_file() {
        return Ok(src);
    }
    let _ = fs::remove_dir_all(&src);
    fs::create_dir_all(&src)?;
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(tarball)
        .arg("-C")
        .arg(&src)
        .arg("--strip-components=1")
        .status()
        .context("running tar")?;
    ensure!(status.success(), "unpacking {} failed", tarball.display());
    ensure!(
        src.join("src/nccl.h.in").is_file() && src.join("makefiles/version.mk").is_file(),
        "{} is not NCCL's source (no src/nccl.h.in or makefiles/version.mk)",
        tarball.display()
    );
    fs::write(&done, "")?;
    Ok(src)
}

/// @generated/nccl.h from src/nccl.h.in, with the five substitutions of NCCL's
/// own rule for it (src/Makefile, `$(INCDIR)/nccl.h`) and the values of
/// makefiles/version.mk.
fn generate_nccl_h(src: &Path, generated: &Path) -> Result<()> {
    let mk = fs::read_to_string(src.join("makefiles/version.mk"))?;
    let value = |name: &str| -> String {
        mk.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(":=")?;
                (k.trim() == name).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let (major, minor, patch) = (
        value("NCCL_MAJOR"),
        value("NCCL_MINOR"),
        value("NCCL_PATCH"),
    );
    let number = |s: &str| -> Result<u32> {
        s.parse()
            .with_context(|| format!("makefiles/version.mk: {s:?} is not a number"))
    };
    // printf "%d%02d%02d" $(NCCL_MAJOR) $(NCCL_MINOR) $(NCCL_PATCH)
    let code = format!(
        "{}{:02}{:02}",
        number(&major)?,
        number(&minor)?,
        number(&patch)?
    );
    let text = fs::read_to_string(src.join("src/nccl.h.in"))?
        .replace("${nccl:Major}", &major)
        .replace("${nccl:Minor}", &minor)
        .replace("${nccl:Patch}", &patch)
        .replace("${nccl:Suffix}", &value("NCCL_SUFFIX"))
        .replace("${nccl:Version}", &code);
    fs::create_dir_all(generated)?;
    let path = generated.join("nccl.h");
    if fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
        fs::write(&path, text)?;
    }
    Ok(())
}

/// The include directory ci/fetch-cuda-headers.sh provides (Debian's
/// nvidia-cuda-dev and libcu++-dev headers, cached).
fn cuda_headers() -> Result<PathBuf> {
    let out = Command::new("bash")
        .arg("ci/fetch-cuda-headers.sh")
        .current_dir(workspace::root())
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running bash ci/fetch-cuda-headers.sh")?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || !dir.join("cuda_runtime.h").is_file() {
        bail!(
            "ci/fetch-cuda-headers.sh did not provide CUDA's headers (it needs Debian's archive)"
        );
    }
    Ok(dir)
}

/// CUDA_MAJOR and CUDA_MINOR as NCCL's makefiles pass them, from the
/// headers' own `#define CUDA_VERSION` (cuda.h: major * 1000 + minor * 10).
fn cuda_version(include: &Path) -> Result<(u32, u32)> {
    let text = fs::read_to_string(include.join("cuda.h"))?;
    let version: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("#define CUDA_VERSION "))
        .and_then(|v| v.trim().parse().ok())
        .context("cuda.h defines no CUDA_VERSION")?;
    Ok((version / 1000, version % 1000 / 10))
}

/// Each of @units compiled into @obj (again only where the source is newer
/// than its object), two at a time; the objects' paths.
fn compile(units: &[PathBuf], obj: &Path, flags: &[String], release: &str) -> Result<Vec<PathBuf>> {
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut objects = Vec::new();
    let mut todo = Vec::new();
    for unit in units {
        // param/param.cc and misc/param.cc: the directory keeps them apart.
        let parent = unit
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stem = unit
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let object = obj.join(format!("{parent}_{stem}.o"));
        let fresh = match (fs::metadata(unit), fs::metadata(&object)) {
            (Ok(u), Ok(o)) => u.modified().ok() <= o.modified().ok(),
            _ => false,
        };
        if !fresh {
            todo.push((unit.clone(), object.clone()));
        }
        objects.push(object);
    }
    for chunk in todo.chunks(jobs) {
        let children: Vec<_> = chunk
            .iter()
            .map(|(unit, object)| {
                println!("==> [NCCL {release}] g++ -c {}", unit.display());
                Command::new("g++")
                    .args(flags)
                    .arg("-c")
                    .arg(unit)
                    .arg("-o")
                    .arg(object)
                    .spawn()
                    .map(|c| (unit, c))
                    .context("running g++ (apt install g++)")
            })
            .collect::<Result<_>>()?;
        for (unit, mut child) in children {
            ensure!(
                child.wait()?.success(),
                "compiling {} for NCCL {release} failed",
                unit.display()
            );
        }
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The NCCL releases are named in three places that must agree: here,
    /// ci/test-nccl.sh's loop, and the releases gpudirect-rdma-check says
    /// its rules were proven against (readiness/src/nccl_version.rs).
    #[test]
    fn the_nccl_releases_are_the_same_everywhere() {
        let read = |p: &str| fs::read_to_string(workspace::path(p)).unwrap();
        let script = read("ci/test-nccl.sh");
        let looped = script
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("for r in ")?
                    .strip_suffix("; do")
                    .map(str::to_owned)
            })
            .expect("ci/test-nccl.sh: a `for r in ...; do` line");
        assert_eq!(looped.split_whitespace().collect::<Vec<_>>(), RELEASES);
        let proven = read("readiness/src/nccl_version.rs");
        for release in RELEASES {
            let (version, _) = release.split_once('-').unwrap();
            let tuple = format!("({})", version.replace('.', ", "));
            assert!(
                proven.contains(&tuple),
                "readiness/src/nccl_version.rs PROVEN lacks {tuple}"
            );
        }
        assert!(
            proven.contains(&format!("PROVEN: [(u32, u32, u32); {}]", RELEASES.len())),
            "readiness/src/nccl_version.rs PROVEN holds other releases than {RELEASES:?}"
        );
    }
}
