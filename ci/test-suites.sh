#!/usr/bin/env bash
# Real builds on the newer Debian suites (issue 12 item 6), as root on the
# Debian 12 CI host, each in a chroot of that suite (ci/chroot.sh: mmdebstrap,
# cached under /var/cache/nv-peer-mem-ci/chroots):
#   - the module, with the suite's own linux-headers-amd64, gcc and rustc
#     (strict: warnings are errors), against kmod/compat and against the
#     nv-p2p.h of NVIDIA 535 (bookworm), 550 (trixie/sid contrib), 555
#     (experimental contrib), 580 and 595 (the fixtures' kernel-open trees);
#   - the Debian route: `cargo xtask build-deb --distro debian13` on the host
#     (sid uses the debian13 data too), then in the chroot
#     `dpkg-buildpackage -us -uc`, lintian (0 errors); Mellanox 1.3's debs
#     (built from the fixture with its own debian/) installed and the
#     administrator's nv_peer_mem.conf edited; `dpkg -i` of both debs, the
#     upgrade from 1.3 (its init script, sysvinit links, upstart job and DKMS tree gone, the
#     settings kept),
#     while the kernel has no MLNX_OFED/NVIDIA symbols (DKMS skips it with
#     one line, dpkg and the kernel's dkms hook succeed, no module); a
#     kernel update with MLNX_OFED and NVIDIA registered with DKMS
#     (ci/prereq-standin.sh dkms-add): the kernel image's dkms hook builds
#     both and then nv_peer_mem in one autoinstall; then with
#     ci/prereq-standin.sh's prebuilt modules exporting them `dkms autoinstall`
#     builds and installs the module; purge, and nothing left under
#     /usr/src, /var/lib/dkms, /lib/modules/*/updates.
#
#   sudo bash ci/test-suites.sh [SUITE...]     (default: trixie sid)
#
# Kernel series of other targets (issue 43, docs/fleet.md): trixie's 6.12 is
# SLES 16's series; Ubuntu 26.04's 7.0 is in no Debian suite any more, so
# sid's 7.2 is the nearest series built here.
# Trixie's rustc (1.85) is the oldest default toolchain of a supported suite
# and the module's declared minimum (kmod/Cargo.toml rust-version), so its
# build here is the minimum-rustc check (docs/toolchains.md).
# Each suite gets a fresh copy of its cached chroot under $NVPM_TEST_DIR
# (default /var/tmp/nv-peer-mem-test-suites), removed when its checks pass.
# Last line: "N passed, M failed"; exit status 1 when anything failed,
# 2 when the machine is not set up.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${NVPM_TEST_DIR:-/var/tmp/nv-peer-mem-test-suites}
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(trixie sid)
standin=mlnx-ofed-kernel-modules   # satisfies mlnx-ofed-kernel-dkms | mlnx-ofed-kernel-modules

. "$here/checks.sh"
. "$here/lib/kmod-build.sh"
require_root_and_tools test-suites.sh cargo git mmdebstrap unshare equivs-build dpkg-deb apt-get

mkdir -p "$work"
: >"$work/log"
start_all=$SECONDS
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
upstream=${version/-/\~}

echo "== on the host: build-deb, MLNX_OFED stand-in, NVIDIA headers"
check "cargo build of xtask" cargo build --quiet --release --manifest-path "$root/Cargo.toml" -p xtask
rm -rf "$work/deb" "$work/equivs"; mkdir -p "$work/deb" "$work/equivs"
tarball=nvidia-peer-memory_${upstream}.orig.tar.gz
check "build-deb --distro debian13" "$root/target/release/xtask" build-deb --out "$work/deb" --distro debian13
check "equivs stand-in for MLNX_OFED" bash "$here/mofed-standin.sh" "$work/equivs" "$standin" \
    "Installed by ci/test-suites.sh in its chroots only."
standin_deb=$work/equivs/${standin}_0-test_all.deb
# NVIDIA driver sources, by major version; 550 is each suite's own (below).
declare -A nv_src
nv_src[535]=$(bash "$here/fetch-nvidia-src.sh" 2>>"$work/log") || true
nv_src[555]=$(bash "$here/fetch-nvidia-p2p.sh" experimental 2>>"$work/log") || true
check "NVIDIA 535 sources (bookworm contrib) at hand" test -f "${nv_src[535]}/nvidia/nv-p2p.h"
check "NVIDIA 555 sources (experimental contrib) at hand" test -f "${nv_src[555]}/nvidia/nv-p2p.h"
# 580 and 595, NVIDIA's current branches, from the fixtures (issue 20);
# without them those builds are reported skipped.
nv_versions=(535 550 555)
for v in 580.142 595.45.04; do
    if nv_src[$v]=$(bash "$here/fixture-nvidia-src.sh" "$v" 2>>"$work/log"); then
        nv_versions+=("$v")
    else
        skip "NVIDIA $v builds: no fixture open-gpu-kernel-modules-$v-kernel-open.tar.gz (set NVPM_FIXTURES)"
    fi
done
[ -f "$work/deb/$tarball" ] && [ -f "$standin_deb" ] || finish

for suite in "${suites[@]}"; do
    echo "== $suite"
    t0=$SECONDS
    chroot_dir=$work/$suite
    if ! bash "$here/chroot.sh" new "$suite" "$chroot_dir" 2>&1 | tee -a "$work/log"; then
        fail "$suite: chroot (see above)"; continue
    fi
    echo "  chroot ready in $((SECONDS - t0)) s"
    in_chroot() { bash "$here/chroot.sh" run "$chroot_dir" "$@"; }
    # The kernel the suite's linux-headers-amd64 names (the only one inside).
    kver=$(ls "$chroot_dir/lib/modules" | sort -V | tail -n 1)
    rustc_v=$(in_chroot rustc --version | cut -d' ' -f2)
    gcc_v=$(in_chroot sh -c 'gcc -dumpfullversion')
    echo "  kernel headers $kver, rustc $rustc_v, gcc $gcc_v"

    # The module's sources as the packages ship them (git-tracked kmod/
    # without its host tests), plus the workspace Cargo.toml for the version.
    mkdir -p "$chroot_dir/build/src" "$chroot_dir/build/deb"
    (cd "$root" && git ls-files -z kmod Cargo.toml | grep -zv '^kmod/tests/' | tar --null -cf - -T -) | tar -C "$chroot_dir/build/src" -xf -
    nv550=$(bash "$here/fetch-nvidia-p2p.sh" "$suite" 2>>"$work/log") || nv550=
    for v in "${nv_versions[@]}"; do
        src=${nv_src[$v]:-}; [ "$v" = 550 ] && src=$nv550
        [ -f "$src/nvidia/nv-p2p.h" ] || continue
        mkdir -p "$chroot_dir/build/nvidia-$v/nvidia"
        cp "$src/nvidia/nv-p2p.h" "$chroot_dir/build/nvidia-$v/nvidia/"
    done

    build_in_chroot() {  # build_in_chroot [make args]: strict clean build in the chroot, output in $work/build
        in_chroot sh -c "cd /build/src && make -s -C kmod clean >/dev/null 2>&1; make -C kmod KVER='$kver' NVPM_STRICT=1 NVPM_RUST_CACHE=/build/rust-cache $*" >"$work/build" 2>&1
        local rc=$?; cat "$work/build"; return $rc
    }
    vermagic_ok() {
        local vm; vm=$(in_chroot modinfo -F vermagic /build/src/kmod/nv_peer_mem.ko)
        echo "vermagic: $vm"; case "$vm" in "$kver "*) ;; *) return 1 ;; esac
    }
    nc_compiled_in_chroot() { in_chroot sh -c 'nm /build/src/kmod/nv_peer_mem.ko | grep -q " U nvidia_p2p_get_pages_persistent$"'; }
    t1=$SECONDS
    check "$suite: module builds for $kver (rustc $rustc_v, gcc $gcc_v, strict)" build_in_chroot
    check "$suite: object verified (GOTPCREL, SSE, objtool)" verified_object "$work/build"
    check "$suite: vermagic is $kver" vermagic_ok
    for v in "${nv_versions[@]}"; do
        if [ ! -f "$chroot_dir/build/nvidia-$v/nvidia/nv-p2p.h" ]; then
            fail "$suite: no NVIDIA $v nv-p2p.h (ci/fetch-nvidia-p2p.sh or ci/fixture-nvidia-src.sh failed, see $work/log)"; continue
        fi
        check "$suite: builds with NVIDIA $v's nv-p2p.h" build_in_chroot NV_SRC=/build/nvidia-$v
        check "$suite: nv_mem_nc client compiled in with NVIDIA $v" nc_compiled_in_chroot
    done
    in_chroot make -s -C /build/src/kmod clean >/dev/null 2>&1
    echo "  module builds: $((SECONDS - t1)) s"

    t1=$SECONDS
    cp "$work/deb/$tarball" "$standin_deb" "$chroot_dir/build/deb/"
    check "$suite: dpkg-buildpackage -us -uc" in_chroot sh -c \
        "cd /build/deb && tar xzf $tarball && cd nvidia-peer-memory-$upstream && dpkg-buildpackage -us -uc"
    debver=$(in_chroot dpkg-parsechangelog -l "/build/deb/nvidia-peer-memory-$upstream/debian/changelog" -S Version)
    deb=/build/deb/nvidia-peer-memory_${debver}_$(in_chroot dpkg --print-architecture).deb
    dkms_deb=/build/deb/nvidia-peer-memory-dkms_${debver}_all.deb
    check "$suite: both debs built" test -f "$chroot_dir$deb" -a -f "$chroot_dir$dkms_deb"
    : >"$work/lintian-$suite.txt"
    [ -f "$chroot_dir$dkms_deb" ] && in_chroot lintian --fail-on none --no-tag-display-limit \
        "/build/deb/nvidia-peer-memory_${debver}_amd64.changes" >"$work/lintian-$suite.txt" 2>>"$work/log"
    sed 's/^/  /' "$work/lintian-$suite.txt"
    errors=$(grep -c '^E: ' "$work/lintian-$suite.txt")
    check "$suite: lintian $(in_chroot lintian --print-version): 0 errors ($errors)" test -f "$chroot_dir/build/deb/nvidia-peer-memory_${debver}_amd64.changes" -a "$errors" = 0

    # A machine with this kernel installed has its modules.dep (linux-image's
    # postinst runs depmod); the chroot has only the headers, and dkms 3.2
    # skips depmod for a kernel without modules.dep, so modinfo -k would not
    # find the module (sid: 7.2's headers ship none). Make it look installed.
    in_chroot depmod -a "$kver" >>"$work/log" 2>&1
    check "$suite: dpkg -i of the MLNX_OFED stand-in" in_chroot dpkg -i "/build/deb/$(basename "$standin_deb")"
    # Mellanox 1.3 first, so that the install below is the upgrade from it:
    # its debs built from the fixture tarball with its own debian/ (binary
    # only, -d: its "3.0 (native)" source cannot carry its revision, and it
    # does not declare dh-dkms). Its DKMS build needs MLNX_OFED's headers, so
    # dkms's per-version override skips it (the tree is still added).
    fixture=${NVPM_FIXTURES:-$root/../shared/fixtures}/nv_peer_memory-1.3.tar.gz
    from13=
    if [ -f "$fixture" ]; then
        mkdir -p "$chroot_dir/build/v13" "$chroot_dir/etc/dkms"
        tar -xzf "$fixture" -C "$chroot_dir/build/v13"
        check "$suite: Mellanox 1.3's debs build from the fixture" in_chroot sh -c \
            "cd /build/v13/nv_peer_memory-1.3 && dpkg-buildpackage -b -us -uc -d"
        echo 'BUILD_EXCLUSIVE_KERNEL="^$"' >"$chroot_dir/etc/dkms/nv_peer_mem-1.3.conf"
        # 1.3's postinst and prerm (debian/nvidia-peer-memory.{postinst,prerm})
        # run `lsb_release -s -i` and call update-rc.d only when it does not
        # say ubuntu: without lsb_release they never make (or remove) the
        # sysvinit links a Debian machine with 1.3 has. The chroot keeps its
        # package lists (ci/chroot.sh), so install it from the suite.
        check "$suite: lsb-release installed (1.3's maintainer scripts call lsb_release)" \
            in_chroot apt-get install -y -q lsb-release
        check "$suite: Mellanox 1.3's debs install" in_chroot sh -c "dpkg -i /build/v13/*.deb"
        check "$suite: 1.3 put its init script, upstart job and DKMS tree in place" in_chroot sh -c \
            "test -f /etc/init.d/nv_peer_mem && test -f /etc/init/nv_peer_mem.conf && test -d /var/lib/dkms/nv_peer_mem/1.3 && test -d /usr/src/nv_peer_mem-1.3"
        check "$suite: 1.3's postinst made its sysvinit links (update-rc.d defaults: S in rc2-5, K in rc0, rc1, rc6)" sh -c \
            "test \"\$(ls '$chroot_dir'/etc/rc[0-6S].d/ | grep -c '^[SK][0-9][0-9]nv_peer_mem\$')\" = 7"
        # The administrator's settings, which the upgrade must keep.
        in_chroot sh -c "sed -i 's/^ONBOOT=.*/ONBOOT=no/' /etc/infiniband/nv_peer_mem.conf && echo '# site setting' >>/etc/infiniband/nv_peer_mem.conf"
        # 1.3's prerm removes its links only while lsb_release runs. In the
        # first suite lsb-release goes before the upgrade, so our postinst
        # must remove them (debian/nvidia-peer-memory.postinst); in the
        # others 1.3's own prerm does.
        if [ "$suite" = "${suites[0]}" ]; then
            check "$suite: lsb-release removed before the upgrade (1.3's prerm then leaves its rc links)" \
                in_chroot apt-get remove -y -q lsb-release
        fi
        from13=1
    else
        skip "$suite: upgrade from Mellanox 1.3: no fixture at $fixture (set NVPM_FIXTURES)"
    fi

    # No MLNX_OFED or NVIDIA symbols for $kver yet: DKMS skips it with one
    # line (dkms.conf) and dpkg, and the kernel hook, succeed.
    check "$suite: dpkg -i of both debs succeeds without the prerequisites" sh -c \
        "bash '$here/chroot.sh' run '$chroot_dir' dpkg --force-confdef --force-confold -i '$deb' '$dkms_deb' >'$work/dpkg-i-$suite.txt' 2>&1"
    sed 's/^/  | /' "$work/dpkg-i-$suite.txt"
    for p in nvidia-peer-memory nvidia-peer-memory-dkms; do
        check "$suite: $p is installed and configured" in_chroot sh -c "dpkg-query -W -f='\${Status}' $p | grep -qx 'install ok installed'"
    done
    if [ -n "$from13" ]; then
        check "$suite: upgrade from 1.3 removed /etc/init.d/nv_peer_mem and /etc/init/nv_peer_mem.conf" sh -c \
            "! ls -d '$chroot_dir'/etc/init.d/nv_peer_mem* '$chroot_dir'/etc/init/nv_peer_mem.conf* 2>/dev/null | grep -q ."
        check "$suite: upgrade from 1.3 left no /etc/rc?.d/*nv_peer_mem link" sh -c \
            "! ls '$chroot_dir'/etc/rc[0-6S].d/ | grep -q 'nv_peer_mem\$'"
        check "$suite: upgrade from 1.3 left no /etc/init (only 1.3's upstart job used it)" \
            test ! -e "$chroot_dir/etc/init"
        check "$suite: upgrade from 1.3 removed its nv_peer_mem 1.3 DKMS tree and sources" sh -c \
            "test ! -e '$chroot_dir/var/lib/dkms/nv_peer_mem/1.3' -a ! -e '$chroot_dir/usr/src/nv_peer_mem-1.3'"
        check "$suite: upgrade from 1.3 kept the administrator's nv_peer_mem.conf" sh -c \
            "grep -qx 'ONBOOT=no' '$chroot_dir/etc/infiniband/nv_peer_mem.conf' && grep -qx '# site setting' '$chroot_dir/etc/infiniband/nv_peer_mem.conf'"
        rm -f "$chroot_dir/etc/dkms/nv_peer_mem-1.3.conf"
    fi
    skip_line="nv_peer_mem: not built for kernel $kver: it lacks MLNX_OFED (no ib_register_peer_memory_client) and the NVIDIA driver (no nvidia_p2p_get_pages)"
    check "$suite: $kver skipped with the line naming what is missing" grep -qF "$skip_line" "$work/dpkg-i-$suite.txt"
    check "$suite: no nv_peer_mem.ko installed for $kver" sh -c "! find '$chroot_dir/lib/modules/$kver' -name 'nv_peer_mem.ko*' | grep -q ."
    check "$suite: the kernel's dkms hook (header_postinst.d) succeeds and says the same" sh -c \
        "bash '$here/chroot.sh' run '$chroot_dir' /etc/kernel/header_postinst.d/dkms '$kver' >'$work/hook-$suite.txt' 2>&1; rc=\$?; cat '$work/hook-$suite.txt'; [ \$rc = 0 ] && grep -qF '$skip_line' '$work/hook-$suite.txt'"
    # A kernel update with MLNX_OFED and NVIDIA from DKMS (ci/test-deb.sh
    # says why): this suite's dkms reads every dkms.conf before building
    # anything; the kernel image's hook must still build both stand-ins and
    # then nv_peer_mem, in one autoinstall.
    cp "$here/prereq-standin.sh" "$chroot_dir/build/"
    check "$suite: MLNX_OFED and NVIDIA DKMS stand-ins registered" in_chroot bash /build/prereq-standin.sh dkms-add
    check "$suite: the kernel's dkms hook (postinst.d) for $kver succeeds" sh -c \
        "bash '$here/chroot.sh' run '$chroot_dir' /etc/kernel/postinst.d/dkms '$kver' >'$work/kernel-update-$suite.txt' 2>&1; rc=\$?; grep -v '^readelf: Warning' '$work/kernel-update-$suite.txt' | tail -n 8; exit \$rc"
    for name in mlnx-ofed-kernel nvidia-current nv_peer_mem; do
        check "$suite: dkms status: $name installed for $kver by the same autoinstall" in_chroot sh -c \
            "dkms status -m $name -k '$kver' | grep -q ': installed'"
    done
    check "$suite: DKMS stand-ins removed" in_chroot bash /build/prereq-standin.sh dkms-remove
    check "$suite: nv_peer_mem unbuilt again for $kver" in_chroot dkms unbuild -m nv_peer_mem -v "$upstream" -k "$kver"
    # The prerequisites appear (ci/prereq-standin.sh, built with the suite's
    # gcc for $kver): dkms autoinstall builds and installs the module.
    check "$suite: MLNX_OFED and NVIDIA stand-ins placed for $kver" in_chroot bash /build/prereq-standin.sh install "$kver"
    check "$suite: dkms autoinstall -k $kver succeeds, no skip line" sh -c \
        "bash '$here/chroot.sh' run '$chroot_dir' dkms autoinstall -k '$kver' >'$work/autoinstall-$suite.txt' 2>&1; rc=\$?; cat '$work/autoinstall-$suite.txt'; [ \$rc = 0 ] && ! grep -q 'nv_peer_mem: not built' '$work/autoinstall-$suite.txt'"
    check "$suite: dkms status: nv_peer_mem installed for $kver" in_chroot sh -c \
        "dkms status -m nv_peer_mem -v '$upstream' -k '$kver'; dkms status -m nv_peer_mem -v '$upstream' -k '$kver' | grep -q ': installed'"
    check "$suite: modinfo -k $kver nv_peer_mem finds version $version" in_chroot sh -c \
        "modinfo -k '$kver' -F version nv_peer_mem | grep -qx '$version'"
    # Upgrade to a newer build (--release 2) while the service runs: the
    # maintainer scripts must not stop it (its ExecStop unloads the module).
    # systemd cannot run in the chroot, so /run/systemd/system makes the
    # scripts believe it does, and recording deb-systemd-invoke and
    # systemctl in /usr/sbin (first in the PATH ci/chroot.sh gives dpkg,
    # before their real /usr/bin) log what the scripts ask of them.
    t1=$SECONDS
    mkdir -p "$chroot_dir/run/systemd/system" "$chroot_dir/build/deb2"
    for tool in deb-systemd-invoke systemctl; do
        printf '#!/bin/sh\necho "%s $*" >>/build/recorded.log\nexit 0\n' "$tool" >"$chroot_dir/usr/sbin/$tool"
        chmod +x "$chroot_dir/usr/sbin/$tool"
    done
    : >"$chroot_dir/build/recorded.log"
    # Control: a maintainer script's deb-systemd-invoke is the recorder, so
    # an empty record below means nothing was asked, not that nothing was seen.
    check "$suite: maintainer scripts would reach the recording deb-systemd-invoke" in_chroot sh -c \
        'test "$(command -v deb-systemd-invoke)" = /usr/sbin/deb-systemd-invoke && test "$(command -v systemctl)" = /usr/sbin/systemctl'
    check "$suite: build-deb --release 2" "$root/target/release/xtask" build-deb --out "$chroot_dir/build/deb2" --distro debian13 --release 2
    check "$suite: dpkg-buildpackage -b of the --release 2 source" in_chroot sh -c \
        "cd /build/deb2 && tar xzf $tarball && cd nvidia-peer-memory-$upstream && dpkg-buildpackage -b -us -uc"
    debver2=$(in_chroot dpkg-parsechangelog -l "/build/deb2/nvidia-peer-memory-$upstream/debian/changelog" -S Version)
    check "$suite: dpkg -i of $debver2 over $debver succeeds" in_chroot dpkg -i \
        "/build/deb2/nvidia-peer-memory_${debver2}_$(in_chroot dpkg --print-architecture).deb" "/build/deb2/nvidia-peer-memory-dkms_${debver2}_all.deb"
    sed 's/^/  recorded: /' "$chroot_dir/build/recorded.log"
    check "$suite: the upgrade stopped nothing and unloaded nothing" sh -c \
        "! grep -E ' (stop|restart|try-restart) .*nv_peer_mem|^(modprobe -r|rmmod) .*nv_peer_mem' '$chroot_dir/build/recorded.log'"
    check "$suite: $debver2 installed" in_chroot sh -c "dpkg-query -W -f='\${Version}' nvidia-peer-memory-dkms | grep -qxF '$debver2'"
    check "$suite: after the upgrade nv_peer_mem is installed for $kver again" in_chroot sh -c \
        "modinfo -k '$kver' -F version nv_peer_mem | grep -qx '$version'"
    rm -f "$chroot_dir"/usr/sbin/{deb-systemd-invoke,systemctl}
    rmdir "$chroot_dir/run/systemd/system"
    echo "  upgrade: $((SECONDS - t1)) s"
    check "$suite: dpkg -P of both debs and the stand-in" in_chroot dpkg -P nvidia-peer-memory nvidia-peer-memory-dkms "$standin"
    leftovers() {
        local left
        left=$(cd "$chroot_dir" && ls -d usr/src/nv_peer_mem-* var/lib/dkms/nv_peer_mem lib/modules/*/updates/dkms/nv_peer_mem.ko* \
            etc/infiniband/nv_peer_mem.conf 2>/dev/null)
        [ -z "$left" ] || { echo "left behind: $left"; return 1; }
    }
    check "$suite: nothing left under /usr/src, /var/lib/dkms, /lib/modules/*/updates, /etc" leftovers
    echo "  deb route: $((SECONDS - t1)) s"
    echo "  $suite: $((SECONDS - t0)) s in all"
    if [ "$failed" = 0 ]; then rm -rf "$chroot_dir"; else echo "  (chroot kept for inspection: $chroot_dir)"; fi
done

echo "== test-suites.sh: $((SECONDS - start_all)) s"
finish
