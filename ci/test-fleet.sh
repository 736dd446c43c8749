#!/usr/bin/env bash
# The fleet route (issue 21, docs/fleet.md), for real, on this build host:
#   build-modules builds nv_peer_mem for bookworm's and bookworm-backports'
#   kernels against MLNX_OFED's PeerDirect core and the NVIDIA P2P double
#   (cargo xtask vm-standins: MLNX_OFED's own peer_mem.c from the fixture,
#   so ib_register_peer_memory_client has its real CRC); the packages:
#   contents, dependencies, the recorded symbol versions against the
#   providers' Module.symvers, vermagic, lintian (no errors), byte-identical
#   rebuilds, a module signed with a throwaway key (modinfo -F signer);
#   every bad input exits 2 and writes nothing;
#   build-repo makes signed apt and dnf repositories (throwaway gpg key):
#   apt-get update (signed-by) and dnf makecache (repo_gpgcheck) accept
#   them, an unsigned, a tampered or a foreign-key repository is refused;
#   the same packages give a byte-identical repository; bad input leaves the
#   repository as it was; publishing a second kernel keeps the first;
#   apt's resolver on a node (a private apt configuration and dpkg status,
#   nothing installed on this host): the modules metapackage installs the
#   running kernel's module; a kernel update is held back until the
#   repository has its module, then `apt upgrade` brings kernel and module
#   together; -dkms and the modules replace each other both ways;
#   Ubuntu 26.04 (issue 43): apt resolves build-dkms --distro ubuntu2604's
#   -dkms against stand-ins with Ubuntu's DOCA-OFED names and versions
#   (doca-ofed-<series>-dkms, linux-modules-doca-ofed-<series>-generic) and
#   MLNX_OFED's, and refuses it without; a build-modules --distro ubuntu2604
#   package resolves with its kernel's linux-main-modules-doca-ofed-26.01-
#   <release> only (not another kernel's, not another version);
#   gpudirect-rdma-check --kernel/--next-boot over fake roots made of these
#   real modules and Debian's kernel package (ci/next-boot-trees.sh).
# What stands in, and how faithfully: the kernels, MLNX_OFED's DKMS package
# and the nvidia-peer-memory service package are index entries (stub .debs
# with the real names, versions and dependencies, no files): apt's resolver
# reads nothing else. The booted no-compiler node is ci/test-image.sh's.
# Needs the fixtures (MLNX_OFED's source for the PeerDirect core); without
# them the whole suite says "skipped" and why.
# Last line: "N passed, M failed"; exit 1 when anything failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${NVPM_TEST_DIR:-/var/tmp/nv-peer-mem-test-fleet}

. "$here/checks.sh"
. "$here/lib/routes.sh"

require_root_and_tools test-fleet.sh cargo dpkg-deb lintian apt-ftparchive apt-get createrepo_c dnf gpg openssl rpm modinfo

fixtures=${NVPM_FIXTURES:-$root/../shared/fixtures}
if [ ! -f "$fixtures/mlnx-ofa_kernel-25.10.1.7.1.1.tar.gz" ]; then
    skip_suite "the fleet route: no MLNX_OFED fixture at $fixtures (set NVPM_FIXTURES); nothing was tested"
fi

. "$here/kernels.sh" || exit 2
k1=$KVER_BOOKWORM k2=$KVER_BACKPORTS
rm -rf "$work"
mkdir -p "$work"
: >"$work/log"
xtask=$root/target/release/xtask
check "xtask builds" cargo build --release --locked -q -p xtask

# --- the prerequisites of the build host, per kernel ---------------------
# MLNX_OFED's layout: <root>/<uname -m>/<release> (prerequisites.rs).
for k in "$k1" "$k2"; do
    check "stand-ins for $k (MLNX_OFED's PeerDirect core, the NVIDIA double)" "$xtask" vm-standins --kernel "$k" --out "$work/standins/$k"
    mkdir -p "$work/ofa/x86_64"
    ln -sfn "$work/standins/$k/ofa_kernel" "$work/ofa/x86_64/$k"
done
nvsrc=$work/standins/$k1/nvidia
# The MLNX_OFED package the modules depend on (=): the DKMS shape, one
# version for every kernel, as MLNX_OFED's mlnx-ofed-kernel-dkms.
ofed_pkg=mlnx-ofed-kernel-dkms=25.10.OFED.25.10.1.7.1.1-1
common=(--ofed-root "$work/ofa" --nvidia-src "$nvsrc" --ofed-package "$ofed_pkg")
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml")
dv=$version-1~deb12
meta_of() { apt-cache show linux-image-amd64 | awk -v img="linux-image-$1 " '/^Version:/{v=$2} /^Depends:/ && index($0, img) {print v; exit}'; }
m1=$(meta_of "$k1") m2=$(meta_of "$k2")

# --- build-modules -------------------------------------------------------
mkdir -p "$work/v1" "$work/v2" "$work/again"
built_k1() { "$xtask" build-modules --kernel "$k1" --out "$work/v1" "${common[@]}" >"$work/build-k1.out" 2>&1; local rc=$?; cat "$work/build-k1.out"; return $rc; }
check "build-modules for $k1" built_k1
check "build-modules without a signing key warns that enforcing kernels refuse the modules" \
    grep -q 'WARNING: the modules are not signed (no --modsign-key/--modsign-cert)' "$work/build-k1.out"
check "build-modules for $k2" "$xtask" build-modules --kernel "$k2" --out "$work/v2" "${common[@]}"
p1=$work/v1/nvidia-peer-memory-modules-${k1}_${dv}_amd64.deb
p2=$work/v2/nvidia-peer-memory-modules-${k2}_${dv}_amd64.deb
meta1=$work/v1/nvidia-peer-memory-modules-amd64_$m1+$version.1_amd64.deb
# $k2 is bookworm-backports' kernel ($m2 has ~bpo): its metapackage is the
# backports series' (docs/fleet.md, "Naming and dependencies").
meta2b=$work/v2/nvidia-peer-memory-modules-amd64-backports_$m2+$version.1_amd64.deb
check "per-kernel packages and metapackages (the suite's, and -backports for $k2) are named as documented" ls "$p1" "$p2" "$meta1" "$meta2b"
check "the module is in /lib/modules/$k1/updates/" sh -c "dpkg-deb -c '$p1' | grep -q ' ./lib/modules/$k1/updates/nv_peer_mem.ko\$'"
check "it depends on that kernel's image, the MLNX_OFED package (=) and the service package from $version below the next major" sh -c "
    dpkg-deb -f '$p1' Depends | grep -qxF 'linux-image-$k1 | linux-image-$k1-unsigned, mlnx-ofed-kernel-dkms (= 25.10.OFED.25.10.1.7.1.1-1), nvidia-peer-memory (>= $version~), nvidia-peer-memory (<< $((${version%%.*} + 1))~)'"
check "it conflicts with -dkms and provides nvidia-peer-memory-modules" sh -c "
    [ \"\$(dpkg-deb -f '$p1' Conflicts)\" = nvidia-peer-memory-dkms ] && [ \"\$(dpkg-deb -f '$p1' Provides)\" = nvidia-peer-memory-modules ]"
check "the metapackage follows linux-image-amd64 $m1 (=) and its module (=)" sh -c "
    dpkg-deb -f '$meta1' Depends | grep -qxF 'nvidia-peer-memory-modules-$k1 (= $dv), linux-image-amd64 (= $m1)'"
check "depmod runs in the module package's postinst and postrm" sh -c "
    dpkg-deb --ctrl-tarfile '$p1' | tar xO ./postinst | grep -q 'depmod -a $k1' &&
    dpkg-deb --ctrl-tarfile '$p1' | tar xO ./postrm | grep -q 'depmod -a $k1'"
mkdir -p "$work/x1"
dpkg-deb -x "$p1" "$work/x1"
ko1=$work/x1/lib/modules/$k1/updates/nv_peer_mem.ko
check "the packaged module's vermagic is $k1" sh -c "modinfo -F vermagic '$ko1' | grep -q '^$k1 '"
# Every recorded CRC is the one its provider exports, and the PeerDirect
# core's is there (the module could not load with another).
crcs_match() {
    local recorded=$work/x1/usr/share/doc/nvidia-peer-memory-modules-$k1/symbol-versions
    grep -q $'\tib_register_peer_memory_client\tib_core\t' "$recorded" || return 1
    grep -q $'\tnvidia_p2p_get_pages\t' "$recorded" || return 1
    local crc sym rest want
    while IFS=$'\t' read -r crc sym rest; do
        case $crc in '#'*) continue;; esac
        want=$(awk -v s="$sym" '$2 == s {print $1}' "$work/standins/$k1/ofa_kernel/Module.symvers" "$nvsrc/Module.symvers")
        [ "$((want))" = "$((crc))" ] || { echo "$sym: recorded $crc, provider exports $want"; return 1; }
    done <"$recorded"
}
check "the recorded symbol versions are the providers' CRCs" crcs_match
check "lintian: no errors or warnings on the module packages" lintian_quiet "$p1" "$meta1" "$p2" "$meta2b"
# The build farm: both kernels in one call, the core cache shared; the
# per-kernel cost and peak memory it prints are figures (shown here, not
# asserted); one metapackage per series, each its newest kernel's.
farm() {
    mkdir -p "$work/farm"
    "$xtask" build-modules --kernel "$k1" --kernel "$k2" --out "$work/farm" "${common[@]}" >"$work/farm.out" 2>&1 ||
        { cat "$work/farm.out"; return 1; }
    cat "$work/farm.out"
    ls "$work/farm/nvidia-peer-memory-modules-${k1}_"*.deb "$work/farm/nvidia-peer-memory-modules-${k2}_"*.deb &&
        [ "$(ls "$work"/farm/nvidia-peer-memory-modules-amd64*_*.deb | wc -l)" = 2 ] &&
        cmp "$work/farm/$(basename "$meta1")" "$meta1" && cmp "$work/farm/$(basename "$meta2b")" "$meta2b"
}
check "build-modules for $k1 and $k2 in one call: both module packages, one metapackage per series (as each kernel's own build gives it)" farm
echo "   build farm figures (build-modules, both kernels, one call):"
sed -n '/^Build cost per kernel/,/^$/p' "$work/farm.out" | sed 's/^/     /'
check "build-modules again gives byte-identical packages" sh -c "
    '$xtask' build-modules --kernel '$k1' --out '$work/again' ${common[*]} &&
    cmp '$p1' '$work/again/$(basename "$p1")' && cmp '$meta1' '$work/again/$(basename "$meta1")'"

# Module signing (Secure Boot): a throwaway key and certificate, as the
# kernel's certs/Makefile makes its own (x509.genkey: CN, DER certificate).
openssl req -new -nodes -utf8 -sha256 -days 1 -batch -x509 -subj "/CN=nv_peer_mem test signing key/" \
    -outform DER -out "$work/signing.der" -keyout "$work/signing.pem" >>"$work/log" 2>&1
mkdir -p "$work/signed" "$work/xs"
check "build-modules --modsign-key/--modsign-cert signs the module, does not warn, writes the certificate for the nodes' mokutil --import" sh -c "
    '$xtask' build-modules --kernel '$k1' --out '$work/signed' --no-metapackage ${common[*]} \
        --modsign-key '$work/signing.pem' --modsign-cert '$work/signing.der' >'$work/build-signed.out' 2>&1 &&
    ! grep -q 'not signed' '$work/build-signed.out' &&
    cmp '$work/signed/nv_peer_mem-modsign.der' '$work/signing.der' &&
    grep -q 'mokutil --import $work/signed/nv_peer_mem-modsign.der' '$work/build-signed.out' &&
    dpkg-deb -x '$work/signed/$(basename "$p1")' '$work/xs' &&
    [ \"\$(modinfo -F signer '$work/xs/lib/modules/$k1/updates/nv_peer_mem.ko')\" = 'nv_peer_mem test signing key' ]"

# Bad input: exit 2, a message naming the fix, nothing in --out.
mkdir -p "$work/bad" "$work/ofa-without-core/x86_64/$k1/include/rdma"
cp "$work/standins/$k1/ofa_kernel/include/rdma/peer_mem.h" "$work/ofa-without-core/x86_64/$k1/include/rdma/"
grep -v ib_register_peer_memory_client "$work/standins/$k1/ofa_kernel/Module.symvers" >"$work/ofa-without-core/x86_64/$k1/Module.symvers"
refused() {  # refused WHAT-THE-MESSAGE-SAYS ARGS...: exit 2, the message, nothing written
    local says=$1; shift
    "$xtask" build-modules --out "$work/bad" "$@" >"$work/bad.out" 2>&1
    local rc=$?
    cat "$work/bad.out"
    [ "$rc" = 2 ] && grep -q -- "$says" "$work/bad.out" && [ -z "$(ls -A "$work/bad")" ]
}
check "a kernel without headers: exit 2 naming linux-headers-<release>" refused "apt install linux-headers-6.1.0-999-amd64" --kernel 6.1.0-999-amd64 "${common[@]}"
check "a release that cannot name a package: exit 2" refused "not a kernel release" --kernel "../$k1" "${common[@]}"
check "a kernel without MLNX_OFED's build: exit 2 naming the package" refused "mlnx-ofed-kernel-modules built for $k1" --kernel "$k1" --ofed-root "$work/nowhere" --nvidia-src "$nvsrc" --ofed-package "$ofed_pkg"
check "an MLNX_OFED build without the PeerDirect core: exit 2 (never an unloadable module)" refused "does not export ib_register_peer_memory_client" --kernel "$k1" --ofed-root "$work/ofa-without-core" --nvidia-src "$nvsrc" --ofed-package "$ofed_pkg"
check "no NVIDIA source: exit 2 naming --nvidia-src" refused "nv-p2p.h" --kernel "$k1" --ofed-root "$work/ofa" --nvidia-src "$work/nowhere" --ofed-package "$ofed_pkg"
check "a missing signing key: exit 2" refused "no such file" --kernel "$k1" "${common[@]}" --modsign-key "$work/nowhere.pem" --modsign-cert "$work/signing.der"
check "a malformed --ofed-package: exit 2" refused "NAME=VERSION" --kernel "$k1" --ofed-root "$work/ofa" --nvidia-src "$nvsrc" --ofed-package mlnx-ofed-kernel-dkms
check "one bad kernel among good ones: exit 2, nothing built or written" refused "linux-headers-6.1.0-999-amd64" --kernel "$k1" --kernel 6.1.0-999-amd64 "${common[@]}"

# --- build-repo ----------------------------------------------------------
# Throwaway gpg keys: the repository's, and a foreign one.
export GNUPGHOME=$work/gnupg
mkdir -m 700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-generate-key "nv_peer_mem test repository <repo@invalid>" ed25519 sign never >>"$work/log" 2>&1
gpg --batch --quiet --passphrase '' --quick-generate-key "someone else <else@invalid>" ed25519 sign never >>"$work/log" 2>&1
key=$(gpg --list-secret-keys --with-colons "repo@invalid" 2>>"$work/log" | awk -F: '/^fpr/{print $10; exit}')
other=$(gpg --list-secret-keys --with-colons "else@invalid" 2>>"$work/log" | awk -F: '/^fpr/{print $10; exit}')
gpg --export "$key" >"$work/repo-key.gpg"
gpg --export "$other" >"$work/other-key.gpg"
gpg --export --armor "$key" >"$work/repo-key.asc"

# Stand-ins for what a node's other repositories carry (names, versions and
# dependencies as Debian's and MLNX_OFED's packages have them; no files).
stub() {  # stub NAME VERSION ARCH [DEPENDS]
    local d=$work/stubs/$1
    mkdir -p "$d/DEBIAN"
    {
        printf 'Package: %s\nVersion: %s\nArchitecture: %s\nMaintainer: nv_peer_mem tests <tests@invalid>\n' "$1" "$2" "$3"
        [ -z "${4:-}" ] || printf 'Depends: %s\n' "$4"
        printf 'Section: kernel\nPriority: optional\nDescription: test stand-in for %s\n Index entry only (ci/test-fleet.sh).\n' "$1"
    } >"$d/DEBIAN/control"
    dpkg-deb --root-owner-group --build "$d" "$work/stubs/${1}_${2#*:}_$3.deb" >/dev/null
}
mkdir -p "$work/stubs"
stub "linux-image-$k1" "$m1" amd64
stub "linux-image-$k2" "$m2" amd64
stub mlnx-ofed-kernel-dkms 25.10.OFED.25.10.1.7.1.1-1 all
stub nvidia-peer-memory "$dv" amd64
for d in dkms make gcc rustc-web rust-web-src; do stub "$d" 99 all; done
stub_meta() {  # stub_meta VERSION KERNEL [ITS IMAGE'S VERSION]: the kernel metapackage of one version, built apart (same name)
    local d=$work/stubs-meta/$1
    mkdir -p "$d/DEBIAN"
    printf 'Package: linux-image-amd64\nVersion: %s\nArchitecture: amd64\nMaintainer: nv_peer_mem tests <tests@invalid>\nDepends: linux-image-%s (= %s)\nSection: kernel\nPriority: optional\nDescription: test stand-in for linux-image-amd64\n Index entry only (ci/test-fleet.sh).\n' "$1" "$2" "${3:-$1}" >"$d/DEBIAN/control"
    dpkg-deb --root-owner-group --build "$d" "$work/stubs/linux-image-amd64_${1}_amd64.deb" >/dev/null
}
stub_meta "$m1" "$k1"
mkdir -p "$work/dkms" "$work/rpms"
check "build-dkms's deb for the switch tests" "$xtask" build-dkms --format deb --out "$work/dkms"
check "build-dkms's rpm to publish" "$xtask" build-dkms --format rpm --out "$work/rpms"
dkms_deb=$(ls "$work/dkms"/nvidia-peer-memory-dkms_*.deb)

repo=$work/repo
tree_sum() { (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum; }
check "build-repo: a signed apt repository of the $k1 packages, -dkms and the stand-ins" \
    "$xtask" build-repo --repo "$repo" --suite bookworm --sign-key "$key" "$p1" "$meta1" "$dkms_deb" "$work"/stubs/*.deb
check "it has pool/, Packages, Release, InRelease and Release.gpg" ls "$repo/dists/bookworm/main/binary-amd64/Packages" \
    "$repo/dists/bookworm/main/binary-amd64/Packages.gz" "$repo/dists/bookworm/Release" "$repo/dists/bookworm/InRelease" "$repo/dists/bookworm/Release.gpg"
check "InRelease and Release.gpg verify with the repository key" sh -c "
    gpgv --keyring '$work/repo-key.gpg' '$repo/dists/bookworm/InRelease' &&
    gpgv --keyring '$work/repo-key.gpg' '$repo/dists/bookworm/Release.gpg' '$repo/dists/bookworm/Release'"

# A node's apt, private to this test: its own sources, lists, cache and
# dpkg status; nothing of this host's apt is read or changed.
node_apt() {  # node_apt NAME STATUS-ENTRIES-FILE SOURCES-LINE
    local n=$work/node-$1
    mkdir -p "$n/state/lists/partial" "$n/cache/archives/partial" "$n/empty" "$n/log"
    cp "$2" "$n/status"
    echo "$3" >"$n/sources.list"
    cat >"$n/apt.conf" <<CONF
Dir::State "$n/state";
Dir::State::status "$n/status";
Dir::Cache "$n/cache";
Dir::Etc::sourcelist "$n/sources.list";
Dir::Etc::sourceparts "$n/empty";
Dir::Etc::preferencesparts "$n/empty";
Dir::Etc::trustedparts "$n/empty";
Dir::Etc::trusted "$n/empty/none.gpg";
Dir::Log "$n/log";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
Debug::NoLocking "true";
CONF
    echo "$n/apt.conf"
}
status_entry() {  # status_entry NAME VERSION ARCH [DEPENDS]
    printf 'Package: %s\nStatus: install ok installed\nPriority: optional\nSection: kernel\nMaintainer: tests <tests@invalid>\nArchitecture: %s\nVersion: %s\n' "$1" "$3" "$2"
    [ -z "${4:-}" ] || printf 'Depends: %s\n' "$4"
    printf 'Description: installed on the simulated node\n\n'
}
{
    status_entry "linux-image-$k1" "$m1" amd64
    status_entry linux-image-amd64 "$m1" amd64 "linux-image-$k1 (= $m1)"
    status_entry mlnx-ofed-kernel-dkms 25.10.OFED.25.10.1.7.1.1-1 all
    status_entry nvidia-peer-memory "$dv" amd64
    for d in dkms make gcc rustc-web rust-web-src; do status_entry "$d" 99 all; done
} >"$work/status-base"
source_line="deb [signed-by=$work/repo-key.gpg] file://$repo bookworm main"
apt_node() { local conf=$1; shift; APT_CONFIG=$conf apt-get -o Debug::NoLocking=true "$@"; }

conf=$(node_apt fresh "$work/status-base" "$source_line")
check "apt-get update accepts the signed repository (signed-by)" apt_node "$conf" update
check "a node installs the modules metapackage: the $k1 module comes with it, no kernel change" sh -c "
    APT_CONFIG='$conf' apt-get -s install nvidia-peer-memory-modules-amd64 | tee '$work/fresh.sim' &&
    grep -q '^Inst nvidia-peer-memory-modules-$k1 ' '$work/fresh.sim' &&
    grep -q '^Inst nvidia-peer-memory-modules-amd64 ' '$work/fresh.sim' &&
    ! grep -q '^Inst linux-image' '$work/fresh.sim'"

# Unsigned, foreign-key and tampered repositories are refused.
check "build-repo without --sign-key writes an unsigned repository and warns" sh -c "
    '$xtask' build-repo --repo '$work/unsigned' --suite bookworm '$p1' | grep -q 'not signed' && [ ! -e '$work/unsigned/dists/bookworm/InRelease' ]"
conf=$(node_apt unsigned "$work/status-base" "deb [signed-by=$work/repo-key.gpg] file://$work/unsigned bookworm main")
check "apt refuses the unsigned repository" sh -c "
    ! APT_CONFIG='$conf' apt-get update >'$work/unsigned.out' 2>&1; cat '$work/unsigned.out'; grep -q 'is not signed' '$work/unsigned.out'"
conf=$(node_apt foreign "$work/status-base" "deb [signed-by=$work/other-key.gpg] file://$repo bookworm main")
check "apt refuses the repository with another key in signed-by (NO_PUBKEY)" sh -c "
    ! APT_CONFIG='$conf' apt-get update >'$work/foreign.out' 2>&1; cat '$work/foreign.out'; grep -q NO_PUBKEY '$work/foreign.out'"
cp -a "$repo" "$work/tampered"
sed -i 's/^Label: nv_peer_mem$/Label: tampered/' "$work/tampered/dists/bookworm/InRelease"
conf=$(node_apt tampered "$work/status-base" "deb [signed-by=$work/repo-key.gpg] file://$work/tampered bookworm main")
check "apt refuses a tampered InRelease (BADSIG)" sh -c "
    ! APT_CONFIG='$conf' apt-get update >'$work/tampered.out' 2>&1; cat '$work/tampered.out'; grep -q BADSIG '$work/tampered.out'"

# Byte-identical: the same packages into a new repository.
# Release's Date and Valid-Until are the publish time's (docs/fleet.md).
check "the same packages give a byte-identical repository (signatures and publish dates apart)" bash -c "
    '$xtask' build-repo --repo '$work/repo-again' --suite bookworm --sign-key '$key' '$p1' '$meta1' '$dkms_deb' '$work'/stubs/*.deb >/dev/null &&
    diff -r -x InRelease -x Release.gpg -x Release '$repo' '$work/repo-again' &&
    diff <(grep -Ev '^(Date|Valid-Until):' '$repo/dists/bookworm/Release') <(grep -Ev '^(Date|Valid-Until):' '$work/repo-again/dists/bookworm/Release')"

# Bad input leaves the repository exactly as it was.
before=$(tree_sum "$repo")
repo_refused() {  # repo_refused WHAT-THE-MESSAGE-SAYS ARGS...
    local says=$1; shift
    "$xtask" build-repo --repo "$repo" "$@" >"$work/bad.out" 2>&1
    local rc=$?
    cat "$work/bad.out"
    [ "$rc" = 2 ] && grep -q -- "$says" "$work/bad.out" && [ "$(tree_sum "$repo")" = "$before" ] &&
        [ -z "$(ls -A "$(dirname "$repo")" | grep '^\.repo\.staging')" ]
}
echo "not a package" >"$work/junk.deb"
mkdir -p "$work/changed"
dpkg-deb -R "$p1" "$work/changed/tree"
echo "changed" >>"$work/changed/tree/usr/share/doc/nvidia-peer-memory-modules-$k1/symbol-versions"
dpkg-deb --root-owner-group --build "$work/changed/tree" "$work/changed/$(basename "$p1")" >/dev/null
check "build-repo refuses a file that is not a package (exit 2), repository unchanged" repo_refused "not a Debian package" --suite bookworm --sign-key "$key" "$p2" "$work/junk.deb"
check "build-repo refuses republishing a file name with other contents" repo_refused "already published with other contents" --suite bookworm --sign-key "$key" "$work/changed/$(basename "$p1")"
check "build-repo refuses an unknown signing key" repo_refused "no secret key" --suite bookworm --sign-key 0000000000000000DEADBEEF "$p2"
check "build-repo refuses .deb and .rpm together" repo_refused "both .deb and .rpm" --suite bookworm "$p2" "$work"/rpms/*.rpm
check "build-repo refuses an apt repository without --suite" repo_refused "--suite is needed" "$p2"
check "build-repo refuses a --repo whose parent does not exist (exit 2, naming it), nothing created" bash -c "
    '$xtask' build-repo --repo '$work/no-such-dir/repo' --suite bookworm '$p2' >'$work/noparent.out' 2>&1; rc=\$?; cat '$work/noparent.out'
    [ \$rc = 2 ] && grep -q 'its parent directory $work/no-such-dir does not exist; create it first' '$work/noparent.out' && [ ! -e '$work/no-such-dir' ]"

# Issue 58: the publisher, its clock and its paths.
# Back-to-back publishes share a Date rather than dating the Release
# ahead of the clock, which every node's apt then refuses ("is not valid
# yet", Acquire::Max-FutureTime 10 s); each publish still reaches the node.
burst() {
    local i conf
    for i in $(seq 30); do "$xtask" build-repo --repo "$work/burst" --suite bookworm --sign-key "$key" --refresh "$p1" >/dev/null || return 1; done
    local date; date=$(date -d "$(sed -n 's/^Date: //p' "$work/burst/dists/bookworm/Release")" +%s) || return 1
    echo "Release dated $date, clock $(date +%s)"
    [ "$date" -le "$(date +%s)" ] || return 1
    conf=$(node_apt burst "$work/status-base" "deb [signed-by=$work/repo-key.gpg] file://$work/burst bookworm main")
    APT_CONFIG=$conf apt-get update >"$work/burst.out" 2>&1; local rc=$?; cat "$work/burst.out"
    [ $rc = 0 ] && ! grep -q 'not valid yet' "$work/burst.out"
}
check "30 publishes in a row: the Release is never dated after the clock, and a node's apt-get update takes it" burst
validity() { echo $(( $(date -d "$(sed -n 's/^Valid-Until: //p' "$1")" +%s) - $(date -d "$(sed -n 's/^Date: //p' "$1")" +%s) )); }
keeps_validity() {
    "$xtask" build-repo --repo "$work/short" --suite bookworm --sign-key "$key" --valid-for 1 "$p1" >/dev/null &&
        "$xtask" build-repo --repo "$work/short" --suite bookworm --sign-key "$key" --refresh | tee "$work/short.out" &&
        [ "$(validity "$work/short/dists/bookworm/Release")" = 86400 ] && grep -q 'valid for 1 day:' "$work/short.out" &&
        "$xtask" build-repo --repo "$work/short" --suite bookworm --sign-key "$key" --refresh --valid-for 7 >/dev/null &&
        [ "$(validity "$work/short/dists/bookworm/Release")" = $((7 * 86400)) ]
}
check "--refresh keeps the published --valid-for (1 day), and --valid-for changes it" keeps_validity
linked_repo() {
    # A served path that is a symbolic link, given with tab completion's
    # trailing slash: the linked directory is the repository; the link
    # stays a link, the lock is the directory's own.
    mkdir -p "$work/linked/real" && ln -sfn "$work/linked/real" "$work/link" || return 1
    "$xtask" build-repo --repo "$work/link/" --suite bookworm --sign-key "$key" "$p1" >/dev/null || return 1
    "$xtask" build-repo --repo "$work/link" --suite bookworm --sign-key "$key" "$p2" >/dev/null || return 1
    [ -L "$work/link" ] && [ -f "$work/linked/real/dists/bookworm/InRelease" ] &&
        ls "$work/linked/real/pool/bookworm/main"/*/*/"$(basename "$p1")" "$work/linked/real/pool/bookworm/main"/*/*/"$(basename "$p2")" &&
        [ -e "$work/linked/.real.lock" ] && [ ! -e "$work/.link.lock" ]
}
check "--repo link/ (a symbolic link, trailing slash): publishes into the linked directory, the link kept, one lock" linked_repo
interrupted() {
    # SIGTERM while gpg signs the staged Release: build-repo stops its gpg,
    # removes its staged copy and exits 143; the repository is as it was.
    # The gpg on PATH is a slow one that dies with its sleep on SIGTERM.
    local bin=$work/slow-gpg; mkdir -p "$bin"
    printf '#!/bin/sh\ncase "$*" in *--clearsign*) trap '"'"'kill $!; exit 143'"'"' TERM; sleep 60 & wait $!;; esac\nexec /usr/bin/gpg "$@"\n' >"$bin/gpg"
    chmod +x "$bin/gpg"
    local before; before=$(tree_sum "$repo")
    PATH="$bin:$PATH" "$xtask" build-repo --repo "$repo" --suite bookworm --sign-key "$key" --refresh >"$work/term.out" 2>&1 &
    local pid=$! i
    for i in $(seq 300); do pgrep -f "$bin/gpg.*--clearsign" >/dev/null && break; sleep 0.1; done
    ls -d "$(dirname "$repo")"/.repo.staging-* || { kill $pid; return 1; }
    kill -TERM $pid; wait $pid; local rc=$?
    cat "$work/term.out"; echo "exit $rc"
    [ $rc = 143 ] && grep -q 'stopped by signal 15; removed .*\.repo\.staging-' "$work/term.out" &&
        [ -z "$(ls -A "$(dirname "$repo")" | grep '^\.repo\.staging')" ] &&
        [ "$(tree_sum "$repo")" = "$before" ] && ! pgrep -f "$bin/gpg" >/dev/null
}
check "SIGTERM mid-publish: gpg stopped, the staged copy removed, exit 143, the repository as it was" interrupted
mirror_two_passes() {
    # docs/fleet.md's mirror sync: the first pass leaves the Release files
    # out, so a node reading the mirror between passes sees the old
    # Release and the new files; the second makes the mirror the repository.
    local src=$work/mirror-src m=$work/mirror
    rm -rf "$src" "$m" && cp -a "$repo" "$src" && mkdir -p "$m" && rsync -a "$src/" "$m/" || return 1
    "$xtask" build-repo --repo "$src" --suite bookworm --sign-key "$key" "$p2" >/dev/null || return 1
    rsync -a --exclude 'dists/*/InRelease' --exclude 'dists/*/Release*' "$src/" "$m/" || return 1
    cmp -s "$src/dists/bookworm/InRelease" "$m/dists/bookworm/InRelease" && { echo "the first pass copied InRelease"; return 1; }
    local conf; conf=$(node_apt mirror "$work/status-base" "deb [signed-by=$work/repo-key.gpg] file://$m bookworm main")
    APT_CONFIG=$conf apt-get update >"$work/mirror.out" 2>&1 || { cat "$work/mirror.out"; return 1; }
    rsync -a --delete-after "$src/" "$m/" && diff -r "$src" "$m" &&
        APT_CONFIG=$conf apt-get update >"$work/mirror.out" 2>&1 && cat "$work/mirror.out" &&
        APT_CONFIG=$conf apt-cache show "$(dpkg-deb -f "$p2" Package)" >/dev/null
}
check "a mirror synced in two passes (docs/fleet.md): a node updates from it between the passes and after" mirror_two_passes

# The kernel update within the suite's series: Debian publishes
# linux-image-amd64 for its next kernel; until this repository has its
# module, the node keeps its kernel. The archive carries one kernel per
# series, so $k2 stands in for the suite's next one (modelled): a build
# host sees it as such when its apt says linux-image-amd64 $m2s (no ~bpo)
# installs it, here a private apt view (APT_CONFIG) holding that stub
# alone; build-modules then writes the suite's metapackage for it.
m2s=${m2%%~bpo*}
stub_meta "$m2s" "$k2" "$m2"
check "the kernel repository gets linux-image-amd64 $m2s (installing $k2)" "$xtask" build-repo --repo "$repo" --suite bookworm --sign-key "$key" "$work/stubs/linux-image-amd64_${m2s}_amd64.deb"
mkdir -p "$work/v2s"
build_host_view() {
    "$xtask" build-repo --repo "$work/next-stable" --suite bookworm --sign-key "$key" "$work/stubs/linux-image-amd64_${m2s}_amd64.deb" >/dev/null &&
        local hostconf && hostconf=$(node_apt build-host "$work/status-base" "deb [signed-by=$work/repo-key.gpg] file://$work/next-stable bookworm main") &&
        APT_CONFIG=$hostconf apt-get update >/dev/null &&
        APT_CONFIG=$hostconf "$xtask" build-modules --kernel "$k2" --out "$work/v2s" "${common[@]}" >/dev/null &&
        cmp "$p2" "$work/v2s/$(basename "$p2")"
}
check "build-modules for $k2 on a build host whose apt has it as the suite's next kernel: the suite's metapackage at $m2s" build_host_view
# Ubuntu's hardware enablement tracks (issue 58): a kernel that the
# flavour's own metapackage does not install but linux-image-<flavour>-hwe-
# <release> does (Ubuntu: linux-image-generic-hwe-24.04) gets a metapackage
# of that track, following it. A private apt view whose linux-image-amd64
# installs $k1 only and whose linux-image-amd64-hwe-12 installs $k2.
hwe_track() {
    local d=$work/stubs-hwe/linux-image-amd64-hwe-12 conf
    mkdir -p "$d/DEBIAN" "$work/v2h"
    printf 'Package: linux-image-amd64-hwe-12\nVersion: %s~hwe1\nArchitecture: amd64\nMaintainer: nv_peer_mem tests <tests@invalid>\nDepends: linux-image-%s (= %s)\nSection: kernel\nPriority: optional\nDescription: test stand-in for an HWE track metapackage\n Index entry only (ci/test-fleet.sh).\n' "$m2s" "$k2" "$m2" >"$d/DEBIAN/control"
    dpkg-deb --root-owner-group --build "$d" "$work/stubs/linux-image-amd64-hwe-12_${m2s}~hwe1_amd64.deb" >/dev/null &&
        "$xtask" build-repo --repo "$work/hwe-view" --suite bookworm --sign-key "$key" \
            "$work/stubs/linux-image-amd64_${m1}_amd64.deb" "$work/stubs/linux-image-amd64-hwe-12_${m2s}~hwe1_amd64.deb" >/dev/null &&
        conf=$(node_apt hwe-build-host "$work/status-base" "deb [signed-by=$work/repo-key.gpg] file://$work/hwe-view bookworm main") &&
        APT_CONFIG=$conf apt-get update >/dev/null &&
        APT_CONFIG=$conf "$xtask" build-modules --kernel "$k2" --out "$work/v2h" "${common[@]}" >"$work/hwe.out" 2>&1 || { cat "$work/hwe.out"; return 1; }
    local meta=$work/v2h/nvidia-peer-memory-modules-amd64-hwe-12_${m2s}~hwe1+$version.1_amd64.deb
    [ -f "$meta" ] || { ls "$work/v2h"; return 1; }
    dpkg-deb -f "$meta" Depends | tee /dev/stderr | grep -qx "nvidia-peer-memory-modules-$k2 (= $dv), linux-image-amd64-hwe-12 (= ${m2s}~hwe1)" &&
        dpkg-deb -f "$meta" Description | grep -q 'follows the kernels of the amd64-hwe-12 track' &&
        lintian_quiet "$meta"
}
check "build-modules for a kernel of an HWE track (linux-image-amd64-hwe-12 installs $k2, linux-image-amd64 does not): the metapackage nvidia-peer-memory-modules-amd64-hwe-12 follows that track" hwe_track
meta2s=$work/v2s/nvidia-peer-memory-modules-amd64_$m2s+$version.1_amd64.deb
# A package as dpkg records it once installed: its own control fields.
installed() {
    dpkg-deb -f "$1" | sed '1a Status: install ok installed'
    echo
}
{
    cat "$work/status-base"
    installed "$p1"
    installed "$meta1"
} >"$work/status-modules"
conf=$(node_apt update "$work/status-modules" "$source_line")
check "apt upgrade keeps the kernel back while the repository has no module for $k2" sh -c "
    APT_CONFIG='$conf' apt-get update >/dev/null && APT_CONFIG='$conf' apt-get -s --with-new-pkgs upgrade | tee '$work/held.sim' &&
    grep -q 'kept back' '$work/held.sim' && ! grep -q '^Inst linux-image' '$work/held.sim'"
check "build-repo adds the $k2 packages; the $k1 ones stay" sh -c "
    '$xtask' build-repo --repo '$repo' --suite bookworm --sign-key '$key' '$p2' '$meta2s' &&
    grep -q '^Package: nvidia-peer-memory-modules-$k1\$' '$repo/dists/bookworm/main/binary-amd64/Packages' &&
    grep -q '^Package: nvidia-peer-memory-modules-$k2\$' '$repo/dists/bookworm/main/binary-amd64/Packages'"
check "then apt upgrade brings the new kernel and its module together, keeping the old" sh -c "
    APT_CONFIG='$conf' apt-get update >/dev/null && APT_CONFIG='$conf' apt-get -s --with-new-pkgs upgrade | tee '$work/upgrade.sim' &&
    grep -q '^Inst linux-image-amd64 .*($m2s ' '$work/upgrade.sim' &&
    grep -q '^Inst linux-image-$k2 ' '$work/upgrade.sim' &&
    grep -q '^Inst nvidia-peer-memory-modules-$k2 ' '$work/upgrade.sim' &&
    grep -q '^Inst nvidia-peer-memory-modules-amd64 .*($m2s+$version.1 ' '$work/upgrade.sim' &&
    ! grep -q '^Remv' '$work/upgrade.sim'"
check "switching to -dkms removes the module packages" sh -c "
    APT_CONFIG='$conf' apt-get -s install nvidia-peer-memory-dkms | tee '$work/to-dkms.sim' &&
    grep -q '^Remv nvidia-peer-memory-modules-$k1 ' '$work/to-dkms.sim' && grep -q '^Inst nvidia-peer-memory-dkms ' '$work/to-dkms.sim'"
{
    cat "$work/status-base"
    installed "$dkms_deb"
} >"$work/status-dkms"
conf=$(node_apt dkms "$work/status-dkms" "$source_line")
check "switching from -dkms to the modules removes -dkms" sh -c "
    APT_CONFIG='$conf' apt-get update >/dev/null && APT_CONFIG='$conf' apt-get -s install nvidia-peer-memory-modules-amd64 | tee '$work/from-dkms.sim' &&
    grep -q '^Remv nvidia-peer-memory-dkms ' '$work/from-dkms.sim' && grep -q '^Inst nvidia-peer-memory-modules-amd64 ' '$work/from-dkms.sim'"
# The service package's next release (a --release bump; the next minor
# version alike) published beside the modules: a node takes it and keeps
# the module package of the kernel it runs, which a relation on the
# service's exact version would remove (docs/fleet.md, "The service
# relation"). In a copy of the repository: the checks below use it as is.
next_service=$version-2~deb12
mkdir -p "$work/stubs-service/nvidia-peer-memory/DEBIAN"
printf 'Package: nvidia-peer-memory\nVersion: %s\nArchitecture: amd64\nMaintainer: nv_peer_mem tests <tests@invalid>\nSection: kernel\nPriority: optional\nDescription: test stand-in for nvidia-peer-memory\n Index entry only (ci/test-fleet.sh).\n' "$next_service" \
    >"$work/stubs-service/nvidia-peer-memory/DEBIAN/control"
dpkg-deb --root-owner-group --build "$work/stubs-service/nvidia-peer-memory" "$work/stubs-service/nvidia-peer-memory_${next_service}_amd64.deb" >/dev/null
cp -a "$repo" "$work/repo-service"
check "build-repo: the service package's next release ($next_service) into a copy of the repository" \
    "$xtask" build-repo --repo "$work/repo-service" --suite bookworm --sign-key "$key" "$work/stubs-service/nvidia-peer-memory_${next_service}_amd64.deb"
conf=$(node_apt service "$work/status-modules" "deb [signed-by=$work/repo-key.gpg] file://$work/repo-service bookworm main")
check "apt full-upgrade takes the service package's next release and keeps the $k1 module package" sh -c "
    APT_CONFIG='$conf' apt-get update >/dev/null && APT_CONFIG='$conf' apt-get -s full-upgrade | tee '$work/service.sim' &&
    grep -q '^Inst nvidia-peer-memory \\[$dv\\] ($next_service ' '$work/service.sim' &&
    ! grep -q '^Remv nvidia-peer-memory-modules-$k1 ' '$work/service.sim'"

# --- kernel series: the suite's kernels and its backports' (issue 40 item 5)
# The fleet guide's example (docs/guide/fleet.md) publishes both series' module packages into one
# repository. Debian's kernels as two stub repositories, one per series
# (linux-image-amd64 and the kernel image it installs): a node that follows
# the suite's kernels sees the first, one that follows bookworm-backports'
# both. Only the installed packages differ between the nodes below.
series_repos() {
    "$xtask" build-repo --repo "$work/series" --suite bookworm --sign-key "$key" "$p1" "$meta1" "$p2" "$meta2b" \
        "$work/stubs/nvidia-peer-memory_${dv}_amd64.deb" "$work/stubs/mlnx-ofed-kernel-dkms_25.10.OFED.25.10.1.7.1.1-1_all.deb" >/dev/null &&
        "$xtask" build-repo --repo "$work/kernels-stable" --suite bookworm --sign-key "$key" \
            "$work/stubs/linux-image-amd64_${m1}_amd64.deb" "$work/stubs/linux-image-${k1}_${m1}_amd64.deb" >/dev/null &&
        "$xtask" build-repo --repo "$work/kernels-backports" --suite bookworm-backports --sign-key "$key" \
            "$work/stubs/linux-image-amd64_${m2}_amd64.deb" "$work/stubs/linux-image-${k2}_${m2}_amd64.deb" >/dev/null &&
        as_debian_backports "$work/kernels-backports/dists/bookworm-backports"
}
# Debian's bookworm-backports Release says `NotAutomatic: yes` and
# `ButAutomaticUpgrades: yes` (deb.debian.org's InRelease, read on this
# host's apt lists): apt pins it to 100, and nothing comes from it unless
# asked (-t bookworm-backports, or pkg/bookworm-backports). The stand-in
# says so too, signed again as Debian's is (issue 58: without it, the guide's
# backports install resolved here and failed on a real node).
as_debian_backports() {
    sed -i '/^Date: /a NotAutomatic: yes\nButAutomaticUpgrades: yes' "$1/Release" &&
        grep -q '^NotAutomatic: yes$' "$1/Release" &&
        gpg --batch --yes --quiet --local-user "$key" --clearsign -o "$1/InRelease" "$1/Release" &&
        gpg --batch --yes --quiet --local-user "$key" --detach-sign -o "$1/Release.gpg" "$1/Release"
}
stub_meta "$m2" "$k2"
check "a repository with both series' module packages; Debian's kernels of each series apart" series_repos
series_sources() {  # series_sources stable|backports: the node's sources.list lines
    echo "deb [signed-by=$work/repo-key.gpg] file://$work/series bookworm main"
    echo "deb [signed-by=$work/repo-key.gpg] file://$work/kernels-stable bookworm main"
    [ "$1" = stable ] || echo "deb [signed-by=$work/repo-key.gpg] file://$work/kernels-backports bookworm-backports main"
}
# series_node NAME STATUS stable|backports: a node's apt config, updated.
series_node() {
    local conf
    conf=$(node_apt "$1" "$2" "$(series_sources "$3")") && APT_CONFIG=$conf apt-get update >/dev/null && echo "$conf"
}
# series_sim NAME STATUS stable|backports APT-GET-ARGS...: apt-get -s on
# that node; its plan is in $work/NAME.sim.
series_sim() {
    local name=$1 status=$2 series=$3 conf
    shift 3
    conf=$(series_node "$name" "$status" "$series") || return 1
    APT_CONFIG=$conf apt-get -s "$@" | tee "$work/$name.sim"
}
readme_stable() {
    local sim=$work/series-stable.sim
    series_sim series-stable "$work/status-base" stable install nvidia-peer-memory nvidia-peer-memory-modules-amd64 &&
        grep -q "^Inst nvidia-peer-memory-modules-$k1 " "$sim" &&
        grep -q '^Inst nvidia-peer-memory-modules-amd64 ' "$sim" && ! grep -q '^Inst linux-image' "$sim"
}
check "docs/guide/fleet.md, a node that follows the suite's kernels: apt-get install nvidia-peer-memory nvidia-peer-memory-modules-amd64 takes $k1's module, no kernel change" readme_stable
readme_backports() {
    local sim=$work/series-backports.sim
    series_sim series-backports "$work/status-base" backports install -t bookworm-backports nvidia-peer-memory nvidia-peer-memory-modules-amd64-backports &&
        grep -q "^Inst linux-image-amd64 .*($m2 " "$sim" && grep -q "^Inst linux-image-$k2 " "$sim" &&
        grep -q "^Inst nvidia-peer-memory-modules-$k2 " "$sim" &&
        grep -q '^Inst nvidia-peer-memory-modules-amd64-backports ' "$sim" && ! grep -q '^Remv' "$sim"
}
check "docs/guide/fleet.md, a node that follows bookworm-backports' kernels: apt-get install -t bookworm-backports nvidia-peer-memory nvidia-peer-memory-modules-amd64-backports takes linux-image-amd64 $m2, $k2 and its module" readme_backports
backports_pinned() {
    # Without -t, Debian's pin keeps the backports kernel out: apt says so
    # (issue 58's "held broken packages"), as on a real node.
    local conf; conf=$(series_node series-pinned "$work/status-base" backports) || return 1
    ! APT_CONFIG=$conf apt-get -s install nvidia-peer-memory nvidia-peer-memory-modules-amd64-backports >"$work/pinned.out" 2>&1
    local rc=$?; cat "$work/pinned.out"; [ $rc = 0 ] && grep -q 'held broken packages\|but it is not going to be installed' "$work/pinned.out"
}
check "the backports stand-in is pinned as Debian's (NotAutomatic): the install without -t bookworm-backports fails, naming the kernel" backports_pinned
stays_in_series() {
    local sim=$work/series-held.sim
    series_sim series-held "$work/status-modules" backports --with-new-pkgs upgrade &&
        ! grep -q '^Inst linux-image' "$sim" && ! grep -q '^Inst nvidia-peer-memory-modules' "$sim"
}
check "a node on the suite's series, backports' kernels in its sources: apt upgrade takes no backports kernel (Debian's pin), though $k2's module is published" stays_in_series
moves_series() {
    local sim=$work/series-move.sim
    series_sim series-move "$work/status-modules" backports install -t bookworm-backports nvidia-peer-memory-modules-amd64-backports &&
        grep -q "^Inst linux-image-$k2 " "$sim" && grep -q "^Inst nvidia-peer-memory-modules-$k2 " "$sim" &&
        [ "$(grep '^Remv' "$sim")" = "Remv nvidia-peer-memory-modules-amd64 [$m1+$version.1]" ]
}
check "moving it to the backports series (apt-get install -t bookworm-backports nvidia-peer-memory-modules-amd64-backports): $k2 and its module come, only the suite's metapackage goes ($k1's module stays)" moves_series
# What one metapackage for both series did (before this layout): the
# backports kernel's metapackage under the suite's name makes the guide's
# install fail on a node that follows the suite's kernels.
one_name_fails() {
    local d=$work/one-name conf
    rm -rf "$d" && mkdir -p "$d" && dpkg-deb -R "$meta2b" "$d/tree" &&
        sed -i 's/^Package: nvidia-peer-memory-modules-amd64-backports$/Package: nvidia-peer-memory-modules-amd64/' "$d/tree/DEBIAN/control" &&
        dpkg-deb --root-owner-group --build "$d/tree" "$d/nvidia-peer-memory-modules-amd64_$m2+$version.1_amd64.deb" >/dev/null &&
        cp -a "$work/series" "$d/repo" &&
        "$xtask" build-repo --repo "$d/repo" --suite bookworm --sign-key "$key" "$d/nvidia-peer-memory-modules-amd64_$m2+$version.1_amd64.deb" >/dev/null || return 1
    conf=$(node_apt one-name "$work/status-base" "$(series_sources stable | sed "s|file://$work/series |file://$d/repo |")") &&
        APT_CONFIG=$conf apt-get update >/dev/null || return 1
    ! APT_CONFIG=$conf apt-get -s install nvidia-peer-memory nvidia-peer-memory-modules-amd64 >"$d/out" 2>&1
    local rc=$?
    cat "$d/out"
    [ $rc = 0 ] && grep -q "Depends: linux-image-amd64 (= $m2)" "$d/out"
}
check "with one metapackage name for both series, that install fails (Depends: linux-image-amd64 (= $m2)): what the series names prevent" one_name_fails

# --- Ubuntu 26.04's own DOCA-OFED packages (issue 43) ----------------------
# Stand-ins with the names and versions packages.ubuntu.com shows for
# resolute (docs/research-ubuntu2604-sles16.md 1a): the DKMS packages
# doca-ofed-26.01-dkms 26.01.1.0.0.0.609.1-0ubuntu2 and doca-ofed-3.4-dkms
# 3.4.0+0.8.5.0-0ubuntu1~26.04.1; the generic flavour's module package
# linux-modules-doca-ofed-26.01-generic 7.0.0-29.29, depending on kmod and
# linux-main-modules-doca-ofed-26.01-7.0.0-29-generic (its version, the
# kernel ABI's, was not read: 7.0.0-29.29 assumed); rustc and rust-src
# 1.93.1ubuntu1 (rust-defaults). Each in a repository of its own, so that
# apt can only take the one a check offers it.
u_dv=$version-1~ubuntu26.04.1
mkdir -p "$work/ubuntu2604/dkms" "$work/ubuntu2604/stubs" "$work/ubuntu2604/modules"
ustub() {  # ustub DIR NAME VERSION ARCH [DEPENDS]: as stub, into $work/ubuntu2604/DIR
    local d=$work/ubuntu2604/tree-$2-$3
    mkdir -p "$d/DEBIAN" "$work/ubuntu2604/$1"
    {
        printf 'Package: %s\nVersion: %s\nArchitecture: %s\nMaintainer: nv_peer_mem tests <tests@invalid>\n' "$2" "$3" "$4"
        [ -z "${5:-}" ] || printf 'Depends: %s\n' "$5"
        printf 'Section: kernel\nPriority: optional\nDescription: test stand-in for %s\n Index entry only (ci/test-fleet.sh).\n' "$2"
    } >"$d/DEBIAN/control"
    dpkg-deb --root-owner-group --build "$d" "$work/ubuntu2604/$1/${2}_${3#*:}_$4.deb" >/dev/null
}
for d in dkms make gcc kmod; do ustub base "$d" 99 all; done
ustub base rustc 1.93.1ubuntu1 amd64
ustub base rust-src 1.93.1ubuntu1 all
ustub dkms26 doca-ofed-26.01-dkms 26.01.1.0.0.0.609.1-0ubuntu2 all dkms
ustub dkms34 doca-ofed-3.4-dkms 3.4.0+0.8.5.0-0ubuntu1~26.04.1 all dkms
ustub modules26 linux-main-modules-doca-ofed-26.01-7.0.0-29-generic 7.0.0-29.29 amd64
ustub modules26 linux-modules-doca-ofed-26.01-generic 7.0.0-29.29 amd64 "kmod, linux-main-modules-doca-ofed-26.01-7.0.0-29-generic"
ustub mlnx mlnx-ofed-kernel-dkms 25.10.OFED.25.10.1.7.1.1-1 all
check "build-dkms --distro ubuntu2604 --format deb" "$xtask" build-dkms --distro ubuntu2604 --format deb --out "$work/ubuntu2604/dkms"
u_dkms=$work/ubuntu2604/dkms/nvidia-peer-memory-dkms_${u_dv}_all.deb
# u_node NAME DIRS...: a node whose one repository holds -dkms, the base
# stand-ins and those of DIRS; prints its apt config, updated.
u_node() {
    local name=$1 conf; shift
    local debs=("$u_dkms" "$work"/ubuntu2604/base/*.deb) dir
    for dir in "$@"; do debs+=("$work"/ubuntu2604/"$dir"/*.deb); done
    rm -rf "$work/ubuntu2604/repo-$name"
    "$xtask" build-repo --repo "$work/ubuntu2604/repo-$name" --suite resolute --sign-key "$key" "${debs[@]}" >/dev/null || return 1
    : >"$work/ubuntu2604/empty-status"
    conf=$(node_apt "u-$name" "$work/ubuntu2604/empty-status" "deb [signed-by=$work/repo-key.gpg] file://$work/ubuntu2604/repo-$name resolute main") &&
        APT_CONFIG=$conf apt-get update >/dev/null && echo "$conf"
}
u_installs() {  # u_installs NAME PACKAGE WANTED-INST DIRS...: apt-get -s install PACKAGE resolves, bringing WANTED-INST
    local name=$1 package=$2 wanted=$3 conf; shift 3
    conf=$(u_node "$name" "$@") || return 1
    APT_CONFIG=$conf apt-get -s install "$package" | tee "$work/ubuntu2604/$name.sim" &&
        grep -q "^Inst $package " "$work/ubuntu2604/$name.sim" && grep -q "^Inst $wanted " "$work/ubuntu2604/$name.sim"
}
u_refused() {  # u_refused NAME PACKAGE DIRS...: apt cannot install PACKAGE
    local name=$1 package=$2 conf rc; shift 2
    conf=$(u_node "$name" "$@") || return 1
    APT_CONFIG=$conf apt-get -s install "$package" >"$work/ubuntu2604/$name.out" 2>&1
    rc=$?
    cat "$work/ubuntu2604/$name.out"
    [ $rc != 0 ] && grep -q "Depends: mlnx-ofed-kernel-dkms\|Depends: linux-main-modules-doca-ofed" "$work/ubuntu2604/$name.out"
}
check "ubuntu2604 -dkms: Depends names MLNX_OFED's and Ubuntu's DOCA-OFED packages" sh -c \
    "dpkg-deb -f '$u_dkms' Depends | grep -qF 'rustc (>= 1.85), rust-src (>= 1.85), mlnx-ofed-kernel-dkms | mlnx-ofed-kernel-modules | doca-ofed-26.01-dkms | doca-ofed-3.4-dkms | linux-modules-doca-ofed-26.01-generic | linux-modules-doca-ofed-3.4-generic'"
check "lintian: no errors or warnings on ubuntu2604's -dkms deb" lintian_quiet --suppress-tags initial-upload-closes-no-bugs "$u_dkms"
check "ubuntu2604 -dkms: apt resolves it with Ubuntu's doca-ofed-26.01-dkms" u_installs dkms26 nvidia-peer-memory-dkms doca-ofed-26.01-dkms dkms26
check "ubuntu2604 -dkms: apt resolves it with Ubuntu's doca-ofed-3.4-dkms" u_installs dkms34 nvidia-peer-memory-dkms doca-ofed-3.4-dkms dkms34
check "ubuntu2604 -dkms: apt resolves it with Ubuntu's linux-modules-doca-ofed-26.01-generic (and its ABI package)" u_installs modules26 nvidia-peer-memory-dkms linux-main-modules-doca-ofed-26.01-7.0.0-29-generic modules26
check "ubuntu2604 -dkms: apt resolves it with MLNX_OFED's own mlnx-ofed-kernel-dkms" u_installs mlnx nvidia-peer-memory-dkms mlnx-ofed-kernel-dkms mlnx
check "ubuntu2604 -dkms: apt refuses it without any OFED package" u_refused none nvidia-peer-memory-dkms

# The prebuilt module package for ubuntu2604 depends on Ubuntu's per-ABI
# DOCA-OFED package of its kernel, as an admin pins it (docs/guide/fleet.md):
# --ofed-package linux-main-modules-doca-ofed-26.01-{release}=VERSION.
# Ubuntu's 7.0.0-NN-generic headers are not reachable from here, so the
# module is built for this host's $k1 (build-modules checks the vermagic),
# the name is Ubuntu's pattern for that release and the version its
# kernel's ($m1), as Ubuntu versions these packages with the ABI's.
u_ofed=linux-main-modules-doca-ofed-26.01-$k1
u_mod=$work/ubuntu2604/modules/nvidia-peer-memory-modules-${k1}_${u_dv}_amd64.deb
check "build-modules --distro ubuntu2604 --kernel $k1 --ofed-package linux-main-modules-doca-ofed-26.01-{release}=$m1" \
    "$xtask" build-modules --distro ubuntu2604 --kernel "$k1" --no-metapackage --out "$work/ubuntu2604/modules" \
    --ofed-root "$work/ofa" --nvidia-src "$nvsrc" --ofed-package "linux-main-modules-doca-ofed-26.01-{release}=$m1"
check "it depends on Ubuntu's kernel image names, that kernel's DOCA-OFED module package (=) and the service package" sh -c "
    dpkg-deb -f '$u_mod' Depends | grep -qxF 'linux-image-$k1 | linux-image-unsigned-$k1, $u_ofed (= $m1), nvidia-peer-memory (>= $version~), nvidia-peer-memory (<< $((${version%%.*} + 1))~)'"
# package-has-long-file-name (lintian: over 80 characters, which some
# tools mishandle): the per-kernel name (docs/fleet.md, "Naming and
# dependencies") and Ubuntu 26.04's version suffix (~ubuntu26.04.1) make
# 86 here, more on a 7.0.0-NN-generic kernel. Nothing else is accepted.
check "lintian: no errors or warnings on ubuntu2604's module package (long file name apart)" lintian_quiet --suppress-tags package-has-long-file-name "$u_mod"
for dir in abi-k1 abi-k2 abi-other; do
    ustub "$dir" "linux-image-$k1" "$m1" amd64
    ustub "$dir" nvidia-peer-memory "$u_dv" amd64
done
ustub abi-k1 "$u_ofed" "$m1" amd64
ustub abi-k2 "linux-main-modules-doca-ofed-26.01-$k2" "$m1" amd64
ustub abi-other "$u_ofed" 7.0.0-29.29 amd64
mkdir -p "$work/ubuntu2604/prebuilt" && cp "$u_mod" "$work/ubuntu2604/prebuilt/"
check "ubuntu2604 module package: apt resolves it with $u_ofed $m1" u_installs abi-k1 "nvidia-peer-memory-modules-$k1" "$u_ofed" prebuilt abi-k1
check "ubuntu2604 module package: apt refuses it with another kernel's DOCA-OFED package only" u_refused abi-k2 "nvidia-peer-memory-modules-$k1" prebuilt abi-k2
check "ubuntu2604 module package: apt refuses it with $u_ofed of another version" u_refused abi-other "nvidia-peer-memory-modules-$k1" prebuilt abi-other

# --- the dnf/zypper repository ------------------------------------------
check "build-repo: a signed dnf repository" sh -c "'$xtask' build-repo --repo '$work/rpmrepo' --sign-key '$key' '$work'/rpms/*.rpm"
check "repodata/repomd.xml.asc verifies with the repository key" gpgv --keyring "$work/repo-key.gpg" "$work/rpmrepo/repodata/repomd.xml.asc" "$work/rpmrepo/repodata/repomd.xml"
dnf_node() {  # dnf_node REPO-DIR: dnf makecache against that repository alone, gpg checks on
    rm -rf "$work/dnfroot"
    dnf -y --installroot="$work/dnfroot" --releasever=9 --setopt=reposdir=/nonexistent \
        --repofrompath="nvpm,file://$1" --repo=nvpm --setopt=nvpm.gpgcheck=1 --setopt=nvpm.repo_gpgcheck=1 \
        --setopt=nvpm.skip_if_unavailable=False --setopt="nvpm.gpgkey=file://$work/repo-key.asc" "${@:2}"
}
dnf_lists() { dnf_node "$work/rpmrepo" makecache && dnf_node "$work/rpmrepo" repoquery --available | grep '^nvidia_peer_memory-dkms-'; }
check "dnf (repo_gpgcheck=1) reads the repository and lists the package" dnf_lists
cp -a "$work/rpmrepo" "$work/rpmrepo-tampered"
sed -i 's/<revision>/<revision>1/' "$work/rpmrepo-tampered/repodata/repomd.xml"
dnf_refuses() { ! dnf_node "$work/rpmrepo-tampered" makecache >"$work/dnf-tampered.out" 2>&1; cat "$work/dnf-tampered.out"; grep -q 'Bad GPG signature' "$work/dnf-tampered.out"; }
check "dnf refuses a tampered repomd.xml" dnf_refuses
check "the same rpms give a byte-identical dnf repository (signature apart)" sh -c "
    '$xtask' build-repo --repo '$work/rpmrepo-again' --sign-key '$key' '$work'/rpms/*.rpm >/dev/null &&
    diff -r -x repomd.xml.asc '$work/rpmrepo' '$work/rpmrepo-again'"

# --- the RHEL family: kmod packages for a list of kernels -----------------
# rpmbuild with the real kernel module macros (the fixtures'
# kernel-srpm-macros) in ci/rpm-family-env.sh's namespace, which lays out
# two RHEL-style kernels from this host's headers, as ci/test-rpm.sh does.
if [ -f "$fixtures/kernel-srpm-macros/macros.kmp" ]; then
    read -r r1 r2 _ <<<"$("$here/rpm-family-env.sh" releases "$k1")"
    rpm_opts=(--rpmbuild-option=--nodeps "--rpmbuild-option=--load=$fixtures/kernel-srpm-macros/macros.kmp"
        "--rpmbuild-option=--define=__brp_kmod_set_exec_bit %{nil}" "--rpmbuild-option=--define=dist .el9"
        "--rpmbuild-option=--define=ofa_kernel none")
    in_rhel() { "$here/rpm-family-env.sh" kmod "$work/rhel-env" "$k1" -- "$@"; }
    mkdir -p "$work/kmods" "$work/kmods-bad"
    check "build-modules --distro rhel9 for $r1 and $r2 (rpmbuild --rebuild per kernel)" \
        in_rhel "$xtask" build-modules --distro rhel9 --kernel "$r1" --kernel "$r2" --out "$work/kmods" "${rpm_opts[@]}"
    kmods_apart() {
        local r k tag f
        for k in "$r1" "$r2"; do
            tag=k$(echo "${k%.x86_64}" | tr - _)
            f=$work/kmods/kmod-nvidia_peer_memory-$version-1.el9.$tag.x86_64.rpm
            [ -f "$f" ] || { ls "$work/kmods"; return 1; }
            rpm2cpio "$f" | cpio -t --quiet | grep -qx "./lib/modules/$k/extra/nvidia_peer_memory/nv_peer_mem.ko.xz" || return 1
        done
        ls "$work/kmods/nvidia_peer_memory-common-$version-1.el9.x86_64.rpm" "$work/kmods/nvidia_peer_memory-dkms-$version-1.el9.noarch.rpm" &&
            [ "$(ls "$work/kmods" | wc -l)" = 4 ]
    }
    check "one kmod per kernel, the kernel in its release, each with that kernel's module; -common and -dkms once" kmods_apart
    rpmlint_clean() { rpmlint -c "$root/rpm/rpmlint.toml" "$work"/kmods/kmod-*.rpm | tee /dev/stderr | grep -q ' 0 errors, 0 warnings,'; }
    check "rpmlint: the kmod packages, 0 errors, 0 warnings" rpmlint_clean
    # Published as a site does: the first kernel's kmod (with -common and
    # -dkms), then the next kernel's into the same repository, which keeps
    # the first (nodes still on the older kernel install from it).
    k1_tag=k$(echo "${r1%.x86_64}" | tr - _)
    check "build-repo: a signed dnf repository of the first kernel's kmod, -common and -dkms" sh -c "
        '$xtask' build-repo --repo '$work/rhelrepo' --sign-key '$key' '$work'/kmods/kmod-*.$k1_tag.x86_64.rpm '$work'/kmods/nvidia_peer_memory-common-*.rpm '$work'/kmods/nvidia_peer_memory-dkms-*.rpm"
    check "build-repo adds the second kernel's kmod to it; the first one stays" sh -c "
        '$xtask' build-repo --repo '$work/rhelrepo' --sign-key '$key' \$(ls '$work'/kmods/kmod-*.rpm | grep -v '\.$k1_tag\.') &&
        ls '$work'/rhelrepo/packages/kmod-*.$k1_tag.x86_64.rpm"
    kmods_listed() { dnf_node "$work/rhelrepo" repoquery --available --showduplicates kmod-nvidia_peer_memory | tee /dev/stderr | grep -c '^kmod-nvidia_peer_memory-0:' | grep -qx 2; }
    check "dnf (repo_gpgcheck=1) lists both kernels' kmod packages" kmods_listed
    rpm_refused() {  # rpm_refused WHAT-THE-MESSAGE-SAYS ARGS...
        local says=$1; shift
        "${rpm_env:-in_rhel}" "$xtask" build-modules --out "$work/kmods-bad" "$@" >"$work/bad.out" 2>&1
        local rc=$?
        cat "$work/bad.out"
        [ "$rc" = 2 ] && grep -q -- "$says" "$work/bad.out" && [ -z "$(ls -A "$work/kmods-bad")" ]
    }
    check "rhel9, a kernel without kernel-devel: exit 2 naming kernel-devel-<release>" rpm_refused "dnf install kernel-devel-5.14.0-1.el9.x86_64" \
        --distro rhel9 --kernel "$r1" --kernel 5.14.0-1.el9.x86_64 "${rpm_opts[@]}"
    # SLES: the KMP macros build for the one kernel /usr/src/linux-obj names
    # (the fixture's macros.kernel-source with SLES 15's subpackage -n, as
    # ci/test-rpm.sh makes it).
    read -r _ _ rs <<<"$("$here/rpm-family-env.sh" releases "$k1")"
    sed 's/-n %{-n\*}%{!-n:%name}-kmp -v/-n %{-n*}%{!-n:%name} -v/' "$fixtures/suse-kmp/macros.kernel-source" >"$work/macros.sles15"
    in_sles() { "$here/rpm-family-env.sh" kmp "$work/sles-env" "$k1" -- "$@"; }
    sles_opts=(--rpmbuild-option=--nodeps "--rpmbuild-option=--load=$work/macros.sles15"
        "--rpmbuild-option=--define=dist %{nil}" "--rpmbuild-option=--define=ofa_kernel none")
    mkdir -p "$work/kmps"
    kmp_built() {
        in_sles "$xtask" build-modules --distro sles15 --kernel "$rs" --out "$work/kmps" "${sles_opts[@]}" &&
            ls "$work/kmps/nvidia_peer_memory-kmp-default-${version}_k$(echo "${rs%-default}" | tr - _)-1.x86_64.rpm" &&
            [ "$(ls "$work/kmps" | wc -l)" = 3 ]
    }
    check "build-modules --distro sles15 --kernel $rs: the KMP, -common and -dkms" kmp_built
    sles_refused() { local says=$1 rpm_env=in_sles; shift; rpm_refused "$says" --distro sles15 "${sles_opts[@]}" "$@"; }
    check "sles15 with two kernels: exit 2, one service pack's kernel per build host" sles_refused "pass that kernel alone" --kernel "$rs" --kernel 6.4.0-1-default
    check "sles15 with another kernel than linux-obj's: exit 2 naming kernel-default-devel" sles_refused "zypper install kernel-default-devel kernel-syms" --kernel 6.4.0-1-default
    check "fedora: exit 2 naming build-dkms" rpm_refused "build-dkms --distro fedora" --distro fedora --kernel "$r1"
else
    skip "the RHEL family's kmods per kernel: no kernel-srpm-macros in $fixtures"
fi


# --- before the reboot: the next-boot verdict over trees of these modules ---
echo "== the next-boot verdict over fake roots of the real built modules"
. "$here/next-boot-trees.sh"

finish
