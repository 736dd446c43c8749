#!/usr/bin/env bash
# Tests of the service helper (packaging/nv_peer_mem-service) from this
# source tree, as root on a machine prepared by ci/setup-host.sh:
#   start/boot/stop against a fake /sys and a recording modprobe, and every
#   diagnosis `nv_peer_mem-service status` (so `systemctl status
#   nv_peer_mem`) makes, each provoked on its own: loaded or not, ONBOOT,
#   nvidia_peermem beside it, ib_core with and without the peer memory API
#   (inbox RDMA: the DMA-BUF route), the NVIDIA driver missing, no module for
#   the kernel, a module whose symbol CRCs differ from the installed
#   MLNX_OFED's or NVIDIA's Module.symvers (read with the real `modprobe
#   --dump-modversions` from a module built here), the kernel log's
#   "disagrees about version of symbol" and "Unknown symbol", and DKMS's
#   state for the kernel.
# What is faked and why: /sys, /proc/kallsyms and the kernel log (the host
# cannot load the module: it has no MLNX_OFED or GPU), and `dkms status`
# (a recorded answer in dkms 3.0's format, so no DKMS tree is touched).
# The module, modinfo, depmod and modprobe --dump-modversions are real.
# Last line: "N passed, M failed".
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${NVPM_TEST_DIR:-/var/tmp/nv-peer-mem-test-service}
. "$here/checks.sh"
require_root_and_tools test-service.sh make modinfo depmod modprobe
. "$here/kernels.sh"
kver=$KVER_BOOKWORM
[ -d "/lib/modules/$kver/build/" ] || { echo "test-service.sh: no headers for $kver; run: sudo bash ci/setup-host.sh" >&2; exit 2; }

rm -rf "$work"; mkdir -p "$work"
: >"$work/log"
helper=$root/packaging/nv_peer_mem-service
fake=$work/fake

# The fake machine, run_helper, status_says and the start/boot/stop
# checks the deb route's installed helper passes too.
. "$here/lib/service-helper.sh"

echo "== the unit"
unit=$root/packaging/nv_peer_mem.service
# Ordered after openibd, never starting it: an administrator may have
# disabled it (1.3's unit only ordered itself after it).
check "unit: After=openibd.service" grep -Eq '^After=.*\bopenibd\.service\b' "$unit"
check "unit: no Wants=/Requires=/BindsTo= of openibd" sh -c "! grep -Eq '^(Wants|Requires|Requisite|BindsTo)=.*openibd' '$unit'"

echo "== start, boot, stop"
start_stop_checks
boot_failure_diagnoses() {
    new_machine; touch "$fake/fail-nv_peer_mem"
    run_helper boot >"$fake/out" 2>&1
    local rc=$?
    cat "$fake/out"
    [ "$rc" = 1 ] && grep -q 'cannot load nv_peer_mem' "$fake/out" && grep -q "no nv_peer_mem module is installed for kernel $kver" "$fake/out"
}
check "boot that fails to load: exit 1 and the diagnosis (for the journal)" boot_failure_diagnoses
check "an unknown command: usage, exit 2" sh -c "sh '$helper' frobnicate 2>&1; test \$? = 2"

echo "== a module built here, with known symbol CRCs"
# MLNX_OFED and NVIDIA trees whose Module.symvers give the CRCs the build
# records in the module's __versions.
src=$work/src
mkdir -p "$src/ofa/include/rdma" "$src/nv"
cp -r "$root/kmod" "$src/kmod"
rm -rf "$src/kmod/build"
sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml" >"$src/kmod/VERSION"
cp "$root/kmod/compat/mofed/rdma/peer_mem.h" "$src/ofa/include/rdma/"
printf '0x11111111\tib_register_peer_memory_client\tdrivers/infiniband/core/ib_core\tEXPORT_SYMBOL\t\n0x22222222\tib_unregister_peer_memory_client\tdrivers/infiniband/core/ib_core\tEXPORT_SYMBOL\t\n' >"$src/ofa/Module.symvers"
cp "$root/kmod/compat/nvidia/nv-p2p.h" "$src/nv/"
: >"$src/nv/Module.symvers"
for sym in $(sed -n 's/.*\b\(nvidia_p2p_[a-z_]*\)(.*/\1/p' "$root/kmod/compat/nvidia/nv-p2p.h" | sort -u); do
    printf '0x33333333\t%s\tnvidia\tEXPORT_SYMBOL\t\n' "$sym" >>"$src/nv/Module.symvers"
done
check "the module builds against those trees" \
    make -C "$src/kmod" KVER="$kver" OFA_KERNEL="$src/ofa" NV_SRC="$src/nv"
ko=$src/kmod/nv_peer_mem.ko
check "its __versions record the tree's ib_core CRC" sh -c "modprobe --dump-modversions '$ko' | grep -q '0x11111111.*ib_register_peer_memory_client'"
# install_module: the module where DKMS puts it, the provider trees where
# MLNX_OFED and NVIDIA install theirs, depmod'ed.
install_module() {
    mkdir -p "$fake/root/lib/modules/$kver/updates/dkms" "$fake/root/usr/src/ofa_kernel/default" "$fake/root/usr/src/nvidia-999.1"
    cp "$ko" "$fake/root/lib/modules/$kver/updates/dkms/"
    cp "$src/ofa/Module.symvers" "$fake/root/usr/src/ofa_kernel/default/"
    cp "$src/nv/Module.symvers" "$fake/root/usr/src/nvidia-999.1/"
    depmod -b "$fake/root" "$kver"
}

echo "== status: each diagnosis"
new_machine
check "not loaded: exit 3, says so" status_says 3 '^nv_peer_mem: not loaded$'
check "no module for the kernel: says so" status_says 3 "no nv_peer_mem module is installed for kernel $kver"
check "ib_core not loaded: names openibd" status_says 3 'ib_core is not loaded: start .*openibd'
check "nvidia not loaded: says how" status_says 3 'NVIDIA driver \(nvidia\) is not loaded'

# A host without kmod's tools (the H100 host probed for this project has
# no modinfo): status must say so, not "no module installed"; start must
# name the package. PATH: /usr/bin without kmod's programs.
without_kmod() {
    local bin=$fake/nokmod f
    rm -rf "$bin" && mkdir -p "$bin"
    for f in /usr/bin/*; do
        case ${f##*/} in kmod|modinfo|modprobe|depmod|insmod|rmmod|lsmod) continue ;; esac
        ln -s "$f" "$bin/"
    done
    env PATH="$bin" NV_PEER_MEM_SYSFS="$fake/sys" NV_PEER_MEM_CONF="$fake/conf" \
        NV_PEER_MEM_PROC="$fake/proc" NV_PEER_MEM_ROOT="$fake/root" NV_PEER_MEM_KVER="$kver" \
        NV_PEER_MEM_KLOG="$fake/klog" NV_PEER_MEM_DPKG_ADMINDIR="$fake/root/var/lib/dpkg" sh "$helper" "$@" >"$fake/nokmod.out" 2>&1
    echo "exit $?" >>"$fake/nokmod.out"
    cat "$fake/nokmod.out"
}
nokmod_says() { # <helper verb> <exit> <pattern>
    without_kmod "$1" && grep -qx "exit $2" "$fake/nokmod.out" && grep -Eq -- "$3" "$fake/nokmod.out"
}
nokmod_status() {
    nokmod_says status 3 'modinfo is not installed.*install kmod' && ! grep -q 'no nv_peer_mem module is installed' "$fake/nokmod.out"
}
check "no kmod tools: status says modinfo is missing and to install kmod, not 'no module'" nokmod_status
check "no kmod tools: start exits 1 naming modprobe and kmod" nokmod_says start 1 'modprobe is not installed.*install kmod'

new_machine; echo ONBOOT=no >"$fake/conf"
check "ONBOOT=no: not loaded at boot, names the setting" status_says 3 'not loaded at boot: .* ONBOOT=yes'
new_machine
check "ONBOOT=yes: no ONBOOT line" sh -c "$(declare -f status_says run_helper status_lacks); fake='$fake' kver='$kver' helper='$helper' status_says 3 && fake='$fake' status_lacks 'ONBOOT'"

new_machine; load ib_core; load nvidia; load nv_peer_mem; echo 1.4.0 >"$fake/sys/module/nv_peer_mem/version"
printf 'ffffffffc0a01000 T ib_register_peer_memory_client\t[ib_core]\n' >"$fake/proc/kallsyms"
check "loaded: exit 0, with its version; MLNX_OFED's API seen" status_says 0 '^nv_peer_mem: loaded \(version 1.4.0\)' 'has the peer memory API'
check "loaded: no nvidia/ib_core complaint" status_lacks 'not loaded'
# MLNX_OFED's core without /sys/kernel/mm/memory_peers (a kernel that does
# not export mm_kobj): status says NCCL will not see nv_peer_mem; with the
# directory, it says nothing of it.
check "no memory_peers, a module without the memory_peers parameter: NCCL will not use nv_peer_mem, the current module, nvidia_peermem or DMA-BUF named" status_says 0 \
    'created no /sys/kernel/mm/memory_peers on kernel .*mm_kobj.*does not make it itself.*NCCL.*will not use nv_peer_mem here.*install the current nv_peer_mem, or load nvidia_peermem instead, or register through DMA-BUF'
# The module's own answer (kmod/glue: the read-only parameter memory_peers).
mkdir -p "$fake/sys/module/nv_peer_mem/parameters"
echo 'failed -17' >"$fake/sys/module/nv_peer_mem/parameters/memory_peers"
check "no memory_peers, the module could not make it: its answer, the kernel log and the reload named" status_says 0 \
    "nv_peer_mem could not make it .its parameter memory_peers says 'failed -17'; 'dmesg [|] grep nv_peer_mem' says why.*will not use nv_peer_mem here.*reload nv_peer_mem"
mkdir -p "$fake/sys/kernel/mm/memory_peers/nv_mem"
echo core >"$fake/sys/module/nv_peer_mem/parameters/memory_peers"
check "memory_peers there (the core's): no NCCL warning" sh -c "$(declare -f status_says run_helper status_lacks); fake='$fake' kver='$kver' helper='$helper' status_says 0 && fake='$fake' status_lacks 'created no /sys/kernel/mm/memory_peers'"
echo nv_peer_mem >"$fake/sys/module/nv_peer_mem/parameters/memory_peers"
check "memory_peers made by nv_peer_mem: status says so, NCCL finds nv_mem" status_says 0 \
    'core created no /sys/kernel/mm/memory_peers on kernel .*nv_peer_mem made it, so NCCL finds nv_mem there'

new_machine; load ib_core; load nvidia
printf 'ffffffffc0a01000 T ib_register_client\t[ib_core]\n' >"$fake/proc/kallsyms"
check "inbox ib_core: no peer memory API, MLNX_OFED named" status_says 3 'no peer memory API: .*inbox' 'Install MLNX_OFED'
check "inbox ib_core: the DMA-BUF route, NVIDIA's recommendation and its conditions" status_says 3 \
    'DMA-BUF, which NVIDIA recommends where it is supported \(GPU Operator docs.*Linux >= 5.12.*rdma-core >= 34.*open kernel modules \(R515.*CUDA >= 11.7.*Turing or newer.*NCCL >= 2.13' \
    'NV-P2P deprecation notice \(GPUDirect RDMA guide, CUDA 13.0, section 2.1.1\) concerns Tegra SoCs, not discrete GPUs'
# NVIDIA deprecates NV-P2P on Tegra only (docs/diagnostics.md): every
# sentence of the output that speaks of a deprecation must name Tegra, and
# none may say that nv_peer_mem's API is deprecated.
deprecation_only_for_tegra() {
    run_helper status >"$fake/status" 2>&1
    sed 's/\. /.\n/g' "$fake/status" | grep -i 'deprecat' >"$fake/deprecation" || return 0
    ! grep -v 'Tegra' "$fake/deprecation" && ! grep -Ei 'deprecates|nv_peer_mem is built on|discrete GPUs? (is|are) deprecated' "$fake/deprecation"
}
check "inbox ib_core: no deprecation claimed beyond Tegra" deprecation_only_for_tegra

# A module that finishes loading while /proc/kallsyms is read can hide
# other modules' lines from that one read (docs/diagnostics.md, "Reading
# /proc/kallsyms"): kallsyms here is a FIFO whose first read lacks the
# symbol and whose second has it, as a read that raced a module load.
kallsyms_race() {
    new_machine; load ib_core; load nvidia; load nv_peer_mem
    rm -f "$fake/proc/kallsyms" && mkfifo "$fake/proc/kallsyms" || return 1
    # Each printf opens the FIFO anew and waits for a reader; the pause
    # lets the first reader see its end of file before the second opens.
    {
        printf 'ffffffffc0a01000 T ib_register_client\t[ib_core]\n' >"$fake/proc/kallsyms"
        sleep 1
        printf 'ffffffffc0a01000 T ib_register_peer_memory_client\t[ib_core]\n' >"$fake/proc/kallsyms"
    } 2>/dev/null &
    local writer=$!
    # A third read would wait for a writer forever: timeout ends it.
    wrap="timeout 30" run_helper status >"$fake/status" 2>&1
    local rc=$?
    kill "$writer" 2>/dev/null; wait "$writer" 2>/dev/null
    [ "$rc" = 0 ] || { echo "status exited $rc, want 0"; cat "$fake/status"; return 1; }
    grep -q 'has the peer memory API' "$fake/status" || { cat "$fake/status"; return 1; }
}
check "kallsyms read while a module loads: a first read without the symbol is read again" kallsyms_race

new_machine; load nvidia_peermem
check "nvidia_peermem loaded: says so and how to choose" status_says 3 "nvidia_peermem .* is loaded.*modprobe -r nvidia_peermem.*systemctl disable nv_peer_mem"

new_machine; install_module
check "module installed, CRCs match: names the file, no rebuild line" \
    sh -c "$(declare -f status_says run_helper status_lacks); fake='$fake' kver='$kver' helper='$helper' status_says 3 'module for kernel $kver: .*/updates/dkms/nv_peer_mem.ko' && fake='$fake' status_lacks 'rebuild'"
# Signature enforcement (Secure Boot, issue 20 item 4): an unsigned module
# on a kernel that loads only signed ones is named, with the fix.
enforce() { # <sig_enforce Y|N> <lockdown file's text>
    mkdir -p "$fake/sys/module/module/parameters" "$fake/sys/kernel/security"
    echo "$1" >"$fake/sys/module/module/parameters/sig_enforce"
    echo "$2" >"$fake/sys/kernel/security/lockdown"
}
new_machine; install_module; enforce Y '[none] integrity confidentiality'
check "module.sig_enforce=Y, the module unsigned: says so, names mokutil and the rebuild" \
    status_says 3 'unsigned and this kernel loads only signed modules \(module.sig_enforce\).*mokutil --import .*dkms autoinstall -k'
new_machine; install_module; enforce N 'none [integrity] confidentiality'
check "lockdown at integrity, the module unsigned: names lockdown" status_says 3 'only signed modules \(lockdown \(integrity\)\)'
new_machine; install_module; enforce N '[none] integrity confidentiality'
not_enforced() { status_says 3 "module for kernel $kver" && status_lacks 'unsigned'; }
check "neither sig_enforce nor lockdown: no signature line" not_enforced
# Signed with a throwaway key by the kernel's own sign-file: no line, even
# where signatures are enforced.
sign_module() {
    openssl req -new -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=nv_peer_mem test-service throwaway key/" \
        -keyout "$work/sign.key" -out "$work/sign.crt" >/dev/null 2>&1 &&
        "/lib/modules/$kver/build/scripts/sign-file" sha256 "$work/sign.key" "$work/sign.crt" \
            "$fake/root/lib/modules/$kver/updates/dkms/nv_peer_mem.ko" &&
        modinfo -F signer "$fake/root/lib/modules/$kver/updates/dkms/nv_peer_mem.ko" | grep -q throwaway
}
new_machine; install_module; enforce Y 'none [integrity] confidentiality'
check "a module signed by sign-file (throwaway key)" sign_module
check "signed, signatures enforced: no unsigned line" not_enforced

new_machine; install_module
sed -i 's/^0x11111111/0x0badc0de/' "$fake/root/usr/src/ofa_kernel/default/Module.symvers"
check "MLNX_OFED updated under it: the symbol, both CRCs, the rebuild command" \
    status_says 3 'another version of ib_register_peer_memory_client .*0x11111111.*0x0badc0de.*dkms autoinstall -k'
install_module; sed -i 's/^0x33333333\tnvidia_p2p_get_pages\t/0x44444444\tnvidia_p2p_get_pages\t/' "$fake/root/usr/src/nvidia-999.1/Module.symvers"
check "NVIDIA driver updated under it: names nvidia_p2p_get_pages" \
    status_says 3 'another version of nvidia_p2p_get_pages .*0x33333333.*0x44444444'

# The same mismatch for a module a prebuilt package installed (dpkg's
# database in the fake root says which): the fix is a new build from the
# site's repository, not DKMS.
prebuilt_package() {
    local db=$fake/root/var/lib/dpkg p=nvidia-peer-memory-modules-$kver
    mkdir -p "$fake/root/lib/modules/$kver/updates" "$db/info" "$db/updates" &&
        mv "$fake/root/lib/modules/$kver/updates/dkms/nv_peer_mem.ko" "$fake/root/lib/modules/$kver/updates/" &&
        rmdir "$fake/root/lib/modules/$kver/updates/dkms" && depmod -b "$fake/root" "$kver" || return 1
    printf 'Package: %s\nStatus: install ok installed\nVersion: 1.4.0-1~deb12\nArchitecture: amd64\nMaintainer: tests <tests@invalid>\nDescription: test\n\n' "$p" >"$db/status"
    printf '/lib/modules/%s/updates/nv_peer_mem.ko\n' "$kver" >"$db/info/$p.list"
    : >"$db/available"
}
new_machine; install_module
sed -i 's/^0x11111111/0x0badc0de/' "$fake/root/usr/src/ofa_kernel/default/Module.symvers"
check "a prebuilt package's module (dpkg -S) in the fake root" prebuilt_package
check "prebuilt package's module, MLNX_OFED updated: names the package, build-modules and apt, not DKMS" \
    status_says 3 "module for kernel $kver: .*/updates/nv_peer_mem.ko \\(package nvidia-peer-memory-modules-$kver\\)" \
    "another version of ib_register_peer_memory_client .*cargo xtask build-modules --kernel $kver --release .*apt-get install nvidia-peer-memory-modules-$kver"

new_machine
echo '[   12.345678] nv_peer_mem: disagrees about version of symbol ib_register_peer_memory_client' >"$fake/klog"
check "kernel log 'disagrees about version': MLNX_OFED named, rebuild command" \
    status_says 3 "last load failure .*disagrees about version of symbol ib_register_peer_memory_client.*MLNX_OFED's ib_core.*dkms remove nv_peer_mem --all"
# What the kernel logs for a version mismatch: the Unknown symbol line
# (err -22) follows the disagrees line; the diagnosis is the mismatch.
printf '%s\n' '[   12.345678] nv_peer_mem: disagrees about version of symbol ib_register_peer_memory_client' \
    '[   12.345679] nv_peer_mem: Unknown symbol ib_register_peer_memory_client (err -22)' >"$fake/klog"
check "kernel log 'disagrees' then 'Unknown symbol (err -22)': the version mismatch, rebuild command" \
    status_says 3 "last load failure .*disagrees about version of symbol ib_register_peer_memory_client.*MLNX_OFED's ib_core.*dkms remove nv_peer_mem --all"
echo '[   12.345678] nv_peer_mem: Unknown symbol nvidia_p2p_get_pages (err -2)' >"$fake/klog"
check "kernel log 'Unknown symbol': the NVIDIA driver named" \
    status_says 3 "last load failure .*Unknown symbol nvidia_p2p_get_pages \\(err -2\\)': the NVIDIA driver \\(nvidia\\) was not loaded or does not export nvidia_p2p_get_pages"

new_machine
cat >"$fake/bin/dkms" <<EOF2
#!/bin/sh
# dkms 3.0's "status -m M -k K" line for an installed build.
[ "\$1 \$2 \$3 \$4 \$5" = "status -m nv_peer_mem -k $kver" ] && echo "nv_peer_mem/1.4.0, $kver, x86_64: installed"
EOF2
chmod +x "$fake/bin/dkms"
check "DKMS has a build: its state line" status_says 3 "DKMS: nv_peer_mem/1.4.0, $kver, x86_64: installed"
printf '#!/bin/sh\necho "nv_peer_mem/1.4.0: added"\n' >"$fake/bin/dkms"
check "DKMS has the sources but no build: the autoinstall command" \
    status_says 3 "DKMS has no build of nv_peer_mem for kernel $kver \\(nv_peer_mem/1.4.0: added\\): run 'dkms autoinstall -k $kver'"
printf '#!/bin/sh\nexit 0\n' >"$fake/bin/dkms"
check "DKMS has no build: the autoinstall command" status_says 3 "DKMS has no build of nv_peer_mem for kernel $kver: run 'dkms autoinstall -k $kver'"
new_machine; load ib_core; load nvidia
printf 'ffffffffc0a01000 T ib_register_client\t[ib_core]\n' >"$fake/proc/kallsyms"
printf '#!/bin/sh\necho "nv_peer_mem/1.4.0: added"\n' >"$fake/bin/dkms"
check "DKMS has no build under the inbox ib_core: MLNX_OFED first, since dkms.conf skips the kernel without it" \
    status_says 3 "DKMS has no build of nv_peer_mem for kernel $kver \\(nv_peer_mem/1.4.0: added\\): DKMS skips nv_peer_mem for a kernel without MLNX_OFED \\(its dkms.conf\\), and the running ib_core has no peer memory API: install MLNX_OFED for kernel $kver, then run 'dkms autoinstall -k $kver'"

echo "== the kernel hook (packaging/nv_peer_mem-kernel-hook)"
# A stand-in for gpudirect-rdma-check --kernel that answers with the exit
# status and lines given; the hook's callers: Debian's run-parts (RELEASE
# IMAGE) and kernel-install (add RELEASE ENTRY-DIR IMAGE).
hook=$root/packaging/nv_peer_mem-kernel-hook
fake_check() {  # fake_check STATUS: $fake/bin/check answers like --kernel
    printf '#!/bin/sh
[ "$1" = --kernel ] || exit 2
echo "FAIL module    no nv_peer_mem for $2: modprobe finds none"
echo "               fix: dkms autoinstall -k $2"
exit %s
' "$1" >"$fake/bin/check"
    chmod +x "$fake/bin/check"
}
hook_says() {  # hook_says STATUS ARGS... -- PATTERN: exits 0 whatever STATUS, says PATTERN
    local status=$1; shift
    local args=() pattern
    while [ "$1" != -- ]; do args+=("$1"); shift; done
    pattern=$2
    fake_check "$status"
    NV_PEER_MEM_CHECK=$fake/bin/check sh "$hook" "${args[@]}" >"$fake/hook.out" 2>&1 || { echo "the hook failed"; return 1; }
    cat "$fake/hook.out"
    grep -q -- "$pattern" "$fake/hook.out"
}
check "kernel hook (Debian's postinst.d): will load, one line" bash -c "
    $(declare -f fake_check hook_says); fake='$fake' hook='$hook' hook_says 0 6.12.95+deb12-amd64 /boot/vmlinuz-6.12.95+deb12-amd64 -- 'nv_peer_mem will load on 6.12.95+deb12-amd64' &&
    [ \$(wc -l <'$fake/hook.out') = 1 ]"
# The verdict's NCCL line on a kernel without mm_kobj, "will not use" (a
# module that does not make memory_peers) or "will see" (one that does):
# the hook passes it on after its own line.
# nccl_line_passed LINE: a stand-in check prints LINE for
# 6.12.95+deb12-amd64 ($2 of its call) as its nccl fact.
nccl_line_passed() {
    printf '#!/bin/sh\necho "     kernel    $2 (--kernel)"\necho "     nccl      %s"\nexit 0\n' "$1" >"$fake/bin/check"
    chmod +x "$fake/bin/check"
    NV_PEER_MEM_CHECK=$fake/bin/check sh "$hook" 6.12.95+deb12-amd64 /boot/vmlinuz >"$fake/hook.out" 2>&1 || return 1
    cat "$fake/hook.out"
    [ "$(sed -n 2p "$fake/hook.out")" = "nv_peer_mem: $(echo "$1" | sed 's/\$2/6.12.95+deb12-amd64/')" ]
}
check "kernel hook: will load, and the verdict's NCCL line (no mm_kobj) passed on" \
    nccl_line_passed 'NCCL will not use nv_peer_mem on $2: the kernel exports no mm_kobj'
check "kernel hook: will load, and the verdict's NCCL line (the module makes memory_peers) passed on" \
    nccl_line_passed 'NCCL will see nv_peer_mem on $2: the kernel exports no mm_kobj (x), so ...'
hook_warns() {
    hook_says 4 6.12.95+deb12-amd64 /boot/vmlinuz -- 'WARNING: nv_peer_mem will NOT load on kernel 6.12.95+deb12-amd64' &&
        grep -q 'fix: dkms autoinstall -k 6.12.95+deb12-amd64' "$fake/hook.out"
}
check "kernel hook: will not load, a loud warning with the failing line and its fix, exit 0" hook_warns
# The same hook as a module package's post-install (module RELEASE): the
# same verdict, but not the hint that a prebuilt package being installed
# in this run will check again (that package is the caller). A stand-in
# dpkg-query says one is installed.
hint_only_for_kernels() {
    printf '#!/bin/sh\necho "install ok installed"\n' >"$fake/bin/dpkg-query"
    chmod +x "$fake/bin/dpkg-query"
    PATH="$fake/bin:$PATH" hook_says 4 6.12.95+deb12-amd64 /boot/vmlinuz -- 'that package checks again' || return 1
    PATH="$fake/bin:$PATH" hook_says 4 module 6.12.95+deb12-amd64 -- 'WARNING: nv_peer_mem will NOT load on kernel 6.12.95+deb12-amd64' &&
        grep -q 'fix: dkms autoinstall -k 6.12.95+deb12-amd64' "$fake/hook.out" &&
        ! grep -q 'checks again' "$fake/hook.out"
}
check "kernel hook (module RELEASE, a module package's post-install): the warning, without the kernel installation's hint" hint_only_for_kernels
rm -f "$fake/bin/dpkg-query"
module_nccl_said() {
    printf '#!/bin/sh\n[ "$1" = --kernel ] || exit 2\necho "     nccl      NCCL will not use nv_peer_mem on $2: the kernel exports no mm_kobj"\nexit 0\n' >"$fake/bin/check"
    chmod +x "$fake/bin/check"
    NV_PEER_MEM_CHECK=$fake/bin/check sh "$hook" module 6.12.95+deb12-amd64 >"$fake/hook.out" 2>&1 || return 1
    cat "$fake/hook.out"
    [ "$(cat "$fake/hook.out")" = "nv_peer_mem: GPUDirect RDMA: nv_peer_mem will load on 6.12.95+deb12-amd64
nv_peer_mem: NCCL will not use nv_peer_mem on 6.12.95+deb12-amd64: the kernel exports no mm_kobj" ]
}
check "kernel hook (module RELEASE): will load, and NCCL's line, as for a kernel" module_nccl_said
check "kernel hook (kernel-install add): cannot tell is said, exit 0" \
    hook_says 7 add 5.14.0-503.11.1.el9_5.x86_64 /boot/loader/entries/x /boot/vmlinuz -- "cannot tell whether nv_peer_mem will load on 5.14.0-503.11.1.el9_5.x86_64"
hook_silent() {  # hook_silent CHECK ARGS...: exit 0 and nothing printed
    local out
    out=$(NV_PEER_MEM_CHECK=$1 sh "$hook" "${@:2}" 2>&1) && [ -z "$out" ] || { echo "said: $out"; return 1; }
}
fake_check 4
check "kernel hook (kernel-install remove): nothing to check, exit 0, silent" hook_silent "$fake/bin/check" remove 6.1.0-56-amd64 /x /y
check "kernel hook: removed but not purged (no gpudirect-rdma-check): exit 0, silent" hook_silent /nonexistent 6.1.0-56-amd64 /boot/vmlinuz

echo "== apt's kernel guard (packaging/nv_peer_mem-apt-guard)"
# apt's Pre-Install-Pkgs protocol version 2 (apt.conf(5), apt 2.6): the
# header, the configuration up to a blank line, then one action a line
# (package, old version, direction, new version, .deb / **CONFIGURE** /
# **REMOVE**). A stand-in dpkg-query lists the node's module packages.
guard=$root/packaging/nv_peer_mem-apt-guard
k_old=6.1.0-56-amd64 k_new=6.12.95+deb12-amd64
guard_says() {  # guard_says EXIT INSTALLED-PACKAGES CONFIG-LINE ACTION-LINES -- PATTERN
    local want=$1 have=$2 config=$3 actions=$4 pattern=${6:-}
    printf '#!/bin/sh\nfor p in %s; do echo "$p ii "; done\n' "$have" >"$fake/bin/dpkg-query"
    chmod +x "$fake/bin/dpkg-query"
    printf 'VERSION 2\nAPT::Architecture=amd64\n%s\n\n%s\n' "$config" "$actions" |
        PATH="$fake/bin:$PATH" sh "$guard" >"$fake/guard.out" 2>&1
    local rc=$?
    cat "$fake/guard.out"
    [ $rc = "$want" ] || { echo "exit $rc, not $want"; return 1; }
    [ -z "$pattern" ] || grep -qF -- "$pattern" "$fake/guard.out"
}
kernel_only="linux-image-$k_new - < 6.12.95-1~bpo12+1 /var/cache/apt/archives/linux-image-${k_new}_6.12.95-1~bpo12+1_amd64.deb
linux-image-amd64 6.1.158-1 < 6.12.95-1~bpo12+1 /var/cache/apt/archives/linux-image-amd64_6.12.95-1~bpo12+1_amd64.deb
nvidia-peer-memory-modules-amd64 6.1.158-1+1.4.0.1 - - **REMOVE**"
check "apt guard: full-upgrade's kernel without its module package on a prebuilt node: refused (exit 1), naming the package" \
    guard_says 1 "nvidia-peer-memory-modules-$k_old nvidia-peer-memory-modules-amd64" "Debug::NoLocking=0" "$kernel_only" -- \
    "nvidia-peer-memory-modules-$k_new: booted, that kernel would have no"
with_module="$kernel_only
nvidia-peer-memory-modules-$k_new - < 1.4.0-1~deb12 /var/cache/apt/archives/nvidia-peer-memory-modules-${k_new}_1.4.0-1~deb12_amd64.deb"
check "apt guard: the kernel and its module package in one run: let through, silent" \
    guard_says 0 "nvidia-peer-memory-modules-$k_old" "" "$with_module" -- ""
unsigned="linux-image-$k_new-unsigned - < 6.12.95-1~bpo12+1 /var/cache/apt/archives/linux-image-${k_new}-unsigned_6.12.95-1~bpo12+1_amd64.deb"
check "apt guard: an -unsigned image is the same kernel: refused without its module package" \
    guard_says 1 "nvidia-peer-memory-modules-$k_old" "" "$unsigned" -- "nvidia-peer-memory-modules-$k_new"
check "apt guard: the module package already installed: let through" \
    guard_says 0 "nvidia-peer-memory-modules-$k_old nvidia-peer-memory-modules-$k_new" "" "$kernel_only" -- ""
check "apt guard: a DKMS node (no per-kernel module package): let through, silent" \
    guard_says 0 "nvidia-peer-memory-dkms" "" "$kernel_only" -- ""
check "apt guard: -o NvPeerMem::Allow-Kernel-Without-Module=true: let through, saying what it does" \
    guard_says 0 "nvidia-peer-memory-modules-$k_old" "NvPeerMem::Allow-Kernel-Without-Module=true" "$kernel_only" -- \
    "installing kernel $k_new without nvidia-peer-memory-modules-$k_new"
removing_module="$kernel_only
nvidia-peer-memory-modules-$k_new 1.4.0-1~deb12 - - **REMOVE**"
check "apt guard: the module package removed in the same run: refused" \
    guard_says 1 "nvidia-peer-memory-modules-$k_old nvidia-peer-memory-modules-$k_new" "" "$removing_module" -- "nvidia-peer-memory-modules-$k_new"
# Issue 58 item 8: full-upgrade removes a module package (its MLNX_OFED
# provider upgraded: the module depends on it with =) and unpacks no kernel.
provider_up="mlnx-ofed-kernel-modules-$k_old 25.10-1 < 25.10-2 /var/cache/apt/archives/mlnx-ofed-kernel-modules-${k_old}_25.10-2_amd64.deb
nvidia-peer-memory-modules-$k_old 1.4.0-1~deb12 - - **REMOVE**"
check "apt guard: a run that removes a kernel's module package, the kernel staying: refused (exit 1), naming the package and the build" \
    guard_says 1 "nvidia-peer-memory-modules-$k_old linux-image-$k_old" "" "$provider_up" -- \
    "apt would remove nvidia-peer-memory-modules-$k_old while"
check "apt guard: the same with -o NvPeerMem::Allow-Kernel-Without-Module=true: let through, saying what it does" \
    guard_says 0 "nvidia-peer-memory-modules-$k_old linux-image-$k_old" "NvPeerMem::Allow-Kernel-Without-Module=true" "$provider_up" -- \
    "removing nvidia-peer-memory-modules-$k_old while kernel $k_old stays"
check "apt guard: the module package removed with its kernel: let through, silent" \
    guard_says 0 "nvidia-peer-memory-modules-$k_old linux-image-$k_old" "" "$provider_up
linux-image-$k_old 6.1.192-2 - - **REMOVE**" -- ""
check "apt guard: the module package removed for -dkms: let through" \
    guard_says 0 "nvidia-peer-memory-modules-$k_old linux-image-$k_old" "" "$provider_up
nvidia-peer-memory-dkms - < 1.4.0-1~deb12 /var/cache/apt/archives/nvidia-peer-memory-dkms_1.4.0-1~deb12_all.deb" -- ""
check "apt guard: nv_peer_mem removed altogether (nvidia-peer-memory too): let through" \
    guard_says 0 "nvidia-peer-memory-modules-$k_old linux-image-$k_old nvidia-peer-memory" "" "$provider_up
nvidia-peer-memory 1.4.0-1~deb12 - - **REMOVE**" -- ""
check "apt guard: the module package upgraded in the same run (removed and unpacked): let through" \
    guard_says 0 "nvidia-peer-memory-modules-$k_old linux-image-$k_old" "" "$provider_up
nvidia-peer-memory-modules-$k_old 1.4.0-1~deb12 < 1.4.0-2~deb12 /var/cache/apt/archives/nvidia-peer-memory-modules-${k_old}_1.4.0-2~deb12_amd64.deb" -- ""
# Issue 58: the metapackage removed while the kernel metapackage it follows
# stays (full-upgrade takes linux-image-amd64 past the newest kernel the
# repository has a module for; the kernel it brings is the same release
# here, so only this rule can say it).
meta_off="linux-image-amd64 6.1.158-1 < 6.1.159-1 /var/cache/apt/archives/linux-image-amd64_6.1.159-1_amd64.deb
nvidia-peer-memory-modules-amd64 6.1.158-1+1.4.0.1 - - **REMOVE**"
check "apt guard: the metapackage removed while linux-image-amd64 stays: refused (exit 1), naming both and the build" \
    guard_says 1 "nvidia-peer-memory-modules-$k_old nvidia-peer-memory-modules-amd64 linux-image-amd64" "" "$meta_off" -- \
    "apt would remove nvidia-peer-memory-modules-amd64 while"
check "apt guard: the same with -o NvPeerMem::Allow-Kernel-Without-Module=true: let through, saying what it does" \
    guard_says 0 "nvidia-peer-memory-modules-$k_old nvidia-peer-memory-modules-amd64 linux-image-amd64" "NvPeerMem::Allow-Kernel-Without-Module=true" "$meta_off" -- \
    "removing nvidia-peer-memory-modules-amd64 while linux-image-amd64 stays"
both_rules() {  # full-upgrade to a new kernel removes the metapackage too: both said, exit 1
    guard_says 1 "nvidia-peer-memory-modules-$k_old nvidia-peer-memory-modules-amd64 linux-image-amd64" "" "$kernel_only" -- \
        "apt would remove nvidia-peer-memory-modules-amd64 while" &&
        grep -qF "nvidia-peer-memory-modules-$k_new: booted, that kernel would have no" "$fake/guard.out"
}
check "apt guard: a new kernel whose linux-image-amd64 removes the metapackage: both rules say their part, refused" both_rules
check "apt guard: the backports metapackage removed while linux-image-amd64 stays: refused" \
    guard_says 1 "nvidia-peer-memory-modules-$k_old nvidia-peer-memory-modules-amd64-backports linux-image-amd64" "" \
    "nvidia-peer-memory-modules-amd64-backports 6.12.95-1~bpo12+1+1.4.0.1 - - **REMOVE**" -- \
    "apt would remove nvidia-peer-memory-modules-amd64-backports while"
check "apt guard: a move between series (the other metapackage unpacked): let through, silent" \
    guard_says 0 "nvidia-peer-memory-modules-$k_old nvidia-peer-memory-modules-amd64 linux-image-amd64" "" "$meta_off
nvidia-peer-memory-modules-amd64-backports - < 6.12.95-1~bpo12+1+1.4.0.1 /var/cache/apt/archives/nvidia-peer-memory-modules-amd64-backports_6.12.95-1~bpo12+1+1.4.0.1_amd64.deb" -- ""
check "apt guard: the metapackage removed with linux-image-amd64: let through, silent" \
    guard_says 0 "nvidia-peer-memory-modules-$k_old nvidia-peer-memory-modules-amd64 linux-image-amd64" "" \
    "nvidia-peer-memory-modules-amd64 6.1.158-1+1.4.0.1 - - **REMOVE**
linux-image-amd64 6.1.158-1 - - **REMOVE**" -- ""
check "apt guard: the metapackage removed for -dkms: let through" \
    guard_says 0 "nvidia-peer-memory-modules-$k_old nvidia-peer-memory-modules-amd64 linux-image-amd64" "" "$meta_off
nvidia-peer-memory-dkms - < 1.4.0-1~deb12 /var/cache/apt/archives/nvidia-peer-memory-dkms_1.4.0-1~deb12_all.deb" -- ""
# The driver branch (issue 40 item 8): a module package built against
# another NVIDIA driver than the node's. A real .deb (dpkg-deb) whose
# nv_peer_mem.ko the guard takes out and hands to the check with --module;
# a stand-in check answers as gpudirect-rdma-check does for a module whose
# nvidia_p2p_* versions the installed nvidia.ko does not export, in the
# JSON form the guard asks for (its own verdict and JSON are tested in
# readiness, a_module_file_is_judged_...).
mkdir -p "$fake/moddeb/DEBIAN" "$fake/moddeb/lib/modules/$k_new/updates"
printf 'Package: nvidia-peer-memory-modules-%s\nVersion: 1.4.0-2~deb12\nArchitecture: amd64\nMaintainer: t <t@example.org>\nDescription: test\n' "$k_new" >"$fake/moddeb/DEBIAN/control"
echo "the module for $k_new" >"$fake/moddeb/lib/modules/$k_new/updates/nv_peer_mem.ko"
dpkg-deb --root-owner-group -b "$fake/moddeb" "$fake/module.deb" >/dev/null
driver_check() {  # driver_check EXIT: the stand-in check's answer to --module
    cat >"$fake/bin/check" <<EOS
#!/bin/sh
echo "\$*" >"$fake/check.args"
[ "\$1 \$2 \$3 \$5" = "--kernel $k_new --module --json" ] && grep -qx "the module for $k_new" "\$4" || { echo "unexpected call: \$*"; exit 2; }
stale=null
[ $1 = 4 ] && stale='{"symbol":"nvidia_p2p_get_pages","provider":"nvidia","exported":"0x6666bbbb","built_against":"0x5555aaaa"}'
echo "{\"schema\":\"gpudirect-rdma-check-next-boot/1\",\"kernel\":\"$k_new\",\"loads\":false,\"exit_status\":$1,\"stale_symbol\":\$stale,\"facts\":[]}"
exit $1
EOS
    chmod +x "$fake/bin/check"
}
module_update="nvidia-peer-memory-modules-$k_new 1.4.0-1~deb12 < 1.4.0-2~deb12 $fake/module.deb"
# The guard runs the stand-in check for these.
export NV_PEER_MEM_CHECK=$fake/bin/check
driver_refused() {
    guard_says 1 "nvidia-peer-memory-modules-$k_new" "" "$module_update" -- 'exports another version of nvidia_p2p_get_pages' &&
        grep -qF "build-modules --kernel $k_new --nvidia-src" "$fake/guard.out" && grep -q -- '--module .*/nv_peer_mem.ko' "$fake/check.args"
}
not_judged_beside_driver() {
    rm -f "$fake/check.args"
    guard_says 0 "nvidia-peer-memory-modules-$k_new" "" "$with_driver" -- "" && [ ! -e "$fake/check.args" ]
}
fits_silently() {
    guard_says 0 "nvidia-peer-memory-modules-$k_new" "" "$module_update" -- "" && [ ! -s "$fake/guard.out" ]
}
driver_check 4
check "apt guard: a module package built against another NVIDIA driver: refused before dpkg, naming the symbol and the build that fixes it" driver_refused
check "apt guard: the same with -o NvPeerMem::Allow-Other-Driver=true: let through, saying it will not load" \
    guard_says 0 "nvidia-peer-memory-modules-$k_new" 'NvPeerMem::Allow-Other-Driver=true' "$module_update" -- 'it will not load'
with_driver="$module_update
nvidia-open-kernel-dkms 535.261.03-1 < 550.163.01-2 /var/cache/apt/archives/nvidia-open-kernel-dkms_550.163.01-2_amd64.deb"
check "apt guard: the NVIDIA driver changes in the same run: not judged before dpkg, let through" not_judged_beside_driver
driver_check 0
check "apt guard: a module package built against this node's driver: let through, silent" fits_silently
unset NV_PEER_MEM_CHECK
rm -f "$fake/bin/dpkg-query"

finish
