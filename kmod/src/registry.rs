//! Live contexts by ticket: what the NVIDIA free callbacks are given as
//! their data instead of a context pointer (docs/contracts.md, "The context
//! registry").
//!
//! A ticket is a sequence number, never 0 and never reused, so a callback
//! that outlives its context (NVIDIA 535 reports put_pages of a page table
//! its teardown already unlinked as success, and calls the callback later)
//! finds nothing instead of a later registration. Contexts are chained
//! through links they carry themselves ([`crate::context::Links`]) in a fixed table of
//! buckets chosen by the ticket's low bits: inserting and removing
//! allocate nothing and cost a few stores under the registry lock
//! ([`Platform::registry_lock`], the glue's spinlock). The kernel's IDR it
//! replaces cost about 400 instructions per registration
//! (docs/testing.md, "Where the 2-page excess lies").

use crate::context::Context;
use crate::platform::Platform;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Buckets in the table: a power of two. 4 KiB of pointers; with a few
/// thousand live registrations a lookup (free callbacks only) walks a
/// handful of contexts. Insert and remove never walk a chain.
pub const BUCKETS: usize = 512;

/// The table. Its state changes only under the registry lock.
pub struct Registry {
    /// The last ticket handed out.
    last_ticket: AtomicU64,
    buckets: [AtomicPtr<Context>; BUCKETS],
}

impl Default for Registry {
    fn default() -> Registry {
        Registry::new()
    }
}

fn bucket_of(ticket: u64) -> usize {
    (ticket as usize) & (BUCKETS - 1)
}

impl Registry {
    pub const fn new() -> Registry {
        Registry {
            last_ticket: AtomicU64::new(0),
            buckets: [const { AtomicPtr::new(ptr::null_mut()) }; BUCKETS],
        }
    }

    /// Gives `c` the next ticket (stored in `c.ticket`) and links it; from
    /// now on [`Registry::find`] finds it by that ticket. `c` must stay
    /// alive until [`Registry::remove`].
    pub fn insert<P: Platform>(&self, p: &P, c: &Context) -> u64 {
        let raw = ptr::from_ref(c).cast_mut();
        p.registry_lock();
        let ticket = self.last_ticket.load(Ordering::Relaxed) + 1;
        self.last_ticket.store(ticket, Ordering::Relaxed);
        c.ticket.store(ticket, Ordering::Release);
        let head = &self.buckets[bucket_of(ticket)];
        let first = head.load(Ordering::Relaxed);
        c.links.next.store(first, Ordering::Relaxed);
        c.links.prev.store(ptr::null_mut(), Ordering::Relaxed);
        // SAFETY: a linked context is alive: it is unlinked (under this
        // lock, held) before its last reference can be dropped.
        if let Some(first) = unsafe { first.as_ref() } {
            first.links.prev.store(raw, Ordering::Relaxed);
        }
        head.store(raw, Ordering::Relaxed);
        p.registry_unlock();
        ticket
    }

    /// Unlinks `c`, which [`Registry::insert`] linked and nobody has
    /// removed since.
    pub fn remove<P: Platform>(&self, p: &P, c: &Context) {
        p.registry_lock();
        let next = c.links.next.load(Ordering::Relaxed);
        let prev = c.links.prev.load(Ordering::Relaxed);
        // SAFETY: as in `insert`: linked contexts are alive under the lock.
        if let Some(next) = unsafe { next.as_ref() } {
            next.links.prev.store(prev, Ordering::Relaxed);
        }
        // SAFETY: as above.
        match unsafe { prev.as_ref() } {
            Some(prev) => prev.links.next.store(next, Ordering::Relaxed),
            None => self.buckets[bucket_of(c.ticket.load(Ordering::Acquire))]
                .store(next, Ordering::Relaxed),
        }
        p.registry_unlock();
    }

    /// The live context holding `ticket`, if any. The caller holds the
    /// registry lock, and must take its reference on the context before
    /// releasing it.
    pub fn find(&self, ticket: u64) -> Option<&Context> {
        let mut at = self.buckets[bucket_of(ticket)].load(Ordering::Relaxed);
        // SAFETY: linked contexts are alive while the caller holds the lock.
        while let Some(c) = unsafe { at.as_ref() } {
            if c.ticket.load(Ordering::Acquire) == ticket {
                return Some(c);
            }
            at = c.links.next.load(Ordering::Relaxed);
        }
        None
    }

    /// How many contexts are linked (a walk of every chain, for tests and
    /// diagnostics). Takes the registry lock.
    pub fn count<P: Platform>(&self, p: &P) -> usize {
        p.registry_lock();
        let mut n = 0;
        for head in &self.buckets {
            let mut at = head.load(Ordering::Relaxed);
            // SAFETY: linked contexts are alive under the lock, held.
            while let Some(c) = unsafe { at.as_ref() } {
                n += 1;
                at = c.links.next.load(Ordering::Relaxed);
            }
        }
        p.registry_unlock();
        n
    }
}
