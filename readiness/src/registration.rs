//! Which path serves GPU memory registration for RDMA on this node: a peer
//! memory client (nv_peer_mem, nvidia_peermem) through MLNX_OFED's
//! PeerDirect core, DMA-BUF through the kernel's own RDMA core, or none
//! (docs/diagnostics.md, "gpudirect-rdma-check: where each fact comes from" and "DMA-BUF").

use crate::host::{Host, Unreadable};
use crate::nvidia::{Driver, Flavour};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    NvPeerMem,
    NvidiaPeermem,
    DmaBuf,
    None,
}

impl Path {
    pub fn name(self) -> &'static str {
        match self {
            Path::NvPeerMem => "nv_peer_mem",
            Path::NvidiaPeermem => "nvidia_peermem",
            Path::DmaBuf => "dmabuf",
            Path::None => "none",
        }
    }

    pub const ALL: [Path; 4] = [
        Path::NvPeerMem,
        Path::NvidiaPeermem,
        Path::DmaBuf,
        Path::None,
    ];
}

/// What the decision is made of, each read from this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub nv_peer_mem_loaded: bool,
    pub nvidia_peermem_loaded: bool,
    /// MLNX_OFED's PeerDirect core: ib_core exports
    /// ib_register_peer_memory_client.
    pub peer_core: bool,
    /// ib_uverbs is loaded: user-space RDMA and, in it, the DMA-BUF import.
    pub uverbs_loaded: bool,
    /// The RDMA core can import DMA-BUF: ib_uverbs exports
    /// ib_umem_dmabuf_get (Linux 5.12 and newer).
    pub kernel_dmabuf: bool,
    pub driver: Option<Driver>,
    /// For every NVIDIA GPU (address), whether the NVIDIA driver drives it.
    pub gpus: Vec<(String, bool)>,
    /// An RDMA device backed by a PCI function is there.
    pub rdma_device: bool,
    /// The user-space verbs library: None where none is installed, else
    /// whether it has ibv_reg_dmabuf_mr.
    pub verbs: Option<Verbs>,
}

/// libibverbs as installed: its file name's version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verbs {
    /// `/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0`
    pub file: String,
    /// The ABI minor (14): ibv_reg_dmabuf_mr is in IBVERBS_1.12 and later.
    pub minor: u32,
}

impl Verbs {
    pub fn has_dmabuf(&self) -> bool {
        self.minor >= VERBS_DMABUF_MINOR
    }
}

/// rdma-core's libibverbs.map.in puts ibv_reg_dmabuf_mr in IBVERBS_1.12
/// (rdma-core v34); the library's file is libibverbs.so.1.<ABI
/// minor>.<package version> (libibverbs/CMakeLists.txt, rdma_library).
const VERBS_DMABUF_MINOR: u32 = 12;

/// Where distributions install libibverbs.so.1: Debian and Ubuntu by
/// multiarch triplet, RHEL, SUSE and Fedora in lib64.
const VERBS_LINKS: [&str; 6] = [
    "usr/lib/x86_64-linux-gnu/libibverbs.so.1",
    "usr/lib/aarch64-linux-gnu/libibverbs.so.1",
    "usr/lib/powerpc64le-linux-gnu/libibverbs.so.1",
    "usr/lib64/libibverbs.so.1",
    "lib64/libibverbs.so.1",
    "usr/lib/libibverbs.so.1",
];

/// The installed libibverbs, from where its soname link points (one
/// readlink per place, no library loaded).
pub fn verbs_library(host: &Host) -> Option<Verbs> {
    VERBS_LINKS.iter().find_map(|link| {
        let path = host.root_path(link);
        let target = host.link_target(&path).ok()?;
        let name = target.file_name()?.to_string_lossy().into_owned();
        let minor = name
            .strip_prefix("libibverbs.so.1.")?
            .split('.')
            .next()?
            .parse()
            .ok()?;
        Some(Verbs {
            file: format!("/{}", link.rsplit_once('/').map_or("", |(d, _)| d)) + "/" + &name,
            minor,
        })
    })
}

/// Why DMA-BUF cannot serve, or None when it can: for the GPUs the NVIDIA
/// driver drives (a GPU bound to another driver, vfio-pci for a VM, is not
/// this host's to register and blocks nothing: its own fact says so).
pub fn dmabuf_blocker(f: &Facts) -> Option<String> {
    if !f.rdma_device {
        return Some("no RDMA device to register GPU memory with".to_owned());
    }
    if !f.kernel_dmabuf {
        return Some(if f.uverbs_loaded {
            "the kernel's RDMA core cannot import DMA-BUF (ib_uverbs exports no ib_umem_dmabuf_get; Linux 5.12 or newer has it)".to_owned()
        } else {
            "ib_uverbs (user-space RDMA, with the DMA-BUF import) is not loaded: modprobe ib_uverbs"
                .to_owned()
        });
    }
    let Some(driver) = &f.driver else {
        return Some("the NVIDIA driver is not loaded".to_owned());
    };
    // Every open kernel module is of the 515 series or newer, the first with
    // the open flavour and CUDA 11.7, so the flavour alone decides.
    if driver.flavour != Flavour::Open {
        return Some(format!(
            "the NVIDIA driver {} is the proprietary kernel module; DMA-BUF needs the open kernel module",
            driver.version
        ));
    }
    if f.gpus.is_empty() {
        return Some("no NVIDIA GPU".to_owned());
    }
    if !f.gpus.iter().any(|(_, bound)| *bound) {
        return Some(
            "the NVIDIA driver drives none of the GPUs (the open module drives only Turing and newer GPUs; its kernel log line says why it refused one)"
                .to_owned(),
        );
    }
    match &f.verbs {
        None => Some(
            "no user-space verbs library (libibverbs.so.1, rdma-core's ibverbs-providers/libibverbs1): applications cannot register any memory".to_owned(),
        ),
        Some(v) if !v.has_dmabuf() => Some(format!(
            "{} has no ibv_reg_dmabuf_mr (rdma-core 34, libibverbs.so.1.12, and newer have it): upgrade rdma-core or MLNX_OFED",
            v.file
        )),
        Some(_) => None,
    }
}

/// The path that serves: a loaded peer client above the PeerDirect core
/// first (it is what MLNX_OFED's ib_core asks), then DMA-BUF.
pub fn serving(f: &Facts) -> Path {
    if f.driver.is_none() {
        // every path hands out the driver's memory
        Path::None
    } else if f.peer_core && f.nv_peer_mem_loaded {
        Path::NvPeerMem
    } else if f.peer_core && f.nvidia_peermem_loaded {
        Path::NvidiaPeermem
    } else if dmabuf_blocker(f).is_none() {
        Path::DmaBuf
    } else {
        Path::None
    }
}

/// The kernel release `6.12.43+deb13-amd64` as (major, minor).
pub fn release_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// A module whose `taint` holds `O` was built out of the kernel's tree
/// (kernel/module/main.c sets TAINT_OOT_MODULE for a module without
/// `intree` in its modinfo; Documentation/admin-guide/tainted-kernels.rst):
/// MLNX_OFED's and DOCA-OFED's ib_core and ib_uverbs are, the kernel's own
/// are not.
fn out_of_tree(host: &Host, module: &str) -> bool {
    host.text(&host.sys_path(&format!("module/{module}/taint")))
        .is_ok_and(|t| t.contains('O'))
}

/// What depmod's modules.symbols of the running kernel says of a symbol.
#[derive(Debug, PartialEq, Eq)]
enum Exporter {
    /// `alias symbol:NAME MODULE`: this module exports it.
    Module(String),
    /// The file lists no module for it.
    None,
    /// No modules.symbols for the running kernel (a container, an
    /// initramfs without depmod's files): the rule falls back.
    Unknown,
}

/// The module modules.symbols names as exporting @symbol. Only the lines
/// naming the two symbols the decision needs are kept (and dumped).
fn exporter(host: &Host, release: &str, symbol: &str) -> Result<Exporter, Unreadable> {
    let path = host.root_path(&format!("lib/modules/{release}/modules.symbols"));
    if !host.exists(&path) {
        return Ok(Exporter::Unknown);
    }
    let lines = host.lines_with(&path, &SYMBOLS)?;
    let named = lines.iter().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some("alias") && w.next() == Some(&format!("symbol:{symbol}")))
            .then(|| w.next().map(str::to_owned))
            .flatten()
    });
    Ok(named.map_or(Exporter::None, Exporter::Module))
}

/// The exports the path decision looks up in modules.symbols.
const SYMBOLS: [&str; 2] = [
    "symbol:ib_register_peer_memory_client ",
    "symbol:ib_umem_dmabuf_get ",
];

/// Whether MLNX_OFED's PeerDirect core runs here, decided as `read`
/// decides it (false where that cannot be read), without the PCI walk and
/// the rest of the check: what `--next-boot` needs of the running node.
pub fn peer_core_running(host: &Host) -> bool {
    read(host, None, Vec::new(), false, None).is_ok_and(|f| f.peer_core)
}

/// Reads the facts that come from the kernel (the driver and GPUs are
/// read by their own modules and passed in), from sysfs and, only on a
/// node with an out-of-tree RDMA core or a kernel older than 5.12, the
/// running kernel's modules.symbols: never /proc/kallsyms, whose read
/// costs tens of milliseconds on a current kernel (docs/readiness.md,
/// "Which files decide the path").
pub fn read(
    host: &Host,
    driver: Option<Driver>,
    gpus: Vec<(String, bool)>,
    rdma_device: bool,
    verbs: Option<Verbs>,
) -> Result<Facts, Unreadable> {
    let module = |name: &str| host.exists(&host.sys_path(&format!("module/{name}")));
    let release_path = host.proc_path("sys/kernel/osrelease");
    let release = host.text(&release_path)?.trim().to_owned();
    let version = release_version(&release).ok_or_else(|| {
        Unreadable::new(
            &host.shown(&release_path),
            format!("`{release}` is not a kernel release"),
        )
    })?;
    // MLNX_OFED's core: its sysfs directory (kernels that export mm_kobj),
    // or the module modules.symbols names as exporting the peer API,
    // loaded and out of tree (an installed MLNX_OFED whose ib_core is not
    // loaded yet leaves the kernel's own, in-tree ib_core running);
    // without modules.symbols, a loaded out-of-tree ib_core.
    let memory_peers = host.exists(&host.sys_path("kernel/mm/memory_peers"));
    let peer_core = memory_peers
        || match exporter(host, &release, "ib_register_peer_memory_client")? {
            Exporter::Module(m) => module(&m) && out_of_tree(host, &m),
            Exporter::None => false,
            Exporter::Unknown => module("ib_core") && out_of_tree(host, "ib_core"),
        };
    // ib_uverbs, built in or a module, owns the infiniband_verbs class.
    let uverbs_loaded =
        module("ib_uverbs") || host.exists(&host.sys_path("class/infiniband_verbs/abi_version"));
    // The kernel's own ib_uverbs has ib_umem_dmabuf_get from 5.12
    // (drivers/infiniband/core/umem_dmabuf.c, in ib_uverbs since v5.12);
    // an out-of-tree one, or an older kernel with a backport (RHEL 8),
    // has it when modules.symbols says it exports it.
    let kernel_dmabuf = uverbs_loaded
        && if version >= (5, 12) && !out_of_tree(host, "ib_uverbs") {
            true
        } else {
            match exporter(host, &release, "ib_umem_dmabuf_get")? {
                Exporter::Module(_) => true,
                Exporter::None => false,
                Exporter::Unknown => version >= (5, 12),
            }
        };
    Ok(Facts {
        nv_peer_mem_loaded: module("nv_peer_mem"),
        nvidia_peermem_loaded: module("nvidia_peermem"),
        peer_core,
        uverbs_loaded,
        kernel_dmabuf,
        driver,
        gpus,
        rdma_device,
        verbs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(version: &str) -> Option<Driver> {
        Some(Driver {
            flavour: Flavour::Open,
            version: version.to_owned(),
        })
    }

    fn facts() -> Facts {
        Facts {
            nv_peer_mem_loaded: false,
            nvidia_peermem_loaded: false,
            peer_core: false,
            uverbs_loaded: true,
            kernel_dmabuf: true,
            driver: open("580.159.04"),
            gpus: vec![("0000:00:06.0".to_owned(), true)],
            rdma_device: true,
            verbs: Some(Verbs {
                file: "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0".into(),
                minor: 14,
            }),
        }
    }

    #[test]
    fn a_gpu_passed_to_a_vm_leaves_dmabuf_to_the_others() {
        let f = Facts {
            gpus: vec![
                ("0000:00:06.0".into(), true),
                ("0000:00:07.0".into(), false),
            ],
            ..facts()
        };
        assert_eq!(dmabuf_blocker(&f), None);
    }

    #[test]
    fn kernel_releases_parse() {
        assert_eq!(release_version("6.12.43+deb13-amd64"), Some((6, 12)));
        assert_eq!(release_version("4.18.0-553.el8_10.x86_64"), Some((4, 18)));
        assert_eq!(release_version("6.18.44-fc-v769"), Some((6, 18)));
        assert_eq!(release_version("x"), None);
    }

    #[test]
    fn the_probed_h100_host_registers_through_dmabuf() {
        assert_eq!(serving(&facts()), Path::DmaBuf);
    }

    #[test]
    fn a_loaded_client_above_the_peer_core_serves_first() {
        let f = Facts {
            peer_core: true,
            nv_peer_mem_loaded: true,
            ..facts()
        };
        assert_eq!(serving(&f), Path::NvPeerMem);
        let f = Facts {
            peer_core: true,
            nvidia_peermem_loaded: true,
            ..facts()
        };
        assert_eq!(serving(&f), Path::NvidiaPeermem);
        // a client without the driver or the core registers nothing
        let f = Facts {
            peer_core: true,
            nv_peer_mem_loaded: true,
            driver: None,
            ..facts()
        };
        assert_eq!(serving(&f), Path::None);
        let f = Facts {
            nv_peer_mem_loaded: true,
            kernel_dmabuf: false,
            ..facts()
        };
        assert_eq!(serving(&f), Path::None);
    }

    #[test]
    fn each_dmabuf_condition_blocks_it() {
        for (f, why) in [
            (
                Facts {
                    kernel_dmabuf: false,
                    ..facts()
                },
                "ib_umem_dmabuf_get",
            ),
            (
                Facts {
                    uverbs_loaded: false,
                    kernel_dmabuf: false,
                    ..facts()
                },
                "modprobe ib_uverbs",
            ),
            (
                Facts {
                    driver: None,
                    ..facts()
                },
                "not loaded",
            ),
            (
                Facts {
                    driver: Some(Driver {
                        flavour: Flavour::Proprietary,
                        version: "580.159.04".into(),
                    }),
                    ..facts()
                },
                "proprietary",
            ),
            (
                Facts {
                    gpus: vec![("0000:00:07.0".into(), false)],
                    ..facts()
                },
                "drives none of the GPUs",
            ),
            (
                Facts {
                    rdma_device: false,
                    ..facts()
                },
                "no RDMA device",
            ),
            (
                Facts {
                    verbs: None,
                    ..facts()
                },
                "no user-space verbs library",
            ),
            (
                Facts {
                    verbs: Some(Verbs {
                        file: "/usr/lib64/libibverbs.so.1.11.32.0".into(),
                        minor: 11,
                    }),
                    ..facts()
                },
                "has no ibv_reg_dmabuf_mr",
            ),
            (
                Facts {
                    gpus: vec![],
                    ..facts()
                },
                "no NVIDIA GPU",
            ),
        ] {
            let blocker = dmabuf_blocker(&f).unwrap();
            assert!(blocker.contains(why), "{blocker}");
            assert_eq!(serving(&f), Path::None);
        }
    }
}
