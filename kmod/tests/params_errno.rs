//! Parameter validation, the errno mapping and the dma mapping version
//! rule, as pure functions.

use nv_peer_mem::errno::{EBUSY, EINVAL, ENOMEM, Errno};
use nv_peer_mem::params::{
    Clients, PEERDIRECT_SUPPORT_DEFAULT, PEERDIRECT_SUPPORT_LEGACY, PERSISTENT_API_SUPPORT_DEFAULT,
    PERSISTENT_API_SUPPORT_LEGACY, ParamError, Params,
};
use nv_peer_mem::platform::{
    NVIDIA_P2P_DMA_MAPPING_VERSION, dma_mapping_version_compatible, version_compatible,
};
use nv_peer_mem::{ClientKind, RegistrationStyle};
use proptest::prelude::*;

#[test]
fn params_accepted_values() {
    use Clients::{Both, InvalidatingOnly, PersistentOnly};
    use RegistrationStyle::{InvalidateUnmaps, Legacy};
    assert_eq!(PEERDIRECT_SUPPORT_DEFAULT, 0);
    assert_eq!(PEERDIRECT_SUPPORT_LEGACY, 1);
    // nvidia-peermem.c >= 560.28.03: 0 [legacy] or 1 [default].
    assert_eq!(PERSISTENT_API_SUPPORT_LEGACY, 0);
    assert_eq!(PERSISTENT_API_SUPPORT_DEFAULT, 1);
    for (pd, persistent, available, style, clients) in [
        (0, 1, true, InvalidateUnmaps, PersistentOnly),
        (1, 1, true, Legacy, PersistentOnly),
        (0, 0, true, InvalidateUnmaps, Both),
        (1, 0, true, Legacy, Both),
        (0, 1, false, InvalidateUnmaps, InvalidatingOnly),
        (1, 0, false, Legacy, InvalidatingOnly),
    ] {
        assert_eq!(
            Params::from_raw(pd, persistent, available),
            Ok(Params { style, clients }),
            "{pd} {persistent} {available}"
        );
    }
    assert_eq!(PersistentOnly.to_register(), [(ClientKind::Nc, "nv_mem")]);
    assert_eq!(
        Both.to_register(),
        [(ClientKind::Mem, "nv_mem"), (ClientKind::Nc, "nv_mem_nc")]
    );
    assert_eq!(
        InvalidatingOnly.to_register(),
        [(ClientKind::Mem, "nv_mem")]
    );
}

#[test]
fn params_refused_values() {
    for v in [2, -1, i32::MIN, i32::MAX] {
        assert_eq!(
            Params::from_raw(v, 1, true),
            Err(ParamError::PeerDirectSupport(v))
        );
        // peerdirect_support is checked first, as nvidia-peermem does.
        assert_eq!(
            Params::from_raw(v, v, true),
            Err(ParamError::PeerDirectSupport(v))
        );
        assert_eq!(
            Params::from_raw(0, v, false),
            Err(ParamError::PersistentApiSupport(v))
        );
    }
}

proptest! {
    #[test]
    fn params_rule(pd in any::<i32>(), persistent in any::<i32>(), available in any::<bool>()) {
        match Params::from_raw(pd, persistent, available) {
            Ok(p) => {
                prop_assert!(pd == 0 || pd == 1);
                prop_assert!(persistent == 0 || persistent == 1);
                prop_assert_eq!(p.style, if pd == 0 { RegistrationStyle::InvalidateUnmaps } else { RegistrationStyle::Legacy });
                let want = match (available, persistent) {
                    (false, _) => Clients::InvalidatingOnly,
                    (true, 1) => Clients::PersistentOnly,
                    (true, _) => Clients::Both,
                };
                prop_assert_eq!(p.clients, want);
            }
            Err(ParamError::PeerDirectSupport(v)) => {
                prop_assert!(pd != 0 && pd != 1);
                prop_assert_eq!(v, pd);
            }
            Err(ParamError::PersistentApiSupport(v)) => {
                prop_assert!(pd == 0 || pd == 1);
                prop_assert!(persistent != 0 && persistent != 1);
                prop_assert_eq!(v, persistent);
            }
        }
    }

    #[test]
    fn errno_round_trip(e in 1i32..=4095) {
        prop_assert_eq!(Errno::check(-e), Err(Errno(e)));
        prop_assert_eq!(Errno(e).to_kernel(), -e);
        prop_assert_eq!(Errno::check(Errno(e).to_kernel()), Err(Errno(e)));
    }

    #[test]
    fn errno_non_negative_is_success(r in 0i32..=i32::MAX) {
        prop_assert_eq!(Errno::check(r), Ok(()));
    }

    #[test]
    fn errno_any_negative_is_a_positive_error(r in i32::MIN..0) {
        let e = Errno::check(r).unwrap_err();
        prop_assert!(e.0 > 0);
    }

    #[test]
    fn version_rule_is_nv_p2p_h_s(found in any::<u32>(), built in any::<u32>()) {
        // NVIDIA_P2P_VERSION_COMPATIBLE(p, v), written out from nv-p2p.h
        let header = ((found & 0xffff_0000) >> 16) == ((built & 0xffff_0000) >> 16)
            && (found & 0x0000_ffff) >= (built & 0x0000_ffff);
        prop_assert_eq!(version_compatible(found, built), header);
    }

    #[test]
    fn mapping_version_rule(v in any::<u32>()) {
        let (major, minor) = (v >> 16, v & 0xffff);
        prop_assert_eq!(dma_mapping_version_compatible(v), major == 2 && minor >= 3);
    }
}

#[test]
fn errno_values_and_edges() {
    assert_eq!((ENOMEM.0, EINVAL.0, EBUSY.0), (12, 22, 16));
    assert_eq!(Errno::check(0), Ok(()));
    assert_eq!(Errno::check(1), Ok(()));
    assert_eq!(Errno::check(-22), Err(EINVAL));
    assert_eq!(Errno::check(-12), Err(ENOMEM));
    // -i32::MIN does not fit: mapped to EINVAL rather than overflowing.
    assert_eq!(Errno::check(i32::MIN), Err(EINVAL));
    assert_eq!(Errno::check(i32::MIN + 1), Err(Errno(i32::MAX)));
}

#[test]
fn mapping_version_edges() {
    assert_eq!(NVIDIA_P2P_DMA_MAPPING_VERSION, 0x0002_0003);
    assert!(dma_mapping_version_compatible(0x0002_0003));
    assert!(dma_mapping_version_compatible(0x0002_0004));
    assert!(!dma_mapping_version_compatible(0x0002_0002));
    assert!(!dma_mapping_version_compatible(0x0003_0003));
    assert!(!dma_mapping_version_compatible(0x0001_0003));
    assert!(!dma_mapping_version_compatible(0x0003_0000));
}
