//! The nv_mem_nc client: persistent pages, no free callback, never
//! invalidated.

mod common;

use common::{Call, Env, Op, PAGE, PtState};
use nv_peer_mem::ClientKind;
use nv_peer_mem::errno::EBUSY;
use nv_peer_mem::{FreeCallback, Level};

#[test]
fn nc_lifecycle_uses_persistent_pages() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(4 * PAGE);

    let reg = env
        .acquire(ClientKind::Nc, va + PAGE + 7, PAGE)
        .expect("mine");
    let start = va + PAGE;
    assert_eq!(
        sim.take_calls(),
        [
            Call::Alloc,
            Call::GetPages {
                va: start,
                len: 2 * PAGE,
                callback: FreeCallback::Probe
            },
            Call::PutPages { va: start },
            Call::ModuleGet,
        ]
    );
    env.get_pages(&reg).unwrap();
    assert_eq!(
        sim.take_calls(),
        [Call::GetPagesPersistent {
            va: start,
            len: 2 * PAGE
        }]
    );
    let pt = sim.page_tables().pop().unwrap();
    assert!(pt.persistent);
    assert_eq!(pt.callback, None, "no free callback for persistent pages");

    assert_eq!(env.dma_map(&reg), Ok(2));
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
    env.dma_unmap(&reg).unwrap();
    assert_eq!(sim.take_calls(), [Call::SgMatches, Call::DmaUnmap]);
    env.put_pages(&reg);
    assert_eq!(
        sim.take_calls(),
        [
            Call::SgMatches,
            Call::PutPagesPersistent { va: start },
            Call::SgFree
        ]
    );
    assert_eq!(
        sim.page_tables().pop().unwrap().freed_by,
        Some("put_pages_persistent")
    );
    env.release(&reg);
    assert_eq!(sim.take_calls(), [Call::Free, Call::ModulePut]);
    assert!(sim.invalidations().is_empty());
    sim.assert_clean();
}

#[test]
fn nc_registration_survives_cuda_free_without_invalidation() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(2 * PAGE);
    let reg = env.reg_mr(ClientKind::Nc, va, 2 * PAGE);
    sim.take_calls();
    sim.cuda_free(va);
    assert!(sim.take_calls().is_empty(), "no callback, no invalidation");
    assert!(sim.invalidations().is_empty());
    assert_eq!(sim.page_tables().pop().unwrap().state, PtState::Live);
    env.dereg_mr(&reg);
    assert_eq!(sim.count(Op::PutPagesPersistent), 1);
    assert_eq!(sim.count(Op::PutPages), 1, "only the probe's");
    sim.assert_clean();
}

#[test]
fn nc_and_mem_on_the_same_memory() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(2 * PAGE);
    let nc = env.reg_mr(ClientKind::Nc, va, 2 * PAGE);
    let mem = env.reg_mr(ClientKind::Mem, va, 2 * PAGE);
    sim.cuda_free(va);
    assert_eq!(
        sim.invalidations(),
        [mem.core_context],
        "only the nv_mem registration is invalidated"
    );
    env.dereg_mr(&nc);
    env.dereg_mr(&mem);
    sim.assert_clean();
}

#[test]
fn nc_get_pages_failure_is_passed_on() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(PAGE);
    let reg = env.acquire(ClientKind::Nc, va, PAGE).unwrap();
    sim.fail_nth(Op::GetPagesPersistent, 1, EBUSY);
    assert_eq!(env.get_pages(&reg), Err(EBUSY));
    assert!(sim.logs().iter().any(|l| l.0 == Level::Error && l.2 == -16));
    env.release(&reg);
    sim.assert_clean();
}
