//! The verdicts the real nodes and a review against the kernel's, NVIDIA's
//! and NCCL's own code showed wrong (issue 39), each over a tree that
//! provokes it: every test here failed on the check before that issue.

mod common;
use common::*;

const RP_A: &str = "pci0000:00/0000:00:01.0";
const USP: &str = "pci0000:00/0000:00:01.0/0000:01:00.0";
const DSP_GPU: &str = "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0";
const DSP_NIC: &str = "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0";
const GPU: &str = "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0";
const NIC: &str = "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0";

/// GPU and NIC under one switch, the kernel's own RDMA core (DMA-BUF),
/// the GPU-side downstream port's ACS control as given.
fn switch_pair(name: &str, dsp_acs: u16) -> Tree {
    let t = one_switch(name, Some((0x7f, dsp_acs)));
    t.exports(&[("ib_umem_dmabuf_get", "ib_uverbs")]);
    t
}

/// GPU and NIC under separate root ports of one root bus (PHB), each
/// root port's ACS control as given.
fn phb_pair(name: &str, root_acs: u16) -> Tree {
    let t = Tree::new(name);
    t.bridge("pci0000:00/0000:00:01.0", 4, Some((0x5f, root_acs)), 0);
    t.bridge("pci0000:00/0000:00:02.0", 4, Some((0x5f, root_acs)), 0);
    t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0x2330, 0, 128 * GIB);
    t.nic("pci0000:00/0000:00:02.0/0000:02:00.0", "mlx5_0", 0);
    t.nvidia_open_580();
    t.exports(&[("ib_umem_dmabuf_get", "ib_uverbs")]);
    t
}

/// NVIDIA numbers BARs by BAR, PCI by register: on the lent H100s BAR0 is
/// 64-bit, so BAR1 is on line 2 (nv_bar_index_to_os_bar_index). Before,
/// the check read line 1 (BAR0's empty upper half): "BAR1 is not in the
/// device's resources", unreadable, on every real GPU.
#[test]
fn bar1_is_read_by_nvidias_numbering_and_an_unassigned_one_fails() {
    let t = switch_pair("bar1", 0);
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(&out, &["bar1", "0000:03:00.0", "BAR1 is 128 GiB"]);
    // firmware that could not place the 128 GiB aperture: no address
    let t = Tree::new("bar1-unassigned");
    t.bridge(RP_A, 4, None, 0);
    t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0x2330, 0, 0);
    t.nic("pci0000:00/0000:00:02.0/0000:02:00.0", "mlx5_0", 0);
    t.nvidia_open_580();
    t.exports(&[("ib_umem_dmabuf_get", "ib_uverbs")]);
    let (status, out) = t.run(&[]);
    assert_eq!(status, 4, "{out}");
    assert_line(&out, &["FAIL", "bar1", "0000:01:00.0", "no address"]);
    assert_line(&out, &["fix:", "Above 4G Decoding"]);
}

/// Egress Control alone redirects (the kernel's pci_bridge_has_acs_redir
/// tests RR|CR|EC), and the fix clears RR, CR and EC (mask 0x2c), not UF.
#[test]
fn egress_control_alone_fails_and_the_fix_masks_0x2c() {
    let t = switch_pair("acs-ec", 0x0020 | 0x0010 | 0x0001); // EC UF SV
    let (status, out) = t.run(&[]);
    assert_eq!(status, 5, "{out}");
    assert_line(&out, &["FAIL", "acs", "0000:02:00.0", "EgressCtrl"]);
    assert_line(
        &out,
        &["setpci -s 0000:02:00.0 ECAP_ACS+0x6.w=0000:002c (clears EgressCtrl and keeps"],
    );
}

/// A PCIe bridge whose config space reads 256 bytes as root: extended
/// capabilities the platform gives no access to. ACS is unknown there;
/// before, it was "no ACS capability", ok.
#[test]
fn acs_is_unknown_where_config_space_reads_256_bytes_as_root() {
    let t = switch_pair("acs-256", 0);
    let config = readiness::config_space::layout::bridge(0x10b5, 0xc010, 6, Some((0x7f, 0x0c)));
    t.write(&format!("sys/devices/{DSP_GPU}/config"), &config[..256]);
    let (status, out) = t.run(&[]);
    assert_eq!(status, 7, "{out}");
    assert_line(
        &out,
        &[
            "??",
            "acs",
            "0000:02:00.0",
            "reads only 256 bytes even as root",
        ],
    );
    assert!(
        !has_line(&out, &["acs", "0000:02:00.0", "no ACS capability"]),
        "{out}"
    );
}

/// Redirection on root ports sends to the root complex what a PHB pair's
/// path takes there anyway: said, not failed (before: FAIL, exit 5, with
/// a fix that changes nothing for the pair).
#[test]
fn root_port_redirection_does_not_fail_a_phb_pair() {
    let t = phb_pair("acs-root", 0x000c); // RR CR
    let (status, out) = t.run(&[]);
    assert_ne!(status, 5, "{out}");
    assert!(!has_line(&out, &["FAIL", "acs"]), "{out}");
    assert_line(
        &out,
        &["acs", "0000:00:01.0", "changes nothing for a PHB pair"],
    );
}

/// NCCL_NET_GDR_LEVEL takes NCCL's names (LOC PIX PXB PHB SYS ...): a
/// NODE distance is PHB to it, so the advice says PHB (before: NODE, a
/// value NCCL does not parse).
#[test]
fn the_gdr_level_advice_is_a_value_nccl_parses() {
    let t = Tree::new("node-level");
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0x2330, 0, 128 * GIB);
    t.bridge("pci0000:40/0000:40:01.0", 4, None, 0);
    t.nic("pci0000:40/0000:40:01.0/0000:41:00.0", "mlx5_0", 0);
    t.nvidia_open_580();
    t.exports(&[("ib_umem_dmabuf_get", "ib_uverbs")]);
    let (_, out) = t.run(&[]);
    assert_line(&out, &["distance", "is NODE from it"]);
    assert_line(&out, &["NCCL_NET_GDR_LEVEL=PHB"]);
    assert!(!out.contains("NCCL_NET_GDR_LEVEL=NODE"), "{out}");
}

/// DMA-BUF registration needs ibv_reg_dmabuf_mr in the verbs library
/// (rdma-core 34, libibverbs.so.1.12): an older one cannot serve.
#[test]
fn dmabuf_needs_a_verbs_library_with_ibv_reg_dmabuf_mr() {
    let t = switch_pair("old-verbs", 0);
    t.verbs_library("libibverbs.so.1.11.32.0");
    let (status, out) = t.run(&[]);
    assert_eq!(status, 4, "{out}");
    assert_line(
        &out,
        &[
            "dmabuf",
            "cannot serve",
            "libibverbs.so.1.11.32.0 has no ibv_reg_dmabuf_mr",
        ],
    );
    std::fs::remove_file(t.root.join("usr/lib/x86_64-linux-gnu/libibverbs.so.1")).unwrap();
    let (status, out) = t.run(&[]);
    assert_eq!(status, 4, "{out}");
    assert_line(&out, &["dmabuf", "no user-space verbs library"]);
}

/// NVIDIA's own gate (NVreg_GrdmaPciTopoCheckOverride, nv-pci.c): 2
/// denies every mapping; the default refuses, on the chipsets the driver
/// flags, a pair that shares no PCI switch (said, since the flag is not
/// visible); 1, and a pair under one switch, pass.
#[test]
fn nvidias_topology_gate_is_read_from_its_params() {
    let t = switch_pair("gate", 0);
    t.nvidia_gate(2);
    let (status, out) = t.run(&[]);
    assert_eq!(status, 5, "{out}");
    assert_line(
        &out,
        &[
            "FAIL",
            "nvidia_gate",
            "0000:03:00.0",
            "NVreg_GrdmaPciTopoCheckOverride=2",
        ],
    );
    t.nvidia_gate(0);
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert!(!out.contains("nvidia_gate"), "{out}");
    let t = phb_pair("gate-phb", 0);
    let (_, out) = t.run(&[]);
    assert_line(
        &out,
        &[
            "nvidia_gate",
            "0000:01:00.0",
            "shares no PCI switch",
            "NVreg_GrdmaPciTopoCheckOverride=1",
        ],
    );
    t.nvidia_gate(1);
    let (_, out) = t.run(&[]);
    assert!(!out.contains("nvidia_gate"), "{out}");
}

/// In a VM the IOMMU and ACS the check sees are the hypervisor's model:
/// "no IOMMU translates this device's DMA" was false there (the host's
/// does), and the model's ACS is said, not judged.
#[test]
fn in_a_vm_iommu_and_acs_are_said_not_judged() {
    let t = switch_pair("vm", 0x000d);
    t.vm();
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(&out, &["vm", "a virtual machine", "QEMU"]);
    assert_line(
        &out,
        &[
            "iommu",
            "0000:03:00.0",
            "no IOMMU in this VM",
            "the host's IOMMU",
        ],
    );
    assert!(!has_line(&out, &["no IOMMU translates"]), "{out}");
    assert_line(
        &out,
        &[
            "acs",
            "0000:02:00.0",
            "this VM's bridge shows ACS redirection",
        ],
    );
}

/// A bridge on two GPUs' paths is one subject: one fact and one
/// Prometheus series (node_exporter refuses a repeated series), where
/// there were two.
#[test]
fn a_bridge_on_two_gpus_paths_is_one_series() {
    let t = Tree::new("shared-bridge");
    t.bridge(RP_A, 4, None, 0);
    t.bridge(USP, 5, None, 0);
    t.bridge(DSP_GPU, 6, None, 0);
    t.bridge(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0",
        6,
        None,
        0,
    );
    t.bridge(DSP_NIC, 6, Some((0x7f, 0x000c)), 0);
    t.gpu(GPU, 0x2330, 0, 128 * GIB);
    t.gpu(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0/0000:05:00.0",
        0x2330,
        0,
        128 * GIB,
    );
    t.nic(NIC, "mlx5_0", 0);
    t.nvidia_open_580();
    t.exports(&[("ib_umem_dmabuf_get", "ib_uverbs")]);
    let (status, out) = t.run(&["--prometheus"]);
    assert_eq!(status, 5, "{out}");
    let series =
        "gpudirect_rdma_check_failed{check=\"acs\",subject=\"0000:02:01.0\",status=\"fail\"} 1";
    assert_eq!(out.matches(series).count(), 1, "{out}");
    let mut samples: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.rsplit_once(' ').unwrap().0)
        .collect();
    let all = samples.len();
    samples.sort();
    samples.dedup();
    assert_eq!(samples.len(), all, "a series is repeated:\n{out}");
}

/// --health: an apostrophe stays one (U+2019), never `adapter"s`.
#[test]
fn the_health_line_keeps_apostrophes() {
    let t = Tree::new("health-quote");
    t.gpu("pci0000:00/0000:00:01.0", 0x2330, 0, 128 * GIB);
    t.nvidia_open_580();
    let (status, out) = t.run(&["--health"]);
    assert_eq!(status, 1);
    assert!(out.contains("adapter\u{2019}s RDMA driver"), "{out}");
    assert!(!out.contains('"') && !out.contains('\''), "{out}");
}

/// The PeerDirect core without /proc/kallsyms (read three times, about
/// 55 ms each on the lent hosts' kernel): the module depmod's
/// modules.symbols names as exporting ib_register_peer_memory_client,
/// loaded and out of tree (`taint` O).
#[test]
fn the_peer_core_is_found_by_modules_symbols_and_taint() {
    let t = switch_pair("peer-core", 0);
    t.exports(&[("ib_register_peer_memory_client", "ib_core")]);
    let (_, out) = t.run(&[]);
    assert_line(
        &out,
        &["peer_core", "MLNX_OFED's PeerDirect core is loaded"],
    );
    // MLNX_OFED installed, the kernel's own ib_core still loaded: no O
    t.write("sys/module/ib_core/taint", "\n");
    let (_, out) = t.run(&[]);
    assert_line(&out, &["peer_core", "no PeerDirect core"]);
    // no modules.symbols for the running kernel (a container): an
    // out-of-tree ib_core is taken for MLNX_OFED's
    t.write("sys/module/ib_core/taint", "OE\n");
    std::fs::remove_file(
        t.root
            .join(format!("lib/modules/{RELEASE}/modules.symbols")),
    )
    .unwrap();
    let (_, out) = t.run(&[]);
    assert_line(
        &out,
        &["peer_core", "MLNX_OFED's PeerDirect core is loaded"],
    );
    // nothing read from /proc/kallsyms (the helper's copy stays unread)
    std::fs::write(t.root.join("proc/kallsyms"), "garbage").unwrap();
    let (_, again) = t.run(&[]);
    assert_eq!(out, again);
}

/// The CUDA driver's own word (readiness/src/cuda.rs), asked by the
/// check's `--cuda-attributes` child of the libcuda double: a GPU it
/// reports without GPUDirect RDMA support gets no GPUDirect RDMA from
/// NCCL at PIX, and no NCCL_NET_GDR_LEVEL fix; one it reports with it
/// (the lent hosts' answer) changes nothing; the monitoring forms run no
/// program, so they do not ask.
#[test]
fn the_cuda_drivers_gpudirect_rdma_attribute_is_heard() {
    let t = switch_pair("cuda-yes", 0);
    let (status, before) = t.run(&[]);
    t.cuda(&[("0000:03:00.0", true)]);
    let (status_yes, yes) = t.run(&[]);
    assert_eq!((status, &before), (status_yes, &yes));
    assert_line(&yes, &["nccl", "0000:03:00.0", "NCCL uses GPUDirect RDMA"]);
    let t = switch_pair("cuda-no", 0);
    t.cuda(&[("0000:03:00.0", false)]);
    let (status, out) = t.run(&[]);
    assert_eq!(status, 4, "{out}");
    assert_line(
        &out,
        &[
            "nccl",
            "0000:03:00.0",
            "NCCL does not use GPUDirect RDMA with mlx5_0: the CUDA driver reports no GPUDirect RDMA support on this GPU (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED is 0)",
        ],
    );
    assert!(!out.contains("NCCL_NET_GDR_LEVEL="), "{out}");
    let (_, json) = t.run(&["--json"]);
    assert!(json.contains("CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED is 0"));
    let (health, line) = t.run(&["--health"]);
    assert_eq!(health, 0, "{line}");
}

/// NCCL's IB plugin names a NIC's PCI function with its device and
/// function digits zeroed (nccl_ib::placed_at): an adapter on a root bus
/// at 0000:40:01.0 is judged from 0000:40:00.0. Where the kernel shows
/// no function there, NCCL puts the NIC on no known CPU: SYS from a GPU
/// whose NUMA node is known, where sysfs says NODE; where a function is
/// there (an AMD root complex), from its place; NCCL_IB_MERGE_VFS=0 keeps
/// the device number. NCCL's own code judges each tree the same
/// (ci/test-nccl.sh, NVPM_NCCL_ORACLE).
#[test]
fn a_nic_on_a_root_bus_is_judged_where_nccl_places_it() {
    let tree = |name: &str, root_complex: bool| {
        let t = Tree::new(name);
        t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
        t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0x2330, 0, 128 * GIB);
        if root_complex {
            t.pci(
                "pci0000:40/0000:40:00.0",
                (0x1022, 0x14a4, 0x060000),
                0,
                &plain_resource(),
                &[0u8; 64],
            );
        }
        t.nic("pci0000:40/0000:40:01.0", "mlx5_0", 0);
        t.nvidia_open_580();
        t.mofed_with("nv_peer_mem");
        t
    };
    let t = tree("root-bus-nic", false);
    let (_, out) = t.run(&[]);
    assert_line(
        &out,
        &[
            "distance",
            "is SYS from it as NCCL places it, at 0000:40:00.0, which the kernel does not show",
            "(NODE in sysfs)",
        ],
    );
    let (_, out) = t.run_with(&[], &[("NCCL_IB_MERGE_VFS", "0".into())]);
    assert_line(&out, &["distance", "mlx5_0 (0000:40:01.0) is NODE from it"]);
    let t = tree("root-bus-nic-rc", true);
    let (_, out) = t.run(&[]);
    assert_line(&out, &["distance", "mlx5_0 (0000:40:01.0) is NODE from it"]);
}

/// A ConnectX-8's Data Direct function (readiness/src/data_direct.rs):
/// paired with mlx5_0 by the V3 UUID of their VPDs, as rdma-core's
/// rdma_topo pairs them, NCCL reaches mlx5_0 there (as mlx5_0_dma): PXB
/// from the GPU through the two switches, where its PF is on another
/// root port. NCCL_IB_DATA_DIRECT=0, another UUID, or no DMA-BUF: the
/// PF's place.
#[test]
fn a_data_direct_function_is_where_nccl_reaches_its_adapter() {
    let t = grace_blackwell_data_direct("data-direct");
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    let (_, out) = t.run(&[]);
    assert_line(
        &out,
        &[
            "distance",
            "0009:06:00.0",
            "mlx5_0 (0000:01:00.0) is PXB from it through its Data Direct function 0009:03:00.0, as NCCL offers it (mlx5_0_dma)",
        ],
    );
    let (_, out) = t.run_with(&[], &[("NCCL_IB_DATA_DIRECT", "0".into())]);
    assert!(!out.contains("Data Direct function"), "{out}");
    let t = grace_blackwell_data_direct("data-direct-other");
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    t.write(
        "sys/devices/pci0000:00/0000:00:00.0/0000:01:00.0/vpd",
        vpd_with_v3("0f0e0d0c0b0a09080706050403020100"),
    );
    // The function serves another adapter: the kernel answers ENODEV for
    // mlx5_0 (what NCCL's code is told).
    std::fs::remove_file(t.root.join("data-direct")).unwrap();
    let (_, out) = t.run(&[]);
    assert!(!out.contains("Data Direct function"), "{out}");
}
