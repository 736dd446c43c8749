//! Module load and unload: which clients are registered, under which
//! names, in which style, rollback when the second registration fails,
//! parameter refusal.

mod common;

use common::{Call, Env, INJECTED, Op};
use nv_peer_mem::errno::EINVAL;
use nv_peer_mem::{ClientKind, Level, RegistrationStyle};

use ClientKind::{Mem, Nc};
use RegistrationStyle::{InvalidateUnmaps, Legacy};

#[test]
fn default_registers_the_persistent_client_alone_as_nv_mem() {
    // nvidia-peermem >= 560.28.03: persistent_api_support=1 (default)
    // registers only the persistent client, named nv_mem, a plain client
    // whatever peerdirect_support says.
    for peerdirect_support in [0, 1] {
        let env = Env::bare();
        let sim = env.sim();
        assert_eq!(env.drv.init(peerdirect_support, 1, true), Ok(()));
        let style = if peerdirect_support == 0 {
            InvalidateUnmaps
        } else {
            Legacy
        };
        assert_eq!(sim.take_calls(), [Call::Register(Nc, style, "nv_mem")]);
        assert!(env.drv.is_registered(Nc) && !env.drv.is_registered(Mem));
        env.drv.exit();
        assert_eq!(sim.take_calls(), [Call::Unregister(Nc)]);
        assert!(sim.registered().is_empty());
        assert!(sim.logs().is_empty(), "nothing logged: {:?}", sim.logs());
        assert!(sim.violations().is_empty());
    }
}

#[test]
fn legacy_persistent_api_registers_both_and_unregisters_newest_first() {
    let env = Env::bare();
    let sim = env.sim();
    assert_eq!(env.drv.init(0, 0, true), Ok(()));
    assert_eq!(
        sim.take_calls(),
        [
            Call::Register(Mem, InvalidateUnmaps, "nv_mem"),
            Call::Register(Nc, InvalidateUnmaps, "nv_mem_nc")
        ]
    );
    assert!(env.drv.is_registered(Mem) && env.drv.is_registered(Nc));
    assert_eq!(
        sim.registered(),
        [
            (Mem, InvalidateUnmaps, "nv_mem"),
            (Nc, InvalidateUnmaps, "nv_mem_nc")
        ]
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
fn without_the_persistent_api_only_the_invalidating_nv_mem() {
    for persistent in [0, 1] {
        let env = Env::bare();
        let sim = env.sim();
        assert_eq!(env.drv.init(0, persistent, false), Ok(()));
        assert_eq!(
            sim.take_calls(),
            [Call::Register(Mem, InvalidateUnmaps, "nv_mem")],
            "persistent_api_support={persistent}"
        );
        // Asked for the persistent client and not getting it is said at
        // load; asking for the legacy clients is served as far as possible.
        let logs = sim.logs();
        if persistent == 1 {
            assert_eq!(logs.len(), 1, "{logs:?}");
            assert!(logs[0].1.contains("no persistent-pages API"));
        } else {
            assert!(logs.is_empty(), "{logs:?}");
        }
        env.drv.exit();
        assert_eq!(sim.take_calls(), [Call::Unregister(Mem)]);
        assert!(sim.violations().is_empty());
    }
}

#[test]
fn legacy_style_is_passed_through() {
    let env = Env::bare();
    let sim = env.sim();
    assert_eq!(env.drv.init(1, 0, true), Ok(()));
    assert_eq!(
        sim.take_calls(),
        [
            Call::Register(Mem, Legacy, "nv_mem"),
            Call::Register(Nc, Legacy, "nv_mem_nc")
        ]
    );
    env.drv.exit();
    assert!(sim.registered().is_empty());
}

#[test]
fn bad_persistent_api_support_is_einval_and_registers_nothing() {
    for value in [2, -1, 3, i32::MIN, i32::MAX] {
        for available in [true, false] {
            let env = Env::bare();
            let sim = env.sim();
            assert_eq!(
                env.drv.init(0, value, available),
                Err(EINVAL),
                "persistent_api_support={value}"
            );
            assert!(sim.take_calls().is_empty(), "nothing registered");
            let logs = sim.logs();
            assert_eq!(logs.len(), 1);
            assert_eq!(logs[0].0, Level::Error);
            assert_eq!(logs[0].2, i64::from(value));
            assert!(logs[0].1.contains("persistent_api_support"));
        }
    }
}

#[test]
fn nc_registration_failure_rolls_back_nv_mem() {
    let env = Env::bare();
    let sim = env.sim();
    sim.fail_nth(Op::RegisterNc, 1, INJECTED);
    assert_eq!(
        env.drv.init(0, 0, true),
        Err(INJECTED),
        "the core's error is returned"
    );
    assert_eq!(
        sim.take_calls(),
        [
            Call::Register(Mem, InvalidateUnmaps, "nv_mem"),
            Call::Register(Nc, InvalidateUnmaps, "nv_mem_nc"),
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
    assert_eq!(env.drv.init(0, 0, true), Ok(()));
    assert_eq!(sim.registered().len(), 2);
}

#[test]
fn nv_mem_registration_failure_registers_nothing() {
    let env = Env::bare();
    let sim = env.sim();
    sim.fail_nth(Op::RegisterMem, 1, EINVAL);
    assert_eq!(env.drv.init(0, 0, true), Err(EINVAL));
    assert_eq!(
        sim.take_calls(),
        [Call::Register(Mem, InvalidateUnmaps, "nv_mem")]
    );
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
