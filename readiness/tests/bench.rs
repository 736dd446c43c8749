//! How long one run of the check takes (issue 39's target: 10 ms on a
//! real multi-GPU host, no program spawned in the monitoring forms), over
//! the largest modelled tree (8 GPUs and 8 NICs under 16 switches, DGX
//! H100's layout) and over the real nodes' dumps, printed beside the real
//! hosts' figures (tests/real/*/said.txt: the check and `nvidia-smi topo
//! -m` timed in the same run there). Figures only, never a timed
//! assertion: `cargo test --release -p readiness --test bench -- --ignored
//! --nocapture` (ci/test.sh runs it).

mod common;
use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Median, min and max in ms of @runs runs of @command.
fn time(runs: usize, mut command: impl FnMut() -> Command) -> (f64, f64, f64) {
    let mut ms: Vec<f64> = (0..runs)
        .map(|_| {
            let mut c = command();
            let start = Instant::now();
            let out = c.output().unwrap();
            let t = start.elapsed().as_secs_f64() * 1000.0;
            assert!(!out.stdout.is_empty(), "the check printed nothing");
            t
        })
        .collect();
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (ms[runs / 2], ms[0], ms[runs - 1])
}

#[test]
#[ignore = "a benchmark: cargo test --release -p readiness --test bench -- --ignored --nocapture"]
fn the_check_takes_milliseconds() {
    let t = eight_by_eight(0);
    let bin = env!("CARGO_BIN_EXE_gpudirect-rdma-check");
    println!(
        "gpudirect-rdma-check run time, ms (median, min, max of 100 runs; target: at most 10 ms on a real multi-GPU host)"
    );
    println!(
        "  this machine, the largest modelled tree (8 GPUs, 8 NICs, 32 bridges, MLNX_OFED, nv_peer_mem):"
    );
    for form in [&["--prometheus"][..], &["--health"], &["--json"]] {
        let (med, min, max) = time(100, || {
            let mut c = Command::new(bin);
            c.args(form)
                .env("NV_PEER_MEM_SYSFS", t.sys())
                .env("NV_PEER_MEM_PROC", t.root.join("proc"))
                .env("NV_PEER_MEM_ROOT", &t.root)
                .env("NV_PEER_MEM_SERVICE", "/nonexistent")
                .env("NV_PEER_MEM_NVIDIA_SMI", "/nonexistent");
            c
        });
        println!("    {:<14} {med:6.2} ({min:.2}-{max:.2})", form.join(" "));
    }
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real");
    let mut cases: Vec<_> = std::fs::read_dir(&real)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("dump.tar").is_file())
        .collect();
    cases.sort();
    for case in cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let (med, min, max) = time(100, || {
            let mut c = Command::new(bin);
            c.arg("--from")
                .arg(case.join("dump.tar"))
                .arg("--prometheus");
            c
        });
        println!(
            "  this machine, {name}'s dump replayed (--from, --prometheus): {med:.2} ({min:.2}-{max:.2})"
        );
        let said = std::fs::read_to_string(case.join("said.txt")).unwrap();
        for line in said
            .lines()
            .filter_map(|l| l.strip_prefix("timing ms median of 30 runs: "))
        {
            println!("    measured on {name} itself (said.txt): {line}");
        }
    }
}
