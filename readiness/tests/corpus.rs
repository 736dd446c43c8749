//! The corpus of real nodes (tests/real/, its README): `--dump` archives
//! taken on the GPU hosts this project can reach, each replayed with
//! `--from` (1) to the verdict recorded beside it (`expected.txt`,
//! rewritten by `UPDATE_GOLDEN=1`) and (2) against what the driver, CUDA
//! and NCCL themselves said on that host (`said.txt`, distilled by
//! said.py from nvidia-smi -q, cuDeviceGetAttribute, NCCL_DEBUG=INFO and
//! NCCL_TOPO_DUMP_FILE). And the modelled trees of the other tests are
//! held to the file shapes those real nodes print.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("dump.tar").is_file())
        .collect();
    cases.sort();
    assert!(cases.len() >= 2, "the corpus is in {}", root.display());
    cases
}

/// The check over a dump, with nothing of this machine's in reach.
fn from(dump: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpudirect-rdma-check"))
        .arg("--from")
        .arg(dump)
        .args(args)
        .env("NV_PEER_MEM_SYSFS", "/nonexistent/sys")
        .env("NV_PEER_MEM_PROC", "/nonexistent/proc")
        .env("NV_PEER_MEM_ROOT", "/nonexistent")
        .env("NV_PEER_MEM_NVIDIA_SMI", "/nonexistent/nvidia-smi")
        .env("NV_PEER_MEM_SERVICE", "/nonexistent/nv_peer_mem-service")
        .env_remove("NV_PEER_MEM_NCCL_CONF")
        .env("NCCL_NET_GDR_LEVEL", "SYS") // a replay takes the dump's, never this
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn every_real_dump_replays_to_its_recorded_verdict() {
    for case in corpus() {
        let dump = case.join("dump.tar");
        let (status, human) = from(&dump, &[]);
        let (_, prom) = from(&dump, &["--prometheus"]);
        let (hstatus, health) = from(&dump, &["--health"]);
        let actual = format!(
            "$ gpudirect-rdma-check (exit {status})\n{human}$ gpudirect-rdma-check --health (exit {hstatus})\n{health}$ gpudirect-rdma-check --prometheus\n{prom}"
        );
        let expected_path = case.join("expected.txt");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&expected_path, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        assert!(
            expected == actual,
            "{}: the replay differs from expected.txt:\n{actual}\nIf intended: UPDATE_GOLDEN=1 cargo test -p readiness --test corpus",
            case.display()
        );
    }
}

/// `said.txt`'s lines that start with @prefix, the rest of each.
fn said(case: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_to_string(case.join("said.txt"))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix(prefix).map(str::to_owned))
        .collect()
}

#[test]
fn each_real_verdict_agrees_with_what_the_driver_and_nccl_said() {
    for case in corpus() {
        let name = case.display().to_string();
        let (status, out) = from(&case.join("dump.tar"), &[]);
        // nvidia-smi -q's BAR1 and memory totals: the check reads BAR1
        // from sysfs by NVIDIA's BAR numbering and must find the same.
        for mib in said(&case, "nvidia-smi -q: BAR1 Memory Usage Total: ") {
            let gib = mib.trim_end_matches(" MiB").parse::<u64>().unwrap() / 1024;
            for gpu in said(&case, "NCCL_TOPO_DUMP_FILE gpu ") {
                let address = gpu.split(' ').next().unwrap();
                assert_line(&out, &["bar1", address, &format!("BAR1 is {gib} GiB")]);
            }
        }
        for mib in said(&case, "nvidia-smi -q: FB Memory Usage Total: ") {
            let gib = mib.trim_end_matches(" MiB").parse::<u64>().unwrap() / 1024;
            assert_line(&out, &["bar1", &format!("for {gib} GiB of GPU memory")]);
        }
        // CUDA says each GPU can export DMA-BUF: the check must not blame
        // the driver for DMA-BUF, and must list each of those GPUs.
        for attr in said(&case, "cuDeviceGetAttribute ") {
            let f: Vec<&str> = attr.split(' ').collect();
            let address = f[0].to_ascii_lowercase();
            if f[1] == "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED" && f[2] == "1" {
                assert_line(&out, &["gpu", &address, "NVIDIA GPU"]);
                assert_line(&out, &["driver", "open kernel module"]);
                assert!(
                    !has_line(&out, &["dmabuf", "proprietary"])
                        && !has_line(&out, &["dmabuf", "drives none"])
                        && !has_line(&out, &["gpu_driver", &address]),
                    "{name}: CUDA says {address} exports DMA-BUF:\n{out}"
                );
            }
        }
        // NCCL found no RDMA device and disabled GPUDirect RDMA: so must
        // the check, with no pair where NCCL would use it.
        let nccl = said(&case, "NCCL ");
        if nccl
            .iter()
            .any(|l| l.ends_with(": NET/IB : No device found."))
        {
            assert_line(
                &out,
                &[
                    "nccl",
                    "NCCL finds no RDMA device (NET/IB: No device found)",
                ],
            );
            assert_line(&out, &["FAIL", "nic", "no RDMA device"]);
            assert_eq!(status, 3, "{name}:\n{out}");
        }
        // The NCCL a job loaded there (PyTorch's own) need not be the
        // libnccl installed on the node (h100x4-vm: 2.28.9 loaded, 2.28.3
        // installed): where they differ, the check must not say the
        // installed one is what jobs run.
        let loaded = nccl.first().and_then(|l| l.split(['+', ':']).next());
        for line in out
            .lines()
            .filter(|l| l.contains(" is installed (") && l.contains("NCCL "))
        {
            let installed = line.split("NCCL ").nth(1).and_then(|r| r.split(' ').next());
            if loaded.is_some() && installed != loaded {
                assert!(
                    line.contains("a job may load another NCCL"),
                    "{name}: NCCL {loaded:?} ran there, {installed:?} is installed:\n{out}"
                );
            }
        }
        if nccl.iter().any(|l| l.contains("GPU Direct RDMA Disabled")) {
            assert!(
                !has_line(&out, &["NCCL uses GPUDirect RDMA"])
                    && !has_line(&out, &["ok", "NCCL finds GPUDirect RDMA"]),
                "{name}: NCCL disabled GPUDirect RDMA there:\n{out}"
            );
        }
        // NCCL's topology marks each GPU GDR-capable: the check lists
        // each and says nothing of it standing in the way.
        for gpu in said(&case, "NCCL_TOPO_DUMP_FILE gpu ") {
            let (address, gdr) = gpu.split_once(' ').unwrap();
            if gdr == "gdr=1" {
                assert!(
                    !has_line(&out, &["FAIL", address]) && !has_line(&out, &["??", address]),
                    "{name}: NCCL marks {address} GDR-capable:\n{out}"
                );
            }
        }
    }
}

/// The monitoring forms ask no program (the rules run with programs off,
/// as main.rs runs them for --health, --prometheus, --textfile and
/// --nfd): over each real dump, the check run so asks none, where run as
/// the default form it asks those the dump recorded (so this can fail:
/// a rule that asked one regardless would be counted here, answered or
/// not). And the binary agrees: its --health over the dump shows no BAR1
/// size, which only nvidia-smi's answer gives, its default form does.
#[test]
fn the_monitoring_forms_of_a_real_dump_ask_no_program() {
    for case in corpus() {
        let bytes = std::fs::read(case.join("dump.tar")).unwrap();
        let quiet = readiness::snapshot::read(&bytes).unwrap();
        readiness::check::check(&quiet, false);
        assert!(
            quiet.programs_asked().is_empty(),
            "{}: the monitoring forms' check asked {:?}",
            case.display(),
            quiet.programs_asked()
        );
        let people = readiness::snapshot::read(&bytes).unwrap();
        readiness::check::check(&people, true);
        assert!(
            people.programs_asked().contains("nvidia-smi-memory"),
            "{}: the default form's check asked {:?}",
            case.display(),
            people.programs_asked()
        );
        let (_, health) = from(&case.join("dump.tar"), &["--health"]);
        assert!(!health.contains("GiB of GPU memory"), "{health}");
        let (_, human) = from(&case.join("dump.tar"), &[]);
        assert_line(&human, &["bar1", "GiB of GPU memory"]);
    }
}

/// The file shapes of real nodes (every `resource` in the corpus) pass
/// the same test the modelled trees do (common::check_shapes), so the
/// test is held to what kernels print, not to our model of it.
#[test]
fn real_resource_files_have_the_shapes_the_trees_are_held_to() {
    for case in corpus() {
        let dir = std::env::temp_dir().join(format!(
            "gpudirect-rdma-check-corpus-{}-{}",
            std::process::id(),
            case.file_name().unwrap().to_string_lossy()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let st = Command::new("tar")
            .arg("xf")
            .arg(case.join("dump.tar"))
            .arg("-C")
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success(), "GNU tar reads the dump");
        let sys = dir.join("gpudirect-rdma-check-dump/files/sys");
        let checked = check_shapes(&sys);
        assert!(checked >= 7, "{}: {checked} resource files", case.display());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A dump is deterministic (two of the same node are the same bytes),
/// GNU tar lists it, and its replay gives the live verdict in every form.
#[test]
fn a_dump_is_deterministic_and_replays_the_live_verdict() {
    let t = one_switch("dump", Some((0x5f, 0x0d)));
    t.mofed_with("nv_peer_mem");
    t.nvidia_smi("00000000:03:00.0, 81559\n");
    let a = t.root.join("a.tar");
    let b = t.root.join("b.tar");
    let (status, live) = t.run(&["--dump", a.to_str().unwrap()]);
    assert_eq!(status, 5, "{live}");
    t.run(&["--dump", b.to_str().unwrap()]);
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    let listed = Command::new("tar").arg("tf").arg(&a).output().unwrap();
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(
        listed.contains("gpudirect-rdma-check-dump/README\n"),
        "{listed}"
    );
    assert!(listed.contains("gpudirect-rdma-check-dump/index\n"));
    let forms: [&[&str]; 4] = [&[], &["--json"], &["--prometheus"], &["--health", "--nccl"]];
    let live: Vec<(i32, String)> = forms.iter().map(|f| t.run(f)).collect();
    // the node changes now; the dump keeps what was read
    t.unload("nv_peer_mem");
    assert_ne!(t.run(&["--json"]), live[1]);
    for (form, live) in forms.iter().zip(live) {
        assert_eq!(from(&a, form), live, "{form:?}");
    }
}

#[test]
fn a_bad_dump_is_refused_with_exit_2_and_nothing_printed() {
    let t = Tree::new("bad-dump");
    let bad = t.root.join("bad.tar");
    std::fs::write(&bad, "not a dump").unwrap();
    for file in [bad.as_path(), Path::new("/nonexistent/dump.tar")] {
        let (status, out) = from(file, &[]);
        assert_eq!(status, 2, "{out}");
        assert!(out.is_empty());
    }
    // --dump with a form that asks no program, or with --from, is refused
    for args in [
        &["--dump", "/tmp/x.tar", "--prometheus"][..],
        &["--dump", "/tmp/x.tar", "--from", "/tmp/y.tar"],
    ] {
        let (status, out) = t.run(args);
        assert_eq!(status, 2, "{args:?}: {out}");
    }
}
