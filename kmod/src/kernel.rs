//! The kernel side of the crate: [`Platform`] implemented over the C glue's
//! helpers (`glue/nv_peer_mem_glue.h`), and the `extern "C"` entry points
//! the glue's trampolines call. Compiled only into the module
//! (`--cfg nvpm_kernel`).

use crate::client::{Acquired, Driver};
use crate::errno::Errno;
use crate::peer_stats::Counter;
use crate::platform::{
    ClientKind, FreeCallback, Level, PeerFiles, Platform, RegistrationStyle, SavedSgTable,
};
use core::ffi::c_void;
use core::sync::atomic::AtomicPtr;

/// Raw helpers of the C glue. Each wraps one kernel or vendor call, or one
/// struct field access, that Rust cannot make portably across kernel
/// versions. Return values follow the kernel convention (0 or -errno).
mod ffi {
    use core::ffi::c_void;
    unsafe extern "C" {
        pub fn nvpm_c_p2p_get_pages(
            va: u64,
            len: u64,
            slot: *mut *mut c_void,
            invalidate: u32,
            data: *mut c_void,
        ) -> i32;
        pub fn nvpm_c_p2p_put_pages(va: u64, page_table: *mut c_void) -> i32;
        pub fn nvpm_c_p2p_get_pages_persistent(va: u64, len: u64, slot: *mut *mut c_void) -> i32;
        pub fn nvpm_c_p2p_put_pages_persistent(va: u64, page_table: *mut c_void) -> i32;
        pub fn nvpm_c_page_table_page_size(page_table: *mut c_void) -> u32;
        pub fn nvpm_c_page_table_version(page_table: *mut c_void) -> u32;
        pub fn nvpm_c_page_table_version_built() -> u32;
        pub fn nvpm_c_p2p_dma_map(
            pci_dev: *mut c_void,
            page_table: *mut c_void,
            mapping: *mut *mut c_void,
        ) -> i32;
        pub fn nvpm_c_p2p_dma_unmap(
            pci_dev: *mut c_void,
            page_table: *mut c_void,
            mapping: *mut c_void,
        ) -> i32;
        pub fn nvpm_c_dma_mapping_version(mapping: *mut c_void) -> u32;
        pub fn nvpm_c_p2p_free_dma_mapping(mapping: *mut c_void) -> i32;
        pub fn nvpm_c_p2p_free_page_table(page_table: *mut c_void) -> i32;
        pub fn nvpm_c_sg_fill(
            sg_head: *mut c_void,
            mapping: *mut c_void,
            page_size: u64,
            saved: *mut c_void,
            nmap: *mut u32,
        ) -> i32;
        pub fn nvpm_c_sg_matches(sg_head: *mut c_void, saved: *const c_void) -> i32;
        pub fn nvpm_c_sg_free(table: *mut c_void);
        pub fn nvpm_c_invalidate(core_context: u64);
        pub fn nvpm_c_register(kind: u32, style: u32, name: *const u8, len: usize) -> i32;
        pub fn nvpm_c_unregister(kind: u32);
        pub fn nvpm_c_peer_files_create(kinds: u32) -> i32;
        pub fn nvpm_c_peer_files_remove();
        pub fn nvpm_c_registry_lock();
        pub fn nvpm_c_client_lock();
        pub fn nvpm_c_client_unlock();
        pub fn nvpm_c_current_task() -> *mut c_void;
        pub fn nvpm_c_yield();
        pub fn nvpm_c_registry_unlock();
        pub fn nvpm_c_alloc(size: usize) -> *mut c_void;
        pub fn nvpm_c_free(ptr: *mut c_void);
        pub fn nvpm_c_module_get();
        pub fn nvpm_c_module_put();
        pub fn nvpm_c_log(level: u32, what: *const u8, len: usize, value: i64);
        /// The kernel's `panic()`, declared noreturn so objtool sees the
        /// call ends the function (see docs/kmod-build.md).
        pub fn panic(fmt: *const u8, ...) -> !;
    }
}

/// The kernel: stateless, all state is in the glue's statics.
pub struct Kernel;

// Each method below is one FFI call. SAFETY, for all of them at once: the
// glue helpers accept any pointer the logic passes (the handles the driver,
// core or allocator returned, or null where documented) and the slot
// pointers come from live `AtomicPtr`s, whose memory layout is that of a
// `*mut c_void` the C side writes with one aligned store.
impl Platform for Kernel {
    fn p2p_get_pages(
        &self,
        va: u64,
        len: u64,
        slot: &AtomicPtr<c_void>,
        callback: FreeCallback,
        data: *mut c_void,
    ) -> Result<(), Errno> {
        // SAFETY: see the impl comment.
        Errno::check(unsafe {
            ffi::nvpm_c_p2p_get_pages(va, len, slot.as_ptr(), callback as u32, data)
        })
    }
    fn p2p_put_pages(&self, va: u64, page_table: *mut c_void) -> Result<(), Errno> {
        // SAFETY: see the impl comment.
        Errno::check(unsafe { ffi::nvpm_c_p2p_put_pages(va, page_table) })
    }
    fn p2p_get_pages_persistent(
        &self,
        va: u64,
        len: u64,
        slot: &AtomicPtr<c_void>,
    ) -> Result<(), Errno> {
        // SAFETY: see the impl comment.
        Errno::check(unsafe { ffi::nvpm_c_p2p_get_pages_persistent(va, len, slot.as_ptr()) })
    }
    fn p2p_put_pages_persistent(&self, va: u64, page_table: *mut c_void) -> Result<(), Errno> {
        // SAFETY: see the impl comment.
        Errno::check(unsafe { ffi::nvpm_c_p2p_put_pages_persistent(va, page_table) })
    }
    fn page_table_page_size(&self, page_table: *mut c_void) -> u32 {
        // SAFETY: see the impl comment; page_table is non-null here.
        unsafe { ffi::nvpm_c_page_table_page_size(page_table) }
    }
    fn page_table_version(&self, page_table: *mut c_void) -> (u32, u32) {
        // SAFETY: see the impl comment; page_table is non-null here. The
        // second call reads a constant of the glue's build.
        unsafe {
            (
                ffi::nvpm_c_page_table_version(page_table),
                ffi::nvpm_c_page_table_version_built(),
            )
        }
    }
    fn p2p_dma_map(
        &self,
        pci_dev: *mut c_void,
        page_table: *mut c_void,
    ) -> Result<*mut c_void, Errno> {
        let mut mapping = core::ptr::null_mut();
        // SAFETY: see the impl comment; `mapping` is a local out-parameter.
        Errno::check(unsafe { ffi::nvpm_c_p2p_dma_map(pci_dev, page_table, &mut mapping) })?;
        Ok(mapping)
    }
    fn p2p_dma_unmap(
        &self,
        pci_dev: *mut c_void,
        page_table: *mut c_void,
        mapping: *mut c_void,
    ) -> Result<(), Errno> {
        // SAFETY: see the impl comment.
        Errno::check(unsafe { ffi::nvpm_c_p2p_dma_unmap(pci_dev, page_table, mapping) })
    }
    fn dma_mapping_version(&self, mapping: *mut c_void) -> u32 {
        // SAFETY: see the impl comment; mapping is non-null here.
        unsafe { ffi::nvpm_c_dma_mapping_version(mapping) }
    }
    fn p2p_free_dma_mapping(&self, mapping: *mut c_void) -> Result<(), Errno> {
        // SAFETY: see the impl comment.
        Errno::check(unsafe { ffi::nvpm_c_p2p_free_dma_mapping(mapping) })
    }
    fn p2p_free_page_table(&self, page_table: *mut c_void) -> Result<(), Errno> {
        // SAFETY: see the impl comment.
        Errno::check(unsafe { ffi::nvpm_c_p2p_free_page_table(page_table) })
    }
    fn sg_fill(
        &self,
        sg_head: *mut c_void,
        mapping: *mut c_void,
        page_size: u64,
        saved: *mut SavedSgTable,
    ) -> Result<u32, Errno> {
        let mut nmap = 0u32;
        // SAFETY: see the impl comment; `saved` points into a live context
        // and is large enough for a struct sg_table (checked by the glue).
        Errno::check(unsafe {
            ffi::nvpm_c_sg_fill(sg_head, mapping, page_size, saved.cast(), &mut nmap)
        })?;
        Ok(nmap)
    }
    fn sg_matches(&self, sg_head: *mut c_void, saved: *const SavedSgTable) -> bool {
        // SAFETY: see the impl comment.
        unsafe { ffi::nvpm_c_sg_matches(sg_head, saved.cast()) != 0 }
    }
    fn sg_free(&self, table: *mut c_void) {
        // SAFETY: see the impl comment.
        unsafe { ffi::nvpm_c_sg_free(table) }
    }
    fn invalidate(&self, core_context: u64) {
        // SAFETY: see the impl comment.
        unsafe { ffi::nvpm_c_invalidate(core_context) }
    }
    fn register(
        &self,
        kind: ClientKind,
        style: RegistrationStyle,
        name: &'static str,
    ) -> Result<(), Errno> {
        // SAFETY: see the impl comment; the glue copies at most `len` bytes
        // of `name` (a live static string) and refuses names too long.
        Errno::check(unsafe {
            ffi::nvpm_c_register(kind as u32, style as u32, name.as_ptr(), name.len())
        })
    }
    fn unregister(&self, kind: ClientKind) {
        // SAFETY: see the impl comment.
        unsafe { ffi::nvpm_c_unregister(kind as u32) }
    }
    fn create_peer_files(&self, kinds: u8) -> Result<PeerFiles, Errno> {
        // SAFETY: see the impl comment; called from module init, after the
        // registrations, in process context.
        let ret = unsafe { ffi::nvpm_c_peer_files_create(kinds.into()) };
        if ret == PeerFiles::Core as i32 {
            Ok(PeerFiles::Core)
        } else {
            Errno::check(ret).map(|()| PeerFiles::Module)
        }
    }
    fn remove_peer_files(&self) {
        // SAFETY: see the impl comment; a no-op when nothing was made.
        unsafe { ffi::nvpm_c_peer_files_remove() }
    }
    fn registry_lock(&self) {
        // SAFETY: see the impl comment; the logic pairs it with unlock.
        unsafe { ffi::nvpm_c_registry_lock() }
    }
    fn registry_unlock(&self) {
        // SAFETY: see the impl comment.
        unsafe { ffi::nvpm_c_registry_unlock() }
    }
    fn client_lock(&self) {
        // SAFETY: see the impl comment; the logic pairs it with unlock
        // through ClientLockGuard, in process context.
        unsafe { ffi::nvpm_c_client_lock() }
    }
    fn client_unlock(&self) {
        // SAFETY: see the impl comment; called only by the guard's drop.
        unsafe { ffi::nvpm_c_client_unlock() }
    }
    fn current_task(&self) -> *mut c_void {
        // SAFETY: reads `current`; no arguments.
        unsafe { ffi::nvpm_c_current_task() }
    }
    fn yield_now(&self) {
        // SAFETY: sleeps one tick; callers are in process context.
        unsafe { ffi::nvpm_c_yield() }
    }
    fn alloc(&self, size: usize, align: usize) -> *mut u8 {
        // kmalloc aligns to at least 8 bytes (ARCH_KMALLOC_MINALIGN), all a
        // Context needs; refuse anything stricter rather than misalign it.
        if align > 8 {
            return core::ptr::null_mut();
        }
        // SAFETY: see the impl comment.
        unsafe { ffi::nvpm_c_alloc(size).cast() }
    }
    fn free(&self, ptr: *mut u8) {
        // SAFETY: see the impl comment.
        unsafe { ffi::nvpm_c_free(ptr.cast()) }
    }
    fn module_get(&self) {
        // SAFETY: see the impl comment.
        unsafe { ffi::nvpm_c_module_get() }
    }
    fn module_put(&self) {
        // SAFETY: see the impl comment.
        unsafe { ffi::nvpm_c_module_put() }
    }
    fn log(&self, level: Level, what: &'static str, value: i64) {
        // SAFETY: see the impl comment; the glue prints exactly `len` bytes.
        unsafe { ffi::nvpm_c_log(level as u32, what.as_ptr(), what.len(), value) }
    }
}

static DRIVER: Driver<Kernel> = Driver::new(Kernel);

fn kind(raw: u32) -> ClientKind {
    if raw == ClientKind::Nc as u32 {
        ClientKind::Nc
    } else {
        ClientKind::Mem
    }
}

// The entry points below are called by the glue's trampolines with the
// arguments the PeerDirect core or the NVIDIA driver gave them.

#[unsafe(no_mangle)]
pub extern "C" fn nvpm_rs_init(
    peerdirect_support: i32,
    persistent_api_support: i32,
    persistent_available: u32,
) -> i32 {
    match DRIVER.init(
        peerdirect_support,
        persistent_api_support,
        persistent_available != 0,
    ) {
        Ok(()) => 0,
        Err(e) => e.to_kernel(),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvpm_rs_exit() {
    DRIVER.exit();
}

/// One of a client's counter files (the glue's show function); an unknown
/// counter reads 0.
#[unsafe(no_mangle)]
pub extern "C" fn nvpm_rs_peer_stat(kind_raw: u32, counter_raw: u32) -> u64 {
    Counter::from_raw(counter_raw).map_or(0, |c| DRIVER.peer_stat(kind(kind_raw), c))
}

/// # Safety
/// `client_context` is a valid out-pointer (the core's).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvpm_rs_acquire(
    kind_raw: u32,
    addr: u64,
    size: u64,
    client_context: *mut *mut c_void,
) -> i32 {
    if client_context.is_null() {
        return 0;
    }
    match DRIVER.acquire(kind(kind_raw), addr, size) {
        Acquired::Mine(ctx) => {
            // SAFETY: checked non-null above; the core passes its own
            // out-parameter.
            unsafe { client_context.write(ctx.as_ptr()) };
            1
        }
        Acquired::NotMine => 0,
    }
}

/// # Safety
/// `ctx` is a context from `nvpm_rs_acquire`, not yet released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvpm_rs_get_pages(ctx: *mut c_void, core_context: u64) -> i32 {
    // SAFETY: the caller's contract is get_pages' contract.
    match unsafe { DRIVER.get_pages(ctx, core_context) } {
        Ok(()) => 0,
        Err(e) => e.to_kernel(),
    }
}

/// # Safety
/// `ctx` is a live context; `nmap` a valid out-pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvpm_rs_dma_map(
    ctx: *mut c_void,
    sg_head: *mut c_void,
    pci_dev: *mut c_void,
    nmap: *mut i32,
) -> i32 {
    // SAFETY: the caller's contract is dma_map's contract.
    match unsafe { DRIVER.dma_map(ctx, sg_head, pci_dev) } {
        Ok(n) => {
            if !nmap.is_null() {
                // SAFETY: checked non-null; the core's out-parameter.
                unsafe { nmap.write(i32::try_from(n).unwrap_or(i32::MAX)) };
            }
            0
        }
        Err(e) => e.to_kernel(),
    }
}

/// # Safety
/// `ctx` is a live context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvpm_rs_dma_unmap(ctx: *mut c_void, sg_head: *mut c_void) -> i32 {
    // SAFETY: the caller's contract is dma_unmap's contract.
    match unsafe { DRIVER.dma_unmap(ctx, sg_head) } {
        Ok(()) => 0,
        Err(e) => e.to_kernel(),
    }
}

/// # Safety
/// `ctx` is a live context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvpm_rs_put_pages(ctx: *mut c_void, sg_head: *mut c_void) {
    // SAFETY: the caller's contract is put_pages' contract.
    unsafe { DRIVER.put_pages(ctx, sg_head) }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvpm_rs_get_page_size() -> u64 {
    DRIVER.get_page_size()
}

/// # Safety
/// `ctx` is a live context; dead afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvpm_rs_release(ctx: *mut c_void) {
    // SAFETY: the caller's contract is release's contract.
    unsafe { DRIVER.release(ctx) }
}

/// `data` is the ticket `nvpm_rs_get_pages` gave the driver.
#[unsafe(no_mangle)]
pub extern "C" fn nvpm_rs_free_callback(data: *mut c_void) {
    DRIVER.free_callback(data)
}

/// `data` is the ticket `nvpm_rs_acquire` gave the probe's get_pages.
#[unsafe(no_mangle)]
pub extern "C" fn nvpm_rs_probe_free_callback(data: *mut c_void) {
    DRIVER.probe_free_callback(data)
}

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The logic does not panic by design (no unwrap on kernel values, no
    // indexing); reaching this is a bug, and the kernel's panic is the only
    // safe outcome for code that cannot unwind.
    // SAFETY: a NUL-terminated format without conversions.
    unsafe { ffi::panic(c"nv_peer_mem: Rust panic\n".as_ptr().cast()) }
}
