//! Node trees nobody chose (issue 57): a seed makes one node as a kernel
//! shows it, through Tree's methods only (so every file shape is the one
//! check_shapes holds to the real dumps, and buses are named as the kernel
//! names them). The same seed makes the same node; `describe` says what it
//! made, for the line that reports a difference.
//!
//! What a node may have: one or two sockets, each NUMA node known or unset
//! (-1); per socket one to three root ports; below a root port a GPU or a
//! NIC alone, or a switch (PLX/Broadcom PEX 8700 one level, Microchip
//! Switchtec, or Broadcom's Gen5 PEX89000 shown as two levels, which NCCL
//! flattens) with two to four devices; sometimes an Intel VMD domain with a
//! NIC; NICs with one or two functions (mlx5 devices), InfiniBand or
//! Ethernet, ports ACTIVE, DOWN (Polling or Disabled) or INIT.
//!
//! `settings` draws, from the same seed but its own stream (so a seed's
//! node is the one earlier runs judged), the NCCL settings a site gives:
//! none mostly, else NCCL_IB_HCA in each of NCCL's forms (a prefix list,
//! `^` to exclude, `=` for exact names, `:port`), from the environment or
//! from /etc/nccl.conf.

use super::{GIB, Tree};

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

/// A switch's make: vendor and device of its ports, and how it shows.
#[derive(Clone, Copy)]
enum Switch {
    /// PLX (now Broadcom) PEX 8700 Gen3: vendor 0x10b5, one level.
    Plx,
    /// Microchip Switchtec PFX Gen4: vendor 0x11f8, one level.
    Microchip,
    /// Broadcom PEX89000 Gen5, two levels in sysfs: the upper switch's
    /// ports subsystem 0x1000:0x0001, the lower's 0x1000:0x1001 (NCCL's
    /// getBcmGen; the catalogue's Broadcom node).
    BroadcomTwoLevel,
}

/// The node of @seed, and a line saying what it is.
pub fn node(seed: u64) -> (Tree, String) {
    let mut rng = Rng::new(seed);
    let t = Tree::new(&format!("gen-{seed}"));
    let mut said = Vec::new();
    let sockets = 1 + rng.below(2) as u32;
    let mut bus = 0u32;
    let (mut gpus, mut nics) = (0u32, 0u32);
    let mut next_bus = |base: u32| {
        bus += 1;
        base + bus
    };
    // The kernel gives every device of a host bridge its node (pcibus_to_node):
    // socket 0's is kept for the device added at the end.
    let mut first_numa = 0;
    for s in 0..sockets {
        let numa: i32 = if rng.one_in(6) { -1 } else { s as i32 };
        if s == 0 {
            first_numa = numa;
        }
        let base = 0x80 * s;
        let root = format!("pci0000:{base:02x}");
        let ports = 1 + rng.below(3) as u32;
        said.push(format!("socket {s} (numa {numa}): {ports} root ports"));
        for p in 0..ports {
            let rp = format!("{root}/0000:{base:02x}:{:02x}.0", p + 1);
            t.bridge(&rp, 4, None, numa);
            let kind = rng.below(4);
            if kind == 0 {
                // One device on the root port.
                let dev = format!("{rp}/0000:{:02x}:00.0", next_bus(base));
                device(&t, &mut rng, &dev, numa, &mut gpus, &mut nics, &mut said);
                continue;
            }
            let make = match rng.below(3) {
                0 => Switch::Plx,
                1 => Switch::Microchip,
                _ => Switch::BroadcomTwoLevel,
            };
            let (vendor, device_id) = match make {
                Switch::Plx => (0x10b5, 0x8747),
                Switch::Microchip => (0x11f8, 0x4036),
                Switch::BroadcomTwoLevel => (0x1000, 0xc030),
            };
            let usp = format!("{rp}/0000:{:02x}:00.0", next_bus(base));
            t.bridge(&usp, 5, None, numa);
            t.switch_ids(&usp, (vendor, device_id), (vendor, 0x0001));
            let dsp_bus = next_bus(base);
            let n = 2 + rng.below(3) as u32;
            said.push(format!(
                "  root port {p}: a {} switch of {n}",
                match make {
                    Switch::Plx => "PLX",
                    Switch::Microchip => "Microchip",
                    Switch::BroadcomTwoLevel => "Broadcom two-level",
                }
            ));
            for d in 0..n {
                let dsp = format!("{usp}/0000:{dsp_bus:02x}:{d:02x}.0");
                t.bridge(&dsp, 6, None, numa);
                t.switch_ids(&dsp, (vendor, device_id), (vendor, 0x0001));
                let below = if let Switch::BroadcomTwoLevel = make {
                    let usp2 = format!("{dsp}/0000:{:02x}:00.0", next_bus(base));
                    let dsp2 = format!("{usp2}/0000:{:02x}:00.0", next_bus(base));
                    for (chain, kind) in [(&usp2, 5), (&dsp2, 6)] {
                        t.bridge(chain, kind, None, numa);
                        t.switch_ids(chain, (vendor, device_id), (vendor, 0x1001));
                    }
                    dsp2
                } else {
                    dsp
                };
                let dev = format!("{below}/0000:{:02x}:00.0", next_bus(base));
                device(&t, &mut rng, &dev, numa, &mut gpus, &mut nics, &mut said);
            }
        }
        if rng.one_in(5) {
            // An Intel VMD domain on this socket's host bridge, a NIC in it.
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
            let name = format!("mlx5_{nics}");
            nics += 1;
            t.nic(
                &format!("{domain}/1000{s}:e0:06.0/1000{s}:e1:00.0"),
                &name,
                numa,
            );
            said.push(format!("  a VMD domain 1000{s} with {name}"));
        }
    }
    // A node always has a GPU and a NIC: NCCL has nothing to judge otherwise.
    if gpus == 0 || nics == 0 {
        let rp = format!("pci0000:00/0000:00:{:02x}.0", 0x10);
        let dev = format!("{rp}/0000:{:02x}:00.0", 0x70);
        t.bridge(&rp, 4, None, first_numa);
        if gpus == 0 {
            t.gpu(&dev, 0x2330, first_numa, 128 * GIB);
            said.push("  a GPU on root port 00:10.0".to_owned());
        } else {
            t.nic(&dev, &format!("mlx5_{nics}"), first_numa);
            said.push(format!("  mlx5_{nics} on root port 00:10.0"));
        }
    }
    (t, said.join("; "))
}

/// A GPU or a NIC (one function or two, port states varied) at @chain.
fn device(
    t: &Tree,
    rng: &mut Rng,
    chain: &str,
    numa: i32,
    gpus: &mut u32,
    nics: &mut u32,
    said: &mut Vec<String>,
) {
    if rng.one_in(2) {
        t.gpu(chain, 0x2330, numa, 128 * GIB);
        *gpus += 1;
        said.push(format!(
            "    GPU {}",
            chain.rsplit('/').next().unwrap_or("")
        ));
        return;
    }
    let functions = if rng.one_in(4) { 2 } else { 1 };
    for f in 0..functions {
        let at = if f == 0 {
            chain.to_owned()
        } else {
            format!("{}.1", chain.trim_end_matches(".0"))
        };
        let name = format!("mlx5_{nics}");
        *nics += 1;
        t.nic(&at, &name, numa);
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
        t.port_phys(&name, 1, state, phys, layer);
        said.push(format!("    {name} {layer} {state}"));
    }
}

/// Where a node's NCCL settings are given.
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
