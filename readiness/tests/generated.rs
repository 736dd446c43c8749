//! Issue 57: the check against NCCL's own code over node trees nobody chose
//! (tests/common/generator.rs), every level, both releases, GPU by GPU (the
//! distance class, the NIC NCCL uses, GPUDirect RDMA for reads and
//! writes: tests/common/oracle.rs). A difference names the seed that
//! rebuilds its node: NVPM_GENERATED_SEED=<seed> NVPM_GENERATED_NODES=1;
//! the first difference of a run is shrunk (`shrink`: each part of the node
//! left out while the difference stays), and NVPM_GENERATED_OMIT=<parts>
//! rebuilds the smallest node that still differs.
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
    let mut files = 0;
    for seed in 1..=20 {
        let a = generator::node(seed);
        let b = generator::node(seed);
        let what_a = &a.what;
        assert_eq!(what_a, &b.what);
        assert!(check_shapes(&a.tree.sys()) > 0, "seed {seed}: {what_a}");
        // Buses as the kernel names them (<domain>:<bus>), never NCCL's cut.
        for e in std::fs::read_dir(a.tree.sys().join("class/pci_bus")).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let (domain, bus) = name.split_once(':').unwrap();
            assert!(
                domain.len() >= 4 && bus.len() == 2,
                "seed {seed}: bus {name}"
            );
        }
        // Its topology file, where it has one, in Azure's shapes.
        if let Some(f) = generator::topology_file(seed, &a) {
            assert!(check_topo_file_shape(&f.text) > 2, "seed {seed}");
            files += 1;
        }
        drop(b);
    }
    assert!(files > 0, "no topology file among seeds 1 to 20");
}

#[test]
fn a_topology_file_azures_files_do_not_show_is_refused() {
    let cpu = r#"<cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">"#;
    let file = |device: &str| {
        format!("<system version=\"1\">\n  {cpu}\n    {device}\n  </cpu>\n</system>\n")
    };
    let good =
        r#"<pci busid="0001:00:00.0" class="0x030200" link_speed="16 GT/s" link_width="16"/>"#;
    assert_eq!(check_topo_file_shape(&file(good)), 3);
    for bad in [
        // a device with ids, which none of Azure's files gives one
        r#"<pci busid="0001:00:00.0" class="0x030200" vendor="0x10de" device="0x2330" link_speed="16 GT/s" link_width="16"/>"#,
        // a speed no kernel and no file spells so
        r#"<pci busid="0001:00:00.0" class="0x030200" link_speed="16.0 GT/s" link_width="16"/>"#,
        // a device left open
        r#"<pci busid="0001:00:00.0" class="0x030200" link_speed="16 GT/s" link_width="16">"#,
    ] {
        let text = file(bad);
        assert!(
            std::panic::catch_unwind(|| check_topo_file_shape(&text)).is_err(),
            "{bad} passed"
        );
    }
}

#[test]
fn the_generator_draws_every_shape_and_shrinks_without_renaming() {
    // The plans of 300 seeds (written trees cost about 0.15 s each).
    let plans: Vec<String> = (1..=300).map(generator::plan).collect();
    let seen = plans.join("\n");
    for shape in [
        "Switch(Plx,",
        "PlxChained",
        "Microchip",
        "Switch(BroadcomGen5,",
        "BroadcomGen4",
        "BroadcomGen5OneLevel",
        "BroadcomGen5LowerUnmatched",
        "vfs: [Port",
        "vmd: true",
        "nvswitch: true",
        "Some(Bridges(4))",
        "Some(Bridges(12))",
        "Some(Mesh(",
        "numa: -1",
        "Ethernet",
        "2: INIT",
        "1: DOWN",
        "3: Disabled",
    ] {
        assert!(seen.contains(shape), "no {shape} in 300 plans");
    }
    // Adapters of more functions than 2.28.9 merges (four), and VFs past
    // function 7.
    let most_vfs = plans
        .iter()
        .flat_map(|p| p.split("vfs: [").skip(1))
        .map(|v| v.split(']').next().unwrap_or("").matches("Port").count())
        .max();
    assert_eq!(most_vfs, Some(8));
    // A part left out removes its devices and renames nothing else.
    for seed in 1..=15 {
        let whole = generator::node(seed);
        let fewer = generator::node_without(seed, &generator::Omit::parse("0"));
        let kept: Vec<&str> = fewer
            .what
            .split("; ")
            .filter(|l| l.trim_start().starts_with("mlx5_") || l.trim_start().starts_with("GPU "))
            .filter(|l| !l.contains("root port 00:10.0"))
            .collect();
        for line in &kept {
            assert!(whole.what.contains(line), "seed {seed}: {line} renamed");
        }
        assert!(fewer.what.contains("without parts 0"));
        // (A node left without a GPU or a NIC gets one, on root port 00:10.0.)
        if !fewer.what.contains("root port 00:10.0") && !whole.what.contains("root port 00:10.0") {
            assert_eq!(whole.nics, fewer.nics, "seed {seed}: names drawn alike");
        }
    }
}

/// The differential over the nodes of seeds @first.. (@count of them) on
/// @jobs threads: how many GPU verdicts were compared, and each difference.
/// With @stop, the threads stop at the first node that differs.
fn differential(first: u64, count: u64, jobs: usize, stop: bool) -> (usize, Vec<String>) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let next = AtomicU64::new(first);
    let found = AtomicBool::new(false);
    let shrunk = AtomicBool::new(false);
    // NVPM_GENERATED_OMIT: the parts a shrunk difference left out.
    let omit = std::env::var("NVPM_GENERATED_OMIT").map_or_else(
        |_| generator::Omit::default(),
        |v| generator::Omit::parse(&v),
    );
    let results = std::sync::Mutex::new((0usize, Vec::new()));
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= first + count || (stop && found.load(Ordering::Relaxed)) {
                        break;
                    }
                    let (n, mut d) = judge_node(seed, &omit);
                    if !d.is_empty() {
                        found.store(true, Ordering::Relaxed);
                        // The run's first difference only: a rule switched
                        // off may make every node differ.
                        if !shrunk.swap(true, Ordering::Relaxed) {
                            // The whole node's differences, where this
                            // node is whole.
                            let found = omit.0.is_empty().then(|| d.clone());
                            d.push(shrink(seed, found));
                        }
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

/// The smallest node of @seed that still differs: each part of it
/// (generator::Omit; the last two, the node's NCCL settings and its
/// topology file) left out in turn,
/// and kept out where the check and NCCL still differ without it. A line
/// with what remains, the command that rebuilds it and its differences.
/// @found: the whole node's differences where already judged.
fn shrink(seed: u64, found: Option<Vec<String>>) -> String {
    let parts = generator::parts(seed);
    let mut omit = generator::Omit::default();
    let mut last = found.unwrap_or_else(|| judge_node(seed, &omit).1);
    for part in 0..=parts + 1 {
        let mut fewer = omit.clone();
        fewer.0.insert(part);
        let (_, d) = judge_node(seed, &fewer);
        if !d.is_empty() {
            omit = fewer;
            last = d;
        }
    }
    format!(
        "smallest node that still differs (of {} parts, {} left out): NVPM_GENERATED_SEED={seed} NVPM_GENERATED_NODES=1 NVPM_GENERATED_OMIT={}\n{}",
        parts + 2,
        omit.0.len(),
        omit.list(),
        last.join("\n")
    )
}

/// One generated node without the parts in @omit (its NCCL settings are
/// part `node.parts`, its topology file the next): the check at every
/// level, NCCL's releases over all of them at once (oracle::judge_levels),
/// under the node's NCCL settings (generator::settings) and topology file
/// (generator::topology_file) as each reads them.
fn judge_node(seed: u64, omit: &generator::Omit) -> (usize, Vec<String>) {
    let node = generator::node_without(seed, omit);
    let (t, mut what) = (&node.tree, node.what.clone());
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    let (mut settings, given) = generator::settings(seed, node.nics);
    if omit.0.contains(&node.parts) {
        settings.clear();
    }
    let topo =
        generator::topology_file(seed, &node).filter(|_| !omit.0.contains(&(node.parts + 1)));
    // The check's environment, and NCCL's (the harness reads the node's
    // /etc/nccl.conf from the file NCCL_HARNESS_ETC_NCCL_CONF names, and
    // opens the files it names as they are given: under the tree for it).
    let mut ours: Vec<(&str, PathBuf)> = Vec::new();
    let mut theirs: Vec<(&str, PathBuf)> = Vec::new();
    let mut conf: Vec<String> = Vec::new();
    let shown = |k: &str, v: &str, given: generator::Given, what: &mut String| match given {
        generator::Given::Environment => what.push_str(&format!("; environment {k}={v}")),
        generator::Given::EtcNcclConf => what.push_str(&format!("; /etc/nccl.conf {k}={v}")),
    };
    for (k, v) in &settings {
        shown(k, v, given, &mut what);
        match given {
            generator::Given::Environment => {
                ours.push((k, PathBuf::from(v)));
                theirs.push((k, PathBuf::from(v)));
            }
            generator::Given::EtcNcclConf => conf.push(format!("{k}={v}")),
        }
    }
    let mut conf_theirs = conf.clone();
    if let Some(f) = &topo {
        common::check_topo_file_shape(&f.text);
        t.write(f.path.trim_start_matches('/'), &f.text);
        let under = t.root.join(f.path.trim_start_matches('/'));
        what.push_str(&format!("; {}", f.what));
        match f.given {
            Some(generator::Given::Environment) => {
                ours.push(("NCCL_TOPO_FILE", PathBuf::from(f.path)));
                theirs.push(("NCCL_TOPO_FILE", under));
            }
            Some(generator::Given::EtcNcclConf) => {
                conf.push(format!("NCCL_TOPO_FILE={}", f.path));
                conf_theirs.push(format!("NCCL_TOPO_FILE={}", under.display()));
            }
            // nvidia-topologyd's, which the harness serves from the tree
            None => {}
        }
    }
    if !conf.is_empty() {
        let lines = |l: &[String]| l.iter().map(|l| format!("{l}\n")).collect::<String>();
        t.write("etc-nccl.conf", lines(&conf));
        t.write("etc-nccl.conf.harness", lines(&conf_theirs));
        ours.push(("NV_PEER_MEM_NCCL_CONF", t.root.join("etc-nccl.conf")));
        theirs.push((
            "NCCL_HARNESS_ETC_NCCL_CONF",
            t.root.join("etc-nccl.conf.harness"),
        ));
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
    let label = format!(
        "seed {seed} (NVPM_GENERATED_SEED={seed} NVPM_GENERATED_NODES=1{}): {what}",
        if omit.0.is_empty() {
            String::new()
        } else {
            format!(" NVPM_GENERATED_OMIT={}", omit.list())
        }
    );
    oracle::judge_levels(t, &runs, &theirs, node.nvswitch, &label)
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
