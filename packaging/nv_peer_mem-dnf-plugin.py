# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# dnf's guard for nodes on the kmod route (RHEL and its rebuilds; docs/fleet.md,
# "The dnf guard"), installed by nvidia_peer_memory-common as the dnf 4 plugin
# nv_peer_mem (dnf 4 is RHEL 8, 9 and 10's dnf). After dnf has resolved a
# transaction and before it changes anything, it looks at every kernel the
# transaction installs: the node boots it with nv_peer_mem only when a
# kmod-nvidia_peer_memory installed or coming in the same transaction fits it.
# A kmod fits a kernel when the kernel provides every kernel(<symbol>) =
# <CRC> the kmod requires (its kABI, as rpm's find-requires.ksyms wrote it and
# the kernel's kabi.sh provides): then weak-modules links the kmod's module
# into that kernel's weak-updates when the kernel is installed. Where none
# fits, it names the kernel and what to build and fails the transaction:
# `dnf upgrade` would otherwise install a kernel the node boots without
# GPUDirect RDMA, silently (NVIDIA's precompiled kmod streams ship a dnf
# plugin for the same reason). `dnf --disableplugin=nv_peer_mem ...` lets it
# through. Nodes without a kmod-nvidia_peer_memory (DKMS builds for the new
# kernel) are left alone.
import dnf
import dnf.exceptions

KMOD = "kmod-nvidia_peer_memory"
# The packages that put a kernel in /lib/modules on the RHEL family: its
# kernel(<symbol>) provides are on kernel-core from RHEL 8 on; the rt and
# 64k variants are their own packages of the same shape.
KERNELS = ("kernel-core", "kernel-rt-core", "kernel-64k-core", "kernel")


def kabi_requires(package):
    """The kmod's kernel(<symbol>) = <CRC> requirements, as strings."""
    return {str(r) for r in package.requires if str(r).startswith("kernel(")}


def unmet(kernel, kmod):
    """What @kmod requires of the kernel that @kernel does not provide."""
    provides = {str(p) for p in kernel.provides if str(p).startswith("kernel(")}
    return sorted(kabi_requires(kmod) - provides)


class NvPeerMemKernelGuard(dnf.Plugin):
    name = "nv_peer_mem"

    def resolved(self):
        transaction = self.base.transaction
        if transaction is None:
            return
        coming = list(transaction.install_set)
        kernels = [p for p in coming if p.name in KERNELS and any(
            str(q).startswith("kernel(") for q in p.provides)]
        if not kernels:
            return
        leaving = {str(p) for p in transaction.remove_set}
        installed = self.base.sack.query().installed().filter(name=KMOD)
        kmods = [p for p in installed if str(p) not in leaving]
        kmods += [p for p in coming if p.name == KMOD]
        if not kmods:
            return
        missing = []
        for kernel in kernels:
            gaps = [unmet(kernel, kmod) for kmod in kmods]
            if all(gaps):
                release = "%s-%s.%s" % (kernel.version, kernel.release, kernel.arch)
                missing.append((kernel, release, min(gaps, key=len)))
        if not missing:
            return
        lines = []
        for kernel, release, gap in missing:
            shown = ", ".join(gap[:3]) + (" and %d more" % (len(gap) - 3) if len(gap) > 3 else "")
            lines.append(
                "nv_peer_mem: dnf would install %s, and no %s fits it: it does not "
                "provide %s (its kABI changed), so weak-modules cannot link the "
                "installed module into it and the node would boot it without "
                "GPUDirect RDMA. Nothing was changed. Build the kmod for it "
                "(cargo xtask build-modules --distro <rhel id> --kernel %s, or "
                "rpmbuild --rebuild the source rpm on a host with that kernel's "
                "kernel-devel), publish it, then run this again: dnf installs both "
                "together. To install the kernel without it anyway: dnf "
                "--disableplugin=nv_peer_mem ..." % (kernel, KMOD, shown, release))
        raise dnf.exceptions.Error("\n".join(lines))
