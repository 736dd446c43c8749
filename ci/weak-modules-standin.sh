#!/bin/bash
# Usage: weak-modules-standin.sh --add-modules | --remove-modules
#        (the module paths on standard input, one per line)
#
# A stand-in for RHEL's /usr/sbin/weak-modules (the kmod package), which is
# not among the fixtures and not in Debian's archive. ci/test-rpm.sh mounts
# it at /usr/sbin/weak-modules in a private mount namespace and lets the
# kmod package's own %post/%postun call it, as they do on RHEL.
#
# What it does, as docs/packaging.md "kABI tracking on RHEL" describes
# weak-modules (fidelity):
#   --add-modules     for every module /lib/modules/<built for>/extra/<sub>
#                     and every other installed kernel <k> that has
#                     /boot/symvers-<k>.gz: when the module is compatible
#                     with <k>, link /lib/modules/<k>/weak-updates/<sub> to
#                     it and run depmod for <k>;
#   --remove-modules  remove the weak-updates links that point at the given
#                     modules and run depmod for their kernels.
# Compatible means what weak-modules checks with depmod: in a copy of <k>'s
# module tree with the link added, `depmod -aeE <k's symvers>` reports no
# unknown symbol and no symbol version disagreement for the module (its
# providers may be <k>'s own modules, other kmods' included).
# Not modelled: initramfs regeneration (dracut), --add-kernel and
# --remove-kernel, the choice among several versions of one module.
set -euo pipefail
mode=${1:-}
case $mode in
--add-modules | --remove-modules) ;;
*) echo "weak-modules-standin.sh: use --add-modules or --remove-modules (module paths on stdin)" >&2; exit 2 ;;
esac
mapfile -t modules

# compatible <module> <kernel>: depmod finds every symbol the module needs,
# at the version it was built against, among <kernel>'s symvers and modules.
# When not, says why on stderr (the first of depmod's complaints).
compatible() {
    local module=$1 krel=$2 tmp out why
    tmp=$(mktemp -d)
    mkdir -p "$tmp/lib/modules/$krel/weak-updates"
    cp -as "/lib/modules/$krel/." "$tmp/lib/modules/$krel/"
    ln -s "$module" "$tmp/lib/modules/$krel/weak-updates/${module##*/}"
    zcat "/boot/symvers-$krel.gz" >"$tmp/symvers"
    out=$(depmod -b "$tmp" -aeE "$tmp/symvers" "$krel" 2>&1 || true)
    rm -rf "$tmp"
    why=$(grep -F "weak-updates/${module##*/}" <<<"$out" | grep -E 'needs unknown symbol|disagrees about version' | head -n 1)
    [ -z "$why" ] && return 0
    echo "weak-modules: ${module##*/} is not compatible with $krel: ${why#*"${module##*/}" }" >&2
    return 1
}

for module in "${modules[@]}"; do
    [ -n "$module" ] || continue
    built_for=$(cut -d/ -f4 <<<"$module")
    sub=${module#/lib/modules/"$built_for"/}
    sub=${sub#extra/}
    for dir in /lib/modules/*/; do
        krel=$(basename "$dir")
        [ "$krel" != "$built_for" ] || continue
        link=/lib/modules/$krel/weak-updates/$sub
        if [ "$mode" = --add-modules ]; then
            [ -f "/boot/symvers-$krel.gz" ] || continue
            if compatible "$module" "$krel"; then
                mkdir -p "$(dirname "$link")"
                ln -sfn "$module" "$link"
                depmod -a "$krel"
            fi
        elif [ -L "$link" ] && [ "$(readlink "$link")" = "$module" ]; then
            rm -f "$link"
            rmdir -p --ignore-fail-on-non-empty "$(dirname "$link")"
            depmod -a "$krel"
        fi
    done
done
