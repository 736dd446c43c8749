//! `cargo xtask boot-image`: boots a Debian system from a disk image (the
//! booted-image test, ci/test-image.sh) and reads its console with the VM
//! harness's protocol: the guest prints `NVPMTEST-BOOTED` when its test
//! unit starts, `NVPMTEST PASS|FAIL <check>: <detail>` per check and
//! `NVPMTEST-END`, then powers off. Every expected check must pass, and the
//! console must hold no kernel splat.

use super::arch::Arch;
use super::boot::{Clock, Guest, KERNEL_ARGS, RunTo, Uefi, boot_guest};
use super::console::{Console, SCENARIOS};
use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct BootImageArgs {
    /// Name of this boot in the output (e.g. the kernel and the phase)
    #[arg(long)]
    label: String,
    /// The kernel to boot (taken from the image's /boot)
    #[arg(long, value_name = "VMLINUZ")]
    kernel: PathBuf,
    /// Its initrd (taken from the image's /boot)
    #[arg(long, value_name = "INITRD")]
    initrd: PathBuf,
    /// The raw ext4 disk image holding the root filesystem (/dev/vda)
    #[arg(long, value_name = "IMG")]
    disk: PathBuf,
    /// More raw disk images, attached after it in order (/dev/vdb, ...):
    /// e.g. a repository the host serves to the guest
    #[arg(long, value_name = "IMG")]
    extra_disk: Vec<PathBuf>,
    /// More kernel command line words, after root=/dev/vda and the harness's
    #[arg(long, default_value = "")]
    append: String,
    /// The checks the guest must report, comma-separated, in order
    #[arg(long, value_delimiter = ',', required = true)]
    expect: Vec<String>,
    /// After --expect's checks, the VM harness's scenarios as test-vm
    /// expects them (the guest sources kmod/tests/vm/guest/scenarios.sh)
    #[arg(long)]
    vm_scenarios: bool,
    /// Boot through UEFI (edk2's OVMF) with this variable store: its db,
    /// Secure Boot state and MokListRT are what the guest's firmware and
    /// kernel see. The guest gets a copy beside --log; FILE is not changed.
    #[arg(long, value_name = "FILE")]
    uefi_vars: Option<PathBuf>,
    /// The OVMF code image for --uefi-vars (Debian's ovmf package)
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/usr/share/OVMF/OVMF_CODE_4M.fd"
    )]
    uefi_code: PathBuf,
    /// Where the console log goes
    #[arg(long, value_name = "FILE")]
    log: PathBuf,
    /// Seconds until the guest's test unit must have started
    #[arg(long, default_value_t = 600)]
    boot_timeout: u64,
    /// Seconds the whole boot may take
    #[arg(long, default_value_t = 1200)]
    timeout: u64,
}

pub fn boot_image_command(args: &BootImageArgs) -> Result<()> {
    let named = [
        ("--kernel", &args.kernel),
        ("--initrd", &args.initrd),
        ("--disk", &args.disk),
    ];
    let extra = args.extra_disk.iter().map(|d| ("--extra-disk", d));
    for (what, path) in named.into_iter().chain(extra) {
        if !path.is_file() {
            bail!("{what} {}: no such file", path.display());
        }
    }
    let uefi = match &args.uefi_vars {
        None => None,
        Some(vars) => {
            for (what, path, fix) in [
                ("--uefi-vars", vars, "make one with virt-fw-vars"),
                ("--uefi-code", &args.uefi_code, "apt-get install ovmf"),
            ] {
                if !path.is_file() {
                    bail!("{what} {}: no such file ({fix})", path.display());
                }
            }
            let copy = args.log.with_extension("uefi-vars.fd");
            std::fs::copy(vars, &copy)
                .with_context(|| format!("copying {} to {}", vars.display(), copy.display()))?;
            Some(Uefi {
                code: args.uefi_code.clone(),
                vars: copy,
            })
        }
    };
    let guest = Guest {
        kernel: args.kernel.clone(),
        initrd: args.initrd.clone(),
        append: format!(
            "root=/dev/vda rw console=ttyS0 {KERNEL_ARGS} {}",
            args.append
        )
        .trim_end()
        .to_string(),
        disks: std::iter::once(args.disk.clone())
            .chain(args.extra_disk.iter().cloned())
            .collect(),
        boot_bound: Duration::from_secs(args.boot_timeout),
        // The booted image is Debian 12 amd64, run to its end.
        arch: Arch::X86_64,
        run_to: RunTo::End,
        clock: Clock::Host,
        uefi,
    };
    let mut expected = args.expect.clone();
    if args.vm_scenarios {
        expected.extend(SCENARIOS.iter().map(|s| s.to_string()));
    }
    let console = Console::expecting(&args.label, expected);
    let outcome = boot_guest(
        &guest,
        console,
        &args.log,
        Duration::from_secs(args.timeout),
    )?;
    // Not at the start of a line: the calling script sums its own count.
    println!(
        "  boot-image {}: {} passed, {} failed",
        args.label, outcome.passed, outcome.failed
    );
    if outcome.failed > 0 {
        bail!(
            "boot-image {}: {} check(s) failed (console log: {})",
            args.label,
            outcome.failed,
            args.log.display()
        );
    }
    Ok(())
}
