//! PXN: NCCL reaching a NIC through another GPU that NVLink joins to this
//! one, where this GPU's own path to every NIC crosses a CPU (graph/
//! paths.cc, ncclTopoComputePaths, 2.28.9 and 2.30.7: for NIC n, its local
//! GPU p relays for GPU g when p is within PXB of n, NVLink joins p and g,
//! and g's own path to n goes through a CPU (or p's has more bandwidth);
//! ncclTopoCheckGdr then judges GPUDirect RDMA by p's distance to n).
//! With `NCCL_PXN_C2C` (default 1 in both releases) the peer may also be
//! P2C from the NIC: over its C2C link to its CPU, whose PCIe has the NIC
//! (NCCL's `pxnType`; c2c.rs), and GPUDirect RDMA is then judged by that
//! P2C path. A NIC's local GPU is NCCL's own choice, given by the caller
//! (nccl_local_net::local_gpu, ncclTopoGetLocalGpu: the first nearest GPU
//! whose NIC on some channel it is; none, and the NIC relays nothing).
//! Left out, and said in docs/diagnostics.md: the bandwidth clause (the
//! check never relays a GPU that has a NIC within PXB itself), and from
//! 2.30 that the relay must also be able to read GPU memory for the NIC
//! (`NCCL_NET_GDR_READ=0` stops PXN there). NCCL's own code judges the same trees in
//! ci/test-nccl.sh (readiness/tests/nccl_oracle.rs).

use crate::topology::Distance;
use std::collections::BTreeSet;

/// A GPU's distances, as NCCL sees them, to each NIC NCCL takes, by GPU
/// address and NIC name (both sorted).
pub type Views = [(String, Vec<(String, Distance)>)];

/// Where NCCL relays a GPU's traffic through PXN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    /// The peer GPU's address.
    pub peer: String,
    /// The NIC it reaches.
    pub nic: String,
    /// The peer's distance to that NIC, which NCCL judges GDR by.
    pub distance: Distance,
    /// Whether NVLink is known to join them (nvidia-smi answered), and
    /// where the peer reaches the NIC over C2C, that its link is known to
    /// be up; false: NCCL relays only if they are, which the check could
    /// not see.
    pub seen: bool,
    /// The peer reaches the NIC over its C2C link (P2C; @distance is then
    /// sysfs's, PHB or NODE).
    pub c2c: bool,
}

/// The relay NCCL takes for @gpu, if any: none where PXN is off
/// (@disabled), where the GPU has a NIC within PXB itself, or where no
/// NIC's local GPU within PXB of it (or P2C: @over_c2c says whether a
/// peer's C2C link carries it to a NIC on its own CPU, None where that is
/// not known) is (or, with @joined unknown, may be) joined to @gpu by
/// NVLink.
pub fn relay(
    gpu: &str,
    views: &Views,
    joined: Option<&BTreeSet<(String, String)>>,
    disabled: bool,
    over_c2c: &dyn Fn(&str) -> Option<bool>,
    local_gpu: &dyn Fn(&str) -> Option<String>,
) -> Option<Relay> {
    if disabled {
        return None;
    }
    let (_, own) = views.iter().find(|(g, _)| g == gpu)?;
    if own.iter().any(|(_, d)| *d <= Distance::Pxb) || own.is_empty() {
        return None;
    }
    let linked = |peer: &str| {
        let pair = if gpu < peer {
            (gpu.to_owned(), peer.to_owned())
        } else {
            (peer.to_owned(), gpu.to_owned())
        };
        joined.map(|j| j.contains(&pair))
    };
    own.iter()
        .filter_map(|(nic, _)| {
            // the NIC's local GPU, as NCCL chooses it
            let peer = local_gpu(nic)?;
            let (_, ds) = views.iter().find(|(g, _)| *g == peer)?;
            let distance = ds.iter().find(|(n, _)| n == nic).map(|(_, d)| *d)?;
            if peer == gpu {
                return None;
            }
            // P2C: a NIC on the peer's own CPU, the peer's C2C link up.
            let (c2c, c2c_seen) = match distance {
                Distance::Pix | Distance::Pxb => (false, true),
                Distance::Phb | Distance::Node => match over_c2c(&peer) {
                    Some(true) => (true, true),
                    Some(false) => return None,
                    None => (true, false),
                },
                Distance::Sys => return None,
            };
            let seen = match linked(&peer) {
                Some(true) => c2c_seen,
                Some(false) => return None,
                None => false,
            };
            Some(Relay {
                peer,
                nic: nic.clone(),
                distance,
                seen,
                c2c,
            })
        })
        .min_by_key(|r| (r.c2c, r.distance))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Distance::*;

    fn no_c2c(_: &str) -> Option<bool> {
        Some(false)
    }

    /// The local GPU of every NIC in these tests: `a`, beside each.
    fn a(_: &str) -> Option<String> {
        Some("a".to_owned())
    }

    fn views() -> Vec<(String, Vec<(String, Distance)>)> {
        // GPU a has mlx5_0 beside it; GPU b is across the CPUs from it.
        vec![
            ("a".into(), vec![("mlx5_0".into(), Pix)]),
            ("b".into(), vec![("mlx5_0".into(), Sys)]),
        ]
    }

    #[test]
    fn a_far_gpu_is_relayed_by_its_nvlink_peer() {
        let joined: BTreeSet<_> = [("a".to_owned(), "b".to_owned())].into();
        let r = relay("b", &views(), Some(&joined), false, &no_c2c, &a).unwrap();
        assert_eq!(
            (r.peer.as_str(), r.nic.as_str(), r.distance, r.seen),
            ("a", "mlx5_0", Pix, true)
        );
        // not for the near GPU, not without NVLink, not with PXN off
        assert_eq!(
            relay("a", &views(), Some(&joined), false, &no_c2c, &a),
            None
        );
        assert_eq!(
            relay("b", &views(), Some(&BTreeSet::new()), false, &no_c2c, &a),
            None
        );
        assert_eq!(relay("b", &views(), Some(&joined), true, &no_c2c, &a), None);
        // NVLink unknown: a relay NCCL may take
        assert!(!relay("b", &views(), None, false, &no_c2c, &a).unwrap().seen);
        // a NIC no GPU takes on any channel has no local GPU: no relay
        assert_eq!(
            relay("b", &views(), Some(&joined), false, &no_c2c, &|_| None),
            None
        );
    }

    #[test]
    fn a_peer_beyond_pxb_relays_nothing() {
        let v = vec![
            ("a".to_owned(), vec![("mlx5_0".to_owned(), Phb)]),
            ("b".to_owned(), vec![("mlx5_0".to_owned(), Sys)]),
        ];
        assert_eq!(relay("b", &v, None, false, &no_c2c, &a), None);
        // unless the peer's C2C link carries it: P2C
        let joined: BTreeSet<_> = [("a".to_owned(), "b".to_owned())].into();
        let r = relay("b", &v, Some(&joined), false, &|_| Some(true), &a).unwrap();
        assert_eq!(
            (r.peer.as_str(), r.distance, r.c2c, r.seen),
            ("a", Phb, true, true)
        );
        assert!(
            !relay("b", &v, Some(&joined), false, &|_| None, &a)
                .unwrap()
                .seen
        );
    }
}
