//! mlx5 Data Direct: a ConnectX-8's DMA function (PCI 15b3:2100), through
//! which the adapter reaches GPU memory over the GPU's own PCIe switch
//! instead of its CPU. NCCL's IB plugin asks the kernel for it
//! (`mlx5dv_get_data_direct_sysfs_path`) and, by default
//! (`NCCL_IB_DATA_DIRECT=1`), offers the adapter only as `<name>_dma` at
//! that function's place; with 2 both, with 0 neither (NCCL 2.28.9
//! transport/net_ib.cc, 2.30.7 transport/net_ib/init.cc,
//! ncclIbInitDevices). It does so only for an mlx5 device that can
//! register DMA-BUF (`ncclMlx5dvDmaBufCapable`).
//!
//! Which adapter a DMA function serves no sysfs link says: the kernel pairs
//! them by a VUID the firmware reports (mlx5_ib data_direct.c, MLNX_OFED
//! 25.10), and rdma-core's `rdma_topo` pairs the DMA function with its
//! PFs by the V3 keyword of their VPD (`__get_nvcx_complex`: "The DMA and
//! PF are matched using the UUID from the VPD"). The check does as
//! rdma_topo does; the VPD is readable by root only, and the pairing is
//! said unknown otherwise. The kernel serves the function where its
//! driver, mlx5_ib (data_direct.o is built into it), is bound to it.
//! docs/diagnostics.md, "Distance".

use crate::consumers;
use crate::host::Host;
use crate::pci::PciDevice;

/// Mellanox's PCI vendor id and the ConnectX-8 DMA function's device id
/// (mlx5_ib data_direct.c `mlx5_data_direct_pci_table`; rdma_topo's
/// `cx_dma`).
const MELLANOX: u16 = 0x15b3;
const DMA_FUNCTION: u16 = 0x2100;

/// What NCCL offers for an mlx5 adapter that has a Data Direct function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    /// `NCCL_IB_DATA_DIRECT=0`: the adapter's own function only.
    Own,
    /// 1 (the default): `<name>_dma` at the DMA function only.
    DataDirect,
    /// 2: both.
    Both,
}

/// `NCCL_IB_DATA_DIRECT` as NCCL reads it (NCCL_PARAM, default 1: any
/// value above 0 looks for the function, 2 keeps the adapter too).
pub fn offered(host: &Host) -> Offered {
    match consumers::nccl_setting(host, "NCCL_IB_DATA_DIRECT") {
        Some((v, _)) if consumers::param_zero(&v) => Offered::Own,
        Some((v, _)) if v.trim() == "2" => Offered::Both,
        Some((v, _)) if v.trim().starts_with('-') => Offered::Own,
        _ => Offered::DataDirect,
    }
}

/// The DMA functions of the node that mlx5_ib serves.
pub fn functions<'a>(host: &Host, devices: &'a [PciDevice]) -> Vec<&'a PciDevice> {
    devices
        .iter()
        .filter(|d| d.vendor == MELLANOX && d.device == DMA_FUNCTION)
        .filter(|d| {
            host.link_target(&d.dir.join("driver"))
                .is_ok_and(|t| t.file_name().is_some_and(|n| n == "mlx5_ib"))
        })
        .collect()
}

/// The DMA function of @functions that serves adapter @nic: the one whose
/// VPD has @nic's V3 UUID. Err: a VPD could not be read.
pub fn serving<'a>(
    host: &Host,
    nic: &PciDevice,
    functions: &[&'a PciDevice],
) -> Result<Option<&'a PciDevice>, String> {
    if nic.vendor != MELLANOX || functions.is_empty() {
        return Ok(None);
    }
    let v3 = |d: &PciDevice| -> Result<Option<String>, String> {
        let bytes = host.bytes(&d.dir.join("vpd")).map_err(|u| u.to_string())?;
        Ok(vpd_v3(&bytes))
    };
    let Some(own) = v3(nic)? else {
        return Ok(None);
    };
    for f in functions {
        if v3(f)?.as_deref() == Some(&own) {
            return Ok(Some(f));
        }
    }
    Ok(None)
}

/// The V3 keyword (a UUID) of the VPD's read-only section: PCI Local Bus
/// 3.0 section 6.4 (rdma_topo's parse_vpd, pciutils ls-vpd.c): items of a
/// tag byte and a length (large ones, tag bit 7, a 16-bit little-endian
/// length), up to an end tag (0x78 or 0x79); the read-only item (0x90)
/// holds keywords of two letters, a length byte and the value.
pub fn vpd_v3(vpd: &[u8]) -> Option<String> {
    let mut data = vpd;
    while let Some(&tag) = data.first() {
        if tag == 0x78 || tag == 0x79 {
            return None;
        }
        let (offset, length) = if tag & 0x80 != 0 {
            let l = u16::from_le_bytes([*data.get(1)?, *data.get(2)?]) as usize;
            (3, l)
        } else {
            (1, (tag & 0x07) as usize)
        };
        let item = data.get(offset..offset + length)?;
        if tag == 0x90 {
            let mut k = item;
            while k.len() >= 3 {
                let l = k[2] as usize;
                let value = k.get(3..3 + l)?;
                if &k[..2] == b"V3" {
                    return Some(
                        String::from_utf8_lossy(value)
                            .trim_end_matches('\0')
                            .to_owned(),
                    );
                }
                k = &k[3 + l..];
            }
        }
        data = &data[offset + length..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_v3_uuid_of_a_vpd() {
        // an identifier string "NX", then the read-only section: SN, V3, RV
        let vpd = [
            0x82, 2, 0, b'N', b'X', 0x90, 17, 0, b'S', b'N', 3, b'M', b'T', b'1', b'V', b'3', 4,
            b'a', b'b', b'c', b'd', b'R', b'V', 1, 0, 0x78,
        ];
        assert_eq!(vpd_v3(&vpd).as_deref(), Some("abcd"));
        // cut short, or without a read-only section: none
        assert_eq!(vpd_v3(&vpd[..12]), None);
        assert_eq!(vpd_v3(&[0x82, 2, 0, b'x', b'y', 0x78]), None);
        assert_eq!(vpd_v3(&[]), None);
    }
}
