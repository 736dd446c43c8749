//! The files NCCL, UCX and NVSHMEM test for, /sys/kernel/mm/memory_peers/
//! <client>/, and their counters: the module makes them where the core made
//! none, leaves the core's alone, never fails its load over them, removes
//! them before unregistering, and counts what the core counts
//! (kmod/src/peer_stats.rs). The kernel side (the directories and the link
//! themselves) is proven in the booted kernels (kmod/tests/vm/guest/
//! scenarios.sh, memory_peers).

mod common;

use common::{Env, INJECTED, Op, PAGE};
use nv_peer_mem::peer_stats::Counter::{self, *};
use nv_peer_mem::{ClientKind, Level};

fn stats(env: &Env, kind: ClientKind) -> Vec<u64> {
    Counter::ALL
        .iter()
        .map(|&c| env.drv.peer_stat(kind, c))
        .collect()
}

#[test]
fn made_for_the_registered_clients_and_removed_before_unregistering() {
    // Both clients (persistent_api_support=0), then the default (the
    // persistent client alone, as nv_mem).
    for (persistent_api_support, kinds) in [(0, 0b11), (1, 0b10)] {
        let env = Env::bare();
        let sim = env.sim();
        assert_eq!(env.drv.init(0, persistent_api_support, true), Ok(()));
        assert_eq!(sim.peer_files(), Some(kinds));
        env.drv.exit();
        assert_eq!(sim.peer_files(), None);
        assert!(sim.registered().is_empty());
        // the double's unregister reports files still there
        assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    }
}

#[test]
fn the_cores_files_are_left_alone() {
    let env = Env::bare();
    let sim = env.sim();
    sim.core_lists_peer_files();
    assert_eq!(env.drv.init(0, 0, true), Ok(()));
    assert_eq!(sim.peer_files(), None, "nothing made beside the core's");
    assert!(sim.logs().is_empty(), "{:?}", sim.logs());
    env.drv.exit();
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

#[test]
fn a_failure_loads_the_module_all_the_same_and_says_so_once() {
    let env = Env::bare();
    let sim = env.sim();
    sim.fail_nth(Op::PeerFiles, 1, INJECTED);
    assert_eq!(env.drv.init(0, 0, true), Ok(()), "the clients work");
    assert!(env.drv.is_registered(ClientKind::Mem) && env.drv.is_registered(ClientKind::Nc));
    let logs = sim.logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0].0, Level::Error);
    assert!(
        logs[0].1.contains("NCCL will not use nv_peer_mem"),
        "{}",
        logs[0].1
    );
    assert_eq!(logs[0].2, INJECTED.to_kernel().into());
    env.drv.exit();
    assert!(sim.registered().is_empty());
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

#[test]
fn counters_move_as_registrations_come_and_go() {
    let env = Env::new();
    let sim = env.sim();
    let zero = vec![0; 7];
    assert_eq!(stats(&env, ClientKind::Mem), zero);
    let va = sim.cuda_malloc(8 * PAGE);
    // 3 pages (widened from an unaligned start) and 2 pages
    let a = env.reg_mr(ClientKind::Mem, va + 3, 3 * PAGE - 3);
    let b = env.reg_mr(ClientKind::Mem, va + 4 * PAGE, 2 * PAGE);
    let s = |c| env.drv.peer_stat(ClientKind::Mem, c);
    assert_eq!(
        (s(AllocMrs), s(RegPages), s(RegBytes)),
        (2, 5, 5 * PAGE),
        "bytes are the pinned range, whole 64 KiB pages"
    );
    assert_eq!((s(DeallocMrs), s(DeregPages), s(DeregBytes)), (0, 0, 0));
    env.dereg_mr(&a);
    assert_eq!(
        (s(DeallocMrs), s(DeregPages), s(DeregBytes)),
        (1, 3, 3 * PAGE)
    );
    // the free callback ends b's mapping and calls the core's invalidate
    sim.cuda_free(va);
    assert_eq!((s(DeallocMrs), s(DeregPages), s(FreeCallbacks)), (2, 5, 1));
    env.dereg_mr(&b);
    assert_eq!(
        (s(DeallocMrs), s(DeregPages), s(DeregBytes)),
        (2, 5, 5 * PAGE),
        "the mapping's end is counted once"
    );
    assert_eq!(stats(&env, ClientKind::Nc), zero, "per client");
    let vb = sim.cuda_malloc(PAGE);
    let c = env.reg_mr(ClientKind::Nc, vb, PAGE);
    env.dereg_mr(&c);
    assert_eq!(stats(&env, ClientKind::Nc), [1, 1, 1, 1, PAGE, PAGE, 0]);
    env.drv.exit();
    sim.assert_clean();
}

#[test]
fn a_failed_dma_map_counts_nothing() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(PAGE);
    let reg = env.acquire(ClientKind::Mem, va, PAGE).expect("mine");
    env.get_pages(&reg).unwrap();
    sim.fail_nth(Op::SgFill, 1, INJECTED);
    assert!(env.dma_map(&reg).is_err());
    env.put_pages(&reg);
    env.release(&reg);
    assert_eq!(stats(&env, ClientKind::Mem), vec![0; 7]);
    env.drv.exit();
    sim.assert_clean();
}
