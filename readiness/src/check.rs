//! Reads the node and writes its facts: the registration path, the GPUs
//! and RDMA devices, the distance from each GPU to its closest RDMA
//! device, ACS on the bridges between them, IOMMU translation and BAR1.

use crate::config_space::{self, AcsState, ConfigSpace, PortType};
use crate::host::Host;
use crate::nvidia;
use crate::pci::{self, PciDevice};
use crate::rdma::{self, Nic};
use crate::registration::{self, Path};
use crate::report::{Fact, Gpu, Problem, Report, Status};
use crate::topology::{self, Distance};
use crate::{
    c2c, consumers, cuda, data_direct, gdr_reads, iommu, memory, nccl_bandwidth, nccl_ib,
    nccl_local_net, nccl_topo_file, nccl_version, nvlink, peer_clients, pxn, service,
};

/// The checks over @host. @programs: whether the forms people read may
/// ask programs (the service helper's status, nvidia-smi's memory sizes,
/// each bounded by a timeout); the monitoring forms never do
/// (docs/readiness.md, "What the check reads").
pub fn check(host: &Host, programs: bool) -> Report {
    let mut facts = Vec::new();
    let (devices, pci_unreadable) = pci::devices(host);
    facts.extend(pci_unreadable.iter().map(read_fact));
    let gpus: Vec<&PciDevice> = devices.iter().filter(|d| d.is_nvidia_gpu()).collect();
    let (nics, rdma_unreadable) = rdma::nics(host, &devices);
    facts.extend(rdma_unreadable.iter().map(read_fact));

    let driver = match nvidia::driver(host) {
        Ok(d) => d,
        Err(u) => {
            facts.push(Fact::unreadable("driver", "node", &u));
            None
        }
    };
    match &driver {
        Some(d) => facts.push(Fact::info(
            "driver",
            "node",
            format!(
                "NVIDIA driver {} ({})",
                d.version,
                if d.flavour == nvidia::Flavour::Open {
                    "open kernel module"
                } else {
                    "proprietary kernel module"
                }
            ),
        )),
        None => facts.push(Fact::problem(
            "driver",
            "node",
            Status::Fail,
            Problem::NoPath,
            "the NVIDIA driver is not loaded (no /proc/driver/nvidia/version)",
            Some("modprobe nvidia (install the NVIDIA driver if it is missing)".to_owned()),
        )),
    }

    // "Nothing to check" only when every device could be read: a GPU or
    // NIC whose files could not be read may be the one that is missing.
    if gpus.is_empty() {
        facts.push(if pci_unreadable.is_empty() {
            Fact::problem(
                "gpu",
                "node",
                Status::Fail,
                Problem::NothingToCheck,
                "no NVIDIA GPU on the PCI bus",
                None,
            )
        } else {
            cannot_tell(
                "gpu",
                "no NVIDIA GPU among the PCI functions that could be read",
            )
        });
    }
    if nics.is_empty() {
        let reason = "no RDMA device (nothing in /sys/class/infiniband backed by a PCI function)";
        facts.push(if pci_unreadable.is_empty() && rdma_unreadable.is_empty() {
            Fact::problem(
                "nic",
                "node",
                Status::Fail,
                Problem::NothingToCheck,
                reason,
                Some("load the adapter's RDMA driver (mlx5_ib for ConnectX) or install MLNX_OFED/DOCA-OFED".to_owned()),
            )
        } else {
            cannot_tell("nic", reason)
        });
    }

    let bound: Vec<(String, bool)> = gpus
        .iter()
        .map(|g| (g.address.clone(), nvidia::bound_to_nvidia(host, g)))
        .collect();
    for (address, _) in bound.iter().filter(|(_, b)| !b) {
        let driver = gpus
            .iter()
            .find(|g| &g.address == address)
            .and_then(|g| nvidia::driver_of(host, g));
        facts.push(Fact::info(
            "gpu_driver",
            address,
            match driver {
                Some(d) => format!("driven by {d}, not the NVIDIA driver: not this host's GPU for GPUDirect RDMA (e.g. passed through to a VM); the other GPUs are judged without it"),
                None => "no driver drives it: not usable for GPUDirect RDMA until the NVIDIA driver binds it; the other GPUs are judged without it".to_owned(),
            },
        ));
    }
    let verbs = registration::verbs_library(host);
    let (path, dmabuf) = registration_facts(
        host,
        driver,
        bound,
        verbs,
        !nics.is_empty(),
        programs,
        &mut facts,
    );
    // The devices NCCL takes (nccl_ib.rs): each GPU is judged with the
    // nearest of them; the others are said, with NCCL's reason.
    let hca = nccl_ib::hca(host);
    let mut refused: Vec<(&Nic, String)> = nics
        .iter()
        .filter_map(|n| nccl_ib::refusal(n, hca.as_ref()).map(|why| (n, why)))
        .collect();
    let beyond = nccl_ib::beyond_max_ib_devs(&nics, &refused);
    refused.extend(beyond);
    let taken: Vec<Nic> = nics
        .iter()
        .filter(|n| !refused.iter().any(|(r, _)| r == n))
        .cloned()
        .collect();
    // UCX, too, opens only ACTIVE ports (ucx src/uct/ib/base/ib_device.c,
    // uct_ib_device_port_check); NCCL_IB_HCA is NCCL's alone.
    let active = nics.iter().any(|n| nccl_ib::refusal(n, None).is_none());
    let nccl_sees = consumer_facts(
        host,
        path,
        dmabuf,
        (active, !taken.is_empty(), hca.as_ref()),
        &mut facts,
    );
    let level = consumers::nccl_level(host);
    let vm = crate::vm::detect(host);
    let gate = nvidia::topology_gate(host);
    if let Some(how) = &vm {
        facts.push(Fact::info("vm", "node", format!("a virtual machine ({how}): the host's IOMMU and ACS settings, which this VM cannot see, also lie on the peer-to-peer path")));
    }

    let memory = if programs {
        memory::gpu_memory(host)
    } else {
        Default::default()
    };
    // NCCL's topology file, where one places the devices (nccl_topo_file.rs):
    // NCCL's distances are the file's there, the bridges' are sysfs's.
    let topo_file = match nccl_topo_file::read(host) {
        Ok(f) => f,
        Err(why) => {
            facts.push(Fact::info("nccl", "node", why));
            None
        }
    };
    let nccl_installed = nccl_version::installed(host);
    if let Some(found) = &nccl_installed {
        facts.push(Fact::info("nccl", "node", nccl_version::said(found)));
    }
    if let Some(f) = &topo_file {
        facts.push(Fact::info("nccl", "node", format!("NCCL takes its topology from {}: a GPU's distance to a NIC is the file's where it places both, sysfs's otherwise", f.shown)));
    }
    // NCCL's view of a pair: its topology file's distance where that
    // places both, else sysfs's, shortened to PXB by a Broadcom virtual
    // switch link; with what made it differ from sysfs's.
    let merge_vfs = nccl_ib::merge_vfs(host);
    // NCCL's devices (nccl_local_net.rs): an adapter's functions merged
    // into one, in its IB plugin's order, which the releases order apart;
    // judged by the installed NCCL's, else the newest's.
    use nccl_local_net::Rule;
    let rule = match nccl_installed.as_ref().map(|(_, v)| *v) {
        Some((2, minor, _)) if minor < 30 => Rule::Nccl228,
        _ => Rule::Nccl230,
    };
    let merge_nics = nccl_ib::merge_nics(host);
    let place = |nic: &Nic| {
        let at = nccl_ib::placed_at(&nic.address, merge_vfs);
        let dev = devices.iter().find(|d| d.address == nic.address);
        let numa = dev.and_then(|d| d.numa_node).map_or(-1, i64::from);
        match dev {
            Some(d) if topology::nccl_finds(&d.address) => {
                // NCCL's own XML nodes: every second bridge up from the
                // device (nccl_local_net::xml_chain); the root complex
                // first in d.chain, not one of them.
                let mut chain = nccl_local_net::xml_chain(&d.chain[1..]);
                if let Some(last) = chain.last_mut() {
                    *last = at;
                }
                nccl_local_net::Place { numa, chain }
            }
            _ => nccl_local_net::Place {
                numa: -1,
                chain: vec![at],
            },
        }
    };
    // Rank 0's GPU: the first by bus (its XML is the one the others'
    // fuse into: nccl_local_net::topology_order).
    let gpu_numas: Vec<i64> = gpus.iter().take(1).map(|g| nccl_numa(g)).collect();
    // Where a topology file places a device, NCCL's XML has it where the
    // file does (nccl_topo_file.rs).
    let placed_of = |r: Rule| -> Vec<(Nic, nccl_local_net::Place)> {
        let merged = nccl_ib::merged(
            &r.order(&taken),
            merge_vfs,
            merge_nics,
            r.max_devs_per_nic(),
        );
        merged
            .into_iter()
            .map(|n| {
                let in_file = topo_file.as_ref().and_then(|f| {
                    let first = nccl_ib::first_member(&n.name);
                    let at = nccl_ib::placed_at(&n.address, merge_vfs);
                    f.place(first, &at)
                });
                let p = match in_file {
                    Some((numa, chain)) => nccl_local_net::Place { numa, chain },
                    None => place(&n),
                };
                (n, p)
            })
            .collect()
    };
    // Rank 0's GPU's CPU, the file's where it places the GPU.
    let rank0_numas: Vec<i64> = gpus
        .iter()
        .take(1)
        .zip(&gpu_numas)
        .map(|(g, numa)| {
            topo_file
                .as_ref()
                .and_then(|f| f.cpu_of(&g.address))
                .unwrap_or(*numa)
        })
        .collect();
    // NCCL's first CPUs: each rank reads the topology file before it fills
    // its GPU and devices (topo.cc, ncclTopoGetSystem), so rank 0's XML
    // starts with the file's CPUs that keep its GPU or a device after
    // ncclTopoTrimXml, in the file's order; then rank 0's GPU's.
    let first_cpus = |placed: &[(Nic, nccl_local_net::Place)]| -> Vec<i64> {
        let file_cpus = topo_file.as_ref().map(|f| f.cpus()).unwrap_or_default();
        let mut first: Vec<i64> = file_cpus
            .into_iter()
            .filter(|c| rank0_numas.contains(c) || placed.iter().any(|(_, p)| p.numa == *c))
            .collect();
        first.extend(&rank0_numas);
        first
    };
    let vnics_of = |r: Rule| {
        let placed = placed_of(r);
        let first = first_cpus(&placed);
        nccl_local_net::topology_order(placed, &first)
    };
    let (vnics_228, vnics_230) = (vnics_of(Rule::Nccl228), vnics_of(Rule::Nccl230));
    // NCCL's CPUs in its order (topo.cc, ncclTopoGetSystemFromXml over the
    // fused XML): those first_cpus gives, its devices' in plugin order,
    // then the other ranks' GPUs'.
    let cpu_order = |r: Rule| -> Vec<i64> {
        let placed = placed_of(r);
        let mut order: Vec<i64> = Vec::new();
        let all = first_cpus(&placed)
            .into_iter()
            .chain(placed.iter().map(|(_, p)| p.numa))
            .chain(gpus.iter().map(|g| nccl_numa(g)));
        for numa in all {
            if !order.contains(&numa) {
                order.push(numa);
            }
        }
        order
    };
    let vnics = if rule == Rule::Nccl228 {
        &vnics_228
    } else {
        &vnics_230
    };
    // mlx5 Data Direct (data_direct.rs): the DMA function NCCL reaches
    // each adapter through, where the node can register DMA-BUF.
    let dd_offered = data_direct::offered(host);
    let dd_functions = data_direct::functions(host, &devices);
    let mut dd_serving: Vec<(String, &PciDevice)> = Vec::new();
    if dmabuf && dd_offered != data_direct::Offered::Own && !dd_functions.is_empty() {
        for nic in &nics {
            let Some(dev) = devices.iter().find(|d| d.address == nic.address) else {
                continue;
            };
            match data_direct::serving(host, dev, &dd_functions) {
                Ok(Some(f)) => dd_serving.push((nic.name.clone(), f)),
                Ok(None) => {}
                Err(why) => facts.push(Fact::info(
                    "nccl",
                    &nic.name,
                    format!("NCCL may reach {} through a ConnectX-8 Data Direct function ({}) as {}_dma: which adapter a function serves is read from the VPD ({why})", nic.name, dd_functions.iter().map(|f| f.address.as_str()).collect::<Vec<_>>().join(", "), nic.name),
                )),
            }
        }
    }
    let nccl_view = |gpu: &PciDevice, nic: &Nic, nic_dev: &PciDevice, d: Distance| {
        if let Some(f) = &topo_file {
            // NCCL looks the NIC up at the bus id its IB plugin gives
            // (nccl_ib::placed_at), and climbs sysfs from there for a
            // device the file does not place: each side's NUMA node as
            // NCCL reads it (-1 where it finds no sysfs path).
            let at = nccl_ib::placed_at(&nic.address, merge_vfs);
            let numa = |address: &str| {
                devices
                    .iter()
                    .find(|d| d.address == address)
                    .map_or(-1, nccl_numa)
            };
            let (g, n) = (
                (gpu.address.as_str(), numa(&gpu.address)),
                (at.as_str(), numa(&at)),
            );
            if let Some(x) = f.distance(g, &nic.name, n) {
                let by = if f.places_both(g.0, &nic.name, n.0) {
                    format!("in {}", f.shown)
                } else {
                    format!(
                        "as NCCL places them: {} places one of the two, and NCCL hangs the other on its NUMA node's CPU",
                        f.shown
                    )
                };
                return (x, Some(by));
            }
        }
        // A device NCCL finds nowhere in sysfs (a VMD domain's) is on no
        // known CPU for it (topology::nccl_finds).
        if !topology::nccl_finds(&gpu.address) || !topology::nccl_finds(&nic_dev.address) {
            let x = topology::unplaced_distance(gpu, nic_dev);
            let which = if topology::nccl_finds(&gpu.address) {
                &nic_dev.address
            } else {
                &gpu.address
            };
            let by = format!(
                "as NCCL places it: NCCL finds no sysfs path for {which}, whose PCI domain has five digits (an Intel VMD domain), and puts it on no known CPU"
            );
            return (x, (x != d).then_some(by));
        }
        // NCCL offers the adapter at its Data Direct function (as
        // <name>_dma), and with NCCL_IB_DATA_DIRECT=2 at its own too.
        if let Some((_, f)) = dd_serving.iter().find(|(n, _)| *n == nic.name) {
            let shape = |device: &str, index: usize| is_downstream(host, &devices, device, index);
            let merged = |usp: &str| bcm_upper_switch(host, &devices, usp);
            let x = topology::distance(gpu, f, &shape, &merged);
            if dd_offered == data_direct::Offered::DataDirect || x < d {
                let by = format!(
                    "through its Data Direct function {}, as NCCL offers it ({}_dma)",
                    f.address, nic.name
                );
                return (x, (x != d).then_some(by));
            }
        }
        // NCCL judges the NIC from the function its IB plugin names
        // (nccl_ib::placed_at): the same place for a device behind a
        // port, another function's on a root bus, or none.
        let at = nccl_ib::placed_at(&nic.address, merge_vfs);
        let (placed, there, moved) = if at == nic.address {
            (d, nic_dev, None)
        } else {
            match devices.iter().find(|x| x.address == at) {
                Some(there) => {
                    let shape =
                        |device: &str, index: usize| is_downstream(host, &devices, device, index);
                    let merged = |usp: &str| bcm_upper_switch(host, &devices, usp);
                    let x = topology::distance(gpu, there, &shape, &merged);
                    let by = format!("as NCCL places it, at {at} (NCCL_IB_MERGE_VFS)");
                    (x, there, (x != d).then_some(by))
                }
                // On CPU -1: the GPU's CPU where its NUMA node is unset too.
                None => {
                    let x = if gpu.numa_node.is_none() {
                        Distance::Phb
                    } else {
                        Distance::Sys
                    };
                    let by = format!(
                        "as NCCL places it, at {at}, which the kernel does not show: on no known CPU (NCCL_IB_MERGE_VFS)"
                    );
                    return (x, (x != d).then_some(by));
                }
            }
        };
        if placed >= Distance::Phb && bcm_virtual_link(host, &devices, gpu, there) {
            let by = "over a Broadcom virtual switch link (/sys/kernel/pci_switch_link)";
            return (Distance::Pxb, Some(by.to_owned()));
        }
        (placed, moved)
    };
    // Each GPU's distances to every NIC, and to those NCCL takes as NCCL
    // sees them (the nearest is the one it is judged with); all GPUs'
    // views serve PXN (pxn.rs), NVLink from nvidia-smi where programs
    // may be asked.
    type Viewed<'a> = (&'a Nic, &'a PciDevice, Distance, Distance, Option<String>);
    type Sysfs<'a> = Vec<(&'a Nic, &'a PciDevice, Distance)>;
    // NCCL's distance to a NIC and, where it differs from sysfs's, why.
    type NcclView = (Distance, Option<String>);
    // Per GPU: every NIC's sysfs distance and NCCL's view of each,
    // computed once.
    let placed: Vec<(Sysfs, Vec<NcclView>)> = gpus
        .iter()
        .map(|gpu| {
            let all = nic_distances(host, gpu, &nics, &devices);
            let views = all
                .iter()
                .map(|&(n, dev, d)| nccl_view(gpu, n, dev, d))
                .collect();
            (all, views)
        })
        .collect();
    // NCCL's view of the device whose first member is @first, from @gpu
    // (the index of the GPU in `gpus`).
    let nccl_of = |gpu: usize, first: &str| {
        let (all, views) = &placed[gpu];
        let i = all.iter().position(|(n, _, _)| n.name == first)?;
        let (_, dev, d) = all[i];
        Some((dev, d, &views[i]))
    };
    // NCCL's devices (an adapter's functions merged into one,
    // nccl_ib::merged), seen where their first member is.
    let seen: Vec<(&Sysfs, Vec<Viewed>)> = (0..gpus.len())
        .map(|g| {
            let viewed = vnics
                .iter()
                .filter_map(|v| {
                    let (dev, d, (nccl, by)) = nccl_of(g, nccl_ib::first_member(&v.name))?;
                    Some((v, dev, d, *nccl, by.clone()))
                })
                .collect();
            (&placed[g].0, viewed)
        })
        .collect();
    // Every GPU's NCCL devices of @list as NCCL sees them, with NCCL's
    // path bandwidth (nccl_bandwidth.rs; none where a topology file
    // places the devices: not modelled). A device's NCCL distance is the
    // same whatever the list: it is read from `placed` by its first member.
    let inter_cpu = nccl_bandwidth::inter_cpu(host);
    let links = nccl_bandwidth::Links::new(host);
    // A device's network link: its ports' rates, summed over the
    // functions NCCL merges.
    let net_bw = |v: &Nic| -> Option<f64> {
        v.name
            .split('+')
            .map(|m| {
                let n = nics.iter().find(|n| n.name == m)?;
                let port = n.ports.as_ref()?.iter().find(|p| p.active())?;
                nccl_bandwidth::port_rate(host, m, port.number)
            })
            .sum()
    };
    let views_of = |list: &[Nic]| -> Vec<nccl_local_net::View> {
        gpus.iter()
            .enumerate()
            .map(|(g, gpu)| {
                let ds = list
                    .iter()
                    .filter_map(|v| {
                        let (dev, _, &(nccl, _)) = nccl_of(g, nccl_ib::first_member(&v.name))?;
                        let crosses = nccl == Distance::Sys;
                        // Where a topology file places either device, that
                        // side's links are the file's (nccl_topo_file.rs).
                        let in_file = topo_file.as_ref().and_then(|f| {
                            let first = nccl_ib::first_member(&v.name);
                            let at = nccl_ib::placed_at(&dev.address, merge_vfs);
                            let g = f.side_bw(None, &gpu.address);
                            let n = f.side_bw(Some(first), &at);
                            (g.is_some() || n.is_some()).then_some((g, n))
                        });
                        let bw = match in_file {
                            Some((g, n)) => {
                                let side = |bw: Option<f64>, d: &PciDevice| {
                                    bw.unwrap_or_else(|| {
                                        nccl_bandwidth::to_cpu(&links, &devices, d)
                                    })
                                };
                                let mut bw = side(g, gpu).min(side(n, dev));
                                if crosses {
                                    bw = bw.min(inter_cpu.unwrap_or(f64::MAX));
                                }
                                bw.min(net_bw(v).unwrap_or(f64::MAX))
                            }
                            None => nccl_bandwidth::path(
                                &links,
                                &devices,
                                gpu,
                                dev,
                                crosses,
                                inter_cpu,
                                net_bw(v),
                            ),
                        };
                        Some((v.name.clone(), nccl, bw))
                    })
                    .collect();
                (gpu.address.clone(), ds)
            })
            .collect()
    };
    // The views by both releases' rules, each made once; the installed
    // release's (or the newest's) is the one the check's lines follow.
    let (views_228, views_230) = (views_of(&vnics_228), views_of(&vnics_230));
    // What pxn::relay reads of them (no bandwidths), made once for every
    // GPU.
    let (plain_228, plain_230) = (plain_views(&views_228), plain_views(&views_230));
    // Asked only where PXN may relay a GPU, and only in the forms that
    // may run programs.
    let joined = std::cell::OnceCell::new();
    let link_counts = std::cell::OnceCell::new();
    let pxn_disabled =
        consumers::nccl_setting(host, "NCCL_PXN_DISABLE").is_some_and(|(v, _)| v == "1");
    // NCCL_PXN_C2C (paths.cc, default 1): a peer P2C from the NIC relays.
    let pxn_c2c = !consumers::nccl_setting(host, "NCCL_PXN_C2C")
        .is_some_and(|(v, _)| consumers::param_zero(&v));
    // C2C (c2c.rs): only on an arm64 node, asked only where a GPU's NIC is
    // on its own CPU and only in the forms that may run programs.
    let c2c_possible = c2c::possible(host);
    let c2c_linked = std::cell::OnceCell::new();
    let c2c_settings = std::cell::OnceCell::new();
    // NCCL's sends (gdr_reads.rs): off everywhere by its setting, or for
    // a GPU older than Ampere without an NVLink peer.
    let reads = gdr_reads::Setting::read(host);
    let reads_off = reads.off_everywhere;
    let old_gpu_rule = gpus.len() > 1 && reads.old_gpu_rule;
    let compute_caps = std::cell::OnceCell::new();
    // The CUDA driver's own word on each GPU (cuda.rs), asked once, only
    // where a GPU has a NIC to judge and in the forms that may run programs.
    let cuda_gdr = std::cell::OnceCell::new();
    let mut summaries = Vec::new();
    // RDMA devices with every port down that are nearer to some GPU than
    // the device it is judged with (or that GPU has none): bringing their
    // ports up is that GPU's fix (issue 57).
    let down = |n: &Nic| {
        refused.iter().any(|(r, _)| r.name == n.name)
            && n.ports
                .as_ref()
                .is_some_and(|p| !p.is_empty() && !p.iter().any(rdma::Port::active))
    };
    let mut down_needed: Vec<String> = Vec::new();
    for (gpu, (all, viewed)) in gpus.iter().zip(&seen) {
        // The NIC NCCL gives this GPU among the nearest it takes
        // (nccl_local_net.rs), by the installed NCCL's rule, else the
        // newest's; the first nearest by name where the model has none.
        let cuda_off = programs
            && !viewed.is_empty()
            && cuda_gdr
                .get_or_init(|| cuda::gdr_supported(host))
                .as_ref()
                .and_then(|m| m.get(&gpu.address))
                == Some(&false);
        // A peer P2C from a NIC relays too (NCCL_PXN_C2C): where its
        // C2C link is up, None where that cannot be seen.
        let over_c2c = |peer: &str| -> Option<bool> {
            if !(c2c_possible && pxn_c2c) {
                return Some(false);
            }
            if !programs {
                return None;
            }
            c2c_linked
                .get_or_init(|| c2c::linked(host))
                .as_ref()
                .map(|up| up.contains(peer))
        };
        // One NVLink's bandwidth from this GPU: NCCL's own GPU's
        // capability; unknown: Hopper's, the fleets' (docs/diagnostics.md,
        // "PXN").
        let per_link = || {
            compute_caps
                .get_or_init(|| gdr_reads::compute_caps(host))
                .as_ref()
                .and_then(|c| c.get(&gpu.address))
                .map_or(20.6, |&(major, minor)| nvlink::link_bw(major, minor))
        };
        // PXN by @r's devices (@views, and @with_bw with their path
        // bandwidths): each NIC's local GPU as that release chooses it.
        // The bandwidths of a relayed path and of the GPU's own
        // (pxn::Widths), by @with_bw's paths; a relay's only where
        // nvidia-smi told the NVLinks' count.
        let relayed_bw = |relay: &pxn::Relay, with_bw: &[nccl_local_net::View]| {
            let pair = if gpu.address < relay.peer {
                (gpu.address.clone(), relay.peer.clone())
            } else {
                (relay.peer.clone(), gpu.address.clone())
            };
            let links = *link_counts
                .get_or_init(|| nvlink::counts(host))
                .as_ref()?
                .get(&pair)?;
            let per_link = per_link();
            let peer_to_nic = path_of(with_bw, &relay.peer, &relay.nic).map_or(f64::MAX, |p| p.1);
            Some((f64::from(links) * per_link).min(peer_to_nic))
        };
        let relay_over = |views: &pxn::Views, with_bw: &[nccl_local_net::View], r: Rule| {
            let local = |nic: &str| nccl_local_net::local_gpu(with_bw, nic, r);
            let relayed = |relay: &pxn::Relay| relayed_bw(relay, with_bw);
            let own = |nic: &str| path_of(with_bw, &gpu.address, nic).map_or(0.0, |p| p.1);
            let peer = |peer: &str, nic: &str| path_of(with_bw, peer, nic).map_or(0.0, |p| p.1);
            let widths = pxn::Widths {
                relayed: &relayed,
                own: &own,
                peer: &peer,
            };
            // The PCI paths' bandwidths are sysfs's (or the topology
            // file's); a relay's needs the NVLinks' count. Whether any
            // relay may be taken, before nvidia-smi is asked: each as wide
            // as can be where it will be asked (the call below weighs it),
            // else not known (pxn::relay bounds it by the peer's path).
            let widest = |_: &pxn::Relay| Some(f64::INFINITY);
            let not_known = |_: &pxn::Relay| None;
            let unseen = pxn::Widths {
                relayed: if programs { &widest } else { &not_known },
                own: &own,
                peer: &peer,
            };
            let may = pxn::relay(
                &gpu.address,
                views,
                None,
                pxn_disabled,
                &over_c2c,
                &local,
                &unseen,
            );
            if may.chosen.is_none() || !programs {
                return may;
            }
            let seen = joined.get_or_init(|| nvlink::joined(host));
            pxn::relay(
                &gpu.address,
                views,
                seen.as_ref(),
                pxn_disabled,
                &over_c2c,
                &local,
                &widths,
            )
        };
        // PXN by each release's rule: the relay NCCL takes, and the NICs
        // it gives this GPU among the rest (not those a peer relays
        // through a narrower path).
        let (relayed_228, relayed_230) = (
            relay_over(&plain_228, &views_228, Rule::Nccl228),
            relay_over(&plain_230, &views_230, Rule::Nccl230),
        );
        let gdr_at = |r: &pxn::Relay| nccl_sees && consumers::nccl_within(r.distance, level.0);
        // NCCL's local CPU for this GPU by each release (ncclGetLocalCpu:
        // nccl_local_net::local_cpu), asked only for a relay without
        // GPUDirect RDMA at the level: its own CPU, or the CPU of an
        // NVLink peer directly below one.
        let local_cpu = |r: Rule| -> Option<nccl_local_net::CpuPath> {
            let counts = link_counts.get_or_init(|| nvlink::counts(host)).as_ref()?;
            let per_link = per_link();
            let order = cpu_order(r);
            let index = |numa: i64| order.iter().position(|c| *c == numa).unwrap_or(order.len());
            let own = nccl_numa(gpu);
            let mut paths = vec![nccl_local_net::CpuPath {
                numa: own,
                index: index(own),
                bw: nccl_bandwidth::to_cpu(&links, &devices, gpu),
                hops: nccl_hops(host, &devices, gpu),
                via: None,
            }];
            for ((a, b), count) in counts {
                let peer = match (a == &gpu.address, b == &gpu.address) {
                    (true, _) => b,
                    (_, true) => a,
                    _ => continue,
                };
                let Some(p) = gpus.iter().find(|g| &g.address == peer) else {
                    continue;
                };
                // NCCL routes a CPU's path through a GPU only over a direct
                // NVLink to another GPU, not through an NVSwitch.
                let numa = nccl_numa(p);
                if numa == own
                    || nvlink::through_nvswitch(*count)
                    || !topology::nccl_finds(&p.address)
                    || nccl_hops(host, &devices, p) != 1
                {
                    continue;
                }
                let bw =
                    (f64::from(*count) * per_link).min(nccl_bandwidth::to_cpu(&links, &devices, p));
                match paths.iter_mut().find(|c| c.numa == numa) {
                    Some(c) if c.bw >= bw => {}
                    Some(c) => c.bw = bw,
                    None => paths.push(nccl_local_net::CpuPath {
                        numa,
                        index: index(numa),
                        bw,
                        hops: 2,
                        via: Some(p.address.clone()),
                    }),
                }
            }
            nccl_local_net::local_cpu(&paths, r).cloned()
        };
        // The path NCCL diverts a relay to where GPUDirect RDMA is off at
        // the level, where this GPU's local CPU is not its own: through
        // that CPU (PHB where the NIC is on it, SYS otherwise). Only a
        // relay through a later GPU: a peer before it has had its own
        // path diverted already, so PXN no longer takes it (paths.cc's
        // loop over GPUs in order).
        let diverted = |relay: &pxn::Relay, r: Rule| -> Option<(Distance, f64)> {
            if !programs || relay.peer <= gpu.address {
                return None;
            }
            let local = local_cpu(r)?;
            local.via.as_ref()?;
            let vnics = if r == Rule::Nccl228 {
                &vnics_228
            } else {
                &vnics_230
            };
            let vnic = vnics.iter().find(|v| v.name == relay.nic)?;
            let g = gpus.iter().position(|x| x.address == gpu.address)?;
            let (dev, _, _) = nccl_of(g, nccl_ib::first_member(&vnic.name))?;
            let crosses = nccl_numa(dev) != local.numa;
            let mut bw = local.bw.min(nccl_bandwidth::to_cpu(&links, &devices, dev));
            if crosses {
                bw = bw.min(inter_cpu.unwrap_or(f64::MAX));
            }
            let bw = bw.min(net_bw(vnic).unwrap_or(f64::MAX));
            Some((
                if crosses {
                    Distance::Sys
                } else {
                    Distance::Phb
                },
                bw,
            ))
        };
        let ((by_228, chosen_228, through_228), (by_230, chosen_230, through_230)) = (
            settle(
                &views_228,
                &gpu.address,
                &relayed_228,
                &relayed_bw,
                &gdr_at,
                &diverted,
                Rule::Nccl228,
            ),
            settle(
                &views_230,
                &gpu.address,
                &relayed_230,
                &relayed_bw,
                &gdr_at,
                &diverted,
                Rule::Nccl230,
            ),
        );
        let relayed_228 = pxn::Relayed {
            chosen: chosen_228,
            ..relayed_228
        };
        let relayed_230 = pxn::Relayed {
            chosen: chosen_230,
            ..relayed_230
        };
        let relay = if rule == Rule::Nccl228 {
            relayed_228.chosen.clone()
        } else {
            relayed_230.chosen.clone()
        };
        let by_rule = if rule == Rule::Nccl228 {
            by_228.clone()
        } else {
            by_230.clone()
        };
        let nearest = viewed.iter().min_by_key(|v| v.3);
        let closest = if cuda_off {
            nearest
        } else {
            viewed
                .iter()
                .find(|v| Some(&v.0.name) == by_rule.as_ref())
                .or(nearest)
        };
        // Where NCCL diverts the path to that NIC through a local CPU not
        // the GPU's own (`diverted`), NCCL's distance is that route's.
        let through = if rule == Rule::Nccl228 {
            through_228
        } else {
            through_230
        };
        let rerouted: Option<Viewed>;
        let closest = match (closest, through) {
            (Some(v), Some(x)) if !cuda_off && Some(&v.0.name) == by_rule.as_ref() => {
                let peer = local_cpu(rule).and_then(|c| c.via).unwrap_or_default();
                rerouted = Some((
                    v.0,
                    v.1,
                    v.2,
                    x,
                    Some(format!(
                        "as NCCL routes it without GPUDirect RDMA: through this GPU's local CPU, which NCCL reaches over NVLink through GPU {peer} in fewer hops than its own (paths.cc, ncclGetLocalCpu)"
                    )),
                ));
                rerouted.as_ref()
            }
            (c, _) => c,
        };
        // Said after the GPU's verdict (below), which stays its first
        // `nccl` line.
        let releases_differ = match (&by_230, &by_228) {
            // A relayed GPU's releases are said with its relay (below);
            // a relay nvidia-smi could not confirm has these as its "else".
            (Some(a), Some(b))
                if !cuda_off
                    && nccl_installed.is_none()
                    && (a != b || through_228 != through_230)
                    && [&relayed_228, &relayed_230]
                        .iter()
                        .all(|r| r.chosen.as_ref().is_none_or(|r| !r.seen)) =>
            {
                let why = if a == b {
                    "paths.cc, ncclGetLocalCpu: the releases choose the CPU a path without GPUDirect RDMA goes through by other rules"
                } else {
                    "topo.cc, ncclTopoGetLocalNet: the nearest NICs shared by device number"
                };
                Some(Fact::info(
                    "nccl",
                    &gpu.address,
                    format!(
                        "NCCL 2.30 gives this GPU {a}, NCCL 2.28 gives it {} ({why}): which NCCL the job loads decides; judged with {a}",
                        device_228(&gpu.address, b, through_228, &views_228, &level, nccl_sees)
                    ),
                ))
            }
            _ => None,
        };
        summaries.push(Gpu {
            address: gpu.address.clone(),
            device_id: gpu.device,
            bar1_bytes: nvidia::bar1(gpu).ok().flatten(),
            nic_distances: all.iter().map(|(n, _, d)| (n.name.clone(), *d)).collect(),
            closest: closest.map(|v| (v.0.name.clone(), v.3)),
        });
        facts.push(Fact::info(
            "gpu",
            &gpu.address,
            format!(
                "NVIDIA GPU {:04x}:{:04x}, NUMA node {}",
                gpu.vendor,
                gpu.device,
                numa(gpu)
            ),
        ));
        let judged_at = closest.map(|v| v.2);
        let nearer_down = all
            .iter()
            .filter(|(n, _, d)| down(n) && judged_at.is_none_or(|j| *d < j))
            .min_by_key(|(_, _, d)| *d);
        if let Some((n, _, _)) = nearer_down {
            if !down_needed.contains(&n.name) {
                down_needed.push(n.name.clone());
            }
        }
        let facts_before = facts.len();
        if let Some(&(nic, nic_dev, distance, nccl_distance, ref by)) = closest {
            let on_own_cpu = matches!(nccl_distance, Distance::Phb | Distance::Node);
            // A PCIe path beyond NCCL's level that paths.cc diverts
            // through the GPU's CPU: over a C2C link, a P2C route.
            let diverted = matches!(nccl_distance, Distance::Pix | Distance::Pxb)
                && !consumers::nccl_within(nccl_distance, level.0);
            let link = (c2c_possible && (on_own_cpu || diverted))
                .then(|| {
                    if !programs {
                        return Some(c2c::Link::Unknown);
                    }
                    match c2c_linked.get_or_init(|| c2c::linked(host)) {
                        Some(up) if up.contains(&gpu.address) => Some(c2c::Link::Up),
                        Some(_) => None,
                        None => Some(c2c::Link::Unknown),
                    }
                })
                .flatten();
            // Asked above (cuda_off): this GPU has a NIC here.
            let cuda_says_no = cuda_off;
            if cuda_says_no {
                unsupported_gpu_facts(gpu, nic, nccl_distance, &mut facts);
            } else if diverted && link == Some(c2c::Link::Up) {
                let settings = c2c_settings.get_or_init(|| {
                    c2c::Settings::read(host, nccl_installed.as_ref().map(|(_, v)| *v), &level.1)
                });
                let seen = (nccl_distance, by.as_deref());
                diverted_facts(
                    gpu,
                    nic,
                    distance,
                    seen,
                    (&level, settings),
                    nccl_sees,
                    &mut facts,
                );
            } else if let Some(link) = link.filter(|_| on_own_cpu) {
                let settings = c2c_settings.get_or_init(|| {
                    c2c::Settings::read(host, nccl_installed.as_ref().map(|(_, v)| *v), &level.1)
                });
                facts.extend(c2c::facts(
                    &gpu.address,
                    nic,
                    nccl_distance,
                    link,
                    settings,
                    nccl_sees,
                ));
            } else if let Some(relay) = relay {
                let settings = relay.c2c.then(|| {
                    c2c_settings.get_or_init(|| {
                        c2c::Settings::read(
                            host,
                            nccl_installed.as_ref().map(|(_, v)| *v),
                            &level.1,
                        )
                    })
                });
                relay_facts(
                    gpu,
                    nic,
                    nccl_distance,
                    &relay,
                    (&level, settings),
                    nccl_sees,
                    &mut facts,
                );
                // 2.28.9 merges at most four of an adapter's functions and
                // may name them in another order (nccl_ib::merged): where
                // no NCCL is installed and its relay's device is another,
                // both are said.
                if rule == Rule::Nccl230 && nccl_installed.is_none() {
                    match relayed_228.chosen.as_ref() {
                        Some(theirs) if theirs.nic != relay.nic => facts.push(Fact::info(
                            "nccl",
                            &gpu.address,
                            format!(
                                "NCCL 2.30 relays this GPU through {}, NCCL 2.28 relays it through {} (its own merge of the adapter's functions, topo.cc ncclTopoAutoMerge): which NCCL the job loads decides; judged with {}",
                                relay.nic, theirs.nic, relay.nic
                            ),
                        )),
                        Some(_) => {}
                        None => facts.extend(not_relayed_by_228(
                            gpu,
                            &relay.nic,
                            (by_228.as_deref(), through_228),
                            &views_228,
                            &level,
                            nccl_sees,
                        )),
                    }
                }
            } else {
                let seen = (nccl_distance, by.as_deref());
                distance_fact(gpu, nic, distance, seen, &level, &mut facts);
                nccl_pair_fact(gpu, nic, nccl_distance, &level, nccl_sees, &mut facts);
                if rule == Rule::Nccl230 && nccl_installed.is_none() {
                    if let Some(theirs) = relayed_228.chosen.as_ref().filter(|r| r.seen && !r.c2c) {
                        facts.push(relayed_by_228(gpu, theirs, &level, nccl_sees));
                    }
                }
            }
            let old_gpu = || {
                if !(old_gpu_rule && programs && gdr_reads::may_be_old(gpu.device)) {
                    return None;
                }
                let caps = compute_caps.get_or_init(|| gdr_reads::compute_caps(host));
                let (major, minor) = *caps.as_ref()?.get(&gpu.address)?;
                if major >= 8 {
                    return None;
                }
                let seen = joined.get_or_init(|| nvlink::joined(host));
                let peer = seen.as_ref().map(|pairs| {
                    pairs
                        .iter()
                        .any(|(a, b)| *a == gpu.address || *b == gpu.address)
                });
                let old = format!("a GPU older than Ampere, compute capability {major}.{minor}");
                match peer {
                    Some(true) => None,
                    Some(false) => Some(format!(
                        "{old}, with no NVLink peer on a node of several GPUs"
                    )),
                    None => Some(format!(
                        "{old}, unless NVLink joins it to another GPU, which nvidia-smi did not tell"
                    )),
                }
            };
            let reads_why = (!cuda_says_no)
                .then(|| reads_off.clone().or_else(old_gpu))
                .flatten();
            if let Some(why) = reads_why {
                gdr_reads::receives_only(&mut facts, &gpu.address, &why);
            }
            acs_facts(
                host,
                gpu,
                nic_dev,
                distance,
                &devices,
                vm.is_some(),
                &mut facts,
            );
            gate_fact(gpu, nic, distance, gate, vm.is_some(), &mut facts);
        }
        // This GPU's distance warning: a nearer device whose ports are
        // down is the fix, not moving hardware (the GPU and that device
        // may share a switch already).
        if let Some((n, _, d)) = nearer_down {
            for f in facts[facts_before..]
                .iter_mut()
                .filter(|f| f.check == "distance" && f.fix.is_some())
            {
                f.fix = Some(format!(
                    "bring up {}'s port, {d} from this GPU, which NCCL skips while no port is ACTIVE: {}",
                    n.name,
                    port_fixes(n)
                ));
            }
        }
        // NCCL weighs path bandwidth before path type (nccl_local_net.rs):
        // where the device it takes is farther than the nearest, the
        // distance lines do not call it the closest, and the nearer one is
        // named with the reason NCCL passes it over.
        if let (Some(taken), Some(near)) = (closest, nearest) {
            if taken.3 > near.3 {
                let closest_words = format!(
                    "closest RDMA device {} ({}) is",
                    taken.0.name, taken.0.address
                );
                let taken_words = format!(
                    "RDMA device {} ({}), the one NCCL takes, is",
                    taken.0.name, taken.0.address
                );
                for f in facts[facts_before..]
                    .iter_mut()
                    .filter(|f| f.check == "distance")
                {
                    f.message = f.message.replacen(&closest_words, &taken_words, 1);
                }
                facts.push(Fact::info(
                    "nccl",
                    &gpu.address,
                    format!(
                        "NCCL takes {} ({}) over the nearer {} ({}): it weighs path bandwidth before path type (topo.cc, ncclTopoGetLocal), and {}'s path is narrower",
                        taken.0.name, taken.3, near.0.name, near.3, near.0.name
                    ),
                ));
            }
        }
        facts.extend(releases_differ);
        bar1_fact(gpu, memory.get(&gpu.address).copied(), programs, &mut facts);
    }
    for (nic, why) in &refused {
        let message = format!("NCCL does not use {}: {why}", nic.name);
        facts.push(if down_needed.contains(&nic.name) {
            Fact::problem(
                "nic",
                &nic.name,
                Status::Warn,
                Problem::Topology,
                format!("{message}; it is the nearest RDMA device of a GPU"),
                Some(port_fixes(nic)),
            )
        } else {
            Fact::info("nic", &nic.name, message)
        });
    }
    for nic in &nics {
        let dev = devices.iter().find(|d| d.address == nic.address);
        facts.push(Fact::info(
            "nic",
            &nic.name,
            format!(
                "RDMA device {} at {}, NUMA node {}",
                nic.name,
                nic.address,
                dev.map_or("unknown".to_owned(), numa)
            ),
        ));
    }
    for dev in gpus.iter().copied().chain(
        nics.iter()
            .filter_map(|n| devices.iter().find(|d| d.address == n.address)),
    ) {
        iommu_fact(host, dev, vm.is_some(), &mut facts);
    }
    let (peer_clients, unreadable) = peer_clients::read(host);
    facts.extend(peer_clients.iter().map(counters_fact));
    // Informational: a counter that cannot be read changes no verdict.
    facts.extend(
        unreadable
            .iter()
            .map(|u| Fact::info("counters", u.path.display().to_string(), u.to_string())),
    );
    Report {
        path,
        dmabuf,
        facts: one_per_subject(facts),
        gpus: summaries,
        nics,
        peer_clients,
    }
}

/// One problem fact per (check, subject): a bridge on several GPUs' paths
/// is one subject, and node_exporter refuses a textfile that repeats a
/// series. Of problem facts about the same subject, the first kind of
/// problem in precedence order stays (the first of those found).
fn one_per_subject(facts: Vec<Fact>) -> Vec<Fact> {
    let mut out: Vec<Fact> = Vec::with_capacity(facts.len());
    for f in facts {
        let Some(p) = f.problem else {
            out.push(f);
            continue;
        };
        let same = out
            .iter()
            .position(|o| o.problem.is_some() && o.check == f.check && o.subject == f.subject);
        match same {
            Some(i) if out[i].problem.is_some_and(|q| p < q) => out[i] = f,
            Some(_) => {}
            None => out.push(f),
        }
    }
    out
}

/// What MLNX_OFED's core counts for one peer memory client.
fn counters_fact(c: &peer_clients::PeerClient) -> Fact {
    let count = |n: Option<u64>| n.map_or("?".to_owned(), |n| n.to_string());
    Fact::info(
        "counters",
        &c.name,
        format!(
            "peer memory client {} (version {}): {} registrations live, {} bytes pinned, {} free callbacks (MLNX_OFED's counters)",
            c.name,
            c.version.as_deref().unwrap_or("?"),
            count(c.live_registrations()),
            count(c.pinned_bytes()),
            count(c.free_callbacks()),
        ),
    )
}

fn numa(d: &PciDevice) -> String {
    d.numa_node.map_or("none".to_owned(), |n| n.to_string())
}

fn registration_facts(
    host: &Host,
    driver: Option<nvidia::Driver>,
    bound: Vec<(String, bool)>,
    verbs: Option<registration::Verbs>,
    rdma_device: bool,
    programs: bool,
    facts: &mut Vec<Fact>,
) -> (Path, bool) {
    let f = match registration::read(host, driver, bound, rdma_device, verbs) {
        Ok(f) => f,
        Err(u) => {
            facts.push(Fact::unreadable("path", "node", &u));
            return (Path::None, false);
        }
    };
    if f.nv_peer_mem_loaded && f.nvidia_peermem_loaded {
        facts.push(Fact::problem(
            "clients",
            "node",
            Status::Fail,
            Problem::NoPath,
            "nv_peer_mem and nvidia_peermem are both loaded; they register the same client names and only one may be",
            Some("keep one: systemctl disable --now nv_peer_mem, or rmmod nvidia_peermem".to_owned()),
        ));
    }
    facts.push(if f.peer_core {
        Fact::info("peer_core", "node", "MLNX_OFED's PeerDirect core is loaded (ib_core exports ib_register_peer_memory_client)")
    } else {
        Fact::info("peer_core", "node", "no PeerDirect core: the kernel's own RDMA stack (peer memory clients cannot register with it)")
    });
    let blocker = registration::dmabuf_blocker(&f);
    facts.push(match &blocker {
        None => Fact::info("dmabuf", "node", "DMA-BUF can serve: the RDMA core imports DMA-BUF, the verbs library has ibv_reg_dmabuf_mr, the open NVIDIA kernel module exports it"),
        Some(why) => Fact::info("dmabuf", "node", format!("DMA-BUF cannot serve: {why}")),
    });
    let path = registration::serving(&f);
    // nv_peer_mem could serve here but does not: its own diagnosis says why
    if programs && f.peer_core && !f.nv_peer_mem_loaded && !f.nvidia_peermem_loaded {
        match service::status_lines(host) {
            Some(lines) => facts.extend(lines.into_iter().map(|l| Fact::info("status", "nv_peer_mem", l))),
            None => facts.push(Fact::info(
                "status",
                "nv_peer_mem",
                format!("not installed ({} is missing): install nvidia-peer-memory and its -dkms or module package", service::HELPER),
            )),
        }
    }
    facts.push(match path {
        Path::NvPeerMem => Fact::ok("path", "node", "GPU memory registers through nv_peer_mem (PeerDirect)"),
        Path::NvidiaPeermem => Fact::ok("path", "node", "GPU memory registers through nvidia_peermem (PeerDirect)"),
        Path::DmaBuf if !f.peer_core => Fact::ok(
            "path",
            "node",
            "GPU memory registers through DMA-BUF; this node needs no peer memory client (applications must use DMA-BUF registration)",
        ),
        Path::DmaBuf => Fact::ok(
            "path",
            "node",
            "GPU memory registers through DMA-BUF; no peer memory client is loaded (applications that register GPU pointers directly need one: nv_peer_mem-service start)",
        ),
        // No RDMA device: the nic fact is the problem; nothing else is
        // missing for this one.
        Path::None if !f.rdma_device => Fact::info(
            "path",
            "node",
            "no path registers GPU memory for RDMA, as there is no RDMA device (the nic line)",
        ),
        Path::None => {
            let fix = if f.peer_core {
                "load the peer memory client: systemctl start nv_peer_mem (nv_peer_mem-service status says why it is not loaded)".to_owned()
            } else {
                "for DMA-BUF, the NVIDIA open kernel module (Turing or newer GPUs) and Linux 5.12 or newer (see the dmabuf line); or MLNX_OFED with nv_peer_mem".to_owned()
            };
            Fact::problem("path", "node", Status::Fail, Problem::NoPath, "no path registers GPU memory for RDMA", Some(fix))
        }
    });
    (path, blocker.is_none())
}

/// Every RDMA device with its PCI function and its distance from @gpu, in
/// the order of @nics (by name).
fn nic_distances<'a>(
    host: &Host,
    gpu: &PciDevice,
    nics: &'a [Nic],
    devices: &'a [PciDevice],
) -> Vec<(&'a Nic, &'a PciDevice, Distance)> {
    let shape = |device: &str, index: usize| is_downstream(host, devices, device, index);
    let merged = |usp: &str| bcm_upper_switch(host, devices, usp);
    nics.iter()
        .filter_map(|nic| {
            let dev = devices.iter().find(|d| d.address == nic.address)?;
            Some((nic, dev, topology::distance(gpu, dev, &shape, &merged)))
        })
        .collect()
}

/// Whether a Broadcom virtual switch link joins a Broadcom switch above
/// @gpu to one above @nic: NCCL reads, for each of its PCI nodes of vendor
/// 0x1000, `/sys/kernel/pci_switch_link/virtual_switch_links/<bus id>/`,
/// whose entries name linked switches (graph/xml.cc getBcmLinks; 2.30
/// os/linux.cc ncclOsGetBcmLinks), and joins them by a link through which
/// the path is PXB, not through the CPU (graph/topo.cc
/// ncclTopoAddPciLinks, paths.cc). The directory is a Broadcom driver's,
/// not the kernel's: its shape here is what NCCL reads of it.
fn bcm_virtual_link(host: &Host, devices: &[PciDevice], gpu: &PciDevice, nic: &PciDevice) -> bool {
    let broadcom = |d: &PciDevice| -> Vec<String> {
        d.chain[..d.chain.len() - 1]
            .iter()
            .filter(|a| {
                devices
                    .iter()
                    .any(|x| &x.address == *a && x.vendor == 0x1000)
            })
            .cloned()
            .collect()
    };
    let theirs = broadcom(nic);
    broadcom(gpu).iter().any(|s| {
        let dir = host.sys_path(&format!("kernel/pci_switch_link/virtual_switch_links/{s}"));
        host.exists(&dir)
            && host
                .names(&dir)
                .is_ok_and(|names| names.iter().any(|n| theirs.contains(n)))
    })
}

/// The upstream port of the upper level of the Broadcom PEX switch whose
/// lower level's upstream port is @usp: NCCL flattens the two levels such
/// a switch shows into one switch (graph/topo.cc,
/// ncclTopoFlattenBcmSwitches: a switch of NCCL's tree, where every
/// second directory is a switch, with a child switch of the same
/// generation). None for any other switch, and where the ids cannot be
/// read (NCCL then sees no Broadcom switch either).
fn bcm_upper_switch(host: &Host, devices: &[PciDevice], usp: &str) -> Option<String> {
    let ids = |d: &PciDevice| -> Option<[u16; 4]> {
        let mut out = [d.vendor, d.device, 0, 0];
        for (i, file) in [(2, "subsystem_vendor"), (3, "subsystem_device")] {
            out[i] = host.hex(&d.dir.join(file)).ok()? as u16;
        }
        Some(out)
    };
    let lower = devices.iter().find(|d| d.address == usp)?;
    let generation = topology::bcm_generation(ids(lower)?, 1)?;
    // Its parent is the upper switch's downstream port, whose parent is
    // that switch's upstream port.
    let upper_address = lower.chain.len().checked_sub(3).map(|i| &lower.chain[i])?;
    let upper = devices.iter().find(|d| &d.address == upper_address)?;
    (topology::bcm_generation(ids(upper)?, 0) == Some(generation)).then(|| upper.address.clone())
}

/// The links from @d up to its CPU in NCCL's tree (graph/xml.cc,
/// ncclTopoGetXmlFromSys: of the directories above a device every second
/// is a node, a switch's upstream port, so a root port is none), less a
/// Broadcom switch's lower level, which NCCL flattens into the upper.
fn nccl_hops(host: &Host, devices: &[PciDevice], d: &PciDevice) -> usize {
    let mut hops = 1;
    let mut at = d.chain.len().saturating_sub(1);
    while at >= 3 {
        let up = at - 2;
        if bcm_upper_switch(host, devices, &d.chain[up]).is_none() {
            hops += 1;
        }
        at = up;
    }
    hops
}

/// The NUMA id of the CPU NCCL hangs @d from: -1 where unset or where
/// NCCL finds no sysfs path for it (a VMD domain's).
fn nccl_numa(d: &PciDevice) -> i64 {
    if topology::nccl_finds(&d.address) {
        d.numa_node.map_or(-1, i64::from)
    } else {
        -1
    }
}

/// A switch downstream port: from config space where it can be read,
/// else from the tree's shape.
fn is_downstream(host: &Host, devices: &[PciDevice], address: &str, index: usize) -> bool {
    let from_config = devices
        .iter()
        .find(|d| d.address == address)
        .and_then(|d| port_type(host, d));
    match from_config {
        Some(t) => t == PortType::DownstreamPort,
        None => topology::downstream_by_shape(index),
    }
}

/// NVIDIA's PCI topology gate for a GPU and its closest NIC
/// (nvidia::TopologyGate): denied outright, or, by default, a pair that
/// shares no PCI switch on bare metal, which the driver refuses on the
/// chipsets it flags (a list the check cannot read, so said, not judged).
fn gate_fact(
    gpu: &PciDevice,
    nic: &Nic,
    distance: Distance,
    gate: Option<nvidia::TopologyGate>,
    vm: bool,
    facts: &mut Vec<Fact>,
) {
    let shares_switch = distance <= Distance::Pxb;
    match gate {
        Some(nvidia::TopologyGate::Deny) => facts.push(Fact::problem(
            "nvidia_gate",
            &gpu.address,
            Status::Fail,
            Problem::DataPath,
            format!("the NVIDIA driver refuses every GPUDirect RDMA mapping of this GPU for {} (NVreg_GrdmaPciTopoCheckOverride=2)", nic.name),
            Some("remove NVreg_GrdmaPciTopoCheckOverride=2 from the nvidia module's options (modprobe.d), then reload the driver".to_owned()),
        )),
        Some(nvidia::TopologyGate::Default) if !shares_switch && !vm => facts.push(Fact::info(
            "nvidia_gate",
            &gpu.address,
            format!("{} shares no PCI switch with this GPU ({distance}): on a chipset the NVIDIA driver flags as unsupported for peer-to-peer it refuses DMA-BUF mappings (kernel log: \"dma-buf attach failed: PCI topology not supported\"); NVreg_GrdmaPciTopoCheckOverride=1 lifts its check", nic.name),
        )),
        _ => {}
    }
}

/// A bridge's PCIe port type, from the dwords of config space that hold
/// it (read once per bridge).
fn port_type(host: &Host, d: &PciDevice) -> Option<PortType> {
    let reader = host.config(&d.dir.join("config")).ok()?;
    ConfigSpace::from_reader(&reader).port_type()
}

/// NCCL's NIC for @gpu by @rule and the relay it takes: paths.cc puts
/// each relay's path (PXN, as wide as @relayed_bw says) in place of the
/// GPU's own to that NIC, then ncclTopoGetLocalNet picks among them all
/// (nccl_local_net::pick_with; PXN ranks after PIX and PXB and before
/// PHB: nccl_local_net::PathType).
/// Where a relay was not seen or its bandwidth is not known, pxn::relay's
/// own choice stands. A relayed GPU's device is its own pick (the check
/// names its own nearest beside the relay).
fn settle(
    views: &[nccl_local_net::View],
    gpu: &str,
    relayed: &pxn::Relayed,
    relayed_bw: &dyn Fn(&pxn::Relay, &[nccl_local_net::View]) -> Option<f64>,
    gdr_at: &dyn Fn(&pxn::Relay) -> bool,
    diverted: &Diverted,
    rule: nccl_local_net::Rule,
) -> Settled {
    let widths: Option<Vec<f64>> = relayed
        .candidates
        .iter()
        .map(|r| relayed_bw(r, views).filter(|_| r.seen))
        .collect();
    let Some(widths) = widths.filter(|w| !w.is_empty()) else {
        let by = pick_among(views, gpu, &relayed.outweighed, rule);
        return (by, relayed.chosen.clone(), None);
    };
    let Some((_, own)) = views.iter().find(|(g, _)| g == gpu) else {
        return (None, None, None);
    };
    // A relay without GPUDirect RDMA at the level is diverted through
    // the GPU's local CPU (paths.cc: a path below PHB whose
    // ncclTopoCheckGdr says no): the GPU's own path where that CPU is
    // its own, else @diverted's.
    let rerouted = |nic: &str| {
        relayed
            .candidates
            .iter()
            .filter(|r| r.nic == nic && !(r.c2c || gdr_at(r)))
            .find_map(|r| diverted(r, rule))
    };
    use nccl_local_net::PathType;
    let mine: Vec<(String, PathType, f64)> = own
        .iter()
        .map(|(nic, d, bw)| {
            let relayed_here = relayed
                .candidates
                .iter()
                .position(|r| r.nic == *nic && (r.c2c || gdr_at(r)));
            match (relayed_here, rerouted(nic)) {
                (Some(i), _) => (nic.clone(), PathType::Pxn, widths[i]),
                (None, Some((x, bw))) => (nic.clone(), PathType::Pci(x), bw),
                (None, None) => (nic.clone(), PathType::Pci(*d), *bw),
            }
        })
        .collect();
    let by = nccl_local_net::pick_with(views, gpu, &mine, rule);
    let taken = relayed
        .candidates
        .iter()
        .find(|r| Some(&r.nic) == by.as_ref() && (r.c2c || gdr_at(r)));
    match taken {
        Some(r) => (
            nccl_local_net::pick(views, gpu, rule),
            Some(r.clone()),
            None,
        ),
        None => {
            let through = by.as_deref().and_then(rerouted).map(|(x, _)| x);
            (by, None, through)
        }
    }
}

/// A relay's path where NCCL diverts it through the GPU's local CPU
/// (check.rs's `diverted`), by a release's rule: its type and bandwidth.
type Diverted<'a> = dyn Fn(&pxn::Relay, nccl_local_net::Rule) -> Option<(Distance, f64)> + 'a;

/// What `settle` gives: the NIC NCCL gives the GPU, the relay it takes,
/// and where NCCL diverts the GPU's path to that NIC through a local CPU
/// not its own, that path's type.
type Settled = (Option<String>, Option<pxn::Relay>, Option<Distance>);

/// The NIC NCCL gives @gpu under @rule (nccl_local_net::pick), none of
/// @outweighed (pxn::Relayed): @views with the GPU's paths to them left
/// out, which are narrower than the one NCCL takes and so change nothing
/// else of ncclTopoGetLocalNet's choice.
fn pick_among(
    views: &[nccl_local_net::View],
    gpu: &str,
    outweighed: &[String],
    rule: nccl_local_net::Rule,
) -> Option<String> {
    if outweighed.is_empty() {
        return nccl_local_net::pick(views, gpu, rule);
    }
    let left: Vec<nccl_local_net::View> = views
        .iter()
        .map(|(g, paths)| {
            let kept = paths
                .iter()
                .filter(|(n, _, _)| g != gpu || !outweighed.contains(n))
                .cloned()
                .collect();
            (g.clone(), kept)
        })
        .collect();
    nccl_local_net::pick(&left, gpu, rule)
}

/// @gpu's path to @nic in @views: its type and bandwidth.
fn path_of(views: &[nccl_local_net::View], gpu: &str, nic: &str) -> Option<(Distance, f64)> {
    let (_, paths) = views.iter().find(|(g, _)| g == gpu)?;
    paths
        .iter()
        .find(|(n, _, _)| n == nic)
        .map(|(_, d, bw)| (*d, *bw))
}

/// @views without their path bandwidths: what pxn::relay reads.
fn plain_views(views: &[nccl_local_net::View]) -> Vec<(String, Vec<(String, Distance)>)> {
    views
        .iter()
        .map(|(g, v)| {
            (
                g.clone(),
                v.iter().map(|(n, d, _)| (n.clone(), *d)).collect(),
            )
        })
        .collect()
}

/// The distance and NCCL facts of @gpu where PXN may relay it (pxn.rs):
/// its own closest NIC @nic is @direct from it, beyond PXB; NCCL reaches
/// @relay's NIC through its peer GPU over NVLink and judges GPUDirect RDMA
/// by the peer's distance. Where NVLink could not be seen, neither verdict
/// is given: a warning there could drain a node NCCL serves well.
fn relay_facts(
    gpu: &PciDevice,
    nic: &Nic,
    direct: Distance,
    relay: &pxn::Relay,
    (level, c2c): (&(usize, String), Option<&c2c::Settings>),
    sees: bool,
    facts: &mut Vec<Fact>,
) {
    let own = format!(
        "closest RDMA device {} ({}) is {direct} from it",
        nic.name, nic.address
    );
    let peer_path = if relay.c2c {
        format!(
            "P2C from {}: over its C2C link to its CPU, then PCIe, {} in sysfs",
            relay.peer, relay.distance
        )
    } else {
        format!("{} from {}", relay.distance, relay.peer)
    };
    let through = format!(
        "{} through GPU {} over NVLink (PXN; {} is {peer_path})",
        relay.nic, relay.peer, relay.nic
    );
    if !relay.seen {
        let unseen = if relay.c2c {
            "whether NVLink joins them and the peer's C2C link is up only nvidia-smi can tell (`nvidia-smi topo -m`, `nvidia-smi c2c -s`; the check asks them in its default and --json forms)"
        } else {
            "whether NVLink joins them only nvidia-smi can tell (`nvidia-smi topo -m`; the check asks it in its default and --json forms)"
        };
        facts.push(Fact::info(
            "distance",
            &gpu.address,
            format!("{own}: NCCL may reach {through}: {unseen}"),
        ));
        // Without the relay NCCL judges the GPU's own path by the level.
        let name = consumers::level_name(level.0);
        let otherwise = if sees && consumers::nccl_within(direct, level.0) {
            format!(
                "else with {} directly ({direct} within {name}, {})",
                nic.name, level.1
            )
        } else {
            format!("else not with {}", nic.name)
        };
        facts.push(Fact::info("nccl", &gpu.address, format!("NCCL uses GPUDirect RDMA with {through} if NVLink joins them, {otherwise}: {unseen}")));
        return;
    }
    facts.push(Fact::ok(
        "distance",
        &gpu.address,
        format!("{own}; NCCL reaches {through}"),
    ));
    // Over the peer's C2C link GPUDirect RDMA is judged by NCCL's rule for
    // a P2C path (c2c.rs), which the releases may decide otherwise.
    if let Some(s) = c2c.filter(|_| sees) {
        let rule = match s.rule {
            Some(c2c::Release::R2_28) => ", NCCL 2.28's rule",
            Some(c2c::Release::R2_30) => ", NCCL 2.30's rule",
            None => "",
        };
        let how = format!("{}; {}{rule}", s.level_from, s.c2c.1);
        facts.push(match s.verdict() {
            Some(true) => Fact::ok("nccl", &gpu.address, format!("NCCL uses GPUDirect RDMA with {through} ({how})")),
            Some(false) => Fact::info("nccl", &gpu.address, format!("NCCL does not use GPUDirect RDMA with {through} ({how})")),
            None => Fact::info("nccl", &gpu.address, format!("NCCL 2.28 uses GPUDirect RDMA with {through} and NCCL 2.30 does not ({how}: 2.28.9 counts a P2C path as C2C, 2.30.7 compares it as P2C): which NCCL the job loads decides (no libnccl of either series is installed)")),
        });
        return;
    }
    let name = consumers::level_name(level.0);
    facts.push(if sees && consumers::nccl_within(relay.distance, level.0) {
        Fact::ok("nccl", &gpu.address, format!("NCCL uses GPUDirect RDMA with {through}, within {name} ({})", level.1))
    } else if sees {
        Fact::info("nccl", &gpu.address, format!("NCCL does not use GPUDirect RDMA with {through}: {} is beyond {name} ({})", relay.distance, level.1))
    } else {
        Fact::info("nccl", &gpu.address, format!("NCCL does not use GPUDirect RDMA with {through}: it finds no GPUDirect RDMA support on this node (see the nccl line)"))
    });
}

/// Where no NCCL is installed, the check follows 2.30.7; 2.28.9 may relay
/// a GPU that 2.30.7 does not, or the reverse (their merges of an
/// adapter's functions and their channel rules differ, so a NIC's local
/// GPU may be another: nccl_local_net.rs). Each says 2.28's relay, or its
/// NIC, with its GPUDirect RDMA verdict (", with GPUDirect RDMA (" or
/// ", without GPUDirect RDMA ("), which the NCCL oracle holds to 2.28.9.
fn relayed_by_228(
    gpu: &PciDevice,
    relay: &pxn::Relay,
    level: &(usize, String),
    sees: bool,
) -> Fact {
    let verdict = gdr_by_level(relay.distance, level, sees);
    Fact::info(
        "nccl",
        &gpu.address,
        format!(
            "NCCL 2.30 does not relay this GPU, NCCL 2.28 relays it through {} via GPU {} over NVLink (PXN; {} is {} from {}), {verdict}: which NCCL the job loads decides; judged with 2.30's",
            relay.nic, relay.peer, relay.nic, relay.distance, relay.peer
        ),
    )
}

/// relayed_by_228's other half: 2.30.7 relays through @relayed, 2.28.9
/// does not and gives the GPU @by_228 (in @views_228).
fn not_relayed_by_228(
    gpu: &PciDevice,
    relayed: &str,
    (by_228, through): (Option<&str>, Option<Distance>),
    views_228: &[nccl_local_net::View],
    level: &(usize, String),
    sees: bool,
) -> Option<Fact> {
    let theirs = device_228(&gpu.address, by_228?, through, views_228, level, sees);
    Some(Fact::info(
        "nccl",
        &gpu.address,
        format!(
            "NCCL 2.30 relays this GPU through {relayed}, NCCL 2.28 does not relay it: NCCL 2.28 gives it {theirs}: which NCCL the job loads decides; judged with {relayed}"
        ),
    ))
}

/// 2.28.9's device @theirs for @gpu as the check names it beside 2.30's:
/// "mlx5_4 (SYS from it), without GPUDirect RDMA (SYS beyond PXB, ...)",
/// its distance in @views_228 (the name alone where it is not there).
fn device_228(
    gpu: &str,
    theirs: &str,
    through: Option<Distance>,
    views_228: &[nccl_local_net::View],
    level: &(usize, String),
    sees: bool,
) -> String {
    match through.or_else(|| path_of(views_228, gpu, theirs).map(|p| p.0)) {
        Some(d) => format!("{theirs} ({d} from it), {}", gdr_by_level(d, level, sees)),
        None => theirs.to_owned(),
    }
}

/// "with GPUDirect RDMA (PIX within PXB, NCCL's default, PXB)" or
/// "without ..." for a path of @distance at @level.
fn gdr_by_level(distance: Distance, level: &(usize, String), sees: bool) -> String {
    let name = consumers::level_name(level.0);
    if !sees {
        return "without GPUDirect RDMA (NCCL finds no GPUDirect RDMA support on this node)"
            .to_owned();
    }
    if consumers::nccl_within(distance, level.0) {
        format!(
            "with GPUDirect RDMA ({distance} within {name}, {})",
            level.1
        )
    } else {
        format!(
            "without GPUDirect RDMA ({distance} beyond {name}, {})",
            level.1
        )
    }
}

/// @gpu's closest NIC within PCIe switches but beyond NCCL's level, on a
/// GPU whose C2C link is up: paths.cc (ncclTopoComputePaths) diverts the
/// pair through the GPU's CPU where ncclTopoCheckGdr says no, and that
/// route is P2C, which NCCL's C2C rule judges (c2c.rs: 2.28.9 lets it
/// through at any level, 2.30.7 only up to P2C).
fn diverted_facts(
    gpu: &PciDevice,
    nic: &Nic,
    sysfs: Distance,
    seen: (Distance, Option<&str>),
    (level, s): (&(usize, String), &c2c::Settings),
    sees: bool,
    facts: &mut Vec<Fact>,
) {
    let verdict = if sees { s.verdict() } else { Some(false) };
    if verdict == Some(false) {
        distance_fact(gpu, nic, sysfs, seen, level, facts);
        nccl_pair_fact(gpu, nic, seen.0, level, sees, facts);
        return;
    }
    let (nccl, by) = seen;
    let by = by.map(|b| format!(" {b}")).unwrap_or_default();
    let also = if nccl != sysfs {
        format!(" ({sysfs} in sysfs)")
    } else {
        String::new()
    };
    let name = consumers::level_name(level.0);
    let route = format!(
        "beyond {name} ({}), NCCL routes it through the GPU's CPU over its C2C link: P2C",
        level.1
    );
    facts.push(Fact::info(
        "distance",
        &gpu.address,
        format!(
            "closest RDMA device {} ({}) is {nccl} from it{by}{also}; {route}",
            nic.name, nic.address
        ),
    ));
    let how = format!("{}; {}", s.level_from, s.c2c.1);
    facts.push(match verdict {
        Some(_) => Fact::ok(
            "nccl",
            &gpu.address,
            format!("NCCL uses GPUDirect RDMA with {} over the GPU's C2C link ({how}, NCCL 2.28's rule for P2C)", nic.name),
        ),
        None => Fact::info(
            "nccl",
            &gpu.address,
            format!("NCCL 2.28 uses GPUDirect RDMA with {} over the GPU's C2C link and NCCL 2.30 does not ({how}: 2.28.9 counts a P2C path as C2C, 2.30.7 compares it as P2C): which NCCL the job loads decides (no libnccl of either series is installed)", nic.name),
        ),
    });
}

/// What brings @nic's ports up, port by port (rdma::Port::why_down).
fn port_fixes(nic: &Nic) -> String {
    nic.ports
        .iter()
        .flatten()
        .map(rdma::Port::why_down)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The distance between @gpu and its closest NIC as NCCL judges it: the
/// one NCCL sees (@nccl, and @by what, where it is not @sysfs's: its
/// topology file, a Broadcom virtual switch link).
fn distance_fact(
    gpu: &PciDevice,
    nic: &Nic,
    sysfs: Distance,
    (nccl, by): (Distance, Option<&str>),
    level: &(usize, String),
    facts: &mut Vec<Fact>,
) {
    let distance = nccl;
    let message = match by {
        Some(by) if nccl != sysfs => format!(
            "closest RDMA device {} ({}) is {nccl} from it {by} ({sysfs} in sysfs)",
            nic.name, nic.address
        ),
        _ => format!(
            "closest RDMA device {} ({}) is {distance} from it",
            nic.name, nic.address
        ),
    };
    if consumers::nccl_within(distance, level.0) {
        facts.push(Fact::ok("distance", &gpu.address, message));
    } else {
        facts.push(Fact::problem(
            "distance",
            &gpu.address,
            Status::Warn,
            Problem::Topology,
            format!(
                "{message}: NCCL uses GPUDirect RDMA only up to {} ({})",
                consumers::level_name(level.0),
                level.1
            ),
            Some(
                match [gpu.address.as_str(), nic.address.as_str()]
                    .into_iter()
                    .find(|a| !topology::nccl_finds(a))
                {
                    // A place NCCL cannot read: out of the VMD domain NCCL
                    // judges the device where it is (tests/nccl_oracle.rs).
                    Some(vmd) => format!(
                        "take {vmd} out of its VMD domain (the firmware's VMD setting for its root port), and NCCL sees it {sysfs} from the GPU; or, if measured faster, NCCL_NET_GDR_LEVEL={}",
                        consumers::nccl_name(distance)
                    ),
                    None => format!(
                        "put the GPU and an RDMA adapter under one PCIe switch; or, if measured faster, NCCL_NET_GDR_LEVEL={}",
                        consumers::nccl_name(distance)
                    ),
                },
            ),
        ));
    }
}

/// ACS on the bridges between @gpu and @nic. Redirection (RR, CR, EC:
/// the kernel's pci_bridge_has_acs_redir) matters on a switch's
/// downstream port; on a root port it sends up to the root complex what a
/// PHB pair's path already takes there (config_space::redirect_matters).
/// In a VM the bridges are the hypervisor's model: their ACS is said,
/// never judged.
fn acs_facts(
    host: &Host,
    gpu: &PciDevice,
    nic: &PciDevice,
    distance: Distance,
    devices: &[PciDevice],
    vm: bool,
    facts: &mut Vec<Fact>,
) {
    for bridge in topology::bridges_between(gpu, nic) {
        let Some(dev) = devices.iter().find(|d| d.address == bridge) else {
            continue;
        };
        let reader = match host.config(&dev.dir.join("config")) {
            Ok(r) => r,
            Err(u) => {
                facts.push(Fact::unreadable("acs", &bridge, &u));
                continue;
            }
        };
        let config = ConfigSpace::from_reader(&reader);
        let state = config.acs();
        let port = config.port_type();
        let between = format!("between {} and {}", gpu.address, nic.address);
        let subject = bridge.clone();
        match state {
            AcsState::Present(acs) if acs.redirects() && vm => facts.push(Fact::info(
                "acs",
                subject,
                format!("{between}: this VM's bridge shows ACS redirection ({}); what counts is the host's ACS, which a VM cannot see", acs.enabled().join(" ")),
            )),
            AcsState::Present(acs)
                if acs.redirects()
                    && (distance < Distance::Phb || config_space::redirect_matters(port)) =>
            {
                facts.push(Fact::problem(
                    "acs",
                    subject,
                    Status::Fail,
                    Problem::DataPath,
                    format!(
                        "{between}: ACS redirects peer-to-peer traffic up to the root complex (ACSCtl: {})",
                        acs.enabled().join(" ")
                    ),
                    Some(format!(
                        "boot with pci=disable_acs_redir={bridge}; or, until reboot, {}",
                        config_space::setpci_fix(&bridge, &acs)
                    )),
                ))
            }
            AcsState::Present(acs) if acs.redirects() => facts.push(Fact::info(
                "acs",
                subject,
                format!("{between}: ACS redirection on this root port ({}) changes nothing for a {distance} pair, whose traffic goes through the root complex anyway", acs.enabled().join(" ")),
            )),
            AcsState::Present(acs) => facts.push(Fact::ok(
                "acs",
                subject,
                format!(
                    "{between}: ACS does not redirect peer-to-peer traffic (ACSCtl: {})",
                    if acs.control == 0 { "none".to_owned() } else { acs.enabled().join(" ") }
                ),
            )),
            AcsState::Absent | AcsState::NoExtendedSpace => {
                facts.push(Fact::ok("acs", subject, format!("{between}: no ACS capability, nothing redirects peer-to-peer traffic here")))
            }
            AcsState::ExtendedSpaceUnreadable => facts.push(Fact::problem(
                "acs",
                subject,
                Status::Unknown,
                Problem::Unreadable,
                format!("{between}: config space reads only 256 bytes even as root (no extended config access on this platform), so ACS cannot be read"),
                Some("enable MMCONFIG/ECAM (do not boot with pci=nommconf); lspci -vvv -s BRIDGE shows what the kernel can read".replace("BRIDGE", &bridge)),
            )),
            AcsState::NeedsRoot => facts.push(Fact::problem(
                "acs",
                subject,
                Status::Unknown,
                Problem::Unreadable,
                format!("{between}: ACS is beyond the first 64 bytes of config space, which only root can read"),
                Some("run the check as root".to_owned()),
            )),
            AcsState::Malformed => facts.push(Fact::problem(
                "acs",
                subject,
                Status::Unknown,
                Problem::Unreadable,
                format!("{between}: the extended capability list in config space is malformed"),
                None,
            )),
        }
    }
}

fn iommu_fact(host: &Host, dev: &PciDevice, vm: bool, facts: &mut Vec<Fact>) {
    match iommu::mode(host, dev) {
        Ok(iommu::Mode::Off) if vm => facts.push(Fact::info("iommu", &dev.address, "no IOMMU in this VM: the host's IOMMU, which this VM cannot see, translates this device's DMA (a passed-through device's addresses are the VM's, not the host's)")),
        Ok(iommu::Mode::Off) => facts.push(Fact::ok("iommu", &dev.address, "no IOMMU translates this device's DMA")),
        Ok(iommu::Mode::Passthrough) => facts.push(Fact::ok("iommu", &dev.address, "IOMMU in passthrough (identity)")),
        Ok(iommu::Mode::Translating(kind)) => facts.push(Fact::problem(
            "iommu",
            &dev.address,
            Status::Warn,
            Problem::DataPath,
            format!("the IOMMU translates this device's DMA (domain type {kind}): peer-to-peer traffic goes through it"),
            Some("boot with iommu=pt (x86) or iommu.passthrough=1: an identity domain for host devices".to_owned()),
        )),
        Ok(iommu::Mode::Other(kind)) => facts.push(Fact::info("iommu", &dev.address, format!("IOMMU domain type {kind}"))),
        Err(u) => facts.push(Fact::unreadable("iommu", &dev.address, &u)),
    }
}

fn bar1_fact(gpu: &PciDevice, memory: Option<u64>, programs: bool, facts: &mut Vec<Fact>) {
    let bar1 = match nvidia::bar1(gpu) {
        Ok(Some(bar1)) => bar1,
        Ok(None) => {
            facts.push(Fact::problem(
                "bar1",
                &gpu.address,
                Status::Fail,
                Problem::NoPath,
                "BAR1 has no address (the firmware assigned none): peers cannot reach this GPU's memory",
                Some("enable Above 4G Decoding (and, where offered, Resizable BAR) in the system firmware so that it can place BAR1".to_owned()),
            ));
            return;
        }
        Err(why) => {
            facts.push(Fact::problem(
                "bar1",
                &gpu.address,
                Status::Unknown,
                Problem::Unreadable,
                why,
                None,
            ));
            return;
        }
    };
    match memory {
        Some(mem) if bar1 < mem => facts.push(Fact::problem(
            "bar1",
            &gpu.address,
            Status::Warn,
            Problem::Topology,
            format!("BAR1 is {} but the GPU has {} of memory: at most BAR1's worth can be registered for RDMA at once", gib(bar1), gib(mem)),
            Some("enable a large BAR1 (resizable BAR) in the system firmware, or register less GPU memory at a time".to_owned()),
        )),
        Some(mem) => facts.push(Fact::ok("bar1", &gpu.address, format!("BAR1 is {} for {} of GPU memory", gib(bar1), gib(mem)))),
        None if programs => facts.push(Fact::info("bar1", &gpu.address, format!("BAR1 is {} (GPU memory size unknown: nvidia-smi not found or did not answer in time)", gib(bar1)))),
        None => facts.push(Fact::info("bar1", &gpu.address, format!("BAR1 is {} (GPU memory not compared: the monitoring forms ask no program)", gib(bar1)))),
    }
}

fn gib(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

/// Why a peer client serves but NCCL's files are missing, and what to do
/// (docs/readiness.md, "Which consumer sees which path"): MLNX_OFED's core
/// makes /sys/kernel/mm/memory_peers only on kernels that export mm_kobj;
/// this project's nv_peer_mem makes it elsewhere and says in its read-only
/// `memory_peers` parameter whether it did (docs/contracts.md,
/// "memory_peers without mm_kobj").
fn missing_peer_files_fix(host: &Host, path: Path) -> String {
    let elsewhere = "on this kernel load nvidia_peermem instead (NCCL tests /sys/module/nvidia_peermem/version), or register through DMA-BUF";
    let param = host.sys_path("module/nv_peer_mem/parameters/memory_peers");
    match (path, host.text(&param)) {
        (Path::NvPeerMem, Ok(said)) if said.starts_with("failed") => format!(
            "MLNX_OFED's PeerDirect core made no /sys/kernel/mm/memory_peers (it makes it only on kernels that export mm_kobj), and nv_peer_mem could not make it either (its parameter memory_peers says `{}`; `dmesg | grep nv_peer_mem` says why): remove what holds that name, then reload nv_peer_mem (modprobe -r nv_peer_mem && modprobe nv_peer_mem); or {elsewhere}",
            said.trim()
        ),
        (Path::NvPeerMem, Err(_)) => format!(
            "MLNX_OFED's PeerDirect core creates /sys/kernel/mm/memory_peers/nv_mem/version only on kernels that export mm_kobj (its configure's HAVE_MM_KOBJ_EXPORTED; Debian's 6.12 does not), and this nv_peer_mem does not make them itself (it has no memory_peers parameter: Mellanox's 1.3, or a build of this project's from before 2026-11-27): install the current nv_peer_mem; or {elsewhere}"
        ),
        _ => format!(
            "MLNX_OFED's PeerDirect core creates /sys/kernel/mm/memory_peers/nv_mem/version for the nv_mem client only on kernels that export mm_kobj (its configure's HAVE_MM_KOBJ_EXPORTED; Debian's 6.12 does not): {elsewhere}"
        ),
    }
}

/// What NCCL and UCX see on this node (consumers.rs); returns whether
/// NCCL finds GPUDirect RDMA support at all. @devices: whether some RDMA
/// device has an ACTIVE port, whether NCCL takes one (nccl_ib.rs), and
/// the `NCCL_IB_HCA` it took them by.
fn consumer_facts(
    host: &Host,
    path: Path,
    dmabuf: bool,
    (active, taken, hca): (bool, bool, Option<&nccl_ib::Hca>),
    facts: &mut Vec<Fact>,
) -> bool {
    if !active {
        // NCCL's IB plugin finds no device ("NET/IB : No device found")
        // and NCCL falls back to sockets; UCX has no IB transport.
        facts.push(Fact::info("nccl", "node", "NCCL finds no RDMA device (NET/IB: No device found) and uses sockets: no GPUDirect RDMA"));
        facts.push(Fact::info(
            "ucx",
            "node",
            "UCX finds no RDMA device: no GPUDirect RDMA",
        ));
        return false;
    }
    if !taken {
        let why = hca.map_or(String::new(), |h| format!(" ({})", h.shown));
        facts.push(Fact::info("nccl", "node", format!("NCCL takes none of the RDMA devices{why} (NET/IB: No device found) and uses sockets: no GPUDirect RDMA")));
    }
    let nccl = consumers::present(host, &consumers::NCCL_FILES);
    let ucx = consumers::present(host, &consumers::UCX_FILES);
    let peer_client = matches!(path, Path::NvPeerMem | Path::NvidiaPeermem);
    let seen = |files: &[&str]| {
        files
            .iter()
            .map(|f| format!("/sys/{f}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // NCCL registers through DMA-BUF wherever it serves, a peer client
    // beside it or not (consumers::nccl_dmabuf), unless turned off.
    let off_by = consumers::nccl_dmabuf_off(host);
    let nccl_dmabuf = dmabuf && off_by.is_none();
    if taken {
        facts.push(match (nccl.is_empty(), nccl_dmabuf) {
            (false, true) if peer_client => Fact::ok("nccl", "node", format!(
                "NCCL finds GPUDirect RDMA support: {}; it registers GPU memory through DMA-BUF, which it takes before {} where both serve (NCCL_DMABUF_ENABLE=0 keeps it on {})",
                seen(&nccl), path.name(), path.name()
            )),
            (false, _) => Fact::ok("nccl", "node", format!(
                "NCCL finds GPUDirect RDMA support: {}{}",
                seen(&nccl),
                match (&off_by, dmabuf) {
                    (Some(by), true) => format!(" (DMA-BUF, which would also serve, is off: {by})"),
                    _ => String::new(),
                }
            )),
            (true, true) => Fact::ok(
                "nccl",
                "node",
                "NCCL finds GPUDirect RDMA support through DMA-BUF (no peer-memory file, none needed)",
            ),
            (true, false) if peer_client => Fact::problem(
                "nccl",
                "node",
                Status::Warn,
                Problem::Topology,
                format!(
                    "{} serves, but none of the files NCCL tests exists ({}): NCCL runs without GPUDirect RDMA",
                    path.name(),
                    seen(&consumers::NCCL_FILES)
                ),
                Some(missing_peer_files_fix(host, path)),
            ),
            (true, false) => Fact::info("nccl", "node", match (&off_by, dmabuf) {
                (Some(by), true) => format!("NCCL finds no GPUDirect RDMA support: no peer-memory file, and DMA-BUF, which would serve, is off ({by})"),
                _ => "NCCL finds no GPUDirect RDMA support (no peer-memory file, no DMA-BUF)".to_owned(),
            }),
        });
    }
    facts.push(match (ucx.is_empty(), dmabuf) {
        (false, _) => Fact::ok(
            "ucx",
            "node",
            format!("UCX finds GPUDirect RDMA support: {}", seen(&ucx)),
        ),
        (true, true) => Fact::ok(
            "ucx",
            "node",
            "UCX finds GPUDirect RDMA support through DMA-BUF",
        ),
        (true, false) => Fact::info(
            "ucx",
            "node",
            format!(
                "UCX finds no GPUDirect RDMA support (none of {}, no DMA-BUF)",
                seen(&consumers::UCX_FILES)
            ),
        ),
    });
    taken && (!nccl.is_empty() || nccl_dmabuf)
}

/// NCCL's decision for one GPU and its closest NIC: support on the node
/// and the distance within its level.
fn nccl_pair_fact(
    gpu: &PciDevice,
    nic: &Nic,
    distance: Distance,
    level: &(usize, String),
    sees: bool,
    facts: &mut Vec<Fact>,
) {
    let within = consumers::nccl_within(distance, level.0);
    let name = consumers::level_name(level.0);
    facts.push(if sees && within {
        Fact::ok(
            "nccl",
            &gpu.address,
            format!(
                "NCCL uses GPUDirect RDMA with {} ({distance} within {name}, {})",
                nic.name, level.1
            ),
        )
    } else {
        let why = if sees {
            format!("{distance} is beyond {name} ({})", level.1)
        } else {
            "it finds no GPUDirect RDMA support on this node (see the nccl line)".to_owned()
        };
        Fact::info(
            "nccl",
            &gpu.address,
            format!("NCCL does not use GPUDirect RDMA with {}: {why}", nic.name),
        )
    });
}

/// A GPU whose CUDA driver reports no GPUDirect RDMA support (cuda.rs):
/// NCCL's `ncclTopoCheckGdr` turns GPUDirect RDMA off for it before any
/// distance, PXN relay or level counts, so the distance is said, not
/// judged, and no NCCL_NET_GDR_LEVEL is offered as a fix.
fn unsupported_gpu_facts(gpu: &PciDevice, nic: &Nic, distance: Distance, facts: &mut Vec<Fact>) {
    facts.push(Fact::info(
        "distance",
        &gpu.address,
        format!(
            "closest RDMA device {} ({}) is {distance} from it",
            nic.name, nic.address
        ),
    ));
    facts.push(Fact::problem(
        "nccl",
        &gpu.address,
        Status::Warn,
        Problem::NoPath,
        format!(
            "NCCL does not use GPUDirect RDMA with {}: the CUDA driver reports no GPUDirect RDMA support on this GPU (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED is 0), which also keeps peer memory clients (nvidia_p2p_get_pages) from its memory",
            nic.name
        ),
        Some("use a GPU for which the CUDA driver reports GPUDirect RDMA support; this one's memory reaches the NIC through host memory".to_owned()),
    ));
}

/// A file the walk could not read, as its own fact.
/// @what was not found, but some files could not be read (their `read`
/// lines): the verdict is "could not read", not "nothing to check".
fn cannot_tell(check: &'static str, what: &str) -> Fact {
    Fact::problem(
        check,
        "node",
        Status::Unknown,
        Problem::Unreadable,
        format!("{what}; cannot tell whether there is one, as the files above could not be read"),
        Some("see the `read` lines above; run as root where they say permission denied".to_owned()),
    )
}

fn read_fact(u: &crate::host::Unreadable) -> Fact {
    Fact::unreadable("read", u.path.display().to_string(), u)
}
