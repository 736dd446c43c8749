//! NVLink-C2C, the link between a GPU and its own CPU on Grace Hopper and
//! Grace Blackwell, as NCCL judges GPUDirect RDMA over it
//! (docs/diagnostics.md, "C2C"). NCCL learns of it from NVML
//! (graph/xml.cc, ncclTopoGetXmlFromGpu, sm >= 90: the count of C2C links
//! whose status is 1), joins the GPU to its CPU by a C2C link (topo.cc,
//! ncclTopoAddC2c), and makes a NIC on that CPU's PCIe P2C from the GPU
//! (paths.cc: GPU-C2C-CPU then CPU-PCIe-NIC, mergePathType), where sysfs
//! shows only the PCIe path (PHB or NODE). Whether NCCL then uses GPUDirect
//! RDMA is a rule the two fixture releases state differently (`rule`).
//!
//! sysfs does not show C2C, so the check asks `nvidia-smi c2c -s` (one
//! `C2C Link <n>: <speed> GB/s` line per active link under each `GPU
//! <index>:` line, the shape a GH200 printed in Microsoft's VirtualClient
//! test data; exit 3 with "No Devices support C2C." on the lent H100s:
//! tests/real/h100x1-vm), only on an arm64 node (C2C exists only beside an
//! arm64 CPU; an arm64 kernel alone prints `midr_el1`) and only in the
//! forms that may run programs. Where it was not asked, the check says NCCL
//! may use GPUDirect RDMA over C2C and does not warn: a warning there could
//! drain a Grace node NCCL serves well.

use crate::consumers;
use crate::host::Host;
use crate::memory::nvidia_smi_exit;
use crate::nvlink;
use crate::rdma::Nic;
use crate::report::{Fact, Problem, Status};
use crate::topology::Distance;
use std::collections::{BTreeMap, BTreeSet};

/// `midr_el1`: what an arm64 kernel prints for each CPU
/// (arch/arm64/kernel/cpuinfo.c, the `regs/identification` attributes).
const ARM64_CPU: &str = "devices/system/cpu/cpu0/regs/identification/midr_el1";

/// Whether this node's CPUs are arm64, the only ones C2C joins a GPU to.
pub fn possible(host: &Host) -> bool {
    host.exists(&host.sys_path(ARM64_CPU))
}

/// The GPUs (PCI addresses) with at least one active C2C link; None where
/// nvidia-smi could not tell. The output is kept without the GPUs' names
/// and UUIDs (a dump holds no UUID); "no device supports C2C" (nvidia-smi's
/// exit 3, "the requested operation is not available on target device")
/// is kept as an empty output.
pub fn linked(host: &Host) -> Option<BTreeSet<String>> {
    let status = host.program("nvidia-smi-c2c-s", || {
        match nvidia_smi_exit(&["c2c", "-s"])? {
            (Some(0), out) => Some(without_names(&out)),
            (Some(3), _) => Some(String::new()),
            _ => None,
        }
    })?;
    if status.is_empty() {
        return Some(BTreeSet::new());
    }
    parse(&nvlink::gpu_index(host)?, &status)
}

/// The GPUs of `nvidia-smi c2c -s` (@status; @index: GPU index to PCI
/// address) with a link at a speed above 0; None where it names a GPU the
/// index lacks or none at all.
fn parse(index: &BTreeMap<usize, String>, status: &str) -> Option<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut gpu: Option<&String> = None;
    let mut seen = 0;
    for line in status.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("GPU ") {
            let (n, _) = rest.split_once(':')?;
            gpu = Some(index.get(&n.parse::<usize>().ok()?)?);
            seen += 1;
        } else if let Some(rest) = line.strip_prefix("C2C Link ") {
            let (_, speed) = rest.split_once(':')?;
            let active = speed
                .trim()
                .strip_suffix("GB/s")
                .and_then(|s| s.trim().parse::<f64>().ok())
                .is_some_and(|s| s > 0.0);
            if active {
                out.insert(gpu?.clone());
            }
        }
    }
    (seen > 0).then_some(out)
}

/// `GPU 0: NVIDIA GH200 480GB (UUID: GPU-...)` kept as `GPU 0:`.
fn without_names(text: &str) -> String {
    text.lines()
        .map(|l| match l.trim_start().strip_prefix("GPU ") {
            Some(rest) => format!("GPU {}:", rest.split(':').next().unwrap_or("")),
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Which NCCL rule judges a P2C path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// 2.28.9's (paths.cc ncclTopoCheckGdr): the level is
    /// `NCCL_NET_GDR_LEVEL` or PXB; with `NCCL_NET_GDR_C2C` on (default
    /// 1) a P2C path counts as C2C, nearer than any PCIe class.
    R2_28,
    /// 2.30.7's: the level is `NCCL_NET_GDR_LEVEL`, or P2C with
    /// `NCCL_NET_GDR_C2C` on and PXB with it off; P2C is compared as P2C.
    R2_30,
}

/// The rule of the NCCL release installed (nccl_version.rs), where it is
/// one of the fixtures' series.
pub fn release(installed: Option<(u32, u32, u32)>) -> Option<Release> {
    match installed? {
        (2, 28, _) => Some(Release::R2_28),
        (2, 30, _) => Some(Release::R2_30),
        _ => None,
    }
}

/// Whether NCCL uses GPUDirect RDMA over a P2C path under @rule, with the
/// level set to @given (None: NCCL's default) and `NCCL_NET_GDR_C2C`
/// @c2c_on. The two rules differ only for a level set between C2C and
/// PXB with C2C on.
pub fn within(rule: Release, given: Option<usize>, c2c_on: bool) -> bool {
    let level = |name| consumers::parse_level(name).expect("a level");
    match rule {
        Release::R2_28 => {
            let distance = if c2c_on { level("C2C") } else { level("P2C") };
            distance <= given.unwrap_or(level("PXB"))
        }
        Release::R2_30 => {
            let default = if c2c_on { level("P2C") } else { level("PXB") };
            level("P2C") <= given.unwrap_or(default)
        }
    }
}

/// What the check knows of a GPU's C2C link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// nvidia-smi shows an active C2C link: NCCL's path to a NIC on the
    /// GPU's CPU is P2C.
    Up,
    /// Not asked (the monitoring forms) or nvidia-smi could not tell.
    Unknown,
}

/// NCCL's settings a P2C verdict depends on.
pub struct Settings {
    /// The release series installed, where its rule is known.
    pub rule: Option<Release>,
    /// `NCCL_NET_GDR_LEVEL` where set to a level.
    pub given: Option<usize>,
    /// `NCCL_NET_GDR_C2C`: on, and where that comes from.
    pub c2c: (bool, String),
    /// The level's source, as consumers::nccl_level says it.
    pub level_from: String,
}

impl Settings {
    /// @installed: the installed libnccl's version, and @level_from where
    /// NCCL's level comes from, as the check read them once
    /// (nccl_version::installed, consumers::nccl_level).
    pub fn read(host: &Host, installed: Option<(u32, u32, u32)>, level_from: &str) -> Self {
        Settings {
            rule: release(installed),
            given: consumers::nccl_level_given(host),
            c2c: consumers::nccl_gdr_c2c(host),
            level_from: level_from.to_owned(),
        }
    }

    /// NCCL's verdict over P2C: Some where the release's rule is known or
    /// both rules agree; None where they differ and no libnccl of either
    /// series is installed.
    pub fn verdict(&self) -> Option<bool> {
        let on = |r| within(r, self.given, self.c2c.0);
        match self.rule {
            Some(r) => Some(on(r)),
            None if on(Release::R2_28) == on(Release::R2_30) => Some(on(Release::R2_28)),
            None => None,
        }
    }
}

/// The distance and NCCL facts of @gpu whose closest NIC @nic is @class
/// from it in sysfs (PHB or NODE: on the GPU's own CPU), where C2C joins
/// the GPU to that CPU (@link). @sees: NCCL finds GPUDirect RDMA support
/// on the node (the nccl line).
pub fn facts(
    gpu: &str,
    nic: &Nic,
    class: Distance,
    link: Link,
    s: &Settings,
    sees: bool,
) -> Vec<Fact> {
    let device = format!("closest RDMA device {} ({})", nic.name, nic.address);
    if link == Link::Unknown {
        let unseen = "whether it is up only nvidia-smi can tell (`nvidia-smi c2c -s`; the check asks it in its default and --json forms)";
        return vec![
            Fact::info(
                "distance",
                gpu,
                format!(
                    "{device} is {class} from it in sysfs; over a C2C link from the GPU to its CPU NCCL's path is P2C: {unseen}"
                ),
            ),
            Fact::info(
                "nccl",
                gpu,
                format!(
                    "NCCL uses GPUDirect RDMA with {} if the GPU's C2C link is up and NCCL's rule lets P2C through, {}: {unseen}",
                    nic.name,
                    // Without the link NCCL judges the PCIe path by its level.
                    match s
                        .given
                        .filter(|l| sees && consumers::nccl_within(class, *l))
                    {
                        Some(l) => format!(
                            "else with {} over PCIe ({class} within {}, {})",
                            nic.name,
                            consumers::level_name(l),
                            s.level_from
                        ),
                        None => "else not".to_owned(),
                    }
                ),
            ),
        ];
    }
    let how = format!("{}; {}", s.level_from, s.c2c.1);
    let path = format!(
        "{device} is P2C from it: over its C2C link to its CPU, then PCIe ({class} in sysfs)"
    );
    let Some(uses) = s.verdict() else {
        return vec![
            Fact::info("distance", gpu, path),
            Fact::info(
                "nccl",
                gpu,
                format!(
                    "NCCL 2.28 uses GPUDirect RDMA with {} over C2C and NCCL 2.30 does not ({how}: 2.28.9 counts a P2C path as C2C, 2.30.7 compares it as P2C): which NCCL the job loads decides (no libnccl of either series is installed)",
                    nic.name
                ),
            ),
        ];
    };
    let rule = match s.rule {
        Some(Release::R2_28) => ", NCCL 2.28's rule",
        Some(Release::R2_30) => ", NCCL 2.30's rule",
        None => "",
    };
    let distance = if uses {
        Fact::ok("distance", gpu, path)
    } else {
        Fact::problem(
            "distance",
            gpu,
            Status::Warn,
            Problem::Topology,
            format!("{path}: NCCL does not use GPUDirect RDMA over it ({how}{rule})"),
            Some(
                "NCCL_NET_GDR_LEVEL=P2C (NCCL 2.28 and 2.30 both use GPUDirect RDMA over C2C then)"
                    .to_owned(),
            ),
        )
    };
    let nccl = if sees && uses {
        Fact::ok(
            "nccl",
            gpu,
            format!(
                "NCCL uses GPUDirect RDMA with {} (P2C, over C2C: {how}{rule})",
                nic.name
            ),
        )
    } else if sees {
        Fact::info(
            "nccl",
            gpu,
            format!(
                "NCCL does not use GPUDirect RDMA with {}: P2C is beyond its level ({how}{rule})",
                nic.name
            ),
        )
    } else {
        Fact::info(
            "nccl",
            gpu,
            format!(
                "NCCL does not use GPUDirect RDMA with {}: it finds no GPUDirect RDMA support on this node (see the nccl line)",
                nic.name
            ),
        )
    };
    vec![distance, nccl]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_of_both_releases() {
        let l = |n| consumers::parse_level(n);
        for rule in [Release::R2_28, Release::R2_30] {
            // NCCL's defaults: on in both; NCCL_NET_GDR_C2C=0: off in both
            assert!(within(rule, None, true));
            assert!(!within(rule, None, false));
            assert!(within(rule, l("PHB"), false) && within(rule, l("SYS"), true));
            assert!(!within(rule, l("NVB"), true));
        }
        // a level between C2C and PXB: 2.28.9 counts P2C as C2C, 2.30.7 not
        for name in ["C2C", "PIX", "PXB"] {
            assert!(within(Release::R2_28, l(name), true), "{name}");
            assert!(!within(Release::R2_30, l(name), true), "{name}");
        }
        assert_eq!(release(Some((2, 30, 7))), Some(Release::R2_30));
        assert_eq!(release(Some((2, 29, 2))), None);
    }

    #[test]
    fn a_gh200_and_a_host_without_c2c() {
        let index: BTreeMap<usize, String> = [
            (0, "0009:01:00.0".to_owned()),
            (1, "0019:01:00.0".to_owned()),
        ]
        .into();
        // a GH200's shape (docs/diagnostics.md, "C2C"): ten links up
        let mut gh200 = "GPU 0: NVIDIA GH200 480GB (UUID: GPU-0)\n".to_owned();
        for n in 0..10 {
            gh200.push_str(&format!("         C2C Link {n}: 44.712 GB/s\n"));
        }
        let one = parse(&index, &without_names(&gh200)).unwrap();
        assert_eq!(one, ["0009:01:00.0".to_owned()].into());
        // a link not up, a GPU the index lacks, no GPU line at all
        let down = "GPU 0:\n  C2C Link 0: <inactive>\nGPU 1:\n  C2C Link 0: 44.712 GB/s\n";
        assert_eq!(
            parse(&index, down).unwrap(),
            ["0019:01:00.0".to_owned()].into()
        );
        assert_eq!(parse(&index, "GPU 7:\n  C2C Link 0: 44.712 GB/s\n"), None);
        assert_eq!(parse(&index, "something else\n"), None);
        // the lent H100s: exit 3 and this line
        let real = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/real/");
        let h100 =
            std::fs::read_to_string(format!("{real}h100x1-vm/nvidia-smi-c2c-s.txt")).unwrap();
        assert!(h100.starts_with("No Devices support C2C."), "{h100}");
    }

    #[test]
    fn names_and_uuids_are_dropped() {
        let gh200 =
            "GPU 0: NVIDIA GH200 480GB (UUID: GPU-8d852f73)\n         C2C Link 0: 44.712 GB/s\n";
        let kept = without_names(gh200);
        assert!(
            kept.starts_with("GPU 0:\n") && !kept.contains("UUID"),
            "{kept}"
        );
        assert!(kept.contains("C2C Link 0: 44.712 GB/s"));
    }
}
