//! The peer memory client: what each PeerDirect callback does, and module
//! load/unload. Behaviour follows Mellanox's nv_peer_mem 1.3 and NVIDIA's
//! nvidia-peermem (docs/contracts.md); where they leak or race, this code
//! closes the gap and says so.

use crate::context::Context;
use crate::errno::{EINVAL, ENOMEM, Errno};
use crate::params::{Clients, PERSISTENT_API_SUPPORT_DEFAULT, ParamError, Params};
use crate::peer_stats::{Counter, PeerStats};
use crate::platform::{
    ClientKind, FreeCallback, Level, NVIDIA_P2P_PAGE_SIZE_64KB, Platform,
    dma_mapping_version_compatible, version_compatible,
};
use crate::range::{GPU_PAGE_SIZE, GpuRange};
use crate::registry::Registry;
use core::ffi::c_void;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicU8, Ordering};

/// The answer to `acquire`.
#[derive(Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The range is GPU memory; the core keeps this context and calls
    /// `release` with it eventually.
    Mine(NonNull<c_void>),
    /// Not GPU memory (or not usable): the core asks the next client.
    NotMine,
}

/// Holds the client lock (see [`Platform::client_lock`]) until dropped.
#[must_use = "the client lock is released when the guard is dropped"]
struct ClientLockGuard<'a, P: Platform>(&'a P);

impl<P: Platform> Drop for ClientLockGuard<'_, P> {
    fn drop(&mut self) {
        self.0.client_unlock();
    }
}

fn lock_client<P: Platform>(p: &P) -> ClientLockGuard<'_, P> {
    p.client_lock();
    ClientLockGuard(p)
}

/// The module: the platform plus which clients are registered.
pub struct Driver<P: Platform> {
    platform: P,
    /// Live contexts by ticket, for the free callbacks.
    registry: Registry,
    /// Bit per [`ClientKind`] registered with the core.
    registered: AtomicU8,
    /// Each client's counters, by [`ClientKind`].
    stats: [PeerStats; 2],
}

fn bit(kind: ClientKind) -> u8 {
    1 << kind as u32
}

impl<P: Platform> Driver<P> {
    pub const fn new(platform: P) -> Driver<P> {
        Driver {
            platform,
            registry: Registry::new(),
            registered: AtomicU8::new(0),
            stats: [PeerStats::new(), PeerStats::new()],
        }
    }

    /// One of @kind's counters ([`crate::peer_stats`]).
    pub fn peer_stat(&self, kind: ClientKind, counter: Counter) -> u64 {
        self.stats[kind as usize].get(counter)
    }

    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// How many contexts are in the registry (see [`Registry::count`]).
    pub fn registered_contexts(&self) -> usize {
        self.registry.count(&self.platform)
    }

    /// Module load: validates the parameters, then registers the clients
    /// they select ([`Clients::to_register`]). If a registration fails the
    /// earlier ones are undone, so a failed load leaves nothing behind.
    pub fn init(
        &self,
        peerdirect_support: i32,
        persistent_api_support: i32,
        persistent_available: bool,
    ) -> Result<(), Errno> {
        let p = &self.platform;
        let params = match Params::from_raw(
            peerdirect_support,
            persistent_api_support,
            persistent_available,
        ) {
            Ok(params) => params,
            Err(ParamError::PeerDirectSupport(value)) => {
                p.log(
                    Level::Error,
                    "invalid peerdirect_support value (use 0 for MLNX_OFED >= 5.1, 1 for the legacy API of MLNX_OFED 4.9 LTS/5.0)",
                    value.into(),
                );
                return Err(EINVAL);
            }
            Err(ParamError::PersistentApiSupport(value)) => {
                p.log(
                    Level::Error,
                    "invalid persistent_api_support value (use 1 for the persistent client alone as nv_mem, 0 for the invalidating nv_mem plus the persistent nv_mem_nc)",
                    value.into(),
                );
                return Err(EINVAL);
            }
        };
        if params.clients == Clients::InvalidatingOnly
            && persistent_api_support == PERSISTENT_API_SUPPORT_DEFAULT
        {
            p.log(
                Level::Error,
                "the NVIDIA driver header has no persistent-pages API: registering the invalidating nv_mem client instead, persistent_api_support",
                persistent_api_support.into(),
            );
        }
        for &(kind, name) in params.clients.to_register() {
            if let Err(e) = p.register(kind, params.style, name) {
                p.log(
                    Level::Error,
                    "cannot register a peer memory client with the PeerDirect core; unregistering the others",
                    e.to_kernel().into(),
                );
                self.exit();
                return Err(e);
            }
            self.registered.fetch_or(bit(kind), Ordering::AcqRel);
        }
        self.publish_peer_files();
        Ok(())
    }

    /// Makes sure NCCL, UCX and NVSHMEM find the registered clients where
    /// they look, `/sys/kernel/mm/memory_peers/<client>/version`: the core
    /// made it (kernels that export `mm_kobj`), or the module makes it. A
    /// failure never fails the load (the clients work; only those
    /// consumers do not see them): it is said once, here, and in the
    /// glue's read-only `memory_peers` parameter.
    fn publish_peer_files(&self) {
        let p = &self.platform;
        // Made by the core or by the module: nothing to say (the
        // parameter says which).
        if let Err(e) = p.create_peer_files(self.registered.load(Ordering::Acquire)) {
            p.log(
                Level::Error,
                "cannot make /sys/kernel/mm/memory_peers/<client>/version, the file NCCL tests, and the PeerDirect core made none: NCCL will not use nv_peer_mem (it runs without GPUDirect RDMA through it); see /sys/module/nv_peer_mem/parameters/memory_peers",
                e.to_kernel().into(),
            );
        }
    }

    /// Module unload: unregisters what `init` registered, newest first.
    pub fn exit(&self) {
        self.platform.remove_peer_files();
        for kind in [ClientKind::Nc, ClientKind::Mem] {
            if self.registered.fetch_and(!bit(kind), Ordering::AcqRel) & bit(kind) != 0 {
                self.platform.unregister(kind);
            }
        }
    }

    /// Whether `kind` is registered.
    pub fn is_registered(&self, kind: ClientKind) -> bool {
        self.registered.load(Ordering::Acquire) & bit(kind) != 0
    }

    /// `acquire`: claims `[addr, addr + size)` if it is GPU memory, probed
    /// by pinning and unpinning its pages. A live context holds a module
    /// reference, so the module cannot be unloaded under the core.
    pub fn acquire(&self, kind: ClientKind, addr: u64, size: u64) -> Acquired {
        let p = &self.platform;
        let Some(range) = GpuRange::widen(addr, size) else {
            p.log(
                Level::Debug,
                "acquire: empty or overflowing range refused, size",
                size as i64,
            );
            return Acquired::NotMine;
        };
        // The context exists before the probe because its ticket is the
        // probe callback's data: memory freed between the probe's pin and
        // unpin makes the driver call that callback, which must free the
        // page table.
        let raw = p.alloc(size_of::<Context>(), align_of::<Context>()) as *mut Context;
        let Some(ctx) = NonNull::new(raw) else {
            p.log(
                Level::Error,
                "acquire: out of memory",
                ENOMEM.to_kernel().into(),
            );
            return Acquired::NotMine;
        };
        // SAFETY: `ctx` is a fresh allocation of the size and alignment of a
        // Context, owned by nobody else yet.
        unsafe { ctx.as_ptr().write(Context::new(kind, range)) };
        // SAFETY: initialised above; alive until its last reference goes.
        let c = unsafe { ctx.as_ref() };
        let ticket = self.registry.insert(p, c);
        c.in_registry.store(true, Ordering::Release);
        let data = ticket as usize as *mut c_void;
        if kind == ClientKind::Mem {
            return self.acquire_pinned(c, ctx, data);
        }
        if p.p2p_get_pages(
            range.start,
            range.len,
            &c.probe_page_table,
            FreeCallback::Probe,
            data,
        )
        .is_err()
        {
            self.forget(c);
            return Acquired::NotMine;
        }
        // Null: the probe callback already took the page table, the memory
        // is gone. A failed unpin means the callback is due (drivers before
        // 535) and will free the page table, so it is left to it.
        let probed = c.probe_page_table.load(Ordering::Acquire);
        let unpinned = if probed.is_null() {
            Err(EINVAL)
        } else {
            p.p2p_put_pages(range.start, probed)
        };
        if let Err(e) = unpinned {
            p.log(
                Level::Debug,
                "acquire: memory freed during the probe, nvidia_p2p_put_pages",
                e.to_kernel().into(),
            );
            if probed.is_null() {
                self.forget(c);
            } else {
                // The unpin failed with the table still pinned: the
                // driver calls the probe callback with this ticket when
                // the memory goes, maybe long after this "not mine".
                self.orphan(c, || c.probe_page_table.load(Ordering::SeqCst).is_null());
                self.put_ref(c);
            }
            return Acquired::NotMine;
        }
        // Unpinned: a late callback (535 reports an unlinked page table as
        // unpinned) must not free it again.
        c.probe_page_table.store(ptr::null_mut(), Ordering::Release);
        p.module_get();
        Acquired::Mine(ctx.cast())
    }

    /// `acquire` for `nv_mem`: pins the range with the invalidating free
    /// callback and keeps the pin for `get_pages`, so a registration pins
    /// once (docs/contracts.md, "The kept pin"). A free callback before
    /// `get_pages` revokes the registration; `release` unpins a range the
    /// core never passed to `get_pages`.
    fn acquire_pinned(&self, c: &Context, ctx: NonNull<Context>, data: *mut c_void) -> Acquired {
        let p = &self.platform;
        if let Err(e) = p.p2p_get_pages(
            c.range.start,
            c.range.len,
            &c.page_table,
            FreeCallback::Invalidate,
            data,
        ) {
            // The driver may have written (and freed) a table before failing.
            c.page_table.store(ptr::null_mut(), Ordering::Release);
            p.log(
                Level::Debug,
                "acquire: not GPU memory, nvidia_p2p_get_pages",
                e.to_kernel().into(),
            );
            self.forget(c);
            return Acquired::NotMine;
        }
        p.module_get();
        Acquired::Mine(ctx.cast())
    }

    /// The NVIDIA driver's free callback for `acquire`'s probe: the memory
    /// was freed between the probe's pin and unpin. Frees the probe's page
    /// table, as the driver requires, unless `acquire` unpinned it first.
    ///
    /// `data` is a ticket (see [`crate::registry`]); a ticket whose
    /// context is gone means there is nothing left to do.
    pub fn probe_free_callback(&self, data: *mut c_void) {
        let p = &self.platform;
        p.module_get();
        if let Some(c) = self.find(data) {
            let page_table = c.probe_page_table.swap(ptr::null_mut(), Ordering::SeqCst);
            if !page_table.is_null() {
                if let Err(e) = p.p2p_free_page_table(page_table) {
                    p.log(
                        Level::Error,
                        "probe free callback: nvidia_p2p_free_page_table failed",
                        e.to_kernel().into(),
                    );
                }
            }
            self.drop_orphan(c);
            self.callback_done(c);
        }
        p.module_put();
    }

    /// `nvidia_p2p_put_pages` failed on a page table the driver may still
    /// hold, with this context's ticket as its free callback's data (see
    /// [`Context::orphaned`]): keeps the context in the registry and the
    /// module loaded until that callback comes, so it never calls into an
    /// unloaded module. `callback_ran` says whether the callback has taken
    /// the table over already; then nothing is due and the orphan is
    /// dropped at once. Either this or the callback drops it, never both.
    fn orphan(&self, c: &Context, callback_ran: impl FnOnce() -> bool) {
        c.refs.fetch_add(1, Ordering::AcqRel);
        self.platform.module_get();
        // SeqCst with the callback's take of the table and its
        // `drop_orphan`: at least one side sees the other's write.
        c.orphaned.store(true, Ordering::SeqCst);
        if callback_ran() {
            self.drop_orphan(c);
        }
    }

    /// Drops what [`Driver::orphan`] kept, if it is still kept.
    fn drop_orphan(&self, c: &Context) {
        if c.orphaned.swap(false, Ordering::SeqCst) {
            self.leave_registry(c);
            self.put_ref(c);
            self.platform.module_put();
        }
    }

    /// Looks a free callback's ticket up, takes a reference on its context
    /// (so it stays alive while the callback uses it) and counts the
    /// callback as running on it until [`Driver::callback_done`], so that
    /// `release` can wait for it.
    fn find(&self, data: *mut c_void) -> Option<&Context> {
        let p = &self.platform;
        let ticket = data as usize as u64;
        p.registry_lock();
        // The ticket is the context's own: tickets are never reused, and
        // one whose context has left the registry finds none.
        let c = self.registry.find(ticket);
        if let Some(c) = c {
            c.refs.fetch_add(1, Ordering::AcqRel);
            c.callbacks_running.fetch_add(1, Ordering::AcqRel);
        }
        p.registry_unlock();
        c
    }

    fn callback_done(&self, c: &Context) {
        c.callbacks_running.fetch_sub(1, Ordering::AcqRel);
        self.put_ref(c);
    }

    /// Removes a context from the registry and drops the core's reference.
    fn forget(&self, c: &Context) {
        self.leave_registry(c);
        self.put_ref(c);
    }

    /// Removes the context's ticket from the registry, once.
    fn leave_registry(&self, c: &Context) {
        if c.in_registry.swap(false, Ordering::AcqRel) {
            self.registry.remove(&self.platform, c);
        }
    }

    /// Drops one reference; the last one frees the context.
    fn put_ref(&self, c: &Context) {
        if c.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
            let ptr = ptr::from_ref(c).cast_mut();
            // SAFETY: that was the last reference: the context is out of
            // the registry, so no callback can find it again, and every
            // holder of a reference has dropped it.
            unsafe { ptr::drop_in_place(ptr) };
            self.platform.free(ptr.cast());
        }
    }

    /// `get_pages`: the pages the core maps from now on. `nv_mem` hands over
    /// the pin `acquire` kept, with the free callback already installed
    /// (docs/contracts.md, "The kept pin"), and calls no driver; `nv_mem_nc`
    /// pins here, with persistent pages, which the driver never revokes.
    ///
    /// # Safety
    /// `ctx` is null or a context returned by `acquire` and not released.
    pub unsafe fn get_pages(&self, ctx: *mut c_void, core_context: u64) -> Result<(), Errno> {
        // SAFETY: the caller's contract.
        let Some(c) = (unsafe { context(ctx) }) else {
            return Err(EINVAL);
        };
        let p = &self.platform;
        c.core_context.store(core_context, Ordering::Release);
        if c.kind == ClientKind::Mem {
            // The pin `acquire` kept. A free callback since then took the
            // registration over and freed the page table: fail, as a pin
            // of freed memory would. (A callback from now on is dma_map's
            // to handle.)
            if c.in_callback.load(Ordering::SeqCst) {
                p.log(
                    Level::Debug,
                    "get_pages: GPU memory freed since acquire",
                    EINVAL.to_kernel().into(),
                );
                return Err(EINVAL);
            }
            c.pages_with_core.store(true, Ordering::Release);
            return Ok(());
        }
        match p.p2p_get_pages_persistent(c.range.start, c.range.len, &c.page_table) {
            Ok(()) => {
                c.pages_with_core.store(true, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                // The driver may have written (and freed) a table before failing.
                c.page_table.store(ptr::null_mut(), Ordering::Release);
                p.log(
                    Level::Error,
                    "get_pages: nvidia_p2p_get_pages failed",
                    e.to_kernel().into(),
                );
                Err(e)
            }
        }
    }

    /// `dma_map`: maps the pinned pages for `pci_dev` and describes them in
    /// `sg_head`, one entry per 64 KiB page. Refuses pages of any other size
    /// and mappings of an incompatible version; whatever it mapped before
    /// refusing is unmapped again, and `sg_head` is left untouched.
    ///
    /// # Safety
    /// `ctx` is null or a live context; `sg_head` is the core's sg table.
    pub unsafe fn dma_map(
        &self,
        ctx: *mut c_void,
        sg_head: *mut c_void,
        pci_dev: *mut c_void,
    ) -> Result<u32, Errno> {
        // SAFETY: the caller's contract.
        let Some(c) = (unsafe { context(ctx) }) else {
            return Err(EINVAL);
        };
        let p = &self.platform;
        if pci_dev.is_null() || sg_head.is_null() {
            p.log(
                Level::Error,
                "dma_map: no PCI device or sg table",
                EINVAL.to_kernel().into(),
            );
            return Err(EINVAL);
        }
        let (page_table, revoked) = {
            let _guard = lock_client(p);
            (
                c.page_table.load(Ordering::Acquire),
                c.in_callback.load(Ordering::Acquire),
            )
        };
        if revoked {
            // Freed between get_pages and now: the page table is gone.
            p.log(
                Level::Debug,
                "dma_map: GPU memory freed before dma_map",
                EINVAL.to_kernel().into(),
            );
            return Err(EINVAL);
        }
        if page_table.is_null() || !c.pages_with_core.load(Ordering::Acquire) {
            p.log(
                Level::Error,
                "dma_map: called without pinned pages",
                EINVAL.to_kernel().into(),
            );
            return Err(EINVAL);
        }
        // The page table is the one structure of the driver's this module
        // reads fields of (page_size); nv-p2p.h says a table whose major
        // version differs from the one the reader was built for has
        // another layout. Refuse it and name the fix instead of reading a
        // field that may have moved (docs/contracts.md, "Versioned
        // structures"). The pages stay pinned until the core's put_pages.
        let (found, built) = p.page_table_version(page_table);
        if !version_compatible(found, built) {
            p.log(
                Level::Error,
                "dma_map: the NVIDIA driver's nvidia_p2p_page_table layout is not the one nv_peer_mem was built for; rebuild nv_peer_mem against the installed driver (dkms autoinstall); the driver's page table major version",
                (found >> 16).into(),
            );
            return Err(EINVAL);
        }
        let page_size = p.page_table_page_size(page_table);
        if page_size != NVIDIA_P2P_PAGE_SIZE_64KB {
            p.log(
                Level::Error,
                "dma_map: GPU pages are not 64 KiB, page size type",
                page_size.into(),
            );
            return Err(EINVAL);
        }
        let mapping = match p.p2p_dma_map(pci_dev, page_table) {
            Ok(mapping) => mapping,
            Err(e) => {
                p.log(
                    Level::Error,
                    "dma_map: nvidia_p2p_dma_map_pages failed",
                    e.to_kernel().into(),
                );
                return Err(e);
            }
        };
        // Published at once, so that a free callback from now on finds the
        // mapping, invalidates and frees it. Such a callback waits in the
        // core's invalidation for the mapping lock this thread's caller
        // holds; nothing below waits for the driver, so it cannot deadlock.
        c.dma_mapping.store(mapping, Ordering::Release);
        let version = p.dma_mapping_version(mapping);
        if !dma_mapping_version_compatible(version) {
            p.log(
                Level::Error,
                "dma_map: incompatible nvidia_p2p_dma_mapping version",
                version.into(),
            );
            self.take_and_unmap(c, pci_dev, page_table);
            return Err(EINVAL);
        }
        let nmap = match p.sg_fill(sg_head, mapping, GPU_PAGE_SIZE, c.saved_sg.get()) {
            Ok(nmap) => nmap,
            Err(e) => {
                p.log(
                    Level::Error,
                    "dma_map: cannot allocate the sg table",
                    e.to_kernel().into(),
                );
                self.take_and_unmap(c, pci_dev, page_table);
                return Err(e);
            }
        };
        c.pci_dev.store(pci_dev, Ordering::Release);
        c.sg_allocated.store(true, Ordering::Release);
        // A free callback that ran since the mapping was made took it over
        // (or, if it ran before the publication, the driver frees the
        // mapping with its page table): the memory is gone, fail.
        let guard = lock_client(p);
        let revoked = c.in_callback.load(Ordering::Acquire);
        if !revoked {
            // Counted under the client lock, as the mapping's end is.
            c.counted_pages.store(nmap, Ordering::Release);
            self.stats[c.kind as usize].mapped(nmap, c.range.len);
        }
        drop(guard);
        if revoked {
            if c.sg_allocated.swap(false, Ordering::AcqRel) {
                p.sg_free(sg_head);
            }
            p.log(
                Level::Debug,
                "dma_map: GPU memory freed during dma_map",
                EINVAL.to_kernel().into(),
            );
            return Err(EINVAL);
        }
        Ok(nmap)
    }

    /// Takes a published mapping back (unless the free callback took it)
    /// and unmaps it, under the client lock. nvidia_p2p_dma_unmap_pages
    /// takes no lock of the driver's, so holding ours across it cannot
    /// deadlock with a free callback.
    fn take_and_unmap(&self, c: &Context, pci_dev: *mut c_void, page_table: *mut c_void) {
        let _guard = lock_client(&self.platform);
        let mapping = c.dma_mapping.swap(ptr::null_mut(), Ordering::AcqRel);
        if !mapping.is_null() {
            self.count_unmapped(c);
            self.unmap_logged(pci_dev, page_table, mapping);
        }
    }

    /// Counts the end of the context's counted mapping, once. Called under
    /// the client lock by whoever took the mapping.
    fn count_unmapped(&self, c: &Context) {
        let pages = c.counted_pages.swap(0, Ordering::AcqRel);
        if pages != 0 {
            self.stats[c.kind as usize].unmapped(pages, c.range.len);
        }
    }

    fn unmap_logged(&self, pci_dev: *mut c_void, page_table: *mut c_void, mapping: *mut c_void) {
        if let Err(e) = self.platform.p2p_dma_unmap(pci_dev, page_table, mapping) {
            self.platform.log(
                Level::Error,
                "nvidia_p2p_dma_unmap_pages failed",
                e.to_kernel().into(),
            );
        }
    }

    /// `dma_unmap`: undoes `dma_map`. Does nothing when called from inside
    /// the free callback (the driver frees the mapping itself there) or
    /// when the callback already took the mapping.
    ///
    /// # Safety
    /// `ctx` is null or a live context; `sg_head` is the core's sg table.
    pub unsafe fn dma_unmap(&self, ctx: *mut c_void, sg_head: *mut c_void) -> Result<(), Errno> {
        // SAFETY: the caller's contract.
        let Some(c) = (unsafe { context(ctx) }) else {
            return Err(EINVAL);
        };
        let p = &self.platform;
        if !self.same_sg_table(c, sg_head) {
            p.log(
                Level::Error,
                "dma_unmap: sg table differs from the one dma_map built",
                EINVAL.to_kernel().into(),
            );
            return Err(EINVAL);
        }
        // Called by the core from inside this registration's invalidation
        // (legacy clients): the free callback frees the mapping.
        if c.callback_task.load(Ordering::Acquire) == p.current_task() {
            return Ok(());
        }
        // Under the client lock (see `take_and_unmap`), so the free callback
        // cannot take the mapping (and the driver free it) while the driver
        // unmaps it. peer_mem.h: dma_unmap "Must return 0"; the driver's
        // error is logged, the mapping not retried (the driver tore it down
        // as far as it could).
        self.take_and_unmap(
            c,
            c.pci_dev.load(Ordering::Acquire),
            c.page_table.load(Ordering::Acquire),
        );
        Ok(())
    }

    /// `put_pages`: unpins the pages (unless called from inside the free
    /// callback) and frees the sg table `dma_map` built.
    ///
    /// # Safety
    /// `ctx` is null or a live context; `sg_head` is the core's sg table.
    pub unsafe fn put_pages(&self, ctx: *mut c_void, sg_head: *mut c_void) {
        // SAFETY: the caller's contract.
        let Some(c) = (unsafe { context(ctx) }) else {
            return;
        };
        let p = &self.platform;
        if !self.same_sg_table(c, sg_head) {
            p.log(
                Level::Error,
                "put_pages: sg table differs from the one dma_map built",
                EINVAL.to_kernel().into(),
            );
            return;
        }
        // From inside this registration's invalidation (legacy clients), or
        // once the free callback took the registration over, the callback
        // frees the page table. The decision is made under the client lock;
        // the driver call is made outside it: nvidia_p2p_put_pages takes the
        // driver's lock, which the driver holds while it runs a free
        // callback (which takes the client lock).
        if c.callback_task.load(Ordering::Acquire) != p.current_task() {
            self.unpin(c);
        }
        if c.sg_allocated.swap(false, Ordering::AcqRel) {
            p.sg_free(sg_head);
        }
    }

    /// Unpins the registration's pages, unless the free callback took them
    /// over: it frees the page table then.
    fn unpin(&self, c: &Context) {
        let p = &self.platform;
        let page_table = {
            let _guard = lock_client(p);
            if c.in_callback.load(Ordering::Acquire) {
                ptr::null_mut()
            } else {
                c.page_table.load(Ordering::Acquire)
            }
        };
        if !page_table.is_null() {
            let result = match c.kind {
                ClientKind::Mem => p.p2p_put_pages(c.range.start, page_table),
                ClientKind::Nc => p.p2p_put_pages_persistent(c.range.start, page_table),
            };
            if let Err(e) = result {
                p.log(
                    Level::Debug,
                    "put_pages: nvidia_p2p_put_pages failed",
                    e.to_kernel().into(),
                );
                // 535 reports a table a cudaFree took as unpinned (0), so
                // a failure (-ENOMEM before the driver reached RM) leaves
                // the table pinned, its free callback due.
                if c.kind == ClientKind::Mem {
                    self.orphan(c, || {
                        let _guard = lock_client(p);
                        c.in_callback.load(Ordering::Acquire)
                    });
                }
            }
        }
    }

    /// `get_page_size`: the GPU page size, 64 KiB.
    pub fn get_page_size(&self) -> u64 {
        GPU_PAGE_SIZE
    }

    /// `release`: frees the context and drops its module reference.
    ///
    /// # Safety
    /// `ctx` is null or a live context; it is dead afterwards.
    pub unsafe fn release(&self, ctx: *mut c_void) {
        // SAFETY: the caller's contract.
        let Some(c) = (unsafe { context(ctx) }) else {
            return;
        };
        let p = &self.platform;
        // Acquired but never passed to get_pages (the core's error paths
        // between acquire and get_pages, or a get_pages that found the
        // memory freed): the pin acquire kept is still ours to put.
        if c.kind == ClientKind::Mem && !c.pages_with_core.load(Ordering::Acquire) {
            self.unpin(c);
        }
        // No free callback can find the context after this; one that did
        // holds a reference and counts as running. An orphan (a failed
        // put_pages) stays findable: its callback is still due.
        if !c.orphaned.load(Ordering::SeqCst) {
            self.leave_registry(c);
        }
        // MLNX_OFED's core frees its side of the registration as soon as
        // release returns, while an invalidation it is running for this
        // registration may still read it (peer_mem.c: "release() can be
        // called concurrently with invalidate. The client must protect
        // itself"): wait for running free callbacks. They never wait for
        // anything the caller holds (release runs without the core's locks).
        while c.callbacks_running.load(Ordering::Acquire) != 0 {
            p.yield_now();
        }
        if c.sg_allocated.swap(false, Ordering::AcqRel) {
            p.sg_free(c.saved_sg.get().cast());
        }
        self.put_ref(c);
        p.module_put();
    }

    /// The NVIDIA driver's free callback for `nv_mem` registrations: the GPU
    /// memory is going away (cudaFree, process exit). Tells the core through
    /// its invalidate callback, then frees the dma mapping and page table as
    /// the driver requires. Calls the core makes from inside the invalidate
    /// callback find `in_callback` set and do nothing.
    ///
    /// Unlike the original, a registration freed before `dma_map` still
    /// invalidates and frees its page table (the original skipped both and
    /// leaked the page table).
    ///
    /// `data` is the registration's ticket (see
    /// [`crate::registry`]); the callback holds a reference on the
    /// context while it runs, so a concurrent `release` cannot free it.
    pub fn free_callback(&self, data: *mut c_void) {
        let p = &self.platform;
        p.module_get();
        // No context: the core released this registration already (NVIDIA
        // 535 reports put_pages of an unlinked page table as success, and
        // calls this afterwards); it has nothing left to invalidate.
        if let Some(c) = self.find(data) {
            // An orphan's registration is gone from the core, and with it
            // its mapping (dma_unmap came before the failed put_pages), so
            // `invalidate` only frees the page table.
            self.invalidate(c);
            self.drop_orphan(c);
            self.callback_done(c);
        }
        p.module_put();
    }

    fn invalidate(&self, c: &Context) {
        let p = &self.platform;
        // Take the registration over under the client lock: from here on
        // dma_map, dma_unmap and put_pages leave the driver alone.
        let (page_table, mapping) = {
            let _guard = lock_client(p);
            c.in_callback.store(true, Ordering::Release);
            let mapping = c.dma_mapping.swap(ptr::null_mut(), Ordering::AcqRel);
            if !mapping.is_null() {
                self.count_unmapped(c);
            }
            (c.page_table.load(Ordering::Acquire), mapping)
        };
        // Only a mapped registration can be in use by the HCA. Before
        // dma_map has published its mapping the core still holds the
        // registration's mapping lock (from before get_pages until the HCA
        // arms invalidation) and may be waiting in dma_map_pages for the
        // driver lock this callback runs under: invalidating then would
        // deadlock. The registration fails in dma_map instead.
        if !mapping.is_null() {
            c.callback_task.store(p.current_task(), Ordering::Release);
            self.stats[c.kind as usize].free_callback();
            p.invalidate(c.core_context.load(Ordering::Acquire));
            c.callback_task.store(ptr::null_mut(), Ordering::Release);
            if let Err(e) = p.p2p_free_dma_mapping(mapping) {
                p.log(
                    Level::Error,
                    "free callback: nvidia_p2p_free_dma_mapping failed",
                    e.to_kernel().into(),
                );
            }
        }
        if !page_table.is_null() {
            if let Err(e) = p.p2p_free_page_table(page_table) {
                p.log(
                    Level::Error,
                    "free callback: nvidia_p2p_free_page_table failed",
                    e.to_kernel().into(),
                );
            }
        }
    }

    /// Whether `sg_head` is the table this context's `dma_map` built (or,
    /// before any `dma_map`, any table: the core's is still untouched then).
    fn same_sg_table(&self, c: &Context, sg_head: *mut c_void) -> bool {
        if !c.sg_allocated.load(Ordering::Acquire) {
            return true;
        }
        self.platform.sg_matches(sg_head, c.saved_sg.get())
    }
}

/// # Safety
/// `ctx` is null or points to a live [`Context`].
unsafe fn context<'a>(ctx: *mut c_void) -> Option<&'a Context> {
    // SAFETY: the caller's contract; null is mapped to None.
    unsafe { ctx.cast::<Context>().as_ref() }
}
