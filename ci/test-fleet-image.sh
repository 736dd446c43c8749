#!/usr/bin/env bash
# The fleet route on a booted node (issue 21 item 4): a Debian 12 compute
# node with no gcc, no rustc, no kernel headers and no DKMS (ci/image.sh
# node-tarball: Debian's signed bookworm kernel and linux-image-amd64)
# installs GPUDirect RDMA from a signed repository that build-modules and
# build-repo made on this host, and keeps it across a kernel update. Every
# boot is a Secure Boot boot with module.sig_enforce=1 (issue 40 item 13):
# edk2's OVMF verifies Debian's signed kernel against its db, the kernel
# locks itself down and loads only modules signed by a key it trusts, and
# the keys it trusts beyond Debian's are the node's MOKs (MokListRT): the
# site's module signing key, kept in a PKCS#11 token that build-modules
# signs through by URI, and the providers' key the stand-in MLNX_OFED and
# NVIDIA modules are signed with. Checks of that:
#   fleet            Secure Boot on, the kernel locked down, sig_enforce
#                    on; both certificates loaded from MokListRT; mokutil
#                    says enrolled and stages an import; the site's module
#                    without its signature, and signed by a key no MOK
#                    holds, refused (and the next-boot verdict for that
#                    copy LOST: its key in neither MokListRT nor db); the
#                    installed module signed by the site's key and loaded
#   fleet-update     the next-boot verdicts say the new kernel enforces
#                    signatures (Secure Boot) and the module is signed by
#                    the site's key, enrolled in MokListRT;
#                    first, with the kernel mirror ahead of the site's
#                    repository (v1), `apt-get full-upgrade` is refused by
#                    the kernel guard and changes nothing (issue 40 item 6)
#   fleet-newkernel  the same enforcement on the new kernel, its module
#                    loaded
# and the route's own checks:
#   fleet            booted on the bookworm kernel: apt refuses an unsigned
#                    and a tampered copy of the repository, then installs
#                    nvidia-peer-memory and nvidia-peer-memory-modules-amd64
#                    from the signed one (file:///srv, a second disk the host
#                    serves; signed-by); the service loads the prebuilt
#                    module over the MLNX_OFED and NVIDIA stand-ins; no
#                    toolchain came with it
#   fleet-update     the same disk, booted again after the host published
#                    the backports kernel's module and its series'
#                    metapackage into the served repository, Debian's
#                    bookworm-backports kernel mirrored beside: the node
#                    moves to the backports series as docs/guide/fleet.md says (`apt-get
#                    install nvidia-peer-memory-modules-amd64-backports`),
#                    which brings kernel and module together, and modprobe
#                    resolves the module for the kernel it boots next
#   (timed natively) the same update made again in an image of the node
#                    with apt, so that its seconds to a loadable module are
#                    printed beside DKMS's (ci/test-image.sh times its step
#                    the same way); the booted node's seconds under TCG too
#   (in the image)   the NVIDIA driver updated alone (a stand-in of another
#                    branch): apt's provider watch fails the run after
#                    dpkg, naming both kernels' module packages to build
#                    again; the next run passes; the old driver back, silent
#   fleet-newkernel  the same disk, booted on the new kernel (the node's own
#                    vmlinuz and initrd): the service loaded the prebuilt
#                    module at boot; gpudirect-rdma-check runs on this node,
#                    which has no toolchain and no pciutils
#                    then the old kernel's module package removed and the
#                    node pointed back at that kernel (/vmlinuz):
#                    --next-boot's verdict (LOST) saved on the disk
#   fleet-rollback   the same disk, booted on the old kernel as /vmlinuz
#                    says: the saved verdict is what the boot shows (not
#                    loaded; status: no module for this kernel)
# Stand-ins, and how faithful: MLNX_OFED is one mlnx-ofed-kernel-modules
# package carrying both kernels' ib_core (MLNX_OFED's own peer_mem.c with
# the test HCA driver, `cargo xtask vm-standins`) and their Module.symvers
# where MLNX_OFED keeps them; NVIDIA is the P2P double as nvidia.ko; the
# kernels and linux-image-amd64 are Debian's own packages, served from a
# local mirror signed with the test key instead of Debian's. Secure Boot:
# the db holds the certificates Debian's kernel images are signed with
# (read out of them by pe-listsigs) where a real node's db holds
# Microsoft's UEFI CA and shim verifies the kernel with Debian's CA; the
# MOKs are in MokListRT as a variable of the store, which the kernel reads
# when shim's EFI MOK table is absent (load_moklist_certs() in
# security/integrity/platform_certs/load_uefi.c), where on a real node shim
# mirrors MokList, which MokManager wrote when the admin confirmed
# `mokutil --import`, into both at each boot (docs/fleet.md, "A Secure Boot
# node").
# Last line: "N passed, M failed"; exit 1 on any failure, 2 when the host
# is not set up. Scratch: $NVPM_TEST_DIR (default /var/tmp/nv-peer-mem-test-fleet-image).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${NVPM_TEST_DIR:-/var/tmp/nv-peer-mem-test-fleet-image}
tree=$work/root
. "$here/checks.sh"
. "$here/lib/guest-image.sh"

require_root_and_tools test-fleet-image.sh cargo dpkg-buildpackage dpkg-deb mmdebstrap mke2fs debugfs qemu-system-x86_64 unshare gpg apt-ftparchive \
    virt-fw-vars pe-listsigs softhsm2-util jq
fixture=${NVPM_FIXTURES:-$root/../shared/fixtures}/mlnx-ofa_kernel-25.10.1.7.1.1.tar.gz
if [ ! -f "$fixture" ]; then
    skip_suite "test-fleet-image: fixture $fixture not found (set NVPM_FIXTURES); nothing was tested"
fi
. "$here/kernels.sh" || exit 2
k1=$KVER_BOOKWORM k2=$KVER_BACKPORTS
if grep -q " $(realpath -m "$tree")/" /proc/self/mounts; then
    echo "test-fleet-image: something is mounted under $tree; unmount it first" >&2; exit 2
fi
rm -rf "$work" && mkdir -p "$work"
: >"$work/log"
start=$SECONDS
xtask=$root/target/release/xtask
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml")
upstream=${version/-/\~}

echo "== the node image, the kernels, the packages"
check "xtask builds" cargo build --release --locked -q -p xtask
tarball=$(bash "$here/image.sh" node-tarball "$k1" 2>>"$work/log")
check "Debian 12 node tarball with $k1, no toolchain ($(basename "${tarball:-none}"))" test -f "$tarball"
[ -f "$tarball" ] || finish
mapfile -t kdebs2 < <(bash "$here/image.sh" signed-kernel-debs "$k2" 2>>"$work/log")
check "Debian's signed $k2 and its linux-image-amd64 cached" test -f "${kdebs2[0]:-}" -a -f "${kdebs2[1]:-}"
m1=$(tar -xOf "$tarball" ./var/lib/dpkg/status 2>/dev/null | awk '/^Package: linux-image-amd64$/{p=1} p && /^Version:/{print $2; exit}')
m2=$(dpkg-deb -f "${kdebs2[1]:-/dev/null}" Version 2>/dev/null)

# The service package, as test-image.sh builds it (dpkg-buildpackage -b).
build_service_deb() {
    rm -rf "$work/src" && mkdir -p "$work/src" &&
        "$xtask" build-deb --out "$work/src" --distro debian12 &&
        (cd "$work/src" && tar xzf "nvidia-peer-memory_${upstream}.orig.tar.gz" &&
            cd "nvidia-peer-memory-$upstream" && dpkg-buildpackage -us -uc -b)
}
check "build-deb + dpkg-buildpackage -b (the nvidia-peer-memory service package)" build_service_deb
debver=$(dpkg-parsechangelog -l "$work/src/nvidia-peer-memory-$upstream/debian/changelog" -S Version 2>>"$work/log")
service_deb=$work/src/nvidia-peer-memory_${debver}_amd64.deb
check "service package built (${debver:-no version})" test -f "$service_deb"

for k in "$k1" "$k2"; do
    check "vm-standins for $k" "$xtask" vm-standins --kernel "$k" --out "$work/standins/$k"
    mkdir -p "$work/ofa/x86_64" && ln -sfn "$work/standins/$k/ofa_kernel" "$work/ofa/x86_64/$k"
done
ofed_version=25.10-test
# standin_deb NAME DESCRIPTION: $work/debs/NAME staged as a deb whose
# scripts run depmod for every kernel it has modules for that is installed.
standin_deb() {
    local name=$1 dir=$work/debs/$1 s k
    mkdir -p "$dir/DEBIAN"
    printf 'Package: %s\nVersion: %s\nArchitecture: amd64\nMaintainer: nv_peer_mem tests <tests@invalid>\nSection: kernel\nPriority: optional\nDescription: %s\n Built by ci/test-fleet-image.sh for its node image only.\n' \
        "$name" "$ofed_version" "$2" >"$dir/DEBIAN/control"
    for s in postinst postrm; do
        {
            printf '#!/bin/sh\nset -e\n'
            for k in "$k1" "$k2"; do printf '[ ! -e /lib/modules/%s/modules.order ] || depmod -a %s\n' "$k" "$k"; done
        } >"$dir/DEBIAN/$s"
        chmod 0755 "$dir/DEBIAN/$s"
    done
    dpkg-deb --root-owner-group --build "$dir" "$work/debs/${name}_${ofed_version}_amd64.deb" >/dev/null
}
stage_signed_standins() {
    local k s d m
    for k in "$k1" "$k2"; do
        s=$work/standins/$k
        # Signed, as MLNX_OFED's and NVIDIA's modules come signed with
        # their keys, which a Secure Boot node enrolls as MOKs.
        for m in "$s/ib_core.ko" "$s/nvidia.ko"; do
            "/lib/modules/$k/build/scripts/sign-file" sha256 "$work/providers.key" "$work/providers.pem" "$m" || return 1
        done
        d=$work/debs/mlnx-ofed-kernel-modules
        install -D -m 0644 "$s/ib_core.ko" "$d/lib/modules/$k/updates/ib_core.ko" &&
            install -D -m 0644 "$s/ofa_kernel/Module.symvers" "$d/usr/src/ofa_kernel/x86_64/$k/Module.symvers" || return 1
        d=$work/debs/nvpm-standin-nvidia
        install -D -m 0644 "$s/nvidia.ko" "$d/lib/modules/$k/updates/nvidia.ko" || return 1
    done
    standin_deb mlnx-ofed-kernel-modules "stand-in for MLNX_OFED's kernel modules ($k1, $k2): MLNX_OFED's peer_mem.c with a test HCA driver as ib_core.ko" &&
        standin_deb nvpm-standin-nvidia "stand-in for the NVIDIA driver's modules ($k1, $k2): the P2P double as nvidia.ko"
}

# The keys of a Secure Boot fleet. The site's module signing key is in a
# PKCS#11 token (ci/softhsm.sh; its file deleted once imported):
# build-modules signs by URI. The providers' key signs the stand-in
# modules; the third key is enrolled nowhere.
. "$here/softhsm.sh"
site_signer="nvpm test site module signing" providers_signer="nvpm test providers module signing"
new_cert() {  # NAME CN: $work/NAME.key and $work/NAME.pem
    openssl req -new -x509 -newkey rsa:3072 -nodes -days 3650 -subj "/CN=$2/" \
        -keyout "$work/$1.key" -out "$work/$1.pem" >>"$work/log" 2>&1
}
make_signing_keys() {
    softhsm_key "$work/softhsm" nvpm-site "$site_signer" &&
        cp "$work/softhsm/nvpm-site.pem" "$work/site.pem" &&
        new_cert providers "$providers_signer" &&
        new_cert untrusted "nvpm test key no node trusts"
}
check "module signing keys: the site's in a SoftHSM token (its file deleted), the providers', one enrolled nowhere" make_signing_keys
site_key_uri=${modsign_uri:-pkcs11:no-token}
check "stand-in debs: mlnx-ofed-kernel-modules $ofed_version and the NVIDIA double, both kernels, signed with the providers' key" stage_signed_standins

# The build host's side: module packages and the signed repositories.
common=(--ofed-root "$work/ofa" --nvidia-src "$work/standins/$k1/nvidia" --ofed-package "mlnx-ofed-kernel-modules=$ofed_version"
    --modsign-key "$site_key_uri" --modsign-cert "$work/site.pem")
mkdir -p "$work/v1" "$work/v2"
check "build-modules for $k1, signed with the token's key (--modsign-key $site_key_uri)" env "${softhsm_env[@]}" "$xtask" build-modules --kernel "$k1" --out "$work/v1" "${common[@]}"
check "build-modules for $k2, signed the same way" env "${softhsm_env[@]}" "$xtask" build-modules --kernel "$k2" --out "$work/v2" "${common[@]}"
# What a Secure Boot node must refuse: $k1's module without its signature,
# and signed by a key no MOK holds. The appended signature is cut off where
# the kernel finds it (mod_check_sig() in kernel/module_signature.c and
# module_sig_check(): the magic string, before it struct module_signature
# whose last 4 bytes are sig_len, big-endian, before that the signature).
strip_signature() {  # SIGNED UNSIGNED
    local size siglen
    [ "$(tail -c 28 "$1")" = "~Module signature appended~" ] || { echo "$1 is not signed"; return 1; }
    size=$(stat -c %s "$1")
    siglen=$(tail -c 32 "$1" | head -c 4 | od -An -tu1 | awk '{print (($1 * 256 + $2) * 256 + $3) * 256 + $4}')
    head -c $((size - 40 - siglen)) "$1" >"$2"
}
refusable_modules() {
    local d=$work/modsign-test
    mkdir -p "$d" &&
        dpkg-deb --fsys-tarfile "$work/v1/nvidia-peer-memory-modules-${k1}_"*.deb | tar -xO "./lib/modules/$k1/updates/nv_peer_mem.ko" >"$d/signed.ko" &&
        [ "$(modinfo -F signer "$d/signed.ko")" = "$site_signer" ] &&
        strip_signature "$d/signed.ko" "$d/nv_peer_mem-unsigned.ko" &&
        [ -z "$(modinfo -F signer "$d/nv_peer_mem-unsigned.ko")" ] &&
        cp "$d/nv_peer_mem-unsigned.ko" "$d/nv_peer_mem-untrusted.ko" &&
        "/lib/modules/$k1/build/scripts/sign-file" sha256 "$work/untrusted.key" "$work/untrusted.pem" "$d/nv_peer_mem-untrusted.ko" &&
        rm "$d/signed.ko"
}
check "the packaged $k1 module is signed by the site's key; copies unsigned and signed by the unenrolled key" refusable_modules
# The node's UEFI variable store: Secure Boot on, a generated PK and KEK,
# the db holding the certificates both Debian kernels are signed with, and
# both MOKs in MokList and MokListRT (see the top of this file).
mok_owner=d1f0e6b2-5c4a-4e8f-9a3b-6c2d7e8f9a10
make_uefi_vars() {
    local d=$work/uefi f
    rm -rf "$d" && mkdir -p "$d/db" || return 1
    tar -xOf "$tarball" "./boot/vmlinuz-$k1" >"$d/vmlinuz-$k1" &&
        dpkg-deb --fsys-tarfile "${kdebs2[0]}" | tar -xO "./boot/vmlinuz-$k2" >"$d/vmlinuz-$k2" || return 1
    (cd "$d/db" && pe-listsigs --extract "$d/vmlinuz-$k1" "$d/vmlinuz-$k2" >>"$work/log" 2>&1) || return 1
    local db=()
    for f in "$d"/db/*.pem; do db+=(--add-db "$mok_owner" "$f"); done
    [ ${#db[@]} -gt 0 ] || { echo "pe-listsigs found no certificate in the kernel images"; return 1; }
    virt-fw-vars --input /usr/share/OVMF/OVMF_VARS_4M.fd --add-mok "$mok_owner" "$work/site.pem" \
        --add-mok "$mok_owner" "$work/providers.pem" --output-json "$d/moklist.json" >>"$work/log" 2>&1 &&
        jq '.variables |= (map(select(.name == "MokList")) | . + map(.name = "MokListRT" | .attr = 7))' \
            "$d/moklist.json" >"$d/moks.json" &&
        [ "$(jq '[.variables[] | select(.name == "MokListRT")] | length' "$d/moks.json")" = 1 ] &&
        virt-fw-vars --input /usr/share/OVMF/OVMF_VARS_4M.fd --enroll-generate "nvpm test platform" --no-microsoft \
            "${db[@]}" --secure-boot --set-json "$d/moks.json" --output "$work/uefi-vars.fd" >>"$work/log" 2>&1
}
check "the node's UEFI variable store: Secure Boot on, Debian's kernel signing certificates in db, both MOKs in MokListRT" make_uefi_vars
export GNUPGHOME=$work/gnupg
mkdir -m 700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-generate-key "nv_peer_mem test repository <repo@invalid>" ed25519 sign never >>"$work/log" 2>&1
key=$(gpg --list-secret-keys --with-colons "repo@invalid" 2>>"$work/log" | awk -F: '/^fpr/{print $10; exit}')
gpg --export "$key" >"$work/repo-key.gpg"
publish() { "$xtask" build-repo --suite bookworm "$@" >>"$work/log" 2>&1; }
make_repos() {
    publish --repo "$work/repo-v1" --sign-key "$key" "$service_deb" "$work"/v1/*.deb &&
        cp -a "$work/repo-v1" "$work/repo-v2" &&
        publish --repo "$work/repo-v2" --sign-key "$key" "$work"/v2/*.deb &&
        publish --repo "$work/repo-unsigned" "$service_deb" "$work"/v1/*.deb &&
        cp -a "$work/repo-v1" "$work/repo-tampered" &&
        sed -i 's/^Label: nv_peer_mem$/Label: tampered/' "$work/repo-tampered/dists/bookworm/InRelease" &&
        publish --repo "$work/kernels" --sign-key "$key" "${kdebs2[@]}"
}
check "build-repo: the site's repository (v1: $k1; v2: and $k2), an unsigned and a tampered copy, the kernel mirror" make_repos

echo "== the node"
check "unpack the node tarball" unpack_tree
# set_sources SITE-REPO [kernels]: the node's only apt sources.
set_sources() {
    : >"$tree/etc/apt/sources.list"
    echo "deb [signed-by=/etc/apt/keyrings/nv-peer-mem.gpg] file:///srv/$1 bookworm main" >"$tree/etc/apt/sources.list.d/nv-peer-mem.list"
    if [ "${2:-}" = kernels ]; then
        echo "deb [signed-by=/etc/apt/keyrings/nv-peer-mem.gpg] file:///srv/debian-kernels bookworm main" >"$tree/etc/apt/sources.list.d/debian-kernels.list"
    else
        rm -f "$tree/etc/apt/sources.list.d/debian-kernels.list"
    fi
}
# What the host serves the node: a second disk (/dev/vdb, mounted read-only
# at /srv by the node's fstab) holding the site's repository, an unsigned
# and a tampered copy, and later the kernel mirror. The host rewrites it
# when the site publishes, as a mirror would be updated.
serve() {  # serve REPO [kernels]: $work/served.img with REPO as the site's repository
    rm -rf "$work/served" && mkdir -p "$work/served" &&
        cp -a "$work/$1" "$work/served/nv-peer-mem" &&
        cp -a "$work/repo-unsigned" "$work/served/nv-peer-mem-unsigned" &&
        cp -a "$work/repo-tampered" "$work/served/nv-peer-mem-tampered" &&
        cp -a "$work/modsign-test" "$work/served/modsign-test" || return 1
    # With the kernel mirror, repository v1 too: the booted node's guard
    # check points the site's source at it (a mirror not yet updated).
    if [ "${2:-}" = kernels ]; then
        cp -a "$work/kernels" "$work/served/debian-kernels" && cp -a "$work/repo-v1" "$work/served/nv-peer-mem-v1" || return 1
    fi
    local mb=$(( $(du -sm "$work/served" | cut -f1) * 5 / 4 + 16 ))
    rm -f "$work/served.img"
    mke2fs -q -F -t ext4 -L nvpm-served -d "$work/served" "$work/served.img" "${mb}M"
}
check "the served disk: the site's repository v1 ($k1), its unsigned and tampered copies" serve repo-v1
setup_node() {
    install -D -m 0644 "$work/repo-key.gpg" "$tree/etc/apt/keyrings/nv-peer-mem.gpg" &&
        mkdir -p "$tree/srv" "$tree/etc/nvpm-test" || return 1
    set_sources nv-peer-mem
    echo "$site_signer" >"$tree/etc/nvpm-test/site-signer"
    echo "$providers_signer" >"$tree/etc/nvpm-test/providers-signer"
    # The certificates as mokutil takes them (DER): the enrolled site key,
    # as build-modules wrote it for the nodes, and one to stage an
    # enrolment request with.
    # build-modules wrote the site's for the nodes.
    cp "$work/v1/nv_peer_mem-modsign.der" "$tree/etc/nvpm-test/site.der" &&
        openssl x509 -in "$work/untrusted.pem" -outform DER -out "$tree/etc/nvpm-test/new-key.der" || return 1
    echo "deb [signed-by=/etc/apt/keyrings/nv-peer-mem.gpg] file:///srv/nv-peer-mem-unsigned bookworm main" >"$tree/etc/nvpm-test/unsigned.list"
    echo "deb [signed-by=/etc/apt/keyrings/nv-peer-mem.gpg] file:///srv/nv-peer-mem-tampered bookworm main" >"$tree/etc/nvpm-test/tampered.list"
    echo "deb [signed-by=/etc/apt/keyrings/nv-peer-mem.gpg] file:///srv/debian-kernels bookworm main" >"$tree/etc/nvpm-test/kernels.list"
    echo "deb [signed-by=/etc/apt/keyrings/nv-peer-mem.gpg] file:///srv/nv-peer-mem-v1 bookworm main" >"$tree/etc/nvpm-test/site-v1.list"
    # The new kernel's initramfs with the modules this node needs only
    # (initramfs-tools' MODULES=dep, initramfs.conf(5)): with MODULES=most
    # its update-initramfs took 8 of the 15 minutes of the update under TCG.
    mkdir -p "$tree/etc/initramfs-tools/conf.d" && echo MODULES=dep >"$tree/etc/initramfs-tools/conf.d/nvpm-test-node.conf"
    # The prerequisites, as the site's MLNX_OFED and NVIDIA repositories
    # would have installed them.
    mkdir -p "$tree/tmp/debs" && cp "$work"/debs/*.deb "$tree/tmp/debs/" &&
        in_image dpkg -i "/tmp/debs/mlnx-ofed-kernel-modules_${ofed_version}_amd64.deb" "/tmp/debs/nvpm-standin-nvidia_${ofed_version}_amd64.deb" &&
        rm -rf "$tree/tmp/debs"
}
check "node configured: the site's signed repository as its only apt source, the prerequisites installed" setup_node
host_no_toolchain() {
    local found="" t
    for t in gcc cc rustc cargo dkms make lspci setpci; do [ -e "$tree/usr/bin/$t" ] && found="$found $t"; done
    [ -e "$tree/lib/modules/$k1/build" ] && found="$found headers"
    [ -z "$found" ] || { echo "the node has:$found"; return 1; }
}
check "the node image has no gcc, rustc, cargo, dkms, make, pciutils or kernel headers" host_no_toolchain
install_node_test_unit() {
    install -D -m 0755 "$root/kmod/tests/vm/image/run" "$tree/usr/lib/nvpm-image-test/run" &&
        install -D -m 0644 "$root/kmod/tests/vm/image/nvpm-image-test.service" "$tree/etc/systemd/system/nvpm-image-test.service" || return 1
    mkdir -p "$tree/etc/systemd/system/multi-user.target.wants"
    ln -sf /etc/systemd/system/nvpm-image-test.service "$tree/etc/systemd/system/multi-user.target.wants/"
    ln -sf /dev/null "$tree/etc/systemd/system/serial-getty@ttyS0.service"
    printf '%s\n' "/dev/vda / ext4 rw,errors=remount-ro 0 1" "/dev/vdb /srv ext4 ro 0 0" >"$tree/etc/fstab"
    echo nvpm-fleet-node >"$tree/etc/hostname"
}
check "test unit installed" install_node_test_unit

# boot_node KVER PHASE CHECKS...: as ci/test-image.sh boots its image, the
# served disk beside it; the kernel and initrd are the disk's own (what the
# node installed), read out with debugfs. $append: more command line.
boot_node() {
    local k=$1 phase=$2; shift 2
    local f
    for f in "vmlinuz-$k" "initrd.img-$k"; do
        rm -f "$work/$f"
        debugfs -R "dump -p /boot/$f $work/$f" "$work/disk.img" >>"$work/log" 2>&1
        [ -s "$work/$f" ] || { fail "boot $k $phase: no /boot/$f on the node's disk"; return; }
    done
    boot_counted "$k" "$phase" --kernel "$work/vmlinuz-$k" --initrd "$work/initrd.img-$k" \
        --disk "$work/disk.img" --extra-disk "$work/served.img" --uefi-vars "$work/uefi-vars.fd" \
        --append "nvpm_phase=$phase module.sig_enforce=1 ${append:-}" \
        --expect "$(IFS=,; echo "$*")"
}

echo "== boot $k1: install from the signed repository"
check "disk image (mke2fs -d)" make_disk 1536
boot_node "$k1" fleet signatures_enforced mok_certificates mokutil_says mokutil_import unsigned_refused untrusted_refused \
    no_toolchain apt_refuses_unsigned apt_refuses_tampered apt_update apt_install_fleet still_no_toolchain \
    signed_by_site service_starts_prebuilt loaded_is_prebuilt providers_are_standins status_prebuilt untrusted_verdict

echo "== the site publishes $k2's module; the node updates itself"
# Repository v2: v1 plus $k2's packages (build-repo into a copy of v1, the
# older kernel's packages kept); Debian's linux-image-amd64 moves to $k2
# (the kernel mirror). The node's disk is the one the first boot left.
check "the served disk: the site's repository v2 ($k1 and $k2) and the kernel mirror" serve repo-v2 kernels
append="nvpm_newkernel=$k2" boot_node "$k1" fleet-update full_upgrade_refused apt_update_published apt_upgrade_kernel_and_module \
    module_for_next_kernel old_kernel_module_kept update_no_toolchain kernel_hook_said next_kernel_verdict next_boot_verdict
guest_seconds=$(sed -n 's/.*NVPMTEST-INFO kernel update in the booted node (TCG): \([0-9]*\) s.*/\1/p' "$work/console-fleet-update.log" | tail -n 1)

echo "== the same kernel update, in the image (timed natively, beside DKMS's)"
apt_in_image() { in_image env LC_ALL=C DEBIAN_FRONTEND=noninteractive apt-get -q -y "$@"; }
native_srv() { rm -rf "$tree/srv/nv-peer-mem" && cp -a "$work/$1" "$tree/srv/nv-peer-mem"; }
# MODULES=dep reads the running system, which a chroot is not; the image's
# own update keeps Debian's default (MODULES=most).
rm -f "$tree/etc/initramfs-tools/conf.d/nvpm-test-node.conf"
first_install_from_repo() { native_srv repo-v1 && apt_in_image update && apt_in_image install nvidia-peer-memory nvidia-peer-memory-modules-amd64; }
check "apt-get install nvidia-peer-memory nvidia-peer-memory-modules-amd64 (the node's state after its first boot)" first_install_from_repo
# Issue 40 item 6: the kernel mirror offers linux-image-amd64 for $k2, the site
# has not published its module yet (repository v1). `apt-get upgrade`
# keeps the kernel back (the metapackage); `apt-get full-upgrade` would
# remove the metapackage and install $k2 without its module: the service
# package's kernel guard (apt's Pre-Install-Pkgs) refuses before dpkg
# runs, naming the package, and nothing changes.
rm -rf "$tree/srv/debian-kernels" && cp -a "$work/kernels" "$tree/srv/debian-kernels"
set_sources nv-peer-mem kernels
dpkg_digest() { in_image dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\n' | sha256sum; }
apt_guard_refuses() {
    apt_in_image update >/dev/null || return 1
    local before rc
    before=$(dpkg_digest)
    apt_in_image full-upgrade >"$work/guard.out" 2>&1
    rc=$?
    cat "$work/guard.out"
    [ $rc != 0 ] && grep -qF "nvidia-peer-memory-modules-$k2: booted, that kernel would have no" "$work/guard.out" &&
        [ "$(dpkg_digest)" = "$before" ] && [ ! -e "$tree/boot/vmlinuz-$k2" ]
}
check "apt-get full-upgrade before $k2's module is published: refused by the kernel guard, naming nvidia-peer-memory-modules-$k2; nothing changed" apt_guard_refuses
native_srv repo-v2
kernel_update() {
    apt_in_image update || return 1
    local t0=$SECONDS
    apt_in_image install nvidia-peer-memory-modules-amd64-backports || return 1
    # Loadable: the kernel is there and modprobe resolves nv_peer_mem for it.
    in_image modprobe -S "$k2" --show-depends nv_peer_mem | grep -q "/lib/modules/$k2/updates/nv_peer_mem.ko" || return 1
    echo $((SECONDS - t0)) >"$work/kernel-update-seconds"
}
check "apt-get install nvidia-peer-memory-modules-amd64-backports (to the backports series): linux-image-amd64 $m2, $k2 and its module package together" kernel_update
installed_now() {
    local p
    for p in "linux-image-$k2" "nvidia-peer-memory-modules-$k2" "nvidia-peer-memory-modules-$k1"; do
        in_image dpkg-query -W -f='${Status}\n' "$p" | grep -q 'install ok installed' || { echo "$p is not installed"; return 1; }
    done
    [ "$(in_image dpkg-query -W -f='${Version}' linux-image-amd64)" = "$m2" ] &&
        [ "$(in_image dpkg-query -W -f='${Version}' nvidia-peer-memory-modules-amd64-backports)" = "$m2+$version.1" ] &&
        ! in_image dpkg-query -W -f='${Status}\n' nvidia-peer-memory-modules-amd64 2>/dev/null | grep -q 'install ok installed'
}
check "both kernels' module packages installed; the backports series' metapackage at $m2, the suite's gone" installed_now
ours=$(cat "$work/kernel-update-seconds" 2>/dev/null) && ours="$ours s" || ours="not measured (the update failed)"
dkms=$(cat "${NVPM_TEST_IMAGE_DIR:-/var/tmp/nv-peer-mem-test-image}/kernel-update-seconds" 2>/dev/null) && dkms="$dkms s" ||
    dkms="not recorded yet (ci/test-image.sh, which ci/test.sh runs beside this suite, writes it; ci/test.sh prints both figures once both suites ended)"
echo "   kernel update to a loadable nv_peer_mem, natively in the image:"
echo "     prebuilt route (apt-get install of kernel + module package): $ours"
echo "     DKMS route (ci/test-image.sh, kernel install + DKMS builds):   $dkms"
echo "   the same update in the booted node (TCG): ${guest_seconds:-not measured} s"
check "no toolchain came with the update" host_no_toolchain

echo "== linux-image-amd64 upgraded past the published kernels, in the image"
# Issue 58: Debian's linux-image-amd64 at a version whose kernel is one the
# node has (a stand-in of the metapackage: it depends on linux-image-$k2,
# as Debian's depends on its kernel image), installed with apt. apt
# removes the series' metapackage, which holds linux-image-amd64 at $m2,
# and unpacks no new kernel: the guard refuses the removal before dpkg,
# naming both, and nothing changes.
meta_upgrade_refused() {
    local d=$work/debs-meta/linux-image-amd64 deb=/tmp/debs/linux-image-amd64_${m2}+nvpm1_amd64.deb before rc
    rm -rf "$work/debs-meta" && mkdir -p "$d/DEBIAN" "$tree/tmp/debs" || return 1
    printf 'Package: linux-image-amd64\nVersion: %s+nvpm1\nArchitecture: amd64\nMaintainer: nvpm test <test@example.org>\nDepends: linux-image-%s\nDescription: stand-in of Debian'"'"'s kernel metapackage\n' "$m2" "$k2" >"$d/DEBIAN/control"
    dpkg-deb --root-owner-group --build "$d" "$tree$deb" >/dev/null || return 1
    before=$(dpkg_digest)
    apt_in_image install "$deb" >"$work/meta.out" 2>&1
    rc=$?
    cat "$work/meta.out"
    [ $rc != 0 ] && grep -qF "apt would remove nvidia-peer-memory-modules-amd64-backports while" "$work/meta.out" &&
        grep -qF "linux-image-amd64 stays: nothing would then bring a new kernel's" "$work/meta.out" &&
        [ "$(dpkg_digest)" = "$before" ]
}
check "apt-get install linux-image-amd64 $m2+nvpm1 (the series' metapackage removed, no kernel unpacked): refused by the guard, naming both; nothing changed" meta_upgrade_refused
rm -f "$tree/tmp/debs/linux-image-amd64_${m2}+nvpm1_amd64.deb"

echo "== the NVIDIA driver updated alone, in the image: apt says what it cost"
# Issue 40: a driver update alone (no package of ours in the run, so none of
# our scripts runs) must not end in a silent success on a node whose
# module packages were built against the old driver. The stand-in NVIDIA
# package at a newer version whose nvidia.ko is the double built against
# 580's nv-p2p.h (vm-standins' driver_variant: other nvidia_p2p_* symbol
# versions, as a driver update across that change has), installed with
# apt: the provider watch (apt's DPkg::Post-Invoke) fails the run, naming
# the packages to build again; dpkg's change is kept and the verdict is
# LOST; the next apt run that changes no provider passes; the old driver
# back, apt is silent and the verdict OK.
driver_update=$ofed_version.580
stage_driver_update() {
    local d=$work/debs-driver/nvpm-standin-nvidia k a b
    rm -rf "$work/debs-driver" && mkdir -p "$d" && cp -a "$work/debs/nvpm-standin-nvidia/DEBIAN" "$d/" || return 1
    for k in "$k1" "$k2"; do
        a=$(awk '$2 == "nvidia_p2p_get_pages" { print $1 }' "$work/standins/$k/nvidia/Module.symvers")
        b=$(awk '$2 == "nvidia_p2p_get_pages" { print $1 }' "$work/standins/$k/driver_variant/Module.symvers")
        echo "$k: nvidia_p2p_get_pages $a, the update's $b"
        [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] || return 1
        cp "$work/standins/$k/driver_variant/nvidia.ko" "$work/driver-$k.ko" &&
            "/lib/modules/$k/build/scripts/sign-file" sha256 "$work/providers.key" "$work/providers.pem" "$work/driver-$k.ko" &&
            install -D -m 0644 "$work/driver-$k.ko" "$d/lib/modules/$k/updates/nvidia.ko" || return 1
    done
    sed -i "s/^Version: .*/Version: $driver_update/" "$d/DEBIAN/control" &&
        mkdir -p "$tree/tmp/debs" && cp "$work/debs/nvpm-standin-nvidia_${ofed_version}_amd64.deb" "$tree/tmp/debs/" &&
        dpkg-deb --root-owner-group --build "$d" "$tree/tmp/debs/nvpm-standin-nvidia_${driver_update}_amd64.deb" >/dev/null
}
check "the NVIDIA stand-in's update ($driver_update: nvidia.ko of another driver branch, other nvidia_p2p_* versions)" stage_driver_update
verdict_in_image() {  # verdict_in_image KVER: the check's exit status for KVER in the image
    in_image gpudirect-rdma-check --kernel "$1" >"$work/verdict-$1.out" 2>&1
    echo $?
}
driver_update_said() {
    local k rc out=$work/driver-update.out
    for k in "$k1" "$k2"; do
        [ "$(verdict_in_image "$k")" = 0 ] || { cat "$work/verdict-$k.out"; echo "not OK on $k before the update"; return 1; }
    done
    apt_in_image install "/tmp/debs/nvpm-standin-nvidia_${driver_update}_amd64.deb" >"$out" 2>&1
    rc=$?
    cat "$out"
    [ $rc != 0 ] || { echo "apt-get exited 0"; return 1; }
    for k in "$k1" "$k2"; do
        grep -qF "after this run nv_peer_mem will not load on kernel $k:" "$out" &&
            grep -qF "build nvidia-peer-memory-modules-$k again against the NVIDIA driver installed for $k" "$out" &&
            [ "$(verdict_in_image "$k")" = 4 ] || { echo "not said, or not LOST, for $k"; return 1; }
    done
    grep -q "exports another version of nvidia_p2p_" "$out" &&
        grep -q "Problem executing scripts DPkg::Post-Invoke" "$out" &&
        [ "$(in_image dpkg-query -W -f='${Version} ${db:Status-Abbrev}' nvpm-standin-nvidia)" = "$driver_update ii " ]
}
check "apt-get install of the NVIDIA update alone: fails after dpkg, naming nvidia-peer-memory-modules-$k1 and -$k2 and the build; the driver stays updated; the verdict LOST" driver_update_said
next_run_passes() {
    apt_in_image install --reinstall nvidia-peer-memory >"$work/next-run.out" 2>&1 || { cat "$work/next-run.out"; return 1; }
    ! grep -F "nv_peer_mem will not load" "$work/next-run.out"
}
check "the next apt run, no provider changed: passes, not said again" next_run_passes
driver_back() {
    apt_in_image install --allow-downgrades "/tmp/debs/nvpm-standin-nvidia_${ofed_version}_amd64.deb" >"$work/driver-back.out" 2>&1 || { cat "$work/driver-back.out"; return 1; }
    ! grep -F "nv_peer_mem will not load" "$work/driver-back.out" &&
        [ "$(verdict_in_image "$k1")" = 0 ] && [ "$(verdict_in_image "$k2")" = 0 ] && rm -rf "$tree/tmp/debs"
}
check "the old driver back (apt-get install --allow-downgrades): passes, silent, the verdict OK on both kernels" driver_back

echo "== boot $k2 from the node's own disk: the module loads at boot"
append="nvpm_oldkernel=$k1" boot_node "$k2" fleet-newkernel signatures_enforced service_loaded_module loaded_is_prebuilt providers_are_standins status_prebuilt no_toolchain readiness_booted \
    old_kernel_lost rollback_links next_boot_predicts_none

echo "== boot $k1 again, as the node's /vmlinuz now says: the saved verdict against the boot"
# Issue 26 item 3: the last boot removed $k1's module package, pointed the
# node's /vmlinuz at $k1 and saved gpudirect-rdma-check --next-boot's
# verdict (LOST); the host boots the kernel that link names.
vmlinuz_names() {  # KVER: the node's /vmlinuz link (debugfs: "Fast link dest")
    local dest
    dest=$(debugfs -R "stat /vmlinuz" "$work/disk.img" 2>/dev/null | sed -n 's/^Fast link dest: "\(.*\)"$/\1/p')
    echo "/vmlinuz -> $dest"
    [ "$dest" = "boot/vmlinuz-$1" ]
}
check "the node's /vmlinuz names $k1's kernel" vmlinuz_names "$k1"
boot_node "$k1" fleet-rollback outcome_matches_none status_none_after_boot

echo "   (test-fleet-image: $((SECONDS - start)) s in all)"
finish
