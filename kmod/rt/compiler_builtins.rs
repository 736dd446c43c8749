//! The module's own `compiler_builtins`: rustc links one into every
//! `no_std` crate. The kernel provides memcpy/memset/memcmp/bcmp and the
//! retpoline/return thunks; it does not export the 128-bit division helpers
//! that `core` calls, so they are implemented here (shift-and-subtract: the
//! module's logic never divides 128-bit values on a hot path).
#![no_std]
#![feature(compiler_builtins)]
#![compiler_builtins]
#![no_builtins]

#[path = "udivmod.rs"]
mod udivmod;
use udivmod::udivmod;

#[unsafe(no_mangle)]
pub extern "C" fn __udivti3(n: u128, d: u128) -> u128 {
    udivmod(n, d).0
}

#[unsafe(no_mangle)]
pub extern "C" fn __umodti3(n: u128, d: u128) -> u128 {
    udivmod(n, d).1
}

/// # Safety
/// `rem` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __udivmodti4(n: u128, d: u128, rem: *mut u128) -> u128 {
    let (q, r) = udivmod(n, d);
    if !rem.is_null() {
        // SAFETY: the caller's contract; checked non-null.
        unsafe { rem.write(r) };
    }
    q
}

#[unsafe(no_mangle)]
pub extern "C" fn __divti3(n: i128, d: i128) -> i128 {
    let (q, _) = udivmod(n.unsigned_abs(), d.unsigned_abs());
    let q = q as i128;
    if (n < 0) != (d < 0) { q.wrapping_neg() } else { q }
}

#[unsafe(no_mangle)]
pub extern "C" fn __modti3(n: i128, d: i128) -> i128 {
    let (_, r) = udivmod(n.unsigned_abs(), d.unsigned_abs());
    let r = r as i128;
    if n < 0 { r.wrapping_neg() } else { r }
}
