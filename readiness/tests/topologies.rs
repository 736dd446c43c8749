//! The check over fake trees modelled on documented topologies, each
//! provoking one fact (issue 22's list): run as the real binary, asserting
//! its exit status and the line that names the fact and its fix.

mod common;
use common::*;

/// The files NCCL and UCX find when nv_peer_mem serves above MLNX_OFED's
/// core with its sysfs (common.rs `client`).
const NCCL_FILES: &str =
    "NCCL finds GPUDirect RDMA support: /sys/kernel/mm/memory_peers/nv_mem/version";
const UCX_FILES: &str = "UCX finds GPUDirect RDMA support: /sys/kernel/mm/memory_peers/nv_mem/version, /sys/module/nv_peer_mem/version";

/// NCCL's and UCX's decisions, which every modelled topology states (issue
/// 25 item 3; rules and sources in docs/diagnostics.md, "NCCL and UCX"):
/// the node's nccl line, the GPU's pair line where it has a NIC, the ucx
/// line.
fn consumers_decide(out: &str, nccl: &str, pair: Option<(&str, &str)>, ucx: &str) {
    assert_line(out, &["nccl", nccl]);
    if let Some((gpu, says)) = pair {
        assert_line(out, &["nccl", gpu, says]);
    }
    assert_line(out, &["ucx", ucx]);
}

#[test]
fn eight_gpus_each_beside_its_nic_is_ready_through_nv_peer_mem() {
    let t = eight_by_eight(0);
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    consumers_decide(
        &out,
        NCCL_FILES,
        Some((
            "0000:12:00.0",
            "NCCL uses GPUDirect RDMA with mlx5_0 (PIX within PXB",
        )),
        UCX_FILES,
    );
    for i in 0..8u32 {
        let bus = if i < 4 { 0 } else { 0x80 };
        let gpu = format!("0000:{:02x}:00.0", 0x10 * (i % 4 + 1) + bus + 2);
        assert_line(
            &out,
            &["ok", "distance", &gpu, &format!("mlx5_{i}"), "is PIX"],
        );
    }
    assert_line(&out, &["ok", "path", "nv_peer_mem (PeerDirect)"]);
    assert_line(
        &out,
        &["ok", "nccl", "/sys/kernel/mm/memory_peers/nv_mem/version"],
    );
    assert_line(
        &out,
        &["ok", "ucx", "/sys/kernel/mm/memory_peers/nv_mem/version"],
    );
    assert_line(
        &out,
        &[
            "ok",
            "nccl",
            "0000:c2:00.0",
            "NCCL uses GPUDirect RDMA with mlx5_7 (PIX within PXB",
        ],
    );
    assert_line(&out, &["READY", "nv_peer_mem"]);
    assert!(
        !has_line(&out, &["FAIL"]) && !has_line(&out, &["WARN"]),
        "{out}"
    );
}

/// Every GPU-NIC pair's distance, not only the closest: JSON's
/// `nic_distances` per GPU and Prometheus' pair metric (64 on 8x8).
#[test]
fn every_gpu_nic_pair_has_its_distance_in_json_and_prometheus() {
    let t = eight_by_eight(0);
    let (_, json) = t.run(&["--json"]);
    assert_eq!(json.matches("{\"nic\":").count(), 64, "{json}");
    assert!(
        json.contains("\"address\":\"0000:12:00.0\",\"device_id\":\"0x2330\",\"bar1_bytes\":137438953472,\"closest_nic\":\"mlx5_0\",\"distance\":\"PIX\",\"nic_distances\":[{\"nic\":\"mlx5_0\",\"distance\":\"PIX\"},{\"nic\":\"mlx5_1\","),
        "{json}"
    );
    let (_, prom) = t.run(&["--prometheus"]);
    let pairs: Vec<&str> = prom
        .lines()
        .filter(|l| l.starts_with("gpudirect_rdma_gpu_nic_pair_distance{"))
        .collect();
    assert_eq!(pairs.len(), 64, "{prom}");
    assert!(pairs.contains(&"gpudirect_rdma_gpu_nic_pair_distance{gpu=\"0000:12:00.0\",nic=\"mlx5_0\",class=\"PIX\"} 1"), "{prom}");
}

#[test]
fn acs_redirect_on_a_switch_port_is_named_with_its_fix() {
    let t = eight_by_eight(0x001d); // SrcValid ReqRedir CmpltRedir UpstreamFwd
    let (status, out) = t.run(&[]);
    assert_eq!(status, 5, "{out}");
    // NCCL decides by path type, not ACS: it still uses GPUDirect RDMA.
    consumers_decide(
        &out,
        NCCL_FILES,
        Some((
            "0000:12:00.0",
            "NCCL uses GPUDirect RDMA with mlx5_0 (PIX within PXB",
        )),
        UCX_FILES,
    );
    // the GPU-side downstream port of the first pair
    assert_line(
        &out,
        &["FAIL", "acs", "0000:11:00.0", "ReqRedir CmpltRedir"],
    );
    assert_line(
        &out,
        &[
            "fix: boot with pci=disable_acs_redir=0000:11:00.0",
            "setpci -s 0000:11:00.0 ECAP_ACS+0x6.w=0000:002c",
            "clears ReqRedir CmpltRedir and keeps",
        ],
    );
}

#[test]
fn a_nic_on_the_other_socket_is_sys_and_nccl_will_not_use_it() {
    let t = Tree::new("two-socket");
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0x2330, 0, 128 * GIB);
    t.bridge("pci0000:80/0000:80:01.0", 4, None, 1);
    t.nic("pci0000:80/0000:80:01.0/0000:81:00.0", "mlx5_0", 1);
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    let (status, out) = t.run(&[]);
    assert_eq!(status, 6, "{out}");
    consumers_decide(
        &out,
        NCCL_FILES,
        Some((
            "0000:01:00.0",
            "NCCL does not use GPUDirect RDMA with mlx5_0: SYS is beyond PXB",
        )),
        UCX_FILES,
    );
    assert_line(
        &out,
        &[
            "WARN",
            "distance",
            "0000:01:00.0",
            "mlx5_0",
            "is SYS",
            "up to PXB",
        ],
    );
    assert_line(&out, &["fix:", "NCCL_NET_GDR_LEVEL=SYS"]);
}

#[test]
fn separate_root_ports_are_phb() {
    let t = Tree::new("phb");
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0x2330, 0, 128 * GIB);
    t.bridge("pci0000:00/0000:00:02.0", 4, None, 0);
    t.nic("pci0000:00/0000:00:02.0/0000:02:00.0", "mlx5_0", 0);
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    let (status, out) = t.run(&[]);
    assert_eq!(status, 6, "{out}");
    consumers_decide(
        &out,
        NCCL_FILES,
        Some((
            "0000:01:00.0",
            "NCCL does not use GPUDirect RDMA with mlx5_0: PHB is beyond PXB",
        )),
        UCX_FILES,
    );
    assert_line(&out, &["WARN", "distance", "is PHB"]);
    // both root ports are on the path and are checked for ACS
    assert_line(&out, &["ok", "acs", "0000:00:01.0"]);
    assert_line(&out, &["ok", "acs", "0000:00:02.0"]);
}

#[test]
fn a_translating_iommu_is_named_with_iommu_pt() {
    let t = eight_by_eight(0);
    t.iommu(
        "pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:00.0/0000:12:00.0",
        7,
        "DMA-FQ",
    );
    let (status, out) = t.run(&[]);
    assert_eq!(status, 5, "{out}");
    consumers_decide(
        &out,
        NCCL_FILES,
        Some((
            "0000:12:00.0",
            "NCCL uses GPUDirect RDMA with mlx5_0 (PIX within PXB",
        )),
        UCX_FILES,
    );
    assert_line(&out, &["WARN", "iommu", "0000:12:00.0", "DMA-FQ"]);
    assert_line(
        &out,
        &["fix: boot with iommu=pt (x86) or iommu.passthrough=1"],
    );
    // passthrough is fine
    let t = eight_by_eight(0);
    t.iommu(
        "pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:00.0/0000:12:00.0",
        7,
        "identity",
    );
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(&out, &["ok", "iommu", "0000:12:00.0", "passthrough"]);
}

#[test]
fn a_bar1_smaller_than_gpu_memory_is_a_warning() {
    let t = Tree::new("small-bar1");
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    t.bridge("pci0000:00/0000:00:01.0/0000:01:00.0", 5, None, 0);
    t.bridge(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0",
        6,
        None,
        0,
    );
    t.bridge(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0",
        6,
        None,
        0,
    );
    t.gpu(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
        0x20b0,
        0,
        256 << 20,
    );
    t.nic(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
        "mlx5_0",
        0,
    );
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    t.nvidia_smi("00000000:03:00.0, 40960\n");
    let (status, out) = t.run(&[]);
    assert_eq!(status, 6, "{out}");
    // Under one switch: PIX (NCCL counts the switch as one hop); BAR1
    // does not enter NCCL's decision.
    consumers_decide(
        &out,
        NCCL_FILES,
        Some((
            "0000:03:00.0",
            "NCCL uses GPUDirect RDMA with mlx5_0 (PIX within PXB",
        )),
        UCX_FILES,
    );
    assert_line(
        &out,
        &["WARN", "bar1", "0000:03:00.0", "BAR1 is 256 MiB", "40 GiB"],
    );
    // without nvidia-smi the size is said, without a verdict
    std::fs::remove_file(t.root.join("nvidia-smi")).unwrap();
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(&out, &["bar1", "BAR1 is 256 MiB", "nvidia-smi not found"]);
}

/// The H100 host probed for this project (docs/readiness.md): a cloud VM,
/// one GPU on a flat bus, the open 580 driver, the kernel's own RDMA core
/// (ib_umem_dmabuf_get built in), no RDMA device.
#[test]
fn the_probed_cloud_vm_has_dmabuf_but_no_nic() {
    let t = Tree::new("cloud-vm");
    t.gpu("pci0000:00/0000:00:06.0", 0x2330, -1, 128 * GIB);
    t.pci(
        "pci0000:00/0000:00:03.0",
        (0x1af4, 0x1041, 0x020000),
        -1,
        &plain_resource(),
        &[0u8; 64],
    );
    t.nvidia("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  ");
    t.exports(&[("ib_umem_dmabuf_get", "ib_uverbs")]);
    t.nvidia_smi("00000000:00:06.0, 81559\n");
    let (status, out) = t.run(&[]);
    assert_eq!(status, 3, "{out}");
    // No NIC: NCCL's own log there says "NET/IB : No device found"; no
    // path registers GPU memory for RDMA.
    consumers_decide(
        &out,
        "NCCL finds no RDMA device (NET/IB: No device found)",
        None,
        "UCX finds no RDMA device",
    );
    assert_line(&out, &["FAIL", "nic", "no RDMA device"]);
    assert_line(&out, &["dmabuf", "cannot serve", "no RDMA device"]);
    assert_line(&out, &["ok", "bar1", "BAR1 is 128 GiB for 79 GiB"]);
}

#[test]
fn inbox_rdma_with_dmabuf_is_ready_without_a_peer_client() {
    let t = inbox_dmabuf_tree();
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    consumers_decide(
        &out,
        "NCCL finds GPUDirect RDMA support through DMA-BUF",
        None,
        "UCX finds GPUDirect RDMA support through DMA-BUF",
    );
    assert_line(
        &out,
        &["ok", "path", "DMA-BUF", "needs no peer memory client"],
    );
    assert_line(&out, &["READY", "dmabuf"]);
}

/// The guide's two examples (docs/guide/readiness.md) are this check's
/// output over the trees they name:
/// every line shown (`...` marks lines left out) is a line of the real
/// output, in order, so the guide cannot drift from the program.
#[test]
fn the_readme_examples_are_real_output() {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guide/readiness.md"),
    )
    .unwrap();
    for (start, tree) in [
        ("A ready node (", inbox_dmabuf_tree()),
        ("A node that is not (", eight_by_eight(0x001d)),
    ] {
        let (_, out) = tree.run(&[]);
        let example: Vec<&str> = readme
            .split(start)
            .nth(1)
            .unwrap_or_else(|| panic!("docs/guide/readiness.md has no example starting `{start}`"))
            .lines()
            .skip_while(|l| !l.starts_with("    "))
            .take_while(|l| l.starts_with("    ") || l.is_empty())
            .filter(|l| !l.trim().is_empty())
            .map(|l| &l[4..])
            .collect();
        assert!(
            example.len() > 3,
            "docs/guide/readiness.md's example `{start}` is empty"
        );
        // Shown lines follow each other in the output, except across a
        // `...`; the first may come after lines left out.
        let mut lines = out.lines().map(str::trim_end);
        let mut skip = true;
        for shown in example {
            if shown.trim() == "..." {
                skip = true;
                continue;
            }
            let found = if skip {
                lines.any(|l| l == shown.trim_end())
            } else {
                lines.next() == Some(shown.trim_end())
            };
            assert!(
                found,
                "docs/guide/readiness.md's example `{start}` shows a line the check does not print there (lines left out need a `...`):\n{shown}\nreal output:\n{out}"
            );
            skip = false;
        }
    }
}

fn inbox_dmabuf_tree() -> Tree {
    let t = one_switch("inbox-dmabuf", None);
    t.module("ib_core");
    t.module("ib_uverbs");
    t.exports(&[("ib_umem_dmabuf_get", "ib_uverbs")]);
    t
}

/// A pre-Turing GPU beside a Hopper under the open module: the module
/// refused it at probe, so it has no `driver` link, and DMA-BUF cannot
/// serve it.
#[test]
fn a_gpu_no_driver_or_another_driver_drives_is_left_out() {
    let t = Tree::new("unbound");
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    t.bridge("pci0000:00/0000:00:01.0/0000:01:00.0", 5, None, 0);
    t.bridge(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0",
        6,
        None,
        0,
    );
    t.bridge(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0",
        6,
        None,
        0,
    );
    t.bridge(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0",
        6,
        None,
        0,
    );
    t.gpu(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
        0x2330,
        0,
        128 * GIB,
    );
    let old = "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0/0000:05:00.0";
    t.gpu(old, 0x1db4, 0, 16 * GIB);
    t.unbind(old);
    t.nic(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
        "mlx5_0",
        0,
    );
    t.nvidia_open_580();
    t.module("ib_uverbs");
    t.exports(&[("ib_umem_dmabuf_get", "ib_uverbs")]);
    // The GPU no driver drives is left out: DMA-BUF serves the other.
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(&out, &["gpu_driver", "0000:05:00.0", "no driver drives it"]);
    assert_line(&out, &["dmabuf", "DMA-BUF can serve"]);
    // one passed to a VM (vfio-pci) blocks nothing either
    t.bind(old, "vfio-pci");
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(&out, &["gpu_driver", "0000:05:00.0", "driven by vfio-pci"]);
    // bound, it serves
    t.bind(old, "nvidia");
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    consumers_decide(
        &out,
        "NCCL finds GPUDirect RDMA support through DMA-BUF",
        Some((
            "0000:05:00.0",
            "NCCL uses GPUDirect RDMA with mlx5_0 (PIX within PXB",
        )),
        "UCX finds GPUDirect RDMA support through DMA-BUF",
    );
}

#[test]
fn the_proprietary_driver_without_mofed_has_no_path() {
    let t = Tree::new("proprietary");
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0x2330, 0, 128 * GIB);
    t.bridge("pci0000:00/0000:00:02.0", 4, None, 0);
    t.nic("pci0000:00/0000:00:02.0/0000:02:00.0", "mlx5_0", 0);
    t.nvidia(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2 20:33:44 UTC 2025",
    );
    t.module("ib_core");
    t.module("ib_uverbs");
    t.exports(&[("ib_umem_dmabuf_get", "ib_uverbs")]);
    let (status, out) = t.run(&[]);
    assert_eq!(status, 4, "{out}");
    consumers_decide(
        &out,
        "NCCL finds no GPUDirect RDMA support (no peer-memory file, no DMA-BUF)",
        Some((
            "0000:01:00.0",
            "NCCL does not use GPUDirect RDMA with mlx5_0: it finds no GPUDirect RDMA support",
        )),
        "UCX finds no GPUDirect RDMA support",
    );
    assert_line(
        &out,
        &["dmabuf", "proprietary kernel module", "open kernel module"],
    );
    assert_line(&out, &["FAIL", "path", "no path registers GPU memory"]);
}

#[test]
fn no_nvidia_driver_has_no_path() {
    let t = eight_by_eight(0);
    std::fs::remove_dir_all(t.root.join("proc/driver")).unwrap();
    let (status, out) = t.run(&[]);
    // nv_peer_mem is loaded above the core, but the driver is not
    assert_eq!(status, 4, "{out}");
    // NCCL's test is the file alone (gdr.cc), which MLNX_OFED's core keeps.
    consumers_decide(&out, NCCL_FILES, None, UCX_FILES);
    assert_line(&out, &["FAIL", "driver", "not loaded"]);
    assert_line(&out, &["fix: modprobe nvidia"]);
    assert_line(&out, &["FAIL", "path", "no path"]);
}

#[test]
fn both_peer_clients_loaded_is_a_conflict() {
    let t = eight_by_eight(0);
    t.client("nvidia_peermem");
    let (status, out) = t.run(&[]);
    assert_eq!(status, 4, "{out}");
    consumers_decide(
        &out,
        "NCCL finds GPUDirect RDMA support: /sys/kernel/mm/memory_peers/nv_mem/version, /sys/module/nvidia_peermem/version",
        None,
        "UCX finds GPUDirect RDMA support: /sys/kernel/mm/memory_peers/nv_mem/version, /sys/module/nvidia_peermem/version, /sys/module/nv_peer_mem/version",
    );
    assert_line(&out, &["FAIL", "clients", "both loaded"]);
}

#[test]
fn a_non_root_reader_is_told_acs_needs_root() {
    let t = eight_by_eight(0);
    // what pci-sysfs returns to an unprivileged reader: 64 bytes
    for entry in walk(&t.sys().join("devices")) {
        if entry.file_name().is_some_and(|n| n == "config") {
            let bytes = std::fs::read(&entry).unwrap();
            std::fs::write(&entry, &bytes[..64]).unwrap();
        }
    }
    let (status, out) = t.run(&[]);
    assert_eq!(status, 7, "{out}");
    assert_line(&out, &["??", "acs", "only root can read"]);
    assert_line(&out, &["fix: run the check as root"]);
    // the shape of the tree still gives the distance
    assert_line(&out, &["ok", "distance", "is PIX"]);
}

#[test]
fn unreadable_and_malformed_files_are_said_never_guessed() {
    let t = eight_by_eight(0);
    let gpu = t
        .sys()
        .join("devices/pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:00.0/0000:12:00.0");
    std::fs::write(gpu.join("vendor"), "nvidia\n").unwrap();
    std::fs::remove_file(t.root.join("proc/sys/kernel/osrelease")).unwrap();
    let (status, out) = t.run(&[]);
    // the path is unknown, not "none": the exit status says unreadable
    assert_eq!(status, 7, "{out}");
    assert!(!has_line(&out, &["FAIL", "path"]), "{out}");
    assert_line(
        &out,
        &[
            "??",
            "read",
            "vendor",
            "`nvidia` is not a hexadecimal number",
        ],
    );
    assert_line(&out, &["??", "path", "osrelease", "no such file"]);
    // a malformed capability list
    let t = eight_by_eight(0);
    let dsp = t
        .sys()
        .join("devices/pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:00.0/config");
    let mut bytes = std::fs::read(&dsp).unwrap();
    bytes[0x100..0x104].copy_from_slice(&(0x000d_u32 | 0x040 << 20 | 1 << 16).to_le_bytes());
    bytes[0x100..0x102].copy_from_slice(&1u16.to_le_bytes());
    std::fs::write(&dsp, bytes).unwrap();
    let (status, out) = t.run(&[]);
    assert_eq!(status, 7, "{out}");
    assert_line(&out, &["??", "acs", "0000:11:00.0", "malformed"]);
}

/// The two-socket node of one GPU and one NIC (SYS apart).
fn one_gpu_one_nic(name: &str) -> Tree {
    let t = Tree::new(name);
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0x2330, 0, 128 * GIB);
    t.bridge("pci0000:80/0000:80:01.0", 4, None, 1);
    t.nic("pci0000:80/0000:80:01.0/0000:81:00.0", "mlx5_0", 1);
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    t
}

/// The only GPU (or NIC) of a node cannot be read: the verdict is "could
/// not read" (7), never "nothing to check" (3), which would tell a fleet
/// the node has no GPU.
#[test]
fn an_unreadable_only_device_is_not_nothing_to_check() {
    let t = one_gpu_one_nic("only-gpu-malformed");
    let gpu = t.sys().join("devices/pci0000:00/0000:00:01.0/0000:01:00.0");
    std::fs::write(gpu.join("class"), "display\n").unwrap();
    let (status, out) = t.run(&[]);
    assert_eq!(status, 7, "{out}");
    assert!(!has_line(&out, &["no NVIDIA GPU on the PCI bus"]), "{out}");
    assert_line(&out, &["??", "read", "class", "not a hexadecimal number"]);
    assert_line(&out, &["??", "gpu", "cannot tell"]);

    let t = one_gpu_one_nic("only-nic-malformed");
    let nic = t.sys().join("devices/pci0000:80/0000:80:01.0/0000:81:00.0");
    std::fs::write(nic.join("vendor"), "\n").unwrap();
    let (status, out) = t.run(&[]);
    assert_eq!(status, 7, "{out}");
    assert!(!has_line(&out, &["FAIL", "nic", "no RDMA device"]), "{out}");
    assert_line(&out, &["??", "nic", "cannot tell"]);

    // /sys/class/infiniband there but not a directory that can be listed
    let t = one_gpu_one_nic("infiniband-unlistable");
    let class = t.sys().join("class/infiniband");
    std::fs::remove_dir_all(&class).unwrap();
    std::fs::write(&class, "").unwrap();
    let (status, out) = t.run(&[]);
    assert_eq!(status, 7, "{out}");
    assert_line(&out, &["??", "read", "class/infiniband"]);
    assert_line(&out, &["??", "nic", "cannot tell"]);
}

/// A NUMA node or BAR list that cannot be read is said, never taken as
/// "no NUMA node" (which would make SYS look like NODE) or "no BAR1".
#[test]
fn an_unreadable_numa_node_or_resource_is_said() {
    let t = one_gpu_one_nic("numa-malformed");
    let nic = t.sys().join("devices/pci0000:80/0000:80:01.0/0000:81:00.0");
    std::fs::write(nic.join("numa_node"), "one\n").unwrap();
    let (status, out) = t.run(&[]);
    assert_eq!(status, 6, "{out}");
    assert_line(
        &out,
        &["??", "read", "numa_node", "`one` is not a NUMA node number"],
    );
    // -1 is the kernel's "none", and no file is a kernel without NUMA
    let t = one_gpu_one_nic("numa-none");
    std::fs::write(nic_dir(&t).join("numa_node"), "-1\n").unwrap();
    let (_, out) = t.run(&[]);
    assert!(!has_line(&out, &["read", "numa_node"]), "{out}");
    std::fs::remove_file(nic_dir(&t).join("numa_node")).unwrap();
    let (_, out) = t.run(&[]);
    assert!(!has_line(&out, &["read", "numa_node"]), "{out}");

    let t = one_gpu_one_nic("resource-missing");
    let gpu = t.sys().join("devices/pci0000:00/0000:00:01.0/0000:01:00.0");
    std::fs::remove_file(gpu.join("resource")).unwrap();
    let (status, out) = t.run(&[]);
    assert_eq!(status, 6, "{out}");
    assert_line(&out, &["??", "read", "resource", "no such file"]);
}

fn nic_dir(t: &Tree) -> std::path::PathBuf {
    t.sys().join("devices/pci0000:80/0000:80:01.0/0000:81:00.0")
}

#[test]
fn bad_arguments_exit_2_and_print_nothing() {
    let t = Tree::new("usage");
    let (status, out) = t.run(&["--jsno"]);
    assert_eq!(status, 2);
    assert!(out.is_empty());
    let (status, out) = t.run(&["--help"]);
    assert_eq!(status, 0);
    assert!(out.contains("Exit status:"), "{out}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The real service helper (packaging/nv_peer_mem-service) over @t's
/// tree: its conf file and kernel log in the tree's root, kernel 6.1.
fn helper_env(t: &Tree) -> Vec<(&'static str, std::path::PathBuf)> {
    vec![
        (
            "NV_PEER_MEM_SERVICE",
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../packaging/nv_peer_mem-service"),
        ),
        ("NV_PEER_MEM_CONF", t.root.join("nv_peer_mem.conf")),
        ("NV_PEER_MEM_KLOG", t.root.join("klog")),
        ("NV_PEER_MEM_ROOT", t.root.clone()),
        ("NV_PEER_MEM_KVER", "6.1.0-56-amd64".into()),
    ]
}

/// MLNX_OFED's core is there but nv_peer_mem is not loaded: no path, and
/// the service helper's own diagnosis (packaging/nv_peer_mem-service, run
/// for real over the same tree) says why.
#[test]
fn an_unloaded_nv_peer_mem_brings_the_helpers_diagnosis() {
    let t = eight_by_eight(0);
    t.unload("nv_peer_mem");
    // a kernel without DMA-BUF import (before 5.12), so nothing else serves
    t.exports(&[("ib_register_peer_memory_client", "ib_core")]);
    std::fs::write(t.root.join("nv_peer_mem.conf"), "ONBOOT=no\n").unwrap();
    std::fs::write(t.root.join("klog"), "").unwrap();
    let (status, out) = t.run_with(&[], &helper_env(&t));
    assert_eq!(status, 4, "{out}");
    assert_line(&out, &["FAIL", "path", "no path"]);
    consumers_decide(
        &out,
        "NCCL finds no GPUDirect RDMA support (no peer-memory file, no DMA-BUF)",
        Some((
            "0000:12:00.0",
            "NCCL does not use GPUDirect RDMA with mlx5_0: it finds no GPUDirect RDMA support",
        )),
        "UCX finds no GPUDirect RDMA support",
    );
    assert_line(
        &out,
        &["fix: load the peer memory client: systemctl start nv_peer_mem"],
    );
    assert_line(&out, &["status", "nv_peer_mem: not loaded"]);
    assert_line(&out, &["status", "ONBOOT=yes"]);
    assert_line(
        &out,
        &["status", "ib_core is loaded and has the peer memory API"],
    );
    // without the packages, it says so
    let (_, out) = t.run(&[]);
    assert_line(
        &out,
        &["status", "not installed", "install nvidia-peer-memory"],
    );
}

/// MLNX_OFED's core on a kernel that also imports DMA-BUF, no client
/// loaded: DMA-BUF serves, and the line says who still needs a client.
/// The helper's diagnoses of a failed load reach the check's `status`
/// lines: the kernel's "disagrees about version of symbol" (a symbol
/// version mismatch with MLNX_OFED) and DKMS's state for this kernel
/// (dkms 3.0's `status` line of a source tree added but never built).
#[test]
fn the_helpers_symbol_version_and_dkms_diagnoses_reach_the_check() {
    let t = eight_by_eight(0);
    t.unload("nv_peer_mem");
    t.exports(&[("ib_register_peer_memory_client", "ib_core")]);
    std::fs::write(t.root.join("nv_peer_mem.conf"), "ONBOOT=yes\n").unwrap();
    std::fs::write(
        t.root.join("klog"),
        "[   12.345678] nv_peer_mem: disagrees about version of symbol ib_register_peer_memory_client\n",
    )
    .unwrap();
    let bin = t.root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let dkms = bin.join("dkms");
    std::fs::write(&dkms, "#!/bin/sh\necho 'nv_peer_mem/1.4.0: added'\n").unwrap();
    std::fs::set_permissions(&dkms, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut env = helper_env(&t);
    env.push(("PATH", path.into()));
    let (status, out) = t.run_with(&[], &env);
    assert_eq!(status, 4, "{out}");
    assert_line(
        &out,
        &[
            "status",
            "last load failure",
            "disagrees about version of symbol ib_register_peer_memory_client",
            "MLNX_OFED's ib_core",
        ],
    );
    assert_line(
        &out,
        &[
            "status",
            "DKMS has no build of nv_peer_mem for kernel 6.1.0-56-amd64 (nv_peer_mem/1.4.0: added)",
            "dkms autoinstall -k 6.1.0-56-amd64",
        ],
    );
}

#[test]
fn mofed_without_a_client_serves_through_dmabuf() {
    let t = eight_by_eight(0);
    t.unload("nv_peer_mem");
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    consumers_decide(
        &out,
        "NCCL finds GPUDirect RDMA support through DMA-BUF",
        Some((
            "0000:12:00.0",
            "NCCL uses GPUDirect RDMA with mlx5_0 (PIX within PXB",
        )),
        "UCX finds GPUDirect RDMA support through DMA-BUF",
    );
    assert_line(
        &out,
        &["ok", "path", "DMA-BUF", "no peer memory client is loaded"],
    );
    assert_line(&out, &["status", "not installed"]);
}

/// nv_peer_mem serves above a core that did not create memory_peers: NCCL
/// tests only memory_peers' files and nvidia_peermem's, so it runs without
/// GPUDirect RDMA; UCX also tests /sys/module/nv_peer_mem/version.
#[test]
fn nccl_does_not_see_nv_peer_mem_without_memory_peers() {
    let t = eight_by_eight(0);
    std::fs::remove_dir_all(t.sys().join("kernel/mm/memory_peers")).unwrap();
    // a kernel without DMA-BUF import, so the files decide
    t.exports(&[("ib_register_peer_memory_client", "ib_core")]);
    let (status, out) = t.run(&[]);
    assert_eq!(status, 6, "{out}");
    assert_line(
        &out,
        &[
            "WARN",
            "nccl",
            "nv_peer_mem serves, but none of the files NCCL tests exists",
        ],
    );
    assert_line(&out, &["ok", "ucx", "/sys/module/nv_peer_mem/version"]);
    assert_line(
        &out,
        &[
            "nccl",
            "0000:12:00.0",
            "does not use GPUDirect RDMA with mlx5_0",
            "finds no GPUDirect RDMA support",
        ],
    );
}

/// The same kernel with nv_peer_mem making memory_peers itself (issue 41,
/// the shape the booted 6.12 guest shows): NCCL's file is there through the
/// module's link, the client's counters are read through it, and NCCL uses
/// GPUDirect RDMA with the NIC beside each GPU.
#[test]
fn nccl_sees_nv_peer_mem_where_it_made_memory_peers() {
    let t = eight_by_eight(0);
    t.module_made_memory_peers(&["nv_mem"]);
    t.exports(&[("ib_register_peer_memory_client", "ib_core")]);
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(&out, &["ok", "nccl", NCCL_FILES]);
    assert_line(
        &out,
        &["ok", "ucx", "/sys/kernel/mm/memory_peers/nv_mem/version"],
    );
    assert!(!out.contains("none of the files NCCL tests"), "{out}");
    let (_, json) = t.run(&["--json"]);
    assert!(
        json.contains("\"peer_memory_clients\":[{\"name\":\"nv_mem\",\"version\":\"1.4.0\",\"num_alloc_mrs\":1,"),
        "the client and its counters read through the link: {json}"
    );
}

/// nv_peer_mem could not make memory_peers (its parameter says failed): the
/// warning says so and names the fix the booted guest applies
/// (scenarios.sh, memory_peers_taken: the other holder gone, a reload).
#[test]
fn a_failed_memory_peers_names_the_module_and_its_fix() {
    let t = eight_by_eight(0);
    std::fs::remove_dir_all(t.sys().join("kernel/mm/memory_peers")).unwrap();
    t.write(
        "sys/module/nv_peer_mem/parameters/memory_peers",
        "failed -17\n",
    );
    t.exports(&[("ib_register_peer_memory_client", "ib_core")]);
    let (status, out) = t.run(&[]);
    assert_eq!(status, 6, "{out}");
    assert_line(
        &out,
        &[
            "nv_peer_mem could not make it either",
            "`failed -17`",
            "reload nv_peer_mem",
        ],
    );
    // without the parameter: a module that does not make them
    std::fs::remove_file(t.sys().join("module/nv_peer_mem/parameters/memory_peers")).unwrap();
    let (_, out) = t.run(&[]);
    assert_line(
        &out,
        &[
            "does not make them itself",
            "install the current nv_peer_mem",
        ],
    );
}

/// The two-socket host with NCCL_NET_GDR_LEVEL=SYS, from the environment
/// and from /etc/nccl.conf: NCCL uses GPUDirect RDMA across the sockets,
/// and the distance is no longer a warning.
#[test]
fn nccl_net_gdr_level_moves_the_cutoff() {
    let t = Tree::new("two-socket-sys");
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0x2330, 0, 128 * GIB);
    t.bridge("pci0000:80/0000:80:01.0", 4, None, 1);
    t.nic("pci0000:80/0000:80:01.0/0000:81:00.0", "mlx5_0", 1);
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    let (status, out) = t.run(&[]);
    assert_eq!(status, 6, "{out}");
    assert_line(
        &out,
        &[
            "nccl",
            "does not use GPUDirect RDMA with mlx5_0",
            "SYS is beyond PXB (NCCL's default, PXB)",
        ],
    );
    std::fs::write(
        t.root.join("nccl.conf"),
        "NCCL_DEBUG=WARN\nNCCL_NET_GDR_LEVEL=SYS\n",
    )
    .unwrap();
    let (status, out) = t.run_with(&[], &[("NV_PEER_MEM_NCCL_CONF", t.root.join("nccl.conf"))]);
    assert_eq!(status, 0, "{out}");
    assert_line(
        &out,
        &[
            "ok",
            "nccl",
            "NCCL uses GPUDirect RDMA with mlx5_0",
            "SYS within SYS",
            "nccl.conf",
        ],
    );
    // the environment wins over the file; legacy numbers are read as NCCL reads them
    let (status, out) = t.run_with(
        &[],
        &[
            ("NV_PEER_MEM_NCCL_CONF", t.root.join("nccl.conf")),
            ("NCCL_NET_GDR_LEVEL", "2".into()),
        ],
    );
    assert_eq!(status, 6, "{out}");
    assert_line(
        &out,
        &[
            "nccl",
            "SYS is beyond PXB (NCCL_NET_GDR_LEVEL=2 in the environment)",
        ],
    );
}

/// MLNX_OFED's per-client counters: live registrations, pinned bytes and
/// free callbacks in the human line, every counter in JSON and Prometheus;
/// a leak shows as live registrations after the work is done.
#[test]
fn peer_memory_counters_are_reported_per_client() {
    let t = eight_by_eight(0);
    // 10 registrations of 1 MiB, 7 released: 3 live, 3 MiB pinned.
    t.counters(
        "nv_mem",
        ["10", "7", "160", "112", "10485760", "7340032", "2"],
    );
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(
        &out,
        &[
            "counters",
            "nv_mem",
            "version 1.4.0",
            "3 registrations live",
            "3145728 bytes pinned",
            "2 free callbacks",
        ],
    );
    let (_, prom) = t.run(&["--prometheus"]);
    for line in [
        "gpudirect_rdma_peer_memory_client_info{client=\"nv_mem\",version=\"1.4.0\"} 1",
        "gpudirect_rdma_peer_memory_live_registrations{client=\"nv_mem\"} 3",
        "gpudirect_rdma_peer_memory_pinned_bytes{client=\"nv_mem\"} 3145728",
        "gpudirect_rdma_peer_memory_alloc_mrs_total{client=\"nv_mem\"} 10",
        "gpudirect_rdma_peer_memory_free_callbacks_total{client=\"nv_mem\"} 2",
        "# TYPE gpudirect_rdma_peer_memory_reg_bytes_total counter",
    ] {
        assert!(prom.lines().any(|l| l == line), "no `{line}` in:\n{prom}");
    }
    let (_, json) = t.run(&["--json"]);
    assert!(
        json.contains("\"peer_memory_clients\":[{\"name\":\"nv_mem\",\"version\":\"1.4.0\",\"num_alloc_mrs\":10,\"num_dealloc_mrs\":7,"),
        "{json}"
    );
}

/// A counter file that is not a number is named, and changes no verdict.
#[test]
fn a_malformed_counter_is_named_and_changes_nothing() {
    let t = eight_by_eight(0);
    t.counters(
        "nv_mem",
        ["10", "x7", "160", "112", "10485760", "7340032", "2"],
    );
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(&out, &["counters", "num_dealloc_mrs", "is not a count"]);
    assert_line(&out, &["counters", "nv_mem", "? registrations live"]);
}

/// A GPU with a NIC beside it (mlx5_0, PIX) and one on another root port
/// (mlx5_1, PHB), MLNX_OFED with nv_peer_mem.
fn near_and_far(name: &str) -> Tree {
    let t = one_switch(name, None);
    t.bridge("pci0000:00/0000:00:02.0", 4, None, 0);
    t.nic("pci0000:00/0000:00:02.0/0000:05:00.0", "mlx5_1", 0);
    t.mofed_with("nv_peer_mem");
    t
}

#[test]
fn a_nic_whose_ports_are_down_is_not_the_one_nccl_uses() {
    let t = near_and_far("port-down");
    t.port("mlx5_0", 1, "1: DOWN", "InfiniBand");
    let (status, out) = t.run(&[]);
    // NCCL opens only ACTIVE ports: the GPU is judged with mlx5_1, PHB.
    assert_eq!(status, 6, "{out}");
    assert_line(
        &out,
        &[
            "nic",
            "mlx5_0: NCCL does not use mlx5_0: no port is ACTIVE",
            "port 1 1: DOWN (InfiniBand)",
        ],
    );
    assert_line(
        &out,
        &["WARN", "distance", "closest RDMA device mlx5_1", "is PHB"],
    );
    let (_, json) = t.run(&["--json"]);
    assert!(
        json.contains(r#""closest_nic":"mlx5_1","distance":"PHB""#),
        "{json}"
    );
    // Back up: mlx5_0 again, PIX, ready.
    t.port("mlx5_0", 1, "4: ACTIVE", "InfiniBand");
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(
        &out,
        &["ok", "distance", "closest RDMA device mlx5_0", "is PIX"],
    );
}

#[test]
fn nccl_ib_hca_chooses_the_nic_nccl_uses() {
    let t = near_and_far("ib-hca");
    let hca = |v: &str| vec![("NCCL_IB_HCA", std::path::PathBuf::from(v))];
    let (status, out) = t.run_with(&[], &hca("^mlx5_0"));
    assert_eq!(status, 6, "{out}");
    assert_line(
        &out,
        &[
            "nic",
            "NCCL does not use mlx5_0: NCCL_IB_HCA=^mlx5_0 in the environment does not admit it",
        ],
    );
    assert_line(&out, &["distance", "closest RDMA device mlx5_1", "is PHB"]);
    // None admitted: sockets, and no GPU judged with a NIC.
    let (status, out) = t.run_with(&[], &hca("=mlx5"));
    assert_eq!(status, 0, "{out}");
    assert_line(
        &out,
        &[
            "nccl",
            "NCCL takes none of the RDMA devices (NCCL_IB_HCA==mlx5 in the environment)",
            "uses sockets",
        ],
    );
    assert!(!has_line(&out, &["distance"]), "{out}");
    // UCX does not read NCCL_IB_HCA.
    assert_line(&out, &["ucx", UCX_FILES]);
}

#[test]
fn nccl_topo_file_places_the_devices_nccl_sees() {
    // A VM: GPU and NIC on the root bus (PHB in sysfs); the site's file
    // puts them below one switch, as Azure's HPC images' files do.
    let t = Tree::new("topo-file");
    t.gpu("pci0000:00/0000:00:06.0", 0x2330, -1, 128 << 30);
    t.nic("pci0000:00/0000:00:07.0", "mlx5_0", -1);
    t.vm();
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    let (status, out) = t.run(&[]);
    assert_eq!(status, 6, "{out}");
    assert_line(&out, &["WARN", "distance", "is PHB from it"]);
    t.write(
        "etc/nccl-topo.xml",
        r#"<system version="1">
  <cpu numaid="-1">
    <pci busid="ffff:ff:01.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:00:06.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"/>
      <pci busid="0000:00:07.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16"><nic><net name="mlx5_0"/></nic></pci>
    </pci>
  </cpu>
</system>
"#,
    );
    let file = |f: &str| vec![("NCCL_TOPO_FILE", std::path::PathBuf::from(f))];
    let (status, out) = t.run_with(&[], &file("/etc/nccl-topo.xml"));
    assert_eq!(status, 0, "{out}");
    assert_line(
        &out,
        &[
            "nccl",
            "NCCL takes its topology from NCCL_TOPO_FILE=/etc/nccl-topo.xml in the environment",
        ],
    );
    assert_line(
        &out,
        &[
            "ok",
            "distance",
            "is PIX from it in NCCL_TOPO_FILE=/etc/nccl-topo.xml in the environment (PHB in sysfs)",
        ],
    );
    // A file that is not there is warned about by NCCL and skipped.
    let (status, out) = t.run_with(&[], &file("/etc/none.xml"));
    assert_eq!(status, 6, "{out}");
    assert_line(
        &out,
        &[
            "nccl",
            "NCCL_TOPO_FILE=/etc/none.xml in the environment: no such file",
            "reads sysfs",
        ],
    );
    // One NCCL cannot parse stops NCCL altogether: said, sysfs judged.
    t.write(
        "etc/nccl-topo.xml",
        "<system version=\"1\"><cpu></system>\n",
    );
    let (_, out) = t.run_with(&[], &file("/etc/nccl-topo.xml"));
    assert_line(
        &out,
        &[
            "nccl",
            "not a topology NCCL can read",
            "NCCL fails to start a communicator",
        ],
    );
}

#[test]
fn pxn_relays_a_far_gpu_through_its_nvlink_peer() {
    // GPU 10:00.0 on socket 0 with no NIC; GPU 92:00.0 and mlx5_0 below one
    // switch on socket 1.
    let t = far_gpu_and_near_pair("pxn");
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    // Without nvidia-smi NVLink cannot be seen: said, not warned.
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(
        &out,
        &[
            "distance",
            "0000:10:00.0",
            "is SYS from it: NCCL may reach mlx5_0 through GPU 0000:92:00.0 over NVLink (PXN",
            "only nvidia-smi can tell",
        ],
    );
    let (status, health) = t.run(&["--health", "--nccl"]);
    assert_eq!(status, 0, "{health}");
    // With it: NVSwitches join them, and NCCL relays.
    t.nvswitch(&["0000:10:00.0", "0000:92:00.0"]);
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(
        &out,
        &[
            "ok",
            "nccl",
            "0000:10:00.0",
            "NCCL uses GPUDirect RDMA with mlx5_0 through GPU 0000:92:00.0 over NVLink (PXN; mlx5_0 is PIX from 0000:92:00.0), within PXB",
        ],
    );
    // PXN off: NCCL's own path, SYS, and the warning.
    let off = vec![("NCCL_PXN_DISABLE", std::path::PathBuf::from("1"))];
    let (status, out) = t.run_with(&[], &off);
    assert_eq!(status, 6, "{out}");
    assert_line(
        &out,
        &["WARN", "distance", "0000:10:00.0", "is SYS from it"],
    );
}

#[test]
fn pxn_weighs_an_nvlink_bridge_against_the_gpus_own_nic() {
    // GPU 10:00.0 has mlx5_1 of its own (PHB); mlx5_0 is PIX from its
    // peer 92:00.0. One bridge link (20.6 GB/s) is narrower than mlx5_1's
    // path: NCCL keeps mlx5_1 (ncclTopoGetLocalNet weighs bandwidth
    // first); twelve relay. NCCL's own code agrees (nccl_oracle.rs).
    for (links, line) in [
        (
            1,
            [
                "nccl",
                "0000:10:00.0",
                "NCCL does not use GPUDirect RDMA with mlx5_1: PHB is beyond PXB",
            ],
        ),
        (
            12,
            [
                "ok",
                "nccl",
                "0000:10:00.0: NCCL uses GPUDirect RDMA with mlx5_0 through GPU 0000:92:00.0 over NVLink (PXN",
            ],
        ),
    ] {
        let t = far_gpu_bridged("pxn-bridge", links);
        t.nvidia_open_580();
        t.mofed_with("nv_peer_mem");
        let (_, out) = t.run(&[]);
        assert_line(&out, &line);
    }
}

#[test]
fn nccl_net_gdr_read_0_leaves_receives_only() {
    let t = one_switch("gdr-read", None);
    t.mofed_with("nv_peer_mem");
    let off = vec![("NCCL_NET_GDR_READ", std::path::PathBuf::from("0"))];
    let (status, out) = t.run_with(&[], &off);
    assert_eq!(status, 0, "{out}");
    assert_line(
        &out,
        &[
            "ok",
            "nccl",
            "0000:03:00.0",
            "NCCL uses GPUDirect RDMA with mlx5_0",
            "for receives only: sends stage GPU memory through host memory (NCCL_NET_GDR_READ=0 in the environment)",
        ],
    );
    let (_, out) = t.run(&[]);
    assert!(!out.contains("receives only"), "{out}");
}

#[test]
fn a_gpu_older_than_ampere_without_nvlink_sends_without_gdr() {
    let t = two_voltas("volta");
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    let uses = [
        "nccl",
        "0000:03:00.0",
        "NCCL uses GPUDirect RDMA with mlx5_0",
    ];
    // nvidia-smi not there: the compute capability is not known, nothing said
    let (_, out) = t.run(&[]);
    assert_line(&out, &uses);
    assert!(!out.contains("receives only"), "{out}");
    // V100s with no NVLink: reads off for the GPU beside the NIC
    t.volta(&["0000:03:00.0", "0000:05:00.0"], false);
    let (_, out) = t.run(&[]);
    assert_line(
        &out,
        &[
            uses[0],
            uses[1],
            uses[2],
            "for receives only: sends stage GPU memory through host memory (a GPU older than Ampere, compute capability 7.0, with no NVLink peer on a node of several GPUs)",
        ],
    );
    // not where NCCL_NET_GDR_READ=1 takes the rule away, nor in the forms
    // that run no program
    let on = vec![("NCCL_NET_GDR_READ", std::path::PathBuf::from("1"))];
    let (_, out) = t.run_with(&[], &on);
    assert!(!out.contains("receives only"), "{out}");
    // NVLink between them: reads on
    t.volta(&["0000:03:00.0", "0000:05:00.0"], true);
    let (_, out) = t.run(&[]);
    assert_line(&out, &uses);
    assert!(!out.contains("receives only"), "{out}");
}

#[test]
fn a_grace_gpu_reaches_the_nic_on_its_cpu_over_c2c() {
    // GH200: the GPU and mlx5_0 on two host bridges of one arm64 CPU
    // (NODE in sysfs); NCCL's path over C2C is P2C.
    let t = grace_hopper("c2c", false, false);
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    // Without nvidia-smi C2C cannot be seen: said, not warned.
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(
        &out,
        &[
            "distance",
            "0009:01:00.0",
            "is NODE from it in sysfs",
            "only nvidia-smi can tell (`nvidia-smi c2c -s`",
        ],
    );
    // nor in the forms that run no program, whatever nvidia-smi would say
    t.grace(&["0009:01:00.0"]);
    let (status, health) = t.run(&["--health", "--nccl"]);
    assert_eq!(status, 0, "{health}");
    // With it: P2C, and GPUDirect RDMA in both releases' rule.
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(
        &out,
        &[
            "ok",
            "distance",
            "0009:01:00.0",
            "mlx5_0 (0000:01:00.0) is P2C from it: over its C2C link to its CPU, then PCIe (NODE in sysfs)",
        ],
    );
    assert_line(
        &out,
        &[
            "ok",
            "nccl",
            "0009:01:00.0",
            "NCCL uses GPUDirect RDMA with mlx5_0 (P2C, over C2C",
        ],
    );
    // NCCL_NET_GDR_C2C=0: the warning, and the fix it names works in both
    // releases (the oracle holds NCCL_NET_GDR_LEVEL=P2C to NCCL's code)
    let off = vec![("NCCL_NET_GDR_C2C", std::path::PathBuf::from("0"))];
    let (status, out) = t.run_with(&[], &off);
    assert_eq!(status, 6, "{out}");
    assert_line(
        &out,
        &[
            "WARN",
            "distance",
            "0009:01:00.0",
            "NCCL does not use GPUDirect RDMA over it",
            "NCCL_NET_GDR_C2C=0 in the environment",
        ],
    );
    assert_line(&out, &["fix: NCCL_NET_GDR_LEVEL=P2C"]);
    let mut fixed = off.clone();
    fixed.push(("NCCL_NET_GDR_LEVEL", std::path::PathBuf::from("P2C")));
    let (status, out) = t.run_with(&[], &fixed);
    assert_eq!(status, 0, "{out}");
    assert_line(
        &out,
        &[
            "ok",
            "nccl",
            "0009:01:00.0",
            "NCCL uses GPUDirect RDMA with mlx5_0 (P2C",
        ],
    );
    // A level the releases read apart: said, not warned, unless the
    // installed libnccl's series decides.
    let pix = vec![("NCCL_NET_GDR_LEVEL", std::path::PathBuf::from("PIX"))];
    let (status, out) = t.run_with(&[], &pix);
    assert_eq!(status, 0, "{out}");
    assert_line(
        &out,
        &[
            "nccl",
            "0009:01:00.0",
            "NCCL 2.28 uses GPUDirect RDMA with mlx5_0 over C2C and NCCL 2.30 does not",
            "which NCCL the job loads decides",
        ],
    );
    t.nccl_library("2.30.7");
    let (status, out) = t.run_with(&[], &pix);
    assert_eq!(status, 6, "{out}");
    assert_line(
        &out,
        &["WARN", "distance", "0009:01:00.0", "NCCL 2.30's rule"],
    );
    // Not on an x86 node: no C2C there, nvidia-smi not asked for it.
    let x86 = switch_and_root_port("no-c2c");
    x86.nvidia_open_580();
    x86.mofed_with("nv_peer_mem");
    let (_, out) = x86.run(&[]);
    assert!(!out.contains("C2C"), "{out}");
}

#[test]
fn nccl_registers_through_dmabuf_before_a_peer_client() {
    let t = one_switch("dmabuf-first", None);
    t.mofed_with("nv_peer_mem");
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert_line(
        &out,
        &[
            "nccl",
            NCCL_FILES,
            "it registers GPU memory through DMA-BUF, which it takes before nv_peer_mem",
        ],
    );
    // NCCL_DMABUF_ENABLE=0 (anything strtoll reads as 0) keeps the peer client.
    let off = |v: &str| vec![("NCCL_DMABUF_ENABLE", std::path::PathBuf::from(v))];
    let (_, out) = t.run_with(&[], &off("off"));
    assert_line(
        &out,
        &[
            "nccl",
            NCCL_FILES,
            "(DMA-BUF, which would also serve, is off: NCCL_DMABUF_ENABLE=off in the environment)",
        ],
    );
    // Without a peer client, off means no GPUDirect RDMA for NCCL.
    let t = inbox_dmabuf_tree();
    let (_, out) = t.run_with(&[], &off("0"));
    assert_line(
        &out,
        &[
            "nccl",
            "NCCL finds no GPUDirect RDMA support: no peer-memory file, and DMA-BUF, which would serve, is off (NCCL_DMABUF_ENABLE=0 in the environment)",
        ],
    );
    assert_line(
        &out,
        &[
            "nccl",
            "0000:03:00.0",
            "NCCL does not use GPUDirect RDMA with mlx5_0",
        ],
    );
    let (_, out) = t.run(&[]);
    assert_line(
        &out,
        &[
            "nccl",
            "0000:03:00.0",
            "NCCL uses GPUDirect RDMA with mlx5_0",
        ],
    );
}

#[test]
fn the_installed_nccl_is_named_with_the_releases_the_rules_hold_for() {
    let t = one_switch("libnccl", None);
    t.mofed_with("nv_peer_mem");
    t.nccl_library("2.28.9");
    let (_, out) = t.run(&[]);
    assert_line(
        &out,
        &[
            "nccl",
            "NCCL 2.28.9 is installed (/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9)",
            "those of 2.28.9 and 2.30.7, which agree on them",
        ],
    );
    let t = one_switch("libnccl-new", None);
    t.mofed_with("nv_peer_mem");
    t.nccl_library("2.31.2");
    let (_, out) = t.run(&[]);
    assert_line(
        &out,
        &[
            "nccl",
            "NCCL 2.31.2 is installed",
            "proven against 2.28.9 and 2.30.7 only",
        ],
    );
}

/// Issue 57: a NIC in an Intel VMD domain. NCCL finds no sysfs path for
/// `10000:e1:00.0` (graph/xml.cc, getPciPath) and puts it on CPU -1: SYS
/// from the GPU, whatever sysfs shows (NODE here), so NCCL_NET_GDR_LEVEL=PHB
/// changes nothing and the fix names the VMD domain; NCCL's own code agrees
/// at every level (tests/nccl_oracle.rs's catalogue).
#[test]
fn a_vmd_nic_is_where_nccl_places_it() {
    let t = vmd_nic("vmd");
    t.mofed_with("nv_peer_mem");
    let phb = vec![("NCCL_NET_GDR_LEVEL", std::path::PathBuf::from("PHB"))];
    for env in [Vec::new(), phb] {
        let (status, out) = t.run_with(&[], &env);
        assert_ne!(status, 0, "{out}");
        assert!(out.contains("\nNOT READY (topology)"), "{out}");
        assert_line(
            &out,
            &[
                "WARN",
                "distance",
                "0000:01:00.0",
                "closest RDMA device mlx5_0 (10000:e1:00.0) is SYS from it as NCCL places it: NCCL finds no sysfs path for 10000:e1:00.0",
                "(NODE in sysfs)",
            ],
        );
        assert_line(
            &out,
            &[
                "take 10000:e1:00.0 out of its VMD domain",
                "NCCL sees it NODE from the GPU; or, if measured faster, NCCL_NET_GDR_LEVEL=SYS",
            ],
        );
        assert!(!out.contains("under one PCIe switch"), "{out}");
    }
    // The tree is a kernel's: the VMD domain's buses are named as the
    // kernel names them, not by NCCL's 7-character cut.
    assert!(t.sys().join("class/pci_bus/10000:e1").exists());
    assert!(!t.sys().join("class/pci_bus/10000:e").exists());
    check_shapes(&t.sys());
}

/// Issue 57: the NIC below the GPU's own switch has no ACTIVE port, so
/// NCCL skips it (net_ib.cc) and takes mlx5_1 beyond its level; the fix is
/// that NIC's port, said from its link state, not a move of hardware.
#[test]
fn a_down_port_below_the_gpus_switch_is_the_fix() {
    for (state, phys, says) in [
        (
            "1: DOWN",
            "2: Polling",
            "port 1 1: DOWN, phys_state 2: Polling: no link: nothing answers at the other end; check the cable and the switch port it plugs into (`ibstat` shows the ports)",
        ),
        (
            "1: DOWN",
            "3: Disabled",
            "port 1 1: DOWN, phys_state 3: Disabled: the port is disabled: enable it where it was disabled",
        ),
        (
            "2: INIT",
            "5: LinkUp",
            "port 1 2: INIT, phys_state 5: LinkUp: the link is up but the port is not activated: a subnet manager (opensm, or the switch's) must run on this fabric",
        ),
    ] {
        let t = own_switch_nic_down("down-port", state, phys);
        t.mofed_with("nv_peer_mem");
        let (status, out) = t.run(&[]);
        assert_eq!(status, 6, "{out}");
        assert_line(
            &out,
            &["WARN", "distance", "0000:03:00.0", "mlx5_1", "is PHB"],
        );
        assert_line(
            &out,
            &[
                "fix: bring up mlx5_0's port, PIX from this GPU, which NCCL skips while no port is ACTIVE",
                says,
            ],
        );
        assert!(!out.contains("under one PCIe switch"), "{out}");
        assert_line(
            &out,
            &[
                "WARN",
                "nic",
                "mlx5_0",
                "NCCL does not use mlx5_0: no port is ACTIVE",
                "it is the nearest RDMA device of a GPU",
            ],
        );
        check_shapes(&t.sys());
    }
    // A down device no GPU needs (each has a nearer one up) stays an
    // info line: a spare port is no reason to drain a node.
    let t = one_switch("spare-down", None);
    t.bridge("pci0000:00/0000:00:02.0", 4, None, 0);
    t.nic("pci0000:00/0000:00:02.0/0000:05:00.0", "mlx5_1", 0);
    t.port("mlx5_1", 1, "1: DOWN", "InfiniBand");
    t.mofed_with("nv_peer_mem");
    let (status, out) = t.run(&[]);
    assert_eq!(status, 0, "{out}");
    assert!(
        out.contains("\n     nic       mlx5_1: NCCL does not use mlx5_1: no port is ACTIVE"),
        "{out}"
    );
}

/// Issue 57: NCCL weighs path bandwidth before path type (topo.cc,
/// ncclTopoGetLocal), so where the NIC beside the GPU has a narrow link
/// (x4 here) it takes a farther, wider one. The check names that one as the
/// device NCCL takes, not as the closest, and says why the nearer one is
/// passed over; NCCL's own code judges the same tree (ci/test-nccl.sh).
#[test]
fn a_farther_wider_nic_is_the_one_nccl_takes_and_not_called_the_closest() {
    let t = one_switch("wider", None);
    let narrow = "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0";
    for dir in [narrow.to_owned(), format!("{narrow}/0000:04:00.0")] {
        t.write(&format!("{dir}/max_link_width"), "4\n");
    }
    t.bridge("pci0000:00/0000:00:02.0", 4, None, 0);
    t.nic("pci0000:00/0000:00:02.0/0000:05:00.0", "mlx5_1", 0);
    t.mofed_with("nv_peer_mem");
    let phb = vec![("NCCL_NET_GDR_LEVEL", std::path::PathBuf::from("PHB"))];
    let (_, out) = t.run_with(&[], &phb);
    assert_line(
        &out,
        &[
            "distance",
            "0000:03:00.0",
            "RDMA device mlx5_1 (0000:05:00.0), the one NCCL takes, is PHB from it",
        ],
    );
    assert_line(
        &out,
        &[
            "nccl",
            "0000:03:00.0",
            "NCCL takes mlx5_1 (PHB) over the nearer mlx5_0 (PIX): it weighs path bandwidth before path type",
        ],
    );
    assert!(!out.contains("closest RDMA device mlx5_1"), "{out}");
    // Both links alike: the nearest is NCCL's, and the closest.
    let t = one_switch("alike", None);
    t.bridge("pci0000:00/0000:00:02.0", 4, None, 0);
    t.nic("pci0000:00/0000:00:02.0/0000:05:00.0", "mlx5_1", 0);
    t.mofed_with("nv_peer_mem");
    let (_, out) = t.run(&[]);
    assert_line(
        &out,
        &[
            "distance",
            "0000:03:00.0",
            "closest RDMA device mlx5_0 (0000:04:00.0) is PIX from it",
        ],
    );
    assert!(!out.contains("the one NCCL takes"), "{out}");
}
