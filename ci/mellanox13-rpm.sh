#!/usr/bin/env bash
# Usage: ci/mellanox13-rpm.sh <nv_peer_memory-1.3.tar.gz> <Debian kernel release> <scratch dir>
#
# Builds Mellanox's nvidia_peer_memory 1.3 binary rpm from the released
# tarball with its own spec (rpmbuild -bb --nodeps, KVERSION = the kernel),
# for ci/test-rpm.sh's upgrade test, and prints the rpm's path.
#
# 1.3's build needs what a machine with MLNX_OFED and the NVIDIA driver has
# (its Makefile and create_nv.symvers.sh):
#   - MLNX_OFED: OFA_KERNEL (the Makefile takes it from the environment)
#     with include/rdma/peer_mem.h, taken from the MLNX_OFED fixture
#     tarball at run time, and a Module.symvers exporting
#     ib_register_peer_memory_client and ib_unregister_peer_memory_client;
#   - NVIDIA: an nvidia*.ko below /lib/modules/<kernel>/ exporting the
#     nvidia_p2p_* functions 1.3 calls; create_nv.symvers.sh runs `nm` on
#     it to write nv.symvers.
# Both are stand-in modules built here for the kernel with the real symbol
# names (never loaded). The nvidia one is placed through an overlay mount
# on /lib/modules/<kernel> in a private mount namespace: nothing outside
# <scratch dir> changes.
# On this kernel (6.1) a module's __crc_ symbols are local (`r`) and 0 in
# the .ko, so create_nv.symvers.sh records CRC 0x0 for nvidia_p2p_*: that
# is 1.3's own behaviour on such a kernel (its module would not load
# against a real driver), irrelevant to a test of package upgrades.
set -euo pipefail
[ $# = 3 ] || { echo "usage: mellanox13-rpm.sh <nv_peer_memory-1.3.tar.gz> <kernel release> <scratch dir>" >&2; exit 2; }
tarball=$1 kver=$2 w=$3
fixtures=$(cd "$(dirname "$tarball")" && pwd)
mofed=$(ls "$fixtures"/mlnx-ofa_kernel-*.tar.gz 2>/dev/null | tail -n 1)
[ -f "$tarball" ] || { echo "mellanox13-rpm.sh: no $tarball" >&2; exit 2; }
[ -n "$mofed" ] || { echo "mellanox13-rpm.sh: no mlnx-ofa_kernel-*.tar.gz beside $tarball (its peer_mem.h is needed)" >&2; exit 2; }
[ -f "/lib/modules/$kver/build/Makefile" ] || { echo "mellanox13-rpm.sh: no build tree for $kver" >&2; exit 2; }

rm -rf "$w"
mkdir -p "$w/top/SOURCES" "$w/top/SPECS" "$w/unpack" "$w/standin" "$w/ofa/include/rdma" \
    "$w/modules/upper/extra/nvidia-standin" "$w/modules/work"
# The tarball's directory is nv_peer_memory-1.3; the spec's %setup wants
# %{name}-%{version}, as Mellanox's build_release.sh packs it.
tar -xzf "$tarball" -C "$w/unpack"
mv "$w/unpack/nv_peer_memory-1.3" "$w/unpack/nvidia_peer_memory-1.3"
tar -czf "$w/top/SOURCES/nvidia_peer_memory-1.3.tar.gz" -C "$w/unpack" nvidia_peer_memory-1.3
cp "$w/unpack/nvidia_peer_memory-1.3/nvidia_peer_memory.spec" "$w/top/SPECS/"
tar -xzf "$mofed" -O --wildcards '*/include/rdma/peer_mem.h' >"$w/ofa/include/rdma/peer_mem.h"

cat >"$w/standin/nvidia.c" <<'C'
// Test stand-in for the NVIDIA driver: the P2P entry points nv_peer_mem 1.3 calls.
#include <linux/module.h>
#define STANDIN(name) int name(void) { return -EINVAL; } EXPORT_SYMBOL(name)
STANDIN(nvidia_p2p_get_pages);
STANDIN(nvidia_p2p_put_pages);
STANDIN(nvidia_p2p_free_page_table);
STANDIN(nvidia_p2p_dma_map_pages);
STANDIN(nvidia_p2p_dma_unmap_pages);
STANDIN(nvidia_p2p_free_dma_mapping);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("nv_peer_mem CI stand-in for the NVIDIA driver; never loaded");
C
cat >"$w/standin/ib_core_standin.c" <<'C'
// Test stand-in for MLNX_OFED's ib_core: its peer memory registration.
#include <linux/module.h>
#define STANDIN(name) int name(void) { return -EINVAL; } EXPORT_SYMBOL(name)
STANDIN(ib_register_peer_memory_client);
STANDIN(ib_unregister_peer_memory_client);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("nv_peer_mem CI stand-in for MLNX_OFED's ib_core; never loaded");
C
echo 'obj-m := nvidia.o ib_core_standin.o' >"$w/standin/Kbuild"
make -s -C "/lib/modules/$kver/build" M="$w/standin" modules >&2
cp "$w/standin/nvidia.ko" "$w/modules/upper/extra/nvidia-standin/"
grep -P '\tib_(un)?register_peer_memory_client\t' "$w/standin/Module.symvers" >"$w/ofa/Module.symvers"

# rpmbuild inside the namespace; 1.3's spec calls %{prefix}, which no
# rpm defines (its Prefix: line), so define it as / (a relocatable root).
# --nodeps: 1.3's BuildRequires are RHEL's packages, which this Debian
# host's rpm database does not list.
unshare --mount --propagation private -- bash -c '
    set -e
    w=$1 kver=$2
    mount -t overlay overlay -o "lowerdir=/lib/modules/$kver,upperdir=$w/modules/upper,workdir=$w/modules/work" "/lib/modules/$kver"
    OFA_KERNEL=$w/ofa rpmbuild -bb --nodeps --define "_topdir $w/top" --define "_tmppath $w/tmp" \
        --define "KVERSION $kver" --define "prefix /" "$w/top/SPECS/nvidia_peer_memory.spec"' \
    mellanox13-rpm "$w" "$kver" >"$w/rpmbuild.log" 2>&1 || {
    tail -n 30 "$w/rpmbuild.log" >&2
    echo "mellanox13-rpm.sh: rpmbuild of 1.3 failed (log: $w/rpmbuild.log)" >&2
    exit 1
}
rpm=$(ls "$w"/top/RPMS/*/nvidia_peer_memory-1.3-*.rpm)
echo "$rpm"
