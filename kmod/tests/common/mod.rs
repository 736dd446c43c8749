//! Test doubles for the module's surroundings, shared by the host tests.
//!
//! [`Sim`] implements [`Platform`] as
//! - a simulated NVIDIA driver: a GPU VA space of 64 KiB pages
//!   ([`Sim::cuda_malloc`], [`Sim::cuda_free`]), page tables and dma
//!   mappings as handles whose life it tracks (live, revoked by a free,
//!   freed), reporting double frees, use after free, frees outside the free
//!   callback and leaks; `cuda_free` calls the free callback installed by
//!   `p2p_get_pages` like the real driver does on cudaFree;
//! - a simulated PeerDirect core: registration with failure injection,
//!   per-registration state ([`Reg`]) with a mapping lock as MLNX_OFED
//!   keeps it, an `invalidate` that follows MLNX_OFED's peer_mem.c
//!   (`ib_peer_unmap_on_invalidate`): a legacy client gets `dma_unmap` and
//!   `put_pages` from inside the callback, a `PEER_MEM_INVALIDATE_UNMAPS`
//!   client gets neither (it unmaps by itself), and in both cases the
//!   core's teardown of an invalidated registration calls neither; sg
//!   tables as tracked allocations;
//! - memory and module references, counted.
//!
//! Any platform call can be made to fail on its Nth occurrence
//! ([`Sim::fail_nth`]); [`Sim::free_before`] frees GPU memory right before
//! the Nth occurrence of a call, to hit windows such as acquire's probe.
#![allow(dead_code)]

use nv_peer_mem::errno::{EINVAL, ENOMEM, Errno};
use nv_peer_mem::platform::{
    NVIDIA_P2P_DMA_MAPPING_VERSION, NVIDIA_P2P_PAGE_SIZE_64KB, PeerFiles, SavedSgTable,
};
use nv_peer_mem::{Acquired, ClientKind, Driver, FreeCallback, Level, Platform, RegistrationStyle};
use std::alloc::Layout;
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

/// The GPU page size.
pub const PAGE: u64 = 0x1_0000;
/// `NVIDIA_P2P_PAGE_SIZE_4KB` and `_128KB`.
pub const PAGE_SIZE_4KB: u32 = 0;
pub const PAGE_SIZE_128KB: u32 = 2;
/// nv-p2p.h's NVIDIA_P2P_PAGE_TABLE_VERSION of 535 (also 550/555) and of
/// 580/595 (the fixtures' kernel-open/nvidia/nv-p2p.h).
pub const PAGE_TABLE_VERSION_535: u32 = 0x0001_0002;
#[allow(dead_code)] // used by some test binaries only
pub const PAGE_TABLE_VERSION_580: u32 = 0x0002_0000;

const PT_BASE: usize = 0x7a00_0000;
const MAP_BASE: usize = 0x7b00_0000;
const HANDLE_STRIDE: usize = 0x40;
const SG_MAGIC: u64 = 0x5347_7461_626c_6521;
/// Base of the dma addresses the simulated driver hands out.
pub const DMA_BASE: u64 = 0xd000_0000_0000;
/// Where `cuda_malloc` places allocations.
pub const GPU_VA_BASE: u64 = 0x7f00_0000_0000;

/// The `struct pci_dev *` the tests' core passes to `dma_map`.
pub fn pci_dev() -> *mut c_void {
    std::ptr::without_provenance_mut(0x9c1_0000)
}

/// Platform calls that can be made to fail (and counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    GetPages,
    PutPages,
    GetPagesPersistent,
    PutPagesPersistent,
    DmaMap,
    DmaUnmap,
    FreeDmaMapping,
    FreePageTable,
    SgFill,
    Alloc,
    RegisterMem,
    RegisterNc,
    /// `create_peer_files`
    PeerFiles,
}

/// One platform call, as recorded (at entry, whatever its outcome).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    GetPages {
        va: u64,
        len: u64,
        callback: FreeCallback,
    },
    PutPages {
        va: u64,
    },
    GetPagesPersistent {
        va: u64,
        len: u64,
    },
    PutPagesPersistent {
        va: u64,
    },
    PageTableVersion,
    PageSize,
    DmaMap,
    DmaUnmap,
    MappingVersion,
    FreeDmaMapping,
    FreePageTable,
    SgFill {
        page_size: u64,
    },
    SgMatches,
    SgFree,
    Invalidate(u64),
    /// kind, style, name
    Register(ClientKind, RegistrationStyle, &'static str),
    Unregister(ClientKind),
    Alloc,
    Free,
    ModuleGet,
    ModulePut,
}

/// Life of a page table in the simulated driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PtState {
    /// Pinned; `put_pages` releases it.
    Live,
    /// The memory was freed and the free callback called: only
    /// `free_page_table` (from the callback) may free it now.
    Revoked,
    Freed,
}

#[derive(Clone, Debug)]
pub struct PageTable {
    pub va: u64,
    pub len: u64,
    pub persistent: bool,
    pub callback: Option<(FreeCallback, usize)>,
    pub state: PtState,
    /// Which call freed it: "put_pages", "put_pages_persistent" or
    /// "free_page_table".
    pub freed_by: Option<&'static str>,
}

#[derive(Clone, Debug)]
pub struct Mapping {
    pub pt: usize,
    pub pci: usize,
    pub entries: u64,
    pub live: bool,
    /// "dma_unmap" or "free_dma_mapping".
    pub freed_by: Option<&'static str>,
}

#[derive(Clone, Debug)]
pub struct SgTab {
    /// (dma address, length) per entry.
    pub entries: Vec<(u64, u64)>,
    pub live: bool,
}

/// The core's view of one registration (an MR in MLNX_OFED terms).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RegState {
    pub pinned: bool,
    pub mapped: bool,
    pub invalidated: bool,
    pub released: bool,
    pub nmap: u32,
}

/// One registration held by the simulated PeerDirect core.
pub struct Reg {
    pub kind: ClientKind,
    pub core_context: u64,
    ctx: AtomicUsize,
    /// The core's `struct sg_table` (the double's layout: table id, entry
    /// count, magic, zero), boxed so its address is stable.
    sg: Box<UnsafeCell<[u64; 4]>>,
    /// MLNX_OFED's per-umem mapping lock: held around get_pages/dma_map,
    /// dma_unmap/put_pages and inside the invalidate callback.
    pub state: Mutex<RegState>,
}

// SAFETY: `sg` is only read or written by the client (through the pointer
// given to it) and by the core while `state` is locked, as MLNX_OFED
// serialises its sg_head under the mapping lock; all other fields are
// immutable or synchronised.
unsafe impl Sync for Reg {}
// SAFETY: as for Sync; the raw context pointer is stored as an integer.
unsafe impl Send for Reg {}

impl Reg {
    pub fn ctx(&self) -> *mut c_void {
        std::ptr::with_exposed_provenance_mut(self.ctx.load(Ordering::Acquire))
    }
    pub fn sg_head(&self) -> *mut c_void {
        self.sg.get().cast()
    }
    /// The core's sg_head words; call with the mapping lock held or when
    /// no other thread works on this registration.
    pub fn sg_words(&self) -> [u64; 4] {
        // SAFETY: see the doc comment: nobody writes the table concurrently.
        unsafe { *self.sg.get() }
    }
    pub fn set_sg_words(&self, words: [u64; 4]) {
        // SAFETY: as for sg_words.
        unsafe { *self.sg.get() = words }
    }
    pub fn state(&self) -> RegState {
        *self.state.lock().unwrap()
    }
}

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    logs: Vec<(Level, &'static str, i64)>,
    violations: Vec<String>,
    counts: HashMap<Op, u32>,
    fail: HashMap<Op, (u32, Errno)>,
    free_before: HashMap<Op, (u32, u64)>,
    free_elsewhere_before: HashMap<Op, (u32, u64)>,
    /// GPU allocations: start, length (u128 so the top of the VA space can
    /// be allocated).
    gpu: Vec<(u64, u128)>,
    next_va: u64,
    page_tables: Vec<PageTable>,
    mappings: Vec<Mapping>,
    sg: Vec<SgTab>,
    contexts: HashMap<usize, Layout>,
    context_allocs: u32,
    context_frees: u32,
    module_refs: i64,
    refs_at_invalidate: Vec<i64>,
    stale_calls: u32,
    registered: Vec<(ClientKind, RegistrationStyle, &'static str)>,
    /// The clients whose memory_peers directories the module made (a bit
    /// per kind), if it made them; the core's, if the core lists them.
    peer_files: Option<u8>,
    core_lists_peer_files: bool,
    regs: HashMap<u64, Arc<Reg>>,
    next_core_context: u64,
    invalidations: Vec<u64>,
    page_size_type: u32,
    /// (the tables' `version`, the `NVIDIA_P2P_PAGE_TABLE_VERSION` the
    /// module was built for)
    page_table_version: (u32, u32),
    mapping_version: u32,
    put_of_unlinked_succeeds: bool,
    release_inside_invalidate: bool,
    concurrent_release: Option<std::thread::JoinHandle<()>>,
}

impl State {
    fn violation(&mut self, what: String) {
        self.violations.push(what);
    }

    /// Counts the call and applies failure injection.
    fn inject(&mut self, op: Op) -> Result<(), Errno> {
        let n = self.counts.entry(op).or_default();
        *n += 1;
        match self.fail.get(&op) {
            Some(&(nth, e)) if nth == *n => Err(e),
            _ => Ok(()),
        }
    }

    fn pt_index(&mut self, h: *mut c_void, what: &str) -> Option<usize> {
        let a = h.addr();
        let i = a.wrapping_sub(PT_BASE) / HANDLE_STRIDE;
        if a < PT_BASE || (a - PT_BASE) % HANDLE_STRIDE != 0 || i == 0 || i > self.page_tables.len()
        {
            self.violation(format!("{what}: unknown page table handle {a:#x}"));
            return None;
        }
        Some(i - 1)
    }

    fn map_index(&mut self, h: *mut c_void, what: &str) -> Option<usize> {
        let a = h.addr();
        let i = a.wrapping_sub(MAP_BASE) / HANDLE_STRIDE;
        if a < MAP_BASE || (a - MAP_BASE) % HANDLE_STRIDE != 0 || i == 0 || i > self.mappings.len()
        {
            self.violation(format!("{what}: unknown dma mapping handle {a:#x}"));
            return None;
        }
        Some(i - 1)
    }

    fn is_gpu(&self, va: u64, len: u64) -> bool {
        let (va, len) = (va as u128, len as u128);
        self.gpu
            .iter()
            .any(|&(s, l)| s as u128 <= va && va + len <= s as u128 + l)
    }

    fn new_pt(
        &mut self,
        va: u64,
        len: u64,
        persistent: bool,
        callback: Option<(FreeCallback, usize)>,
    ) -> *mut c_void {
        self.page_tables.push(PageTable {
            va,
            len,
            persistent,
            callback,
            state: PtState::Live,
            freed_by: None,
        });
        std::ptr::without_provenance_mut(PT_BASE + self.page_tables.len() * HANDLE_STRIDE)
    }

    fn live_mappings_of(&self, pt: usize) -> usize {
        self.mappings
            .iter()
            .filter(|m| m.live && m.pt == pt)
            .count()
    }

    fn put(&mut self, va: u64, h: *mut c_void, persistent: bool) -> Result<(), Errno> {
        let what = if persistent {
            "put_pages_persistent"
        } else {
            "put_pages"
        };
        let Some(i) = self.pt_index(h, what) else {
            return Err(EINVAL);
        };
        let pt = self.page_tables[i].clone();
        match pt.state {
            PtState::Live => {
                if pt.persistent != persistent {
                    self.violation(format!("{what} on a page table of the other kind"));
                    return Err(EINVAL);
                }
                if pt.va != va {
                    self.violation(format!(
                        "{what}: va {va:#x} is not the page table's {:#x}",
                        pt.va
                    ));
                    return Err(EINVAL);
                }
                if self.live_mappings_of(i) != 0 {
                    self.violation(format!("{what} with a live dma mapping"));
                }
                self.page_tables[i].state = PtState::Freed;
                self.page_tables[i].freed_by = Some(what);
                Ok(())
            }
            // NVIDIA 535 reports an unlinked page table as put back (its
            // RM frees it after the free callback); older drivers fail the
            // call and leave the page table to the callback.
            PtState::Revoked if self.put_of_unlinked_succeeds && !persistent => Ok(()),
            PtState::Revoked => Err(EINVAL),
            // NVIDIA's non-persistent put_pages looks the page table up by
            // pointer in its own records and fails gracefully when its free
            // callback has freed it (the race nv_peer_mem has always lived
            // with: the memory can go between any check and the call).
            PtState::Freed if !persistent && pt.freed_by == Some("free_page_table") => Err(EINVAL),
            PtState::Freed => {
                self.stale_calls += 1;
                Err(EINVAL)
            }
        }
    }
}

/// The simulated NVIDIA driver, PeerDirect core, allocator and module.
pub struct Sim {
    st: Mutex<State>,
    driver: OnceLock<Weak<Driver<Sim>>>,
    background: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The context registry's lock, taken and released by separate calls
    /// as the glue's spinlock is.
    registry_lock: SplitLock,
    /// The client lock (the glue's mutex).
    client_lock: SplitLock,
}

/// A lock taken and released by separate calls, as the glue's spinlock and
/// mutex behind `Platform`'s lock functions are.
struct SplitLock {
    locked: Mutex<bool>,
    unlocked: std::sync::Condvar,
}

impl SplitLock {
    fn new() -> SplitLock {
        SplitLock {
            locked: Mutex::new(false),
            unlocked: std::sync::Condvar::new(),
        }
    }

    fn held(&self) -> MutexGuard<'_, bool> {
        self.locked.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock(&self) {
        let mut locked = self.held();
        while *locked {
            locked = self
                .unlocked
                .wait(locked)
                .unwrap_or_else(|e| e.into_inner());
        }
        *locked = true;
    }

    /// False (and nothing done) when the lock was not held.
    fn unlock(&self) -> bool {
        let mut locked = self.held();
        if !*locked {
            return false;
        }
        *locked = false;
        self.unlocked.notify_one();
        true
    }
}

impl Sim {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn driver(&self) -> Arc<Driver<Sim>> {
        self.driver
            .get()
            .and_then(Weak::upgrade)
            .expect("driver alive")
    }

    /// Runs a pending `free_before` hook for the next occurrence of `op`.
    fn hook(&self, op: Op) {
        let pending = {
            let mut st = self.lock();
            let next = st.counts.get(&op).copied().unwrap_or(0) + 1;
            match st.free_elsewhere_before.get(&op) {
                Some(&(nth, va)) if nth == next => {
                    st.free_elsewhere_before.remove(&op);
                    Some((va, st.invalidations.len()))
                }
                _ => None,
            }
        };
        if let Some((va, seen)) = pending {
            // cudaFree on another CPU: wait until its free callback has
            // reached the core's invalidate (which then waits for the
            // mapping lock the caller may hold), then go on.
            let drv = self.driver();
            let t = std::thread::spawn(move || drv.platform().cuda_free(va));
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while self.lock().invalidations.len() == seen && !t.is_finished() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "free callback did not reach invalidate"
                );
                std::thread::yield_now();
            }
            self.background.lock().unwrap().push(t);
        }
        let va = {
            let mut st = self.lock();
            let next = st.counts.get(&op).copied().unwrap_or(0) + 1;
            match st.free_before.get(&op) {
                Some(&(nth, va)) if nth == next => {
                    st.free_before.remove(&op);
                    Some(va)
                }
                _ => None,
            }
        };
        if let Some(va) = va {
            self.cuda_free(va);
        }
    }

    // ---- configuration and failure injection ----

    /// Makes the `nth` (1-based, counted from now on) call of `op` fail
    /// with `e` (allocation failure returns null).
    pub fn fail_nth(&self, op: Op, nth: u32, e: Errno) {
        let mut st = self.lock();
        let base = st.counts.get(&op).copied().unwrap_or(0);
        st.fail.insert(op, (base + nth, e));
    }
    /// Frees the GPU allocation at `va` right before the `nth` (1-based,
    /// counted from now on) call of `op`.
    pub fn free_before(&self, op: Op, nth: u32, va: u64) {
        let mut st = self.lock();
        let base = st.counts.get(&op).copied().unwrap_or(0);
        st.free_before.insert(op, (base + nth, va));
    }
    /// Like `free_before`, but the cudaFree runs on another thread, and
    /// the call goes on once that thread's free callback has called the
    /// core's invalidate; [`Sim::join_background`] waits for it.
    pub fn free_elsewhere_before(&self, op: Op, nth: u32, va: u64) {
        let mut st = self.lock();
        let base = st.counts.get(&op).copied().unwrap_or(0);
        st.free_elsewhere_before.insert(op, (base + nth, va));
    }
    pub fn join_background(&self) {
        let threads = std::mem::take(&mut *self.background.lock().unwrap());
        for t in threads {
            t.join().expect("background cudaFree");
        }
    }
    pub fn set_page_size_type(&self, t: u32) {
        self.lock().page_size_type = t;
    }
    /// Models NVIDIA 535's put_pages, which returns 0 for a page table
    /// that cudaFree already unlinked (the free callback still to come).
    pub fn put_of_unlinked_succeeds(&self) {
        self.lock().put_of_unlinked_succeeds = true;
    }
    /// The core releases registrations from inside its invalidate callback.
    /// Waits for the release started by `release_inside_invalidate`.
    pub fn join_concurrent_release(&self) {
        let handle = self.lock().concurrent_release.take();
        if let Some(handle) = handle {
            handle.join().expect("the concurrent release panicked");
        }
    }

    pub fn release_inside_invalidate(&self) {
        self.lock().release_inside_invalidate = true;
    }
    pub fn set_mapping_version(&self, v: u32) {
        self.lock().mapping_version = v;
    }
    /// The version the driver writes into its page tables, and the one
    /// the module under test was built against (nv-p2p.h's
    /// NVIDIA_P2P_PAGE_TABLE_VERSION: 0x00010002 up to 575, 0x00020000 from
    /// 580).
    pub fn set_page_table_version(&self, found: u32, built: u32) {
        self.lock().page_table_version = (found, built);
    }

    // ---- the GPU ----

    /// Allocates `len` bytes of GPU memory (rounded up to 64 KiB), 2 MiB
    /// aligned, with a gap after it; returns its address.
    pub fn cuda_malloc(&self, len: u64) -> u64 {
        let mut st = self.lock();
        let va = st.next_va;
        let len = len.div_ceil(PAGE) * PAGE;
        st.next_va = (va + len).div_ceil(0x20_0000) * 0x20_0000 + 0x20_0000;
        st.gpu.push((va, len as u128));
        va
    }
    /// Allocates GPU memory at a given address (for ranges at the ends of
    /// the VA space); `len` may reach 2^64.
    pub fn cuda_malloc_at(&self, va: u64, len: u128) {
        self.lock().gpu.push((va, len));
    }
    /// cudaFree: removes the allocation that starts at `va`; every page
    /// table pinned in it with a free callback is revoked and its callback
    /// called, on this thread, as the NVIDIA driver does. Persistent pages
    /// get no callback.
    pub fn cuda_free(&self, va: u64) {
        let callbacks = self.cuda_free_unlink(va);
        self.run_free_callbacks(callbacks);
    }

    /// The first half of cudaFree in NVIDIA 535: the allocation is gone and
    /// its page tables are unlinked (put_pages of them now "succeeds", see
    /// `Sim::put_of_unlinked_succeeds`), but the free callbacks run later:
    /// pass what this returns to `run_free_callbacks`.
    pub fn cuda_free_unlink(&self, va: u64) -> Vec<(FreeCallback, usize)> {
        {
            let mut st = self.lock();
            let i = st
                .gpu
                .iter()
                .position(|&(s, _)| s == va)
                .expect("cuda_free of an allocation");
            let (s, l) = st.gpu.remove(i);
            let (s, e) = (s as u128, s as u128 + l);
            let mut cbs = Vec::new();
            for pt in st.page_tables.iter_mut() {
                let (ps, pe) = (pt.va as u128, pt.va as u128 + pt.len as u128);
                if pt.state == PtState::Live && !pt.persistent && ps < e && s < pe {
                    pt.state = PtState::Revoked;
                    cbs.extend(pt.callback);
                }
            }
            cbs
        }
    }

    /// The second half of cudaFree: the free callbacks, on this thread.
    pub fn run_free_callbacks(&self, callbacks: Vec<(FreeCallback, usize)>) {
        for (callback, data) in callbacks {
            match callback {
                // `data` is the ticket the logic gave p2p_get_pages.
                FreeCallback::Invalidate => self
                    .driver()
                    .free_callback(std::ptr::without_provenance_mut(data)),
                FreeCallback::Probe => self
                    .driver()
                    .probe_free_callback(std::ptr::without_provenance_mut(data)),
            }
        }
    }

    // ---- observation ----

    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }
    /// The calls recorded so far, clearing the record.
    pub fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut self.lock().calls)
    }
    pub fn logs(&self) -> Vec<(Level, &'static str, i64)> {
        self.lock().logs.clone()
    }
    pub fn errors_logged(&self) -> usize {
        self.lock()
            .logs
            .iter()
            .filter(|l| l.0 == Level::Error)
            .count()
    }
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }
    pub fn count(&self, op: Op) -> u32 {
        self.lock().counts.get(&op).copied().unwrap_or(0)
    }
    pub fn page_tables(&self) -> Vec<PageTable> {
        self.lock().page_tables.clone()
    }
    pub fn mappings(&self) -> Vec<Mapping> {
        self.lock().mappings.clone()
    }
    pub fn sg_tables(&self) -> Vec<SgTab> {
        self.lock().sg.clone()
    }
    pub fn live_page_tables(&self) -> usize {
        self.lock()
            .page_tables
            .iter()
            .filter(|p| p.state != PtState::Freed)
            .count()
    }
    pub fn live_mappings(&self) -> usize {
        self.lock().mappings.iter().filter(|m| m.live).count()
    }
    pub fn live_sg_tables(&self) -> usize {
        self.lock().sg.iter().filter(|s| s.live).count()
    }
    pub fn live_contexts(&self) -> usize {
        self.lock().contexts.len()
    }
    pub fn context_allocs(&self) -> u32 {
        self.lock().context_allocs
    }
    pub fn context_frees(&self) -> u32 {
        self.lock().context_frees
    }
    pub fn module_refs(&self) -> i64 {
        self.lock().module_refs
    }
    /// Module references held each time the core's invalidate ran.
    pub fn refs_at_invalidate(&self) -> Vec<i64> {
        self.lock().refs_at_invalidate.clone()
    }
    pub fn stale_calls(&self) -> u32 {
        self.lock().stale_calls
    }
    pub fn invalidations(&self) -> Vec<u64> {
        self.lock().invalidations.clone()
    }
    pub fn registered(&self) -> Vec<(ClientKind, RegistrationStyle, &'static str)> {
        self.lock().registered.clone()
    }
    /// The clients (a bit per kind) whose memory_peers directories the
    /// module made and has not removed.
    pub fn peer_files(&self) -> Option<u8> {
        self.lock().peer_files
    }
    /// The core lists its clients in memory_peers (a kernel that exports
    /// mm_kobj): `create_peer_files` answers Core and makes nothing.
    pub fn core_lists_peer_files(&self) {
        self.lock().core_lists_peer_files = true;
    }
    /// The dma address the driver gives page `i` of mapping `m` (0-based).
    pub fn dma_address(m: usize, i: u64) -> u64 {
        DMA_BASE + ((m as u64) << 32) + i * PAGE
    }

    /// Nothing leaked, nothing freed twice, no misuse, no reference left.
    #[track_caller]
    pub fn assert_clean(&self) {
        let st = self.lock();
        assert!(st.violations.is_empty(), "violations: {:#?}", st.violations);
        assert_eq!(st.stale_calls, 0, "calls on already freed page tables");
        let pts: Vec<_> = st
            .page_tables
            .iter()
            .filter(|p| p.state != PtState::Freed)
            .collect();
        assert!(pts.is_empty(), "page tables leaked: {pts:?}");
        let maps: Vec<_> = st.mappings.iter().filter(|m| m.live).collect();
        assert!(maps.is_empty(), "dma mappings leaked: {maps:?}");
        assert_eq!(
            st.sg.iter().filter(|s| s.live).count(),
            0,
            "sg tables leaked"
        );
        assert!(
            st.contexts.is_empty(),
            "contexts leaked: {}",
            st.contexts.len()
        );
        assert_eq!(st.context_allocs, st.context_frees);
        assert_eq!(st.module_refs, 0, "module references left");
        drop(st);
        assert_eq!(
            self.registered_tickets(),
            0,
            "tickets left in the driver's registry"
        );
    }

    /// Contexts in the driver's registry.
    pub fn registered_tickets(&self) -> usize {
        self.driver().registered_contexts()
    }
}

impl Platform for Sim {
    fn p2p_get_pages(
        &self,
        va: u64,
        len: u64,
        slot: &AtomicPtr<c_void>,
        callback: FreeCallback,
        data: *mut c_void,
    ) -> Result<(), Errno> {
        self.hook(Op::GetPages);
        let mut st = self.lock();
        st.calls.push(Call::GetPages { va, len, callback });
        st.inject(Op::GetPages)?;
        if va % PAGE != 0 || len % PAGE != 0 || len == 0 {
            st.violation(format!(
                "get_pages: range {va:#x}+{len:#x} not on 64 KiB pages"
            ));
            return Err(EINVAL);
        }
        if callback == FreeCallback::Invalidate && data.is_null() {
            st.violation("get_pages: invalidating callback without data".into());
        }
        if !st.is_gpu(va, len) {
            return Err(EINVAL);
        }
        let h = st.new_pt(va, len, false, Some((callback, data.expose_provenance())));
        // The driver writes the page table before it can call the callback.
        slot.store(h, Ordering::Release);
        Ok(())
    }

    fn p2p_put_pages(&self, va: u64, page_table: *mut c_void) -> Result<(), Errno> {
        self.hook(Op::PutPages);
        let mut st = self.lock();
        st.calls.push(Call::PutPages { va });
        st.inject(Op::PutPages)?;
        st.put(va, page_table, false)
    }

    fn p2p_get_pages_persistent(
        &self,
        va: u64,
        len: u64,
        slot: &AtomicPtr<c_void>,
    ) -> Result<(), Errno> {
        self.hook(Op::GetPagesPersistent);
        let mut st = self.lock();
        st.calls.push(Call::GetPagesPersistent { va, len });
        st.inject(Op::GetPagesPersistent)?;
        if va % PAGE != 0 || len % PAGE != 0 || len == 0 {
            st.violation(format!(
                "get_pages_persistent: range {va:#x}+{len:#x} not on 64 KiB pages"
            ));
            return Err(EINVAL);
        }
        if !st.is_gpu(va, len) {
            return Err(EINVAL);
        }
        let h = st.new_pt(va, len, true, None);
        slot.store(h, Ordering::Release);
        Ok(())
    }

    fn p2p_put_pages_persistent(&self, va: u64, page_table: *mut c_void) -> Result<(), Errno> {
        self.hook(Op::PutPagesPersistent);
        let mut st = self.lock();
        st.calls.push(Call::PutPagesPersistent { va });
        st.inject(Op::PutPagesPersistent)?;
        st.put(va, page_table, true)
    }

    fn page_table_version(&self, page_table: *mut c_void) -> (u32, u32) {
        let mut st = self.lock();
        st.calls.push(Call::PageTableVersion);
        if let Some(i) = st.pt_index(page_table, "page table version")
            && st.page_tables[i].state == PtState::Freed
        {
            st.violation("page table version: read of a freed page table".into());
        }
        st.page_table_version
    }

    fn page_table_page_size(&self, page_table: *mut c_void) -> u32 {
        let mut st = self.lock();
        st.calls.push(Call::PageSize);
        if let Some(i) = st.pt_index(page_table, "page_size")
            && st.page_tables[i].state == PtState::Freed
        {
            st.violation("page_size: read of a freed page table".into());
        }
        st.page_size_type
    }

    fn p2p_dma_map(
        &self,
        pci_dev: *mut c_void,
        page_table: *mut c_void,
    ) -> Result<*mut c_void, Errno> {
        self.hook(Op::DmaMap);
        let mut st = self.lock();
        st.calls.push(Call::DmaMap);
        st.inject(Op::DmaMap)?;
        let Some(i) = st.pt_index(page_table, "dma_map") else {
            return Err(EINVAL);
        };
        match st.page_tables[i].state {
            PtState::Live => {}
            PtState::Revoked => return Err(EINVAL),
            PtState::Freed => {
                st.violation("dma_map of a freed page table".into());
                return Err(EINVAL);
            }
        }
        let entries = st.page_tables[i].len / PAGE;
        st.mappings.push(Mapping {
            pt: i,
            pci: pci_dev.addr(),
            entries,
            live: true,
            freed_by: None,
        });
        Ok(std::ptr::without_provenance_mut(
            MAP_BASE + st.mappings.len() * HANDLE_STRIDE,
        ))
    }

    fn p2p_dma_unmap(
        &self,
        pci_dev: *mut c_void,
        page_table: *mut c_void,
        mapping: *mut c_void,
    ) -> Result<(), Errno> {
        self.hook(Op::DmaUnmap);
        let mut st = self.lock();
        st.calls.push(Call::DmaUnmap);
        st.inject(Op::DmaUnmap)?;
        let Some(m) = st.map_index(mapping, "dma_unmap") else {
            return Err(EINVAL);
        };
        let Some(p) = st.pt_index(page_table, "dma_unmap") else {
            return Err(EINVAL);
        };
        let map = st.mappings[m].clone();
        if !map.live {
            st.violation(format!(
                "dma_unmap: mapping {m} freed twice (first by {:?})",
                map.freed_by
            ));
            return Err(EINVAL);
        }
        if map.pt != p {
            st.violation("dma_unmap: mapping of another page table".into());
            return Err(EINVAL);
        }
        if map.pci != pci_dev.addr() {
            st.violation("dma_unmap: another PCI device than dma_map's".into());
            return Err(EINVAL);
        }
        if st.page_tables[p].state == PtState::Freed {
            st.violation("dma_unmap: page table already freed (use after free)".into());
        }
        st.mappings[m].live = false;
        st.mappings[m].freed_by = Some("dma_unmap");
        Ok(())
    }

    fn dma_mapping_version(&self, mapping: *mut c_void) -> u32 {
        let mut st = self.lock();
        st.calls.push(Call::MappingVersion);
        if let Some(m) = st.map_index(mapping, "mapping version")
            && !st.mappings[m].live
        {
            st.violation("mapping version: read of a freed mapping".into());
        }
        st.mapping_version
    }

    fn p2p_free_dma_mapping(&self, mapping: *mut c_void) -> Result<(), Errno> {
        self.hook(Op::FreeDmaMapping);
        let mut st = self.lock();
        st.calls.push(Call::FreeDmaMapping);
        st.inject(Op::FreeDmaMapping)?;
        let Some(m) = st.map_index(mapping, "free_dma_mapping") else {
            return Err(EINVAL);
        };
        let map = st.mappings[m].clone();
        if !map.live {
            st.violation(format!(
                "free_dma_mapping: mapping {m} freed twice (first by {:?})",
                map.freed_by
            ));
            return Err(EINVAL);
        }
        if st.page_tables[map.pt].state != PtState::Revoked {
            st.violation("free_dma_mapping outside the free callback".into());
        }
        st.mappings[m].live = false;
        st.mappings[m].freed_by = Some("free_dma_mapping");
        Ok(())
    }

    fn p2p_free_page_table(&self, page_table: *mut c_void) -> Result<(), Errno> {
        self.hook(Op::FreePageTable);
        let mut st = self.lock();
        st.calls.push(Call::FreePageTable);
        st.inject(Op::FreePageTable)?;
        let Some(p) = st.pt_index(page_table, "free_page_table") else {
            return Err(EINVAL);
        };
        match st.page_tables[p].state {
            PtState::Revoked => {}
            PtState::Live => {
                st.violation("free_page_table outside the free callback".into());
                return Err(EINVAL);
            }
            PtState::Freed => {
                let by = st.page_tables[p].freed_by;
                st.violation(format!(
                    "free_page_table: page table {p} freed twice (first by {by:?})"
                ));
                return Err(EINVAL);
            }
        }
        if st.live_mappings_of(p) != 0 {
            st.violation("free_page_table with a live dma mapping".into());
        }
        st.page_tables[p].state = PtState::Freed;
        st.page_tables[p].freed_by = Some("free_page_table");
        Ok(())
    }

    fn sg_fill(
        &self,
        sg_head: *mut c_void,
        mapping: *mut c_void,
        page_size: u64,
        saved: *mut SavedSgTable,
    ) -> Result<u32, Errno> {
        self.hook(Op::SgFill);
        let mut st = self.lock();
        st.calls.push(Call::SgFill { page_size });
        st.inject(Op::SgFill)?;
        let Some(m) = st.map_index(mapping, "sg_fill") else {
            return Err(EINVAL);
        };
        if !st.mappings[m].live {
            st.violation("sg_fill from a freed mapping".into());
            return Err(EINVAL);
        }
        let n = st.mappings[m].entries;
        let entries = (0..n)
            .map(|i| (Sim::dma_address(m, i), page_size))
            .collect();
        st.sg.push(SgTab {
            entries,
            live: true,
        });
        let words = [st.sg.len() as u64, n, SG_MAGIC, 0];
        // SAFETY: `sg_head` is the core's sg table, a live [u64; 4] owned by
        // a `Reg` (the only tables the tests pass), and `saved` points into
        // a live context; both are 8-byte aligned and 32 bytes long.
        unsafe {
            sg_head.cast::<[u64; 4]>().write(words);
            saved.cast::<[u64; 4]>().write(words);
        }
        Ok(u32::try_from(n).expect("entries fit"))
    }

    fn sg_matches(&self, sg_head: *mut c_void, saved: *const SavedSgTable) -> bool {
        self.lock().calls.push(Call::SgMatches);
        // SAFETY: as in sg_fill: both point to live 32-byte tables.
        unsafe { sg_head.cast::<[u64; 4]>().read() == saved.cast::<[u64; 4]>().read() }
    }

    fn sg_free(&self, table: *mut c_void) {
        let mut st = self.lock();
        st.calls.push(Call::SgFree);
        // SAFETY: `table` is the core's sg_head or a context's saved copy,
        // both live 32-byte tables (see sg_fill).
        let words = unsafe { table.cast::<[u64; 4]>().read() };
        // Like sg_free_table: a table without entries is nothing to free.
        if words[0] == 0 {
            return;
        }
        let id = words[0] as usize;
        if words[2] != SG_MAGIC || id > st.sg.len() {
            st.violation(format!(
                "sg_free of something that is no sg table: {words:x?}"
            ));
            return;
        }
        if !st.sg[id - 1].live {
            st.violation(format!("sg table {id} freed twice"));
            return;
        }
        st.sg[id - 1].live = false;
        // sg_free_table leaves the table's sgl NULL.
        // SAFETY: as above.
        unsafe { table.cast::<u64>().write(0) };
    }

    fn invalidate(&self, core_context: u64) {
        let reg = {
            let mut st = self.lock();
            st.calls.push(Call::Invalidate(core_context));
            st.invalidations.push(core_context);
            let refs = st.module_refs;
            st.refs_at_invalidate.push(refs);
            if !st.registered.iter().any(|r| r.0 == ClientKind::Mem) {
                st.violation("invalidate while nv_mem is not registered".into());
            }
            match st.regs.get(&core_context) {
                Some(r) => r.clone(),
                None => {
                    st.violation(format!(
                        "invalidate of unknown core context {core_context:#x}"
                    ));
                    return;
                }
            }
        };
        let legacy = self
            .lock()
            .registered
            .iter()
            .any(|r| r.0 == ClientKind::Mem && r.1 == RegistrationStyle::Legacy);
        let drv = self.driver();
        let mut rs = reg.state.lock().unwrap();
        if rs.mapped && !legacy {
            // PEER_MEM_INVALIDATE_UNMAPS: the core only marks it invalidated.
            rs.mapped = false;
            rs.pinned = false;
        }
        if rs.mapped {
            // SAFETY: the registration's context is live (released only
            // after the core's own teardown, which this lock excludes).
            let r = unsafe { drv.dma_unmap(reg.ctx(), reg.sg_head()) };
            if r.is_err() {
                self.lock()
                    .violation(format!("dma_unmap inside invalidate failed: {r:?}"));
            }
            rs.mapped = false;
        }
        if rs.pinned {
            // SAFETY: as above.
            unsafe { drv.put_pages(reg.ctx(), reg.sg_head()) };
            reg.set_sg_words([0; 4]);
            rs.pinned = false;
        }
        rs.invalidated = true;
        if self.lock().release_inside_invalidate {
            // The core tearing the registration down on another CPU while
            // this invalidation runs (peer_mem.c: "release() can be called
            // concurrently with invalidate"): release must not return
            // before the free callback is done, since the core frees its
            // side of the registration when it does.
            rs.released = true;
            drop(rs);
            self.lock().regs.remove(&core_context);
            let ctx = reg.ctx() as usize;
            let releaser = std::thread::spawn(move || {
                // SAFETY: the registration's context is live until this
                // release; `released` keeps the tests from using it.
                unsafe { drv.release(ctx as *mut c_void) };
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            let mut st = self.lock();
            if releaser.is_finished() {
                st.violation("release returned while the free callback was still running".into());
            }
            st.concurrent_release = Some(releaser);
        }
    }

    fn register(
        &self,
        kind: ClientKind,
        style: RegistrationStyle,
        name: &'static str,
    ) -> Result<(), Errno> {
        let mut st = self.lock();
        st.calls.push(Call::Register(kind, style, name));
        st.inject(match kind {
            ClientKind::Mem => Op::RegisterMem,
            ClientKind::Nc => Op::RegisterNc,
        })?;
        if st.registered.iter().any(|r| r.0 == kind) {
            st.violation(format!("{kind:?} registered twice"));
            return Err(EINVAL);
        }
        // peer_mem.c looks clients up by name (the HCA's peer_mem_name):
        // two with the same name would make one unreachable.
        if st.registered.iter().any(|r| r.2 == name) {
            st.violation(format!("a second client named {name}"));
            return Err(EINVAL);
        }
        st.registered.push((kind, style, name));
        Ok(())
    }

    fn create_peer_files(&self, kinds: u8) -> Result<PeerFiles, Errno> {
        let mut st = self.lock();
        st.inject(Op::PeerFiles)?;
        if st.peer_files.is_some() {
            st.violation("memory_peers made twice".into());
        }
        let registered = st
            .registered
            .iter()
            .fold(0u8, |bits, r| bits | (1 << r.0 as u32));
        if kinds != registered {
            st.violation(format!(
                "memory_peers for clients {kinds:#b}, registered {registered:#b}"
            ));
        }
        if st.core_lists_peer_files {
            return Ok(PeerFiles::Core);
        }
        st.peer_files = Some(kinds);
        Ok(PeerFiles::Module)
    }

    fn remove_peer_files(&self) {
        self.lock().peer_files = None;
    }

    fn unregister(&self, kind: ClientKind) {
        let mut st = self.lock();
        // The files read the clients' version: they go first.
        if st.peer_files.is_some() {
            st.violation(format!(
                "{kind:?} unregistered while its memory_peers files exist"
            ));
        }
        st.calls.push(Call::Unregister(kind));
        match st.registered.iter().position(|r| r.0 == kind) {
            Some(i) => {
                st.registered.remove(i);
            }
            None => st.violation(format!("unregister of {kind:?}, which is not registered")),
        }
    }

    fn client_lock(&self) {
        self.client_lock.lock();
    }

    fn client_unlock(&self) {
        if !self.client_lock.unlock() {
            self.lock()
                .violation("client_unlock without client_lock".to_string());
        }
    }

    fn current_task(&self) -> *mut c_void {
        thread_local! {
            static TASK: u8 = const { 0 };
        }
        TASK.with(|t| std::ptr::from_ref(t).cast_mut().cast())
    }

    fn yield_now(&self) {
        std::thread::yield_now();
    }

    fn registry_lock(&self) {
        self.registry_lock.lock();
    }

    fn registry_unlock(&self) {
        if !self.registry_lock.unlock() {
            self.lock()
                .violation("registry_unlock without registry_lock".into());
        }
    }

    fn alloc(&self, size: usize, align: usize) -> *mut u8 {
        let mut st = self.lock();
        st.calls.push(Call::Alloc);
        if st.inject(Op::Alloc).is_err() {
            return std::ptr::null_mut();
        }
        let layout = Layout::from_size_align(size, align).expect("layout");
        // SAFETY: a Context has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!p.is_null());
        st.contexts.insert(p.expose_provenance(), layout);
        st.context_allocs += 1;
        p
    }

    fn free(&self, ptr: *mut u8) {
        let mut st = self.lock();
        st.calls.push(Call::Free);
        match st.contexts.remove(&ptr.addr()) {
            Some(layout) => {
                st.context_frees += 1;
                // Poison before freeing, so a use after free shows.
                // SAFETY: `ptr` came from alloc with this layout and is
                // freed exactly once (it was still in `contexts`).
                unsafe {
                    ptr.write_bytes(0x5a, layout.size());
                    std::alloc::dealloc(ptr, layout);
                }
            }
            None => st.violation(format!(
                "free of {:#x}, not an allocated context (double free?)",
                ptr.addr()
            )),
        }
    }

    fn module_get(&self) {
        let mut st = self.lock();
        st.calls.push(Call::ModuleGet);
        st.module_refs += 1;
    }

    fn module_put(&self) {
        let mut st = self.lock();
        st.calls.push(Call::ModulePut);
        st.module_refs -= 1;
        if st.module_refs < 0 {
            st.violation("module reference dropped below zero".into());
        }
    }

    fn log(&self, level: Level, what: &'static str, value: i64) {
        self.lock().logs.push((level, what, value));
    }
}

/// A driver over a fresh [`Sim`], and the PeerDirect core's side of a
/// registration's life (what MLNX_OFED's umem code does).
pub struct Env {
    pub drv: Arc<Driver<Sim>>,
}

impl Env {
    /// Nothing registered yet.
    pub fn bare() -> Env {
        let drv = Arc::new_cyclic(|w: &Weak<Driver<Sim>>| {
            let sim = Sim {
                st: Mutex::new(State::default()),
                driver: OnceLock::new(),
                background: Mutex::new(Vec::new()),
                registry_lock: SplitLock::new(),
                client_lock: SplitLock::new(),
            };
            sim.driver.set(w.clone()).expect("set once");
            {
                let mut st = sim.lock();
                st.next_va = GPU_VA_BASE;
                st.next_core_context = 0xc0de_0000;
                st.page_size_type = NVIDIA_P2P_PAGE_SIZE_64KB;
                st.mapping_version = NVIDIA_P2P_DMA_MAPPING_VERSION;
                st.page_table_version = (PAGE_TABLE_VERSION_535, PAGE_TABLE_VERSION_535);
            }
            Driver::new(sim)
        });
        Env { drv }
    }

    /// Both clients registered (`persistent_api_support=0` on a driver
    /// with the persistent API: the invalidating `nv_mem` and the
    /// persistent `nv_mem_nc`), new style; the call record is cleared.
    pub fn new() -> Env {
        Env::with_style(0)
    }

    pub fn with_style(peerdirect_support: i32) -> Env {
        let env = Env::bare();
        env.drv.init(peerdirect_support, 0, true).expect("init");
        env.sim().take_calls();
        env
    }

    pub fn sim(&self) -> &Sim {
        self.drv.platform()
    }

    /// The core's `acquire` loop entry: returns the registration when the
    /// client says mine.
    pub fn acquire(&self, kind: ClientKind, addr: u64, size: u64) -> Option<Arc<Reg>> {
        match self.drv.acquire(kind, addr, size) {
            Acquired::NotMine => None,
            Acquired::Mine(ctx) => {
                let mut st = self.sim().lock();
                let core_context = st.next_core_context;
                st.next_core_context += 0x11;
                let reg = Arc::new(Reg {
                    kind,
                    core_context,
                    ctx: AtomicUsize::new(ctx.as_ptr().expose_provenance()),
                    sg: Box::new(UnsafeCell::new([0; 4])),
                    state: Mutex::new(RegState::default()),
                });
                st.regs.insert(core_context, reg.clone());
                Some(reg)
            }
        }
    }

    pub fn get_pages(&self, reg: &Reg) -> Result<(), Errno> {
        let mut rs = reg.state.lock().unwrap();
        // SAFETY: the registration's context is live until `release`.
        let r = unsafe { self.drv.get_pages(reg.ctx(), reg.core_context) };
        rs.pinned = r.is_ok();
        r
    }

    pub fn dma_map(&self, reg: &Reg) -> Result<u32, Errno> {
        let mut rs = reg.state.lock().unwrap();
        // SAFETY: as in get_pages.
        let r = unsafe { self.drv.dma_map(reg.ctx(), reg.sg_head(), pci_dev()) };
        if let Ok(n) = r {
            rs.mapped = true;
            rs.nmap = n;
        }
        r
    }

    pub fn dma_unmap(&self, reg: &Reg) -> Result<(), Errno> {
        let mut rs = reg.state.lock().unwrap();
        // SAFETY: as in get_pages.
        let r = unsafe { self.drv.dma_unmap(reg.ctx(), reg.sg_head()) };
        rs.mapped = false;
        r
    }

    pub fn put_pages(&self, reg: &Reg) {
        let mut rs = reg.state.lock().unwrap();
        // SAFETY: as in get_pages.
        unsafe { self.drv.put_pages(reg.ctx(), reg.sg_head()) };
        // MLNX_OFED clears its sg_head after put_pages.
        reg.set_sg_words([0; 4]);
        rs.pinned = false;
    }

    pub fn release(&self, reg: &Reg) {
        let mut rs = reg.state.lock().unwrap();
        assert!(!rs.released, "test bug: released twice");
        // SAFETY: as in get_pages; the context is dead afterwards and
        // `released` keeps the tests from using it again.
        unsafe { self.drv.release(reg.ctx()) };
        rs.released = true;
        drop(rs);
        self.sim().lock().regs.remove(&reg.core_context);
    }

    /// acquire + get_pages + dma_map, all expected to succeed.
    #[track_caller]
    pub fn reg_mr(&self, kind: ClientKind, addr: u64, size: u64) -> Arc<Reg> {
        let reg = self.acquire(kind, addr, size).expect("mine");
        self.get_pages(&reg).expect("get_pages");
        self.dma_map(&reg).expect("dma_map");
        reg
    }

    /// The core's deregistration: dma_unmap and put_pages unless the
    /// invalidation already did them, under the mapping lock; then
    /// release.
    pub fn dereg_mr(&self, reg: &Reg) {
        {
            let mut rs = reg.state.lock().unwrap();
            if rs.mapped {
                // SAFETY: as in get_pages.
                let r = unsafe { self.drv.dma_unmap(reg.ctx(), reg.sg_head()) };
                assert_eq!(r, Ok(()));
                rs.mapped = false;
            }
            if rs.pinned {
                // SAFETY: as in get_pages.
                unsafe { self.drv.put_pages(reg.ctx(), reg.sg_head()) };
                reg.set_sg_words([0; 4]);
                rs.pinned = false;
            }
        }
        self.release(reg);
    }
}

impl Default for Env {
    fn default() -> Env {
        Env::new()
    }
}

/// ENOMEM, re-exported for tests that inject it.
pub const INJECTED: Errno = ENOMEM;
