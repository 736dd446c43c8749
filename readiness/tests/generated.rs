//! Issue 57: the check against NCCL's own code over node trees nobody chose
//! (tests/common/generator.rs), every level, both releases, GPU by GPU (the
//! distance class, the NIC NCCL uses, GPUDirect RDMA for reads and
//! writes: tests/common/oracle.rs). A difference names the seed that
//! rebuilds its node: NVPM_GENERATED_SEED=<seed> NVPM_GENERATED_NODES=1.
//! NVPM_GENERATED_NODES (default 40) nodes from NVPM_GENERATED_SEED
//! (default 1) on NVPM_GENERATED_JOBS threads (default: every core);
//! ci/test-nccl.sh runs 1000, and a long run outside CI asks for more.
//! Each node's four levels are one harness run per release
//! (oracle::judge_levels). NVPM_CHECK_BIN runs another build of the check
//! (the mutants of tests/mutants), NVPM_GENERATED_STOP=1 stops at the
//! first difference.

mod common;
use common::oracle::{self, devices};
use common::*;
use std::path::PathBuf;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn the_generator_makes_the_same_node_of_a_seed_in_kernel_shapes() {
    for seed in 1..=20 {
        let (a, what_a) = generator::node(seed);
        let (b, what_b) = generator::node(seed);
        assert_eq!(what_a, what_b);
        assert!(check_shapes(&a.sys()) > 0, "seed {seed}: {what_a}");
        // Buses as the kernel names them (<domain>:<bus>), never NCCL's cut.
        for e in std::fs::read_dir(a.sys().join("class/pci_bus")).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let (domain, bus) = name.split_once(':').unwrap();
            assert!(
                domain.len() >= 4 && bus.len() == 2,
                "seed {seed}: bus {name}"
            );
        }
        drop(b);
    }
}

/// The differential over the nodes of seeds @first.. (@count of them) on
/// @jobs threads: how many GPU verdicts were compared, and each difference.
/// With @stop, the threads stop at the first node that differs.
fn differential(first: u64, count: u64, jobs: usize, stop: bool) -> (usize, Vec<String>) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let next = AtomicU64::new(first);
    let found = AtomicBool::new(false);
    let results = std::sync::Mutex::new((0usize, Vec::new()));
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= first + count || (stop && found.load(Ordering::Relaxed)) {
                        break;
                    }
                    let (n, d) = judge_node(seed);
                    if !d.is_empty() {
                        found.store(true, Ordering::Relaxed);
                    }
                    let mut r = results.lock().unwrap();
                    r.0 += n;
                    r.1.extend(d);
                }
            });
        }
    });
    results.into_inner().unwrap()
}

/// One generated node: the check at every level, NCCL's releases over all
/// of them at once (oracle::judge_levels), under the node's NCCL settings
/// (generator::settings) as each reads them.
fn judge_node(seed: u64) -> (usize, Vec<String>) {
    let (t, mut what) = generator::node(seed);
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    let nics = std::fs::read_dir(t.sys().join("class/infiniband")).map_or(0, |d| d.count()) as u32;
    let (settings, given) = generator::settings(seed, nics);
    // The check's environment, and NCCL's (the harness reads the node's
    // /etc/nccl.conf from the file NCCL_HARNESS_ETC_NCCL_CONF names).
    let mut ours: Vec<(&str, PathBuf)> = Vec::new();
    let mut theirs: Vec<(&str, PathBuf)> = Vec::new();
    if !settings.is_empty() {
        let shown: Vec<String> = settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        match given {
            generator::Given::Environment => {
                for (k, v) in &settings {
                    ours.push((k, PathBuf::from(v)));
                    theirs.push((k, PathBuf::from(v)));
                }
                what.push_str(&format!("; environment {}", shown.join(" ")));
            }
            generator::Given::EtcNcclConf => {
                let text: String = shown.iter().map(|l| format!("{l}\n")).collect();
                t.write("etc-nccl.conf", &text);
                ours.push(("NV_PEER_MEM_NCCL_CONF", t.root.join("etc-nccl.conf")));
                theirs.push(("NCCL_HARNESS_ETC_NCCL_CONF", t.root.join("etc-nccl.conf")));
                what.push_str(&format!("; /etc/nccl.conf {}", shown.join(" ")));
            }
        }
    }
    let runs: Vec<(Option<&str>, String)> = LEVELS
        .iter()
        .map(|level| {
            let mut env = ours.clone();
            if let Some(l) = level {
                env.push(("NCCL_NET_GDR_LEVEL", PathBuf::from(l)));
            }
            (*level, t.run_with(&[], &env).1)
        })
        .collect();
    let (gpus, nics) = devices(&runs[0].1);
    if gpus.is_empty() || nics.is_empty() {
        return (0, Vec::new());
    }
    let label = format!("seed {seed} (NVPM_GENERATED_SEED={seed} NVPM_GENERATED_NODES=1): {what}");
    oracle::judge_levels(&t, &runs, &theirs, false, &label)
}

/// NCCL's default and every level that moves a generated node's verdicts.
const LEVELS: [Option<&str>; 4] = [None, Some("PIX"), Some("PHB"), Some("SYS")];

#[test]
#[ignore = "needs cargo xtask nccl-harness; run by ci/test-nccl.sh"]
fn generated_nodes_are_judged_as_nccl_judges_them() {
    let first = env_number("NVPM_GENERATED_SEED", 1);
    let count = env_number("NVPM_GENERATED_NODES", 40);
    let jobs = env_number(
        "NVPM_GENERATED_JOBS",
        std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
    ) as usize;
    // NVPM_GENERATED_STOP=1: stop at the first difference (a mutant's run).
    let stop = std::env::var_os("NVPM_GENERATED_STOP").is_some();
    let started = std::time::Instant::now();
    let (compared, differ) = differential(first, count, jobs.max(1), stop);
    println!(
        "{count} generated nodes from seed {first} on {jobs} threads: {compared} GPU verdicts compared at {} levels x {} releases in {:.1} s, {} differ",
        LEVELS.len(),
        oracle::harnesses().len(),
        started.elapsed().as_secs_f64(),
        differ.len()
    );
    assert!(compared > 0, "no GPU verdict was compared");
    assert!(
        differ.is_empty(),
        "the check and NCCL differ:\n{}",
        differ.join("\n")
    );
}
