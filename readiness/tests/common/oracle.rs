//! NCCL's own code as the oracle over the trees of these tests (issue 42;
//! docs/nccl-harness.md): nccl-harness --sysfs judges a tree as NCCL
//! would on that node, and `judge` holds the check's NCCL verdicts, GPU by
//! GPU, to NCCL's. tests/nccl_oracle.rs runs it over its catalogue; with
//! `NVPM_NCCL_ORACLE` set (ci/test-nccl.sh), every tree any test runs the
//! check over in its default form is judged too (Tree::run_with).

use super::*;

/// The built harnesses: (release, binary).
pub fn harnesses() -> Vec<(String, PathBuf)> {
    let dir = std::env::var_os("NVPM_NCCL_HARNESS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/nccl-harness"),
        PathBuf::from,
    );
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        e.path().join("nccl-harness"),
                    )
                })
                .filter(|(_, b)| b.is_file())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    assert!(
        !found.is_empty(),
        "no harness under {}: run cargo xtask nccl-harness first (ci/test-nccl.sh does)",
        dir.display()
    );
    found
}

/// NCCL's decisions over @t's sysfs tree, by @harness: one line per GPU x
/// NIC pair, `gpu BUS rank R net N name NAME path P bw B hops H gdr_read X
/// gdr_write Y proxy_rank Z`, ranks in the order of @gpus; the NICs of
/// @nets, or none given, those NCCL's IB plugin takes; @dmabuf: the node
/// can register GPU memory through DMA-BUF. Err: NCCL's code failed.
pub fn nccl_over_tree(
    harness: &Path,
    t: &Tree,
    gpus: &[String],
    nets: &[String],
    env: &[(&str, PathBuf)],
    dmabuf: bool,
) -> Result<Vec<String>, String> {
    nccl_run(
        harness,
        t,
        gpus,
        nets,
        env,
        &["--dmabuf", if dmabuf { "yes" } else { "no" }],
    )
}

fn nccl_run(
    harness: &Path,
    t: &Tree,
    gpus: &[String],
    nets: &[String],
    env: &[(&str, PathBuf)],
    more: &[&str],
) -> Result<Vec<String>, String> {
    let mut cmd = Command::new(harness);
    cmd.arg("--sysfs").arg(&t.root);
    // An arm64 node's CPUs as an arm64 NCCL describes them (Tree::arm64).
    if t.sys()
        .join("devices/system/cpu/cpu0/regs/identification/midr_el1")
        .exists()
    {
        cmd.args(["--cpu", "arm64"]);
    }
    cmd.args(more);
    for g in gpus {
        cmd.args(["--gpu", g]);
    }
    // None given: the devices NCCL's IB plugin takes from the tree.
    for n in nets {
        cmd.args(["--net", n]);
    }
    // NVLink between GPUs, where the tree's nvidia-smi shows it
    // (Tree::nvlink): NVML's answer to NCCL.
    let links = std::fs::read_to_string(t.root.join("nvlink-gpus")).unwrap_or_default();
    for link in links.lines() {
        cmd.args(["--nvlink", link]);
    }
    // The kernel's Data Direct answers, where the tree lists them
    // (grace_blackwell_data_direct).
    let dd = std::fs::read_to_string(t.root.join("data-direct")).unwrap_or_default();
    for (name, path) in dd.lines().filter_map(|l| l.split_once(' ')) {
        cmd.args(["--data-direct", &format!("{name}={path}")]);
    }
    // NCCL zeroes a ~90 MB topology system per build (ncclCalloc); huge
    // pages for glibc's large blocks (glibc 2.35+, a tunable that changes
    // no result) save a quarter of a harness run in page faults.
    cmd.env("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1");
    cmd.env("NCCL_HOSTID", "nccl-harness")
        .env_remove("NCCL_NET_GDR_LEVEL")
        .env_remove("NCCL_CONF_FILE")
        .env_remove("NCCL_HARNESS_ETC_NCCL_CONF")
        .env_remove("NCCL_HARNESS_HOME_NCCL_CONF");
    for k in [
        "NCCL_IB_HCA",
        "NCCL_TOPO_FILE",
        "NCCL_PXN_DISABLE",
        "NCCL_DMABUF_ENABLE",
        "NCCL_NET_GDR_C2C",
        "NCCL_NET_GDR_READ",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            harness.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("gpu ") || l.starts_with("local ") || l.starts_with("level "))
        .map(str::to_owned)
        .collect())
}

/// The value after @key in a harness line.
pub fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == key {
            return words.next().unwrap_or("");
        }
    }
    panic!("no {key} in {line}")
}

/// From the check's human output: the GPUs (`gpu` lines) and the RDMA
/// devices (`nic` lines), in the order printed.
pub fn devices(out: &str) -> (Vec<String>, Vec<String>) {
    let mut gpus = Vec::new();
    let mut nics = Vec::new();
    for l in out.lines() {
        let words: Vec<&str> = l.split_whitespace().collect();
        if let Some(i) = words.iter().position(|w| *w == "gpu" || *w == "nic") {
            let address = words.get(i + 1).map(|w| w.trim_end_matches(':'));
            if words.get(i + 2) == Some(&"NVIDIA") && words[i] == "gpu" {
                // a PCI address, not a node-wide line ("no NVIDIA GPU ...")
                if let Some(a) = address.filter(|a| a.len() == 12 && a.contains(':')) {
                    gpus.push(a.to_owned());
                }
            }
            // `nic mlx5_0: RDMA device mlx5_0 at ...`, not a node-wide line
            let name = words.get(i + 1).map(|w| w.trim_end_matches(':'));
            if words[i] == "nic"
                && words.get(i + 2) == Some(&"RDMA")
                && words.get(i + 4).copied() == name
            {
                nics.extend(name.map(str::to_owned));
            }
        }
    }
    (gpus, nics)
}

/// The check's line of @check for @gpu.
pub fn line_of<'a>(out: &'a str, check: &str, gpu: &str) -> &'a str {
    out.lines()
        .find(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = if w.first() == Some(&check) { 0 } else { 1 };
            w.get(i) == Some(&check) && w.get(i + 1) == Some(&&*format!("{gpu}:"))
        })
        .unwrap_or_else(|| panic!("no {check} line for {gpu}:\n{out}"))
}

/// The check's NCCL verdicts in @out (its default form over @t) against
/// NCCL's own, for every built release, with NCCL's environment @nccl_env
/// (NVLink to NVSwitches where @nvswitch): how many GPU verdicts were
/// compared, and each difference, labelled with @what.
pub fn judge(
    t: &Tree,
    out: &str,
    nccl_env: &[(&str, PathBuf)],
    nvswitch: bool,
    what: &str,
) -> (usize, Vec<String>) {
    // The level, where given, is the harness's --levels.
    let level = nccl_env
        .iter()
        .find(|(k, _)| *k == "NCCL_NET_GDR_LEVEL")
        .map(|(_, v)| v.to_string_lossy().into_owned());
    let rest: Vec<(&str, PathBuf)> = nccl_env
        .iter()
        .filter(|(k, _)| *k != "NCCL_NET_GDR_LEVEL")
        .cloned()
        .collect();
    let runs = [(level.as_deref(), out.to_owned())];
    judge_levels(t, &runs, &rest, nvswitch, what)
}

/// As judge, for the check's outputs at several NCCL_NET_GDR_LEVELs
/// (@runs: the level, None for unset, and the check's output there, the
/// level not in @nccl_env): NCCL judges them all in one run of each
/// release (nccl-harness --levels) and gives its distances once.
pub fn judge_levels(
    t: &Tree,
    runs: &[(Option<&str>, String)],
    nccl_env: &[(&str, PathBuf)],
    nvswitch: bool,
    what: &str,
) -> (usize, Vec<String>) {
    let harnesses = harnesses();
    let mut differ = Vec::new();
    let mut compared = 0;
    let Some((_, first)) = runs.first() else {
        return (0, differ);
    };
    let out = first.as_str();
    let (gpus, nics) = devices(out);
    // DMA-BUF as the check found it (the node's, not NCCL's rule).
    let dmabuf = out.contains("DMA-BUF can serve");
    // NCCL cannot start with a topology file it cannot read: the check
    // must say so, and then there is nothing to compare.
    let fails = out.contains("NCCL fails to start a communicator");
    for (release, harness) in &harnesses {
        // C2C where the tree's nvidia-smi shows it (Tree::grace).
        let c2c = fs::read_to_string(t.root.join("c2c-gpus")).unwrap_or_default();
        // A compute capability other than the harness's 9.0 (Tree::volta).
        let sm = fs::read_to_string(t.root.join("sm-gpus")).unwrap_or_default();
        let gpu_args: Vec<String> = gpus
            .iter()
            .map(|g| {
                let mut arg = g.clone();
                if nvswitch {
                    arg.push_str(",nvswitch=18");
                }
                if c2c.lines().any(|l| l == g) {
                    arg.push_str(",c2c=10");
                }
                if let Some((_, v)) = sm
                    .lines()
                    .filter_map(|l| l.split_once(' '))
                    .find(|(b, _)| b == g)
                {
                    arg.push_str(&format!(",sm={v}"));
                }
                arg
            })
            .collect();
        // The CUDA driver's GPUDirect RDMA support where the tree gives it
        // (Tree::cuda): NCCL's `gdr` of the GPU. Not for the distances,
        // which are taken where every pair may use GPUDirect RDMA.
        let cuda = fs::read_to_string(t.root.join("cuda-gpus")).unwrap_or_default();
        let decided_args: Vec<String> = gpu_args
            .iter()
            .map(|arg| {
                let bus = arg
                    .split(',')
                    .next()
                    .unwrap_or_default()
                    .to_ascii_uppercase();
                let off = cuda.lines().any(|l| l == format!("{bus} 0"));
                if off {
                    format!("{arg},gdr=0")
                } else {
                    arg.clone()
                }
            })
            .collect();
        // Every level's decisions and NCCL's distances (`distances`: its
        // paths where nothing turns GPUDirect RDMA off) in one run.
        let mut levels: Vec<&str> = runs.iter().map(|(l, _)| l.unwrap_or("default")).collect();
        levels.push("distances");
        let joined = levels.join(",");
        let batched = nccl_run(
            harness,
            t,
            &decided_args,
            &[],
            nccl_env,
            &[
                "--dmabuf",
                if dmabuf { "yes" } else { "no" },
                "--levels",
                &joined,
            ],
        );
        let batched = match batched {
            Ok(p) if !fails => p,
            Err(_) if fails => continue,
            Ok(_) => {
                differ.push(format!(
                    "{what}, NCCL {release}: NCCL starts; the check says it fails"
                ));
                continue;
            }
            Err(e) => {
                differ.push(format!(
                    "{what}, NCCL {release}: NCCL's code fails ({e}); the check says nothing of it"
                ));
                continue;
            }
        };
        // The distance NCCL computed: its path where nothing turns
        // GPUDirect RDMA off. Where it is off, NCCL routes the pair's
        // traffic through the GPU's CPU (paths.cc, ncclTopoComputePaths:
        // addInterStep via the local CPU), and the path it then reports is
        // that route, PHB or SYS.
        let block_of = |at: usize| -> Vec<String> {
            batched
                .split(|l| l.starts_with("level "))
                .nth(at + 1)
                .unwrap_or_default()
                .to_vec()
        };
        let raw: Vec<String> = block_of(runs.len())
            .into_iter()
            .filter(|l| l.starts_with("gpu "))
            .collect();
        for (at_level, (level, out)) in runs.iter().enumerate() {
            let out = out.as_str();
            let what = match level {
                Some(l) if runs.len() > 1 => format!("{what}, NCCL_NET_GDR_LEVEL={l}"),
                Some(_) => what.to_owned(),
                None if runs.len() > 1 => format!("{what}, NCCL_NET_GDR_LEVEL unset"),
                None => what.to_owned(),
            };
            let what = what.as_str();
            // This level's block of the harness's output.
            let block = block_of(at_level);
            // The NIC NCCL gives each rank (the harness's `local` lines, of
            // the run with NCCL's own decisions), apart from the pairs.
            let (locals, pairs): (Vec<String>, Vec<String>) =
                block.into_iter().partition(|l| l.starts_with("local "));
            for (rank, gpu) in gpus.iter().enumerate() {
                compared += 1;
                let at = format!("{what}, GPU {gpu}, NCCL {release}");
                let of_rank = |lines: &[String]| -> Vec<String> {
                    lines
                        .iter()
                        .filter(|p| field(p, "rank") == rank.to_string())
                        .cloned()
                        .collect()
                };
                let (mine, decided) = (of_rank(&raw), of_rank(&pairs));
                if mine.is_empty() {
                    // NCCL takes no NIC: sockets, no GPUDirect RDMA, and
                    // no GPU judged with a NIC.
                    if has_line(out, &["distance", gpu]) || has_line(out, &["nccl", gpu]) {
                        differ.push(format!("{at}:\n  NCCL takes no NIC; the check says\n{out}"));
                    }
                    continue;
                }
                // The check: the NIC its verdict names (reached through
                // a peer GPU where PXN relays), the distance and the verdict.
                let nccl = line_of(out, "nccl", gpu);
                let distance = line_of(out, "distance", gpu);
                // Where the check could not see NVLink it gives PXN as a
                // condition: its verdict without NVLink is the "else" one.
                // So it does where C2C was not seen (NCCL, given none, takes
                // the "else"); where NCCL's two releases differ and none is
                // installed, the check gives no verdict to compare.
                let conditional = nccl.contains("if NVLink joins them")
                    || nccl.contains("if the GPU's C2C link is up");
                let undecided = nccl.contains("which NCCL the job loads decides");
                // A verdict by one release's rule (the installed libnccl's)
                // is held to that release only.
                let rule_of = [("NCCL 2.28's rule", "2.28."), ("NCCL 2.30's rule", "2.30.")]
                    .into_iter()
                    .find(|(said, _)| nccl.contains(said));
                if rule_of.is_some_and(|(_, r)| !release.starts_with(r)) {
                    compared -= 1;
                    continue;
                }
                let relayed = nccl.contains(" through GPU ") && !conditional;
                // A conditional verdict's "else" is what NCCL, told of no
                // NVLink, does: its NIC is the one to hold NCCL's to.
                let said = match nccl.split_once(", else ") {
                    Some((_, otherwise)) if conditional && otherwise.contains("with ") => otherwise,
                    _ => nccl,
                };
                // The device named after "with": one of the check's NICs, or
                // NCCL's merge of an adapter's functions (`mlx5_0+mlx5_1`).
                let nic = said
                    .split("with ")
                    .skip(1)
                    .filter_map(|rest| rest.split([' ', ':']).next())
                    .find(|name| name.split('+').all(|n| nics.iter().any(|m| m == n)))
                    .unwrap_or_else(|| panic!("no NIC in {nccl}"));
                let class = ["PIX", "PXB", "P2C", "PHB", "NODE", "SYS"]
                    .into_iter()
                    .find(|c| distance.contains(&format!(" is {c} from it")))
                    .unwrap_or_else(|| panic!("no distance in {distance}"));
                // NCCL has no NODE: its CPUs are NUMA nodes (paths.cc).
                let class = if class == "NODE" { "PHB" } else { class };
                // The "else" verdict: GPUDirect RDMA directly, or none.
                let uses = if conditional {
                    nccl.contains(", else with ")
                } else {
                    nccl.contains("NCCL uses GPUDirect RDMA")
                };
                // NCCL: the pair with the check's NIC, and the nearest
                // of this GPU's pairs (paths.cc's order of path types).
                // Where the check judges the adapter at its Data Direct
                // function, NCCL names it <name>_dma.
                // Where the releases give the GPU different devices (by their
                // device order: nccl_local_net.rs) and none is installed, the
                // check names 2.28's too: that one is held to 2.28.
                let judged = nic;
                // A relayed GPU's: the device 2.28 relays it through, where
                // the check says it is another.
                let said_228 = |words: &str| {
                    out.lines()
                        .filter(|l| l.contains(&format!(" {gpu}: ")))
                        .find_map(|l| l.split_once(words))
                        .and_then(|(_, rest)| rest.split(' ').next())
                        .filter(|_| release.starts_with("2.28."))
                };
                // Where 2.28.9 relays otherwise than 2.30.7, the check's
                // line for 2.28 says whether it relays, the device, and
                // GPUDirect RDMA or not ("NCCL 2.28 relays it through X via
                // GPU ..., with GPUDirect RDMA (", "NCCL 2.28 does not relay
                // it: NCCL 2.28 gives it X (PHB from it), without GPUDirect RDMA (").
                let line_228 = out
                    .lines()
                    .filter(|l| l.contains(&format!(" {gpu}: ")))
                    .find(|l| {
                        l.contains("NCCL 2.28 relays it through ")
                            || l.contains("NCCL 2.28 gives it ")
                    })
                    .filter(|_| release.starts_with("2.28."));
                let relay_228 = said_228("NCCL 2.28 relays it through ");
                let no_relay_228 =
                    line_228.is_some_and(|l| l.contains("NCCL 2.28 does not relay it"));
                // (A conditional verdict's relay, 2.28's or not, is the
                // "if": the "else" is held to NCCL, told of no NVLink.)
                let relayed = (relayed && !no_relay_228) || (relay_228.is_some() && !conditional);
                let nic_228 = if relayed {
                    relay_228
                } else {
                    said_228("NCCL 2.28 gives it ")
                };
                let nic = nic_228.unwrap_or(nic);
                let uses = match line_228 {
                    Some(l) if l.contains(", with GPUDirect RDMA (") => true,
                    Some(l) if l.contains(", without GPUDirect RDMA (") => false,
                    _ => uses,
                };
                // 2.28's own device's class where it does not relay.
                let class_228 = line_228
                    .filter(|_| !relayed)
                    .and_then(|l| l.split_once(&format!("gives it {nic} (")))
                    .and_then(|(_, rest)| rest.split(' ').next())
                    .map(|c| if c == "NODE" { "PHB" } else { c });
                let name = if distance.contains(&format!("as NCCL offers it ({nic}_dma)")) {
                    format!("{nic}_dma")
                } else {
                    nic.to_string()
                };
                // A merged device by its members: 2.28.9 and 2.30.7 may
                // join the same functions' names in another order (the
                // check says so: "NCCL 2.28 gives it mlx5_10+mlx5_9").
                let members = |n: &str| {
                    let mut m: Vec<String> = n.split('+').map(str::to_owned).collect();
                    m.sort();
                    m
                };
                let the_pair = |lines: &[String]| {
                    lines
                        .iter()
                        .find(|p| members(field(p, "name")) == members(&name))
                        .cloned()
                };
                let order = ["PIX", "PXB", "P2C", "PXN", "PHB", "SYS"];
                let rank_of = |p: &str| order.iter().position(|o| *o == p).unwrap_or(9);
                // NCCL's nearest as ncclTopoGetLocal takes it: the highest
                // path bandwidth, then the nearest type.
                let bw_of = |p: &str| field(p, "bw").parse::<f64>().unwrap_or(0.0);
                let nearest_of = |lines: &[String]| {
                    let top_bw = lines.iter().map(|p| bw_of(p)).fold(0.0, f64::max);
                    lines
                        .iter()
                        .filter(|p| bw_of(p) == top_bw)
                        .map(|p| field(p, "path").to_owned())
                        .min_by_key(|p| rank_of(p))
                        .unwrap()
                };
                let (Some(pair), Some(distance_pair)) = (the_pair(&decided), the_pair(&mine))
                else {
                    differ.push(format!(
                        "{at}:\n  check: {}\n  NCCL does not take {nic}: {}",
                        nccl.trim(),
                        mine.join("\n    ")
                    ));
                    continue;
                };
                // `on-pci`: on, its memory mapped through PCIe (a C2C GPU's
                // path through the CPU: paths.cc, ncclTopoGdrModePci).
                let read = field(&pair, "gdr_read").starts_with("on");
                let write = field(&pair, "gdr_write").starts_with("on");
                // NCCL diverts a relay through the GPU's own CPU where
                // GPUDirect RDMA is off at the level (paths.cc, after PXN):
                // such a path is the decided run's, not the distances
                // run's PXN (there every NIC has GPUDirect RDMA): the
                // GPU's paths as NCCL has them at this level.
                let at_level: Vec<String> = mine
                    .iter()
                    .map(|m| {
                        let decided_path = decided
                            .iter()
                            .find(|d| field(d, "name") == field(m, "name"));
                        match decided_path {
                            Some(d)
                                if !relayed
                                    && field(m, "path") == "PXN"
                                    && field(d, "path") != "PXN" =>
                            {
                                d.clone()
                            }
                            _ => m.clone(),
                        }
                    })
                    .collect();
                let nearest = nearest_of(&at_level);
                let path = the_pair(&at_level)
                    .map(|p| field(&p, "path").to_owned())
                    .unwrap_or_default();
                // PXN: the check says the relay; the distance it prints
                // is the GPU's own, NCCL's path is PXN.
                let same_path = if path == "PXN" {
                    relayed
                } else if let Some(c) = class_228 {
                    !relayed && path == c
                } else {
                    !relayed && path == class && distance.contains(&format!("device {judged} ("))
                };
                // NCCL's reads (sends) and writes (receives) apart: the
                // check says where sends do without it.
                let uses_read = uses && !nccl.contains("for receives only");
                let agrees = (read, write) == (uses_read, uses);
                // The NIC itself: the one NCCL gives this rank (a relayed or
                // conditional verdict names a peer's, judged above).
                let local = locals
                    .iter()
                    .find(|l| field(l, "rank") == rank.to_string())
                    .map(|l| field(l, "name"));
                // Where NCCL does not use GPUDirect RDMA for the GPU (CUDA's
                // word, or its level), it routes the GPU's NICs through its
                // CPU and picks among them, which the check does not model
                // (nccl_local_net.rs); where the releases give different NICs
                // and none is installed, the check names both.
                let gdr_off =
                    !uses || nccl.contains("the CUDA driver reports no GPUDirect RDMA support");
                let other_release = |l: &str| {
                    release.starts_with("2.28.")
                        && out.contains(&format!("NCCL 2.28 gives it {l} "))
                };
                let same_nic = relayed
                    || conditional
                    || gdr_off
                    || local.is_none_or(|l| l == name || other_release(l));
                if !same_path || !same_nic || nearest != path || (!agrees && !undecided) {
                    differ.push(format!(
                    "{at}:\n  check: {}\n         {}\n  NCCL:  {pair}\n  NCCL's distance: {distance_pair} (nearest {nearest}; NCCL's NIC for it {})",
                    distance.trim(),
                    nccl.trim(),
                    local.unwrap_or("none")
                ));
                }
            }
        }
    }
    (compared, differ)
}
