//! The few kernel error numbers the module returns, as positive values; the
//! FFI layer negates them (kernel convention: -EINVAL).

/// A kernel error number (positive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

pub const ENOMEM: Errno = Errno(12);
pub const EINVAL: Errno = Errno(22);
pub const EBUSY: Errno = Errno(16);

impl Errno {
    /// Maps a kernel-style return value (0 or -errno) to a Result. Positive
    /// values are not errors in the kernel's convention either.
    pub fn check(ret: i32) -> Result<(), Errno> {
        if ret < 0 {
            Err(Errno(ret.checked_neg().unwrap_or(EINVAL.0)))
        } else {
            Ok(())
        }
    }

    /// The kernel-style return value: -errno.
    pub fn to_kernel(self) -> i32 {
        -self.0
    }
}
