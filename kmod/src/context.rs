//! The per-registration state ("client context") handed to the PeerDirect
//! core by `acquire` and passed back on every later call.

use crate::platform::{ClientKind, SavedSgTable};
use crate::range::GpuRange;
use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64};

/// A context's place in its bucket's chain of the registry
/// (registry.rs), which alone reads and writes them, under the registry
/// lock; atomics (relaxed: the lock orders them) so that a shared
/// `&Context` can carry them. Defined here, beside the context that
/// carries them, so that the registry imports the context and not the
/// other way round.
#[derive(Default)]
pub struct Links {
    pub(crate) next: AtomicPtr<Context>,
    pub(crate) prev: AtomicPtr<Context>,
}
/// One registration of a GPU range.
///
/// The NVIDIA free callback can run on another CPU while the core calls
/// `dma_unmap`/`put_pages`/`release` (that is how `cudaFree` under a live
/// registration looks), so every field either never changes after
/// `acquire` or is atomic. `saved_sg` is the exception; see its comment.
pub struct Context {
    /// Which client acquired the range; fixed at `acquire`.
    pub kind: ClientKind,
    /// The widened range; fixed at `acquire`.
    pub range: GpuRange,
    /// The core's context for `invalidate`, set by `get_pages`.
    pub core_context: AtomicU64,
    /// `struct nvidia_p2p_page_table *`, written by the driver in
    /// `get_pages`.
    pub page_table: AtomicPtr<c_void>,
    /// `struct nvidia_p2p_dma_mapping *` from `dma_map`; taken (swapped to
    /// null) by whichever of `dma_unmap` and the free callback comes first,
    /// so it is unmapped or freed exactly once.
    pub dma_mapping: AtomicPtr<c_void>,
    /// The entries of the mapping `dma_map` counted as allocated
    /// ([`crate::peer_stats`]); 0 when none is counted. Set and taken
    /// under the client lock, with `dma_mapping`'s takers, so a mapping is
    /// counted as ended exactly once.
    pub counted_pages: AtomicU32,
    /// `get_pages` succeeded: the core owns the pin from then on and gives
    /// it back through `put_pages`; until then `release` unpins it.
    pub pages_with_core: AtomicBool,
    /// `struct pci_dev *` given to `dma_map`.
    pub pci_dev: AtomicPtr<c_void>,
    /// Set by the free callback before it calls the core's invalidate
    /// callback; `dma_unmap`/`put_pages` then do nothing (the driver is
    /// tearing the mapping down itself and must not be re-entered).
    pub in_callback: AtomicBool,
    /// Whether an sg table built by `dma_map` is still allocated; taken
    /// (swapped to false) by whoever frees it.
    pub sg_allocated: AtomicBool,
    /// Copy of the sg table built by `dma_map`. Written only by `dma_map`
    /// before `sg_allocated` is set; afterwards read and freed only by the
    /// caller that swapped `sg_allocated` from true to false, so never
    /// accessed by two CPUs at once.
    pub saved_sg: UnsafeCell<SavedSgTable>,
    /// The page table of `acquire`'s probe while it is pinned; taken
    /// (swapped to null) by whichever of the probe's unpin and its free
    /// callback comes first.
    pub probe_page_table: AtomicPtr<c_void>,
    /// This context's ticket in the driver's registry (the NVIDIA free
    /// callbacks' data); fixed once `acquire` has registered it.
    pub ticket: AtomicU64,
    /// Its place in the registry's chains (registry.rs).
    pub links: Links,
    /// Whether the ticket is still in the registry; whoever swaps it to
    /// false removes it (release and an orphan's callback may both try).
    pub in_registry: AtomicBool,
    /// The thread running this registration's free callback, so that the
    /// `dma_unmap`/`put_pages` the core makes from inside the invalidation
    /// (legacy clients) are recognised and do nothing.
    pub callback_task: AtomicPtr<c_void>,
    /// Free callbacks running on this registration: `release` waits until
    /// none is, since MLNX_OFED's core tears its registration down as soon
    /// as `release` returns, under an invalidation still in progress.
    pub callbacks_running: AtomicU32,
    /// `nvidia_p2p_put_pages` failed (the driver fails it before reaching
    /// RM on -ENOMEM): the driver still holds the page table, with this
    /// context's ticket as its free callback's data, and will call that
    /// callback when the GPU memory is freed. Until then the context stays
    /// in the registry and holds one reference and one module reference,
    /// so the module cannot be unloaded under the callback; whoever swaps
    /// this from true to false (the callback, or the thread that failed the
    /// put on finding the callback already ran) drops them.
    pub orphaned: AtomicBool,
    /// References: one held by the core from `acquire` to `release`, one
    /// by each free callback while it runs, one while `orphaned`. The last
    /// one frees the context.
    pub refs: AtomicU32,
}

// SAFETY: all fields but `saved_sg` are immutable or atomic; `saved_sg` is
// only touched by dma_map before publication through `sg_allocated` (the
// PeerDirect core does not call dma_map concurrently with anything else on
// the same context) and afterwards only by the one caller that wins the
// `sg_allocated` swap (see the field's comment).
unsafe impl Sync for Context {}

impl Context {
    pub fn new(kind: ClientKind, range: GpuRange) -> Context {
        Context {
            kind,
            range,
            core_context: AtomicU64::new(0),
            page_table: AtomicPtr::new(core::ptr::null_mut()),
            dma_mapping: AtomicPtr::new(core::ptr::null_mut()),
            counted_pages: AtomicU32::new(0),
            pages_with_core: AtomicBool::new(false),
            pci_dev: AtomicPtr::new(core::ptr::null_mut()),
            in_callback: AtomicBool::new(false),
            sg_allocated: AtomicBool::new(false),
            saved_sg: UnsafeCell::new(SavedSgTable::default()),
            probe_page_table: AtomicPtr::new(core::ptr::null_mut()),
            ticket: AtomicU64::new(0),
            links: Links::default(),
            in_registry: AtomicBool::new(false),
            callback_task: AtomicPtr::new(core::ptr::null_mut()),
            callbacks_running: AtomicU32::new(0),
            orphaned: AtomicBool::new(false),
            refs: AtomicU32::new(1),
        }
    }
}
