//! Node trees nobody chose (issue 57): a seed makes one node as a kernel
//! shows it, through Tree's methods only (so every file shape is the one
//! check_shapes holds to the real dumps, and buses are named as the kernel
//! names them). The same seed makes the same node; `describe` says what it
//! made, for the line that reports a difference.
//!
//! What a node may have: one or two sockets, each NUMA node known or unset
//! (-1); per socket one to three root ports; below a root port a GPU or a
//! NIC alone, or a switch of two to four devices; sometimes an Intel VMD
//! domain with a NIC; NICs with one or two functions (mlx5 devices),
//! InfiniBand or Ethernet, ports ACTIVE, DOWN (Polling or Disabled) or
//! INIT.
//!
//! From the same seed's second stream (so that each seed's base node stays
//! the one the long runs judged; docs/nccl-harness.md): the switch's make
//! in detail (PLX/Broadcom PEX 8700 one level, or chained two levels,
//! which NCCL does not flatten; Microchip Switchtec; Broadcom's Gen5
//! PEX89000 and Gen4 PEX88000 shown as two levels, which NCCL flattens,
//! Gen5 with one level, and Gen5 whose lower level has the upper's ids,
//! which NCCL leaves unflattened), SR-IOV virtual functions of a NIC, and
//! NVSwitches joining every GPU (the nvidia-smi double of Tree::nvswitch).
//! From a third stream: NVLink without NVSwitches on a third of the other
//! nodes, bridges over neighbouring GPUs or a partial mesh (Tree::nvlink).
//! From a fourth: a topology file for NCCL on one node in six
//! (`topology_file`).
//!
//! A node is planned first (every draw made), then written; `Omit` leaves
//! parts of the plan unwritten, its names and bus numbers unchanged, which
//! is how a difference is shrunk (generated.rs, `shrink`).
//!
//! `settings` draws, from the same seed but its own stream, the NCCL
//! settings a site gives: none mostly, else NCCL_IB_HCA in each of NCCL's
//! forms (a prefix list, `^` to exclude, `=` for exact names, `:port`),
//! from the environment or from /etc/nccl.conf.

use super::{GIB, Tree};
use std::collections::BTreeSet;

/// splitmix64: a small, fixed generator, so a seed means the same node on
/// every machine and toolchain.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number in 0..@n.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// True one time in @n.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// A switch's make and how it shows in sysfs: each level's port ids
/// (vendor, device, subsystem vendor, subsystem device), as NCCL's
/// getBcmGen (graph/topo.cc, 2.28.9 and 2.30.7) reads them.
#[derive(Clone, Copy, Debug)]
enum Switch {
    /// PLX (now Broadcom) PEX 8700 Gen3, one level.
    Plx,
    /// Two PLX switches chained: not Broadcom's ids, so NCCL keeps both.
    PlxChained,
    /// Microchip Switchtec PFX Gen4, one level.
    Microchip,
    /// Broadcom PEX89000 Gen5, two levels: the upper switch's ports
    /// subsystem 0x1000:0x0???, the lower's 0x1000:0x1??? (NCCL flattens).
    BroadcomGen5,
    /// Broadcom PEX88000 Gen4, two levels, both `0x1000c0101000a???`
    /// (NCCL flattens).
    BroadcomGen4,
    /// Broadcom Gen5 with its upper level only (nothing to flatten).
    BroadcomGen5OneLevel,
    /// Broadcom Gen5 whose lower level has the upper level's ids: NCCL
    /// fuses only a lower level of 0x1???, so it keeps both.
    BroadcomGen5LowerUnmatched,
}

impl Switch {
    /// The upper level's ids, and the lower's where there is one.
    fn ids(self) -> ([u16; 4], Option<[u16; 4]>) {
        match self {
            Switch::Plx => ([0x10b5, 0x8747, 0x10b5, 0x0001], None),
            Switch::PlxChained => (
                [0x10b5, 0x8747, 0x10b5, 0x0001],
                Some([0x10b5, 0x8747, 0x10b5, 0x0001]),
            ),
            Switch::Microchip => ([0x11f8, 0x4036, 0x11f8, 0x0001], None),
            Switch::BroadcomGen5 => (
                [0x1000, 0xc030, 0x1000, 0x0001],
                Some([0x1000, 0xc030, 0x1000, 0x1001]),
            ),
            Switch::BroadcomGen4 => (
                [0x1000, 0xc010, 0x1000, 0xa064],
                Some([0x1000, 0xc010, 0x1000, 0xa064]),
            ),
            Switch::BroadcomGen5OneLevel => ([0x1000, 0xc030, 0x1000, 0x0001], None),
            Switch::BroadcomGen5LowerUnmatched => (
                [0x1000, 0xc030, 0x1000, 0x0001],
                Some([0x1000, 0xc030, 0x1000, 0x0001]),
            ),
        }
    }
}

/// A port of an RDMA function: state and phys_state as the kernel prints
/// them, and its link layer.
#[derive(Clone, Debug)]
struct Port {
    state: &'static str,
    phys: &'static str,
    layer: &'static str,
}

#[derive(Clone, Debug)]
enum Device {
    Gpu,
    /// An adapter's physical functions (one or two) and the SR-IOV virtual
    /// functions of its first.
    Nic {
        functions: Vec<Port>,
        vfs: Vec<Port>,
    },
}

#[derive(Clone, Debug)]
enum Below {
    Alone(Device),
    Switch(Switch, Vec<Device>),
}

#[derive(Clone, Debug)]
struct Socket {
    numa: i32,
    ports: Vec<Below>,
    vmd: bool,
}

/// The parts of a node that shrinking may leave out, numbered in the
/// order `Plan::parts` lists them: each root port with what is below it,
/// each VMD domain, the NVSwitches.
#[derive(Clone, Default, Debug)]
pub struct Omit(pub BTreeSet<usize>);

impl Omit {
    /// `NVPM_GENERATED_OMIT=1,4` as a set.
    pub fn parse(text: &str) -> Omit {
        Omit(
            text.split(',')
                .filter_map(|p| p.trim().parse().ok())
                .collect(),
        )
    }
    pub fn list(&self) -> String {
        let v: Vec<String> = self.0.iter().map(|p| p.to_string()).collect();
        v.join(",")
    }
}

/// What @seed draws, before anything is written (the plan's Debug form):
/// what a test of the generator's coverage reads without writing trees.
pub fn plan(seed: u64) -> String {
    format!("{:?}", Plan::draw(seed))
}

/// How many parts of @seed's node `Omit` may name (its NCCL settings,
/// generated.rs's part, not counted), read from its plan alone.
pub fn parts(seed: u64) -> usize {
    Plan::draw(seed).parts()
}

/// What a seed draws, before anything is written.
#[derive(Debug)]
struct Plan {
    sockets: Vec<Socket>,
    nvswitch: bool,
    /// NVLink between GPUs without NVSwitches, where no NVSwitch is drawn.
    nvlink: Option<Links>,
}

/// How NVLink joins a node's GPUs (in PCI order) when no NVSwitch does.
#[derive(Debug)]
enum Links {
    /// NVLink bridges over neighbouring pairs (GPU 0 with 1, 2 with 3, ...),
    /// @0 links each: 4 on an RTX A6000's bridge, 12 on three A100 PCIe
    /// bridges.
    Bridges(u32),
    /// A partial mesh (a DGX-1's hybrid cube mesh is one): pair k of the
    /// pairs in order (0-1, 0-2, ..., 1-2, ...) is joined where bit 2k of
    /// @0 is set, by one link, or two where bit 2k+1 is set too (the
    /// first 32 pairs; later ones are not joined).
    Mesh(u64),
}

impl Links {
    /// The links among @gpus GPUs: (index, index, count).
    fn among(&self, gpus: usize) -> Vec<(usize, usize, u32)> {
        let mut out = Vec::new();
        let mut k = 0;
        for i in 0..gpus {
            for j in i + 1..gpus {
                match self {
                    Links::Bridges(n) if i % 2 == 0 && j == i + 1 => out.push((i, j, *n)),
                    Links::Bridges(_) => {}
                    Links::Mesh(bits) => {
                        let bit = |b: u32| b < 64 && bits >> b & 1 == 1;
                        if bit(2 * k) {
                            out.push((i, j, 1 + u32::from(bit(2 * k + 1))));
                        }
                    }
                }
                k += 1;
            }
        }
        out
    }
}

impl Plan {
    /// Each root port, each VMD domain, the NVSwitches where drawn.
    fn parts(&self) -> usize {
        self.sockets
            .iter()
            .map(|s| s.ports.len() + usize::from(s.vmd))
            .sum::<usize>()
            + usize::from(self.nvswitch)
            + usize::from(self.nvlink.is_some())
    }

    fn draw(seed: u64) -> Plan {
        let mut rng = Rng::new(seed);
        // The second stream: what the base node of a seed never drew.
        let mut more = Rng::new(seed ^ 0x6d6f_7265_5f73_6861);
        let count = 1 + rng.below(2);
        let mut sockets = Vec::new();
        for s in 0..count {
            let numa: i32 = if rng.one_in(6) { -1 } else { s as i32 };
            let ports = 1 + rng.below(3);
            let mut below = Vec::new();
            for _ in 0..ports {
                if rng.below(4) == 0 {
                    below.push(Below::Alone(draw_device(&mut rng, &mut more)));
                    continue;
                }
                let make = match rng.below(3) {
                    0 if more.one_in(4) => Switch::PlxChained,
                    0 => Switch::Plx,
                    1 => Switch::Microchip,
                    _ => match more.below(6) {
                        0 => Switch::BroadcomGen4,
                        1 => Switch::BroadcomGen5OneLevel,
                        2 => Switch::BroadcomGen5LowerUnmatched,
                        _ => Switch::BroadcomGen5,
                    },
                };
                let n = 2 + rng.below(3);
                let devices = (0..n).map(|_| draw_device(&mut rng, &mut more)).collect();
                below.push(Below::Switch(make, devices));
            }
            let vmd = rng.one_in(5);
            sockets.push(Socket {
                numa,
                ports: below,
                vmd,
            });
        }
        let nvswitch = more.one_in(4);
        // The third stream: NVLink without NVSwitches, on a third of the
        // nodes without them (each seed's earlier draws unchanged).
        let mut links = Rng::new(seed ^ 0x6e76_6c69_6e6b_5f33);
        let nvlink = (!nvswitch && links.one_in(3)).then(|| {
            if links.one_in(2) {
                Links::Bridges(if links.one_in(2) { 4 } else { 12 })
            } else {
                Links::Mesh(links.next())
            }
        });
        Plan {
            sockets,
            nvswitch,
            nvlink,
        }
    }
}

/// A GPU or a NIC (one function or two, port states varied; VFs from the
/// second stream).
fn draw_device(rng: &mut Rng, more: &mut Rng) -> Device {
    if rng.one_in(2) {
        return Device::Gpu;
    }
    let count = if rng.one_in(4) { 2 } else { 1 };
    let functions: Vec<Port> = (0..count)
        .map(|_| {
            let layer = if rng.one_in(4) {
                "Ethernet"
            } else {
                "InfiniBand"
            };
            let (state, phys) = match rng.below(6) {
                0 => ("1: DOWN", "2: Polling"),
                1 => ("1: DOWN", "3: Disabled"),
                2 if layer == "InfiniBand" => ("2: INIT", "5: LinkUp"),
                _ => ("4: ACTIVE", "5: LinkUp"),
            };
            Port { state, phys, layer }
        })
        .collect();
    // SR-IOV: a VF's link is its PF's; an InfiniBand VF of an active port
    // waits in INIT until the subnet manager gives it a LID.
    let pf = functions[0].clone();
    // One to three VFs mostly, sometimes up to eight: beyond the PFs'
    // functions they take the next device numbers of the bus (ARI).
    let vfs = if more.one_in(5) {
        let count = if more.one_in(3) {
            4 + more.below(5)
        } else {
            1 + more.below(3)
        };
        (0..count)
            .map(|_| {
                if pf.layer == "InfiniBand" && pf.state.starts_with('4') && more.one_in(3) {
                    Port {
                        state: "2: INIT",
                        ..pf.clone()
                    }
                } else {
                    pf.clone()
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    Device::Nic { functions, vfs }
}

/// A generated node: the tree, what it holds, and what judging it needs.
pub struct Node {
    pub tree: Tree,
    pub what: String,
    /// RDMA devices named (mlx5_0..), written or not.
    pub nics: u32,
    /// The parts `Omit` may name.
    pub parts: usize,
    /// NVSwitches join the GPUs (the oracle's `nvswitch`).
    pub nvswitch: bool,
    /// The GPUs written, by bus id.
    pub gpus: Vec<String>,
}

/// The node of @seed.
pub fn node(seed: u64) -> Node {
    node_without(seed, &Omit::default())
}

/// The node of @seed without the parts in @omit.
pub fn node_without(seed: u64, omit: &Omit) -> Node {
    let plan = Plan::draw(seed);
    let t = Tree::new(&format!("gen-{seed}"));
    // The harness's CPU (an Emerald Rapids, its default --cpu), so that
    // both sides give the link between the sockets one bandwidth.
    t.cpuinfo("GenuineIntel", 6, 207);
    let mut w = Writer {
        t: &t,
        bus: 0,
        nics: 0,
        gpus: Vec::new(),
        said: Vec::new(),
        keep: true,
    };
    let mut part = 0;
    // The kernel gives every device of a host bridge its node (pcibus_to_node):
    // socket 0's is kept for the device added at the end.
    let first_numa = plan.sockets[0].numa;
    for (s, socket) in plan.sockets.iter().enumerate() {
        let s = s as u32;
        let numa = socket.numa;
        let base = 0x80 * s;
        let root = format!("pci0000:{base:02x}");
        w.said.push(format!(
            "socket {s} (numa {numa}): {} root ports",
            socket.ports.len()
        ));
        for (p, below) in socket.ports.iter().enumerate() {
            w.keep = !omit.0.contains(&part);
            part += 1;
            let rp = format!("{root}/0000:{base:02x}:{:02x}.0", p + 1);
            w.bridge(&rp, 4, None, numa);
            match below {
                Below::Alone(d) => {
                    let dev = format!("{rp}/0000:{:02x}:00.0", w.next_bus(base));
                    w.device(d, &dev, numa);
                }
                Below::Switch(make, devices) => {
                    let (upper, lower) = make.ids();
                    let usp = format!("{rp}/0000:{:02x}:00.0", w.next_bus(base));
                    w.bridge(&usp, 5, Some(upper), numa);
                    let dsp_bus = w.next_bus(base);
                    w.say(format!(
                        "  root port {p}: {make:?} switch of {}",
                        devices.len()
                    ));
                    for (d, device) in devices.iter().enumerate() {
                        let dsp = format!("{usp}/0000:{dsp_bus:02x}:{d:02x}.0");
                        w.bridge(&dsp, 6, Some(upper), numa);
                        let below = if let Some(lower) = lower {
                            let usp2 = format!("{dsp}/0000:{:02x}:00.0", w.next_bus(base));
                            let dsp2 = format!("{usp2}/0000:{:02x}:00.0", w.next_bus(base));
                            w.bridge(&usp2, 5, Some(lower), numa);
                            w.bridge(&dsp2, 6, Some(lower), numa);
                            dsp2
                        } else {
                            dsp
                        };
                        let dev = format!("{below}/0000:{:02x}:00.0", w.next_bus(base));
                        w.device(device, &dev, numa);
                    }
                }
            }
        }
        if socket.vmd {
            w.keep = !omit.0.contains(&part);
            part += 1;
            // An Intel VMD domain on this socket's host bridge, a NIC in it.
            let name = format!("mlx5_{}", w.nics);
            w.nics += 1;
            if w.keep {
                let vmd = format!("{root}/0000:{base:02x}:0e.0");
                t.pci(
                    &vmd,
                    (0x8086, 0x28c0, 0x010400),
                    numa,
                    &super::plain_resource(),
                    &[0u8; 4096],
                );
                t.bind(&vmd, "vmd");
                let domain = format!("{vmd}/pci1000{s}:e0");
                t.bridge(&format!("{domain}/1000{s}:e0:06.0"), 4, None, numa);
                t.nic(
                    &format!("{domain}/1000{s}:e0:06.0/1000{s}:e1:00.0"),
                    &name,
                    numa,
                );
            }
            w.say(format!("  a VMD domain 1000{s} with {name}"));
        }
    }
    w.keep = true;
    let written_nics = std::fs::read_dir(t.sys().join("class/infiniband")).map_or(0, |d| d.count());
    // A node always has a GPU and a NIC: NCCL has nothing to judge otherwise.
    if w.gpus.is_empty() || written_nics == 0 {
        let rp = format!("pci0000:00/0000:00:{:02x}.0", 0x10);
        let dev = format!("{rp}/0000:{:02x}:00.0", 0x70);
        t.bridge(&rp, 4, None, first_numa);
        if w.gpus.is_empty() {
            t.gpu(&dev, 0x2330, first_numa, 128 * GIB);
            w.gpus.push(dev_address(&dev));
            w.said.push("  a GPU on root port 00:10.0".to_owned());
        } else {
            let name = format!("mlx5_{}", w.nics);
            w.nics += 1;
            t.nic(&dev, &name, first_numa);
            w.said.push(format!("  {name} on root port 00:10.0"));
        }
    }
    let nvswitch_part = part;
    let nvswitch = plan.nvswitch && w.gpus.len() > 1 && !omit.0.contains(&nvswitch_part);
    if nvswitch {
        // NVML's order is PCI order (nvidia-smi's index).
        let mut gpus = w.gpus.clone();
        gpus.sort();
        let gpus: Vec<&str> = gpus.iter().map(String::as_str).collect();
        t.nvswitch(&gpus);
        w.said.push("  NVSwitches join every GPU".to_owned());
    }
    // NVLink without NVSwitches: the part after the NVSwitches'.
    let nvlink_part = nvswitch_part + usize::from(plan.nvswitch);
    if let Some(links) = &plan.nvlink {
        let mut gpus = w.gpus.clone();
        gpus.sort();
        let nvlinks = links.among(gpus.len());
        if !nvlinks.is_empty() && !omit.0.contains(&nvlink_part) {
            let gpus: Vec<&str> = gpus.iter().map(String::as_str).collect();
            t.nvlink(&gpus, &nvlinks);
            let pairs: Vec<String> = nvlinks
                .iter()
                .map(|(a, b, n)| format!("{}-{} NV{n}", gpus[*a], gpus[*b]))
                .collect();
            w.said.push(format!("  NVLink {}", pairs.join(", ")));
        }
    }
    if !omit.0.is_empty() {
        w.said.push(format!("  without parts {}", omit.list()));
    }
    Node {
        what: w.said.join("; "),
        nics: w.nics,
        parts: plan.parts(),
        nvswitch,
        gpus: w.gpus,
        tree: t,
    }
}

fn dev_address(chain: &str) -> String {
    chain.rsplit('/').next().unwrap_or("").to_owned()
}

/// Writes a plan's devices, naming and numbering them whether written
/// (`keep`) or not, so that a part left out changes no other part.
struct Writer<'a> {
    t: &'a Tree,
    bus: u32,
    nics: u32,
    gpus: Vec<String>,
    said: Vec<String>,
    keep: bool,
}

impl Writer<'_> {
    fn next_bus(&mut self, base: u32) -> u32 {
        self.bus += 1;
        base + self.bus
    }

    fn say(&mut self, line: String) {
        if self.keep {
            self.said.push(line);
        }
    }

    /// A root port or switch port, with the switch's ids where given.
    fn bridge(&self, chain: &str, kind: u8, ids: Option<[u16; 4]>, numa: i32) {
        if !self.keep {
            return;
        }
        self.t.bridge(chain, kind, None, numa);
        if let Some([v, d, sv, sd]) = ids {
            self.t.switch_ids(chain, (v, d), (sv, sd));
        }
    }

    fn device(&mut self, device: &Device, chain: &str, numa: i32) {
        match device {
            Device::Gpu => {
                if self.keep {
                    self.t.gpu(chain, 0x2330, numa, 128 * GIB);
                    self.gpus.push(dev_address(chain));
                }
                self.say(format!("    GPU {}", dev_address(chain)));
            }
            Device::Nic { functions, vfs } => {
                // Function @f of the adapter: device 00's eight functions,
                // then device 01's (an ARI routing id, drivers/pci/iov.c
                // pci_iov_virtfn_devfn: PF's + offset + stride x VF).
                let function = |f: usize| {
                    let device = chain.trim_end_matches("00.0");
                    format!("{device}{:02x}.{}", f / 8, f % 8)
                };
                let pf = self.nics;
                for (f, port) in functions.iter().enumerate() {
                    let name = format!("mlx5_{}", self.nics);
                    self.nics += 1;
                    if self.keep {
                        self.t.nic(&function(f), &name, numa);
                        self.t
                            .port_phys(&name, 1, port.state, port.phys, port.layer);
                    }
                    self.say(format!("    {name} {} {}", port.layer, port.state));
                }
                for (v, port) in vfs.iter().enumerate() {
                    let name = format!("mlx5_{}", self.nics);
                    self.nics += 1;
                    let at = function(functions.len() + v);
                    if self.keep {
                        self.t.virtual_function(&at, &function(0), v, &name, numa);
                        self.t
                            .port_phys(&name, 1, port.state, port.phys, port.layer);
                    }
                    self.say(format!("    {name} VF {v} of mlx5_{pf} {}", port.state));
                }
            }
        }
    }
}

/// Where a node's NCCL settings are given.
#[derive(Clone, Copy, PartialEq)]
pub enum Given {
    /// The environment of the NCCL job (and of the check).
    Environment,
    /// /etc/nccl.conf.
    EtcNcclConf,
}

/// The NCCL settings of @seed's node, whose NICs are mlx5_0..@nics, and
/// where they are given; empty: NCCL's defaults.
pub fn settings(seed: u64, nics: u32) -> (Vec<(&'static str, String)>, Given) {
    let mut rng = Rng::new(seed ^ 0x5eed_4e43_434c_0001);
    let given = if rng.one_in(2) {
        Given::Environment
    } else {
        Given::EtcNcclConf
    };
    if nics == 0 || !rng.one_in(3) {
        return (Vec::new(), given);
    }
    let mut name = || format!("mlx5_{}", rng.below(u64::from(nics)));
    let a = name();
    let b = name();
    let hca = match rng.below(8) {
        0 => a,
        1 => format!("^{a}"),
        2 => format!("={a}:1"),
        3 => format!("{a},{b}"),
        4 => format!("^{a},{b}"),
        5 => format!("{a}:2,{b}"),
        // A prefix of every name, and the same as an exact name: none.
        6 => "mlx5".to_owned(),
        _ => "=mlx5".to_owned(),
    };
    (vec![("NCCL_IB_HCA", hca)], given)
}

/// A topology file for NCCL on a generated node: where it lies, how NCCL
/// is told of it, its text and what it holds.
pub struct TopoFile {
    /// Its path on the node.
    pub path: &'static str,
    /// NCCL_TOPO_FILE's place, or None: nvidia-topologyd's file, which NCCL
    /// reads unasked.
    pub given: Option<Given>,
    pub text: String,
    pub what: String,
}

/// The topology file of @seed's @node, from a fourth stream of the seed
/// (each seed's earlier draws unchanged), on one node in six: the shape of
/// Azure's HPC images' files (a GPU and an adapter below a switch the VM
/// does not show, `ffff:ff:NN.0`, on one CPU or two, devices by bus id,
/// every link x16 at ndv5's 32 GT/s or ndv4's 16 GT/s, each element with
/// the attributes those files give it: check_topo_file_shape), holding every GPU and RDMA function
/// of the node or, one time in three, some of them: NCCL climbs sysfs for
/// the others and hangs them on the file's CPU of their NUMA node
/// (graph/xml.cc, ncclTopoGetXmlFromSys), which no real file leaves to
/// chance but a stale one does.
pub fn topology_file(seed: u64, node: &Node) -> Option<TopoFile> {
    let mut rng = Rng::new(seed ^ 0x746f_706f_5f66_696c);
    if !rng.one_in(6) {
        return None;
    }
    let mut gpus = node.gpus.clone();
    gpus.sort();
    // The RDMA functions written, by name (mlx5_N in N's order), at the
    // bus id the kernel's link gives.
    let class = node.tree.sys().join("class/infiniband");
    let mut nics: Vec<(u32, String)> = std::fs::read_dir(&class)
        .map(|d| {
            d.filter_map(|e| {
                let e = e.ok()?;
                let name = e.file_name().to_string_lossy().into_owned();
                let n = name.strip_prefix("mlx5_")?.parse().ok()?;
                let at = std::fs::canonicalize(e.path().join("device")).ok()?;
                Some((n, at.file_name()?.to_string_lossy().into_owned()))
            })
            .collect()
        })
        .unwrap_or_default();
    nics.sort();
    let cpus = 1 + rng.below(2) as usize;
    let some = rng.one_in(3);
    let (path, given) = match rng.below(3) {
        0 => ("/opt/topo.xml", Some(Given::Environment)),
        1 => ("/opt/topo.xml", Some(Given::EtcNcclConf)),
        _ => ("/var/run/nvidia-topologyd/virtualTopology.xml", None),
    };
    let mut keep = |_: &str| !some || rng.one_in(2);
    let gpus: Vec<String> = gpus.into_iter().filter(|g| keep(g)).collect();
    let nics: Vec<String> = nics
        .into_iter()
        .map(|(_, a)| a)
        .filter(|a| keep(a))
        .collect();
    let pairs = gpus.len().min(nics.len());
    // The link speed as one of Azure's files spells it (ndv5's, the tree's
    // own 32 GT/s; or ndv4's 16 GT/s, a file slower than the links it
    // describes), and the switch's attributes as ndv4's or ndv5's
    // (check_topo_file_shape).
    let link = if rng.one_in(2) {
        r#"link_speed="32.0 GT/s PCIe" link_width="16""#
    } else {
        r#"link_speed="16 GT/s" link_width="16""#
    };
    let switch_ids = if rng.one_in(2) {
        ""
    } else {
        r#" vendor="0x0000" device="0x0000" subsystem_vendor="0x0000" subsystem_device="0x0000""#
    };
    let gpu = |a: &str| format!(r#"<pci busid="{a}" class="0x030200" {link}/>"#);
    let nic = |a: &str| format!(r#"<pci busid="{a}" class="0x020700" {link}/>"#);
    // Pair i on CPU i x cpus / pairs; the rest on CPU 0. Each parent's
    // children in bus id order, as nvidia-topologyd's and Azure's files
    // have them (NCCL keeps a file's order: docs/readiness.md).
    let mut body: Vec<Vec<(String, Vec<String>)>> = vec![Vec::new(); cpus];
    for i in 0..pairs {
        let switch = format!("ffff:ff:{:02x}.0", i + 1);
        let mut below = [
            (gpus[i].clone(), gpu(&gpus[i])),
            (nics[i].clone(), nic(&nics[i])),
        ];
        below.sort();
        body[i * cpus / pairs].push((
            switch.clone(),
            vec![
                format!(r#"<pci busid="{switch}" class="0x060400" {link}{switch_ids}>"#),
                format!("  {}", below[0].1),
                format!("  {}", below[1].1),
                "</pci>".to_owned(),
            ],
        ));
    }
    body[0].extend(gpus[pairs..].iter().map(|a| (a.clone(), vec![gpu(a)])));
    body[0].extend(nics[pairs..].iter().map(|a| (a.clone(), vec![nic(a)])));
    let body: Vec<Vec<String>> = body
        .into_iter()
        .map(|mut children| {
            children.sort();
            children.into_iter().flat_map(|(_, lines)| lines).collect()
        })
        .collect();
    let mut text = String::from("<system version=\"1\">\n");
    for (c, lines) in body.iter().enumerate() {
        text.push_str(&format!(
            "  <cpu numaid=\"{c}\" affinity=\"{}\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"207\">\n",
            if c == 0 { "0000ffff" } else { "ffff0000" }
        ));
        for l in lines {
            text.push_str(&format!("    {l}\n"));
        }
        text.push_str("  </cpu>\n");
    }
    text.push_str("</system>\n");
    let what = format!(
        "a topology file {path}{} on {cpus} CPU(s): {} placed, {pairs} pair(s) below a switch",
        match given {
            Some(Given::Environment) => " (NCCL_TOPO_FILE in the environment)",
            Some(Given::EtcNcclConf) => " (NCCL_TOPO_FILE in /etc/nccl.conf)",
            None => "",
        },
        gpus.iter()
            .chain(&nics)
            .cloned()
            .collect::<Vec<_>>()
            .join(" ")
    );
    Some(TopoFile {
        path,
        given,
        text,
        what,
    })
}
