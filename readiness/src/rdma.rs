//! RDMA devices: `/sys/class/infiniband/<name>/device` links to the PCI
//! function (Documentation/ABI/stable/sysfs-class-infiniband). Every RDMA
//! device backed by a PCI function counts, whatever its vendor: the
//! verdict's other checks (the peer memory API, DMA-BUF, the path to the
//! GPU) decide whether it can do GPUDirect RDMA, not its vendor id.

use crate::host::{Host, Unreadable};
use crate::pci::PciDevice;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    /// `mlx5_0`
    pub name: String,
    /// The PCI function's address.
    pub address: String,
}

/// Every RDMA device backed by a PCI function, sorted by name.
pub fn nics(host: &Host, devices: &[PciDevice]) -> (Vec<Nic>, Vec<Unreadable>) {
    let class = host.sys_path("class/infiniband");
    let mut out = Vec::new();
    let mut problems = Vec::new();
    // No directory: no RDMA stack loaded, so no NICs. A directory that
    // cannot be read is a problem, not "no NICs".
    if !host.exists(&class) {
        return (out, problems);
    }
    let names = match host.names(&class) {
        Ok(n) => n,
        Err(e) => return (out, vec![e]),
    };
    for name in names {
        let link = class.join(&name).join("device");
        match host.link_target(&link) {
            Ok(target) => {
                let address = target
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if devices.iter().any(|d| d.address == address) {
                    out.push(Nic { name, address });
                }
                // else: a software device (rxe, siw) on a netdev, not PCI
            }
            Err(e) => problems.push(e),
        }
    }
    (out, problems)
}
