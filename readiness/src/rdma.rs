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
    /// Its ports, by number; None where they could not be read.
    pub ports: Option<Vec<Port>>,
}

/// A port as `/sys/class/infiniband/<name>/ports/<n>/` shows it: the
/// kernel prints there what ib_query_port answers, as libibverbs'
/// ibv_query_port does (drivers/infiniband/core/sysfs.c: state_show
/// `"%d: %s"` of ib_port_state, `4: ACTIVE`; link_layer_show
/// `InfiniBand` or `Ethernet`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub number: u32,
    /// `4: ACTIVE`, `1: DOWN`, ...
    pub state: String,
    /// `InfiniBand`, `Ethernet`
    pub link_layer: String,
    /// The physical link: `5: LinkUp`, `2: Polling`, `3: Disabled`, ...
    /// (sysfs.c phys_state_show, "%u: %s" of ib_port_phys_state); None
    /// where the file is missing.
    pub phys_state: Option<String>,
}

impl Port {
    /// Why the port is not ACTIVE and what brings it up, from its link's
    /// physical state and its logical state (the IBTA's port states, as
    /// the kernel names them: ib_port_phys_state, ib_port_state): no link
    /// (Polling: nothing answers at the other end), a disabled port, or a
    /// link that is up but not activated (InfiniBand: the subnet manager
    /// activates ports).
    pub fn why_down(&self) -> String {
        let phys = self.phys_state.as_deref().unwrap_or("");
        let code = |s: &str| s.split(':').next().map(str::trim).unwrap_or("").to_owned();
        let shown = match &self.phys_state {
            Some(p) => format!("port {} {}, phys_state {p}", self.number, self.state),
            None => format!("port {} {}", self.number, self.state),
        };
        let what = match (code(phys).as_str(), code(&self.state).as_str()) {
            ("3", _) => {
                "the port is disabled: enable it where it was disabled (its switch port, the subnet manager or the port's own settings)"
            }
            ("2", _) | ("1", _) => {
                "no link: nothing answers at the other end; check the cable and the switch port it plugs into"
            }
            ("5", "2") | ("5", "3") if self.link_layer == "InfiniBand" => {
                "the link is up but the port is not activated: a subnet manager (opensm, or the switch's) must run on this fabric"
            }
            _ if self.link_layer == "Ethernet" => {
                "no Ethernet link: check the cable, the switch port and the port's network interface"
            }
            _ => "the port is not up: check its cable and its switch port",
        };
        format!("{shown}: {what} (`ibstat` shows the ports)")
    }

    /// A port NCCL's IB plugin takes (net_ib.cc, ncclIbInitDevices, 2.28.9
    /// and 2.30.7): IBV_PORT_ACTIVE (4), link layer InfiniBand or Ethernet.
    pub fn active(&self) -> bool {
        self.state.split(':').next().map(str::trim) == Some("4")
            && matches!(self.link_layer.as_str(), "InfiniBand" | "Ethernet")
    }
}

/// The ports of RDMA device @name, by number.
fn ports(host: &Host, name: &str, problems: &mut Vec<Unreadable>) -> Option<Vec<Port>> {
    let dir = host.sys_path(&format!("class/infiniband/{name}/ports"));
    let read = || -> Result<Vec<Port>, Unreadable> {
        let mut out = Vec::new();
        for n in host.names(&dir)? {
            let Ok(number) = n.parse::<u32>() else {
                continue;
            };
            let phys = dir.join(&n).join("phys_state");
            out.push(Port {
                number,
                state: host.text(&dir.join(&n).join("state"))?.trim().to_owned(),
                link_layer: host
                    .text(&dir.join(&n).join("link_layer"))?
                    .trim()
                    .to_owned(),
                phys_state: if host.exists(&phys) {
                    Some(host.text(&phys)?.trim().to_owned())
                } else {
                    None
                },
            });
        }
        out.sort_by_key(|p| p.number);
        Ok(out)
    };
    match read() {
        Ok(p) => Some(p),
        Err(e) => {
            problems.push(e);
            None
        }
    }
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
                    let ports = ports(host, &name, &mut problems);
                    out.push(Nic {
                        name,
                        address,
                        ports,
                    });
                }
                // else: a software device (rxe, siw) on a netdev, not PCI
            }
            Err(e) => problems.push(e),
        }
    }
    (out, problems)
}
