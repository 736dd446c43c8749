//! GPU address ranges. NVIDIA GPUs map memory in 64 KiB pages, so a
//! registration of `[addr, addr + size)` is widened to 64 KiB boundaries
//! before it is handed to the driver.

/// log2 of the GPU page size.
pub const GPU_PAGE_SHIFT: u32 = 16;
/// The GPU page size, 64 KiB.
pub const GPU_PAGE_SIZE: u64 = 1 << GPU_PAGE_SHIFT;
const GPU_PAGE_MASK: u64 = !(GPU_PAGE_SIZE - 1);

/// A range of GPU virtual addresses on 64 KiB boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuRange {
    /// First byte, 64 KiB aligned.
    pub start: u64,
    /// Length in bytes, a non-zero multiple of 64 KiB.
    pub len: u64,
}

impl GpuRange {
    /// Widens `[addr, addr + size)` to the smallest enclosing range on 64 KiB
    /// boundaries. Returns `None` for an empty range and for one whose end,
    /// or whose end rounded up, does not fit in 64 bits: such a range is
    /// refused, never wrapped around to a small one.
    pub fn widen(addr: u64, size: u64) -> Option<GpuRange> {
        if size == 0 {
            return None;
        }
        let end = addr.checked_add(size)?;
        let end = end.checked_add(GPU_PAGE_SIZE - 1)? & GPU_PAGE_MASK;
        let start = addr & GPU_PAGE_MASK;
        Some(GpuRange {
            start,
            len: end - start,
        })
    }

    /// Number of 64 KiB pages in the range.
    pub fn pages(&self) -> u64 {
        self.len >> GPU_PAGE_SHIFT
    }
}
