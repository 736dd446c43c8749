//! PCI configuration space as `/sys/bus/pci/devices/*/config` returns it:
//! the capability list, the PCI Express port type and the ACS extended
//! capability. Offsets and bits: Linux include/uapi/linux/pci_regs.h and
//! pciutils lib/header.h (docs/diagnostics.md, "ACS").

/// Status register; bit 4: the capability list exists.
const STATUS: usize = 0x06;
const STATUS_CAP_LIST: u16 = 0x10;
/// First capability's offset.
const CAPABILITY_LIST: usize = 0x34;
/// PCI Express capability; its flags word (offset 2) holds the
/// device/port type in bits 7:4.
const CAP_ID_EXP: u8 = 0x10;
/// Extended capabilities start here (PCIe only, 4096-byte space).
const EXT_START: usize = 0x100;
/// Access Control Services extended capability; its capability and
/// control registers are 16 bits at offsets 4 and 6.
pub const EXT_CAP_ID_ACS: u16 = 0x000d;
const ACS_CAP: usize = 0x04;
const ACS_CTRL: usize = 0x06;

/// ACS control bits (pci_regs.h PCI_ACS_*).
pub const ACS_SV: u16 = 0x0001;
pub const ACS_TB: u16 = 0x0002;
pub const ACS_RR: u16 = 0x0004;
pub const ACS_CR: u16 = 0x0008;
pub const ACS_UF: u16 = 0x0010;
pub const ACS_EC: u16 = 0x0020;
pub const ACS_DT: u16 = 0x0040;

/// Unprivileged readers of sysfs `config` get only the first 64 bytes
/// (drivers/pci/pci-sysfs.c, pci_read_config).
pub const UNPRIVILEGED_BYTES: usize = 64;

/// PCI Express device/port type (pci_regs.h PCI_EXP_TYPE_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortType {
    Endpoint,
    LegacyEndpoint,
    RootPort,
    UpstreamPort,
    DownstreamPort,
    PcieToPciBridge,
    PciToPcieBridge,
    RootComplexEndpoint,
    RootComplexEventCollector,
    Other(u8),
}

impl PortType {
    fn from_bits(bits: u8) -> Self {
        match bits {
            0x0 => PortType::Endpoint,
            0x1 => PortType::LegacyEndpoint,
            0x4 => PortType::RootPort,
            0x5 => PortType::UpstreamPort,
            0x6 => PortType::DownstreamPort,
            0x7 => PortType::PcieToPciBridge,
            0x8 => PortType::PciToPcieBridge,
            0x9 => PortType::RootComplexEndpoint,
            0xa => PortType::RootComplexEventCollector,
            other => PortType::Other(other),
        }
    }
}

/// An ACS capability's registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acs {
    pub capability: u16,
    pub control: u16,
}

impl Acs {
    /// P2P Request Redirect or Completion Redirect enabled: peer-to-peer
    /// requests between the ports below go up to the root complex instead
    /// of straight across (what breaks or slows GPUDirect RDMA).
    pub fn redirects(&self) -> bool {
        self.control & (ACS_RR | ACS_CR) != 0
    }

    /// Names of the enabled control bits, as lspci prints them (ACSCtl).
    pub fn enabled(&self) -> Vec<&'static str> {
        [
            (ACS_SV, "SrcValid"),
            (ACS_TB, "TransBlk"),
            (ACS_RR, "ReqRedir"),
            (ACS_CR, "CmpltRedir"),
            (ACS_UF, "UpstreamFwd"),
            (ACS_EC, "EgressCtrl"),
            (ACS_DT, "DirectTrans"),
        ]
        .into_iter()
        .filter(|(bit, _)| self.control & bit != 0)
        .map(|(_, name)| name)
        .collect()
    }
}

/// What a device's config space says about ACS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcsState {
    /// Only the first 64 bytes were readable: the reader is not root.
    NeedsRoot,
    /// No extended configuration space (conventional PCI, or a platform
    /// without extended config access).
    NoExtendedSpace,
    /// The capability list holds no ACS capability.
    Absent,
    Present(Acs),
    /// The list is corrupt (a loop, an offset out of range).
    Malformed,
}

pub struct ConfigSpace<'a> {
    bytes: &'a [u8],
}

impl<'a> ConfigSpace<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        ConfigSpace { bytes }
    }

    fn u16_at(&self, offset: usize) -> Option<u16> {
        let b = self.bytes.get(offset..offset + 2)?;
        Some(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32_at(&self, offset: usize) -> Option<u32> {
        let b = self.bytes.get(offset..offset + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The offset of standard capability @id, walking the list from 0x34
    /// (at most 48 entries, as the kernel's PCI_FIND_CAP_TTL).
    pub fn capability(&self, id: u8) -> Option<usize> {
        if self.u16_at(STATUS)? & STATUS_CAP_LIST == 0 {
            return None;
        }
        let mut offset = usize::from(*self.bytes.get(CAPABILITY_LIST)? & !3);
        for _ in 0..48 {
            if offset < 0x40 {
                return None;
            }
            let cap_id = *self.bytes.get(offset)?;
            if cap_id == id {
                return Some(offset);
            }
            offset = usize::from(*self.bytes.get(offset + 1)? & !3);
        }
        None
    }

    /// The device/port type from the PCI Express capability.
    pub fn port_type(&self) -> Option<PortType> {
        let cap = self.capability(CAP_ID_EXP)?;
        let flags = self.u16_at(cap + 2)?;
        Some(PortType::from_bits(((flags >> 4) & 0xf) as u8))
    }

    /// Walks the extended capabilities from 0x100.
    fn ext_capability(&self, id: u16) -> Result<Option<usize>, ()> {
        let mut offset = EXT_START;
        // 4096 bytes hold at most (4096 - 256) / 8 capabilities.
        for _ in 0..480 {
            let header = self.u32_at(offset).ok_or(())?;
            if header == 0 || header == 0xffff_ffff {
                return Ok(None);
            }
            if (header & 0xffff) as u16 == id {
                return Ok(Some(offset));
            }
            let next = ((header >> 20) & 0xffc) as usize;
            if next == 0 {
                return Ok(None);
            }
            if next < EXT_START {
                return Err(());
            }
            offset = next;
        }
        Err(())
    }

    pub fn acs(&self) -> AcsState {
        if self.bytes.len() <= UNPRIVILEGED_BYTES {
            return AcsState::NeedsRoot;
        }
        if self.bytes.len() <= EXT_START {
            return AcsState::NoExtendedSpace;
        }
        match self.ext_capability(EXT_CAP_ID_ACS) {
            Ok(Some(at)) => match (self.u16_at(at + ACS_CAP), self.u16_at(at + ACS_CTRL)) {
                (Some(capability), Some(control)) => AcsState::Present(Acs {
                    capability,
                    control,
                }),
                _ => AcsState::Malformed,
            },
            Ok(None) => AcsState::Absent,
            Err(()) => AcsState::Malformed,
        }
    }
}

/// Test config spaces, laid out byte by byte as the PCI and PCIe
/// specifications place the registers (shared with the tree builder of the
/// integration tests through `testing`).
pub mod layout {
    /// A 4096-byte config space of a PCIe bridge of @port_type (4 root,
    /// 5 upstream, 6 downstream) with a PCIe capability at 0x40 and, when
    /// @acs is Some((cap, ctl)), an ACS extended capability at 0x100
    /// (preceded by nothing, followed by nothing).
    pub fn bridge(vendor: u16, device: u16, port_type: u8, acs: Option<(u16, u16)>) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        b[0..2].copy_from_slice(&vendor.to_le_bytes());
        b[2..4].copy_from_slice(&device.to_le_bytes());
        b[0x06] = 0x10; // status: capability list
        b[0x0a] = 0x04; // class: PCI-to-PCI bridge (0x0604)
        b[0x0b] = 0x06;
        b[0x0e] = 0x01; // header type 1
        b[0x34] = 0x40;
        b[0x40] = 0x10; // PCI Express capability, last in the list
        b[0x41] = 0x00;
        b[0x42] = 0x02 | (port_type << 4); // version 2, port type
        if let Some((cap, ctl)) = acs {
            // id 0x000d, version 1, next 0
            b[0x100..0x104].copy_from_slice(&(0x000d_u32 | 1 << 16).to_le_bytes());
            b[0x104..0x106].copy_from_slice(&cap.to_le_bytes());
            b[0x106..0x108].copy_from_slice(&ctl.to_le_bytes());
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_downstream_port_with_redirect_enabled() {
        let bytes = layout::bridge(
            0x10b5,
            0x9797,
            6,
            Some((0x005f, ACS_SV | ACS_RR | ACS_CR | ACS_UF)),
        );
        let c = ConfigSpace::new(&bytes);
        assert_eq!(c.port_type(), Some(PortType::DownstreamPort));
        let AcsState::Present(acs) = c.acs() else {
            panic!("{:?}", c.acs())
        };
        assert!(acs.redirects());
        assert_eq!(
            acs.enabled(),
            ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]
        );
    }

    #[test]
    fn source_validation_alone_redirects_nothing() {
        let bytes = layout::bridge(0x8086, 0x1234, 4, Some((0x001f, ACS_SV)));
        let AcsState::Present(acs) = ConfigSpace::new(&bytes).acs() else {
            panic!()
        };
        assert!(!acs.redirects());
    }

    #[test]
    fn the_acs_capability_is_found_behind_others() {
        let mut bytes = layout::bridge(0x10b5, 0x9797, 6, None);
        // AER (id 1) at 0x100 pointing at ACS at 0x148
        bytes[0x100..0x104].copy_from_slice(&(0x0001_u32 | 1 << 16 | 0x148 << 20).to_le_bytes());
        bytes[0x148..0x14c].copy_from_slice(&(0x000d_u32 | 1 << 16).to_le_bytes());
        bytes[0x14e..0x150].copy_from_slice(&(ACS_RR).to_le_bytes());
        assert_eq!(
            ConfigSpace::new(&bytes).acs(),
            AcsState::Present(Acs {
                capability: 0,
                control: ACS_RR
            })
        );
    }

    #[test]
    fn what_cannot_be_read_is_said() {
        let bytes = layout::bridge(0x10b5, 0x9797, 6, Some((0x5f, ACS_RR)));
        assert_eq!(ConfigSpace::new(&bytes[..64]).acs(), AcsState::NeedsRoot);
        assert_eq!(
            ConfigSpace::new(&bytes[..256]).acs(),
            AcsState::NoExtendedSpace
        );
        assert_eq!(
            ConfigSpace::new(&layout::bridge(1, 2, 6, None)).acs(),
            AcsState::Absent
        );
        // a capability pointing back into the standard space
        let mut looped = layout::bridge(1, 2, 6, None);
        looped[0x100..0x104].copy_from_slice(&(0x0001_u32 | 0x040 << 20).to_le_bytes());
        assert_eq!(ConfigSpace::new(&looped).acs(), AcsState::Malformed);
        // a list that loops on itself ends (bounded walk)
        let mut cycle = layout::bridge(1, 2, 6, None);
        cycle[0x100..0x104].copy_from_slice(&(0x0001_u32 | 0x100 << 20).to_le_bytes());
        assert_eq!(ConfigSpace::new(&cycle).acs(), AcsState::Malformed);
        assert_eq!(ConfigSpace::new(&[]).port_type(), None);
    }
}
