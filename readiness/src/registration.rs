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
}

/// Why DMA-BUF cannot serve, or None when it can.
pub fn dmabuf_blocker(f: &Facts) -> Option<String> {
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
    if let Some((address, _)) = f.gpus.iter().find(|(_, bound)| !bound) {
        return Some(format!(
            "the NVIDIA driver does not drive GPU {address} (the open module drives only Turing and newer GPUs; its kernel log line says why it refused one)"
        ));
    }
    None
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

/// The kernel symbols the path decision reads from /proc/kallsyms.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct KernelSymbols {
    peer_core: bool,
    dmabuf: bool,
}

/// How often /proc/kallsyms is read before a symbol counts as absent.
const KALLSYMS_READS: usize = 3;

/// The symbols found in any of up to `KALLSYMS_READS` reads of kallsyms
/// (`read` reads it once). One read can miss a module's lines while
/// another module finishes loading (docs/diagnostics.md, "Reading
/// /proc/kallsyms"); the race never invents a line, so what one read
/// shows is there, and only what every read lacks is absent.
fn kernel_symbols(
    mut read: impl FnMut() -> Result<String, Unreadable>,
) -> Result<KernelSymbols, Unreadable> {
    let mut found = KernelSymbols::default();
    for _ in 0..KALLSYMS_READS {
        for line in read()?.lines() {
            // `<address> <type> <name>[\t[<module>]]`; the names are there
            // for every reader (only the addresses are hidden from non-root).
            match line.split_whitespace().nth(2).unwrap_or("") {
                "ib_register_peer_memory_client" => found.peer_core = true,
                "ib_umem_dmabuf_get" => found.dmabuf = true,
                _ => {}
            }
        }
        if found.peer_core && found.dmabuf {
            break;
        }
    }
    Ok(found)
}

/// Reads the facts that come from the kernel (the driver and GPUs are
/// read by their own modules and passed in).
pub fn read(
    host: &Host,
    driver: Option<Driver>,
    gpus: Vec<(String, bool)>,
) -> Result<Facts, Unreadable> {
    let kallsyms = host.proc_path("kallsyms");
    let symbols = kernel_symbols(|| Host::text(&kallsyms))?;
    let (peer_core, kernel_dmabuf) = (symbols.peer_core, symbols.dmabuf);
    let module = |name: &str| Host::exists(&host.sys_path(&format!("module/{name}")));
    Ok(Facts {
        nv_peer_mem_loaded: module("nv_peer_mem"),
        nvidia_peermem_loaded: module("nvidia_peermem"),
        peer_core: peer_core || Host::exists(&host.sys_path("kernel/mm/memory_peers")),
        // a built-in ib_uverbs has no /sys/module entry without
        // parameters; its symbols are in kallsyms all the same
        uverbs_loaded: module("ib_uverbs") || kernel_dmabuf,
        kernel_dmabuf,
        driver,
        gpus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads that return `texts` in turn, counting them.
    fn reads<'a>(
        texts: &'a [&'a str],
        count: &'a mut usize,
    ) -> impl FnMut() -> Result<String, Unreadable> + 'a {
        move || {
            let text = texts[(*count).min(texts.len() - 1)];
            *count += 1;
            Ok(text.to_owned())
        }
    }

    #[test]
    fn kallsyms_read_that_raced_a_module_load_is_read_again() {
        let raced = "ffffffffc0a01000 T ib_register_client\t[ib_core]";
        let whole = "ffffffffc0a01000 T ib_register_client\t[ib_core]\n\
                     ffffffffc0a02000 T ib_register_peer_memory_client\t[ib_core]\n\
                     ffffffffc0b01000 T ib_umem_dmabuf_get\t[ib_uverbs]";
        let mut count = 0;
        let found = kernel_symbols(reads(&[raced, whole], &mut count)).unwrap();
        assert_eq!(
            found,
            KernelSymbols {
                peer_core: true,
                dmabuf: true
            }
        );
        assert_eq!(count, 2, "stops reading once both symbols are seen");
    }

    #[test]
    fn kallsyms_symbol_absent_only_when_every_read_lacks_it() {
        let inbox = "ffffffffc0a01000 T ib_register_client\t[ib_core]\n\
                     ffffffffc0b01000 T ib_umem_dmabuf_get\t[ib_uverbs]";
        let mut count = 0;
        let found = kernel_symbols(reads(&[inbox], &mut count)).unwrap();
        assert_eq!(
            found,
            KernelSymbols {
                peer_core: false,
                dmabuf: true
            }
        );
        assert_eq!(count, KALLSYMS_READS);
    }

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
        }
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
                    gpus: vec![
                        ("0000:00:06.0".into(), true),
                        ("0000:00:07.0".into(), false),
                    ],
                    ..facts()
                },
                "does not drive GPU 0000:00:07.0",
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
