//! The guest architecture test-vm boots: x86_64 (the host's, Debian's
//! amd64 kernels from the installed headers) or arm64 (Debian's arm64
//! kernel of the same ABI, cross-built, booted in qemu-system-aarch64 with
//! TCG). Everything that differs between the two is here: where the headers,
//! kernel image and busybox come from, the make variables of a cross build,
//! QEMU's machine and console, and the scenarios' iteration scale.

use crate::workspace;
use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Arch {
    X86_64,
    Arm64,
}

/// The cross build's make variables, set once per run (test_vm) and added
/// to every `make` the harness runs (builds.rs), so each Kbuild call of the
/// doubles and the module sees the same target.
static CROSS: OnceLock<Arch> = OnceLock::new();

/// Fixes the architecture every later `make` builds for.
pub fn set_build_arch(arch: Arch) {
    let _ = CROSS.set(arch);
}

/// The architecture the run builds for (x86_64 unless set).
pub fn build_arch() -> Arch {
    CROSS.get().copied().unwrap_or(Arch::X86_64)
}

/// Adds ARCH= and CROSS_COMPILE= to @cmd (a `make`) for an arm64 run.
pub fn cross_make_vars(cmd: &mut Command) {
    if CROSS.get() == Some(&Arch::Arm64) {
        cmd.arg("ARCH=arm64")
            .arg("CROSS_COMPILE=aarch64-linux-gnu-");
    }
}

/// Kernel of one guest: its release, headers, image and the busybox of its
/// architecture.
pub struct GuestKernel {
    pub arch: Arch,
    pub kver: String,
    pub kdir: PathBuf,
    pub vmlinuz: Option<PathBuf>,
    pub busybox: PathBuf,
}

impl Arch {
    pub fn parse(name: &str) -> Arch {
        if name == "arm64" {
            Arch::Arm64
        } else {
            Arch::X86_64
        }
    }

    /// The guest kernel for the amd64 release @amd64_kver (as ci/kernels.sh
    /// names it). x86_64: the installed headers, the image is fetched later
    /// (kernel_image.rs). arm64: ci/fetch-arm64-kernel.sh unpacks the arm64
    /// release of the same ABI (headers, image, busybox) once into the cache.
    pub fn guest_kernel(self, amd64_kver: &str) -> Result<GuestKernel> {
        match self {
            Arch::X86_64 => Ok(GuestKernel {
                arch: self,
                kver: amd64_kver.to_string(),
                kdir: PathBuf::from(format!("/usr/src/linux-headers-{amd64_kver}")),
                vmlinuz: None,
                busybox: PathBuf::from("/bin/busybox"),
            }),
            Arch::Arm64 => {
                let out = Command::new("bash")
                    .arg("ci/fetch-arm64-kernel.sh")
                    .arg(amd64_kver)
                    .current_dir(workspace::root())
                    .stderr(Stdio::inherit())
                    .output()
                    .context("running bash ci/fetch-arm64-kernel.sh")?;
                if !out.status.success() {
                    bail!("ci/fetch-arm64-kernel.sh {amd64_kver} failed (its message is above)");
                }
                let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
                let abi = amd64_kver.trim_end_matches("-amd64");
                let kver = format!("{abi}-arm64");
                Ok(GuestKernel {
                    arch: self,
                    kdir: root.join(format!("usr/src/linux-headers-{kver}")),
                    vmlinuz: Some(root.join(format!("boot/vmlinuz-{kver}"))),
                    busybox: root.join("bin/busybox"),
                    kver,
                })
            }
        }
    }

    /// qemu binary, its machine arguments and the kernel's console device.
    /// arm64: the `virt` board with the `max` CPU (it has pointer
    /// authentication, which Debian's arm64 kernel uses); pauth-impdef=on
    /// replaces the architected QARMA signing, very slow under TCG, by
    /// QEMU's cheaper implementation-defined one (QEMU docs, "Arm CPU
    /// features": pauth-impdef).
    pub fn qemu(self) -> (&'static str, &'static [&'static str], &'static str) {
        match self {
            Arch::X86_64 => (
                "qemu-system-x86_64",
                &["-accel", "tcg", "-cpu", "max"],
                "ttyS0",
            ),
            Arch::Arm64 => (
                "qemu-system-aarch64",
                &["-accel", "tcg", "-M", "virt", "-cpu", "max,pauth-impdef=on"],
                "ttyAMA0",
            ),
        }
    }

    /// The package that provides `qemu()`'s binary, for the error message.
    pub fn qemu_package(self) -> &'static str {
        match self {
            Arch::X86_64 => "qemu-system-x86",
            Arch::Arm64 => {
                "qemu-system-arm (from bookworm-backports, the same version as qemu-system-common)"
            }
        }
    }

    /// The divisor of the scenarios' iteration counts (the race's 10,000
    /// rounds, the benchmark's 100,000 lifecycles, the 200 load cycles),
    /// passed to the guest as `nvpm.iter_divisor=` on the kernel command
    /// line. Emulating arm64 with TCG on an x86 host is several times slower
    /// than x86 on x86, so the arm64 run does a tenth of the iterations: the
    /// same scenarios with the same checks, fewer rounds of the loops.
    pub fn iter_divisor(self) -> u32 {
        match self {
            Arch::X86_64 => 1,
            Arch::Arm64 => 10,
        }
    }
}
