//! Which GPUs NVLink joins, as NCCL's PXN needs to know (graph/paths.cc,
//! ncclTopoComputePaths: a NIC is reached through a peer GPU that NVLink
//! joins to this one). NCCL asks NVML; sysfs does not show it (an
//! NVSwitch is no PCI function inside the lent VMs:
//! docs/research-nccl-harness.md §7), so the check asks `nvidia-smi topo -m` (its matrix:
//! `NV<n>` where n NVLinks join two GPUs) and `nvidia-smi
//! --query-gpu=index,pci.bus_id` (which GPU each matrix row is), only in
//! the forms people read, as for the memory size (memory.rs). The shapes
//! parsed are those the lent 4 x H100 host printed (tests/real/h100x4-vm).

use crate::host::Host;
use crate::memory::{nvidia_smi, sysfs_bus_id};
use std::collections::{BTreeMap, BTreeSet};

/// The pairs of GPUs (PCI addresses, `0000:00:06.0`, smaller first) that
/// NVLink joins; None where nvidia-smi could not tell.
pub fn joined(host: &Host) -> Option<BTreeSet<(String, String)>> {
    Some(counts(host)?.into_keys().collect())
}

/// As joined, with the number of NVLinks joining each pair (`NV<n>`).
pub fn counts(host: &Host) -> Option<BTreeMap<(String, String), u32>> {
    let index = gpu_index(host)?;
    let matrix = host.program("nvidia-smi-topo-m", || nvidia_smi(&["topo", "-m"]))?;
    pairs(&index, &matrix)
}

/// Whether @count NVLinks between two GPUs (`NV<count>`) are an NVSwitch
/// fabric's: eighteen, every link a Hopper or Blackwell GPU has (an HGX
/// board's `topo -m`, tests/real/h100x4-vm), which no bridge or mesh
/// between two GPUs gives (NV4, NV12 at most). NCCL links such GPUs to an
/// NVS node (topo.cc, ncclTopoAddNvLinks), not to each other.
pub fn through_nvswitch(count: u32) -> bool {
    count >= 18
}

/// NCCL's bandwidth of one NVLink from a GPU of compute capability
/// @major.@minor, in GB/s (graph/topo.h, ncclTopoNVLinkBw, 2.28.9 and
/// 2.30.7): a link of n NVLinks carries n times it (topo.cc,
/// ncclTopoAddNvLinks).
pub fn link_bw(major: u32, minor: u32) -> f64 {
    match (major, minor) {
        (m, _) if m >= 10 => 40.1,
        (9, _) => 20.6,
        (8, 6) => 12.0,
        (8, _) | (7, _) => 20.0,
        (6, _) => 18.0,
        // older: NCCL's default, SM80's
        _ => 20.0,
    }
}

/// Which GPU each of nvidia-smi's indexes is (asked once a run).
pub fn gpu_index(host: &Host) -> Option<BTreeMap<usize, String>> {
    let index = host.program("nvidia-smi-index-busid", || {
        nvidia_smi(&["--query-gpu=index,pci.bus_id", "--format=csv,noheader"])
    })?;
    Some(parse_index(&index))
}

/// `0, 00000000:00:06.0` per line: GPU index to PCI address (sysfs's
/// 4-digit domain, lower case).
fn parse_index(text: &str) -> BTreeMap<usize, String> {
    text.lines()
        .filter_map(|line| {
            let (index, bus_id) = line.split_once(',')?;
            Some((index.trim().parse().ok()?, sysfs_bus_id(bus_id)?))
        })
        .collect()
}

/// The NVLink pairs of `nvidia-smi topo -m`'s matrix: a header row naming
/// `GPU0 GPU1 ...` (tab-separated, ANSI underline around it), then a row
/// per GPU whose cells under the GPU columns are ` X ` (itself), `NV<n>`
/// (n NVLinks) or a PCIe class (PIX ... SYS): each joined pair and its n.
/// None where the matrix or the index is not there in that shape.
fn pairs(index: &BTreeMap<usize, String>, matrix: &str) -> Option<BTreeMap<(String, String), u32>> {
    let clean = |s: &str| s.replace("\u{1b}[4m", "").replace("\u{1b}[0m", "");
    let mut lines = matrix.lines().map(clean);
    let header = lines.find(|l| l.split('\t').any(|c| c.trim() == "GPU0"))?;
    let columns: Vec<Option<usize>> = header
        .split('\t')
        .skip(1)
        .map(|c| c.trim().strip_prefix("GPU")?.parse().ok())
        .collect();
    let mut out = BTreeMap::new();
    let mut rows = 0;
    for line in lines {
        let mut cells = line.split('\t');
        let Some(row) = cells
            .next()
            .and_then(|c| c.trim().strip_prefix("GPU")?.parse::<usize>().ok())
        else {
            continue;
        };
        rows += 1;
        for (cell, column) in cells.zip(&columns) {
            let Some(column) = column else { continue };
            let cell = cell.trim();
            let nv = cell.strip_prefix("NV").and_then(|n| n.parse::<u32>().ok());
            if let Some(n) = nv.filter(|_| *column != row) {
                let (a, b) = (index.get(&row)?.clone(), index.get(column)?.clone());
                out.insert(if a < b { (a, b) } else { (b, a) }, n);
            }
        }
    }
    (rows > 0 && rows == index.len()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lent_four_h100s_are_all_joined() {
        let real = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/real/h100x4-vm/");
        let read = |f: &str| std::fs::read_to_string(format!("{real}{f}")).unwrap();
        let index = parse_index(&read("nvidia-smi-index-busid.txt"));
        assert_eq!(index.get(&0).map(String::as_str), Some("0000:00:06.0"));
        let joined = pairs(&index, &read("nvidia-smi-topo-m.txt")).unwrap();
        assert_eq!(joined.len(), 6, "{joined:?}");
        let pair = ("0000:00:06.0".to_owned(), "0000:00:09.0".to_owned());
        assert_eq!(joined.get(&pair), Some(&18));
    }

    #[test]
    fn pcie_cells_join_nothing_and_a_short_matrix_tells_nothing() {
        let index = parse_index("0, 00000000:03:00.0\n1, 00000000:83:00.0\n");
        let pcie = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSYS\t0-31\nGPU1\tSYS\t X \t32-63\n";
        assert_eq!(pairs(&index, pcie), Some(BTreeMap::new()));
        let bridged = "\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X \n";
        let pair = ("0000:03:00.0".to_owned(), "0000:83:00.0".to_owned());
        assert_eq!(pairs(&index, bridged), Some([(pair, 4)].into()));
        let short = "\tGPU0\tGPU1\nGPU0\t X \tNV4\n";
        assert_eq!(pairs(&index, short), None);
        assert_eq!(pairs(&index, "No devices were found\n"), None);
    }
}
