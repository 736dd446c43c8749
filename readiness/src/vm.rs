//! Whether the check runs in a virtual machine, where the IOMMU and ACS it
//! can see are the hypervisor's model and the host's, which decide the
//! peer-to-peer path, are out of sight (docs/readiness.md, "In a VM").
//!
//! x86: CPUID leaf 1, ECX bit 31, which hypervisors set and hardware
//! leaves clear (Intel SDM vol. 2A, CPUID, "Not Used: Always returns 0";
//! the kernel's X86_FEATURE_HYPERVISOR, arch/x86/include/asm/cpufeatures.h).
//! Elsewhere: the firmware's DMI system vendor and product
//! (`/sys/class/dmi/id/sys_vendor`, `product_name`) naming a hypervisor.
//! The answer is recorded like a file, so a dump replays it; over a tree
//! (`NV_PEER_MEM_SYSFS`) only the tree's DMI files count.

use crate::host::Host;

/// DMI vendors and products of the common hypervisors, as they report
/// themselves (QEMU/KVM, Amazon EC2 Nitro, Hyper-V/Azure, Google Compute
/// Engine, VMware, Xen, VirtualBox).
const DMI_HYPERVISORS: [&str; 8] = [
    "QEMU",
    "KVM",
    "Amazon EC2",
    "Virtual Machine",
    "Google Compute Engine",
    "VMware",
    "Xen",
    "VirtualBox",
];

/// How the VM shows itself, or None on bare metal.
pub fn detect(host: &Host) -> Option<String> {
    // The CPU this runs on is the node's only when the node's own /sys is
    // read (a test tree stands for another node; a dump holds the answer).
    let this_cpu = host.sys == std::path::Path::new("/sys");
    let cpuid = host.answer("cpuid-hypervisor-bit", || {
        this_cpu.then(cpuid_hypervisor).flatten()
    });
    match cpuid.as_deref() {
        Some("1") => return Some("the CPU's hypervisor bit is set".to_owned()),
        Some("0") => return None,
        _ => {}
    }
    let dmi = |f: &str| host.text(&host.sys_path(&format!("class/dmi/id/{f}"))).ok();
    let seen = [dmi("sys_vendor"), dmi("product_name")];
    seen.iter()
        .flatten()
        .find(|v| DMI_HYPERVISORS.iter().any(|h| v.contains(h)))
        .map(|v| format!("the firmware says `{}`", v.trim()))
}

#[cfg(target_arch = "x86_64")]
// __cpuid is an unsafe fn before Rust 1.87 (the packages build with 1.85)
#[allow(unused_unsafe)]
fn cpuid_hypervisor() -> Option<String> {
    // SAFETY: CPUID leaf 1 exists on every x86-64 processor (it is part of
    // the x86-64 baseline) and has no side effects.
    let ecx = unsafe { std::arch::x86_64::__cpuid(1) }.ecx;
    Some(if ecx & (1 << 31) != 0 { "1" } else { "0" }.to_owned())
}

#[cfg(not(target_arch = "x86_64"))]
fn cpuid_hypervisor() -> Option<String> {
    None
}
