//! 128-bit unsigned division for compiler_builtins.rs; its own file so host
//! tests (kmod/tests/udivmod.rs) check it against Rust's operators.

/// Unsigned 128-bit division with remainder, restoring (shift-subtract)
/// algorithm. Division by zero returns (u128::MAX, n) instead of trapping:
/// Rust's own code checks for zero before calling these helpers.
pub fn udivmod(n: u128, d: u128) -> (u128, u128) {
    if d == 0 {
        return (u128::MAX, n);
    }
    if d > n {
        return (0, n);
    }
    let shift = d.leading_zeros() - n.leading_zeros();
    let mut d = d << shift;
    let mut r = n;
    let mut q: u128 = 0;
    let mut i = shift + 1;
    while i > 0 {
        q <<= 1;
        if r >= d {
            r -= d;
            q |= 1;
        }
        d >>= 1;
        i -= 1;
    }
    (q, r)
}
