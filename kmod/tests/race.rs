//! The free callback (cudaFree on one CPU) racing the core's dma_unmap and
//! put_pages on another, over many iterations: the dma mapping, the page
//! table and the sg table are each freed exactly once, the core is
//! invalidated at most once and with the right core context, and nothing
//! is left behind.
//!
//! The core's side holds the registration's mapping lock around dma_unmap
//! and put_pages, as MLNX_OFED does (its invalidate callback takes the
//! same lock).

mod common;

use common::{Env, Op, PAGE, PtState};
use nv_peer_mem::ClientKind;
use std::sync::Barrier;

const ITERATIONS: u32 = 2000;

fn spin(n: u32) {
    for _ in 0..n {
        std::hint::spin_loop();
    }
}

struct Outcomes {
    invalidated: u32,
    not_invalidated: u32,
}

/// `eager`: the core calls dma_unmap/put_pages even when its invalidate
/// callback already ran (harsher than MLNX_OFED, which skips them).
fn race(eager: bool, unmap_first: bool) -> Outcomes {
    let mut out = Outcomes {
        invalidated: 0,
        not_invalidated: 0,
    };
    let mut seed = 0x2545_f491_4f6c_dd1du64 ^ u64::from(eager) ^ (u64::from(unmap_first) << 1);
    for i in 0..ITERATIONS {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let (spin_a, spin_b) = ((seed % 400) as u32, ((seed >> 20) % 400) as u32);

        let env = Env::new();
        let sim = env.sim();
        let va = sim.cuda_malloc(4 * PAGE);
        let reg = env.reg_mr(ClientKind::Mem, va + 0x100, 3 * PAGE);
        if !unmap_first {
            // Only put_pages races the callback.
            env.dma_unmap(&reg).unwrap();
        }
        let barrier = Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                barrier.wait();
                spin(spin_a);
                let mut rs = reg.state.lock().unwrap();
                if eager || !rs.invalidated {
                    // SAFETY: the context lives until release, below,
                    // after both threads are done.
                    let r = unsafe { env.drv.dma_unmap(reg.ctx(), reg.sg_head()) };
                    assert_eq!(r, Ok(()));
                    rs.mapped = false;
                    // SAFETY: as above.
                    unsafe { env.drv.put_pages(reg.ctx(), reg.sg_head()) };
                    reg.set_sg_words([0; 4]);
                    rs.pinned = false;
                }
            });
            s.spawn(|| {
                barrier.wait();
                spin(spin_b);
                sim.cuda_free(va);
            });
        });
        env.release(&reg);

        let inv = sim.invalidations();
        assert!(
            inv.len() <= 1,
            "iteration {i}: invalidated {} times",
            inv.len()
        );
        let pt = sim.page_tables().pop().unwrap();
        assert_eq!(pt.state, PtState::Freed, "iteration {i}");
        let maps = sim.mappings();
        assert_eq!(maps.len(), 1);
        assert!(!maps[0].live, "iteration {i}: mapping leaked");
        if pt.freed_by == Some("put_pages") {
            // put_pages won: the driver never called back.
            assert!(inv.is_empty(), "iteration {i}");
            assert_eq!(maps[0].freed_by, Some("dma_unmap"), "iteration {i}");
            assert_eq!(sim.count(Op::FreePageTable), 0);
            out.not_invalidated += 1;
        } else {
            // The callback won the page table. It invalidated only if the
            // mapping was still there (dma_unmap had not run: the core was
            // not tearing down yet).
            assert_eq!(pt.freed_by, Some("free_page_table"), "iteration {i}");
            assert_eq!(sim.count(Op::FreePageTable), 1);
            if inv.is_empty() {
                assert_eq!(maps[0].freed_by, Some("dma_unmap"), "iteration {i}");
                out.not_invalidated += 1;
            } else {
                assert_eq!(inv, [reg.core_context], "iteration {i}");
                out.invalidated += 1;
            }
        }
        // No double free of anything, no leak, no reference left, no call
        // on a page table after it was freed.
        sim.assert_clean();
    }
    eprintln!(
        "eager={eager} unmap_first={unmap_first}: {} invalidated, {} not",
        out.invalidated, out.not_invalidated
    );
    assert_eq!(out.invalidated + out.not_invalidated, ITERATIONS);
    out
}

#[test]
fn free_callback_races_dma_unmap_and_put_pages() {
    race(false, true);
}

#[test]
fn free_callback_races_put_pages() {
    race(false, false);
}

#[test]
fn free_callback_races_eager_teardown() {
    race(true, true);
}

/// One interleaving the threads may not hit: cudaFree lands inside
/// put_pages, after it decided to put the pages (no core lock held, as for
/// a put_pages the core makes outside its invalidation). The driver's
/// put_pages then finds the page table gone and fails gracefully (NVIDIA's
/// documented behaviour); nothing is freed twice.
#[test]
fn free_lands_inside_put_pages() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(2 * PAGE);
    let reg = env.reg_mr(ClientKind::Mem, va, 2 * PAGE);
    env.dma_unmap(&reg).unwrap();
    sim.free_before(Op::PutPages, 1, va);
    // SAFETY: the registration is live.
    unsafe { env.drv.put_pages(reg.ctx(), reg.sg_head()) };
    // dma_unmap ran: the core is tearing down, nothing to invalidate.
    assert!(sim.invalidations().is_empty());
    assert_eq!(
        sim.count(Op::PutPages),
        1,
        "the in-flight put_pages after the free (acquire kept its pin: no probe put)"
    );
    assert_eq!(
        sim.stale_calls(),
        0,
        "and the driver failed it gracefully (it looks page tables up)"
    );
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    assert_eq!(
        sim.page_tables().last().unwrap().freed_by,
        Some("free_page_table")
    );
    assert_eq!(sim.live_sg_tables(), 0);
    env.release(&reg);
    assert_eq!(sim.module_refs(), 0);
    assert_eq!(sim.live_contexts(), 0);
}

/// cudaFree on another CPU while the core is in dma_map (holding its
/// mapping lock, as MLNX_OFED does): the free callback runs before dma_map
/// has finished. It finds the mapping the driver made, invalidates (the
/// registering thread no longer waits for the driver), and dma_map fails;
/// the mapping is never used after the page table is gone, and nothing
/// leaks. (Before a mapping exists the callback does not invalidate at all:
/// see invalidation.rs.)
///
/// The free lands after nvidia_p2p_dma_map_pages returned. A free landing
/// between dma_map's check and the driver call hands the driver a page
/// table it is freeing: a window of the NV-P2P API that no client can close
/// without waiting, in the callback, for something the registering thread
/// holds (docs/contracts.md).
#[test]
fn free_callback_during_dma_map() {
    // (Not Op::DmaMap: see above.)
    let op = Op::SgFill;
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(2 * PAGE);
    let reg = env.acquire(ClientKind::Mem, va, 2 * PAGE).unwrap();
    env.get_pages(&reg).unwrap();
    sim.free_elsewhere_before(op, 1, va);
    let r = env.dma_map(&reg);
    sim.join_background();
    // The mapping was made (and published): the callback invalidated,
    // waiting in the core's invalidation until dma_map had failed.
    assert_eq!(sim.invalidations(), [reg.core_context], "{op:?}");
    assert!(
        r.is_err(),
        "{op:?}: the memory went away during dma_map: {r:?}"
    );
    env.dereg_mr(&reg);
    sim.assert_clean();
}
