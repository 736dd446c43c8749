//! The NIC NCCL gives a GPU (issue 57): graph/topo.cc, ncclTopoGetLocalNet
//! (channel 0, NCCL_NETDEVS_POLICY AUTO). NCCL takes the NICs nearest to
//! the GPU (ncclTopoGetLocal: the highest path bandwidth, then the lowest
//! path type) and picks one of them by the GPU's device number, so that
//! GPUs sharing NICs spread over them: with `count` nearest NICs, index
//! `dev` (2.28.9) or `dev % localGpuCount` (2.30.7: the number of GPUs
//! nearest to the first of those NICs), its bits mirrored when `count` is
//! a power of two (topo.h, mirrorBits). The check named the first nearest
//! NIC by name, which on a node whose switches hold two GPUs and two NICs
//! each named half the GPUs with their neighbour's NIC.
//!
//! What is not modelled: bandwidth (NCCL prefers a faster path before a
//! nearer type; the test trees' links are all alike), and a GPU whose
//! GPUDirect RDMA is off (CUDA's word, or NCCL_NET_GDR_LEVEL), for which
//! NCCL routes its NICs through the CPU (paths.cc) and so picks among the
//! NICs of its CPU: there the check names the nearest by name
//! (docs/readiness.md, "Known limits"; tests/common/oracle.rs compares
//! the NIC where NCCL uses GPUDirect RDMA). NCCL's device order is NVML's (PCI
//! bus order), its NIC order the IB plugin's, the verbs library's device
//! list (by name here, as the nccl-harness verbs double lists them).

use crate::topology::Distance;

/// Which release's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// 2.28.9: the GPU's device number.
    Nccl228,
    /// 2.30.7: the device number modulo the GPUs nearest to the first NIC.
    Nccl230,
}

/// NCCL has no NODE: a path through the CPU is PHB however many host
/// bridges it crosses.
fn nccl_type(d: Distance) -> Distance {
    if d == Distance::Node {
        Distance::Phb
    } else {
        d
    }
}

/// topo.h's mirrorBits: the low log2(@pow2) bits of @val, reversed.
pub fn mirror_bits(val: usize, pow2: usize) -> usize {
    let (mut mirror, mut b, mut mb) = (0, 1, pow2 >> 1);
    while b < pow2 {
        if val & b != 0 {
            mirror |= mb;
        }
        b <<= 1;
        mb >>= 1;
    }
    mirror
}

/// The NIC NCCL gives @gpu under @rule. @views: every GPU's address and its
/// NICs as NCCL sees them (name, distance), the NICs in NCCL's order.
pub fn pick(views: &[(String, Vec<(String, Distance)>)], gpu: &str, rule: Rule) -> Option<String> {
    let mut order: Vec<&str> = views.iter().map(|(a, _)| a.as_str()).collect();
    order.sort_unstable();
    let dev = order.iter().position(|a| *a == gpu)?;
    let (_, mine) = views.iter().find(|(a, _)| a == gpu)?;
    let nearest = mine.iter().map(|(_, d)| nccl_type(*d)).min()?;
    let local: Vec<&str> = mine
        .iter()
        .filter(|(_, d)| nccl_type(*d) == nearest)
        .map(|(n, _)| n.as_str())
        .collect();
    let count = local.len();
    let mut net = match rule {
        Rule::Nccl228 => dev,
        Rule::Nccl230 => {
            // ncclTopoGetLocal(NET, localNets[0], GPU): the GPUs nearest to
            // that NIC, from its side.
            let to_first = |(_, v): &(String, Vec<(String, Distance)>)| {
                v.iter()
                    .find(|(n, _)| n == local[0])
                    .map(|(_, d)| nccl_type(*d))
            };
            let best = views.iter().filter_map(to_first).min()?;
            let gpus = views.iter().filter(|v| to_first(v) == Some(best)).count();
            dev % gpus.max(1)
        }
    };
    if count.is_power_of_two() {
        net = mirror_bits(net, count);
    }
    Some(local[net % count].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Distance::*;

    fn views(rows: &[(&str, &[(&str, Distance)])]) -> Vec<(String, Vec<(String, Distance)>)> {
        rows.iter()
            .map(|(g, v)| {
                (
                    g.to_string(),
                    v.iter().map(|(n, d)| (n.to_string(), *d)).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn mirror_bits_is_ncclls() {
        // topo.h: for 4 NICs, devices 0..4 take 0, 2, 1, 3.
        let got: Vec<usize> = (0..4).map(|d| mirror_bits(d, 4)).collect();
        assert_eq!(got, [0, 2, 1, 3]);
        assert_eq!(mirror_bits(5, 2), 1);
    }

    #[test]
    fn two_gpus_sharing_two_nics_take_one_each() {
        // A flattened Broadcom switch holding GPUs 0 and 1 and two NICs.
        let v = views(&[
            (
                "0000:01:00.0",
                &[("mlx5_0", Pix), ("mlx5_1", Pix), ("mlx5_2", Sys)],
            ),
            (
                "0000:02:00.0",
                &[("mlx5_0", Pix), ("mlx5_1", Pix), ("mlx5_2", Sys)],
            ),
        ]);
        for rule in [Rule::Nccl228, Rule::Nccl230] {
            assert_eq!(pick(&v, "0000:01:00.0", rule).as_deref(), Some("mlx5_0"));
            assert_eq!(pick(&v, "0000:02:00.0", rule).as_deref(), Some("mlx5_1"));
        }
        // NODE and PHB are one type to NCCL.
        let v = views(&[("0000:01:00.0", &[("mlx5_0", Node), ("mlx5_1", Phb)])]);
        assert_eq!(
            pick(&v, "0000:01:00.0", Rule::Nccl228).as_deref(),
            Some("mlx5_0")
        );
    }
}
