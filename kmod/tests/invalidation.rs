//! GPU memory freed under a live registration: the NVIDIA free callback
//! invalidates through the core exactly once; the core's dma_unmap and
//! put_pages from inside the callback do nothing; the callback frees the
//! mapping and the page table exactly once; the normal teardown afterwards
//! is safe.

mod common;

use common::{Call, Env, PAGE, PtState};
use nv_peer_mem::ClientKind;
use nv_peer_mem::registry::BUCKETS;

/// Under both registration styles (the double's core unmaps from inside
/// the callback in both).
fn styles() -> [Env; 2] {
    [Env::with_style(0), Env::with_style(1)]
}

#[test]
fn free_under_live_registration_invalidates_once() {
    for (legacy, env) in [false, true].into_iter().zip(styles()) {
        let sim = env.sim();
        let va = sim.cuda_malloc(4 * PAGE);
        let reg = env.reg_mr(ClientKind::Mem, va + 3, 3 * PAGE);
        sim.take_calls();

        sim.cuda_free(va);
        assert_eq!(
            sim.invalidations(),
            [reg.core_context],
            "exactly once, with get_pages' core context"
        );
        let inside: &[Call] = if legacy {
            // from inside: dma_unmap and put_pages check the table and
            // touch nothing of the driver's; put_pages frees the sg table
            &[Call::SgMatches, Call::SgMatches, Call::SgFree]
        } else {
            // PEER_MEM_INVALIDATE_UNMAPS: the core calls neither
            &[]
        };
        let mut want = vec![Call::ModuleGet, Call::Invalidate(reg.core_context)];
        want.extend_from_slice(inside);
        want.extend([Call::FreeDmaMapping, Call::FreePageTable, Call::ModulePut]);
        assert_eq!(sim.take_calls(), want, "legacy: {legacy}");
        assert_eq!(
            sim.refs_at_invalidate(),
            [2],
            "the callback pins the module while it runs"
        );
        let maps = sim.mappings();
        assert_eq!(maps.len(), 1);
        assert_eq!(maps[0].freed_by, Some("free_dma_mapping"));
        let pts = sim.page_tables();
        assert_eq!(pts.last().unwrap().state, PtState::Freed);
        assert_eq!(pts.last().unwrap().freed_by, Some("free_page_table"));
        // without the calls from inside, the sg table lives until release
        assert_eq!(sim.live_sg_tables(), usize::from(!legacy));
        assert!(reg.state().invalidated);
        assert_eq!(
            sim.module_refs(),
            1,
            "the context still holds its reference"
        );

        // The normal teardown afterwards, called on the client directly:
        // all safe, nothing freed again.
        // SAFETY: the registration is live until release.
        unsafe {
            assert_eq!(env.drv.dma_unmap(reg.ctx(), reg.sg_head()), Ok(()));
            env.drv.put_pages(reg.ctx(), reg.sg_head());
        }
        assert!(
            sim.take_calls()
                .iter()
                .all(|c| matches!(c, Call::SgMatches | Call::SgFree)),
            "no driver call after invalidation"
        );
        env.release(&reg);
        assert_eq!(sim.take_calls(), [Call::Free, Call::ModulePut]);
        assert_eq!(sim.invalidations().len(), 1);
        sim.assert_clean();
    }
}

#[test]
fn teardown_by_the_core_after_invalidation_is_safe() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(2 * PAGE);
    let reg = env.reg_mr(ClientKind::Mem, va, 2 * PAGE);
    sim.cuda_free(va);
    env.dereg_mr(&reg);
    assert_eq!(sim.invalidations().len(), 1);
    sim.assert_clean();
}

#[test]
fn freed_before_dma_map_frees_the_page_table_without_invalidating() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(2 * PAGE);
    let reg = env.acquire(ClientKind::Mem, va, 2 * PAGE).unwrap();
    env.get_pages(&reg).unwrap();
    sim.take_calls();

    sim.cuda_free(va);
    // The core holds the registration's mapping lock until the HCA arms
    // invalidation; invalidating now could deadlock (see client.rs).
    assert!(sim.invalidations().is_empty());
    assert_eq!(
        sim.take_calls(),
        [Call::ModuleGet, Call::FreePageTable, Call::ModulePut],
        "no invalidation before dma_map; no mapping to free"
    );
    assert_eq!(
        sim.page_tables().last().unwrap().freed_by,
        Some("free_page_table")
    );
    assert!(sim.mappings().is_empty());

    // SAFETY: the registration is live until release.
    unsafe { env.drv.put_pages(reg.ctx(), reg.sg_head()) };
    assert!(sim.take_calls().is_empty());
    env.release(&reg);
    sim.assert_clean();
}

#[test]
fn only_registrations_on_the_freed_memory_are_invalidated() {
    let env = Env::new();
    let sim = env.sim();
    let a = sim.cuda_malloc(4 * PAGE);
    let b = sim.cuda_malloc(4 * PAGE);
    let on_a1 = env.reg_mr(ClientKind::Mem, a, PAGE);
    let on_a2 = env.reg_mr(ClientKind::Mem, a + PAGE, 3 * PAGE);
    let on_b = env.reg_mr(ClientKind::Mem, b, 4 * PAGE);
    let probe_only = env.acquire(ClientKind::Mem, a, PAGE).unwrap();

    sim.cuda_free(a);
    let mut inv = sim.invalidations();
    inv.sort();
    assert_eq!(inv, [on_a1.core_context, on_a2.core_context]);
    assert_eq!(sim.live_mappings(), 1);
    assert_eq!(sim.live_page_tables(), 1);

    for r in [&on_a1, &on_a2, &on_b] {
        env.dereg_mr(r);
    }
    env.release(&probe_only);
    assert_eq!(sim.invalidations().len(), 2);
    sim.assert_clean();
}

#[test]
fn dma_unmapped_before_free_then_callback_frees_only_the_page_table() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(PAGE);
    let reg = env.reg_mr(ClientKind::Mem, va, PAGE);
    env.dma_unmap(&reg).unwrap();
    sim.take_calls();
    sim.cuda_free(va);
    // dma_unmap means the core is tearing down: nothing left to invalidate.
    assert_eq!(
        sim.take_calls(),
        [Call::ModuleGet, Call::FreePageTable, Call::ModulePut]
    );
    assert_eq!(sim.mappings()[0].freed_by, Some("dma_unmap"));
    env.dereg_mr(&reg);
    sim.assert_clean();
}

#[test]
fn no_invalidation_without_registration_or_after_put_pages() {
    let env = Env::new();
    let sim = env.sim();
    let a = sim.cuda_malloc(PAGE);
    sim.cuda_free(a);
    let b = sim.cuda_malloc(PAGE);
    let reg = env.reg_mr(ClientKind::Mem, b, PAGE);
    env.dma_unmap(&reg).unwrap();
    env.put_pages(&reg);
    sim.cuda_free(b);
    assert!(sim.invalidations().is_empty());
    env.release(&reg);
    sim.assert_clean();
}

/// NVIDIA 535: cudaFree unlinks the page table first and calls the free
/// callback later; in between, the core tears the registration down and
/// put_pages "succeeds". The late callback must find nothing to invalidate
/// and must not touch the released context (it is given a ticket, not a
/// pointer), which the test double's poisoned frees would expose.
#[test]
fn free_callback_after_release_finds_nothing() {
    let env = Env::new();
    let sim = env.sim();
    sim.put_of_unlinked_succeeds();
    let va = sim.cuda_malloc(2 * PAGE);
    let reg = env.reg_mr(ClientKind::Mem, va, 2 * PAGE);
    let pending = sim.cuda_free_unlink(va);
    assert_eq!(pending.len(), 1, "one free callback is due");
    env.dereg_mr(&reg);
    assert_eq!(sim.live_contexts(), 0, "release freed the context");
    assert_eq!(
        sim.registered_tickets(),
        0,
        "and took its ticket out of the registry"
    );
    sim.run_free_callbacks(pending);
    assert!(sim.invalidations().is_empty(), "nothing left to invalidate");
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    assert_eq!(sim.module_refs(), 0);
    assert_eq!(
        sim.context_frees(),
        sim.context_allocs(),
        "each context freed once"
    );
}

/// The same late callback when a later registration shares the released
/// context's registry bucket (tickets are sequence numbers, buckets their
/// low bits): the stale ticket must not reach it, which stays registered
/// and is not invalidated.
#[test]
fn late_callback_does_not_reach_the_registration_in_its_bucket() {
    let env = Env::new();
    let sim = env.sim();
    sim.put_of_unlinked_succeeds();
    let va = sim.cuda_malloc(2 * PAGE);
    let reg = env.reg_mr(ClientKind::Mem, va, 2 * PAGE);
    let pending = sim.cuda_free_unlink(va);
    env.dereg_mr(&reg);
    // The next BUCKETS registrations take the BUCKETS tickets after the
    // stale one: the last lands in its bucket.
    let vb = sim.cuda_malloc(2 * PAGE);
    let later: Vec<_> = (0..BUCKETS)
        .map(|_| env.reg_mr(ClientKind::Mem, vb, 2 * PAGE))
        .collect();
    assert_eq!(sim.registered_tickets(), BUCKETS);
    sim.run_free_callbacks(pending);
    assert!(
        sim.invalidations().is_empty(),
        "the stale ticket invalidated a registration in its bucket"
    );
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    assert_eq!(sim.registered_tickets(), BUCKETS, "all still registered");
    for reg in &later {
        env.dereg_mr(reg);
    }
    sim.cuda_free(vb);
    assert!(sim.invalidations().is_empty());
    assert_eq!(sim.module_refs(), 0);
    assert_eq!(
        sim.context_frees(),
        sim.context_allocs(),
        "each context freed once"
    );
}

/// Many live registrations, several per bucket: a free callback reaches
/// exactly its own registrations wherever they sit in their chains, and
/// removing from the head, the middle and the tail of chains (every third
/// one, then the rest backwards) leaves the registry consistent and empty.
#[test]
fn free_callbacks_find_their_registrations_among_many() {
    let env = Env::new();
    let sim = env.sim();
    let n = 3 * BUCKETS + 5;
    let regs: Vec<_> = (0..n)
        .map(|_| {
            let va = sim.cuda_malloc(2 * PAGE);
            (va, env.reg_mr(ClientKind::Mem, va, 2 * PAGE))
        })
        .collect();
    assert_eq!(sim.registered_tickets(), n);
    for (va, reg) in regs.iter().step_by(3) {
        sim.cuda_free(*va);
        assert_eq!(
            sim.invalidations().last(),
            Some(&reg.core_context),
            "the callback invalidated another registration"
        );
    }
    assert_eq!(sim.invalidations().len(), n.div_ceil(3));
    for (_, reg) in regs.iter().step_by(3) {
        env.dereg_mr(reg);
    }
    assert_eq!(sim.registered_tickets(), n - n.div_ceil(3));
    for (i, (va, reg)) in regs.iter().enumerate().rev() {
        if i % 3 != 0 {
            env.dereg_mr(reg);
            sim.cuda_free(*va);
        }
    }
    assert_eq!(sim.invalidations().len(), n.div_ceil(3), "no more");
    sim.assert_clean();
}

/// The same with the callback running while the context is still held:
/// release in between must not free it under the callback.
#[test]
fn release_during_free_callback_waits_for_its_reference() {
    let env = Env::new();
    let sim = env.sim();
    sim.put_of_unlinked_succeeds();
    let va = sim.cuda_malloc(PAGE);
    let reg = env.reg_mr(ClientKind::Mem, va, PAGE);
    // The core releases the registration on another thread while the
    // invalidation runs: release waits for the callback (checked inside).
    sim.release_inside_invalidate();
    sim.cuda_free(va);
    sim.join_concurrent_release();
    assert_eq!(sim.invalidations(), [reg.core_context]);
    assert_eq!(
        sim.live_contexts(),
        0,
        "freed once the callback dropped its reference"
    );
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    assert_eq!(sim.module_refs(), 0);
}
