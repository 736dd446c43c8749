//! The benchmark's own boot: the lifecycle benchmark of
//! kmod/tests/vm/oracle/guest.sh (nv_peer_mem against nvidia-peermem),
//! alone in a guest whose clock counts instructions, so its figures do not
//! depend on the host's load (docs/testing.md, "The benchmark's clock").

use super::arch::Arch;
use super::boot::{BENCH_KERNEL_ARGS, Clock, RunTo, boot_guest, busybox_guest_with};
use super::console::{Console, Outcome};
use super::oracle::Plan;
use super::oracle_report;
use anyhow::Result;
use std::path::Path;
use std::time::Duration;

/// Boots the benchmark for @kver when @plan has a reference client and the
/// benchmark module, and prints its report; the boot's count (its console
/// check) for the caller to add, None when there was nothing to run (the
/// report says why). Under the host's clock the same build measured 0.76x
/// and 1.17x of nvidia-peermem on a busy host.
pub fn run(
    kver: &str,
    plan: &Plan,
    vmlinuz: &Path,
    initrd: &Path,
    work: &Path,
    timeout: u64,
) -> Result<Option<Outcome>> {
    if plan.bench_reference.is_none() || plan.bench_ko.is_err() {
        oracle_report::report_bench(kver, plan, &Default::default());
        return Ok(None);
    }
    let bench = boot_bench(kver, vmlinuz, initrd, work, Duration::from_secs(timeout))?;
    oracle_report::report_bench(kver, plan, &bench.oracle);
    Ok(Some(bench))
}

/// Boots @vmlinuz with @initrd for the benchmark phase alone
/// (`nvpm.phase=bench`: kmod/tests/vm/guest/init skips the scenarios), one
/// vCPU counting instructions ([`Clock::InstructionCount`]), and without
/// slub_debug: its checks were about 70% of the instructions counted per
/// registration, in amounts set by allocation sizes and slab layout, not by
/// the client's code (docs/testing.md, "The benchmark's allocator"). The
/// console goes to @work/bench-console.log. Checks nothing but the console.
fn boot_bench(
    kver: &str,
    vmlinuz: &Path,
    initrd: &Path,
    work: &Path,
    bound: Duration,
) -> Result<Outcome> {
    let mut guest =
        busybox_guest_with(Arch::X86_64, vmlinuz, initrd, RunTo::End, BENCH_KERNEL_ARGS);
    guest.append.push_str(" nvpm.phase=bench");
    guest.clock = Clock::InstructionCount;
    let console = Console::expecting(kver, Vec::new());
    boot_guest(&guest, console, &work.join("bench-console.log"), bound)
}
