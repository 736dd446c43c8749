//! IOMMU translation for a device: its group's `type`
//! (Documentation/ABI/testing/sysfs-kernel-iommu_groups): `identity` is
//! passthrough, `DMA` and `DMA-FQ` translate, no group means no IOMMU in
//! the device's path.

use crate::host::{Host, Unreadable};
use crate::pci::PciDevice;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// No IOMMU group: no IOMMU translates this device's DMA.
    Off,
    /// identity: DMA addresses are physical addresses.
    Passthrough,
    /// DMA, DMA-FQ: every peer address goes through the IOMMU.
    Translating(String),
    /// blocked, unmanaged (a VFIO user) or unknown: as the kernel says.
    Other(String),
}

pub fn mode(host: &Host, device: &PciDevice) -> Result<Mode, Unreadable> {
    let group = device.dir.join("iommu_group");
    if !host.exists(&group) {
        return Ok(Mode::Off);
    }
    let group_dir = host.link_target(&group)?;
    let kind = host.text(&group_dir.join("type"))?;
    Ok(match kind.trim() {
        "identity" => Mode::Passthrough,
        "DMA" | "DMA-FQ" => Mode::Translating(kind.trim().to_owned()),
        other => Mode::Other(other.to_owned()),
    })
}
