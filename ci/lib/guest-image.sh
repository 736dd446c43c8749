# A Debian system tree booted as a QEMU guest: what ci/test-image.sh (the
# DKMS system) and ci/test-fleet-image.sh (the fleet node) do alike.
# The sourcing script has sourced ci/checks.sh and sets $here (ci/),
# $work (its scratch directory), $tree (the system's root), $tarball
# (ci/image.sh's system tarball it comes from) and $xtask (the xtask
# binary whose boot-image boots it).

# unpack_tree: $tree made afresh from $tarball.
unpack_tree() { rm -rf "$tree" && mkdir -p "$tree" && tar -C "$tree" -xf "$tarball"; }
# in_image COMMAND...: COMMAND run in $tree (ci/chroot.sh run).
in_image() { bash "$here/chroot.sh" run "$tree" "$@"; }
# make_disk SPARE_MB: $work/disk.img, an ext4 image of $tree with a
# quarter more than it holds and SPARE_MB besides (what the guest installs
# and builds).
make_disk() {
    local mb
    mb=$(( $(du -sm "$tree" | cut -f1) * 5 / 4 + $1 ))
    rm -f "$work/disk.img"
    mke2fs -q -F -t ext4 -L nvpm-root -d "$tree" "$work/disk.img" "${mb}M"
}
# boot_counted KVER PHASE BOOT-IMAGE-ARG...: `xtask boot-image` of
# KVER's phase PHASE (console log $work/console-PHASE.log, output
# $work/boot-PHASE.out), its count of the guest's checks added to this
# suite's.
boot_counted() {
    local k=$1 phase=$2; shift 2
    local out=$work/boot-$phase.out
    "$xtask" boot-image --label "$k $phase" --log "$work/console-$phase.log" "$@" 2>&1 | tee "$out"
    local p f
    read -r p f < <(sed -n 's/^  boot-image .*: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$out")
    if [ -z "${p:-}" ]; then
        fail "boot $k $phase: no count from boot-image (see $out)"
        return 1
    fi
    passed=$((passed + p)) failed=$((failed + f))
}
