//! What NCCL and UCX decide, from the files they test and NCCL's distance
//! rule (docs/diagnostics.md, "NCCL and UCX"):
//! - NCCL (src/transport/net_ib/gdr.cc, ncclIbGdrSupport) enables
//!   GPUDirect RDMA for an HCA when one of its peer-memory files exists,
//!   or DMA-BUF works (ncclIbDmaBufSupport); then per GPU-NIC pair only
//!   within its level (src/graph/paths.cc, ncclTopoCheckGdr):
//!   `NCCL_NET_GDR_LEVEL`, else PXB on a PCIe host;
//! - UCX (src/uct/ib/base/ib_md.c, uct_ib_check_gpudirect_driver) registers
//!   CUDA memory when one of its files exists or DMA-BUF works; it has no
//!   distance rule.

use crate::host::Host;
use crate::topology::Distance;

/// The files NCCL tests, relative to sysfs (gdr.cc, ibGdrSupportInitOnce).
pub const NCCL_FILES: [&str; 3] = [
    "kernel/mm/memory_peers/nv_mem/version",
    "kernel/mm/memory_peers/nv_mem_nc/version",
    "module/nvidia_peermem/version",
];

/// The files UCX tests for CUDA memory (ib_md.c).
pub const UCX_FILES: [&str; 3] = [
    "kernel/mm/memory_peers/nv_mem/version",
    "module/nvidia_peermem/version",
    "module/nv_peer_mem/version",
];

/// NCCL's path types in their order since 2.27.5 (graph.h), the ones
/// `NCCL_NET_GDR_LEVEL` accepts by name (paths.cc, ncclGetLevel).
const NCCL_LEVELS: [&str; 10] = [
    "LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS",
];

/// A distance by NCCL's name for it, the one `NCCL_NET_GDR_LEVEL` takes:
/// NCCL has no NODE, its CPU nodes are NUMA nodes, so a path between host
/// bridges of one node is PHB (ncclGetLevel accepts only NCCL_LEVELS).
pub fn nccl_name(d: Distance) -> &'static str {
    match d {
        Distance::Pix => "PIX",
        Distance::Pxb => "PXB",
        Distance::Phb | Distance::Node => "PHB",
        Distance::Sys => "SYS",
    }
}

/// The index of a distance in NCCL's order.
fn nccl_index(d: Distance) -> usize {
    let name = nccl_name(d);
    NCCL_LEVELS
        .iter()
        .position(|l| *l == name)
        .expect("a level")
}

/// A `NCCL_NET_GDR_LEVEL` value: a name, or a legacy number (0 LOC, 1 PIX,
/// 2 PXB, 3 PHB, 4 and up SYS: paths.cc, levelsOldToNew).
pub fn parse_level(value: &str) -> Option<usize> {
    let value = value.trim();
    if let Some(i) = NCCL_LEVELS.iter().position(|l| *l == value) {
        return Some(i);
    }
    if value.starts_with(|c: char| c.is_ascii_digit()) {
        let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
        let old = digits.parse::<u64>().unwrap_or(u64::MAX).min(5) as usize;
        let name = ["LOC", "PIX", "PXB", "PHB", "SYS", "SYS"][old];
        return NCCL_LEVELS.iter().position(|l| *l == name);
    }
    None
}

pub fn level_name(index: usize) -> &'static str {
    NCCL_LEVELS[index]
}

/// NCCL's level: (index, where it came from). The environment of this
/// process first, then `/etc/nccl.conf` (NCCL's docs: "set statically in
/// /etc/nccl.conf (for an administrator to set system-wide values)";
/// `NV_PEER_MEM_NCCL_CONF` names another file), else the default, PXB.
pub fn nccl_level(host: &Host) -> (usize, String) {
    // No let chains here: the packages build this crate with the
    // distributions' rustc, 1.85 at the oldest (Cargo.toml).
    let from_env = host.env_var("NCCL_NET_GDR_LEVEL");
    if let Some((value, i)) = from_env.and_then(|v| parse_level(&v).map(|i| (v, i))) {
        return (i, format!("NCCL_NET_GDR_LEVEL={value} in the environment"));
    }
    // NV_PEER_MEM_NCCL_CONF (tests) is read on the node only: a dump
    // holds the root's /etc/nccl.conf.
    let conf = std::env::var_os("NV_PEER_MEM_NCCL_CONF")
        .filter(|_| !host.is_replay())
        .map_or_else(|| host.root_path("etc/nccl.conf"), std::path::PathBuf::from);
    let text = host.text(&conf).unwrap_or_default();
    let conf = if conf.starts_with(&host.root) {
        format!(
            "/{}",
            conf.strip_prefix(&host.root).unwrap_or(&conf).display()
        )
    } else {
        conf.display().to_string()
    };
    let from_file = text.lines().find_map(|line| {
        let value = line.trim().strip_prefix("NCCL_NET_GDR_LEVEL=")?;
        parse_level(value).map(|i| (value.trim().to_owned(), i))
    });
    if let Some((value, i)) = from_file {
        return (i, format!("NCCL_NET_GDR_LEVEL={value} in {conf}"));
    }
    (
        parse_level("PXB").expect("PXB"),
        "NCCL's default, PXB".to_owned(),
    )
}

/// Whether NCCL uses GPUDirect RDMA over a path of @distance at @level.
pub fn nccl_within(distance: Distance, level: usize) -> bool {
    nccl_index(distance) <= level
}

/// Those of @files that exist under sysfs.
pub fn present(host: &Host, files: &[&'static str]) -> Vec<&'static str> {
    files
        .iter()
        .copied()
        .filter(|f| host.exists(&host.sys_path(f)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_by_name_and_legacy_number() {
        assert_eq!(parse_level("PXB").map(level_name), Some("PXB"));
        assert_eq!(parse_level("SYS").map(level_name), Some("SYS"));
        assert_eq!(parse_level("3").map(level_name), Some("PHB"));
        assert_eq!(parse_level("0").map(level_name), Some("LOC"));
        assert_eq!(parse_level("9").map(level_name), Some("SYS"));
        assert_eq!(parse_level("pxb"), None); // NCCL compares case-sensitively
        assert_eq!(parse_level("far"), None);
    }

    #[test]
    fn the_default_admits_pix_and_pxb_only() {
        let pxb = parse_level("PXB").unwrap();
        assert!(nccl_within(Distance::Pix, pxb));
        assert!(nccl_within(Distance::Pxb, pxb));
        assert!(!nccl_within(Distance::Phb, pxb));
        assert!(!nccl_within(Distance::Node, pxb));
        assert!(!nccl_within(Distance::Sys, pxb));
        // P2C (the C2C default since 2.29.2) admits the same on a PCIe host
        let p2c = parse_level("P2C").unwrap();
        assert!(nccl_within(Distance::Pxb, p2c) && !nccl_within(Distance::Phb, p2c));
        // PHB admits NODE too: NCCL's CPU nodes are NUMA nodes
        assert!(nccl_within(Distance::Node, parse_level("PHB").unwrap()));
        assert!(!nccl_within(Distance::Pix, parse_level("LOC").unwrap()));
    }
}
