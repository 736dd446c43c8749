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
//! The devices are NCCL's: an adapter's functions merged into one
//! (nccl_ib::merged), in its IB plugin's order (Rule::order).
//!
//! Bandwidth first, as NCCL weighs it (nccl_bandwidth.rs). What is not
//! modelled: a GPU whose
//! GPUDirect RDMA is off (CUDA's word, or NCCL_NET_GDR_LEVEL), for which
//! NCCL routes its NICs through the CPU (paths.cc) and so picks among the
//! NICs of its CPU: there the check names the nearest by name
//! (docs/readiness.md, "Known limits"; tests/common/oracle.rs compares
//! the NIC where NCCL uses GPUDirect RDMA). NCCL's device order is NVML's (PCI
//! bus order), its NIC order the IB plugin's, the verbs library's device
//! list (by name here, as the nccl-harness verbs double lists them).

use crate::rdma::Nic;
use crate::topology::Distance;

/// Which release's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// 2.28.9: the GPU's device number.
    Nccl228,
    /// 2.30.7: the device number modulo the GPUs nearest to the first NIC.
    Nccl230,
}

impl Rule {
    /// The devices NCCL takes (@taken, by name) in the order its IB plugin
    /// lists them, which decides which NIC a device number picks and how a
    /// merged device is named (nccl_ib::merged). 2.28.9: the verbs
    /// library's list (net_ib.cc, ncclIbInitDevices), which this check and
    /// the nccl-harness verbs double take by name; 2.30.7: sorted by the
    /// PCI address of each device's function (net_ib/init.cc,
    /// NCCL_IB_DEVICE_PCI_ORDER, default 1: ncclIbCompareDevs over
    /// busIdToInt64 of its realpath's last part), so `mlx5_9` before
    /// `mlx5_10` where the bus numbers say so.
    /// How many of an adapter's functions NCCL merges into one device at
    /// most: graph/topo.cc, ncclTopoAutoMerge, stops a device at
    /// NCCL_NET_MAX_DEVS_PER_NIC (2.28.9: 4, include/plugin/nccl_net.h);
    /// 2.30.7 at netInfo.maxDevsPerNic, 8 for a plugin of interface v12
    /// (NCCL_NET_MAX_DEVS_PER_NIC_V12, include/plugin/net/net_v12.h),
    /// which its own IB plugin is (plugin/net.cc tries v12 first).
    pub fn max_devs_per_nic(self) -> usize {
        match self {
            Rule::Nccl228 => 4,
            Rule::Nccl230 => 8,
        }
    }

    pub fn order(self, taken: &[Nic]) -> Vec<Nic> {
        let mut out = taken.to_vec();
        if self == Rule::Nccl230 {
            out.sort_by_key(|n| bus_id(&n.address));
        }
        out
    }
}

/// Where NCCL's topology puts a device, for the order of its NET nodes
/// (graph/topo.cc, ncclTopoGetSystemFromXml: a depth-first walk of the
/// XML, so ncclTopoGetLocalNet's device numbers index that order): the
/// CPU it hangs from, then the PCI addresses from the root port down to
/// the adapter's function 0 (where NCCL's IB plugin places it), which
/// graph/xml.cc keeps sorted under each parent ("Keep PCI sub devices
/// ordered by PCI Bus ID", strcmp). A device NCCL finds nowhere (an
/// Intel VMD domain's) is on the CPU of NUMA id -1 alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The `numa_node` of its CPU, -1 where unset.
    pub numa: i64,
    /// Root port first, the adapter last.
    pub chain: Vec<String>,
}

/// @devices (NCCL's, in its IB plugin's order, each with its Place) in
/// the order NCCL's topology lists them. CPUs come in the order NCCL
/// first reaches them (xml.cc adds a `cpu` node where a device's path
/// first ends at a root complex): each rank's XML holds its own GPU, then
/// the nets in plugin order, and the node's is local rank 0's with the
/// others fused after it (topo.cc, ncclTopoGetSystem; ncclTopoFuseXml
/// appends what is new), so @gpu_numas (rank 0's GPU's) first, then the
/// devices'. Devices of one adapter keep the plugin's order, those NCCL
/// left alone before its merged ones: ncclTopoProcessNet populates the
/// physical devices first and each merged device after them, as a new
/// device numbered after every physical one (graph/topo.cc,
/// ncclTopoPopulateNics with startIndex at the physical count), and
/// drops the merged members (`keep` 0).
pub fn topology_order(devices: Vec<(Nic, Place)>, gpu_numas: &[i64]) -> Vec<Nic> {
    let mut cpus: Vec<i64> = Vec::new();
    for numa in gpu_numas.iter().chain(devices.iter().map(|(_, p)| &p.numa)) {
        if !cpus.contains(numa) {
            cpus.push(*numa);
        }
    }
    let mut keyed: Vec<(usize, Vec<String>, bool, usize, Nic)> = devices
        .into_iter()
        .enumerate()
        .map(|(i, (nic, place))| {
            let cpu = cpus.iter().position(|c| *c == place.numa).unwrap_or(0);
            let merged = nic.name.contains('+');
            (cpu, place.chain, merged, i, nic)
        })
        .collect();
    keyed.sort_by(|a, b| (a.0, &a.1, a.2, a.3).cmp(&(b.0, &b.1, b.2, b.3)));
    keyed.into_iter().map(|(_, _, _, _, nic)| nic).collect()
}

/// The PCI nodes NCCL's XML holds for a device at the end of @chain (its
/// sysfs path from the root port down, the device last), from the one
/// below the CPU down: xml.cc's ncclTopoGetXmlFromSys climbs the sysfs
/// path two directories at a time ("Go up one level in the PCI tree.
/// Rewind two "/"", skipping each switch's downstream port), and hangs a
/// node on the CPU where the next directory up is the root complex. So
/// the device, its grandparent and every second bridge above: a root port
/// only where it is an even number of levels above the device. Two
/// devices are ordered by these nodes (each parent's children sorted by
/// bus id as they are inserted), not by their root ports: a NIC directly
/// below a root port hangs on the CPU by its own bus id, and one a switch
/// deeper by its root port's. Where a topology file places some devices
/// their nodes sit beside these, so only NCCL's own nodes compare right.
pub fn xml_chain(chain: &[String]) -> Vec<String> {
    let n = chain.len();
    chain
        .iter()
        .enumerate()
        .filter(|(i, _)| (n - 1 - i) % 2 == 0)
        .map(|(_, c)| c.clone())
        .collect()
}

/// misc/utils.cc's busIdToInt64: the hex digits of @address, `:` and `.`
/// skipped, up to the first other character, sixteen at most.
pub fn bus_id(address: &str) -> i64 {
    let hex: String = address
        .chars()
        .filter(|c| *c != ':' && *c != '.')
        .take_while(char::is_ascii_hexdigit)
        .take(16)
        .collect();
    i64::from_str_radix(&hex, 16).unwrap_or(0)
}

/// A GPU's path to a NIC as NCCL types it (graph/topo.h, PATH_*): a PCI
/// path, or one through an NVLink peer (PATH_PXN, which ranks after PIX
/// and PXB and before PHB and SYS: paths.cc gives it where a peer's path
/// to the NIC is within PXB and the GPU's own crosses a CPU or is
/// narrower; pxn.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathType {
    Pci(Distance),
    Pxn,
}

impl PathType {
    /// NCCL's order, nearest first. NCCL has no NODE: a path through the
    /// CPU is PHB however many host bridges it crosses.
    fn rank(self) -> u8 {
        match self {
            PathType::Pci(Distance::Pix) => 0,
            PathType::Pci(Distance::Pxb) => 1,
            PathType::Pxn => 2,
            PathType::Pci(Distance::Phb | Distance::Node) => 3,
            PathType::Pci(Distance::Sys) => 4,
        }
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

/// A GPU's address and its NICs as NCCL sees them: name, path type and
/// path bandwidth (nccl_bandwidth.rs), the NICs in NCCL's order.
pub type View = (String, Vec<(String, Distance, f64)>);

/// ncclTopoGetLocal's choice among @paths: the highest bandwidth, then
/// the nearest type; the indexes chosen.
fn best(paths: &[(PathType, f64)]) -> Vec<usize> {
    let (mut max_bw, mut min_type) = (0.0, None);
    let mut out = Vec::new();
    for (i, &(t, bw)) in paths.iter().enumerate() {
        let d = t.rank();
        if bw > max_bw || (bw == max_bw && min_type.is_none_or(|m| d < m)) {
            max_bw = bw;
            min_type = Some(d);
            out.clear();
        }
        if bw == max_bw && Some(d) == min_type {
            out.push(i);
        }
    }
    out
}

/// A GPU's paths to its NICs, each with NCCL's path type.
type TypedPaths = Vec<(String, PathType, f64)>;

/// A GPU's paths in @view as NCCL types them before PXN.
fn typed(view: &[(String, Distance, f64)]) -> TypedPaths {
    view.iter()
        .map(|(n, d, bw)| (n.clone(), PathType::Pci(*d), *bw))
        .collect()
}

/// The NIC NCCL gives @gpu under @rule. @views: every GPU's (View).
pub fn pick(views: &[View], gpu: &str, rule: Rule) -> Option<String> {
    let (_, mine) = views.iter().find(|(a, _)| a == gpu)?;
    pick_on(views, gpu, &typed(mine), rule, 0)
}

/// As pick, with @gpu's own paths @mine in place of its view's: its paths
/// after PXN relays some (paths.cc replaces the GPU's paths to those
/// NICs, not the NICs' paths to the GPUs, which the rule also reads).
pub fn pick_with(
    views: &[View],
    gpu: &str,
    mine: &[(String, PathType, f64)],
    rule: Rule,
) -> Option<String> {
    pick_on(views, gpu, mine, rule, 0)
}

/// The GPU PXN relays @nic's traffic through (graph/topo.cc,
/// ncclTopoGetLocalGpu, 2.28.9 and 2.30.7): of the GPUs nearest to the
/// NIC, in NCCL's GPU order, the first whose NIC on some channel (of
/// MAXCHANNELS, 64) is @nic; none where no such GPU takes it on any
/// channel (then paths.cc relays nothing through it).
pub fn local_gpu(views: &[View], nic: &str, rule: Rule) -> Option<String> {
    let to_nic: Vec<(PathType, f64)> = views
        .iter()
        .map(|(_, v)| {
            v.iter()
                .find(|(n, _, _)| n == nic)
                .map_or((PathType::Pci(Distance::Sys), 0.0), |(_, d, bw)| {
                    (PathType::Pci(*d), *bw)
                })
        })
        .collect();
    let nearest: Vec<&str> = best(&to_nic)
        .into_iter()
        .filter(|&i| views[i].1.iter().any(|(n, _, _)| n == nic))
        .map(|i| views[i].0.as_str())
        .collect();
    // Each nearest GPU's own paths, typed once for all the channels.
    let paths: Vec<(&str, TypedPaths)> = nearest
        .iter()
        .filter_map(|g| {
            let (_, mine) = views.iter().find(|(a, _)| a == g)?;
            Some((*g, typed(mine)))
        })
        .collect();
    (0..64).find_map(|channel| {
        paths
            .iter()
            .find(|(g, mine)| pick_on(views, g, mine, rule, channel).as_deref() == Some(nic))
            .map(|(g, _)| g.to_string())
    })
}

/// ncclTopoGetLocalNet for @gpu on @channel: its device number's NIC
/// among the nearest, moved on by the channel within the NICs each GPU
/// shares (netsPerGpu, NCCL_NETDEVS_POLICY's default AUTO: the nearest
/// NICs over the GPUs nearest to the first of them, rounded up).
fn pick_on(
    views: &[View],
    gpu: &str,
    mine: &[(String, PathType, f64)],
    rule: Rule,
    channel: usize,
) -> Option<String> {
    let mut order: Vec<&str> = views.iter().map(|(a, _)| a.as_str()).collect();
    order.sort_unstable();
    let dev = order.iter().position(|a| *a == gpu)?;
    let paths: Vec<(PathType, f64)> = mine.iter().map(|(_, t, bw)| (*t, *bw)).collect();
    let local: Vec<&str> = best(&paths)
        .into_iter()
        .map(|i| mine[i].0.as_str())
        .collect();
    let count = local.len();
    if count == 0 {
        return None;
    }
    // ncclTopoGetLocal(NET, localNets[0], GPU): the GPUs nearest to
    // that NIC, from its side (a tree's paths are the same both ways).
    let to_first: Vec<(PathType, f64)> = views
        .iter()
        .filter_map(|(_, v)| {
            v.iter()
                .find(|(n, _, _)| n == local[0])
                .map(|(_, d, bw)| (PathType::Pci(*d), *bw))
        })
        .collect();
    let local_gpus = best(&to_first).len().max(1);
    let mut net = match rule {
        Rule::Nccl228 => dev,
        Rule::Nccl230 => dev % local_gpus,
    };
    if count.is_power_of_two() {
        net = mirror_bits(net, count);
    }
    net += channel % count.div_ceil(local_gpus);
    Some(local[net % count].to_owned())
}

/// A GPU's way to one CPU as NCCL's paths have it (paths.cc,
/// ncclTopoSetPaths): the CPU's NUMA id, its index in NCCL's CPU order,
/// the path's bandwidth and its hops (links).
#[derive(Debug, Clone, PartialEq)]
pub struct CpuPath {
    pub numa: i64,
    pub index: usize,
    pub bw: f64,
    pub hops: usize,
    /// The NVLink peer the path goes through, None: the GPU's own PCIe.
    pub via: Option<String>,
}

/// The CPU NCCL calls a GPU's local one among @paths (each a CPU's best
/// path, every one PHB: a route through another CPU is SYS and never
/// chosen): paths.cc's ncclGetLocalCpu. 2.28.9: the fewest hops, the
/// first CPU on a tie; a peer GPU directly below its CPU reaches that CPU
/// in two hops over NVLink (ncclTopoSetPaths routes through one GPU only
/// from a node one hop away), which ties with or beats the GPU's own PCIe
/// path through switches. 2.30.7: the GPU's own CPU, as NCCL 2.30.7
/// itself chose in every shape the nccl-harness was given (a tie at two
/// hops, a GPU two switches deep, two and four NVLinks: nccl_oracle.rs),
/// though its paths.cc (ncclTopoGetLocal's widest, then fewer hops) reads
/// as if a peer's CPU could win a tie (docs/nccl-harness.md).
pub fn local_cpu(paths: &[CpuPath], rule: Rule) -> Option<&CpuPath> {
    if rule == Rule::Nccl230 {
        return paths.iter().find(|p| p.via.is_none());
    }
    let mut by_index: Vec<&CpuPath> = paths.iter().collect();
    by_index.sort_by_key(|p| p.index);
    let mut best = *by_index.first()?;
    for p in &by_index[1..] {
        if p.hops < best.hops {
            best = p;
        }
    }
    Some(best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Distance::*;

    fn views(rows: &[(&str, &[(&str, Distance)])]) -> Vec<View> {
        rows.iter()
            .map(|(g, v)| {
                (
                    g.to_string(),
                    v.iter().map(|(n, d)| (n.to_string(), *d, 48.0)).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn nccl_230_lists_devices_by_pci_address() {
        let nic = |name: &str, address: &str| Nic {
            name: name.to_owned(),
            address: address.to_owned(),
            ports: None,
        };
        // By name, as the verbs library lists them here.
        let taken = [
            nic("mlx5_10", "0000:97:00.1"),
            nic("mlx5_2", "10000:e1:00.0"),
            nic("mlx5_9", "0000:97:00.0"),
        ];
        let names = |v: Vec<Nic>| v.into_iter().map(|n| n.name).collect::<Vec<_>>();
        assert_eq!(
            names(Rule::Nccl228.order(&taken)),
            ["mlx5_10", "mlx5_2", "mlx5_9"]
        );
        assert_eq!(
            names(Rule::Nccl230.order(&taken)),
            ["mlx5_9", "mlx5_10", "mlx5_2"]
        );
        assert_eq!(bus_id("0000:97:00.1"), 0x97001);
        assert_eq!(bus_id("10000:e1:00.0"), 0x10000e1000);
    }

    #[test]
    fn nccls_topology_lists_devices_depth_first_by_bus_id() {
        let nic = |name: &str| Nic {
            name: name.to_owned(),
            address: String::new(),
            ports: None,
        };
        let place = |numa, chain: &[&str]| Place {
            numa,
            chain: chain.iter().map(|c| c.to_string()).collect(),
        };
        // By plugin order mlx5_10 (9b), mlx5_12 (9c), mlx5_13 and mlx5_14
        // (one adapter, 9d), mlx5_9 (9b again: after mlx5_10 under it).
        let up = "0000:80:01.0";
        let devices = vec![
            (nic("mlx5_10"), place(1, &[up, "0000:9b:00.0"])),
            (nic("mlx5_12"), place(1, &[up, "0000:9c:00.0"])),
            (nic("mlx5_13"), place(1, &[up, "0000:9d:00.0"])),
            (nic("mlx5_14"), place(1, &[up, "0000:9d:00.0"])),
            (nic("mlx5_9"), place(1, &[up, "0000:9b:00.0"])),
            (nic("mlx5_0"), place(0, &["0000:00:01.0", "0000:01:00.0"])),
            (nic("mlx5_8"), place(-1, &["10000:e1:00.0"])),
        ];
        let names: Vec<String> = topology_order(devices, &[1, 0])
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(
            names,
            [
                "mlx5_10", "mlx5_9", "mlx5_12", "mlx5_13", "mlx5_14", "mlx5_0", "mlx5_8"
            ]
        );
        // A merged device comes after the functions of its adapter NCCL
        // left alone: it is numbered after every physical device.
        let adapter = place(0, &["0000:00:01.0", "0000:01:00.0"]);
        let devices = vec![
            (nic("mlx5_0+mlx5_1+mlx5_2+mlx5_3"), adapter.clone()),
            (nic("mlx5_4"), adapter),
        ];
        let names: Vec<String> = topology_order(devices, &[0])
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(names, ["mlx5_4", "mlx5_0+mlx5_1+mlx5_2+mlx5_3"]);
    }

    #[test]
    fn nccls_xml_holds_every_second_bridge_up_from_the_device() {
        let c = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // below a root port: on the CPU by its own bus id
        assert_eq!(
            xml_chain(&c(&["0000:00:03.0", "0000:05:00.0"])),
            c(&["0000:05:00.0"])
        );
        // below one switch: its upstream port on the CPU, the root port
        // and the downstream port skipped
        assert_eq!(
            xml_chain(&c(&[
                "0000:00:03.0",
                "0000:0c:00.0",
                "0000:0d:00.0",
                "0000:0e:00.0"
            ])),
            c(&["0000:0c:00.0", "0000:0e:00.0"])
        );
        // a bridge between: the root port kept
        assert_eq!(
            xml_chain(&c(&["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"])),
            c(&["0000:00:01.0", "0000:02:00.0"])
        );
        // So a NIC on a root port sorts by its own bus (09) before one a
        // switch deeper on an earlier root port (0c), as NCCL lists them.
        let nic = |name: &str| Nic {
            name: name.to_owned(),
            address: String::new(),
            ports: None,
        };
        let devices = vec![
            (
                nic("mlx5_7"),
                Place {
                    numa: 0,
                    chain: xml_chain(&c(&[
                        "0000:00:03.0",
                        "0000:0c:00.0",
                        "0000:0d:00.0",
                        "0000:0e:00.0",
                    ])),
                },
            ),
            (
                nic("mlx5_6"),
                Place {
                    numa: 0,
                    chain: xml_chain(&c(&["0000:00:02.0", "0000:09:00.0"])),
                },
            ),
        ];
        let names: Vec<String> = topology_order(devices, &[0])
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(names, ["mlx5_6", "mlx5_7"]);
    }

    #[test]
    fn a_nic_no_gpu_takes_on_any_channel_has_no_local_gpu() {
        // Eight GPUs; the last two are PIX from five NICs (the others SYS),
        // so each takes three of them over its channels (netsPerGpu =
        // ceil(5 / 2)): 2.28.9 from its device number (6: n1 n2 n3, 7: n2
        // n3 n4), 2.30.7 from it modulo the two (n0 n1 n2, n1 n2 n3).
        let gpus: Vec<String> = (0..8).map(|i| format!("0000:0{i}:00.0")).collect();
        let views: Vec<View> = gpus
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let near = i >= 6;
                let nics = (0..5)
                    .map(|n| {
                        if near {
                            (format!("n{n}"), Distance::Pix, 48.0)
                        } else {
                            (format!("n{n}"), Distance::Sys, 10.0)
                        }
                    })
                    .collect();
                (g.clone(), nics)
            })
            .collect();
        let local = |nic: &str, rule| local_gpu(&views, nic, rule);
        assert_eq!(local("n0", Rule::Nccl228), None);
        assert_eq!(local("n1", Rule::Nccl228).as_deref(), Some("0000:06:00.0"));
        assert_eq!(local("n4", Rule::Nccl228).as_deref(), Some("0000:07:00.0"));
        assert_eq!(local("n0", Rule::Nccl230).as_deref(), Some("0000:06:00.0"));
        assert_eq!(local("n4", Rule::Nccl230), None);
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
        // Bandwidth first: a nearer NIC of a narrower path loses (a VMD
        // NIC's 12 GB/s against 40 across the CPUs).
        let v = vec![(
            "0000:01:00.0".to_owned(),
            vec![
                ("mlx5_0".to_owned(), Phb, 12.0),
                ("mlx5_1".to_owned(), Sys, 40.0),
            ],
        )];
        assert_eq!(
            pick(&v, "0000:01:00.0", Rule::Nccl230).as_deref(),
            Some("mlx5_1")
        );
    }

    #[test]
    fn a_gpus_local_cpu_is_ncclss_by_each_release() {
        let path = |numa: i64, index: usize, bw: f64, hops: usize, via: Option<&str>| CpuPath {
            numa,
            index,
            bw,
            hops,
            via: via.map(str::to_owned),
        };
        // Its own CPU (1) behind one switch, two hops; a peer over one
        // NVLink directly below CPU 0, two hops: a tie, the first CPU.
        let tie = [path(1, 1, 48.0, 2, None), path(0, 0, 20.6, 2, Some("p"))];
        assert_eq!(local_cpu(&tie, Rule::Nccl228).unwrap().numa, 0);
        // Behind two switches: the peer's CPU has fewer hops, even after
        // the GPU's own in NCCL's order.
        let deep = [path(0, 0, 48.0, 3, None), path(1, 1, 20.6, 2, Some("p"))];
        assert_eq!(local_cpu(&deep, Rule::Nccl228).unwrap().numa, 1);
        // Directly below its own CPU: its own.
        let own = [path(0, 1, 48.0, 1, None), path(1, 0, 48.0, 2, Some("p"))];
        assert_eq!(local_cpu(&own, Rule::Nccl228).unwrap().numa, 0);
        // 2.30.7: its own in each.
        for paths in [&tie[..], &deep[..], &own[..]] {
            assert!(local_cpu(paths, Rule::Nccl230).unwrap().via.is_none());
        }
    }
}
