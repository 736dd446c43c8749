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
//! The relay is decided NIC by NIC: a GPU with a NIC within PXB of its
//! own is relayed to another NIC whose own path crosses a CPU, and to one
//! within PXB where the peer's path is wider (a topology file's slow
//! links); ncclTopoGetLocalNet then weighs the PXN paths among the GPU's
//! own (check.rs, settle). Left out, and said in docs/diagnostics.md:
//! from 2.30 that the relay must also be able to read GPU memory for the
//! NIC (`NCCL_NET_GDR_READ=0` stops PXN there). NCCL's own code judges the same trees in
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
/// (@disabled), or where no NIC (whose path from @gpu crosses a CPU, or
/// is narrower than its local GPU's: @widths) has a local GPU within PXB of it (or P2C: @over_c2c says whether a
/// peer's C2C link carries it to a NIC on its own CPU, None where that is
/// not known) is (or, with @joined unknown, may be) joined to @gpu by
/// NVLink. Of the relays, and the GPU's own paths to the NICs no peer
/// relays, NCCL takes the widest (@widths; outweighs).
pub fn relay(
    gpu: &str,
    views: &Views,
    joined: Option<&BTreeSet<(String, String)>>,
    disabled: bool,
    over_c2c: &dyn Fn(&str) -> Option<bool>,
    local_gpu: &dyn Fn(&str) -> Option<String>,
    widths: &Widths,
) -> Relayed {
    let none = Relayed {
        chosen: None,
        outweighed: Vec::new(),
        candidates: Vec::new(),
    };
    if disabled {
        return none;
    }
    let Some((_, own)) = views.iter().find(|(g, _)| g == gpu) else {
        return none;
    };
    if own.is_empty() {
        return none;
    }
    let linked = |peer: &str| {
        let pair = if gpu < peer {
            (gpu.to_owned(), peer.to_owned())
        } else {
            (peer.to_owned(), gpu.to_owned())
        };
        joined.map(|j| j.contains(&pair))
    };
    let relays = own
        .iter()
        .filter_map(|(nic, mine)| {
            // the NIC's local GPU, as NCCL chooses it
            let peer = local_gpu(nic)?;
            let (_, ds) = views.iter().find(|(g, _)| *g == peer)?;
            let distance = ds.iter().find(|(n, _)| n == nic).map(|(_, d)| *d)?;
            if peer == gpu {
                return None;
            }
            // paths.cc's clause (4): the GPU's own path to the NIC crosses
            // a CPU (beyond PXN: PHB, SYS), or the peer's is wider.
            if *mine <= Distance::Pxb && (widths.peer)(&peer, nic) <= (widths.own)(nic) {
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
        .collect::<Vec<Relay>>();
    let relayed = |r: &Relay| (widths.relayed)(r).unwrap_or(f64::INFINITY);
    let own_paths: Vec<(f64, Distance)> = own
        .iter()
        .filter(|(nic, _)| !relays.iter().any(|r| r.nic == *nic))
        .map(|(nic, d)| ((widths.own)(nic), *d))
        .collect();
    let own_best = own_paths.iter().map(|p| p.0).fold(0.0, f64::max);
    let own_near = own_paths
        .iter()
        .any(|(bw, d)| *bw == own_best && *d <= Distance::Pxb);
    let chosen = relays
        .iter()
        .min_by(|a, b| {
            relayed(b)
                .total_cmp(&relayed(a))
                .then((a.c2c, a.distance).cmp(&(b.c2c, b.distance)))
        })
        // Against the GPU's own path within PXB, a relay whose NVLinks are
        // not known is bounded by the peer's path to the NIC (paths.cc,
        // addInterStep: the narrower of the two), which must be wider.
        .filter(|r| {
            let bound = if own_near && (widths.relayed)(r).is_none() {
                (widths.peer)(&r.peer, &r.nic)
            } else {
                f64::INFINITY
            };
            outweighs(relayed(r), bound, own_best, own_near)
        })
        .cloned();
    // The relayed paths narrower than the GPU's widest: NCCL's NIC for
    // the GPU is none of them.
    let best = chosen.as_ref().map_or(own_best, relayed);
    let outweighed = relays
        .iter()
        .filter(|r| relayed(r) < best)
        .map(|r| r.nic.clone())
        .collect();
    Relayed {
        chosen,
        outweighed,
        candidates: relays,
    }
}

/// What relay found for a GPU.
#[derive(Debug, PartialEq)]
pub struct Relayed {
    /// The relay NCCL takes.
    pub chosen: Option<Relay>,
    /// NICs a peer would relay through a path narrower than NCCL's
    /// choice: NCCL gives the GPU none of them (ncclTopoGetLocalNet).
    pub outweighed: Vec<String>,
    /// Every NIC a peer relays for the GPU, chosen or not: where their
    /// paths' bandwidths are known, NCCL's own pick among the GPU's paths
    /// decides (check.rs, settle).
    pub candidates: Vec<Relay>,
}

/// The bandwidths NCCL weighs a GPU's paths by (ncclTopoGetLocalNet):
/// a relay's path (outweighs; None: not known, and the relay is taken)
/// and the GPU's own path to a NIC by name.
pub struct Widths<'a> {
    pub relayed: &'a dyn Fn(&Relay) -> Option<f64>,
    pub own: &'a dyn Fn(&str) -> f64,
    /// A peer GPU's path bandwidth to a NIC (peer, NIC), which paths.cc
    /// weighs against the GPU's own to that NIC.
    pub peer: &'a dyn Fn(&str, &str) -> f64,
}

impl Widths<'_> {
    /// Bandwidths not known: a relay is taken where every NIC of the GPU's
    /// own is beyond PXB, none where one is within PXB.
    pub const UNKNOWN: Widths<'static> = Widths {
        relayed: &|_| None,
        own: &|_| 0.0,
        peer: &|_, _| 0.0,
    };
}

/// Whether NCCL gives a GPU the relay rather than its own best NIC
/// (@own_best: that path's bandwidth): ncclTopoGetLocalNet weighs
/// bandwidth first (topo.cc, ncclTopoGetLocal), and a relayed path is as
/// wide as the narrower of the NVLinks to the peer (@nvlink_bw: their
/// count times nvlink::link_bw) and the peer's path to the NIC
/// (@peer_to_nic; paths.cc, addInterStep). At equal bandwidth PXN wins
/// over PHB and SYS (its type, PATH_PXN, is nearer) and loses to PIX and
/// PXB (@own_near: the GPU's best own path is within PXB). NVSwitches (18
/// links) outweigh any PCIe path; a bridge's single link may not.
pub fn outweighs(nvlink_bw: f64, peer_to_nic: f64, own_best: f64, own_near: bool) -> bool {
    let relayed = nvlink_bw.min(peer_to_nic);
    relayed > own_best || (relayed == own_best && !own_near)
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
        // relay over views(), NIC mlx5_0's local GPU a, bandwidths unknown
        let chosen = |gpu: &str, joined: Option<&BTreeSet<(String, String)>>, off: bool| {
            relay(gpu, &views(), joined, off, &no_c2c, &a, &Widths::UNKNOWN).chosen
        };
        let r = chosen("b", Some(&joined), false).unwrap();
        assert_eq!(
            (r.peer.as_str(), r.nic.as_str(), r.distance, r.seen),
            ("a", "mlx5_0", Pix, true)
        );
        // not for the near GPU, not without NVLink, not with PXN off
        assert_eq!(chosen("a", Some(&joined), false), None);
        assert_eq!(chosen("b", Some(&BTreeSet::new()), false), None);
        assert_eq!(chosen("b", Some(&joined), true), None);
        // NVLink unknown: a relay NCCL may take
        assert!(
            !relay("b", &views(), None, false, &no_c2c, &a, &Widths::UNKNOWN)
                .chosen
                .unwrap()
                .seen
        );
        // a NIC no GPU takes on any channel has no local GPU: no relay
        assert_eq!(
            relay(
                "b",
                &views(),
                Some(&joined),
                false,
                &no_c2c,
                &|_| None,
                &Widths::UNKNOWN
            )
            .chosen,
            None
        );
    }

    #[test]
    fn a_narrow_nvlink_loses_to_a_wider_own_path() {
        // one Hopper NVLink (20.6 GB/s) against a 40 GB/s path across the
        // CPUs: NCCL takes its own NIC; eighteen (NVSwitches) relay
        assert!(!outweighs(20.6, 48.0, 40.0, false));
        assert!(outweighs(18.0 * 20.6, 48.0, 40.0, false));
        // a tie goes to PXN over a path across the CPUs, to the GPU's own
        // within PXB; the peer's own link may be the narrower
        assert!(outweighs(41.2, 40.0, 40.0, false));
        assert!(!outweighs(41.2, 40.0, 40.0, true));
        assert!(!outweighs(370.8, 24.0, 40.0, false));
        // a wider relay outweighs the GPU's own PIX path (a topology
        // file's 16 GT/s link: 24 GB/s)
        assert!(outweighs(370.8, 48.0, 24.0, true));
        // in relay: b's own mlx5_1 across the CPUs at 40 GB/s against
        // mlx5_0 through a over one link; through a over eighteen
        let v = vec![
            (
                "a".to_owned(),
                vec![("mlx5_0".to_owned(), Pix), ("mlx5_1".to_owned(), Sys)],
            ),
            (
                "b".to_owned(),
                vec![("mlx5_0".to_owned(), Sys), ("mlx5_1".to_owned(), Sys)],
            ),
        ];
        let joined: BTreeSet<_> = [("a".to_owned(), "b".to_owned())].into();
        let local = |nic: &str| (nic == "mlx5_0").then(|| "a".to_owned());
        let own = |_: &str| 40.0;
        for (links, relayed) in [(1.0, false), (18.0, true)] {
            let width = move |_: &Relay| Some(links * 20.6);
            let widths = Widths {
                relayed: &width,
                own: &own,
                peer: &|_, _| 48.0,
            };
            let r = relay("b", &v, Some(&joined), false, &no_c2c, &local, &widths);
            assert_eq!(r.chosen.is_some(), relayed, "{links} links");
            let lost = if relayed {
                vec![]
            } else {
                vec!["mlx5_0".to_owned()]
            };
            assert_eq!(r.outweighed, lost);
        }
    }

    #[test]
    fn a_gpu_with_its_own_nic_within_pxb_is_relayed_only_where_the_peer_is_wider() {
        // b has mlx5_1 beside it (PIX) and mlx5_0 beside a, which NVLink
        // joins to b; b's own path to mlx5_0 is PIX too (a topology file
        // placing both below one switch), at @own GB/s, a's at 48.
        let v = vec![
            (
                "a".to_owned(),
                vec![("mlx5_0".to_owned(), Pix), ("mlx5_1".to_owned(), Sys)],
            ),
            (
                "b".to_owned(),
                vec![("mlx5_0".to_owned(), Pix), ("mlx5_1".to_owned(), Pix)],
            ),
        ];
        let joined: BTreeSet<_> = [("a".to_owned(), "b".to_owned())].into();
        let local = |nic: &str| (nic == "mlx5_0").then(|| "a".to_owned());
        let peer = |p: &str, n: &str| if (p, n) == ("a", "mlx5_0") { 48.0 } else { 0.0 };
        for (own_bw, relayed) in [(24.0, true), (48.0, false)] {
            let own = move |_: &str| own_bw;
            let widths = Widths {
                relayed: &|_| Some(370.8),
                own: &own,
                peer: &peer,
            };
            let r = relay("b", &v, Some(&joined), false, &no_c2c, &local, &widths);
            assert_eq!(
                r.candidates.len(),
                usize::from(relayed),
                "own {own_bw} GB/s"
            );
            assert_eq!(r.chosen.is_some(), relayed, "own {own_bw} GB/s");
        }
        // bandwidths unknown: within PXB, not relayed
        let r = relay(
            "b",
            &v,
            Some(&joined),
            false,
            &no_c2c,
            &local,
            &Widths::UNKNOWN,
        );
        assert_eq!(r.chosen, None);
        // NVLinks not known (nvidia-smi did not answer), the PCI paths
        // known: a relay is bounded by the peer's path, so it wins only
        // where that is wider than the GPU's own within PXB
        for (own_bw, relayed) in [(24.0, true), (48.0, false)] {
            let own = move |_: &str| own_bw;
            let widths = Widths {
                relayed: &|_| None,
                own: &own,
                peer: &peer,
            };
            let r = relay("b", &v, None, false, &no_c2c, &local, &widths);
            assert_eq!(
                r.chosen.is_some(),
                relayed,
                "own {own_bw} GB/s, NVLinks unknown"
            );
        }
    }

    #[test]
    fn a_peer_beyond_pxb_relays_nothing() {
        let v = vec![
            ("a".to_owned(), vec![("mlx5_0".to_owned(), Phb)]),
            ("b".to_owned(), vec![("mlx5_0".to_owned(), Sys)]),
        ];
        assert_eq!(
            relay("b", &v, None, false, &no_c2c, &a, &Widths::UNKNOWN).chosen,
            None
        );
        // unless the peer's C2C link carries it: P2C
        let joined: BTreeSet<_> = [("a".to_owned(), "b".to_owned())].into();
        let r = relay(
            "b",
            &v,
            Some(&joined),
            false,
            &|_| Some(true),
            &a,
            &Widths::UNKNOWN,
        )
        .chosen
        .unwrap();
        assert_eq!(
            (r.peer.as_str(), r.distance, r.c2c, r.seen),
            ("a", Phb, true, true)
        );
        assert!(
            !relay(
                "b",
                &v,
                Some(&joined),
                false,
                &|_| None,
                &a,
                &Widths::UNKNOWN
            )
            .chosen
            .unwrap()
            .seen
        );
    }
}
