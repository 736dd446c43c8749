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
#
# The same file watches the modules nv_peer_mem is built against, as apt's
# provider watch does (docs/fleet.md, "A provider updated alone"): an
# NVIDIA driver or MLNX_OFED update that comes alone, on the same kernel,
# can leave the kmod's module importing symbol versions the new nvidia.ko
# or ib_core.ko no longer exports, and the node would boot without
# nv_peer_mem. The kmod's Requires cannot say so (the providers' CRCs are
# package relations, not ksym() requirements: docs/packaging.md), so
# dnf's resolver lets such an update through. pre_transaction() notes the
# provider modules of each kernel nv_peer_mem is installed for;
# transaction() runs after rpm and its scriptlets (a DKMS driver's build
# included) and asks gpudirect-rdma-check --kernel about each kernel whose
# notes changed: where the verdict is a stale symbol, it prints the
# check's failing line and fix and dnf exits 1; what rpm did stays done.
#
# On a node where DKMS builds nv_peer_mem instead (the -dkms route, its
# tree under /var/lib/dkms/nv_peer_mem; the kernel guard above is the
# kmod's), transaction() also asks the check about each kernel the
# transaction installed, after kernel-install's 40-dkms.install ran in the
# kernel's %posttrans: where nv_peer_mem will not load there (DKMS built
# nothing: no kernel-devel for it, a prerequisite missing, a failed
# build), it prints why and the fix and dnf exits 1, as dnf5's guard does
# on Fedora (docs/fleet.md, "The dnf guard", "The dnf5 guard").
import json
import os
import subprocess

import dnf
import dnf.exceptions

KMOD = "kmod-nvidia_peer_memory"


def uname_release(package):
    """The release `uname -r` prints when the node boots @package, where
    @package installs a kernel: every kernel-<variant>-core of the RHEL
    family and Fedora provides kernel-uname-r = <release> (kernel.spec's
    kernel_reqprovconf), and a variant's release is not its package's
    version-release.arch (kernel-64k-debug-core's ends in +64k_debug:
    docs/fleet.md, "The dnf guard"). None for any other package."""
    for provide in package.provides:
        name, _, release = str(provide).partition(" = ")
        if name == "kernel-uname-r" and release:
            return release
    return None


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
        kernels = [p for p in coming if uname_release(p) and any(
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
                missing.append((kernel, uname_release(kernel), min(gaps, key=len)))
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


# The modules that export what nv_peer_mem imports: the NVIDIA driver's
# nvidia.ko and MLNX_OFED's ib_core.ko, compressed or not (apt's watch
# notes the same names).
PROVIDERS = ("nvidia.ko", "ib_core.ko")
CHECK = "/usr/sbin/gpudirect-rdma-check"


def provider_notes(root):
    """For each kernel under @root that has an nv_peer_mem.ko* (the kmod's
    file or weak-modules' link), the path, size and mtime of each provider
    module there: {kernel: frozenset((path, size, mtime_ns))}. A kernel
    with none is noted too, so that one arriving is a change."""
    notes = {}
    modules = os.path.join(root, "lib/modules")
    try:
        kernels = sorted(os.listdir(modules))
    except OSError:
        return notes
    for kernel in kernels:
        top = os.path.join(modules, kernel)
        if not os.path.isdir(top):
            continue
        ours = False
        found = set()
        for directory, _, files in os.walk(top):
            for name in files:
                if name.startswith("nv_peer_mem.ko"):
                    ours = True
                elif name.startswith(PROVIDERS):
                    path = os.path.join(directory, name)
                    try:
                        # stat, not lstat: a weak-modules link's target
                        # is what changes.
                        st = os.stat(path)
                        found.add((path, st.st_size, st.st_mtime_ns))
                    except OSError:
                        found.add((path, -1, -1))
        if ours:
            notes[kernel] = frozenset(found)
    return notes


def verdict(check, root, kernel):
    """gpudirect-rdma-check --kernel's verdict on @kernel in @root: None
    where nv_peer_mem will load or the check cannot tell, else (the JSON
    verdict, its failing lines with their fixes)."""
    env = dict(os.environ, NV_PEER_MEM_ROOT=root)
    try:
        run = subprocess.run([check, "--kernel", kernel, "--json"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             universal_newlines=True)
    except OSError:
        return None
    if run.returncode != 4:
        return None
    try:
        judged = json.loads(run.stdout)
    except ValueError:
        return None
    lines = []
    for fact in judged.get("facts", []):
        if fact.get("status") == "fail":
            lines.append("  FAIL %s %s" % (fact.get("check", ""), fact.get("message", "")))
            if fact.get("fix"):
                lines.append("       fix: %s" % fact["fix"])
    return judged, lines


def banner(kernel, head, lines):
    """The failure text for @kernel: @head, the check's failing @lines, and
    what stays done and how to see it mended."""
    return ["*" * 70] + head + lines + [
        "  rpm's changes are kept. Once the fix is in, gpudirect-rdma-check",
        "  --kernel %s says OK." % kernel,
        "*" * 70,
    ]


class NvPeerMemProviderWatch(dnf.Plugin):
    """The provider watch (docs/fleet.md, "A provider updated alone"), and
    the -dkms route's kernel check ("The dnf guard")."""

    name = "nv_peer_mem"

    def __init__(self, base, cli):
        super(NvPeerMemProviderWatch, self).__init__(base, cli)
        self.before = None

    def _root(self):
        # dnf's --installroot (/ on a node) holds the kernels and the
        # check reads it through NV_PEER_MEM_ROOT.
        return self.base.conf.installroot or "/"

    def _new_kernels_lost(self, check, root):
        """On a node where DKMS builds nv_peer_mem (its tree has it: the
        -dkms route, which the kernel guard leaves alone), each kernel this
        transaction installed where the check says nv_peer_mem will not
        load, after rpm and the kernel's %posttrans (kernel-install, where
        DKMS's 40-dkms.install builds): [(release, lines)]."""
        if not os.path.isdir(os.path.join(root, "var/lib/dkms/nv_peer_mem")):
            return []
        transaction = self.base.transaction
        if transaction is None:
            return []
        releases = sorted({uname_release(p) for p in transaction.install_set} - {None})
        lost = []
        for release in releases:
            judged = verdict(check, root, release)
            if judged is not None:
                lost.append((release, judged[1]))
        return lost

    def pre_transaction(self):
        self.before = provider_notes(self._root())

    def transaction(self):
        if self.before is None:
            return
        root = self._root()
        after = provider_notes(root)
        # Kernels nv_peer_mem is still installed for whose notes changed
        # (one it arrived on is new, so changed).
        changed = sorted(k for k in after if self.before.get(k) != after[k])
        self.before = None
        check = os.environ.get("NV_PEER_MEM_CHECK", CHECK)
        if not os.access(check, os.X_OK):
            return
        lost = self._new_kernels_lost(check, root)
        if not changed and not lost:
            return
        stale = []
        judged_already = {kernel for kernel, _ in lost}
        for kernel in changed:
            if kernel in judged_already:
                continue
            judged = verdict(check, root, kernel)
            if judged is None:
                continue
            result, lines = judged
            if result.get("stale_symbol"):
                stale.append((kernel, lines))
            else:
                # LOST for another reason (a provider removed): said, not
                # failed; removing a driver is a choice a rebuild does not undo.
                print("nv_peer_mem: after this transaction nv_peer_mem will not load on kernel %s:\n%s"
                      % (kernel, "\n".join(lines)))
        if not stale and not lost:
            return
        text = []
        for kernel, lines in lost:
            text += banner(kernel, [
                "nv_peer_mem: this transaction installed kernel %s, and nv_peer_mem" % kernel,
                "  will not load on it: DKMS built no loadable module for it. Booted",
                "  into %s, the node has no GPUDirect RDMA." % kernel,
            ], lines)
        for kernel, lines in stale:
            text += banner(kernel, [
                "nv_peer_mem: after this transaction nv_peer_mem will not load on kernel %s:" % kernel,
                "  a module it is built against (the NVIDIA driver's or MLNX_OFED's)",
                "  changed under it. The node keeps working until it reboots; booted",
                "  into %s, it has no GPUDirect RDMA." % kernel,
            ], lines)
        raise dnf.exceptions.Error("\n".join(text))
