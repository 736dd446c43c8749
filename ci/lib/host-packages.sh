# For the suites that install our packages on this host (ci/test-deb.sh,
# ci/test-dkms.sh): one lock, one cleanup, one account of what is left.
# The sourcing script sets $here (ci/) and $work (its scratch directory).

# hold_host_packages: waits for, then holds until this shell exits, the
# lock that serialises host package installs between test runs on this
# machine (fd 9).
hold_host_packages() {
    exec 9>/var/lock/nv-peer-mem-host-packages.lock
    flock 9
}
# cleanup_host_packages: everything a suite may have installed or built,
# removed; safe to run when nothing is there. Our packages, the equivs
# stand-in and prereq-standin.sh's modules and DKMS stand-ins go by their
# own marks (ci/remove-test-leftovers.sh), this run's and those of any run
# of either suite stopped before its cleanup; the extra headers (only
# ci/test-deb.sh installs them) by the state files in $work.
cleanup_host_packages() {
    bash "$here/remove-test-leftovers.sh"
    if [ -f "$work/extra-headers" ]; then
        apt-get purge -y -qq "$(cat "$work/extra-headers")" >/dev/null 2>&1
    fi
    if [ -f "$work/extra-kver" ] && [ ! -e "/lib/modules/$(cat "$work/extra-kver")/build" ]; then
        rm -rf "/lib/modules/$(cat "$work/extra-kver")"
    fi
    rm -f "$work/extra-headers" "$work/extra-kver" "$work/standin-kernels"
}
# nv_peer_mem_leftovers PACKAGE...: what is left of nv_peer_mem on this
# host after a purge of PACKAGE...: its sources, DKMS tree and core
# cache, modules, files under /etc, the apt guard, and any state dpkg
# keeps of the packages. Nothing printed: nothing left.
nv_peer_mem_leftovers() {
    ls -d /usr/src/nv_peer_mem-* /var/lib/dkms/nv_peer_mem /var/cache/nv_peer_mem 2>/dev/null
    find /lib/modules/*/updates -name 'nv_peer_mem*' 2>/dev/null
    find /etc -name '*nv_peer_mem*' 2>/dev/null
    ls /etc/apt/apt.conf.d/50nv-peer-mem-kernel-guard 2>/dev/null
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -v '^unknown ok not-installed$' | grep -v '^$'
    done
    return 0
}
