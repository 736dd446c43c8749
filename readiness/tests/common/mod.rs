//! Fake sysfs/procfs trees in the kernel's layout (Documentation/PCI/
//! sysfs-pci.rst, sysfs-class-infiniband, sysfs-kernel-iommu_groups) and a
//! runner for the real binary over them. Each tree is a directory with
//! `sys/` and `proc/`; PCI functions live in `sys/devices/<chain>` with
//! `sys/bus/pci/devices/<address>` linking there, as on a real host.

#![allow(dead_code)] // each test file uses part of it

pub mod generator;
pub mod oracle;

use readiness::config_space::layout;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// MLNX_OFED's per-client counter files (backport 0271's, in its order),
/// which nv_peer_mem also shows where it makes memory_peers itself.
const COUNTER_FILES: [&str; 7] = [
    "num_alloc_mrs",
    "num_dealloc_mrs",
    "num_reg_pages",
    "num_dereg_pages",
    "num_reg_bytes",
    "num_dereg_bytes",
    "num_free_callbacks",
];

pub struct Tree {
    pub root: PathBuf,
    /// Set by a test that writes a file no kernel prints on purpose.
    malformed: std::cell::Cell<bool>,
}

/// Holds every `resource` file under @sys to the shapes kernels print
/// (drivers/pci/pci-sysfs.c, resource_show): one `0x%016llx 0x%016llx
/// 0x%016llx` line per resource, PCI_BRIDGE_RESOURCES lines for an
/// endpoint (7, or 13 with CONFIG_PCI_IOV) and DEVICE_COUNT_RESOURCE for a
/// bridge (11 or 17), a 64-bit BAR's line (flags bit 0x4) followed by the
/// empty line of its upper half; the corpus of real nodes passes it too
/// (tests/corpus.rs). Returns how many files it checked.
pub fn check_shapes(sys: &Path) -> usize {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                walk(&e.path(), found);
            } else if e.file_name() == "resource" {
                found.push(e.path());
            }
        }
    }
    let mut files = Vec::new();
    walk(&sys.join("devices"), &mut files);
    for f in &files {
        let text = fs::read_to_string(f).unwrap();
        let class = fs::read_to_string(f.with_file_name("class")).unwrap_or_default();
        let bridge = class.trim().starts_with("0x0604");
        let lines: Vec<&str> = text.lines().collect();
        let allowed: &[usize] = if bridge { &[11, 17] } else { &[7, 13] };
        assert!(
            allowed.contains(&lines.len()),
            "{}: {} lines; a kernel prints {allowed:?} for a{} (test tree shape)",
            f.display(),
            lines.len(),
            if bridge { " bridge" } else { "n endpoint" }
        );
        let field = |s: &str| {
            s.len() == 18
                && s.starts_with("0x")
                && s[2..]
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        };
        for (i, l) in lines.iter().enumerate() {
            let fields: Vec<&str> = l.split(' ').collect();
            assert!(
                fields.len() == 3 && fields.iter().all(|x| field(x)),
                "{} line {i}: `{l}` is not `0x%016llx 0x%016llx 0x%016llx`",
                f.display()
            );
            let flags = u64::from_str_radix(&fields[2][2..], 16).unwrap();
            if i < 5 && flags & 0x4 != 0 && fields[1] != "0x0000000000000000" {
                assert_eq!(
                    lines[i + 1],
                    "0x0000000000000000 0x0000000000000000 0x0000000000000000",
                    "{} line {i} is a 64-bit BAR: its upper half's line is empty",
                    f.display()
                );
            }
        }
    }
    files.len()
}

/// Holds a generated NCCL topology file to the shapes of the real files
/// it stands for: Azure's HPC images' (github.com/Azure/azhpc-images,
/// topology/ndv2-topo.xml, ndv4-topo.xml, ndv5-topo.xml; docs/nccl-harness.md).
/// One element a line; `system` holds `cpu`s, a `cpu` holds PCI devices
/// or switches, a switch holds devices; each element with exactly the
/// attributes one of those files gives its kind (a switch with ndv4's
/// four or ndv5's eight, every device ndv2's, ndv4's and ndv5's four);
/// a link as they spell it. Returns how many elements it checked.
pub fn check_topo_file_shape(text: &str) -> usize {
    const CPU: &[&str] = &[
        "numaid", "affinity", "arch", "vendor", "familyid", "modelid",
    ];
    const DEVICE: &[&str] = &["busid", "class", "link_speed", "link_width"];
    const SWITCH_NDV5: &[&str] = &[
        "busid",
        "class",
        "link_speed",
        "link_width",
        "vendor",
        "device",
        "subsystem_vendor",
        "subsystem_device",
    ];
    const SPEEDS: &[&str] = &["16 GT/s", "32.0 GT/s PCIe"];
    let mut open: Vec<String> = Vec::new();
    let mut checked = 0;
    for line in text.lines() {
        let l = line.trim();
        if let Some(tag) = l.strip_prefix("</") {
            let tag = tag.trim_end_matches('>');
            assert_eq!(
                open.pop().as_deref(),
                Some(tag),
                "{l}: closes what is not open"
            );
            continue;
        }
        let body = l
            .strip_prefix('<')
            .and_then(|b| b.strip_suffix('>'))
            .unwrap_or_else(|| panic!("`{l}`: not one element a line"));
        let (body, closed) = match body.strip_suffix('/') {
            Some(b) => (b, true),
            None => (body, false),
        };
        let (tag, rest) = body.split_once(' ').unwrap_or((body, ""));
        let attrs: Vec<(&str, &str)> = rest
            .split('"')
            .collect::<Vec<_>>()
            .chunks(2)
            .filter(|c| c.len() == 2)
            .map(|c| (c[0].trim().trim_end_matches('='), c[1]))
            .collect();
        let names: Vec<&str> = attrs.iter().map(|(k, _)| *k).collect();
        let value = |k: &str| attrs.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        let parent = open.last().map(String::as_str);
        let switch = value("class").is_some_and(|c| c.starts_with("0x0604"));
        match (tag, parent) {
            ("system", None) => assert_eq!(names, ["version"], "{l}"),
            ("cpu", Some("system")) => {
                assert_eq!(names, CPU, "{l}: a cpu as Azure's files give it")
            }
            ("pci", Some("cpu")) if switch => assert!(
                names == DEVICE || names == SWITCH_NDV5,
                "{l}: a switch as ndv4's or ndv5's file gives it"
            ),
            ("pci", Some("cpu" | "pci")) if !switch => {
                assert_eq!(names, DEVICE, "{l}: a device as Azure's files give it")
            }
            _ => panic!("{l}: a {tag} below {parent:?}, which Azure's files do not hold"),
        }
        if tag == "pci" {
            assert!(
                value("link_speed").is_some_and(|v| SPEEDS.contains(&v))
                    && value("link_width") == Some("16"),
                "{l}: a link as Azure's files spell it"
            );
        }
        if !closed {
            open.push(tag.to_owned());
        }
        checked += 1;
    }
    assert!(open.is_empty(), "{open:?} left open");
    checked
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// The kernel release the trees run (Debian 12's).
pub const RELEASE: &str = "6.1.0-41-amd64";

/// One `resource` line: start, end, flags (drivers/pci/pci-sysfs.c,
/// resource_show); size 0 is an unused line.
fn resource_line(start: u64, size: u64, flags: u64) -> String {
    if size == 0 {
        "0x0000000000000000 0x0000000000000000 0x0000000000000000\n".to_owned()
    } else {
        format!(
            "0x{start:016x} 0x{:016x} 0x{flags:016x}\n",
            start + size - 1
        )
    }
}

/// A GPU's resource file as the lent H100 and H200 print it
/// (readiness/tests/real/): 13 lines (6 BAR registers, the ROM, 6 SR-IOV
/// BARs: resource_show prints PCI_BRIDGE_RESOURCES lines for an endpoint
/// on a kernel with CONFIG_PCI_IOV); BAR0 16 MiB and BAR1 (as given) and
/// BAR2 32 MiB, each 64-bit (flags 0x14220c: IORESOURCE_MEM_64,
/// prefetchable, PCI_BASE_ADDRESS_MEM_TYPE_64) and so each followed by
/// an empty line. @bar1 0 leaves BAR1 unassigned (flags kept, no address),
/// as firmware without above-4G decoding does.
pub fn gpu_resource(bar1: u64) -> String {
    let mut lines = vec![
        resource_line(0x1020_0200_0000, 16 << 20, 0x14220c),
        resource_line(0, 0, 0),
        resource_line(0x1000_0000_0000, bar1, 0x14220c),
        resource_line(0, 0, 0),
        resource_line(0x1020_0000_0000, 32 << 20, 0x14220c),
    ];
    if bar1 == 0 {
        lines[2] = "0x0000000000000000 0x0000000000000000 0x000000000014220c\n".to_owned();
    }
    lines.resize(13, resource_line(0, 0, 0));
    lines.concat()
}

/// A bridge's resource file: 17 lines (the endpoint's 13 and the 4
/// bridge windows), windows unused here.
fn bridge_resource() -> String {
    resource_line(0, 0, 0).repeat(17)
}

/// An endpoint whose BARs the check never reads (a virtio NIC): 13 lines.
pub fn plain_resource() -> String {
    resource_line(0, 0, 0).repeat(13)
}

/// A ConnectX-7's: BAR0 32 MiB 64-bit prefetchable, 13 lines.
fn nic_resource() -> String {
    let mut lines = vec![
        resource_line(0x2000_0000_0000, 32 << 20, 0x14220c),
        resource_line(0, 0, 0),
    ];
    lines.resize(13, resource_line(0, 0, 0));
    lines.concat()
}

impl Tree {
    pub fn new(name: &str) -> Self {
        let root = std::env::temp_dir().join(format!(
            "gpudirect-rdma-check-test-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&root);
        for d in ["sys/bus/pci/devices", "sys/devices", "sys/module", "proc"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        let t = Tree {
            root,
            malformed: std::cell::Cell::new(false),
        };
        t.write("proc/sys/kernel/osrelease", format!("{RELEASE}\n"));
        t
    }

    pub fn sys(&self) -> PathBuf {
        self.root.join("sys")
    }

    pub fn write(&self, relative: &str, contents: impl AsRef<[u8]>) {
        let path = self.root.join(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, contents).unwrap();
    }

    /// A PCI function at @chain (`pci0000:00/0000:00:01.0/...`) with its
    /// (vendor, device, class).
    pub fn pci(
        &self,
        chain: &str,
        (vendor, device, class): (u16, u16, u32),
        numa: i32,
        resource: &str,
        config: &[u8],
    ) {
        let dir = format!("sys/devices/{chain}");
        self.write(&format!("{dir}/vendor"), format!("0x{vendor:04x}\n"));
        self.write(&format!("{dir}/device"), format!("0x{device:04x}\n"));
        self.write(&format!("{dir}/class"), format!("0x{class:06x}\n"));
        self.write(&format!("{dir}/numa_node"), format!("{numa}\n"));
        self.write(&format!("{dir}/resource"), resource);
        self.write(&format!("{dir}/config"), config);
        let address = chain.rsplit('/').next().unwrap();
        symlink(
            format!("../../../devices/{chain}"),
            self.sys().join("bus/pci/devices").join(address),
        )
        .unwrap();
        self.kernel_links(chain);
    }

    /// What the kernel shows of every PCI function beside the files the
    /// check reads, and NCCL reads (graph/xml.cc, nccl-harness): the
    /// function's bus as /sys/class/pci_bus/<domain:bus>, a link into the
    /// directory of the bridge (or host bridge) that owns the bus
    /// (drivers/pci/probe.c, pci_add_new_bus: the bus device's parent is
    /// the bridge); its `subsystem` link to bus/pci; its link's
    /// `max_link_speed` and `max_link_width` (drivers/pci/pci-sysfs.c; a
    /// Gen5 x16 link as the lent H100 hosts' GPUs print it).
    /// The bus is named `<domain>:<bus>` as the kernel names it
    /// (drivers/pci/probe.c, pci_alloc_bus's dev_set_name "%04x:%02x"): a
    /// VMD domain's is `10000:e1`, five digits, not the first seven
    /// characters of the address, which is what NCCL looks up
    /// (graph/xml.cc, getPciPath: BUSID_REDUCED_SIZE).
    fn kernel_links(&self, chain: &str) {
        let (parent, address) = chain.rsplit_once('/').unwrap();
        let bus = &address[..address.rfind(':').unwrap()];
        let bus_dir = self
            .sys()
            .join("devices")
            .join(parent)
            .join("pci_bus")
            .join(bus);
        fs::create_dir_all(&bus_dir).unwrap();
        let class = self.sys().join("class/pci_bus");
        fs::create_dir_all(&class).unwrap();
        let link = class.join(bus);
        if fs::symlink_metadata(&link).is_err() {
            symlink(format!("../../devices/{parent}/pci_bus/{bus}"), link).unwrap();
        }
        fs::create_dir_all(self.sys().join("bus/pci")).unwrap();
        let up = "../".repeat(chain.split('/').count() + 1);
        symlink(
            format!("{up}bus/pci"),
            self.sys().join("devices").join(chain).join("subsystem"),
        )
        .unwrap();
        let dir = format!("sys/devices/{chain}");
        self.write(&format!("{dir}/max_link_speed"), "32.0 GT/s PCIe\n");
        self.write(&format!("{dir}/max_link_width"), "16\n");
    }

    /// A root port (4), switch upstream (5) or downstream (6) port.
    pub fn bridge(&self, chain: &str, port_type: u8, acs: Option<(u16, u16)>, numa: i32) {
        self.pci(
            chain,
            (0x10b5, 0xc010, 0x060400),
            numa,
            &bridge_resource(),
            &layout::bridge(0x10b5, 0xc010, port_type, acs),
        );
    }

    /// A switch port's vendor and device ids and its subsystem's, as the
    /// kernel prints them (config space offsets 0, 2, 0x2c, 0x2e).
    pub fn switch_ids(&self, chain: &str, (vendor, device): (u16, u16), (sv, sd): (u16, u16)) {
        let dir = format!("sys/devices/{chain}");
        self.write(&format!("{dir}/vendor"), format!("0x{vendor:04x}\n"));
        self.write(&format!("{dir}/device"), format!("0x{device:04x}\n"));
        self.write(&format!("{dir}/subsystem_vendor"), format!("0x{sv:04x}\n"));
        self.write(&format!("{dir}/subsystem_device"), format!("0x{sd:04x}\n"));
    }

    /// An H100 (0x2330) or the device given, with BAR1 of @bar1 bytes.
    pub fn gpu(&self, chain: &str, device: u16, numa: i32, bar1: u64) {
        let mut config = vec![0u8; 4096];
        config[0..2].copy_from_slice(&0x10de_u16.to_le_bytes());
        config[2..4].copy_from_slice(&device.to_le_bytes());
        self.pci(
            chain,
            (0x10de, device, 0x030200),
            numa,
            &gpu_resource(bar1),
            &config,
        );
        self.bind(chain, "nvidia");
    }

    /// The device's `driver` link, as the kernel makes it when @driver
    /// binds the device.
    pub fn bind(&self, chain: &str, driver: &str) {
        fs::create_dir_all(self.sys().join("bus/pci/drivers").join(driver)).unwrap();
        let up = "../".repeat(chain.split('/').count() + 1);
        let link = self.sys().join("devices").join(chain).join("driver");
        let _ = fs::remove_file(&link);
        symlink(format!("{up}bus/pci/drivers/{driver}"), link).unwrap();
    }

    pub fn unbind(&self, chain: &str) {
        fs::remove_file(self.sys().join("devices").join(chain).join("driver")).unwrap();
    }

    /// A ConnectX-7 (0x1021) function with its RDMA device @name.
    pub fn nic(&self, chain: &str, name: &str, numa: i32) {
        self.pci(
            chain,
            (0x15b3, 0x1021, 0x020700),
            numa,
            &nic_resource(),
            &[0u8; 4096],
        );
        let dir = self.sys().join("class/infiniband").join(name);
        fs::create_dir_all(&dir).unwrap();
        symlink(format!("../../../devices/{chain}"), dir.join("device")).unwrap();
        self.port(name, 1, "4: ACTIVE", "InfiniBand");
        self.verbs_library("libibverbs.so.1.14.44.0");
    }

    /// SR-IOV virtual function @index of the ConnectX at @pf, at @chain,
    /// with its RDMA device @name: a ConnectX Family mlx5Gen Virtual
    /// Function (0x101e), linked as drivers/pci/iov.c links them (the VF's
    /// `physfn`, the PF's `virtfn<index>`). The VF's directory is beside
    /// its PF's: pci_iov_add_virtfn gives it the PF's parent.
    pub fn virtual_function(&self, chain: &str, pf: &str, index: usize, name: &str, numa: i32) {
        self.pci(
            chain,
            (0x15b3, 0x101e, 0x020700),
            numa,
            &nic_resource(),
            &[0u8; 4096],
        );
        let devices = self.sys().join("devices");
        let pf_address = pf.rsplit('/').next().unwrap();
        let vf_address = chain.rsplit('/').next().unwrap();
        symlink(
            format!("../{pf_address}"),
            devices.join(chain).join("physfn"),
        )
        .unwrap();
        symlink(
            format!("../{vf_address}"),
            devices.join(pf).join(format!("virtfn{index}")),
        )
        .unwrap();
        let dir = self.sys().join("class/infiniband").join(name);
        fs::create_dir_all(&dir).unwrap();
        symlink(format!("../../../devices/{chain}"), dir.join("device")).unwrap();
        self.port(name, 1, "4: ACTIVE", "InfiniBand");
    }

    /// Port @number of RDMA device @name, its `state` and `link_layer` as
    /// the kernel prints them (drivers/infiniband/core/sysfs.c: state_show
    /// "%d: %s" of ib_port_state, `1: DOWN`, `4: ACTIVE`; link_layer_show
    /// `InfiniBand` or `Ethernet`).
    /// Its `phys_state` too, as the kernel always prints it (phys_state_show
    /// "%u: %s" of ib_port_phys_state): an ACTIVE or INIT port's link is
    /// `5: LinkUp`, a DOWN one's `2: Polling` (no peer); port_phys sets
    /// another.
    pub fn port(&self, name: &str, number: u32, state: &str, link_layer: &str) {
        let phys = if state.starts_with("1:") {
            "2: Polling"
        } else {
            "5: LinkUp"
        };
        self.port_phys(name, number, state, phys, link_layer);
    }

    pub fn port_phys(&self, name: &str, number: u32, state: &str, phys: &str, link_layer: &str) {
        let dir = format!("sys/class/infiniband/{name}/ports/{number}");
        self.write(&format!("{dir}/state"), format!("{state}\n"));
        self.write(&format!("{dir}/phys_state"), format!("{phys}\n"));
        self.write(&format!("{dir}/link_layer"), format!("{link_layer}\n"));
    }

    /// NVIDIA's libnccl2 (its CUDA repository's package): the soname link
    /// and the library of @version, `2.28.9`.
    pub fn nccl_library(&self, version: &str) {
        let dir = self.root.join("usr/lib/x86_64-linux-gnu");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(format!("libnccl.so.{version}")), b"\x7fELF").unwrap();
        symlink(format!("libnccl.so.{version}"), dir.join("libnccl.so.2")).unwrap();
    }

    /// rdma-core's libibverbs, as Debian 12's libibverbs1 installs it:
    /// its soname link and the file (version 1.14: ibv_reg_dmabuf_mr).
    pub fn verbs_library(&self, file: &str) {
        let dir = self.root.join("usr/lib/x86_64-linux-gnu");
        fs::create_dir_all(&dir).unwrap();
        let link = dir.join("libibverbs.so.1");
        let _ = fs::remove_file(&link);
        symlink(file, link).unwrap();
        self.write(&format!("usr/lib/x86_64-linux-gnu/{file}"), "");
    }

    /// The device at @address in IOMMU group @group of @kind.
    pub fn iommu(&self, chain: &str, group: u32, kind: &str) {
        self.write(
            &format!("sys/kernel/iommu_groups/{group}/type"),
            format!("{kind}\n"),
        );
        let depth = chain.split('/').count() + 2; // sys/devices/<chain>
        let up = "../".repeat(depth - 1);
        symlink(
            format!("{up}kernel/iommu_groups/{group}"),
            self.sys().join("devices").join(chain).join("iommu_group"),
        )
        .unwrap();
    }

    pub fn module(&self, name: &str) {
        fs::create_dir_all(self.sys().join("module").join(name)).unwrap();
    }

    /// A peer memory client loaded above MLNX_OFED's core: its module's
    /// `version` (MODULE_VERSION) and the core's
    /// /sys/kernel/mm/memory_peers/nv_mem/version for the nv_mem client it
    /// registers (MLNX_OFED 25.10 backport 0271).
    pub fn client(&self, name: &str) {
        self.write(&format!("sys/module/{name}/version"), "1.4.0\n");
        self.write("sys/kernel/mm/memory_peers/nv_mem/version", "1.4.0\n");
    }

    /// MLNX_OFED's counters for @client (backport 0271's files, in its
    /// order: num_alloc_mrs, num_dealloc_mrs, num_reg_pages,
    /// num_dereg_pages, num_reg_bytes, num_dereg_bytes, num_free_callbacks).
    pub fn counters(&self, client: &str, values: [&str; 7]) {
        for (file, value) in COUNTER_FILES.iter().zip(values) {
            self.write(
                &format!("sys/kernel/mm/memory_peers/{client}/{file}"),
                format!("{value}\n"),
            );
        }
    }

    /// nv_peer_mem where MLNX_OFED's core made no memory_peers (a kernel
    /// that exports no mm_kobj), as the booted 6.12 guest shows it
    /// (kmod/tests/vm/guest/scenarios.sh, memory_peers): the module's own
    /// directory /sys/module/nv_peer_mem/memory_peers/<client>/ with the
    /// core's files, /sys/kernel/mm/memory_peers a link to it
    /// (`memory_peers -> ../../module/nv_peer_mem/memory_peers`), and its
    /// read-only parameter memory_peers saying `nv_peer_mem`.
    pub fn module_made_memory_peers(&self, clients: &[&str]) {
        let _ = fs::remove_dir_all(self.sys().join("kernel/mm/memory_peers"));
        self.write("sys/module/nv_peer_mem/version", "1.4.0\n");
        self.write(
            "sys/module/nv_peer_mem/parameters/memory_peers",
            "nv_peer_mem\n",
        );
        for client in clients {
            let dir = format!("sys/module/nv_peer_mem/memory_peers/{client}");
            self.write(&format!("{dir}/version"), "1.4.0\n");
            for (i, file) in COUNTER_FILES.iter().enumerate() {
                self.write(&format!("{dir}/{file}"), format!("{}\n", i + 1));
            }
        }
        fs::create_dir_all(self.sys().join("kernel/mm")).unwrap();
        symlink(
            "../../module/nv_peer_mem/memory_peers",
            self.sys().join("kernel/mm/memory_peers"),
        )
        .unwrap();
    }

    /// The client unloaded: its module and the core's entry for it gone.
    pub fn unload(&self, name: &str) {
        fs::remove_dir_all(self.sys().join("module").join(name)).unwrap();
        let _ = fs::remove_dir_all(self.sys().join("kernel/mm/memory_peers/nv_mem"));
    }

    /// The kernel's RDMA modules exporting @symbols (name, module), as
    /// the check sees them: each module loaded (`/sys/module/M`),
    /// ib_uverbs with its class (`/sys/class/infiniband_verbs/abi_version`),
    /// MLNX_OFED's (the PeerDirect export's module) out of tree (`taint`
    /// O), and depmod's modules.symbols of the running kernel naming each
    /// export (`alias symbol:NAME MODULE`), with a few of the kernel's own
    /// lines around them.
    pub fn exports(&self, symbols: &[(&str, &str)]) {
        let mofed = symbols
            .iter()
            .any(|(n, _)| *n == "ib_register_peer_memory_client");
        let mut text = String::from(
            "# Aliases for symbols, used by symbol_request().\nalias symbol:ib_register_client ib_core\n",
        );
        for (name, module) in symbols {
            self.module(module);
            if mofed {
                self.write(&format!("sys/module/{module}/taint"), "OE\n");
            }
            if *module == "ib_uverbs" {
                self.write("sys/class/infiniband_verbs/abi_version", "6\n");
            }
            text.push_str(&format!("alias symbol:{name} {module}\n"));
        }
        text.push_str("alias symbol:ib_uverbs_get_ucontext_file ib_uverbs\n");
        self.write(&format!("lib/modules/{RELEASE}/modules.symbols"), text);
        // nv_peer_mem-service (a shell helper, not the check) still reads
        // /proc/kallsyms for its own status lines
        let mut kallsyms = String::from("0000000000000000 T _stext\n");
        for (name, module) in symbols {
            kallsyms.push_str(&format!("0000000000000000 T {name}\t[{module}]\n"));
        }
        self.write("proc/kallsyms", kallsyms);
    }

    pub fn nvidia(&self, version_line: &str) {
        self.write(
            "proc/driver/nvidia/version",
            format!("{version_line}\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n"),
        );
        self.module("nvidia");
    }

    /// The open 580 driver of the probed H100 host, its topology gate at
    /// the default (as the lent hosts list it).
    pub fn nvidia_open_580(&self) {
        self.nvidia("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22-I3-AE18-23-3)  Thu Oct  2 20:53:49 UTC 2025");
        self.nvidia_gate(0);
    }

    /// /proc/driver/nvidia/params with NVreg_GrdmaPciTopoCheckOverride at
    /// @value among its neighbours (`Name: value` lines, as the driver
    /// prints them).
    pub fn nvidia_gate(&self, value: u8) {
        self.write(
            "proc/driver/nvidia/params",
            format!("ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\nGrdmaPciTopoCheckOverride: {value}\nCreateImexChannel0: 0\n"),
        );
    }

    /// The firmware of a VM (DMI as QEMU/KVM fills it in).
    pub fn vm(&self) {
        self.write("sys/class/dmi/id/sys_vendor", "QEMU\n");
        self.write(
            "sys/class/dmi/id/product_name",
            "Standard PC (Q35 + ICH9, 2009)\n",
        );
    }

    /// MLNX_OFED's ib_core with its PeerDirect core (ib_uverbs holds the
    /// DMA-BUF import, as in the kernel's own Makefile), and a loaded client.
    pub fn mofed_with(&self, client: &str) {
        self.module("ib_core");
        self.module("ib_uverbs");
        self.client(client);
        self.exports(&[
            ("ib_register_peer_memory_client", "ib_core"),
            ("ib_umem_dmabuf_get", "ib_uverbs"),
        ]);
    }

    /// A fake nvidia-smi printing @lines for the memory query.
    pub fn nvidia_smi(&self, lines: &str) -> PathBuf {
        let path = self.root.join("nvidia-smi");
        fs::write(&path, format!("#!/bin/sh\ncat <<'EOF'\n{lines}EOF\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// A fake nvidia-smi for GPUs @gpus (PCI addresses, in NVML's index
    /// order) that NVSwitches join: each query the check asks answered in
    /// the shape the lent 4 x H100 host printed (tests/real/h100x4-vm:
    /// `nvidia-smi topo -m`, tab-separated, the header underlined, NV18
    /// between every pair; `index, 00000000:BB:DD.F`; 80 GB each).
    pub fn nvswitch(&self, gpus: &[&str]) -> PathBuf {
        self.smi_for(gpus, 81559, &[("topo", &nvswitch_topo(gpus.len()))])
    }

    /// A fake nvidia-smi answering the index and memory queries for @gpus
    /// (@mib each) as the lent hosts print them (`index,
    /// 00000000:BB:DD.F`), each of @answers' first argument with its text,
    /// anything else failing.
    fn smi_for(&self, gpus: &[&str], mib: u64, answers: &[(&str, &str)]) -> PathBuf {
        let bus = |g: &str| format!("0000{}", g.to_ascii_uppercase());
        let index: String = gpus
            .iter()
            .enumerate()
            .map(|(i, g)| format!("{i}, {}\n", bus(g)))
            .collect();
        let memory: String = gpus
            .iter()
            .map(|g| format!("{}, {mib}\n", bus(g)))
            .collect();
        let more: String = answers
            .iter()
            .map(|(arg, text)| format!("{arg}) cat <<'EOF'\n{text}EOF\n;;\n"))
            .collect();
        let path = self.root.join("nvidia-smi");
        fs::write(
            &path,
            format!(
                "#!/bin/sh\ncase \"$1\" in\n--query-gpu=index,pci.bus_id) cat <<'EOF'\n{index}EOF\n;;\n--query-gpu=pci.bus_id,memory.total) cat <<'EOF'\n{memory}EOF\n;;\n{more}*) exit 1 ;;\nesac\n"
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// An x86 node's CPUs as /proc/cpuinfo shows them (the first lines
    /// of each processor's block, arch/x86/kernel/cpu/proc.c,
    /// show_cpuinfo): @vendor, @family and @model, which NCCL reads from
    /// cpuid for its inter-CPU bandwidth (the harness's --cpu).
    pub fn cpuinfo(&self, vendor: &str, family: u32, model: u32) {
        self.write(
            "proc/cpuinfo",
            format!(
                "processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\nmodel name\t: CPU\nstepping\t: 2\n\n"
            ),
        );
    }

    /// An arm64 node's CPUs: `midr_el1` as arm64's cpuinfo.c prints it
    /// (`0x%016llx`), a Neoverse V2's (Grace: implementer 0x41, part 0xd4f).
    pub fn arm64(&self) {
        self.write(
            "sys/devices/system/cpu/cpu0/regs/identification/midr_el1",
            "0x00000000410fd4f0\n",
        );
    }

    /// A fake nvidia-smi for Grace Hopper GPUs @gpus (PCI addresses, in
    /// NVML's index order), each joined to its CPU by ten active C2C links:
    /// `nvidia-smi c2c -s` in the shape a GH200 printed (docs/diagnostics.md,
    /// "C2C"), the index and memory queries as the lent hosts print them;
    /// `topo` fails. The GPUs are listed in `c2c-gpus` beside the tree, for
    /// the oracle (the harness's `c2c=10`).
    pub fn grace(&self, gpus: &[&str]) -> PathBuf {
        let mut c2c = String::new();
        for i in 0..gpus.len() {
            c2c.push_str(&format!(
                "GPU {i}: NVIDIA GH200 480GB (UUID: GPU-{i:08x}-0000-0000-0000-000000000000)\n"
            ));
            for link in 0..10 {
                c2c.push_str(&format!("         C2C Link {link}: 44.712 GB/s\n"));
            }
        }
        self.write("c2c-gpus", gpus.join("\n"));
        self.smi_for(gpus, 97871, &[("c2c", &c2c)])
    }

    /// Tree::grace, with NVLink joining the GPUs as well (a GH200 NVL2
    /// board): `topo -m` in the lent NVSwitch host's shape (Tree::nvswitch).
    pub fn grace_joined(&self, gpus: &[&str]) -> PathBuf {
        self.grace(gpus);
        let c2c = fs::read_to_string(self.root.join("nvidia-smi")).unwrap();
        let topo = format!(
            "topo) cat <<'EOF'\n{}EOF\n;;\n*) exit 1",
            nvswitch_topo(gpus.len())
        );
        let path = self.root.join("nvidia-smi");
        fs::write(&path, c2c.replacen("*) exit 1", &topo, 1)).unwrap();
        path
    }

    /// A fake nvidia-smi for V100s @gpus (compute capability 7.0, 32 GB),
    /// NVLink joining them where @nvlink (`topo -m`'s cells NV2, else SYS;
    /// in the lent host's shape, Tree::nvswitch); the GPUs and their
    /// compute capability listed in `sm-gpus` beside the tree, for the
    /// oracle (the harness's `sm=70`).
    pub fn volta(&self, gpus: &[&str], nvlink: bool) -> PathBuf {
        let bus = |g: &str| format!("0000{}", g.to_ascii_uppercase());
        let caps: String = gpus.iter().map(|g| format!("{}, 7.0\n", bus(g))).collect();
        let far = if nvlink { "NV2" } else { "SYS" };
        let topo = topo_matrix(gpus.len(), |_, _| far.to_owned());
        let listed: Vec<String> = gpus.iter().map(|g| format!("{g} 70")).collect();
        self.write("sm-gpus", listed.join("\n"));
        self.smi_for(
            gpus,
            32768,
            &[
                ("--query-gpu=pci.bus_id,compute_cap", &caps),
                ("topo", &topo),
            ],
        )
    }

    /// A fake nvidia-smi for GPUs @gpus (PCI addresses, in NVML's index
    /// order) joined pairwise by NVLink without NVSwitches (bridges, a
    /// mesh): @links are (index, index, count), `topo -m`'s cell `NV<count>`
    /// for those pairs (the shape of NVIDIA/nccl issue #1617's 4 x H100
    /// matrix), the PCIe class elsewhere (Tree::pcie_class; the check reads
    /// only the NV cells, nvlink.rs); 80 GB each, compute capability 9.0
    /// (the harness's default). The links are listed in
    /// `nvlink-gpus` beside the tree (`A,B,COUNT` a line), for the oracle
    /// (the harness's `--nvlink`).
    pub fn nvlink(&self, gpus: &[&str], links: &[(usize, usize, u32)]) -> PathBuf {
        let count = |i: usize, j: usize| {
            links
                .iter()
                .find(|(a, b, _)| (*a, *b) == (i, j) || (*a, *b) == (j, i))
                .map(|l| l.2)
        };
        let topo = topo_matrix(gpus.len(), |i, j| match count(i, j) {
            Some(n) => format!("NV{n}"),
            None => self.pcie_class(gpus[i], gpus[j]).to_owned(),
        });
        let listed: Vec<String> = links
            .iter()
            .map(|(a, b, n)| format!("{},{},{n}", gpus[*a], gpus[*b]))
            .collect();
        self.write("nvlink-gpus", listed.join("\n"));
        // Hopper's, as the harness's default sm=90.
        let caps: String = gpus
            .iter()
            .map(|g| format!("0000{}, 9.0\n", g.to_ascii_uppercase()))
            .collect();
        self.smi_for(
            gpus,
            81559,
            &[
                ("--query-gpu=pci.bus_id,compute_cap", &caps),
                ("topo", &topo),
            ],
        )
    }

    /// `nvidia-smi topo -m`'s class between two devices of the tree, from
    /// their places below the host bridges: SYS across host bridges (the
    /// generated nodes have one per socket), NODE across root ports, PIX
    /// through one switch, PXB through more bridges.
    pub fn pcie_class(&self, a: &str, b: &str) -> &'static str {
        let chain = |d: &str| -> Vec<String> {
            let link = fs::read_link(self.sys().join("bus/pci/devices").join(d)).unwrap();
            let text = link.to_string_lossy().into_owned();
            let below = text.split_once("devices/").map_or("", |(_, r)| r);
            below.split('/').map(str::to_owned).collect()
        };
        let (a, b) = (chain(a), chain(b));
        let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        match common {
            0 => "SYS",
            1 => "NODE",
            _ if a.len() == common + 2 && b.len() == common + 2 => "PIX",
            _ => "PXB",
        }
    }

    /// What the CUDA driver reports of @gpus (PCI addresses, in CUDA's
    /// device order): whether each supports GPUDirect RDMA
    /// (`CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`), served by the
    /// libcuda double (tests/doubles/libcuda.c) to the check's own
    /// `--cuda-attributes` child, bus ids as cuDeviceGetPCIBusId prints
    /// them; listed in `cuda-gpus` beside the tree, for the oracle too (the
    /// harness's `gdr=`).
    pub fn cuda(&self, gpus: &[(&str, bool)]) {
        let lines: String = gpus
            .iter()
            .map(|(g, on)| format!("{} {}\n", g.to_ascii_uppercase(), u8::from(*on)))
            .collect();
        self.write("cuda-gpus", lines);
    }

    /// This tree has a file no kernel prints, on purpose.
    pub fn malformed(&self) {
        self.malformed.set(true);
    }

    /// Runs the check over the tree: (exit status, stdout).
    pub fn run(&self, args: &[&str]) -> (i32, String) {
        self.run_with(args, &[])
    }

    /// The same with more environment (`NV_PEER_MEM_SERVICE`, the
    /// helper's variables); without it, no service helper is found.
    pub fn run_with(&self, args: &[&str], env: &[(&str, PathBuf)]) -> (i32, String) {
        if !self.malformed.get() {
            check_shapes(&self.sys());
        }
        let smi = self.root.join("nvidia-smi");
        // NVPM_CHECK_BIN: another build of the check (a mutant of
        // readiness/tests/mutants, ci/test-nccl.sh).
        let bin = std::env::var_os("NVPM_CHECK_BIN").map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_gpudirect-rdma-check")),
            PathBuf::from,
        );
        let mut command = Command::new(bin);
        command
            .args(args)
            .env("NV_PEER_MEM_SYSFS", self.sys())
            .env("NV_PEER_MEM_PROC", self.root.join("proc"))
            .env("NV_PEER_MEM_ROOT", &self.root)
            .env("NV_PEER_MEM_SERVICE", "/nonexistent/nv_peer_mem-service")
            .env("NV_PEER_MEM_NCCL_CONF", "/nonexistent/nccl.conf")
            .env("NV_PEER_MEM_USER_NCCL_CONF", "/nonexistent/user-nccl.conf")
            .env_remove("NCCL_CONF_FILE")
            .env_remove("NCCL_NET_GDR_LEVEL")
            .env_remove("NCCL_IB_HCA")
            .env_remove("NCCL_TOPO_FILE")
            .env_remove("NCCL_PXN_DISABLE")
            .env_remove("NCCL_DMABUF_ENABLE")
            .env_remove("NCCL_NET_GDR_C2C")
            .env_remove("NCCL_NET_GDR_READ")
            .env(
                "NV_PEER_MEM_NVIDIA_SMI",
                if smi.exists() {
                    smi
                } else {
                    PathBuf::from("/nonexistent/nvidia-smi")
                },
            );
        // The check's CUDA child loads the libcuda double where the tree
        // describes CUDA (Tree::cuda), and never the build host's libcuda.
        let cuda = self.root.join("cuda-gpus");
        if cuda.exists() {
            command
                .env("LD_LIBRARY_PATH", libcuda_double())
                .env("LIBCUDA_DOUBLE", cuda)
                .env_remove("NV_PEER_MEM_CUDA_QUERY");
        } else {
            command.env("NV_PEER_MEM_CUDA_QUERY", "/nonexistent/cuda-query");
        }
        for (name, value) in env {
            command.env(name, value);
        }
        let out = command.output().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        if args.is_empty() && std::env::var_os("NVPM_NCCL_ORACLE").is_some() {
            self.judged_by_nccl(&stdout, env);
        }
        (out.status.code().unwrap_or(-1), stdout)
    }

    /// With `NVPM_NCCL_ORACLE` set to a file (ci/test-nccl.sh, which counts
    /// its lines: a tree and its GPU verdicts each): NCCL's own code judges
    /// this tree as the check just did (oracle.rs), in the same NCCL
    /// environment (the check's stand-ins for NCCL's files given to the
    /// harness as the node's), and any difference fails the test. Trees
    /// with a GPU or no RDMA device NCCL sees none of are left out.
    fn judged_by_nccl(&self, out: &str, env: &[(&str, PathBuf)]) {
        let (gpus, nics) = oracle::devices(out);
        if gpus.is_empty() || nics.is_empty() || self.malformed.get() {
            return;
        }
        let node_path = |v: &PathBuf| self.root.join(v.strip_prefix("/").unwrap_or(v));
        let nccl_env: Vec<(&str, PathBuf)> = env
            .iter()
            .filter_map(|(k, v)| match *k {
                "NV_PEER_MEM_NCCL_CONF" => Some(("NCCL_HARNESS_ETC_NCCL_CONF", v.clone())),
                "NV_PEER_MEM_USER_NCCL_CONF" => Some(("NCCL_HARNESS_HOME_NCCL_CONF", v.clone())),
                "NCCL_CONF_FILE" | "NCCL_TOPO_FILE" => Some((*k, node_path(v))),
                _ if k.starts_with("NCCL_") => Some((*k, v.clone())),
                _ => None,
            })
            .collect();
        let smi = fs::read_to_string(self.root.join("nvidia-smi")).unwrap_or_default();
        // NVLink where the tree's `topo -m` has NV cells (Tree::nvswitch,
        // Tree::volta's joined pair): the harness's NVSwitch joins them;
        // not where Tree::nvlink lists its pairs (the harness's --nvlink).
        let nvswitch = smi.contains("\ntopo)")
            && smi.contains("\tNV")
            && !self.root.join("nvlink-gpus").exists();
        let (compared, differ) = oracle::judge(
            self,
            out,
            &nccl_env,
            nvswitch,
            &self.root.display().to_string(),
        );
        assert!(
            differ.is_empty(),
            "NCCL's own code judges this tree otherwise:\n{}",
            differ.join("\n")
        );
        // NVPM_NCCL_ORACLE names a file that counts what was judged.
        if let Some(log) = std::env::var_os("NVPM_NCCL_ORACLE") {
            use std::io::Write;
            let mut f = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap();
            writeln!(f, "{} {compared}", self.root.display()).unwrap();
        }
    }
}

impl Drop for Tree {
    /// Removes the tree, unless `NVPM_KEEP_TREES` is set (to run a
    /// harness or the check over it by hand).
    fn drop(&mut self) {
        if std::env::var_os("NVPM_KEEP_TREES").is_none() {
            let _ = fs::remove_dir_all(&self.root);
        }
    }
}

pub fn has_line(out: &str, words: &[&str]) -> bool {
    out.lines().any(|l| words.iter().all(|w| l.contains(w)))
}

pub fn assert_line(out: &str, words: &[&str]) {
    assert!(has_line(out, words), "no line with {words:?} in:\n{out}");
}

pub const GIB: u64 = 1 << 30;

pub fn path(p: &Path) -> String {
    p.display().to_string()
}

/// 8 GPUs and 8 NICs, two sockets, each GPU beside its NIC under one PCIe
/// switch (the layout of NVIDIA's DGX H100 reference: a switch per GPU and
/// NIC pair), MLNX_OFED with nv_peer_mem loaded, ACS off.
pub fn eight_by_eight(acs_ctl: u16) -> Tree {
    let t = Tree::new("8x8");
    for i in 0..8u32 {
        let (root, numa) = if i < 4 {
            ("pci0000:00", 0)
        } else {
            ("pci0000:80", 1)
        };
        let bus = if i < 4 { 0x00 } else { 0x80 };
        let rp = format!("{root}/0000:{bus:02x}:{:02x}.0", i % 4 + 1);
        let up = 0x10 * (i % 4 + 1) + bus;
        let usp = format!("{rp}/0000:{up:02x}:00.0");
        let dsp_gpu = format!("{usp}/0000:{:02x}:00.0", up + 1);
        let dsp_nic = format!("{usp}/0000:{:02x}:01.0", up + 1);
        t.bridge(&rp, 4, Some((0x5f, 0)), numa);
        t.bridge(&usp, 5, None, numa);
        t.bridge(&dsp_gpu, 6, Some((0x5f, acs_ctl)), numa);
        t.bridge(&dsp_nic, 6, Some((0x5f, 0)), numa);
        t.gpu(
            &format!("{dsp_gpu}/0000:{:02x}:00.0", up + 2),
            0x2330,
            numa,
            128 * GIB,
        );
        t.nic(
            &format!("{dsp_nic}/0000:{:02x}:00.0", up + 3),
            &format!("mlx5_{i}"),
            numa,
        );
    }
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    t
}

/// One GPU (H100, BAR1 128 GiB) and one NIC (mlx5_0) under one PCIe switch
/// below root port 00:01.0 (ACS on it as given, else none), the GPU-side
/// downstream port's ACS as @gpu_port_acs, the open 580 driver: the
/// layout the single-pair tests share; each adds its RDMA core.
pub fn one_switch(name: &str, gpu_port_acs: Option<(u16, u16)>) -> Tree {
    let t = Tree::new(name);
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    t.bridge("pci0000:00/0000:00:01.0/0000:01:00.0", 5, None, 0);
    t.bridge(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0",
        6,
        gpu_port_acs,
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
        0x2330,
        0,
        128 * GIB,
    );
    t.nic(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
        "mlx5_0",
        0,
    );
    t.nvidia_open_580();
    t
}

/// An Intel VMD domain holding the NIC (issue 57): the GPU on root port
/// 00:01.0 of socket 0; the VMD controller 00:0e.0 (8086:28c0, class
/// 0x010400) on the same host bridge opens domain 10000, its root bus
/// `pci10000:e0` below the controller's directory (drivers/pci/controller/
/// vmd.c, pci_create_root_bus under the VMD device), root port
/// 10000:e0:06.0 and mlx5_0 at 10000:e1:00.0, NUMA node 0 as the kernel
/// gives the domain its controller's node.
pub fn vmd_nic(name: &str) -> Tree {
    let t = Tree::new(name);
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0x2330, 0, 128 * GIB);
    t.pci(
        "pci0000:00/0000:00:0e.0",
        (0x8086, 0x28c0, 0x010400),
        0,
        &nic_resource(),
        &[0u8; 4096],
    );
    t.bind("pci0000:00/0000:00:0e.0", "vmd");
    let domain = "pci0000:00/0000:00:0e.0/pci10000:e0";
    t.bridge(&format!("{domain}/10000:e0:06.0"), 4, None, 0);
    t.nic(
        &format!("{domain}/10000:e0:06.0/10000:e1:00.0"),
        "mlx5_0",
        0,
    );
    t.nvidia_open_580();
    t
}

/// Issue 57's down ports: the GPU and mlx5_0 below one switch, mlx5_0's
/// only port in @state with its link in @phys; mlx5_1 ACTIVE on root port
/// 00:02.0 of the same host bridge (PHB from the GPU).
pub fn own_switch_nic_down(name: &str, state: &str, phys: &str) -> Tree {
    let t = one_switch(name, None);
    t.port_phys("mlx5_0", 1, state, phys, "InfiniBand");
    t.bridge("pci0000:00/0000:00:02.0", 4, None, 0);
    t.nic("pci0000:00/0000:00:02.0/0000:05:00.0", "mlx5_1", 0);
    t
}

/// A GPU behind a PCIe switch on root port 00:01.0 and mlx5_0 on root port
/// 00:02.0 of the same host bridge: PHB in sysfs. No driver, no RDMA core.
pub fn switch_and_root_port(name: &str) -> Tree {
    let t = Tree::new(name);
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    t.bridge("pci0000:00/0000:00:01.0/0000:01:00.0", 5, None, 0);
    t.bridge(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0",
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
    t.bridge("pci0000:00/0000:00:02.0", 4, None, 0);
    t.nic("pci0000:00/0000:00:02.0/0000:04:00.0", "mlx5_0", 0);
    t
}

/// PXN's node: GPU 10:00.0 on socket 0 with no NIC; GPU 92:00.0 and
/// mlx5_0 below one switch on socket 1 (SYS from the first GPU, PIX from
/// the second). No driver, no RDMA core, no NVLink (Tree::nvswitch adds it).
pub fn far_gpu_and_near_pair(name: &str) -> Tree {
    let t = Tree::new(name);
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    t.gpu("pci0000:00/0000:00:01.0/0000:10:00.0", 0x2330, 0, 128 * GIB);
    let rp = "pci0000:80/0000:80:01.0";
    t.bridge(rp, 4, None, 1);
    t.bridge(&format!("{rp}/0000:90:00.0"), 5, None, 1);
    t.bridge(&format!("{rp}/0000:90:00.0/0000:91:00.0"), 6, None, 1);
    t.bridge(&format!("{rp}/0000:90:00.0/0000:91:01.0"), 6, None, 1);
    t.gpu(
        &format!("{rp}/0000:90:00.0/0000:91:00.0/0000:92:00.0"),
        0x2330,
        1,
        128 * GIB,
    );
    t.nic(
        &format!("{rp}/0000:90:00.0/0000:91:01.0/0000:93:00.0"),
        "mlx5_0",
        1,
    );
    t
}

/// far_gpu_and_near_pair with NVLink bridges instead of NVSwitches
/// (@links NVLinks join the two GPUs, Tree::nvlink), a second NIC mlx5_1
/// on socket 0's root port 00:02.0 (PHB from the far GPU), and the
/// harness's CPU (Tree::cpuinfo): PXN's path against the GPU's own.
pub fn far_gpu_bridged(name: &str, links: u32) -> Tree {
    let t = far_gpu_and_near_pair(name);
    t.bridge("pci0000:00/0000:00:02.0", 4, None, 0);
    t.nic("pci0000:00/0000:00:02.0/0000:20:00.0", "mlx5_1", 0);
    t.cpuinfo("GenuineIntel", 6, 207);
    t.nvlink(&["0000:10:00.0", "0000:92:00.0"], &[(0, 1, links)]);
    t
}

/// Two switches on socket 0's root ports, each with a GPU and a NIC below
/// it (GPU 03:00.0 and mlx5_0; GPU 07:00.0 and mlx5_1), the GPUs joined by
/// four NVLinks: the tree for a topology file whose slow link (16 GT/s x16,
/// 24 GB/s: TOPO_FILE_SLOW_PAIR in nccl_oracle.rs) places GPU 07:00.0 and
/// mlx5_1, which makes NCCL relay it to mlx5_0 through GPU 03:00.0 (PXN,
/// 48 GB/s) though its own NIC is PIX (found by the generator, seed 190).
pub fn two_switches_nvlinked(name: &str) -> Tree {
    let t = Tree::new(name);
    t.cpuinfo("GenuineIntel", 6, 207);
    for (rp, usp, gpu, nic, name) in [
        ("0000:00:01.0", "01", "03", "04", "mlx5_0"),
        ("0000:00:02.0", "05", "07", "08", "mlx5_1"),
    ] {
        let rp = format!("pci0000:00/{rp}");
        t.bridge(&rp, 4, None, 0);
        let usp = format!("{rp}/0000:{usp}:00.0");
        t.bridge(&usp, 5, None, 0);
        let bus = u8::from_str_radix(&gpu[..2], 16).unwrap() - 1;
        for (dev, end) in [("00", gpu), ("01", nic)] {
            let dsp = format!("{usp}/0000:{bus:02x}:{dev}.0");
            t.bridge(&dsp, 6, None, 0);
            if end == gpu {
                t.gpu(&format!("{dsp}/0000:{end}:00.0"), 0x2330, 0, 128 * GIB);
            } else {
                t.nic(&format!("{dsp}/0000:{end}:00.0"), name, 0);
            }
        }
    }
    t.nvlink(&["0000:03:00.0", "0000:07:00.0"], &[(0, 1, 4)]);
    t
}

/// A GPU whose local CPU NCCL reaches over NVLink (found by the long
/// run, seed 53244): GPU 10:00.0 directly below socket 0's root port (one
/// hop to its CPU in NCCL's tree); GPU @gpu on socket 1 behind one switch
/// (two hops; 0000:92:00.0) or two (three; 0000:94:00.0), joined to it by
/// @links NVLinks and to GPU a7:00.0 by two, which shares a two-level PLX
/// switch with mlx5_0 (PXB). Where GPUDirect RDMA is off at the level,
/// NCCL diverts @gpu's relay through its local CPU: 2.28.9's (fewest
/// hops, the first CPU on a tie) is socket 0's, so SYS; 2.30.7's its own,
/// so PHB (nccl_local_net::local_cpu). @links None: NVSwitches join the
/// three GPUs instead (Tree::nvswitch), through which NCCL routes no
/// CPU's path: its own CPU in both releases.
pub fn local_cpu_over_nvlink(name: &str, gpu: &str, links: Option<u32>) -> Tree {
    let t = Tree::new(name);
    t.cpuinfo("GenuineIntel", 6, 207);
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    t.gpu("pci0000:00/0000:00:01.0/0000:10:00.0", 0x2330, 0, 128 * GIB);
    let rp = "pci0000:80/0000:80:01.0";
    t.bridge(rp, 4, None, 1);
    let mut at = format!("{rp}/0000:90:00.0");
    t.bridge(&at, 5, None, 1);
    at.push_str("/0000:91:00.0");
    t.bridge(&at, 6, None, 1);
    if gpu == "0000:94:00.0" {
        at.push_str("/0000:92:00.0");
        t.bridge(&at, 5, None, 1);
        at.push_str("/0000:93:00.0");
        t.bridge(&at, 6, None, 1);
    }
    t.gpu(&format!("{at}/{gpu}"), 0x2330, 1, 128 * GIB);
    let rp = "pci0000:80/0000:80:02.0";
    t.bridge(rp, 4, None, 1);
    let usp = format!("{rp}/0000:a0:00.0");
    t.bridge(&usp, 5, None, 1);
    for (dsp, usp2, dsp2) in [
        ("a1:00.0", "a2:00.0", "a3:00.0"),
        ("a1:01.0", "a5:00.0", "a6:00.0"),
    ] {
        t.bridge(&format!("{usp}/0000:{dsp}"), 6, None, 1);
        t.bridge(&format!("{usp}/0000:{dsp}/0000:{usp2}"), 5, None, 1);
        t.bridge(
            &format!("{usp}/0000:{dsp}/0000:{usp2}/0000:{dsp2}"),
            6,
            None,
            1,
        );
    }
    t.nic(
        &format!("{usp}/0000:a1:00.0/0000:a2:00.0/0000:a3:00.0/0000:a4:00.0"),
        "mlx5_0",
        1,
    );
    t.gpu(
        &format!("{usp}/0000:a1:01.0/0000:a5:00.0/0000:a6:00.0/0000:a7:00.0"),
        0x2330,
        1,
        128 * GIB,
    );
    let gpus = ["0000:10:00.0", gpu, "0000:a7:00.0"];
    match links {
        Some(links) => t.nvlink(&gpus, &[(0, 1, links), (1, 2, 2)]),
        None => t.nvswitch(&gpus),
    };
    t
}

/// `nvidia-smi topo -m` for @n GPUs that NVSwitches join, as the lent 4 x
/// H100 host printed it (tests/real/h100x4-vm): tab-separated, the header
/// underlined, NV18 between every pair.
fn nvswitch_topo(n: usize) -> String {
    topo_matrix(n, |_, _| "NV18".to_owned())
}

/// `nvidia-smi topo -m`'s GPU matrix in the lent 4 x H100 host's shape
/// (tab-separated, the header underlined, ` X ` on the diagonal), @cell
/// giving the others.
fn topo_matrix(n: usize, cell: impl Fn(usize, usize) -> String) -> String {
    let names: Vec<String> = (0..n).map(|i| format!("GPU{i}")).collect();
    let mut topo = format!(
        "\t\u{1b}[4m{}\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\u{1b}[0m\n",
        names.join("\t")
    );
    for (i, name) in names.iter().enumerate() {
        let cells: Vec<String> = (0..n)
            .map(|j| if i == j { " X ".to_owned() } else { cell(i, j) })
            .collect();
        topo.push_str(&format!("{name}\t{}\t0-63\t0\t\tN/A\n", cells.join("\t")));
    }
    topo.push_str(
        "\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n",
    );
    topo
}

/// The directory of tests/doubles/libcuda.c built as `libcuda.so.1`, once
/// per test process.
pub fn libcuda_double() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("libcuda-double");
            fs::create_dir_all(&dir).unwrap();
            let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/doubles/libcuda.c");
            // Test binaries run side by side: each builds its own and
            // renames it into place, whole.
            let own = dir.join(format!("libcuda.so.1.{}", std::process::id()));
            let status = Command::new("cc")
                .args(["-shared", "-fPIC", "-o"])
                .arg(&own)
                .arg(source)
                .status()
                .expect("cc, to build the libcuda double");
            assert!(status.success(), "cc failed on {source}");
            fs::rename(&own, dir.join("libcuda.so.1")).unwrap();
            dir
        })
        .clone()
}

/// A Grace Hopper-like node (GH200): an arm64 CPU (NUMA node 0); the GPU
/// (0x2342) on the root port of its own PCI domain 0009, mlx5_0 on that of
/// domain 0000: two host bridges of one CPU, NODE in sysfs. NCCL joins the
/// GPU to the CPU by C2C where NVML shows the links (Tree::grace), and the
/// NIC is then P2C from it. No driver, no RDMA core. @second: a second
/// GH200 on NUMA node 1 (GPU 0019:01:00.0), with mlx5_1 on domain 0010
/// when @second_nic.
pub fn grace_hopper(name: &str, second: bool, second_nic: bool) -> Tree {
    let t = Tree::new(name);
    t.arm64();
    t.bridge("pci0009:00/0009:00:00.0", 4, None, 0);
    t.gpu("pci0009:00/0009:00:00.0/0009:01:00.0", 0x2342, 0, 128 * GIB);
    t.bridge("pci0000:00/0000:00:00.0", 4, None, 0);
    t.nic("pci0000:00/0000:00:00.0/0000:01:00.0", "mlx5_0", 0);
    if second {
        t.bridge("pci0019:00/0019:00:00.0", 4, None, 1);
        t.gpu("pci0019:00/0019:00:00.0/0019:01:00.0", 0x2342, 1, 128 * GIB);
    }
    if second && second_nic {
        t.bridge("pci0010:00/0010:00:00.0", 4, None, 1);
        t.nic("pci0010:00/0010:00:00.0/0010:01:00.0", "mlx5_1", 1);
    }
    t
}

/// A Grace Blackwell-like node with a ConnectX-8's Data Direct function,
/// in the shape rdma-core's rdma_topo matches for one (kernel-boot/
/// rdma_topo, `__get_nvcx_complex`: a Grace root port, below it a ConnectX
/// switch whose downstream ports lead to the DMA function, 15b3:2100, and
/// to a second switch with the GPU; the adapter's PF elsewhere, paired
/// with the DMA function by the V3 UUID of their VPDs). Here: an arm64
/// CPU, the GPU (0x2941) at 0009:06:00.0 below the two switches of root
/// port 0009:00:00.0, the DMA function at 0009:03:00.0 with mlx5_ib bound,
/// mlx5_0 (its PF) on root port 0000:00:00.0 of the same CPU. The ports'
/// ids are the tests' generic ones and the DMA function's class an
/// InfiniBand controller's: neither source gives them, and neither the
/// check nor NCCL reads them. The kernel's answer for mlx5_0's Data Direct
/// path is listed in `data-direct` beside the tree, for the oracle (the
/// harness's `--data-direct`).
pub fn grace_blackwell_data_direct(name: &str) -> Tree {
    let t = Tree::new(name);
    t.arm64();
    let rp = "pci0009:00/0009:00:00.0";
    t.bridge(rp, 4, None, 0);
    let usp = format!("{rp}/0009:01:00.0");
    t.bridge(&usp, 5, None, 0);
    t.bridge(&format!("{usp}/0009:02:00.0"), 6, None, 0);
    t.bridge(&format!("{usp}/0009:02:01.0"), 6, None, 0);
    let usp2 = format!("{usp}/0009:02:01.0/0009:04:00.0");
    t.bridge(&usp2, 5, None, 0);
    t.bridge(&format!("{usp2}/0009:05:00.0"), 6, None, 0);
    t.gpu(
        &format!("{usp2}/0009:05:00.0/0009:06:00.0"),
        0x2941,
        0,
        128 * GIB,
    );
    let dma = format!("{usp}/0009:02:00.0/0009:03:00.0");
    t.pci(
        &dma,
        (0x15b3, 0x2100, 0x020700),
        0,
        &nic_resource(),
        &[0u8; 4096],
    );
    fs::create_dir_all(t.sys().join("bus/pci/drivers/mlx5_ib")).unwrap();
    let up = "../".repeat(dma.split('/').count() + 1);
    symlink(
        format!("{up}bus/pci/drivers/mlx5_ib"),
        t.sys().join("devices").join(&dma).join("driver"),
    )
    .unwrap();
    t.bridge("pci0000:00/0000:00:00.0", 4, None, 0);
    let pf = "pci0000:00/0000:00:00.0/0000:01:00.0";
    t.nic(pf, "mlx5_0", 0);
    let uuid = "3b2c0a0e5d7f4c1a9e0b6d2f1a3c5e7b";
    t.write(&format!("sys/devices/{dma}/vpd"), vpd_with_v3(uuid));
    t.write(&format!("sys/devices/{pf}/vpd"), vpd_with_v3(uuid));
    t.write("data-direct", format!("mlx5_0 /devices/{dma}\n"));
    t
}

/// A VPD as PCI 3.0 section 6.4 lays it out: the identifier string, the
/// read-only section (PN, SN, V3, RV), the end tag.
pub fn vpd_with_v3(v3: &str) -> Vec<u8> {
    let mut ro = Vec::new();
    for (k, v) in [
        ("PN", "900-9X81E-00EX-ST0"),
        ("SN", "MT2420X00000"),
        ("V3", v3),
    ] {
        ro.extend_from_slice(k.as_bytes());
        ro.push(v.len() as u8);
        ro.extend_from_slice(v.as_bytes());
    }
    ro.extend_from_slice(b"RV\x01\x00");
    let name = b"NVIDIA ConnectX-8 SuperNIC";
    let mut out = vec![0x82, name.len() as u8, 0];
    out.extend_from_slice(name);
    out.push(0x90);
    out.extend_from_slice(&(ro.len() as u16).to_le_bytes());
    out.extend_from_slice(&ro);
    out.push(0x78);
    out
}

/// Two V100s (0x1db1, compute capability 7.0): 03:00.0 and mlx5_0 below
/// one switch on root port 00:01.0 (PIX), 05:00.0 on root port 00:02.0.
/// No driver, no RDMA core; Tree::volta adds nvidia-smi's answers.
pub fn two_voltas(name: &str) -> Tree {
    let t = Tree::new(name);
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    let usp = "pci0000:00/0000:00:01.0/0000:01:00.0";
    t.bridge(usp, 5, None, 0);
    t.bridge(&format!("{usp}/0000:02:00.0"), 6, None, 0);
    t.bridge(&format!("{usp}/0000:02:01.0"), 6, None, 0);
    t.gpu(
        &format!("{usp}/0000:02:00.0/0000:03:00.0"),
        0x1db1,
        0,
        32 * GIB,
    );
    t.nic(&format!("{usp}/0000:02:01.0/0000:04:00.0"), "mlx5_0", 0);
    t.bridge("pci0000:00/0000:00:02.0", 4, None, 0);
    t.gpu("pci0000:00/0000:00:02.0/0000:05:00.0", 0x1db1, 0, 32 * GIB);
    t
}
