//! The module's own peer memory counters: the seven per-client files
//! MLNX_OFED's core shows under `/sys/kernel/mm/memory_peers/<client>/`,
//! counted by nv_peer_mem where the core shows none (kernels that export no
//! `mm_kobj`; docs/contracts.md, "memory_peers without mm_kobj"). The core
//! counts in its umem code (peer_mem.c of MLNX_OFED 25.10); this module
//! counts the same events from the client's side of the same calls:
//!
//! - a registration counts as allocated when its `dma_map` succeeds, with
//!   the entries it mapped and the bytes of its range (the core: after
//!   `dma_map`, with `nents` and the umem's length);
//! - it counts as deallocated when its mapping ends, by `dma_unmap` or by
//!   the free callback's invalidation (the core: on unmap or invalidation);
//! - a free callback counts when it calls the core's invalidate callback
//!   (the core counts each call of its invalidate callback).
//!
//! Bytes are the pinned GPU range, whole 64 KiB pages; the core's are the
//! umem's length, which is less for a registration that does not start and
//! end on a 64 KiB boundary (docs/monitoring.md says so where it lists the
//! files).

use core::sync::atomic::{AtomicU64, Ordering};

/// One of the counter files, numbered as the glue's show function asks for
/// them (`nvpm_rs_peer_stat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Counter {
    AllocMrs = 0,
    DeallocMrs = 1,
    RegPages = 2,
    DeregPages = 3,
    RegBytes = 4,
    DeregBytes = 5,
    FreeCallbacks = 6,
}

impl Counter {
    pub const ALL: [Counter; 7] = [
        Counter::AllocMrs,
        Counter::DeallocMrs,
        Counter::RegPages,
        Counter::DeregPages,
        Counter::RegBytes,
        Counter::DeregBytes,
        Counter::FreeCallbacks,
    ];

    /// The counter numbered @raw, if any.
    pub fn from_raw(raw: u32) -> Option<Counter> {
        Counter::ALL.get(raw as usize).copied()
    }
}

/// One client's counters. Only ever added to, like the core's.
pub struct PeerStats {
    counters: [AtomicU64; 7],
}

impl PeerStats {
    pub const fn new() -> PeerStats {
        PeerStats {
            counters: [const { AtomicU64::new(0) }; 7],
        }
    }

    fn add(&self, counter: Counter, value: u64) {
        self.counters[counter as usize].fetch_add(value, Ordering::Relaxed);
    }

    /// A registration's `dma_map` succeeded with @pages entries over
    /// @bytes.
    pub fn mapped(&self, pages: u32, bytes: u64) {
        self.add(Counter::RegPages, pages.into());
        self.add(Counter::RegBytes, bytes);
        self.add(Counter::AllocMrs, 1);
    }

    /// That mapping ended.
    pub fn unmapped(&self, pages: u32, bytes: u64) {
        self.add(Counter::DeallocMrs, 1);
        self.add(Counter::DeregPages, pages.into());
        self.add(Counter::DeregBytes, bytes);
    }

    /// A free callback called the core's invalidate callback.
    pub fn free_callback(&self) {
        self.add(Counter::FreeCallbacks, 1);
    }

    pub fn get(&self, counter: Counter) -> u64 {
        self.counters[counter as usize].load(Ordering::Relaxed)
    }
}

impl Default for PeerStats {
    fn default() -> PeerStats {
        PeerStats::new()
    }
}
