//! kmod/rt/udivmod.rs, the 128-bit division the module links in place of
//! compiler_builtins', checked against Rust's own `/` and `%`.

#[path = "../rt/udivmod.rs"]
mod udivmod;

use proptest::prelude::*;
use udivmod::udivmod;

fn check(n: u128, d: u128) -> Result<(), TestCaseError> {
    prop_assert_eq!(udivmod(n, d), (n / d, n % d), "{} / {}", n, d);
    Ok(())
}

/// Divisors of every width, not just the wide ones `any` mostly yields.
fn divisor() -> impl Strategy<Value = u128> {
    prop_oneof![
        any::<u128>().prop_filter("non-zero", |d| *d != 0),
        (1u128..=u64::MAX as u128),
        (1u128..=1024),
        (0u32..128).prop_map(|s| 1u128 << s),
        (0u32..128, any::<u128>()).prop_map(|(s, x)| (x >> s).max(1)),
    ]
}

fn dividend() -> impl Strategy<Value = u128> {
    prop_oneof![
        any::<u128>(),
        any::<u64>().prop_map(u128::from),
        (0u32..128, any::<u128>()).prop_map(|(s, x)| x >> s),
        Just(u128::MAX),
        Just(0),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn matches_rust(n in dividend(), d in divisor()) {
        check(n, d)?;
    }

    #[test]
    fn divisor_close_to_dividend(n in any::<u128>(), delta in 0u128..4) {
        check(n, n.saturating_sub(delta).max(1))?;
        check(n, n.saturating_add(delta).max(1))?;
    }

    #[test]
    fn zero_divisor_contract(n in any::<u128>()) {
        prop_assert_eq!(udivmod(n, 0), (u128::MAX, n));
    }
}

#[test]
fn edges() {
    let cases = [
        (0, 1),
        (1, 1),
        (u128::MAX, 1),
        (u128::MAX, u128::MAX),
        (u128::MAX - 1, u128::MAX),
        (u128::MAX, u128::MAX - 1),
        (1 << 127, 3),
        (1 << 127, 1 << 127),
        ((1 << 127) - 1, 1 << 127),
        (u128::MAX, 1 << 64),
        (u128::MAX, (1 << 64) + 1),
        (u128::from(u64::MAX), u128::from(u64::MAX)),
        (10, 3),
        (3, 10),
    ];
    for (n, d) in cases {
        assert_eq!(udivmod(n, d), (n / d, n % d), "{n} / {d}");
    }
    assert_eq!(udivmod(0, 0), (u128::MAX, 0));
    assert_eq!(udivmod(42, 0), (u128::MAX, 42));
}
