//! acquire, and the whole life of a registration: acquire → get_pages →
//! dma_map → dma_unmap → put_pages → release, with exact call sequences.

mod common;

use common::{Call, Env, Op, PAGE, PtState, Sim};
use nv_peer_mem::context::Context;
use nv_peer_mem::errno::{EINVAL, ENOMEM};
use nv_peer_mem::range::GpuRange;
use nv_peer_mem::{Acquired, ClientKind, FreeCallback, Level};

fn context_range(reg: &common::Reg) -> GpuRange {
    // SAFETY: the registration is live (not released) in every caller.
    unsafe { (*reg.ctx().cast::<Context>()).range }
}

#[test]
fn acquire_gpu_memory_is_mine() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(4 * PAGE);
    let reg = env
        .acquire(ClientKind::Mem, va + 0x1234, 2 * PAGE)
        .expect("GPU memory is mine");
    // Widened to [va, va + 3 pages): acquire pins exactly that, with the
    // invalidating callback, and keeps the pin for get_pages.
    assert_eq!(
        sim.take_calls(),
        [
            Call::Alloc,
            Call::GetPages {
                va,
                len: 3 * PAGE,
                callback: FreeCallback::Invalidate
            },
            Call::ModuleGet,
        ]
    );
    assert_eq!(
        context_range(&reg),
        GpuRange {
            start: va,
            len: 3 * PAGE
        }
    );
    let pts = sim.page_tables();
    assert_eq!(pts.len(), 1);
    assert_eq!(pts[0].state, PtState::Live, "acquire keeps its pin");
    assert_eq!(
        sim.module_refs(),
        1,
        "a live context holds a module reference"
    );
    assert_eq!(sim.live_contexts(), 1);

    // Released without get_pages (the core's error paths after acquire):
    // release puts the pin back.
    env.release(&reg);
    assert_eq!(
        sim.take_calls(),
        [Call::PutPages { va }, Call::Free, Call::ModulePut]
    );
    assert_eq!(sim.page_tables()[0].freed_by, Some("put_pages"));
    sim.assert_clean();
}

#[test]
fn acquire_other_memory_is_not_mine() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(4 * PAGE);
    // Host memory far from any GPU allocation, and a range running past
    // the end of a GPU allocation.
    for (addr, size) in [(0x1000_0000, 0x2000), (va + 3 * PAGE, 2 * PAGE)] {
        assert_eq!(
            env.drv.acquire(ClientKind::Mem, addr, size),
            Acquired::NotMine
        );
    }
    assert_eq!(sim.count(Op::GetPages), 2);
    assert_eq!(sim.count(Op::PutPages), 0);
    // The probe's context is allocated first (it is the probe callback's
    // data) and freed again.
    assert_eq!(sim.count(Op::Alloc), 2);
    assert_eq!(sim.live_contexts(), 0, "the probe's contexts are freed");
    assert_eq!(
        sim.module_refs(),
        0,
        "no reference for a range that is not mine"
    );
    sim.assert_clean();
}

#[test]
fn acquire_overflowing_or_empty_range_is_not_mine_without_asking_the_driver() {
    let env = Env::new();
    let sim = env.sim();
    // GPU memory at both ends of the VA space: a range wrapped around to
    // a small one would find memory at 0; one not widened would find it at
    // the top.
    sim.cuda_malloc_at(0, 1 << 24);
    sim.cuda_malloc_at(u64::MAX - (1 << 24) + 1, 1 << 24);
    for (addr, size) in [
        (u64::MAX, 1),
        (u64::MAX - 0xffff, 0x1_0000),
        (u64::MAX - PAGE - 0xfffe, PAGE),
        (0x1_0000, u64::MAX),
        (u64::MAX, u64::MAX),
        (0, 0),
        (u64::MAX - 5 * PAGE, 0),
    ] {
        assert_eq!(
            env.drv.acquire(ClientKind::Mem, addr, size),
            Acquired::NotMine,
            "{addr:#x}+{size:#x}"
        );
    }
    assert!(
        sim.take_calls().is_empty(),
        "the driver is not asked about a refused range"
    );
    // Control: the last full page below 2^64 - 64 KiB is acquirable.
    let top = u64::MAX - 2 * PAGE + 1;
    let reg = env.acquire(ClientKind::Mem, top + 5, 10).expect("mine");
    assert_eq!(
        context_range(&reg),
        GpuRange {
            start: top,
            len: PAGE
        }
    );
    env.release(&reg);
    sim.assert_clean();
}

#[test]
fn acquire_allocation_failure_is_not_mine() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(PAGE);
    sim.fail_nth(Op::Alloc, 1, ENOMEM);
    assert_eq!(
        env.drv.acquire(ClientKind::Mem, va, PAGE),
        Acquired::NotMine
    );
    assert_eq!(
        sim.take_calls(),
        [Call::Alloc],
        "the driver is not asked without a context to probe with"
    );
    assert_eq!(sim.module_refs(), 0);
    assert!(
        sim.logs().iter().any(|l| l.0 == Level::Error && l.2 == -12),
        "out of memory is logged with -ENOMEM"
    );
    sim.assert_clean();
}

#[test]
fn acquire_memory_freed_during_the_probe_is_not_mine() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(2 * PAGE);
    // cudaFree between nv_mem_nc's probe's get_pages and put_pages.
    sim.free_before(Op::PutPages, 1, va);
    assert_eq!(
        env.drv.acquire(ClientKind::Nc, va, 2 * PAGE),
        Acquired::NotMine
    );
    assert_eq!(sim.count(Op::Alloc), 1, "one context, for the probe");
    assert_eq!(sim.module_refs(), 0);
    assert!(
        sim.invalidations().is_empty(),
        "the probe has nothing to invalidate"
    );
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    assert_eq!(sim.live_contexts(), 0);
}

#[test]
fn acquire_memory_freed_during_the_probe_leaks_nothing() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(2 * PAGE);
    sim.free_before(Op::PutPages, 1, va);
    assert_eq!(
        env.drv.acquire(ClientKind::Nc, va, 2 * PAGE),
        Acquired::NotMine
    );
    sim.assert_clean();
}

/// nv_mem's kept pin freed between acquire and get_pages: the free
/// callback frees the page table without invalidating (the core has no
/// mapping yet), get_pages fails, and release puts nothing back.
#[test]
fn memory_freed_between_acquire_and_get_pages_fails_get_pages() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(2 * PAGE);
    let reg = env.acquire(ClientKind::Mem, va, 2 * PAGE).expect("mine");
    sim.cuda_free(va);
    assert!(
        sim.invalidations().is_empty(),
        "nothing mapped to invalidate"
    );
    assert_eq!(sim.page_tables()[0].freed_by, Some("free_page_table"));
    sim.take_calls();
    assert_eq!(env.get_pages(&reg), Err(EINVAL));
    env.release(&reg);
    assert_eq!(
        sim.take_calls(),
        [Call::Free, Call::ModulePut],
        "no put of a table the callback freed"
    );
    sim.assert_clean();
}

#[test]
fn whole_lifecycle_exact_calls_and_everything_freed() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(8 * PAGE);
    let (addr, size) = (va + 0x10, 5 * PAGE);
    let pages = 6u64; // [va, va + 6 pages) covers [va + 0x10, va + 0x10 + 5 pages)

    // nv_mem pins once, in acquire, with the invalidating callback, and
    // keeps that pin for get_pages.
    let reg = env.acquire(ClientKind::Mem, addr, size).expect("mine");
    assert_eq!(
        sim.take_calls(),
        [
            Call::Alloc,
            Call::GetPages {
                va,
                len: pages * PAGE,
                callback: FreeCallback::Invalidate
            },
            Call::ModuleGet,
        ]
    );

    env.get_pages(&reg).expect("get_pages");
    assert!(sim.take_calls().is_empty(), "get_pages uses acquire's pin");
    // SAFETY: the registration is live.
    let core_context = unsafe {
        (*reg.ctx().cast::<Context>())
            .core_context
            .load(std::sync::atomic::Ordering::Acquire)
    };
    assert_eq!(
        core_context, reg.core_context,
        "the core context is kept for invalidation"
    );

    let nmap = env.dma_map(&reg).expect("dma_map");
    assert_eq!(u64::from(nmap), pages, "nmap = number of 64 KiB pages");
    assert_eq!(
        sim.take_calls(),
        [
            Call::PageTableVersion,
            Call::PageSize,
            Call::DmaMap,
            Call::MappingVersion,
            Call::SgFill { page_size: PAGE }
        ]
    );
    assert_eq!(env.drv.get_page_size(), PAGE);
    // The sg table: one 64 KiB entry per page at the mapping's addresses.
    let sg = sim.sg_tables();
    assert_eq!(sg.len(), 1);
    let expected: Vec<(u64, u64)> = (0..pages).map(|i| (Sim::dma_address(0, i), PAGE)).collect();
    assert_eq!(sg[0].entries, expected);
    assert_eq!(
        reg.sg_words()[1],
        pages,
        "the core's sg_head describes the table"
    );
    assert_eq!(sim.live_mappings(), 1);
    assert_eq!(sim.live_page_tables(), 1);

    env.dma_unmap(&reg).expect("dma_unmap");
    assert_eq!(sim.take_calls(), [Call::SgMatches, Call::DmaUnmap]);
    assert_eq!(sim.mappings()[0].freed_by, Some("dma_unmap"));

    env.put_pages(&reg);
    assert_eq!(
        sim.take_calls(),
        [Call::SgMatches, Call::PutPages { va }, Call::SgFree]
    );
    assert_eq!(sim.page_tables()[0].freed_by, Some("put_pages"));
    assert_eq!(sim.live_sg_tables(), 0);
    assert_eq!(sim.module_refs(), 1);

    env.release(&reg);
    assert_eq!(sim.take_calls(), [Call::Free, Call::ModulePut]);
    sim.assert_clean();

    // The callback was uninstalled by put_pages: freeing the memory now
    // invalidates nothing.
    sim.cuda_free(va);
    assert!(sim.invalidations().is_empty());
    assert!(sim.take_calls().is_empty());
}

#[test]
fn several_registrations_at_once() {
    let env = Env::new();
    let sim = env.sim();
    let a = sim.cuda_malloc(16 * PAGE);
    let b = sim.cuda_malloc(3 * PAGE);
    let regs = [
        env.reg_mr(ClientKind::Mem, a, 16 * PAGE),
        env.reg_mr(ClientKind::Mem, a + 4 * PAGE + 1, PAGE), // overlaps the first
        env.reg_mr(ClientKind::Mem, b + 100, 2 * PAGE),
        env.reg_mr(ClientKind::Nc, a + PAGE, 2 * PAGE),
        env.reg_mr(ClientKind::Mem, b, 1),
    ];
    let nmaps: Vec<u32> = regs.iter().map(|r| r.state().nmap).collect();
    assert_eq!(nmaps, [16, 2, 3, 2, 1]);
    assert_eq!(sim.module_refs(), 5);
    assert_eq!(sim.live_contexts(), 5);
    assert_eq!(sim.live_mappings(), 5);
    assert_eq!(sim.live_sg_tables(), 5);
    let ccs: std::collections::HashSet<u64> = regs.iter().map(|r| r.core_context).collect();
    assert_eq!(ccs.len(), 5);
    // Tear down in an order unrelated to creation.
    for i in [2, 0, 4, 1, 3] {
        env.dereg_mr(&regs[i]);
        assert_eq!(
            sim.module_refs(),
            4 - [2, 0, 4, 1, 3].iter().position(|&j| j == i).unwrap() as i64
        );
    }
    assert!(sim.invalidations().is_empty());
    sim.assert_clean();
}

/// nv_mem's pin in acquire failing (not GPU memory, or the driver out of
/// memory): not mine, nothing left.
#[test]
fn acquire_pin_failure_is_not_mine() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(PAGE);
    sim.fail_nth(Op::GetPages, 1, ENOMEM);
    assert_eq!(
        env.drv.acquire(ClientKind::Mem, va, PAGE),
        Acquired::NotMine
    );
    sim.assert_clean();
}

#[test]
fn null_context_is_refused() {
    let env = Env::new();
    let null = std::ptr::null_mut();
    // SAFETY: null is allowed by every entry point's contract.
    unsafe {
        assert_eq!(env.drv.get_pages(null, 1), Err(EINVAL));
        assert_eq!(env.drv.dma_map(null, null, null), Err(EINVAL));
        assert_eq!(env.drv.dma_unmap(null, null), Err(EINVAL));
        env.drv.put_pages(null, null);
        env.drv.release(null);
    }
    assert!(env.sim().take_calls().is_empty());
    env.sim().assert_clean();
}

#[test]
fn dma_unmap_and_put_pages_refuse_a_foreign_sg_table() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(PAGE);
    let reg = env.reg_mr(ClientKind::Mem, va, PAGE);
    let mut other = [7u64; 4];
    let other_ptr = other.as_mut_ptr().cast();
    // SAFETY: the registration is live; `other` is a 32-byte table.
    unsafe {
        assert_eq!(env.drv.dma_unmap(reg.ctx(), other_ptr), Err(EINVAL));
        env.drv.put_pages(reg.ctx(), other_ptr);
    }
    assert_eq!(other, [7; 4]);
    assert_eq!(
        sim.live_mappings(),
        1,
        "nothing unmapped for a foreign table"
    );
    assert_eq!(sim.live_page_tables(), 1);
    assert_eq!(sim.live_sg_tables(), 1);
    env.dereg_mr(&reg);
    sim.assert_clean();
}

#[test]
fn release_frees_the_sg_table_when_put_pages_never_ran() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(2 * PAGE);
    let reg = env.reg_mr(ClientKind::Mem, va, 2 * PAGE);
    env.dma_unmap(&reg).unwrap();
    // The core's copy is gone (as after an error path); release frees the
    // table from the context's saved copy.
    reg.set_sg_words([0; 4]);
    sim.take_calls();
    env.release(&reg);
    assert_eq!(
        sim.take_calls(),
        [Call::SgFree, Call::Free, Call::ModulePut]
    );
    assert_eq!(sim.live_sg_tables(), 0);
    assert_eq!(sim.module_refs(), 0);
}
