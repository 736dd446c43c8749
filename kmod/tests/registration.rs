//! Module load and unload: which clients are registered, in which style,
//! rollback when the second registration fails, parameter refusal.

mod common;

use common::{Call, Env, INJECTED, Op};
use nv_peer_mem::errno::EINVAL;
use nv_peer_mem::{ClientKind, Level, RegistrationStyle};

use ClientKind::{Mem, Nc};
use RegistrationStyle::{InvalidateUnmaps, Legacy};

#[test]
fn both_clients_registered_and_unregistered_newest_first() {
    let env = Env::bare();
    let sim = env.sim();
    assert_eq!(env.drv.init(0, 1, true), Ok(()));
    assert_eq!(
        sim.take_calls(),
        [
            Call::Register(Mem, InvalidateUnmaps),
            Call::Register(Nc, InvalidateUnmaps)
        ]
    );
    assert!(env.drv.is_registered(Mem) && env.drv.is_registered(Nc));
    assert_eq!(
        sim.registered(),
        [(Mem, InvalidateUnmaps), (Nc, InvalidateUnmaps)]
    );

    env.drv.exit();
    assert_eq!(
        sim.take_calls(),
        [Call::Unregister(Nc), Call::Unregister(Mem)]
    );
    assert!(!env.drv.is_registered(Mem) && !env.drv.is_registered(Nc));
    assert!(sim.registered().is_empty());
    // A second exit unregisters nothing.
    env.drv.exit();
    assert!(sim.take_calls().is_empty());
    assert!(sim.violations().is_empty());
}

#[test]
fn nc_only_when_available_and_enabled() {
    for (persistent, available, nc) in [
        (1, true, true),
        (0, true, false),
        (1, false, false),
        (0, false, false),
        (-1, true, true),
    ] {
        let env = Env::bare();
        let sim = env.sim();
        assert_eq!(env.drv.init(0, persistent, available), Ok(()));
        let mut expected = vec![Call::Register(Mem, InvalidateUnmaps)];
        if nc {
            expected.push(Call::Register(Nc, InvalidateUnmaps));
        }
        assert_eq!(
            sim.take_calls(),
            expected,
            "persistent_api_support={persistent} available={available}"
        );
        assert_eq!(env.drv.is_registered(Nc), nc);
        env.drv.exit();
        let unreg = sim.take_calls();
        assert_eq!(unreg.contains(&Call::Unregister(Nc)), nc);
        assert_eq!(unreg.last(), Some(&Call::Unregister(Mem)));
        assert!(sim.registered().is_empty());
        assert!(sim.violations().is_empty());
    }
}

#[test]
fn legacy_style_is_passed_through() {
    let env = Env::bare();
    let sim = env.sim();
    assert_eq!(env.drv.init(1, 1, true), Ok(()));
    assert_eq!(
        sim.take_calls(),
        [Call::Register(Mem, Legacy), Call::Register(Nc, Legacy)]
    );
    env.drv.exit();
    assert!(sim.registered().is_empty());
}

#[test]
fn nc_registration_failure_rolls_back_nv_mem() {
    let env = Env::bare();
    let sim = env.sim();
    sim.fail_nth(Op::RegisterNc, 1, INJECTED);
    assert_eq!(
        env.drv.init(0, 1, true),
        Err(INJECTED),
        "the core's error is returned"
    );
    assert_eq!(
        sim.take_calls(),
        [
            Call::Register(Mem, InvalidateUnmaps),
            Call::Register(Nc, InvalidateUnmaps),
            Call::Unregister(Mem)
        ]
    );
    assert!(sim.registered().is_empty(), "nothing left registered");
    assert!(!env.drv.is_registered(Mem) && !env.drv.is_registered(Nc));
    assert_eq!(sim.errors_logged(), 1);
    // The module is not loaded, so exit never runs; if it did, it would do
    // nothing.
    env.drv.exit();
    assert!(sim.take_calls().is_empty());
    assert!(sim.violations().is_empty());
    // A later load succeeds from a clean state.
    assert_eq!(env.drv.init(0, 1, true), Ok(()));
    assert_eq!(sim.registered().len(), 2);
}

#[test]
fn nv_mem_registration_failure_registers_nothing() {
    let env = Env::bare();
    let sim = env.sim();
    sim.fail_nth(Op::RegisterMem, 1, EINVAL);
    assert_eq!(env.drv.init(0, 1, true), Err(EINVAL));
    assert_eq!(sim.take_calls(), [Call::Register(Mem, InvalidateUnmaps)]);
    assert!(sim.registered().is_empty());
    assert!(!env.drv.is_registered(Mem));
    assert_eq!(sim.errors_logged(), 1);
}

#[test]
fn bad_peerdirect_support_is_einval_and_registers_nothing() {
    for value in [2, -1, 3, 100, i32::MIN, i32::MAX] {
        let env = Env::bare();
        let sim = env.sim();
        assert_eq!(
            env.drv.init(value, 1, true),
            Err(EINVAL),
            "peerdirect_support={value}"
        );
        assert!(sim.take_calls().is_empty(), "nothing registered");
        let logs = sim.logs();
        assert_eq!(logs.len(), 1);
        assert_eq!(logs[0].0, Level::Error);
        assert_eq!(
            logs[0].2,
            i64::from(value),
            "the message carries the bad value"
        );
        assert!(logs[0].1.contains("peerdirect_support"));
        assert_eq!(EINVAL.to_kernel(), -22);
    }
}

#[test]
fn module_references_outlive_unload_attempts() {
    // A live context holds a reference, so the module cannot be unloaded
    // under the core; it drops to zero only at release.
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(common::PAGE);
    let reg = env.reg_mr(Mem, va, common::PAGE);
    assert_eq!(sim.module_refs(), 1);
    env.dereg_mr(&reg);
    assert_eq!(sim.module_refs(), 0);
    env.drv.exit();
    sim.assert_clean();
}
