//! Booting one guest in QEMU (TCG: 2 vCPUs, or 1 counting instructions for
//! the benchmark) and streaming its console into
//! the console reader, within two bounds: the guest must report that it
//! booted within a boot bound, and the whole run must end within the
//! caller's bound.

use super::arch::Arch;
use super::console::{Console, Outcome};
use anyhow::{Context, Result};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// test-vm's busybox guest reaches init in seconds.
const BOOT_BOUND: Duration = Duration::from_secs(120);
/// A quiet console gets a "still running" line this often.
const QUIET_NOTICE: Duration = Duration::from_secs(30);

/// oops=panic + panic=-1 + -no-reboot: a crash ends QEMU at once.
/// loglevel=5: warnings and worse reach the console as they happen.
macro_rules! crash_args {
    () => {
        "panic=-1 oops=panic loglevel=5"
    };
}
/// The benchmark's boot (bench.rs): [`KERNEL_ARGS`] without slub_debug.
pub const BENCH_KERNEL_ARGS: &str = crash_args!();
/// slub_debug=FZP: sanity checks, red zones and poisoning, so a double free
/// or a write after free is reported (and fails the run) instead of passing
/// silently. The console device comes first (Arch::qemu), the iteration
/// divisor after (Arch::iter_divisor; the guest's scenarios read it).
pub const KERNEL_ARGS: &str = concat!(crash_args!(), " slub_debug=FZP");

/// What QEMU boots.
pub struct Guest {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// The kernel command line.
    pub append: String,
    /// Raw disk images attached as virtio, in order (/dev/vda, /dev/vdb, ...).
    pub disks: Vec<PathBuf>,
    /// How long the guest may take to print NVPMTEST-BOOTED.
    pub boot_bound: Duration,
    pub arch: Arch,
    pub run_to: RunTo,
    pub clock: Clock,
    /// UEFI firmware instead of QEMU's default BIOS (boot-image --uefi-vars).
    pub uefi: Option<Uefi>,
}

/// edk2's OVMF as two pflash devices, the way QEMU's documentation and
/// Debian's ovmf README.Debian pair them: the code read-only, the variable
/// store writable. QEMU's `-kernel` still names the kernel: OVMF loads it
/// through its EFI stub (and, under Secure Boot, verifies its signature
/// against the store's db first), so the kernel sees an EFI boot with the
/// store's variables (docs/fleet.md, "A Secure Boot node").
pub struct Uefi {
    /// OVMF_CODE_4M.fd: Secure Boot capable without SMM (README.Debian)
    pub code: PathBuf,
    /// the guest's own copy of a variable store; the guest may write it
    pub vars: PathBuf,
}

/// How the guest's clock relates to the host.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// TCG with 2 vCPUs running in parallel (MTTCG): the guest's time is
    /// the host's, so everything else on the host slows it down.
    Host,
    /// One vCPU under `-icount shift=0,sleep=off` (QEMU docs, "icount"):
    /// the virtual clock advances exactly 1 ns per guest instruction and
    /// jumps over idle time, so a guest-timed interval counts the
    /// instructions run in it, whatever else the host does. For the
    /// benchmark (docs/testing.md, "The benchmark's clock").
    InstructionCount,
}

/// How long a guest runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum RunTo {
    /// every scenario, the leak ledger and the console check
    End,
    /// until the first FAIL or kernel splat: all a mutant needs to be
    /// killed (mutants.rs); a guest that passes runs to the end
    FirstFailure,
}

enum Event {
    Line(String),
    Eof,
}

/// Boots @vmlinuz with @initrd (test-vm's busybox guest), logs the console
/// to @work/console.log and returns the count of the @expected scenarios.
pub fn boot(
    kver: &str,
    arch: Arch,
    vmlinuz: &Path,
    initrd: &Path,
    work: &Path,
    bound: Duration,
    expected: Vec<String>,
) -> Result<Outcome> {
    let guest = busybox_guest(arch, vmlinuz, initrd, RunTo::End);
    let console = Console::expecting(kver, expected);
    boot_guest(&guest, console, &work.join("console.log"), bound)
}

/// [`boot`], stopping the guest as @run_to says.
pub fn boot_until(
    kver: &str,
    arch: Arch,
    vmlinuz: &Path,
    initrd: &Path,
    work: &Path,
    bound: Duration,
    run_to: RunTo,
) -> Result<Outcome> {
    let guest = busybox_guest(arch, vmlinuz, initrd, run_to);
    boot_guest(&guest, Console::new(kver), &work.join("console.log"), bound)
}

pub(super) fn busybox_guest(arch: Arch, vmlinuz: &Path, initrd: &Path, run_to: RunTo) -> Guest {
    busybox_guest_with(arch, vmlinuz, initrd, run_to, KERNEL_ARGS)
}

/// [`busybox_guest`] with @kernel_args in place of [`KERNEL_ARGS`].
pub(super) fn busybox_guest_with(
    arch: Arch,
    vmlinuz: &Path,
    initrd: &Path,
    run_to: RunTo,
    kernel_args: &str,
) -> Guest {
    let (_, _, console) = arch.qemu();
    Guest {
        kernel: vmlinuz.to_path_buf(),
        initrd: initrd.to_path_buf(),
        append: format!(
            "console={console} {kernel_args} nvpm.iter_divisor={}",
            arch.iter_divisor()
        ),
        disks: Vec::new(),
        boot_bound: BOOT_BOUND,
        arch,
        run_to,
        clock: Clock::Host,
        uefi: None,
    }
}

/// Boots @guest, feeds its console to @console, logs it to @log_path and
/// returns @console's count.
pub fn boot_guest(
    guest: &Guest,
    mut console: Console,
    log_path: &Path,
    bound: Duration,
) -> Result<Outcome> {
    let kver = console.kver().to_string();
    let mut log =
        fs::File::create(log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let (program, machine, _) = guest.arch.qemu();
    let (smp, clock_args, clock_what): (&str, &[&str], &str) = match guest.clock {
        Clock::Host => ("2", &[], "TCG, 2 vCPUs"),
        Clock::InstructionCount => (
            "1",
            &["-icount", "shift=0,sleep=off"],
            "TCG, 1 vCPU, -icount: 1 virtual ns per instruction",
        ),
    };
    println!(
        "  [{kver}] booting {program} ({clock_what}); console log: {}",
        log_path.display()
    );
    let mut qemu = Command::new(program);
    qemu.args(machine)
        .args(clock_args)
        .args(["-m", "1024", "-smp", smp, "-kernel"])
        .arg(&guest.kernel)
        .arg("-initrd")
        .arg(&guest.initrd)
        .args(["-append", &guest.append, "-nographic", "-no-reboot"])
        // No network device: the guests need none.
        .args(["-nic", "none"]);
    if let Some(uefi) = &guest.uefi {
        for (unit, file, access) in [(0, &uefi.code, ",readonly=on"), (1, &uefi.vars, "")] {
            qemu.arg("-drive").arg(format!(
                "if=pflash,format=raw,unit={unit}{access},file={}",
                file.display()
            ));
        }
    }
    for disk in &guest.disks {
        qemu.arg("-drive")
            .arg(format!("file={},format=raw,if=virtio", disk.display()));
    }
    let mut child = qemu
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| {
            format!(
                "starting {program} (apt-get install {})",
                guest.arch.qemu_package()
            )
        })?;
    let (tx, rx) = mpsc::channel();
    for stream in [
        Box::new(child.stdout.take().expect("piped")) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().expect("piped")),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || forward_lines(stream, tx));
    }
    drop(tx);

    let start = Instant::now();
    let mut last_output = Instant::now();
    let mut eofs = 0;
    let mut failure: Option<String> = None;
    let mut stopped_early = false;
    while eofs < 2 {
        let limit = if console.booted() {
            bound
        } else {
            guest.boot_bound
        };
        if start.elapsed() > limit {
            failure = Some(if console.booted() {
                format!(
                    "guest did not finish within {} s (stuck after \"{}\")",
                    bound.as_secs(),
                    console.last_scenario()
                )
            } else {
                format!(
                    "guest did not report booting within {} s",
                    guest.boot_bound.as_secs()
                )
            });
            break;
        }
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(Event::Line(line)) => {
                writeln!(log, "{line}")?;
                last_output = Instant::now();
                console.line(&line, start.elapsed());
                if guest.run_to == RunTo::FirstFailure && console.failed_already() {
                    println!(
                        "  [{kver}] first failure after \"{}\": guest stopped there",
                        console.last_scenario()
                    );
                    stopped_early = true;
                    failure = Some(format!(
                        "stopped at its first failure (after \"{}\"), as --mutants does",
                        console.last_scenario()
                    ));
                    break;
                }
            }
            Ok(Event::Eof) => eofs += 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if last_output.elapsed() > QUIET_NOTICE {
                    println!(
                        "  [{kver}] ... still running after \"{}\" ({:.0} s)",
                        console.last_scenario(),
                        start.elapsed().as_secs_f64()
                    );
                    last_output = Instant::now();
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // QEMU exits by itself after a power-off; give it a moment, then kill
    // (at once when the guest was stopped at its first failure).
    let grace = if stopped_early { 0 } else { 10 };
    let deadline = Instant::now() + Duration::from_secs(grace);
    while child.try_wait()?.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    if child.try_wait()?.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    Ok(console.verdict(failure, log_path))
}

/// Sends each line of @stream (without its line end; invalid UTF-8
/// replaced), then Eof.
fn forward_lines(stream: Box<dyn std::io::Read + Send>, tx: mpsc::Sender<Event>) {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buf)
                    .trim_end_matches(['\r', '\n'])
                    .to_string();
                if tx.send(Event::Line(line)).is_err() {
                    break;
                }
            }
        }
    }
    let _ = tx.send(Event::Eof);
}
