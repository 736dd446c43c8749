#!/usr/bin/env bash
# Usage: ci/rpm-providers.sh <out dir> <RHEL-style kernel release> <SUSE-style kernel release> <Module.symvers>
#
# Builds binary rpms that stand in for what the rpm module packages need
# from a real repository, so that ci/test-rpm.sh installs them with a real
# resolver (dnf, libsolv) instead of `rpm -i --nodeps`. Run it inside
# `ci/rpm-family-env.sh kmod` (the kernel stand-in's kernel(<symbol>)
# provides come from the real kabi.attr/kabi.sh linked there). Writes the
# rpms to <out dir>/rpms/ and prints nothing else.
#
# What each stands in for, and its shape (docs/packaging.md, "How the rpm
# packages relate to MLNX_OFED and the NVIDIA driver", has the sources):
#   MLNX_OFED 25.10 (mlnx-ofa_kernel.spec of the fixture):
#     kmod-mlnx-ofa_kernel          its RHEL KMP (%kernel_module_package):
#                                   kmodtool's mlnx-ofa_kernel-kmod provide
#     mlnx-ofa_kernel-kmp-default   its SUSE KMP
#     mlnx-ofa_kernel-modules       its non-KMP module package
#     mlnx-ofa_kernel-devel         /usr/src/ofa_kernel/<arch>/<kernel>
#     mlnx-ofa_kernel-dkms          provides kmod-mlnx-ofa_kernel,
#                                   mlnx-ofa_kernel-modules (RHEL names) and
#                                   mlnx-ofa_kernel-devel at its own version
#   NVIDIA's CUDA repository (yum-packaging-dkms-nvidia,
#   yum-packaging-precompiled-kmod): all Epoch 3, all provide
#   nvidia-kmod = 3:<driver version>, none ships a .ko:
#     kmod-nvidia-latest-dkms, kmod-nvidia-open-dkms (conflicts with the
#     former), kmod-nvidia-580.142-<kernel> (precompiled)
#   SUSE's nvidia-open-driver-G06-signed-kmp-default: kmod(nvidia.ko), which
#     the real one gets from its nvidia.ko through kmod.attr; here it is
#     written out, as the stand-in ships no module.
#   The RHEL kernel: kernel-core with /lib/modules/<kernel>/symvers.gz
#     (Debian's Module.symvers, as the test's kmod was built against it);
#     rpm's kabi.sh makes every vmlinux symbol a kernel(<symbol>) = <CRC>
#     provide, as it does for RHEL's kernel-core.
#   The C runtime gpudirect-rdma-check (in -common) links: glibc and
#     libgcc providing the sonames and symbol versions rpm's elfdeps.sh
#     gives their libraries (libc.so.6(GLIBC_2.x)(64bit), ...), for glibc
#     2.34's versions (RHEL 9); the binary here is built on Debian 12
#     (glibc 2.36), whose newest required version is 2.34.
#   The python interpreters RHEL 8, 9 and 10 run dnf on (python(abi)), for
#     -common's dnf plugin; Fedora's libdnf5-plugin-actions, for its dnf5
#     guard.
#   Everything else a module package names (kmod's /usr/sbin/depmod and
#   weak-modules, bash's /bin/sh and /bin/bash, dkms, kernel-devel, the compiler, rust):
#   empty packages of those names and files.
# What they are not: none holds a working module or tool; they exist for
# the resolver only (the module itself is tested in booted kernels).
set -euo pipefail
out=$1 rhel_krel=$2 suse_krel=$3 symvers=$4
arch=$(uname -m)
work=$out/build
rm -rf "$out"
mkdir -p "$work/src" "$out/rpms"

# package <name> <epoch or -> <version> <release> <tags (lines)> <files (one per line)>:
# a %package section of the stand-in spec.
package() {
    local name=$1 epoch=$2 version=$3 release=$4 tags=$5 files=$6
    {
        echo "%package -n $name"
        [ "$epoch" = - ] || echo "Epoch: $epoch"
        echo "Version: $version"
        echo "Release: $release"
        echo "Summary: Stand-in for $name (ci/rpm-providers.sh)"
        [ -z "$tags" ] || echo "$tags"
        echo "%description -n $name"
        echo "Stand-in for $name, for the resolver only."
        echo "%files -n $name"
        [ -z "$files" ] || echo "$files"
        echo
    } >>"$work/standins.spec"
}

cat >"$work/standins.spec" <<'SPEC'
Name: nvpm-standins
Version: 1
Release: 1
Summary: Stand-ins for the rpm packages' providers
License: MIT
%description
Stand-ins for the rpm packages' providers (ci/rpm-providers.sh).

%install
# Every file a stand-in owns, empty (no interpreter line: rpm's generators
# add no requirements of their own).
while read -r file; do
    [ -n "$file" ] || continue
    install -D -m 0644 /dev/null "%{buildroot}$file"
done <%{_sourcedir}/files.txt
install -D -m 0644 %{_sourcedir}/symvers.gz "%{buildroot}/lib/modules/%{rhel_krel}/symvers.gz"

SPEC
: >"$work/src/files.txt"
files() { printf '%s\n' "$@" >>"$work/src/files.txt"; printf '%s\n' "$@"; }
gzip -9n <"$symvers" >"$work/src/symvers.gz"

ofed_release=OFED.25.10.1.7.1.1.1
package kmod-mlnx-ofa_kernel - 25.10 "$ofed_release" \
    "Provides: mlnx-ofa_kernel-kmod = 25.10-$ofed_release
Provides: kernel-modules >= $rhel_krel" ""
package mlnx-ofa_kernel-kmp-default - 25.10 "$ofed_release" "" ""
package mlnx-ofa_kernel-modules - 25.10 "$ofed_release.kver.${rhel_krel//-/_}" "" ""
package mlnx-ofa_kernel-devel - 25.10 "$ofed_release" "" \
    "$(files "/usr/src/ofa_kernel/$arch/$rhel_krel/Module.symvers")"
package mlnx-ofa_kernel-dkms - 25.10 "$ofed_release" \
    "BuildArch: noarch
Provides: kmod-mlnx-ofa_kernel = 25.10-$ofed_release, mlnx-ofa_kernel-modules = 25.10-$ofed_release
Provides: mlnx-ofa_kernel-devel = 25.10-$ofed_release
Requires: dkms >= 3.2" ""

package kmod-nvidia-latest-dkms 3 580.142 1 \
    "BuildArch: noarch
Provides: nvidia-kmod = 3:580.142" ""
package kmod-nvidia-open-dkms 3 580.142 1 \
    "BuildArch: noarch
Conflicts: kmod-nvidia-latest-dkms
Provides: nvidia-kmod = 3:580.142" ""
package "kmod-nvidia-580.142-${rhel_krel%.*}" 3 580.142 1 \
    "Provides: nvidia-kmod = 3:580.142
Provides: kernel-modules = ${rhel_krel}" ""
package nvidia-open-driver-G06-signed-kmp-default - "580.142_k$(echo "${suse_krel%-default}" | tr - _)" 1 \
    "Provides: kmod(nvidia.ko)" ""

# installonlypkg(kernel): as RHEL's kernel-core provides it, so that dnf
# installs a second kernel beside the first (installonlypkgs) instead of
# replacing it; kernel-uname-r, as kernel.spec's kernel_reqprovconf gives
# it (the dnf guard knows a kernel and its release by it).
package kernel-core - "${rhel_krel%%-*}" "$(r=${rhel_krel#*-}; echo "${r%.*}")" "Provides: installonlypkg(kernel)
Provides: kernel-uname-r = $rhel_krel" \
    "/lib/modules/$rhel_krel/symvers.gz"
package kmod - 28 1 "" "$(files /usr/sbin/depmod /usr/sbin/weak-modules)"
package bash - 5.1.8 1 "" "$(files /bin/sh /bin/bash)"
package dkms - 3.2.0 1 "BuildArch: noarch" ""
package kernel-devel - "${rhel_krel%%-*}" 1 "" ""
package kernel-default-devel - "${suse_krel%%-*}" 1 "" ""
package suse-kernel-rpm-scriptlets - 0 1 "BuildArch: noarch" ""
for name in gcc make coreutils grep; do package "$name" - 1 1 "" ""; done
package rust - 1.85.0 1 "" ""
# The interpreters dnf runs on, for the python(abi) = X.Y that rpm's
# python.attr makes -common require for its dnf plugin (distros.yaml's
# dnf_plugin_dir): RHEL 8's platform-python 3.6, RHEL 9's python3 3.9,
# RHEL 10's 3.12 (a stand-in name: RHEL 10 calls it python3 too).
package platform-python - 3.6.8 1 "Provides: python(abi) = 3.6" ""
package python3 - 3.9.21 1 "Provides: python(abi) = 3.9" ""
package python3.12 - 3.12.9 1 "Provides: python(abi) = 3.12" ""
# Fedora's package of libdnf5's actions plugin (dnf5.spec's
# libdnf5-plugin-actions), which Fedora's -common requires for its dnf5
# guard (docs/fleet.md, "The dnf5 guard").
package libdnf5-plugin-actions - 5.4.6.0 1 "" ""
glibc_provides="Provides: rtld(GNU_HASH)
Provides: ld-linux-x86-64.so.2()(64bit), ld-linux-x86-64.so.2(GLIBC_2.2.5)(64bit), ld-linux-x86-64.so.2(GLIBC_2.3)(64bit)
Provides: libc.so.6()(64bit)"
for v in 2.2.5 2.2.6 2.3 2.3.2 2.3.3 2.3.4 2.4 2.5 2.6 2.7 2.8 2.9 2.10 2.11 2.12 2.13 2.14 2.15 2.16 2.17 2.18 \
    2.22 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30 2.32 2.33 2.34; do
    glibc_provides="$glibc_provides
Provides: libc.so.6(GLIBC_$v)(64bit)"
done
package glibc - 2.34 1 "$glibc_provides" ""
package libgcc - 11.5.0 1 "Provides: libgcc_s.so.1()(64bit), libgcc_s.so.1(GCC_3.0)(64bit), libgcc_s.so.1(GCC_3.3)(64bit), libgcc_s.so.1(GCC_3.3.1)(64bit), libgcc_s.so.1(GCC_4.2.0)(64bit)" ""
package rust-src - 1.85.0 1 "BuildArch: noarch" ""

rpmbuild -bb --quiet --define "_topdir $work/top" --define "_sourcedir $work/src" \
    --define "_tmppath $work/tmp" --define "rhel_krel $rhel_krel" \
    --define "_build_id_links none" "$work/standins.spec" >"$work/rpmbuild.log" 2>&1 || {
    cat "$work/rpmbuild.log" >&2
    exit 1
}
find "$work/top/RPMS" -name '*.rpm' -exec mv -t "$out/rpms" {} +
