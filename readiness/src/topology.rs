//! How far apart two PCI devices are, in the classes `nvidia-smi topo -m`
//! prints and NCCL decides GPUDirect RDMA with (docs/diagnostics.md,
//! "Distance"), from their places in the sysfs device tree and their NUMA
//! nodes.

use crate::pci::PciDevice;
use std::collections::BTreeSet;
use std::fmt;

/// Nearest first (the order of NCCL's path types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Distance {
    /// Through at most one PCIe switch.
    Pix,
    /// Through several PCIe switches, not through a host bridge.
    Pxb,
    /// Through a PCIe host bridge (the CPU).
    Phb,
    /// Between host bridges of one NUMA node.
    Node,
    /// Across the interconnect between NUMA nodes.
    Sys,
}

impl Distance {
    pub fn name(self) -> &'static str {
        match self {
            Distance::Pix => "PIX",
            Distance::Pxb => "PXB",
            Distance::Phb => "PHB",
            Distance::Node => "NODE",
            Distance::Sys => "SYS",
        }
    }

    /// 1 (PIX) to 5 (SYS), for the Prometheus output.
    pub fn level(self) -> u8 {
        self as u8 + 1
    }
}

impl fmt::Display for Distance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether the bridge at @chain[..=index] is a switch's downstream port.
/// `port_type` answers from config space where it was readable; otherwise
/// the tree's shape answers: below a root port (index 1), switch upstream
/// and downstream ports alternate, so downstream ports sit at odd indexes
/// from 3 on.
pub fn downstream_by_shape(index: usize) -> bool {
    index >= 3 && index % 2 == 1
}

/// The generation of a Broadcom PEX switch port at @level of the two
/// levels such a switch shows in sysfs (0 upper, 1 lower), from its ids:
/// NCCL's getBcmGen (graph/topo.cc, 2.28.9 and 2.30.7), which reads them
/// as one 64-bit id, vendor, device, subsystem vendor, subsystem device:
/// Gen4 `0x1000c0101000a???` at either level, Gen5 `0x1000c03010000???`
/// (upper) and `0x1000c03010001???` (lower).
pub fn bcm_generation(ids: [u16; 4], level: u64) -> Option<u8> {
    let id = ids
        .iter()
        .fold(0u64, |acc, part| (acc << 16) | u64::from(*part));
    if id & 0xffff_ffff_ffff_f000 == 0x1000_c010_1000_a000 {
        Some(4)
    } else if id & 0xffff_ffff_ffff_f000 == 0x1000_c030_1000_0000 | (level * 0x1000) {
        Some(5)
    } else {
        None
    }
}

/// Whether NCCL finds the device at @address in sysfs at all. It looks a
/// device up as `/sys/class/pci_bus/<the bus id's first 7 characters>/../../
/// <its first 12>` (graph/xml.cc, getPciPath: BUSID_REDUCED_SIZE,
/// BUSID_SIZE, NCCL 2.28.9 and 2.30.7), so a device of a PCI domain of
/// five or more digits (an Intel VMD domain, 10000 and up, whose buses the
/// kernel names `10000:e1`) is never found, and NCCL attaches it to CPU -1
/// with nothing between ("No information on /sys, attach GPU to unknown
/// CPU", ncclTopoGetXmlFromSys): SYS from a GPU on a known CPU.
pub fn nccl_finds(address: &str) -> bool {
    address.find(':') == Some(4)
}

/// The distance NCCL sees between @a and @b where it finds one of them
/// nowhere (nccl_finds): both on CPU -1 meet there (PHB); one on CPU -1
/// and one placed meet there only if the placed one's NUMA node is unset
/// too (NCCL's `cpu` of numaid -1: NODE, as two devices of one CPU on
/// different root buses), else SYS.
pub fn unplaced_distance(a: &PciDevice, b: &PciDevice) -> Distance {
    match (nccl_finds(&a.address), nccl_finds(&b.address)) {
        (false, false) => Distance::Phb,
        (true, false) if a.numa_node.is_none() => Distance::Node,
        (false, true) if b.numa_node.is_none() => Distance::Node,
        _ => Distance::Sys,
    }
}

/// The distance between @a and @b; `is_downstream(address, index)` tells
/// switch downstream ports from other bridges; `merged_into(upstream
/// port)` names the upstream port of the switch NCCL makes one with it
/// (a Broadcom PEX switch's lower level: NCCL's
/// ncclTopoFlattenBcmSwitches), None for most switches.
pub fn distance(
    a: &PciDevice,
    b: &PciDevice,
    is_downstream: &dyn Fn(&str, usize) -> bool,
    merged_into: &dyn Fn(&str) -> Option<String>,
) -> Distance {
    if a.root() != b.root() {
        // NCCL's CPUs are the NUMA ids the kernel prints, -1 one of them
        // (graph/xml.cc, ncclTopoGetXmlFromSys: a `cpu` per numa_node
        // text), so a node the firmware left unset (-1) is another CPU
        // than a known one: SYS. Two unset are one CPU, as are two equal
        // (docs/diagnostics.md, "Distance"; the oracle: tests/nccl_oracle.rs).
        return if a.numa_node == b.numa_node {
            Distance::Node
        } else {
            Distance::Sys
        };
    }
    let common = common_depth(a, b);
    if common <= 1 {
        // They meet only at the root bus: the path crosses the host bridge.
        return Distance::Phb;
    }
    // The bridges on the path: where they meet, and those below it on each
    // side (the devices themselves excluded). A switch is one hop however
    // many of its ports the path uses: a downstream port stands for its
    // switch's upstream port, its parent.
    let meet = common - 1;
    let mut switches = BTreeSet::new();
    let mut add = |chain: &[String], index: usize| {
        let id = if index > 0 && is_downstream(&chain[index], index) {
            &chain[index - 1]
        } else {
            &chain[index]
        };
        switches.insert(merged_into(id).unwrap_or_else(|| id.clone()));
    };
    add(&a.chain, meet);
    for chain in [&a.chain, &b.chain] {
        for index in common..chain.len() - 1 {
            add(chain, index);
        }
    }
    if switches.len() <= 1 {
        Distance::Pix
    } else {
        Distance::Pxb
    }
}

/// How many directories of their places @a and @b share, from the root
/// bus down (1: they meet only at the root bus).
fn common_depth(a: &PciDevice, b: &PciDevice) -> usize {
    a.chain
        .iter()
        .zip(&b.chain)
        .take_while(|(x, y)| x == y)
        .count()
}

/// The bridges between @a and @b (where they meet and below), the ones
/// whose ACS settings decide whether peer-to-peer traffic goes straight
/// across; None when they meet only in the root complex, where no bridge
/// config space decides it.
pub fn bridges_between(a: &PciDevice, b: &PciDevice) -> Vec<String> {
    if a.root() != b.root() {
        return Vec::new();
    }
    let common = common_depth(a, b);
    let mut out = Vec::new();
    if common >= 2 {
        out.push(a.chain[common - 1].clone());
    }
    for chain in [&a.chain, &b.chain] {
        // the root port of each side counts where they meet at the root bus
        let from = if common >= 2 { common } else { 1 };
        for name in &chain[from..chain.len() - 1] {
            if !out.contains(name) {
                out.push(name.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn dev(path: &str, numa: Option<u32>) -> PciDevice {
        let chain: Vec<String> = path.split('/').map(str::to_owned).collect();
        PciDevice {
            address: chain.last().unwrap().clone(),
            chain,
            vendor: 0,
            device: 0,
            class: 0,
            numa_node: numa,
            bars: vec![],
            dir: PathBuf::new(),
        }
    }

    fn d(a: &PciDevice, b: &PciDevice) -> Distance {
        distance(a, b, &|_, i| downstream_by_shape(i), &|_| None)
    }

    #[test]
    fn one_switch_is_pix() {
        // root port 00:01.0, switch upstream 01:00.0, downstream 02:00.0/02:01.0
        let gpu = dev(
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
            Some(0),
        );
        let nic = dev(
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
            Some(0),
        );
        assert_eq!(d(&gpu, &nic), Distance::Pix);
        assert_eq!(
            bridges_between(&gpu, &nic),
            ["0000:01:00.0", "0000:02:00.0", "0000:02:01.0"]
        );
    }

    #[test]
    fn two_levels_of_switches_are_pxb() {
        let gpu = dev(
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:00.0/0000:05:00.0",
            Some(0),
        );
        let nic = dev(
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:06:00.0",
            Some(0),
        );
        assert_eq!(d(&gpu, &nic), Distance::Pxb);
    }

    #[test]
    fn different_root_ports_are_phb_and_different_roots_node_or_sys() {
        let gpu = dev("pci0000:00/0000:00:01.0/0000:01:00.0", Some(0));
        let nic = dev("pci0000:00/0000:00:02.0/0000:02:00.0", Some(0));
        assert_eq!(d(&gpu, &nic), Distance::Phb);
        assert_eq!(
            bridges_between(&gpu, &nic),
            ["0000:00:01.0", "0000:00:02.0"]
        );
        let far = dev("pci0000:80/0000:80:01.0/0000:81:00.0", Some(1));
        assert_eq!(d(&gpu, &far), Distance::Sys);
        let same_node = dev("pci0000:40/0000:40:01.0/0000:41:00.0", Some(0));
        assert_eq!(d(&gpu, &same_node), Distance::Node);
        // NUMA node -1 (unset) is NCCL's CPU "-1": another than node 0.
        let unset = dev("pci0000:40/0000:40:01.0/0000:41:00.0", None);
        assert_eq!(d(&gpu, &unset), Distance::Sys);
        let unset_too = dev("pci0000:80/0000:80:01.0/0000:81:00.0", None);
        assert_eq!(d(&unset, &unset_too), Distance::Node);
        assert!(bridges_between(&gpu, &far).is_empty());
    }

    #[test]
    fn a_flat_bus_is_phb() {
        // a cloud VM: everything on the root bus (the H100 host probed)
        let gpu = dev("pci0000:00/0000:00:06.0", None);
        let nic = dev("pci0000:00/0000:00:07.0", None);
        assert_eq!(d(&gpu, &nic), Distance::Phb);
    }

    #[test]
    fn config_space_port_types_override_the_shape() {
        // a switch whose downstream ports the shape rule would misplace
        let gpu = dev("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", Some(0));
        let nic = dev("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.1", Some(0));
        // both right below 01:00.0: one bridge
        assert_eq!(
            distance(&gpu, &nic, &|_, _| false, &|_| None),
            Distance::Pix
        );
    }

    #[test]
    fn a_broadcom_switchs_two_levels_are_one_switch() {
        // below one upper switch (01:00.0), two lower ones (03:00.0, 06:00.0)
        let up = "pci0000:00/0000:00:01.0/0000:01:00.0";
        let gpu = dev(
            &format!("{up}/0000:02:00.0/0000:03:00.0/0000:04:00.0/0000:05:00.0"),
            Some(0),
        );
        let nic = dev(
            &format!("{up}/0000:02:01.0/0000:06:00.0/0000:07:00.0/0000:08:00.0"),
            Some(0),
        );
        let shape = |_: &str, i: usize| downstream_by_shape(i);
        assert_eq!(distance(&gpu, &nic, &shape, &|_| None), Distance::Pxb);
        let merged = |usp: &str| (usp != "0000:01:00.0").then(|| "0000:01:00.0".to_owned());
        assert_eq!(distance(&gpu, &nic, &shape, &merged), Distance::Pix);
        // NCCL's ids (graph/topo.cc, getBcmGen)
        assert_eq!(bcm_generation([0x1000, 0xc030, 0x1000, 0x0001], 0), Some(5));
        assert_eq!(bcm_generation([0x1000, 0xc030, 0x1000, 0x1001], 1), Some(5));
        assert_eq!(bcm_generation([0x1000, 0xc030, 0x1000, 0x1001], 0), None);
        assert_eq!(bcm_generation([0x1000, 0xc010, 0x1000, 0xa064], 1), Some(4));
        assert_eq!(bcm_generation([0x10b5, 0xc010, 0x10b5, 0xa064], 0), None);
    }
}
