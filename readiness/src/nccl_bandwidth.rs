//! The bandwidth of NCCL's path from a GPU to a NIC (issue 57), which
//! ncclTopoGetLocalNet weighs before the path type: among a GPU's NICs it
//! takes those of the highest path bandwidth, then of the nearest type
//! (graph/topo.cc, ncclTopoGetLocal). A path's bandwidth is its narrowest
//! link's (paths.cc, ncclTopoSetPaths), and NCCL gives each link:
//!
//! - a PCI device's link to its parent: width x speed / 80 GB/s, each the
//!   lower of the device's `max_link_width`/`max_link_speed` and its
//!   parent port's (graph/xml.cc, ncclTopoGetXmlFromSys; topo.cc,
//!   ncclTopoAddPci, speeds per lane in 100 Mb/s from kvDictPciGen); a
//!   device NCCL finds nowhere in sysfs (an Intel VMD domain's) has no
//!   speed, which NCCL reads as 8 GT/s, and width 16: 12 GB/s (PCI_BW,
//!   "PCI Gen3 x16");
//! - the link between two CPUs: topo.h's per CPU (ncclTopoGetInterCpuBw:
//!   Intel from Emerald Rapids 40, from Sapphire Rapids 22, from Skylake
//!   10, older 6; AMD 16; arm64 6), from /proc/cpuinfo's vendor, family
//!   and model as cpuid gives NCCL them; unknown where cpuinfo cannot be
//!   read or for another vendor;
//! - the NIC's link to its network: the port's rate (the kernel's
//!   `ports/<n>/rate`, `400 Gb/sec (4X NDR)`) in GB/s, summed over a merged
//!   device's functions; unknown where the file is missing.
//!
//! An unknown link limits nothing. Not modelled: the GPU's PCIe link as
//! NVML reports it (its current generation, which NCCL prefers to sysfs's
//! maximum), a merged device's wider adapter link (ncclTopoGetVNicParent),
//! and NVLink and C2C paths (the check judges those apart).

use crate::host::Host;
use crate::pci::PciDevice;

/// topo.cc's kvDictPciGen, in its order: a `link_speed` value and its
/// per-lane speed in 100 Mb/s (2.28.9 and 2.30.7 alike).
const PCI_GEN: [(&str, u32); 11] = [
    ("2.5 GT/s", 15),
    ("5 GT/s", 30),
    ("8 GT/s", 60),
    ("16 GT/s", 120),
    ("32 GT/s", 240),
    ("2.5 GT/s PCIe", 15),
    ("5.0 GT/s PCIe", 30),
    ("8.0 GT/s PCIe", 60),
    ("16.0 GT/s PCIe", 120),
    ("32.0 GT/s PCIe", 240),
    ("64.0 GT/s PCIe", 480),
];

/// The per-lane speed NCCL gives a `link_speed` value (xml.h,
/// kvConvertToInt over kvDictPciGen): the first entry the value starts
/// with; none, 8 GT/s's. A prefix, not a number: "16.0 GT/s" (no "PCIe")
/// and "64 GT/s" match nothing, as NCCL reads them from a topology file.
pub fn speed_units(value: &str) -> u32 {
    PCI_GEN
        .iter()
        .find(|(k, _)| value.starts_with(k))
        .map_or(60, |(_, v)| *v)
}

/// NCCL's bandwidth of @dev's link to its parent, in GB/s.
pub fn pci_link(host: &Host, dev: &PciDevice) -> f64 {
    let read = |name: &str| host.text(&dev.dir.join(name)).ok();
    // The parent port's (NCCL reads `../`), by the parent's path.
    let port = |name: &str| dev.dir.parent().and_then(|p| host.text(&p.join(name)).ok());
    let lower = |own: Option<String>, port: Option<String>, parse: &dyn Fn(&str) -> f64| match (
        own.map(|v| parse(&v)),
        port.map(|v| parse(&v)),
    ) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    // xml.cc, ncclTopoGetXmlFromSys: the port's `max_link_speed` string
    // where its number (sscanf "%f GT/s", unread: FLT_MAX) is lower than
    // the device's, else the device's, then kvConvertToInt of the string.
    let gt = |v: &Option<String>| -> f64 {
        v.as_deref()
            .and_then(|v| v.split_whitespace().next())
            .and_then(|g| g.parse().ok())
            .unwrap_or(f64::MAX)
    };
    let (own, up) = (read("max_link_speed"), port("max_link_speed"));
    let chosen = if gt(&up) < gt(&own) { up } else { own };
    let speed = speed_units(chosen.as_deref().map(str::trim).unwrap_or_default());
    let width = lower(read("max_link_width"), port("max_link_width"), &|v| {
        v.trim().parse().unwrap_or(0.0)
    })
    .filter(|w| *w > 0.0)
    .unwrap_or(16.0);
    width * f64::from(speed) / 80.0
}

/// A device NCCL finds nowhere in sysfs: PCI_BW.
pub const UNPLACED: f64 = 12.0;

/// ncclTopoGetInterCpuBw for this node's CPU, None where cpuinfo cannot
/// be read or NCCL's table has no value (LOC_BW: limits nothing).
pub fn inter_cpu(host: &Host) -> Option<f64> {
    let text = host.text(&host.proc_path("cpuinfo")).ok()?;
    let field = |name: &str| {
        text.lines()
            .find(|l| l.split(':').next().map(str::trim) == Some(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
    };
    if host.exists(&host.sys_path("devices/system/cpu/cpu0/regs/identification/midr_el1")) {
        return Some(6.0);
    }
    let vendor = field("vendor_id")?;
    let family: u32 = field("cpu family")?.parse().ok()?;
    let model: u32 = field("model")?.parse().ok()?;
    match vendor.as_str() {
        // topo.cc, ncclTopoAddCpu: family 6 from model 0xcf is ERP, from
        // 0x8f SRP, from 0x55 SKL; any other Intel is BDW's.
        "GenuineIntel" if family == 6 && model >= 0xcf => Some(40.0),
        "GenuineIntel" if family == 6 && model >= 0x8f => Some(22.0),
        "GenuineIntel" if family == 6 && model >= 0x55 => Some(10.0),
        "GenuineIntel" => Some(6.0),
        "AuthenticAMD" => Some(16.0),
        _ => None,
    }
}

/// The rate of @nic's port @port in GB/s (`400 Gb/sec (4X NDR)`).
pub fn port_rate(host: &Host, nic: &str, port: u32) -> Option<f64> {
    let text = host
        .text(&host.sys_path(&format!("class/infiniband/{nic}/ports/{port}/rate")))
        .ok()?;
    let gbps: f64 = text.split_whitespace().next()?.parse().ok()?;
    Some(gbps / 8.0)
}

/// Each PCI device's link bandwidth ([`pci_link`]), read once per device
/// however many GPU/NIC paths pass through it.
pub struct Links<'h> {
    host: &'h Host,
    read: std::cell::RefCell<std::collections::HashMap<String, f64>>,
}

impl<'h> Links<'h> {
    pub fn new(host: &'h Host) -> Self {
        Links {
            host,
            read: Default::default(),
        }
    }

    fn of(&self, dev: &PciDevice) -> f64 {
        if let Some(&bw) = self.read.borrow().get(&dev.address) {
            return bw;
        }
        let bw = pci_link(self.host, dev);
        self.read.borrow_mut().insert(dev.address.clone(), bw);
        bw
    }
}

/// The bandwidth of @d's path up to its CPU: the narrowest of its PCI
/// links (UNPLACED for a device NCCL finds nowhere).
pub fn to_cpu(links: &Links, devices: &[PciDevice], d: &PciDevice) -> f64 {
    if !crate::topology::nccl_finds(&d.address) {
        return UNPLACED;
    }
    d.chain
        .iter()
        .skip(1)
        .filter_map(|a| devices.iter().find(|x| &x.address == a))
        .map(|x| links.of(x))
        .fold(f64::MAX, f64::min)
}

/// The bandwidth NCCL gives the path from @gpu to @nic (the adapter's
/// function where NCCL places it) among @devices: the narrowest of each
/// side's PCI links below where they meet (@crosses: on two CPUs, joined
/// by a link of @inter_cpu), and of the NIC's network link @net.
pub fn path(
    links: &Links,
    devices: &[PciDevice],
    gpu: &PciDevice,
    nic: &PciDevice,
    crosses: bool,
    inter_cpu: Option<f64>,
    net: Option<f64>,
) -> f64 {
    let finds = |d: &PciDevice| crate::topology::nccl_finds(&d.address);
    // Where both are placed on one CPU: the chain they share, host bridge
    // first; different host bridges share nothing below the CPU.
    let shared = if crosses || !finds(gpu) || !finds(nic) {
        0
    } else {
        gpu.chain
            .iter()
            .zip(&nic.chain)
            .take_while(|(a, b)| a == b)
            .count()
    };
    let side = |d: &PciDevice| -> f64 {
        if !finds(d) {
            return UNPLACED;
        }
        d.chain
            .iter()
            .skip(shared.max(1))
            .filter_map(|a| devices.iter().find(|x| &x.address == a))
            .map(|x| links.of(x))
            .fold(f64::MAX, f64::min)
    };
    let mut bw = side(gpu).min(side(nic));
    if crosses {
        bw = bw.min(inter_cpu.unwrap_or(f64::MAX));
    }
    bw.min(net.unwrap_or(f64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_speeds_are_kv_dict_pci_gens() {
        // as kernels print them, before 5.7 and after
        assert_eq!(speed_units("32 GT/s"), 240);
        assert_eq!(speed_units("16 GT/s"), 120);
        assert_eq!(speed_units("16.0 GT/s PCIe"), 120);
        assert_eq!(speed_units("32.0 GT/s PCIe"), 240);
        assert_eq!(speed_units("64.0 GT/s PCIe"), 480);
        assert_eq!(speed_units("2.5 GT/s PCIe"), 15);
        assert_eq!(speed_units("5.0 GT/s PCIe"), 30);
        // a prefix: what NCCL does with a file's own spellings
        assert_eq!(speed_units("32 GT/s PCIe"), 240);
        assert_eq!(speed_units("16.0 GT/s"), 60);
        assert_eq!(speed_units("64 GT/s"), 60);
        // none, or one NCCL does not list: 8 GT/s's
        assert_eq!(speed_units(""), 60);
        assert_eq!(speed_units("Unknown"), 60);
        assert_eq!(16.0 * f64::from(speed_units("")) / 80.0, UNPLACED);
    }
}
