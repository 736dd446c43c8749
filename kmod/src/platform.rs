//! What the module's logic needs from its surroundings: the NVIDIA P2P API,
//! the PeerDirect core, sg tables, memory, module references and logging.
//!
//! In the kernel, `kernel.rs` implements this with calls into the C glue; in
//! host tests, test doubles implement it. Handles (page tables, dma
//! mappings, sg tables, PCI devices) are opaque pointers the logic only
//! passes back; it never dereferences them.

use crate::errno::Errno;
use core::ffi::c_void;
use core::sync::atomic::AtomicPtr;

/// The two peer memory clients the module can register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ClientKind {
    /// The invalidating client (always named `nv_mem`): pages pinned with
    /// `nvidia_p2p_get_pages` and a free callback; the IB core is told
    /// through its invalidate callback when the GPU memory goes away.
    Mem = 0,
    /// The persistent client (`nv_mem` by default, `nv_mem_nc` next to the
    /// invalidating one; see `params::Clients`): persistent pages
    /// (`nvidia_p2p_get_pages_persistent`), no free callback, no
    /// invalidation.
    Nc = 1,
}

/// How `nv_mem` announces itself to the PeerDirect core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum RegistrationStyle {
    /// MLNX_OFED >= 5.1: `peer_memory_client_ex` (version byte 1, ex_size)
    /// with `PEER_MEM_INVALIDATE_UNMAPS`: after the core's invalidate
    /// callback returns, the client unmaps by itself; the core calls neither
    /// dma_unmap nor put_pages for an invalidated registration.
    InvalidateUnmaps = 0,
    /// MLNX_OFED 4.9 LTS / 5.0: plain `peer_memory_client`; the core calls
    /// dma_unmap and put_pages from inside its invalidate callback.
    Legacy = 1,
}

/// Which NVIDIA free callback a `get_pages` call installs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum FreeCallback {
    /// `acquire`'s probe: pages are put back at once; the callback ignores
    /// its data.
    Probe = 0,
    /// A live registration: the callback invalidates it (see
    /// `Driver::free_callback`).
    Invalidate = 1,
}

/// printk levels the logic uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Level {
    Error = 0,
    /// Printed only with `enable_dbg=1`.
    Debug = 1,
}

/// Who made `/sys/kernel/mm/memory_peers/<client>/`, the directory NCCL,
/// UCX and NVSHMEM test for (docs/contracts.md, "memory_peers without
/// mm_kobj").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum PeerFiles {
    /// MLNX_OFED's PeerDirect core, with its own counters: kernels that
    /// export `mm_kobj`. The module adds nothing.
    Core = 1,
    /// This module, with its own counters ([`crate::peer_stats`]): the
    /// core made none.
    Module = 2,
}

/// `enum nvidia_p2p_page_size_type` value of 64 KiB pages.
pub const NVIDIA_P2P_PAGE_SIZE_64KB: u32 = 1;
/// `NVIDIA_P2P_DMA_MAPPING_VERSION` of the driver ABI the module is written
/// for (535; unchanged through 595); a mapping is compatible when
/// [`version_compatible`] says so.
pub const NVIDIA_P2P_DMA_MAPPING_VERSION: u32 = 0x0002_0003;

/// nv-p2p.h's `NVIDIA_P2P_VERSION_COMPATIBLE(p, v)`: a structure of version
/// @found can be read by code built for version @built when the major
/// versions (high 16 bits) are equal and @found's minor version is the same
/// or newer. The header defines one rule for every versioned structure
/// (page table, dma mapping, rsync info); docs/contracts.md, "Versioned
/// structures".
pub fn version_compatible(found: u32, built: u32) -> bool {
    found >> 16 == built >> 16 && (found & 0xffff) >= (built & 0xffff)
}

/// Whether a `nvidia_p2p_dma_mapping` version is one this module can read.
pub fn dma_mapping_version_compatible(version: u32) -> bool {
    version_compatible(version, NVIDIA_P2P_DMA_MAPPING_VERSION)
}

/// A copy of the `struct sg_table` the module filled in `dma_map`, kept so
/// `release` can free the table even after the core's copy is gone (the
/// original module did the same). Sized generously: `struct sg_table` is
/// three words or less on every supported kernel, which the glue checks at
/// compile time.
#[repr(C, align(8))]
#[derive(Default)]
pub struct SavedSgTable(pub [u64; 4]);

/// The module's surroundings. All methods take `&self`: the kernel
/// implementation is stateless (state lives in the glue's statics) and test
/// doubles use interior mutability.
pub trait Platform {
    /// `nvidia_p2p_get_pages(0, 0, va, len, slot, callback, data)`. The
    /// driver writes the page table through `slot` before it can call the
    /// free callback, so the callback always finds it.
    fn p2p_get_pages(
        &self,
        va: u64,
        len: u64,
        slot: &AtomicPtr<c_void>,
        callback: FreeCallback,
        data: *mut c_void,
    ) -> Result<(), Errno>;
    /// `nvidia_p2p_put_pages(0, 0, va, page_table)`.
    fn p2p_put_pages(&self, va: u64, page_table: *mut c_void) -> Result<(), Errno>;
    /// `nvidia_p2p_get_pages_persistent(va, len, slot, 0)`.
    fn p2p_get_pages_persistent(
        &self,
        va: u64,
        len: u64,
        slot: &AtomicPtr<c_void>,
    ) -> Result<(), Errno>;
    /// `nvidia_p2p_put_pages_persistent(va, page_table, 0)`.
    fn p2p_put_pages_persistent(&self, va: u64, page_table: *mut c_void) -> Result<(), Errno>;
    /// `page_table->page_size` (an `enum nvidia_p2p_page_size_type`).
    fn page_table_page_size(&self, page_table: *mut c_void) -> u32;
    /// `page_table->version`, and the `NVIDIA_P2P_PAGE_TABLE_VERSION` of the
    /// nv-p2p.h the module was built against: (found, built). The layout
    /// changed at 580 (0x00010002 -> 0x00020000, `flags` appended), so
    /// the version a build can read is the header's, not a constant here.
    fn page_table_version(&self, page_table: *mut c_void) -> (u32, u32);
    /// `nvidia_p2p_dma_map_pages(pci_dev, page_table, &mapping)`.
    fn p2p_dma_map(
        &self,
        pci_dev: *mut c_void,
        page_table: *mut c_void,
    ) -> Result<*mut c_void, Errno>;
    /// `nvidia_p2p_dma_unmap_pages(pci_dev, page_table, mapping)`.
    fn p2p_dma_unmap(
        &self,
        pci_dev: *mut c_void,
        page_table: *mut c_void,
        mapping: *mut c_void,
    ) -> Result<(), Errno>;
    /// `mapping->version`.
    fn dma_mapping_version(&self, mapping: *mut c_void) -> u32;
    /// `nvidia_p2p_free_dma_mapping(mapping)`.
    fn p2p_free_dma_mapping(&self, mapping: *mut c_void) -> Result<(), Errno>;
    /// `nvidia_p2p_free_page_table(page_table)`.
    fn p2p_free_page_table(&self, page_table: *mut c_void) -> Result<(), Errno>;

    /// Allocates `sg_head` with one entry per page of `mapping`, each
    /// `page_size` long at the mapping's dma address, copies the table to
    /// `saved`, and returns the number of entries. On error `sg_head` is
    /// left untouched.
    fn sg_fill(
        &self,
        sg_head: *mut c_void,
        mapping: *mut c_void,
        page_size: u64,
        saved: *mut SavedSgTable,
    ) -> Result<u32, Errno>;
    /// Whether `sg_head` holds the same table as `saved`.
    fn sg_matches(&self, sg_head: *mut c_void, saved: *const SavedSgTable) -> bool;
    /// `sg_free_table(table)`; `table` is the core's `sg_head` or a
    /// [`SavedSgTable`].
    fn sg_free(&self, table: *mut c_void);

    /// Calls the PeerDirect core's invalidate callback for `nv_mem`'s
    /// registration with the core context `get_pages` was given.
    fn invalidate(&self, core_context: u64);
    /// Registers one client with the PeerDirect core under `name`
    /// (`peer_memory_client.name`; at most 63 bytes). `style` applies to
    /// `Mem` only: `Nc` is always a plain client.
    fn register(
        &self,
        kind: ClientKind,
        style: RegistrationStyle,
        name: &'static str,
    ) -> Result<(), Errno>;
    /// Unregisters one client.
    fn unregister(&self, kind: ClientKind);
    /// Makes `/sys/kernel/mm/memory_peers/<name>/` (version and counters)
    /// for each client in @kinds (a bit per [`ClientKind`]) where the core
    /// made none; leaves the core's alone. On error nothing of it is left.
    fn create_peer_files(&self, kinds: u8) -> Result<PeerFiles, Errno>;
    /// Removes what `create_peer_files` made, if it made anything.
    fn remove_peer_files(&self);

    /// Takes the registry lock, a spinlock: the context registry's chains
    /// (registry.rs) change and are walked only under it.
    fn registry_lock(&self);
    fn registry_unlock(&self);
    /// The client lock of MLNX_OFED's peer_mem.c contract (its comment
    /// above `ib_peer_unmap_on_invalidate`): serialises the free callback's
    /// takeover of a registration with `dma_map`'s publication and with
    /// `dma_unmap`/`put_pages`. Never held across a call into the core or
    /// into a driver call that takes the driver's own lock (see
    /// docs/contracts.md). A sleeping lock: process context only.
    fn client_lock(&self);
    fn client_unlock(&self);
    /// An identity of the calling thread (`current`), to recognise calls the
    /// core makes from inside the module's own free callback.
    fn current_task(&self) -> *mut c_void;
    /// Lets other threads run while waiting for a free callback to finish.
    fn yield_now(&self);
    /// Zeroed memory for one context, or null.
    fn alloc(&self, size: usize, align: usize) -> *mut u8;
    /// Frees what `alloc` returned.
    fn free(&self, ptr: *mut u8);
    /// Takes a reference on this module (a live context pins the code).
    fn module_get(&self);
    /// Drops a reference taken by `module_get`.
    fn module_put(&self);

    /// Logs `what` and a number (an error code, an address, a size).
    fn log(&self, level: Level, what: &'static str, value: i64);
}
