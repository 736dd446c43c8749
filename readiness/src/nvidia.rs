//! The NVIDIA driver and GPUs: which kernel module flavour is loaded
//! (`/proc/driver/nvidia/version`), whether it drives each GPU, and each
//! GPU's BAR1 (docs/diagnostics.md, "DMA-BUF").

use crate::host::{Host, Unreadable};
use crate::pci::PciDevice;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flavour {
    /// "NVIDIA UNIX Open Kernel Module"
    Open,
    /// The proprietary module ("NVIDIA UNIX x86_64 Kernel Module")
    Proprietary,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Driver {
    pub flavour: Flavour,
    /// `580.159.04`
    pub version: String,
}

impl Driver {
    /// The major version (`580`).
    pub fn major(&self) -> Option<u32> {
        self.version.split('.').next()?.parse().ok()
    }
}

/// The loaded driver, None when `/proc/driver/nvidia/version` is absent
/// (not loaded), an error when it cannot be understood.
pub fn driver(host: &Host) -> Result<Option<Driver>, Unreadable> {
    let path = host.proc_path("driver/nvidia/version");
    if !host.exists(&path) {
        return Ok(None);
    }
    let text = host.text(&path)?;
    parse_version(&text).map(Some).ok_or_else(|| {
        Unreadable::new(
            &host.shown(&path),
            "no `NVRM version:` line with a driver version",
        )
    })
}

/// `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (...)`
pub fn parse_version(text: &str) -> Option<Driver> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let flavour = if line.contains("Open Kernel Module") {
        Flavour::Open
    } else if line.contains("Kernel Module") {
        Flavour::Proprietary
    } else {
        return None;
    };
    let version = line.split_whitespace().find(|w| {
        w.contains('.')
            && w.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    })?;
    Some(Driver {
        flavour,
        version: version.to_owned(),
    })
}

/// Whether the NVIDIA driver drives @gpu (its sysfs `driver` link names
/// `nvidia`). Under the open kernel module this also means Turing or newer:
/// the open module refuses older GPUs at probe ("does not include the
/// required GPU System Processor (GSP)"), and no published rule maps PCI
/// device ids to architectures (docs/diagnostics.md, "DMA-BUF").
pub fn bound_to_nvidia(host: &Host, gpu: &PciDevice) -> bool {
    driver_of(host, gpu).as_deref() == Some("nvidia")
}

/// The driver that drives @gpu (its sysfs `driver` link's name), if any.
pub fn driver_of(host: &Host, gpu: &PciDevice) -> Option<String> {
    host.link_target(&gpu.dir.join("driver"))
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
}

/// The register line of NVIDIA's BAR @nv_index: NVIDIA numbers BARs by
/// BAR, PCI by register, and a 64-bit BAR takes two registers
/// (nv_bar_index_to_os_bar_index, kernel-open/common/inc/nv-linux.h, 580
/// and 595: it adds 2 for every earlier BAR whose flags have
/// PCI_BASE_ADDRESS_MEM_TYPE_64, else 1).
pub fn os_bar_index(gpu: &PciDevice, nv_index: usize) -> usize {
    (0..nv_index).fold(0, |os, _| os + if gpu.bar_is_64bit(os) { 2 } else { 1 })
}

/// BAR1, the window through which peers reach GPU memory: Ok(None) where
/// it has no address (unassigned), Err where the resource file could not
/// be read or has too few lines.
pub fn bar1(gpu: &PciDevice) -> Result<Option<u64>, String> {
    if gpu.bars.is_empty() {
        return Err("BAR1 cannot be told: the device's resource file could not be read".to_owned());
    }
    let line = os_bar_index(gpu, 1);
    if gpu.bars.len() <= line {
        return Err(format!(
            "BAR1 cannot be told: the resource file has {} lines, BAR1 is on line {line}",
            gpu.bars.len()
        ));
    }
    Ok(gpu.bar_size(line))
}

/// NVIDIA's own gate on GPUDirect RDMA mappings, `NVreg_GrdmaPciTopoCheckOverride`
/// as the loaded driver lists it in `/proc/driver/nvidia/params`
/// (`GrdmaPciTopoCheckOverride: N`). nv_grdma_pci_topology_supported
/// (kernel-open/nvidia/nv-pci.c, 580.142 and 595.45.04; nv-dmabuf.c
/// refuses the attach with "NVRM: dma-buf attach failed: PCI topology not
/// supported for dma-buf"): a coherent (C2C) platform passes; 1 allows and
/// 2 denies every peer; else a passthrough VM passes, and on a chipset the
/// driver flags NV_FLAG_PCI_P2P_UNSUPPORTED_CHIPSET only a peer that shares
/// a PCI switch with the GPU passes. Which chipsets it flags is decided in
/// the driver's resource manager, not in kernel-open: the check cannot
/// see it (docs/readiness.md, "NVIDIA's PCI topology gate").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyGate {
    /// 0, the driver's own check.
    Default,
    /// 1: every peer allowed.
    Allow,
    /// 2: every peer denied.
    Deny,
}

/// The gate's setting, None where the driver does not list it (before
/// the option existed, or no driver loaded).
pub fn topology_gate(host: &Host) -> Option<TopologyGate> {
    let text = host.text(&host.proc_path("driver/nvidia/params")).ok()?;
    let value = text.lines().find_map(|l| {
        l.strip_prefix("GrdmaPciTopoCheckOverride:")
            .map(|v| v.trim().to_owned())
    })?;
    Some(match value.as_str() {
        "1" => TopologyGate::Allow,
        "2" => TopologyGate::Deny,
        _ => TopologyGate::Default,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_module_of_the_probed_host() {
        let d = parse_version(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \nGCC version:  gcc version 15.3.0 (GCC) \n",
        )
        .unwrap();
        assert_eq!(d.flavour, Flavour::Open);
        assert_eq!(d.version, "580.159.04");
        assert_eq!(d.major(), Some(580));
    }

    #[test]
    fn the_proprietary_module() {
        let d = parse_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul 16 22:54:36 UTC 2025\n").unwrap();
        assert_eq!(d.flavour, Flavour::Proprietary);
        assert_eq!(d.version, "535.261.03");
    }

    #[test]
    fn nonsense_is_not_a_driver() {
        assert_eq!(parse_version(""), None);
        assert_eq!(parse_version("NVRM version: something else"), None);
        assert_eq!(
            parse_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64 no version"),
            None
        );
    }
}
