//! Whether NCCL reads GPU memory over GPUDirect RDMA for sends, which it
//! decides before any distance (graph/paths.cc, ncclTopoCheckGdr with
//! `read`, 2.28.9 and 2.30.7 alike; docs/diagnostics.md, "NCCL and UCX"):
//! never with `NCCL_NET_GDR_READ` 0; with it unset (its default -2) or
//! negative, not for a GPU older than Ampere (compute capability below
//! 8.0) on a node of several GPUs unless NVLink joins it to another. Where
//! reads are off the GPU's `nccl` line says NCCL uses GPUDirect RDMA for
//! receives only.
//!
//! The compute capability comes from `nvidia-smi
//! --query-gpu=pci.bus_id,compute_cap` (sysfs does not show it), asked only
//! in the forms that may run programs and only for a GPU whose PCI device
//! id is below 0x2300: the ids of Hopper (H100 0x2330, H200 0x2335, GH200
//! 0x2342, the lent hosts and c2c.rs), Ada and Blackwell are above it, so
//! an H100 or newer fleet never spawns it; a GPU the check cannot ask
//! about is judged as NCCL judges an Ampere or newer one.

use crate::consumers;
use crate::host::Host;
use crate::memory::{nvidia_smi, sysfs_bus_id};
use crate::report::Fact;
use std::collections::BTreeMap;

/// What `NCCL_NET_GDR_READ` says, read once.
pub struct Setting {
    /// Why NCCL's sends do without GPUDirect RDMA on every GPU: where it
    /// reads as 0.
    pub off_everywhere: Option<String>,
    /// Whether NCCL's rule for GPUs older than Ampere is on: unset or
    /// negative (ncclLoadParam's strtoll of its value).
    pub old_gpu_rule: bool,
}

impl Setting {
    pub fn read(host: &Host) -> Self {
        match consumers::nccl_setting(host, "NCCL_NET_GDR_READ") {
            None => Setting {
                off_everywhere: None,
                old_gpu_rule: true,
            },
            Some((value, from)) => Setting {
                off_everywhere: consumers::param_zero(&value)
                    .then(|| format!("NCCL_NET_GDR_READ={value} in {from}")),
                old_gpu_rule: value.is_empty() || value.trim_start().starts_with('-'),
            },
        }
    }
}

/// Whether a GPU of PCI device @device may be older than Ampere, so that
/// its compute capability is worth asking (the module's comment).
pub fn may_be_old(device: u16) -> bool {
    device < 0x2300
}

/// Compute capability (major, minor) by PCI address, where nvidia-smi
/// answers.
pub fn compute_caps(host: &Host) -> Option<BTreeMap<String, (u32, u32)>> {
    let out = host.program("nvidia-smi-compute-cap", || {
        nvidia_smi(&[
            "--query-gpu=pci.bus_id,compute_cap",
            "--format=csv,noheader",
        ])
    })?;
    parse(&out)
}

/// `00000000:00:06.0, 9.0` per line, as the lent H100 printed it
/// (tests/real/h100x1-vm/nvidia-smi-compute-cap.txt).
fn parse(out: &str) -> Option<BTreeMap<String, (u32, u32)>> {
    let caps: BTreeMap<String, (u32, u32)> = out
        .lines()
        .filter_map(|line| {
            let (bus, cap) = line.split_once(',')?;
            let (major, minor) = cap.trim().split_once('.')?;
            Some((
                sysfs_bus_id(bus)?,
                (major.parse().ok()?, minor.parse().ok()?),
            ))
        })
        .collect();
    (!caps.is_empty()).then_some(caps)
}

/// Where NCCL's sends do without GPUDirect RDMA for @gpu: the GPU's `nccl`
/// line that says NCCL uses it says it does so for receives only (@why).
pub fn receives_only(facts: &mut [Fact], gpu: &str, why: &str) {
    if let Some(f) = facts.iter_mut().rev().find(|f| {
        f.check == "nccl" && f.subject == gpu && f.message.starts_with("NCCL uses GPUDirect RDMA")
    }) {
        f.message.push_str(&format!(
            "; for receives only: sends stage GPU memory through host memory ({why})"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lent_h100s_answer() {
        let real = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/real/h100x1-vm/");
        let text = std::fs::read_to_string(format!("{real}nvidia-smi-compute-cap.txt")).unwrap();
        let caps = parse(&text).unwrap();
        assert_eq!(caps.get("0000:00:06.0"), Some(&(9, 0)));
        assert_eq!(caps.len(), 1);
        assert_eq!(parse("Field \"compute_cap\" is not a valid field\n"), None);
    }

    #[test]
    fn ids_worth_asking() {
        // V100, T4, A100: asked; H100, H200, GH200, L40S, B200: not
        for old in [0x1db1, 0x1eb8, 0x20b0] {
            assert!(may_be_old(old), "{old:#x}");
        }
        for new in [0x2330, 0x2335, 0x2342, 0x26b9, 0x2901] {
            assert!(!may_be_old(new), "{new:#x}");
        }
    }
}
