//! A failed `nvidia_p2p_put_pages` leaves the page table pinned in the
//! driver with the module's free callback due (NVIDIA 535 fails it with
//! -ENOMEM before reaching RM; a table a cudaFree took is reported as 0):
//! the module must stay loaded until that callback has come, whether the
//! put was acquire's probe or the core's teardown (docs/contracts.md,
//! "Late free callbacks").

mod common;

use common::{Env, Op, PAGE, Sim};
use nv_peer_mem::errno::ENOMEM;
use nv_peer_mem::{Acquired, ClientKind};

#[test]
fn failed_probe_unpin_keeps_the_module_until_the_probe_callback() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(2 * PAGE);
    sim.fail_nth(Op::PutPages, 1, ENOMEM);
    // nv_mem_nc probes (nv_mem keeps acquire's pin instead).
    assert_eq!(
        env.drv.acquire(ClientKind::Nc, va, 2 * PAGE),
        Acquired::NotMine
    );
    assert_eq!(sim.live_page_tables(), 1, "the probe's table stays pinned");
    assert_eq!(
        sim.module_refs(),
        1,
        "a callback into the module is due: rmmod must be refused"
    );
    sim.cuda_free(va);
    assert_eq!(sim.module_refs(), 0, "the callback gave the module back");
    sim.assert_clean();
}

/// After a released registration's failed unpin: the table stays pinned
/// and the module loaded until cudaFree delivers the free callback, which
/// invalidates nothing and leaves nothing behind.
fn callback_due_until_the_memory_is_freed(sim: &Sim, va: u64) {
    assert_eq!(sim.module_refs(), 1, "the free callback is still due");
    assert_eq!(sim.live_page_tables(), 1);
    sim.cuda_free(va);
    assert!(
        sim.invalidations().is_empty(),
        "a released registration is not invalidated"
    );
    assert_eq!(sim.module_refs(), 0);
    sim.assert_clean();
}

#[test]
fn failed_teardown_unpin_keeps_the_module_until_the_free_callback() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(2 * PAGE);
    let reg = env.acquire(ClientKind::Mem, va, 2 * PAGE).expect("mine");
    env.get_pages(&reg).expect("get_pages");
    env.dma_map(&reg).expect("dma_map");
    env.dma_unmap(&reg).expect("dma_unmap");
    sim.fail_nth(Op::PutPages, 1, ENOMEM);
    env.put_pages(&reg);
    env.release(&reg);
    callback_due_until_the_memory_is_freed(sim, va);
}

#[test]
fn unpin_failing_after_the_callback_took_the_table_keeps_nothing() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(2 * PAGE);
    // cudaFree right before the probe's unpin, which then fails: the
    // callback has already run, nothing is due.
    sim.free_before(Op::PutPages, 1, va);
    sim.fail_nth(Op::PutPages, 1, ENOMEM);
    assert_eq!(
        env.drv.acquire(ClientKind::Nc, va, 2 * PAGE),
        Acquired::NotMine
    );
    assert_eq!(sim.module_refs(), 0);
    sim.assert_clean();
}

/// nv_mem's kept pin, released without get_pages, whose unpin fails:
/// the module stays until the free callback comes.
#[test]
fn failed_unpin_of_a_kept_pin_keeps_the_module_until_the_free_callback() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(2 * PAGE);
    let reg = env.acquire(ClientKind::Mem, va, 2 * PAGE).expect("mine");
    sim.fail_nth(Op::PutPages, 1, ENOMEM);
    env.release(&reg);
    callback_due_until_the_memory_is_freed(sim, va);
}
