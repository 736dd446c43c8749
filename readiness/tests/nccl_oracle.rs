//! NCCL's own code as the oracle (issue 42; docs/nccl-harness.md): the
//! check's NCCL verdict for each GPU and its NIC equals NCCL's, computed by
//! NCCL's own code (nccl-harness, both fixture releases) over the same
//! sysfs tree the check reads (`nccl-harness --sysfs`: NCCL climbs the
//! tree's /sys/class/pci_bus links and reads its files as on a node):
//!   - every modelled node shape of the catalogue below (one switch, two
//!     levels, host bridges, NUMA nodes, a NUMA node the firmware left
//!     unset, a VM's flat bus, Broadcom's two-level PEX switches, the
//!     8-GPU reference node) under NCCL's default level and under PHB and
//!     SYS: the distance class, the NIC and the GPUDirect RDMA verdict;
//!   - `NCCL_NET_GDR_LEVEL` in the environment and in NCCL's configuration
//!     files, in 13 arrangements, on a PHB and a SYS node.
//!
//! Ignored by a plain `cargo test`: ci/test-nccl.sh runs them once it has
//! built the harnesses (`cargo xtask nccl-harness`), with
//! `--ignored`; NVPM_NCCL_HARNESS_DIR (default target/nccl-harness) holds
//! one `<release>/nccl-harness` per NCCL release.

mod common;
use common::oracle::{self, devices, field, harnesses, nccl_over_tree};
use common::*;
use std::path::{Path, PathBuf};

/// One arrangement: the environment's value and the three files' texts
/// (None: unset, or no such file).
struct Arrangement {
    what: &'static str,
    env: Option<&'static str>,
    conf_file: Option<&'static str>,
    home: Option<&'static str>,
    etc: Option<&'static str>,
}

const ARRANGEMENTS: [Arrangement; 13] = [
    Arrangement {
        what: "nothing set",
        env: None,
        conf_file: None,
        home: None,
        etc: None,
    },
    Arrangement {
        what: "the environment: SYS",
        env: Some("SYS"),
        conf_file: None,
        home: None,
        etc: None,
    },
    Arrangement {
        what: "the environment: PHB",
        env: Some("PHB"),
        conf_file: None,
        home: None,
        etc: None,
    },
    Arrangement {
        what: "/etc/nccl.conf: SYS",
        env: None,
        conf_file: None,
        home: None,
        etc: Some("NCCL_NET_GDR_LEVEL=SYS\n"),
    },
    Arrangement {
        what: "the environment (PXB) before /etc/nccl.conf (SYS)",
        env: Some("PXB"),
        conf_file: None,
        home: None,
        etc: Some("NCCL_NET_GDR_LEVEL=SYS\n"),
    },
    Arrangement {
        what: "~/.nccl.conf (PHB) before /etc/nccl.conf (SYS)",
        env: None,
        conf_file: None,
        home: Some("NCCL_NET_GDR_LEVEL=PHB\n"),
        etc: Some("NCCL_NET_GDR_LEVEL=SYS\n"),
    },
    Arrangement {
        what: "NCCL_CONF_FILE (PHB) instead of ~/.nccl.conf (SYS)",
        env: None,
        conf_file: Some("NCCL_NET_GDR_LEVEL=PHB\n"),
        home: Some("NCCL_NET_GDR_LEVEL=SYS\n"),
        etc: Some("NCCL_NET_GDR_LEVEL=SYS\n"),
    },
    Arrangement {
        what: "an empty value in the environment, SYS in /etc/nccl.conf",
        env: Some(""),
        conf_file: None,
        home: None,
        etc: Some("NCCL_NET_GDR_LEVEL=SYS\n"),
    },
    Arrangement {
        what: "a lower-case level",
        env: Some("sys"),
        conf_file: None,
        home: None,
        etc: None,
    },
    Arrangement {
        what: "a spaced value in /etc/nccl.conf",
        env: None,
        conf_file: None,
        home: None,
        etc: Some("NCCL_NET_GDR_LEVEL= SYS\n"),
    },
    Arrangement {
        what: "the first line of /etc/nccl.conf wins, not the first valid one",
        env: None,
        conf_file: None,
        home: None,
        etc: Some("# site\nNCCL_NET_GDR_LEVEL=far\nNCCL_NET_GDR_LEVEL=SYS\n"),
    },
    Arrangement {
        what: "a legacy number (4: SYS)",
        env: Some("4"),
        conf_file: None,
        home: None,
        etc: None,
    },
    Arrangement {
        what: "a legacy number in hexadecimal (0x3: PHB)",
        env: Some("0x3"),
        conf_file: None,
        home: None,
        etc: None,
    },
];

/// The two nodes of the level rule: a GPU and mlx5_0 on two root ports of
/// one host bridge (PHB), or of two NUMA nodes (SYS).
fn shape(name: &str) -> Tree {
    let t = Tree::new(&format!("oracle-{name}"));
    match name {
        "sys" => {
            t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
            t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0x2330, 0, 128 << 30);
            t.bridge("pci0000:80/0000:80:01.0", 4, None, 1);
            t.nic("pci0000:80/0000:80:01.0/0000:81:00.0", "mlx5_0", 1);
        }
        "phb" => {
            t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
            t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0x2330, 0, 128 << 30);
            t.bridge("pci0000:00/0000:00:02.0", 4, None, 0);
            t.nic("pci0000:00/0000:00:02.0/0000:02:00.0", "mlx5_0", 0);
        }
        _ => unreachable!(),
    }
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    t
}

/// The check's answer: does NCCL use GPUDirect RDMA between the GPU and
/// mlx5_0, and the level it says it took.
fn check_says(t: &Tree, a: &Arrangement) -> (bool, String) {
    let mut env: Vec<(&str, PathBuf)> = Vec::new();
    for (text, name, var) in [
        (a.home, "home-nccl.conf", "NV_PEER_MEM_USER_NCCL_CONF"),
        (a.etc, "etc-nccl.conf", "NV_PEER_MEM_NCCL_CONF"),
    ] {
        if let Some(text) = text {
            t.write(name, text);
            env.push((var, t.root.join(name)));
        }
    }
    // NCCL_CONF_FILE names a file of the node: under the tree's root.
    if let Some(text) = a.conf_file {
        t.write("site/nccl.conf", text);
        env.push(("NCCL_CONF_FILE", PathBuf::from("/site/nccl.conf")));
    }
    if let Some(v) = a.env {
        env.push(("NCCL_NET_GDR_LEVEL", PathBuf::from(v)));
    }
    let (_, out) = t.run_with(&[], &env);
    let line = out
        .lines()
        .find(|l| {
            // the `nccl` fact of the pair (its tag, then its check's name)
            let mut words = l.split_whitespace();
            let first = words.next();
            (first == Some("nccl") || words.next() == Some("nccl"))
                && l.contains("0000:01:00.0")
                && l.contains("mlx5_0")
        })
        .unwrap_or_else(|| panic!("no nccl line for the pair:\n{out}"))
        .to_owned();
    (line.contains("NCCL uses GPUDirect RDMA"), line)
}

/// NCCL's own answer for the same arrangement, from @harness over the
/// same tree.
fn nccl_says(harness: &Path, t: &Tree, a: &Arrangement) -> (bool, String) {
    let mut env: Vec<(&str, PathBuf)> = Vec::new();
    if a.home.is_some() {
        env.push(("NCCL_HARNESS_HOME_NCCL_CONF", t.root.join("home-nccl.conf")));
    }
    if a.etc.is_some() {
        env.push(("NCCL_HARNESS_ETC_NCCL_CONF", t.root.join("etc-nccl.conf")));
    }
    if a.conf_file.is_some() {
        env.push(("NCCL_CONF_FILE", t.root.join("site/nccl.conf")));
    }
    if let Some(v) = a.env {
        env.push(("NCCL_NET_GDR_LEVEL", PathBuf::from(v)));
    }
    let lines = nccl_over_tree(
        harness,
        t,
        &["0000:01:00.0".to_owned()],
        &["mlx5_0".to_owned()],
        &env,
        false,
    )
    .unwrap();
    let line = lines
        .first()
        .unwrap_or_else(|| panic!("no pair from the harness"))
        .clone();
    let read = field(&line, "gdr_read") == "on";
    let write = field(&line, "gdr_write") == "on";
    assert_eq!(
        read, write,
        "reads and writes differ (the check has one answer): {line}"
    );
    (read, line)
}

fn differential(name: &str) {
    let harnesses = harnesses();
    let mut differ = Vec::new();
    for a in &ARRANGEMENTS {
        let t = shape(name);
        let (ours, our_line) = check_says(&t, a);
        for (release, harness) in &harnesses {
            let (theirs, their_line) = nccl_says(harness, &t, a);
            println!("{name}, {}: check {ours}, NCCL {release} {theirs}", a.what);
            if ours != theirs {
                differ.push(format!(
                    "{name}, {}:\n  check: {our_line}\n  NCCL {release}: {their_line}",
                    a.what
                ));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "the check and NCCL differ:\n{}",
        differ.join("\n")
    );
}

#[test]
#[ignore = "needs cargo xtask nccl-harness; run by ci/test-nccl.sh"]
fn the_level_rule_on_a_phb_node_is_nccls() {
    differential("phb");
}

#[test]
#[ignore = "needs cargo xtask nccl-harness; run by ci/test-nccl.sh"]
fn the_level_rule_on_a_sys_node_is_nccls() {
    differential("sys");
}

/// One node of the catalogue: what it is, its tree, and NCCL's
/// environment there (both the check and NCCL are given it).
struct Case {
    what: &'static str,
    tree: Tree,
    env: Vec<(&'static str, &'static str)>,
    /// The node's /etc/nccl.conf, if any.
    etc_nccl_conf: Option<&'static str>,
    /// NVSwitches join every GPU (the harness's `nvswitch=18`, the tree's
    /// nvidia-smi: Tree::nvswitch).
    nvswitch: bool,
    /// A topology file on the node: its path there and its text. NCCL is
    /// told it through `NCCL_TOPO_FILE` unless it is nvidia-topologyd's,
    /// which NCCL reads unasked (in /etc/nccl.conf where that is given).
    topo_file: Option<(&'static str, &'static str)>,
}

impl Case {
    /// A node with no configuration file and no topology file.
    fn plain(
        what: &'static str,
        tree: Tree,
        env: Vec<(&'static str, &'static str)>,
        nvswitch: bool,
    ) -> Self {
        Case {
            what,
            tree,
            env,
            etc_nccl_conf: None,
            topo_file: None,
            nvswitch,
        }
    }
}

/// A cloud VM's topology file (Azure's HPC images' shape: the GPU and its
/// NIC below a switch the VM does not show, `ffff:ff:01.0`) for the
/// "GPU behind a switch, NIC on another root port" tree, where sysfs says
/// PHB.
const TOPO_FILE: &str = r#"<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="207">
    <pci busid="ffff:ff:01.0" class="0x060400" vendor="0xffff" device="0xffff" subsystem_vendor="0xffff" subsystem_device="0xffff" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:03:00.0" class="0x030200" vendor="0x10de" device="0x2330" subsystem_vendor="0x10de" subsystem_device="0x16c1" link_speed="32.0 GT/s PCIe" link_width="16"/>
      <pci busid="0000:04:00.0" class="0x020700" vendor="0x15b3" device="0x1021" subsystem_vendor="0x15b3" subsystem_device="0x0023" link_speed="32.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_0" dev="0" speed="400000" port="1" latency="0" guid="0x1" maxconn="131072" gdr="1"/>
        </nic>
      </pci>
    </pci>
  </cpu>
</system>
"#;

/// A stale topology file for the same tree: it places the GPU alone, on
/// NUMA node 1's CPU, and not the NIC (on node 0 in sysfs), which NCCL
/// then climbs sysfs for and hangs on a CPU of its own: SYS where sysfs
/// says PHB (graph/xml.cc, ncclTopoGetXmlFromSys).
const TOPO_FILE_GPU_ONLY: &str = r#"<system version="1">
  <cpu numaid="1" affinity="ffff0000" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="207">
    <pci busid="0000:03:00.0" class="0x030200" vendor="0x10de" device="0x2330" subsystem_vendor="0x10de" subsystem_device="0x16c1" link_speed="32.0 GT/s PCIe" link_width="16"/>
  </cpu>
</system>
"#;

/// A topology file in Azure's shape (ndv4's 16 GT/s: 24 GB/s) that places
/// GPU 07:00.0 and mlx5_1 below one switch and nothing else
/// (common::two_switches_nvlinked).
const TOPO_FILE_SLOW_PAIR: &str = r#"<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="207">
    <pci busid="ffff:ff:01.0" class="0x060400" link_speed="16 GT/s" link_width="16">
      <pci busid="0000:07:00.0" class="0x030200" link_speed="16 GT/s" link_width="16"/>
      <pci busid="0000:08:00.0" class="0x020700" link_speed="16 GT/s" link_width="16"/>
    </pci>
  </cpu>
</system>
"#;

/// The catalogue of modelled nodes NCCL judges. Each is a shape a real
/// kernel shows (tests/common: the kernel's files and links); every node
/// has MLNX_OFED with nv_peer_mem, so the distance and the NIC set decide.
fn catalogue() -> Vec<Case> {
    const GIB: u64 = 1 << 30;
    let mut out: Vec<(&'static str, Tree)> = Vec::new();
    let t = one_switch("oracle-one-switch", None);
    t.mofed_with("nv_peer_mem");
    out.push(("one switch: GPU and NIC below it", t));
    out.push((
        "a NIC in an Intel VMD domain, the GPU on a root port of the same socket",
        vmd_nic("oracle-vmd"),
    ));
    out.push((
        "the NIC below the GPU's own switch with its port down, another NIC on a root port",
        own_switch_nic_down("oracle-down-port", "1: DOWN", "2: Polling"),
    ));
    out.push((
        "8 GPUs and 8 NICs, a switch per pair, two sockets",
        eight_by_eight(0),
    ));

    let t = Tree::new("oracle-two-levels");
    let rp = "pci0000:00/0000:00:01.0";
    t.bridge(rp, 4, None, 0);
    t.bridge(&format!("{rp}/0000:01:00.0"), 5, None, 0);
    t.bridge(&format!("{rp}/0000:01:00.0/0000:02:00.0"), 6, None, 0);
    t.bridge(
        &format!("{rp}/0000:01:00.0/0000:02:00.0/0000:03:00.0"),
        5,
        None,
        0,
    );
    t.bridge(
        &format!("{rp}/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:00.0"),
        6,
        None,
        0,
    );
    t.gpu(
        &format!("{rp}/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:00.0/0000:05:00.0"),
        0x2330,
        0,
        128 * GIB,
    );
    t.bridge(&format!("{rp}/0000:01:00.0/0000:02:01.0"), 6, None, 0);
    t.nic(
        &format!("{rp}/0000:01:00.0/0000:02:01.0/0000:06:00.0"),
        "mlx5_0",
        0,
    );
    out.push(("two levels of switches between GPU and NIC", t));

    let t = switch_and_root_port("oracle-root-ports");
    out.push(("GPU behind a switch, NIC on another root port", t));

    for (name, gpu_numa, nic_numa) in [
        ("two host bridges of one NUMA node", 0, 0),
        ("two NUMA nodes", 0, 1),
        ("the GPU's NUMA node unset by the firmware (-1)", -1, 0),
        ("both NUMA nodes unset (-1)", -1, -1),
    ] {
        let t = Tree::new("oracle-host-bridges");
        t.bridge("pci0000:00/0000:00:01.0", 4, None, gpu_numa);
        t.gpu(
            "pci0000:00/0000:00:01.0/0000:01:00.0",
            0x2330,
            gpu_numa,
            128 * GIB,
        );
        t.bridge("pci0000:40/0000:40:01.0", 4, None, nic_numa);
        t.nic("pci0000:40/0000:40:01.0/0000:41:00.0", "mlx5_0", nic_numa);
        out.push((name, t));
    }

    let t = Tree::new("oracle-flat");
    t.gpu("pci0000:00/0000:00:06.0", 0x2330, -1, 128 * GIB);
    t.nic("pci0000:00/0000:00:07.0", "mlx5_0", -1);
    t.vm();
    out.push(("a VM: GPU and NIC on the root bus", t));

    // Broadcom's PEX switches (vendor 0x1000): a Gen5 PEX89000 shows itself
    // as two levels, its upper switch subsystem 0x1000:0x0xxx, its lower
    // 0x1000:0x1xxx, both device 0xc030 (NCCL graph/topo.cc, getBcmGen).
    let t = Tree::new("oracle-broadcom");
    let rp = "pci0000:00/0000:00:01.0";
    t.bridge(rp, 4, None, 0);
    let usp = format!("{rp}/0000:01:00.0");
    let mut ports = vec![(usp.clone(), 5, 0x0001)];
    // Two lower switches, the GPU below one, the NIC below the other.
    for (i, end) in [(0u8, "gpu"), (1, "nic")] {
        let dsp = format!("{usp}/0000:02:0{i}.0");
        let usp2 = format!("{dsp}/0000:0{}:00.0", 3 + 3 * i);
        let dsp2 = format!("{usp2}/0000:0{}:00.0", 4 + 3 * i);
        let device = format!("{dsp2}/0000:0{}:00.0", 5 + 3 * i);
        ports.push((dsp, 6, 0x0001));
        ports.push((usp2, 5, 0x1001));
        ports.push((dsp2, 6, 0x1001));
        if end == "gpu" {
            t.gpu(&device, 0x2330, 0, 128 * GIB);
        } else {
            t.nic(&device, "mlx5_0", 0);
        }
    }
    for (chain, kind, subsystem) in &ports {
        t.bridge(chain, *kind, None, 0);
        t.switch_ids(chain, (0x1000, 0xc030), (0x1000, *subsystem));
    }
    out.push(("Broadcom Gen5 PEX switch (two levels in sysfs)", t));
    // Issue 57: 8 GPUs and 8 NICs, two of each below one Broadcom Gen5
    // switch (each device below a lower level of it, which NCCL flattens),
    // a switch per root port, two per socket. Every GPU is as near to both
    // NICs of its switch; NCCL gives the GPUs one each, by device number.
    let t = Tree::new("oracle-broadcom-8x8");
    let mut bus = 0x10u32;
    let mut next = || {
        bus += 1;
        bus
    };
    for s in 0..4u32 {
        let (root, numa) = if s < 2 {
            ("pci0000:00", 0)
        } else {
            ("pci0000:80", 1)
        };
        let rbus = if s < 2 { 0x00 } else { 0x80 };
        let rp = format!("{root}/0000:{rbus:02x}:{:02x}.0", s % 2 + 1);
        t.bridge(&rp, 4, None, numa);
        let ub = next() + if s < 2 { 0 } else { 0x80 };
        let usp = format!("{rp}/0000:{ub:02x}:00.0");
        t.bridge(&usp, 5, None, numa);
        t.switch_ids(&usp, (0x1000, 0xc030), (0x1000, 0x0001));
        let db = next() + if s < 2 { 0 } else { 0x80 };
        for (i, end) in ["gpu", "gpu", "nic", "nic"].iter().enumerate() {
            let dsp = format!("{usp}/0000:{db:02x}:{i:02x}.0");
            let lb = next() + if s < 2 { 0 } else { 0x80 };
            let usp2 = format!("{dsp}/0000:{lb:02x}:00.0");
            let lb2 = next() + if s < 2 { 0 } else { 0x80 };
            let dsp2 = format!("{usp2}/0000:{lb2:02x}:00.0");
            let eb = next() + if s < 2 { 0 } else { 0x80 };
            let device = format!("{dsp2}/0000:{eb:02x}:00.0");
            for (chain, kind, subsystem) in
                [(&dsp, 6, 0x0001), (&usp2, 5, 0x1001), (&dsp2, 6, 0x1001)]
            {
                t.bridge(chain, kind, None, numa);
                t.switch_ids(chain, (0x1000, 0xc030), (0x1000, subsystem));
            }
            let n = 2 * s + (i as u32 % 2);
            if *end == "gpu" {
                t.gpu(&device, 0x2330, numa, 128 * GIB);
            } else {
                t.nic(&device, &format!("mlx5_{n}"), numa);
            }
        }
    }
    out.push((
        "8 GPUs and 8 NICs, two of each below each Broadcom Gen5 two-level switch",
        t,
    ));
    // The NIC set: NCCL's IB plugin takes ACTIVE ports only, of an
    // InfiniBand or Ethernet (RoCE) link, that NCCL_IB_HCA admits.
    let pix_and_phb = |name: &str| {
        let t = one_switch(name, None);
        t.bridge("pci0000:00/0000:00:02.0", 4, None, 0);
        t.nic("pci0000:00/0000:00:02.0/0000:05:00.0", "mlx5_1", 0);
        t
    };
    let t = pix_and_phb("oracle-port-down");
    t.port("mlx5_0", 1, "1: DOWN", "InfiniBand");
    out.push(("the nearer NIC's port is down", t));
    let t = pix_and_phb("oracle-port-init");
    t.port("mlx5_0", 1, "2: INIT", "InfiniBand");
    t.port("mlx5_0", 2, "4: ACTIVE", "InfiniBand");
    out.push(("the nearer NIC's second port is the ACTIVE one", t));
    let t = pix_and_phb("oracle-roce");
    t.port("mlx5_0", 1, "4: ACTIVE", "Ethernet");
    out.push(("the nearer NIC is RoCE (Ethernet link layer)", t));
    let mut cases: Vec<Case> = out
        .into_iter()
        .map(|(what, tree)| Case {
            what,
            tree,
            env: Vec::new(),
            etc_nccl_conf: None,
            topo_file: None,
            nvswitch: false,
        })
        .collect();
    for (what, hca) in [
        ("NCCL_IB_HCA names the farther NIC", "mlx5_1"),
        ("NCCL_IB_HCA excludes the nearer NIC", "^mlx5_0"),
        (
            "NCCL_IB_HCA names the farther NIC exactly, with its port",
            "=mlx5_1:1",
        ),
        (
            "NCCL_IB_HCA names the nearer NIC's port 2, which it lacks",
            "mlx5_0:2,mlx5_1",
        ),
        ("NCCL_IB_HCA's prefix takes both", "mlx5"),
        ("NCCL_IB_HCA names an exact prefix: nothing", "=mlx5"),
    ] {
        cases.push(Case::plain(
            what,
            pix_and_phb("oracle-ib-hca"),
            vec![("NCCL_IB_HCA", hca)],
            false,
        ));
    }
    cases.push(Case {
        what: "NCCL_IB_HCA in /etc/nccl.conf names the farther NIC",
        tree: pix_and_phb("oracle-ib-hca-conf"),
        env: Vec::new(),
        etc_nccl_conf: Some("NCCL_IB_HCA=mlx5_1\n"),
        topo_file: None,
        nvswitch: false,
    });
    // NCCL's topology file: what it places, NCCL does not look up in sysfs.
    for (what, conf, file) in [
        (
            "NCCL_TOPO_FILE places GPU and NIC under one switch",
            None,
            "/opt/topo.xml",
        ),
        (
            "NCCL_TOPO_FILE in /etc/nccl.conf (Azure's way)",
            Some("NCCL_TOPO_FILE=/opt/topo.xml\n"),
            "/opt/topo.xml",
        ),
        (
            "nvidia-topologyd's virtualTopology.xml",
            None,
            "/var/run/nvidia-topologyd/virtualTopology.xml",
        ),
    ] {
        cases.push(Case {
            what,
            tree: switch_and_root_port("oracle-topo-file"),
            env: Vec::new(),
            etc_nccl_conf: conf,
            topo_file: Some((file, TOPO_FILE)),
            nvswitch: false,
        });
    }
    cases.push(Case {
        what: "a topology file's slow link: NCCL relays the GPU through an NVLink peer to a wider NIC, though its own is PIX",
        tree: two_switches_nvlinked("oracle-topo-file-slow-pair"),
        env: Vec::new(),
        etc_nccl_conf: None,
        topo_file: Some(("/opt/topo.xml", TOPO_FILE_SLOW_PAIR)),
        nvswitch: false,
    });
    cases.push(Case {
        what: "a stale NCCL_TOPO_FILE places the GPU alone, on another NUMA node",
        tree: switch_and_root_port("oracle-topo-file-gpu-only"),
        env: Vec::new(),
        etc_nccl_conf: None,
        topo_file: Some(("/opt/topo.xml", TOPO_FILE_GPU_ONLY)),
        nvswitch: false,
    });
    // Broadcom's virtual switch links: a switch on each root port, the GPU
    // below one, the NIC below the other (PHB in sysfs); a link between the
    // two switches makes NCCL's path PXB.
    let linked = |name: &str, link: bool| {
        let t = Tree::new(name);
        for (rp, usp, dsp, end) in [
            (
                "0000:00:01.0",
                "0000:01:00.0",
                "0000:02:00.0",
                "0000:03:00.0",
            ),
            (
                "0000:00:02.0",
                "0000:05:00.0",
                "0000:06:00.0",
                "0000:07:00.0",
            ),
        ] {
            let rp = format!("pci0000:00/{rp}");
            t.bridge(&rp, 4, None, 0);
            t.bridge(&format!("{rp}/{usp}"), 5, None, 0);
            t.switch_ids(&format!("{rp}/{usp}"), (0x1000, 0xc030), (0x1000, 0x0001));
            t.bridge(&format!("{rp}/{usp}/{dsp}"), 6, None, 0);
            t.switch_ids(
                &format!("{rp}/{usp}/{dsp}"),
                (0x1000, 0xc030),
                (0x1000, 0x0001),
            );
            if end == "0000:03:00.0" {
                t.gpu(&format!("{rp}/{usp}/{dsp}/{end}"), 0x2330, 0, 128 << 30);
            } else {
                t.nic(&format!("{rp}/{usp}/{dsp}/{end}"), "mlx5_0", 0);
            }
        }
        if link {
            let dir = "sys/kernel/pci_switch_link/virtual_switch_links";
            t.write(&format!("{dir}/0000:01:00.0/0000:05:00.0"), "");
            t.write(&format!("{dir}/0000:05:00.0/0000:01:00.0"), "");
        }
        t
    };
    for (what, link) in [
        (
            "Broadcom switches on two root ports, a virtual switch link between them",
            true,
        ),
        (
            "Broadcom switches on two root ports, no virtual switch link",
            false,
        ),
    ] {
        cases.push(Case::plain(
            what,
            linked("oracle-bcm-link", link),
            Vec::new(),
            false,
        ));
    }
    // PXN: a GPU whose every NIC is across a CPU reaches one through its
    // NVLink peer beside it.
    let pxn = |name: &str| {
        let t = far_gpu_and_near_pair(name);
        t.nvswitch(&["0000:10:00.0", "0000:92:00.0"]);
        t
    };
    for (what, env) in [
        ("PXN: the far GPU relayed by its NVLink peer", vec![]),
        (
            "PXN off (NCCL_PXN_DISABLE=1)",
            vec![("NCCL_PXN_DISABLE", "1")],
        ),
    ] {
        cases.push(Case::plain(what, pxn("oracle-pxn"), env, true));
    }
    // PXN over NVLink bridges (no NVSwitch), the far GPU having a NIC of
    // its own on another root port (PHB): ncclTopoGetLocalNet weighs
    // bandwidth first, so one bridge link (20.6 GB/s) loses to that NIC's
    // path and NCCL keeps the GPU's own NIC beyond PXB; three bridges
    // (NV12) relay it (found by the generated nodes; pxn::outweighs).
    for (what, links) in [
        (
            "PXN: one NVLink bridge is narrower than the GPU's own NIC",
            1,
        ),
        ("PXN: three NVLink bridges (NV12) relay the far GPU", 12),
    ] {
        cases.push(Case::plain(
            what,
            far_gpu_bridged("oracle-pxn-bridge", links),
            vec![],
            false,
        ));
    }
    // A relay without GPUDirect RDMA at the level goes through the GPU's
    // local CPU, which NCCL may reach over NVLink (ncclGetLocalCpu; found
    // by the long run): 2.28.9 by fewest hops, 2.30.7 its own.
    for (what, gpu, links) in [
        (
            "a relay diverted through a local CPU over NVLink (a tie at two hops)",
            "0000:92:00.0",
            Some(2),
        ),
        (
            "a relay diverted through a local CPU over NVLink (four links, two switches deep)",
            "0000:94:00.0",
            Some(4),
        ),
        (
            "a relay diverted through the GPU's own CPU: NVSwitches route no CPU's path",
            "0000:94:00.0",
            None,
        ),
    ] {
        cases.push(Case::plain(
            what,
            local_cpu_over_nvlink("oracle-local-cpu", gpu, links),
            vec![],
            links.is_none(),
        ));
    }
    // NCCL_NET_GDR_READ=0: sends without GPUDirect RDMA, receives with it.
    cases.push(Case::plain(
        "one switch, NCCL_NET_GDR_READ=0",
        one_switch("oracle-gdr-read", None),
        vec![("NCCL_NET_GDR_READ", "0")],
        false,
    ));
    // GPUs older than Ampere: NCCL's sends without GPUDirect RDMA where
    // no NVLink joins them, unless NCCL_NET_GDR_READ says otherwise.
    let voltas = |nvlink: bool| {
        let t = two_voltas("oracle-volta");
        t.volta(&["0000:03:00.0", "0000:05:00.0"], nvlink);
        t
    };
    for (what, tree, env, nvswitch) in [
        ("two V100s, no NVLink", voltas(false), vec![], false),
        ("two V100s joined by NVLink", voltas(true), vec![], true),
        (
            "two V100s, no NVLink, NCCL_NET_GDR_READ=1",
            voltas(false),
            vec![("NCCL_NET_GDR_READ", "1")],
            false,
        ),
    ] {
        cases.push(Case::plain(what, tree, env, nvswitch));
    }
    // Grace Hopper: a GPU joined to its CPU by C2C, the NIC on that CPU's
    // PCIe (P2C); NCCL's two releases differ at a level set below P2C,
    // decided by the libnccl installed where there is one.
    let grace = |second: bool, second_nic: bool, nccl: Option<&str>| {
        let t = grace_hopper("oracle-grace", second, second_nic);
        if second {
            t.grace(&["0009:01:00.0", "0019:01:00.0"]);
        } else {
            t.grace(&["0009:01:00.0"]);
        }
        if let Some(v) = nccl {
            t.nccl_library(v);
        }
        t
    };
    for (what, tree, env) in [
        (
            "Grace Hopper: the NIC on the GPU's CPU, over C2C",
            grace(false, false, None),
            vec![],
        ),
        (
            "Grace Hopper, NCCL_NET_GDR_C2C=0",
            grace(false, false, None),
            vec![("NCCL_NET_GDR_C2C", "0")],
        ),
        (
            "Grace Hopper with NCCL 2.28.9 installed",
            grace(false, false, Some("2.28.9")),
            vec![],
        ),
        (
            "Grace Hopper with NCCL 2.30.7 installed",
            grace(false, false, Some("2.30.7")),
            vec![],
        ),
        (
            "two Grace Hoppers, a NIC on each CPU",
            grace(true, true, None),
            vec![],
        ),
        (
            "two Grace Hoppers, a NIC on the first CPU only (SYS from the second GPU)",
            grace(true, false, None),
            vec![],
        ),
    ] {
        cases.push(Case::plain(what, tree, env, false));
    }
    // A GH200 whose nvidia-smi does not answer: whether C2C joins the GPU
    // to its CPU cannot be seen (NCCL, told of no link, takes the PCIe
    // path through the CPU).
    cases.push(Case::plain(
        "Grace Hopper, nvidia-smi not answering",
        grace_hopper("oracle-grace-unseen", false, false),
        vec![],
        false,
    ));
    // PXN over C2C (NCCL_PXN_C2C, default 1): NVLink joins two GH200s and
    // only the first CPU has a NIC; the second GPU reaches it through the
    // first, which is P2C from it.
    let joined = grace_hopper("oracle-grace-nvl2", true, false);
    joined.grace_joined(&["0009:01:00.0", "0019:01:00.0"]);
    cases.push(Case::plain(
        "two Grace Hoppers joined by NVLink, a NIC on the first CPU only",
        joined,
        vec![],
        true,
    ));
    // A ConnectX-8's Data Direct function beside the GPU (rdma_topo's
    // DMA complex): NCCL offers mlx5_0 there as mlx5_0_dma; with
    // NCCL_IB_DATA_DIRECT=0 at its PF, over the GPU's C2C link.
    for (what, env) in [
        (
            "Grace Blackwell, a ConnectX-8 Data Direct function beside the GPU",
            vec![],
        ),
        (
            "Grace Blackwell Data Direct, NCCL_IB_DATA_DIRECT=0",
            vec![("NCCL_IB_DATA_DIRECT", "0")],
        ),
        (
            "Grace Blackwell Data Direct, NCCL_IB_DATA_DIRECT=2",
            vec![("NCCL_IB_DATA_DIRECT", "2")],
        ),
    ] {
        let t = grace_blackwell_data_direct("oracle-data-direct");
        t.grace(&["0009:06:00.0"]);
        cases.push(Case::plain(what, t, env, false));
    }
    // The CUDA driver's own word on each GPU (readiness/src/cuda.rs), as
    // the libcuda double serves it to the check's child (Tree::cuda):
    // NCCL's `gdr` of the GPU. On the 8-GPU node one GPU says no, listed
    // out of PCI order, as CUDA's default device order may be.
    let cuda_one = |name: &str, supported: bool| {
        let t = one_switch(name, None);
        t.cuda(&[("0000:03:00.0", supported)]);
        t
    };
    let eight = eight_by_eight(0);
    eight.cuda(&[
        ("0000:92:00.0", true),
        ("0000:12:00.0", true),
        ("0000:22:00.0", true),
        ("0000:32:00.0", false),
        ("0000:42:00.0", true),
        ("0000:a2:00.0", true),
        ("0000:b2:00.0", true),
        ("0000:c2:00.0", true),
    ]);
    for (what, tree) in [
        (
            "one switch, CUDA reporting GPUDirect RDMA on the GPU (the lent hosts' answer)",
            cuda_one("oracle-cuda-yes", true),
        ),
        (
            "one switch, CUDA reporting no GPUDirect RDMA on the GPU",
            cuda_one("oracle-cuda-no", false),
        ),
        (
            "8 GPUs and 8 NICs, CUDA reporting no GPUDirect RDMA on one GPU",
            eight,
        ),
    ] {
        cases.push(Case::plain(what, tree, vec![], false));
    }
    for c in &cases {
        c.tree.nvidia_open_580();
        c.tree.mofed_with("nv_peer_mem");
    }
    cases
}

#[test]
#[ignore = "needs cargo xtask nccl-harness; run by ci/test-nccl.sh"]
fn every_modelled_node_is_judged_as_nccl_judges_it() {
    let mut differ = Vec::new();
    let mut compared = 0;
    for case in catalogue() {
        let t = &case.tree;
        let mut common: Vec<(&str, PathBuf)> = case
            .env
            .iter()
            .map(|(k, v)| (*k, PathBuf::from(v)))
            .collect();
        let mut check_env = Vec::new();
        if let Some(text) = case.etc_nccl_conf {
            t.write("etc-nccl.conf", text);
            check_env.push(("NV_PEER_MEM_NCCL_CONF", t.root.join("etc-nccl.conf")));
            // NCCL opens the file by the name /etc/nccl.conf gives, which
            // is the node's: under the tree for the harness.
            let theirs = match case.topo_file {
                Some((file, _)) => text.replace(file, &format!("{}{file}", t.root.display())),
                None => text.to_owned(),
            };
            t.write("etc-nccl.conf.harness", theirs);
            common.push((
                "NCCL_HARNESS_ETC_NCCL_CONF",
                t.root.join("etc-nccl.conf.harness"),
            ));
        }
        if let Some((file, text)) = case.topo_file {
            t.write(file.trim_start_matches('/'), text);
            if case.etc_nccl_conf.is_none() && !file.starts_with("/var/run/nvidia-topologyd/") {
                check_env.push(("NCCL_TOPO_FILE", PathBuf::from(file)));
                common.push(("NCCL_TOPO_FILE", t.root.join(file.trim_start_matches('/'))));
            }
        }
        for level in [None, Some("PIX"), Some("PHB"), Some("SYS")] {
            let mut env = common.clone();
            if let Some(l) = level {
                env.push(("NCCL_NET_GDR_LEVEL", PathBuf::from(l)));
            }
            let mut ours = env.clone();
            ours.extend(check_env.iter().cloned());
            let (_, out) = t.run_with(&[], &ours);
            let (gpus, nics) = devices(&out);
            assert!(
                !gpus.is_empty() && !nics.is_empty(),
                "{}:\n{out}",
                case.what
            );
            let what = format!(
                "{}, NCCL_NET_GDR_LEVEL={}",
                case.what,
                level.unwrap_or("(default)")
            );
            let (n, d) = oracle::judge(t, &out, &env, case.nvswitch, &what);
            compared += n;
            differ.extend(d);
        }
    }
    println!("{compared} GPU verdicts compared");
    assert!(
        differ.is_empty(),
        "the check and NCCL differ:\n{}",
        differ.join("\n")
    );
}
