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
/// The bits the kernel's pci=disable_acs_redir clears
/// (drivers/pci/pci.c, pci_disable_acs_redir: RR | CR | EC).
pub const REDIRECT: u16 = ACS_RR | ACS_CR | ACS_EC;

/// The one-shot fix until reboot: setpci writes a `VALUE:MASK` only in
/// the bits set in MASK (pciutils setpci.8, "value:mask"; setpci.c), so
/// `0000:002c` clears RR, CR and EC and keeps every other bit, as
/// pci=disable_acs_redir does.
pub fn setpci_fix(bridge: &str, acs: &Acs) -> String {
    let names: Vec<&str> = Acs {
        capability: acs.capability,
        control: acs.redirect_bits(),
    }
    .enabled();
    format!(
        "setpci -s {bridge} ECAP_ACS+0x6.w=0000:{REDIRECT:04x} (clears {} and keeps the other ACS bits)",
        names.join(" ")
    )
}

/// Whether ACS redirection on a bridge of @port_type changes the path of
/// a pair. The kernel's own peer-to-peer rule (drivers/pci/p2pdma.c,
/// calc_map_type_and_dist) says "If ACS redirect is set on any port in
/// the path, traffic between the devices will go through the host
/// bridge", and maps two devices that share no upstream bridge through
/// the host bridge without counting the ACS bits on their way: for such a
/// pair (PHB or farther, which meets only at the root complex) redirection
/// on its root ports changes nothing. Below a switch (or on a port whose
/// type could not be read) it turns a path across the switch into one
/// through the host bridge.
pub fn redirect_matters(port_type: Option<PortType>) -> bool {
    port_type != Some(PortType::RootPort)
}

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
    /// P2P Request Redirect, Completion Redirect or Egress Control
    /// enabled: peer-to-peer requests between the ports below go up to the
    /// root complex (or are blocked) instead of straight across, what
    /// breaks or slows GPUDirect RDMA. The kernel tests the same three
    /// bits (drivers/pci/p2pdma.c, pci_bridge_has_acs_redir: RR | CR | EC).
    pub fn redirects(&self) -> bool {
        self.redirect_bits() != 0
    }

    /// The redirecting bits that are set.
    pub fn redirect_bits(&self) -> u16 {
        self.control & REDIRECT
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
    /// No extended configuration space: a conventional PCI device, which
    /// has no ACS.
    NoExtendedSpace,
    /// A PCI Express device whose config space reads 256 bytes even as
    /// root: the platform gives no extended config access (no ECAM/
    /// MMCONFIG, pci=nommconf), so ACS is there but cannot be read.
    ExtendedSpaceUnreadable,
    /// The capability list holds no ACS capability.
    Absent,
    Present(Acs),
    /// The list is corrupt (a loop, an offset out of range).
    Malformed,
}

/// Config space read by the dword: from a whole file's bytes (tests), or
/// from the node through the Host's record (only the dwords a walk needs).
pub struct ConfigSpace<'a> {
    read: Box<dyn Fn(usize) -> Option<u32> + 'a>,
    /// How many bytes this reader may read (64 unless root; 256 without
    /// extended config space).
    len: usize,
}

impl<'a> ConfigSpace<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        ConfigSpace {
            len: bytes.len(),
            read: Box::new(move |o| {
                let b = bytes.get(o..o + 4)?;
                Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }),
        }
    }

    pub fn from_reader(r: &'a crate::host::ConfigReader<'a>) -> Self {
        ConfigSpace {
            len: r.readable.min(r.size),
            read: Box::new(move |o| r.dword(o)),
        }
    }

    fn u32_at(&self, offset: usize) -> Option<u32> {
        if offset % 4 != 0 || offset + 4 > self.len {
            return None;
        }
        (self.read)(offset)
    }

    fn u16_at(&self, offset: usize) -> Option<u16> {
        if offset % 2 != 0 {
            return None;
        }
        let d = self.u32_at(offset & !3)?;
        Some((d >> ((offset & 3) * 8)) as u16)
    }

    fn u8_at(&self, offset: usize) -> Option<u8> {
        let d = self.u32_at(offset & !3)?;
        Some((d >> ((offset & 3) * 8)) as u8)
    }

    /// The offset of standard capability @id, walking the list from 0x34
    /// (at most 48 entries, as the kernel's PCI_FIND_CAP_TTL).
    pub fn capability(&self, id: u8) -> Option<usize> {
        if self.u16_at(STATUS)? & STATUS_CAP_LIST == 0 {
            return None;
        }
        let mut offset = usize::from(self.u8_at(CAPABILITY_LIST)? & !3);
        for _ in 0..48 {
            if offset < 0x40 {
                return None;
            }
            let cap_id = self.u8_at(offset)?;
            if cap_id == id {
                return Some(offset);
            }
            offset = usize::from(self.u8_at(offset + 1)? & !3);
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
        if self.len <= UNPRIVILEGED_BYTES {
            return AcsState::NeedsRoot;
        }
        if self.len <= EXT_START {
            return if self.capability(CAP_ID_EXP).is_some() {
                AcsState::ExtendedSpaceUnreadable
            } else {
                AcsState::NoExtendedSpace
            };
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
    fn egress_control_alone_redirects_as_the_kernel_counts_it() {
        let bytes = layout::bridge(0x10b5, 0x9797, 6, Some((0x007f, ACS_SV | ACS_EC)));
        let AcsState::Present(acs) = ConfigSpace::new(&bytes).acs() else {
            panic!()
        };
        assert!(acs.redirects());
        assert_eq!(acs.redirect_bits(), ACS_EC);
    }

    #[test]
    fn the_setpci_fix_clears_rr_cr_ec_and_keeps_upstream_forwarding() {
        let acs = Acs {
            capability: 0x7f,
            control: ACS_SV | ACS_RR | ACS_CR | ACS_UF | ACS_EC,
        };
        let fix = setpci_fix("0000:02:00.0", &acs);
        assert!(
            fix.starts_with("setpci -s 0000:02:00.0 ECAP_ACS+0x6.w=0000:002c "),
            "{fix}"
        );
        assert!(fix.contains("ReqRedir CmpltRedir EgressCtrl"), "{fix}");
        // what the mask does to the register, as setpci applies it:
        // new = (old & !mask) | (value & mask), value 0
        let value_mask = fix.split_whitespace().nth(3).unwrap();
        let mask = value_mask.rsplit(':').next().unwrap();
        let mask = u16::from_str_radix(mask, 16).unwrap();
        assert_eq!(acs.control & !mask, ACS_SV | ACS_UF);
    }

    #[test]
    fn redirection_on_a_root_port_does_not_matter() {
        assert!(!redirect_matters(Some(PortType::RootPort)));
        assert!(redirect_matters(Some(PortType::DownstreamPort)));
        assert!(redirect_matters(None));
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
        // a PCIe bridge read as root whose config space stops at 256
        // bytes: no extended config access, ACS unknown, never "none"
        assert_eq!(
            ConfigSpace::new(&bytes[..256]).acs(),
            AcsState::ExtendedSpaceUnreadable
        );
        let mut conventional = bytes[..256].to_vec();
        conventional[0x06] = 0; // no capability list: conventional PCI
        assert_eq!(
            ConfigSpace::new(&conventional).acs(),
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
