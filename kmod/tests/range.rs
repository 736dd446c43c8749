//! 64 KiB widening of registered ranges.

use nv_peer_mem::range::{GPU_PAGE_SIZE, GpuRange};
use proptest::prelude::*;

const P: u128 = GPU_PAGE_SIZE as u128;
const TOP: u128 = 1 << 64;

/// The specification, in u128 so nothing can wrap.
fn check(addr: u64, size: u64) -> Result<(), TestCaseError> {
    let (a, s) = (addr as u128, size as u128);
    let end = a + s;
    let end_up = end.div_ceil(P) * P;
    match GpuRange::widen(addr, size) {
        None => {
            // Refused only when empty or when the widened end does not fit.
            prop_assert!(
                size == 0 || end_up >= TOP,
                "{addr:#x}+{size:#x} refused but fits"
            );
        }
        Some(r) => {
            prop_assert!(size != 0, "empty range accepted");
            let (start, len) = (r.start as u128, r.len as u128);
            let r_end = start + len;
            prop_assert!(r_end < TOP, "widened range wraps: {r:x?}");
            prop_assert_eq!(start % P, 0, "start aligned");
            prop_assert_eq!(r_end % P, 0, "end aligned");
            prop_assert!(start <= a && end <= r_end, "contains the input");
            prop_assert!(a - start < P, "minimal at the start");
            prop_assert!(r_end - end < P, "minimal at the end");
            prop_assert!(len > 0);
            prop_assert_eq!(r.pages() as u128, len / P);
            prop_assert_eq!(start, a / P * P);
            prop_assert_eq!(r_end, end_up);
        }
    }
    Ok(())
}

fn near_top() -> impl Strategy<Value = u64> {
    (0u64..=4 * GPU_PAGE_SIZE).prop_map(|d| u64::MAX - d)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn widen_any(addr in any::<u64>(), size in any::<u64>()) {
        check(addr, size)?;
    }

    #[test]
    fn widen_small_sizes(addr in any::<u64>(), size in 0u64..=4 * GPU_PAGE_SIZE) {
        check(addr, size)?;
    }

    #[test]
    fn widen_near_the_top(addr in near_top(), size in 0u64..=8 * GPU_PAGE_SIZE) {
        check(addr, size)?;
    }

    #[test]
    fn widen_ending_near_the_top(end in near_top(), size in 1u64..=8 * GPU_PAGE_SIZE) {
        check(end - size, size)?;
        check(end - size + 1, size)?;
    }

    #[test]
    fn widen_aligned_is_identity(page in 0u64..(u64::MAX >> 16) - 1, pages in 1u64..1024) {
        let addr = page << 16;
        let len = pages << 16;
        prop_assume!((addr as u128) + (len as u128) < TOP - P);
        prop_assert_eq!(GpuRange::widen(addr, len), Some(GpuRange { start: addr, len }));
    }

    #[test]
    fn widen_size_zero_refused(addr in any::<u64>()) {
        prop_assert_eq!(GpuRange::widen(addr, 0), None);
    }
}

#[test]
fn widen_examples() {
    let w = GpuRange::widen;
    let p = GPU_PAGE_SIZE;
    assert_eq!(w(0, 1), Some(GpuRange { start: 0, len: p }));
    assert_eq!(w(p - 1, 1), Some(GpuRange { start: 0, len: p }));
    assert_eq!(
        w(p - 1, 2),
        Some(GpuRange {
            start: 0,
            len: 2 * p
        })
    );
    assert_eq!(w(p, p), Some(GpuRange { start: p, len: p }));
    assert_eq!(
        w(0x1234_5678, 0x10),
        Some(GpuRange {
            start: 0x1234_0000,
            len: p
        })
    );
    // The last page that can be described: its end, 2^64 - 64 KiB, fits.
    assert_eq!(
        w(u64::MAX - 2 * p + 1, p),
        Some(GpuRange {
            start: u64::MAX - 2 * p + 1,
            len: p
        })
    );
    // Overflow is refused, never wrapped.
    assert_eq!(w(u64::MAX, 1), None);
    assert_eq!(
        w(u64::MAX - 2 * p + 2, p),
        None,
        "end rounds up past 2^64 - 1"
    );
    assert_eq!(w(u64::MAX - p + 1, p), None, "end is exactly 2^64");
    assert_eq!(w(1, u64::MAX), None);
    assert_eq!(w(u64::MAX, u64::MAX), None);
    assert_eq!(w(0, u64::MAX), None);
    // Empty.
    assert_eq!(w(0, 0), None);
    assert_eq!(w(0x1234_5678, 0), None);
    assert_eq!(
        GpuRange {
            start: 0,
            len: 3 * p
        }
        .pages(),
        3
    );
}
