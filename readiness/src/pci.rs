//! PCI devices as sysfs shows them (Linux Documentation/PCI/sysfs-pci.rst,
//! Documentation/ABI/testing/sysfs-bus-pci): one symlink per function in
//! `/sys/bus/pci/devices/`, pointing at its place in the device tree
//! (`/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0`), whose directories
//! are the bridges above it; `vendor`, `device`, `class` (hex), `numa_node`
//! (-1: none), `resource` (one `start end flags` line per BAR).

use crate::host::{Host, Unreadable};
use std::path::PathBuf;

/// NVIDIA's PCI vendor id (the PCI-SIG's assignment, as pciutils' pci.ids
/// and Linux include/linux/pci_ids.h name it). RDMA devices are not told
/// apart by vendor (see rdma.rs).
pub const VENDOR_NVIDIA: u16 = 0x10de;

/// A function's place and identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciDevice {
    /// `0000:03:00.0`
    pub address: String,
    /// The directory components from the root bus down to the device
    /// itself: `["pci0000:00", "0000:00:01.0", "0000:01:00.0"]`.
    pub chain: Vec<String>,
    pub vendor: u16,
    pub device: u16,
    /// Class, subclass and programming interface (`0x030200`).
    pub class: u32,
    /// None where the kernel reports -1 (no NUMA information).
    pub numa_node: Option<u32>,
    /// The `resource` lines: (start, end, flags) by line, (0, 0, 0) where
    /// unused. Lines 0-5 are the BAR registers: a 64-bit BAR takes two,
    /// its line and an empty one after it.
    pub bars: Vec<(u64, u64, u64)>,
    /// The device's sysfs directory (for config space, driver, iommu_group).
    pub dir: PathBuf,
}

impl PciDevice {
    /// PCI-to-PCI bridge (class 0x0604: root ports and switch ports).
    pub fn is_bridge(&self) -> bool {
        self.class >> 8 == 0x0604
    }

    /// NVIDIA display controller (class 0x03xx: VGA 0x0300, 3D 0x0302).
    pub fn is_nvidia_gpu(&self) -> bool {
        self.vendor == VENDOR_NVIDIA && self.class >> 16 == 0x03
    }

    /// Size of BAR @index in bytes, if it is in use.
    pub fn bar_size(&self, index: usize) -> Option<u64> {
        let (start, end, _) = *self.bars.get(index)?;
        (end > start).then(|| end - start + 1)
    }

    /// Whether the BAR at register line @index is 64-bit: the BAR's type
    /// bits, which the kernel keeps in the resource's flags
    /// (PCI_BASE_ADDRESS_MEM_TYPE_64, 0x4: drivers/pci/probe.c,
    /// decode_bar), or IORESOURCE_MEM_64 (0x00100000).
    pub fn bar_is_64bit(&self, index: usize) -> bool {
        self.bars
            .get(index)
            .is_some_and(|(_, _, flags)| flags & 0x4 != 0 || flags & 0x0010_0000 != 0)
    }

    /// The root bus (`pci0000:00`): devices under different ones meet only
    /// in the CPU's host bridges or beyond.
    pub fn root(&self) -> &str {
        &self.chain[0]
    }
}

/// Every PCI function, sorted by address, and what could not be read.
pub fn devices(host: &Host) -> (Vec<PciDevice>, Vec<Unreadable>) {
    let bus = host.sys_path("bus/pci/devices");
    let mut found = Vec::new();
    let mut problems = Vec::new();
    let names = match host.names(&bus) {
        Ok(names) => names,
        Err(e) => return (found, vec![e]),
    };
    for name in names {
        match device(host, &name, &mut problems) {
            Ok(d) => found.push(d),
            Err(e) => problems.push(e),
        }
    }
    (found, problems)
}

/// One function; an attribute that decides only part of its facts (NUMA
/// node, BARs) and cannot be read adds to @problems instead of dropping
/// the device, so the report says so rather than guess from a default.
fn device(
    host: &Host,
    address: &str,
    problems: &mut Vec<Unreadable>,
) -> Result<PciDevice, Unreadable> {
    let link = host.sys_path("bus/pci/devices").join(address);
    let dir = host.link_target(&link)?;
    let devices_root = host.sys_path("devices");
    let relative = dir.strip_prefix(&devices_root).map_err(|_| {
        Unreadable::new(
            &host.shown(&link),
            format!("points outside {}", host.shown(&devices_root).display()),
        )
    })?;
    // Keep the root bus and the functions; skip anything else the kernel
    // puts between them (e.g. a VMD domain's own directories).
    let components: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let chain = place(&components);
    if chain.len() < 2 || chain.last().map(String::as_str) != Some(address) {
        return Err(Unreadable::new(
            &host.shown(&link),
            format!(
                "unexpected place in the device tree: {}",
                host.shown(&dir).display()
            ),
        ));
    }
    let vendor = host.hex(&dir.join("vendor"))? as u16;
    let device = host.hex(&dir.join("device"))? as u16;
    let class = host.hex(&dir.join("class"))? as u32;
    let numa_node = numa_node(host, &dir, problems);
    let bars = match host.text(&dir.join("resource")) {
        Ok(text) => parse_resource(&text),
        Err(e) => {
            problems.push(e);
            Vec::new()
        }
    };
    Ok(PciDevice {
        address: address.to_owned(),
        chain,
        vendor,
        device,
        class,
        numa_node,
        bars,
        dir,
    })
}

/// `numa_node`: -1 (or no such file, a kernel without CONFIG_NUMA) means
/// none; anything else that is not a node number is a problem, never
/// quietly "none", which would turn SYS into NODE.
fn numa_node(host: &Host, dir: &std::path::Path, problems: &mut Vec<Unreadable>) -> Option<u32> {
    let path = dir.join("numa_node");
    if !host.exists(&path) {
        return None;
    }
    let text = match host.text(&path) {
        Ok(t) => t,
        Err(e) => {
            problems.push(e);
            return None;
        }
    };
    match text.trim().parse::<i64>() {
        Ok(-1) => None,
        Ok(n) if n >= 0 => u32::try_from(n).ok(),
        _ => {
            problems.push(Unreadable::new(
                &host.shown(&path),
                format!("`{}` is not a NUMA node number", text.trim()),
            ));
            None
        }
    }
}

/// `dddd:bb:dd.f`, the domain 4 hex digits or more (an Intel VMD domain
/// is `10000` and up).
pub fn is_address(name: &str) -> bool {
    let mut parts = name.split(':');
    let (Some(domain), Some(bus), Some(devfn), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|c| c.is_ascii_hexdigit());
    let Some((dev, func)) = devfn.split_once('.') else {
        return false;
    };
    domain.len() >= 4
        && domain.bytes().all(|c| c.is_ascii_hexdigit())
        && hex(bus, 2)
        && hex(dev, 2)
        && func.len() == 1
        && func.bytes().all(|c| (b'0'..=b'7').contains(&c))
}

/// A device's place from its directory components under /sys/devices: the
/// last root bus on the way (`pciDDDD:BB`; a VMD controller opens a bus of
/// its own below another) and the functions below it, as NCCL reads the
/// tree (it stops going up at the first component that is not a PCI
/// address; docs/diagnostics.md, "Distance"). Other directories are skipped.
pub fn place(components: &[String]) -> Vec<String> {
    let root = components
        .iter()
        .rposition(|c| c.starts_with("pci") && !is_address(c))
        .unwrap_or(0);
    components[root..]
        .iter()
        .enumerate()
        .filter(|(i, c)| *i == 0 || is_address(c))
        .map(|(_, c)| c.clone())
        .collect()
}

/// sysfs `resource`: a line per resource, `0x<start> 0x<end> 0x<flags>`
/// (drivers/pci/pci-sysfs.c, resource_show); unparsable lines count as
/// unused.
pub fn parse_resource(text: &str) -> Vec<(u64, u64, u64)> {
    text.lines()
        .map(|line| {
            let mut fields = line
                .split_whitespace()
                .map(|f| u64::from_str_radix(f.trim_start_matches("0x"), 16).ok());
            match (
                fields.next().flatten(),
                fields.next().flatten(),
                fields.next().flatten(),
            ) {
                (Some(start), Some(end), flags) => (start, end, flags.unwrap_or(0)),
                _ => (0, 0, 0),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_recognised() {
        assert!(is_address("0000:00:06.0"));
        assert!(is_address("10000:01:00.0")); // a VMD domain
        assert!(!is_address("0000:00:06.8"));
        assert!(!is_address("0000:0:06.0"));
        assert!(!is_address("pci0000:00"));
        assert!(!is_address("virtio2"));
        assert!(!is_address("0000:00:06.0:1"));
    }

    #[test]
    fn a_vmd_domain_is_a_root_bus_of_its_own() {
        let c = |p: &str| p.split('/').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            place(&c(
                "pci0000:00/0000:00:0e.0/pci10000:00/10000:00:02.0/10000:01:00.0"
            )),
            c("pci10000:00/10000:00:02.0/10000:01:00.0")
        );
        assert_eq!(
            place(&c(
                "pci0000:00/0000:00:01.0/0000:01:00.0/virtfn0/0000:02:00.0"
            )),
            c("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0")
        );
    }

    /// The resource file of the lent H100 (readiness/tests/real/): 13
    /// lines; BAR0 16 MiB 64-bit on lines 0-1, BAR1 128 GiB on lines 2-3,
    /// BAR2 32 MiB on lines 4-5, the ROM on line 6, SR-IOV lines after.
    #[test]
    fn resource_lines_give_bar_sizes() {
        let text = "0x0000000000000000 0x0000000000ffffff 0x0000000000140204\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                    0x0000100000000000 0x0000101fffffffff 0x000000000014220c\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                    0x0000102000000000 0x0000102001ffffff 0x000000000014220c\n";
        let d = PciDevice {
            address: "0000:00:06.0".into(),
            chain: vec!["pci0000:00".into(), "0000:00:06.0".into()],
            vendor: VENDOR_NVIDIA,
            device: 0x2330,
            class: 0x030200,
            numa_node: None,
            bars: parse_resource(text),
            dir: PathBuf::new(),
        };
        assert_eq!(d.bar_size(0), Some(16 << 20));
        assert_eq!(d.bar_size(1), None);
        assert_eq!(d.bar_size(2), Some(128 << 30));
        assert_eq!(d.bar_size(4), Some(32 << 20));
        assert!(d.bar_is_64bit(0) && d.bar_is_64bit(2) && !d.bar_is_64bit(1));
        assert!(d.is_nvidia_gpu());
        assert!(!d.is_bridge());
    }
}
