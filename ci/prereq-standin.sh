#!/usr/bin/env bash
# Stand-ins for the two kernel-side prerequisites of a loadable nv_peer_mem,
# for the packaging tests (ci/test-deb.sh on the host, ci/test-suites.sh
# inside a chroot): real modules built for one kernel that export the
# symbols dkms.conf looks for, placed where MLNX_OFED and the NVIDIA driver
# put theirs, never loaded.
#   prereq-standin.sh install KVER   build and place both for kernel KVER
#   prereq-standin.sh remove KVER    undo that (only what install placed)
# - NVIDIA: nvpm_standin_nvidia.ko exports nvidia_p2p_get_pages and goes to
#   /lib/modules/KVER/extra/nvpm-standin/, so depmod lists the symbol in
#   modules.symbols as it does for the driver from DKMS, .run or kmod packages.
# - MLNX_OFED: the Module.symvers line of nvpm_standin_mofed.ko, which
#   exports ib_register_peer_memory_client, in
#   /usr/src/ofa_kernel/<arch>/KVER/Module.symvers, the per-kernel copy
#   MLNX_OFED's DKMS package keeps (no headers: the module build still uses
#   kmod/compat's PeerDirect description).
# Needs the kernel's build tree (/lib/modules/KVER/build), gcc and make.
set -euo pipefail
[ $# = 2 ] || { echo "usage: prereq-standin.sh install|remove KVER" >&2; exit 2; }
action=$1 kver=$2
modules=/lib/modules/$kver
ofa=/usr/src/ofa_kernel/$(uname -m)/$kver
marker=$modules/extra/nvpm-standin/placed-by-prereq-standin

case "$action" in
install)
    [ -f "$modules/build/Makefile" ] || { echo "prereq-standin.sh: no build tree for $kver at $modules/build" >&2; exit 2; }
    [ ! -e "$ofa" ] || { echo "prereq-standin.sh: $ofa exists (a real MLNX_OFED?); not touching it" >&2; exit 2; }
    src=$(mktemp -d)
    trap 'rm -rf "$src"' EXIT
    cat >"$src/nvpm_standin_nvidia.c" <<'C'
// Test stand-in: exports the NVIDIA P2P entry point nv_peer_mem needs.
#include <linux/module.h>
int nvidia_p2p_get_pages(void) { return -EINVAL; }
EXPORT_SYMBOL(nvidia_p2p_get_pages);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("nv_peer_mem CI stand-in for the NVIDIA driver; never loaded");
C
    cat >"$src/nvpm_standin_mofed.c" <<'C'
// Test stand-in: exports MLNX_OFED's peer memory registration entry point.
#include <linux/module.h>
int ib_register_peer_memory_client(void) { return -EINVAL; }
EXPORT_SYMBOL(ib_register_peer_memory_client);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("nv_peer_mem CI stand-in for MLNX_OFED's ib_core; never loaded");
C
    echo 'obj-m := nvpm_standin_nvidia.o nvpm_standin_mofed.o' >"$src/Kbuild"
    make -s -C "$modules/build" M="$src" modules >&2
    mkdir -p "$modules/extra/nvpm-standin" "$ofa"
    cp "$src/nvpm_standin_nvidia.ko" "$modules/extra/nvpm-standin/"
    touch "$marker"
    grep -P '\tib_register_peer_memory_client\t' "$src/Module.symvers" >"$ofa/Module.symvers"
    depmod -a "$kver"
    ;;
remove)
    if [ -f "$marker" ]; then
        rm -rf "$modules/extra/nvpm-standin" "$ofa"
        rmdir --ignore-fail-on-non-empty "$modules/extra" "$(dirname "$ofa")" /usr/src/ofa_kernel 2>/dev/null || true
        depmod -a "$kver"
    fi
    ;;
*) echo "usage: prereq-standin.sh install|remove KVER" >&2; exit 2 ;;
esac
