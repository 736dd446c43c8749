#!/usr/bin/env bash
# Usage: ci/rpm-family-env.sh <kmod|kmp|dkms> <scratch dir> <Debian kernel release> -- <command>...
#
# Runs <command> in a private mount namespace in which this Debian host
# looks, to rpmbuild and rpm, like a build host of the family whose kernel
# module macros the route uses (docs/testing.md "RPM families on Debian"):
#   kmod  /usr/lib/rpm/redhat/{kmodtool,find-provides.ksyms,
#         find-requires.ksyms,brp-kmod-restore-perms}, /usr/lib/rpm/kabi.sh
#         and the fileattrs kmod.attr, kabi.attr, provided_ksyms.attr,
#         required_ksyms.attr; the kernel's
#         build tree at /usr/src/kernels/<RHEL-style release> (kmodtool's
#         kernel_source, find-requires.ksyms's Module.symvers), and a second
#         one of another release from the same headers (same kABI: what
#         weak-modules links a module into);
#   kmp   /usr/lib/rpm/kernel-module-subpackage; the build tree at
#         /usr/src/linux-obj/<arch>/default and /boot/symsets-<ver>-default.tar.gz,
#         which %suse_kernel_module_package looks for.
# The releases it lays out are printed by `rpm-family-env.sh releases
# <Debian kernel release>`: RHEL-style <ver>-<abi>.<flavour> (rpm >= 4.16
# refuses a version with two '-', as Debian's 6.1.0-56-amd64 has) and
# SUSE-style <ver>-<abi>-default.
# The scripts and macro files are the real ones from $NVPM_FIXTURES
# (default ../shared/fixtures), linked, never copied; rpmbuild loads the
# macro file itself (--load, see ci/test-rpm.sh). /bin/sh is bash, as on
# RHEL and SLES: the macros' shell code uses bash's echo and ${x//a/b}.
# awk is gawk, as on RHEL: find-*.ksyms run `awk --non-decimal-data`; set
# NVPM_GAWK to a gawk program when this host's awk is another one.
# Nothing outside <scratch dir> changes: the additions are overlay mounts
# that vanish with the namespace.
#
# Each build tree is Debian's headers with the kernel release renamed
# (include/config/kernel.release and utsrelease.h), so that `make
# kernelrelease`, the package's kernel version and the module's vermagic
# agree as they do on RHEL and SLES; the code and kABI are Debian's kernel's.
set -euo pipefail
releases() { # <Debian release>: the RHEL-style pair and the SUSE-style one,
    # from the headers' `make kernelrelease` (Debian's 6.1.0-56-amd64 says
    # 6.1.192) and Debian's ABI number (56).
    local base abi
    base=$(make -s -C "/lib/modules/$1/build" kernelrelease)
    abi=${1%-*}; abi=${abi##*-}
    echo "$base-$abi.el.$(uname -m) $base-$((abi + 1)).el.$(uname -m) $base-$abi-default"
}
if [ "${1:-}" = releases ]; then releases "$2"; exit 0; fi
route=$1 scratch=$2 kver=$3
shift 3
[ "${1:-}" = -- ] && shift
here=$(cd "$(dirname "$0")" && pwd)
fixtures=${NVPM_FIXTURES:-$here/../../shared/fixtures}
fixtures=$(cd "$fixtures" && pwd)
headers=$(readlink -f "/lib/modules/$kver/build")
arch=$(uname -m)
read -r rhel_krel rhel_krel2 suse_krel <<<"$(releases "$kver")"

# shadow_tree <dir> <release>: Debian's headers as links, the release renamed.
shadow_tree() {
    local tree=$1 release=$2 link
    mkdir -p "$tree"
    cp -as "$headers/." "$tree/"
    for link in scripts tools; do
        if [ -L "$headers/$link" ]; then ln -sfn "$(readlink -f "$headers/$link")" "$tree/$link"; fi
    done
    rm -f "$tree/include/config/kernel.release" "$tree/include/generated/utsrelease.h" "$tree/.kernelvariables"
    echo "$release" >"$tree/include/config/kernel.release"
    echo "#define UTS_RELEASE \"$release\"" >"$tree/include/generated/utsrelease.h"
    # `make kernelrelease` prints KERNELVERSION and EXTRAVERSION, as RHEL's
    # and SUSE's devel trees set it; Debian's wrapper reads .kernelvariables.
    sed -e "s/^override KERNELRELEASE = .*/override KERNELRELEASE = $release/" "$headers/.kernelvariables" >"$tree/.kernelvariables"
    echo "override EXTRAVERSION = -${release#*-}" >>"$tree/.kernelvariables"
}

rm -rf "$scratch"
mkdir -p "$scratch"/{src,rpm,boot}/{upper,work}
case $route in
kmod)
    macros=$fixtures/kernel-srpm-macros
    mkdir -p "$scratch/rpm/upper/redhat" "$scratch/rpm/upper/fileattrs" "$scratch/src/upper/kernels"
    for script in kmodtool find-provides.ksyms find-requires.ksyms brp-kmod-restore-perms; do
        ln -s "$macros/$script" "$scratch/rpm/upper/redhat/$script"
    done
    ln -s "$macros/kmod.attr" "$scratch/rpm/upper/fileattrs/kmod.attr"
    # kabi.attr/kabi.sh: the kernel(<symbol>) provides of a package that
    # ships /lib/modules/<kernel>/symvers.gz (ci/rpm-providers.sh's kernel).
    ln -s "$macros/kabi.attr" "$scratch/rpm/upper/fileattrs/kabi.attr"
    ln -s "$macros/kabi.sh" "$scratch/rpm/upper/kabi.sh"
    # kernel-srpm-macros' provided_ksyms.attr and required_ksyms.attr (not in
    # the fixtures) hook the two scripts into rpm's dependency generator
    # (kernel-srpm-macros.spec installs them to %_fileattrsdir). Their
    # content as in Fedora's kernel-srpm-macros, GitHub mirror
    # milkice-fedora-patches/kernel-srpm-macros @ 4fcfdefddbed224cbf03051f0766b5c2b08209ac
    # (the fixtures' mirror).
    cat >"$scratch/rpm/upper/fileattrs/provided_ksyms.attr" <<'ATTR'
%__provided_ksyms_provides	/usr/lib/rpm/redhat/find-provides.ksyms
%__provided_ksyms_path		.*\.(ko|ko\.gz|ko\.bz2|ko\.xz)$
ATTR
    cat >"$scratch/rpm/upper/fileattrs/required_ksyms.attr" <<'ATTR'
%__required_ksyms_requires	/usr/lib/rpm/redhat/find-requires.ksyms
%__required_ksyms_path		.*\.(ko|ko\.gz|ko\.bz2|ko\.xz)$
# Exclude built-in kernel modules
%__required_ksyms_exclude_path	^/lib/modules/[1-9][^/]*/kernel/.*
ATTR
    shadow_tree "$scratch/src/upper/kernels/$rhel_krel" "$rhel_krel"
    shadow_tree "$scratch/src/upper/kernels/$rhel_krel2" "$rhel_krel2"
    ;;
kmp)
    ln -s "$fixtures/suse-kmp/kernel-module-subpackage" "$scratch/rpm/upper/kernel-module-subpackage"
    shadow_tree "$scratch/src/upper/linux-obj/$arch/default" "$suse_krel"
    tar -czf "$scratch/boot/upper/symsets-${suse_krel%-default}-default.tar.gz" -T /dev/null
    ;;
dkms) ;;
*) echo "rpm-family-env.sh: route must be kmod, kmp or dkms, not $route" >&2; exit 2 ;;
esac

exec unshare --mount --propagation private -- bash -c '
    set -e
    s=$1; shift
    mount -t overlay overlay -o "lowerdir=/usr/src,upperdir=$s/src/upper,workdir=$s/src/work" /usr/src
    mount -t overlay overlay -o "lowerdir=/usr/lib/rpm,upperdir=$s/rpm/upper,workdir=$s/rpm/work" /usr/lib/rpm
    mount -t overlay overlay -o "lowerdir=/boot,upperdir=$s/boot/upper,workdir=$s/boot/work" /boot
    mount --bind /bin/bash "$(readlink -f /bin/sh)"
    if [ -n "${NVPM_GAWK:-}" ]; then mount --bind "$NVPM_GAWK" "$(readlink -f /usr/bin/awk)"; fi
    exec "$@"' rpm-family-env "$scratch" "$@"
