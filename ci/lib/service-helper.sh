# The service helper (packaging/nv_peer_mem-service) against a fake
# machine: a fake /sys, /proc/kallsyms, kernel log and module tree, a
# recording modprobe that "loads" by creating /sys/module/<name>, and a
# DKMS that has built nothing. Sourced by ci/test-service.sh, which runs
# this source tree's helper, and ci/test-deb.sh, which runs the one the deb
# installed: one set of start/boot/stop checks holds both.
# The sourcing script has sourced ci/checks.sh and sets $helper (the
# helper to run), $fake (the fake machine's directory) and $kver (the
# kernel the machine says it runs).

# A recording modprobe that "loads" by creating /sys/module/<name>; with
# $fake/fail-<name>, loading <name> fails as a module of another kernel
# does.
fake_modprobe() {
    mkdir -p "$fake/bin"
    cat >"$fake/bin/modprobe" <<MP
#!/bin/sh
echo "\$*" >>"$fake/modprobe.log"
[ "\$1" = --help ] && exit 0
[ "\$1" = --dump-modversions ] && exec /sbin/modprobe "\$@"
[ "\$1" = -r ] && { rmdir "$fake/sys/module/\$2"; exit \$?; }
[ -e "$fake/fail-\$1" ] && { echo "modprobe: ERROR: could not insert '\$1': Exec format error" >&2; exit 1; }
mkdir -p "$fake/sys/module/\$1"
MP
    chmod +x "$fake/bin/modprobe"
}
# A machine: nothing loaded, empty kallsyms and kernel log, ONBOOT=yes, no
# module installed, no dkms.
new_machine() {
    rm -rf "$fake"; mkdir -p "$fake/sys/module" "$fake/proc" "$fake/root/lib/modules/$kver"
    : >"$fake/proc/kallsyms"; : >"$fake/klog"
    # What depmod expects of a kernel's module directory.
    : >"$fake/root/lib/modules/$kver/modules.order"
    : >"$fake/root/lib/modules/$kver/modules.builtin"
    : >"$fake/root/lib/modules/$kver/modules.builtin.modinfo"
    echo ONBOOT=yes >"$fake/conf"
    fake_modprobe
    # DKMS without a build of anything (the host's own DKMS state stays out).
    printf '#!/bin/sh\nexit 0\n' >"$fake/bin/dkms"; chmod +x "$fake/bin/dkms"
}
# $wrap (unset: nothing) runs before the helper, e.g. a timeout.
run_helper() {
    ${wrap:-} env PATH="$fake/bin:/usr/sbin:/sbin:/usr/bin:/bin" NV_PEER_MEM_SYSFS="$fake/sys" NV_PEER_MEM_CONF="$fake/conf" \
        NV_PEER_MEM_PROC="$fake/proc" NV_PEER_MEM_ROOT="$fake/root" NV_PEER_MEM_KVER="$kver" \
        NV_PEER_MEM_KLOG="$fake/klog" NV_PEER_MEM_DPKG_ADMINDIR="$fake/root/var/lib/dpkg" sh "$helper" "$@"
}
loaded() { [ -d "$fake/sys/module/$1" ]; }
load() { mkdir -p "$fake/sys/module/$1"; }
# status_says EXIT PATTERN...: status exits EXIT and its output matches
# every PATTERN (grep -E).
status_says() {
    local want=$1; shift
    run_helper status >"$fake/status" 2>&1
    local got=$?
    cat "$fake/status"
    [ "$got" = "$want" ] || { echo "exit $got, expected $want"; return 1; }
    local p
    for p in "$@"; do grep -Eq -- "$p" "$fake/status" || { echo "missing: $p"; return 1; }; done
}
status_lacks() { ! grep -Eq -- "$1" "$fake/status"; }

boot_with_onboot_no() { echo ONBOOT=no >"$fake/conf"; run_helper boot && ! loaded nv_peer_mem; }
boot_with_onboot_yes() { echo 'ONBOOT="YES"' >"$fake/conf"; run_helper boot && loaded ib_core && loaded nvidia && loaded nv_peer_mem; }
stop_unloads() { run_helper stop && ! loaded nv_peer_mem; }
refuses_beside_nvidia_peermem() {
    load nvidia_peermem
    ! run_helper start 2>"$fake/err" && grep -q 'modprobe -r nvidia_peermem' "$fake/err" && ! loaded nv_peer_mem
}
# start_stop_checks: the helper's start, boot and stop on a new machine,
# in the order a node sees them; after them nv_peer_mem is not loaded and
# nvidia_peermem is.
start_stop_checks() {
    new_machine
    check "boot with ONBOOT=no loads nothing" boot_with_onboot_no
    check "boot with ONBOOT=yes loads ib_core, nvidia, nv_peer_mem" boot_with_onboot_yes
    check "stop unloads" stop_unloads
    check "start refuses, naming the fix, while nvidia_peermem is loaded" refuses_beside_nvidia_peermem
}
