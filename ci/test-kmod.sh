#!/usr/bin/env bash
# Builds nv_peer_mem.ko the way DKMS and rpmbuild do, on this Debian 12 host,
# for the bookworm and bookworm-backports kernels, with and without the
# NVIDIA driver's header, and checks the results and the error paths.
# Prints one line per check and `N passed, M failed`; exits non-zero on any
# failure. Needs ci/setup-host.sh's packages; runs offline (unshare -n) to
# prove the build needs no network.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
. ci/kernels.sh
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
nv_src=$(bash ci/fetch-nvidia-src.sh)
# NVIDIA's current branches, from the fixtures (issue 20): 580 (production:
# page table version 0x00020000 with `flags`) and 595 (newest). Absent
# fixtures: those builds are reported skipped.
declare -A nv_fixture
for v in 580.142 595.45.04; do
    nv_fixture[$v]=$(bash ci/fixture-nvidia-src.sh "$v" 2>/dev/null) || nv_fixture[$v]=
done
# with_fixture_drivers LABEL KVER [make args...]: builds with each fixture
# driver's nv-p2p.h; the nv_mem_nc client compiled in (both have the
# persistent API).
with_fixture_drivers() {
    local label=$1 v; shift
    for v in 580.142 595.45.04; do
        if [ -z "${nv_fixture[$v]}" ]; then
            skip "$label: NVIDIA $v: no fixture open-gpu-kernel-modules-$v-kernel-open.tar.gz (set NVPM_FIXTURES)"
            continue
        fi
        check "$label: builds with NVIDIA $v's nv-p2p.h" build "$@" NV_SRC="${nv_fixture[$v]}"
        check "$label: nv_mem_nc client compiled in with NVIDIA $v" nc_compiled
    done
}
log=$(mktemp -d)
work=$log
. ci/checks.sh
. ci/lib/kmod-build.sh
# Keep compiled core between the builds below (make clean would drop it).
export NVPM_RUST_CACHE=$top/target/kmod-rust-cache
# CI builds are strict: a warning from rustc or gcc fails them (kmod/Kbuild).
# The packaged builds (DKMS, rpmbuild) are not; see the checks below.
export NVPM_STRICT=1
trap 'rm -rf "$log"; make -s -C kmod clean >/dev/null 2>&1' EXIT

offline() { if unshare -n true 2>/dev/null; then unshare -n "$@"; else "$@"; fi; }

build() {  # build KVER [make args...]: clean build, output in $log/build
    local kver=$1; shift
    make -s -C kmod clean >/dev/null 2>&1
    offline make -C kmod KVER="$kver" "$@" >"$log/build" 2>&1
}

modinfo_ok() {  # modinfo_ok KVER: license, version, vermagic, parameters
    local ko=kmod/nv_peer_mem.ko kver=$1
    [ "$(modinfo -F license $ko)" = "Dual BSD/GPL" ] || { echo "license: $(modinfo -F license $ko)"; return 1; }
    [ "$(modinfo -F version $ko)" = "$version" ] || { echo "version: $(modinfo -F version $ko), want $version"; return 1; }
    case "$(modinfo -F vermagic $ko)" in "$kver "*) ;; *) echo "vermagic: $(modinfo -F vermagic $ko)"; return 1;; esac
    for p in peerdirect_support persistent_api_support enable_dbg; do
        modinfo -F parm $ko | grep -Eq "^$p:.{20,} \(int\)$" || { echo "parameter $p missing or without description"; modinfo -F parm $ko; return 1; }
    done
}

has_notes() {  # both "not found" notes printed
    grep -q 'note: MLNX_OFED not found' "$log/build" && grep -q 'note: NVIDIA driver sources not found' "$log/build" || { cat "$log/build"; return 1; }
}
# nm to a file, not a pipe: grep -q closing the pipe early makes nm fail
# with SIGPIPE, which pipefail would turn into a wrong answer.
symbols() { nm kmod/nv_peer_mem.ko >"$log/nm" && cat "$log/nm"; }
nc_compiled() { symbols >/dev/null && grep -q ' U nvidia_p2p_get_pages_persistent$' "$log/nm"; }
no_nc() { symbols >/dev/null && ! grep -q 'nvidia_p2p_.*persistent' "$log/nm"; }

for kver in "$KVER_BOOKWORM" "$KVER_BACKPORTS"; do
    echo "== kernel $kver"
    check "$kver: builds offline without MLNX_OFED or NVIDIA sources" build "$kver"
    check "$kver: prints the two missing-prerequisite notes" has_notes
    check "$kver: object verified (GOTPCREL, SSE, objtool)" verified_object "$log/build"
    check "$kver: modinfo license, version, vermagic, parameters" modinfo_ok "$kver"
    check "$kver: no nv_mem_nc client without the NVIDIA header" no_nc
    check "$kver: builds with NVIDIA 535's nv-p2p.h" build "$kver" NV_SRC="$nv_src"
    check "$kver: nv_mem_nc client compiled in with NVIDIA 535" nc_compiled
    check "$kver: modinfo with NVIDIA 535" modinfo_ok "$kver"
    with_fixture_drivers "$kver" "$kver"
done

echo "== reproducibility and clean"
same_bytes() {
    build "$KVER_BOOKWORM" && sha256sum kmod/nv_peer_mem.ko >"$log/sum1" &&
    build "$KVER_BOOKWORM" && sha256sum kmod/nv_peer_mem.ko >"$log/sum2" && diff "$log/sum1" "$log/sum2"
}
check "two clean builds give a byte-identical nv_peer_mem.ko" same_bytes
clean_leaves_nothing() {
    make -s -C kmod clean >/dev/null 2>&1
    local left; left=$(git status --porcelain --ignored kmod | grep '^!!' || true)
    [ -z "$left" ] || { echo "left behind: $left"; return 1; }
}
check "make clean removes every build product" clean_leaves_nothing

echo "== the core cache (kmod/scripts/core-cache.sh; docs/kmod-build.md)"
check "a clean rebuild reuses the cached core (and prints how to clear it)" \
    sh -c "make -s -C kmod clean >/dev/null 2>&1; make -C kmod KVER=$KVER_BOOKWORM 2>&1 | grep -q 'core: reusing .*clean-cache'"
corrupt_core_discarded() {
    # A cached core whose bytes no longer match the recorded SHA-256 is not
    # used: it is compiled again, and the module comes out the same.
    build "$KVER_BOOKWORM" && sha256sum <kmod/nv_peer_mem.ko >"$log/good" || return 1
    local entry; entry=$(sed -n 's/.*core: reusing \([^ ]*\) .*/\1/p' "$log/build")
    [ -d "$entry" ] || { echo "no cache entry named in the build output"; return 1; }
    local cache; cache=$(mktemp -d); cp -a "$entry" "$cache/"
    local copy; copy=$cache/$(basename "$entry")
    printf 'X' | dd of="$copy/libcore.rlib" bs=1 seek=4096 conv=notrunc status=none
    NVPM_RUST_CACHE=$cache build "$KVER_BOOKWORM"; local rc=$?
    grep 'core:' "$log/build"
    grep -q "core: discarding $copy: libcore.rlib does not match its recorded SHA-256" "$log/build" &&
        [ $rc = 0 ] && sha256sum <kmod/nv_peer_mem.ko | diff - "$log/good" &&
        (cd "$copy" && sha256sum -c --quiet libcore.rlib.sha256)
    rc=$?; rm -rf "$cache"; return $rc
}
check "a corrupted cached core is discarded and compiled again; same module" corrupt_core_discarded
shared_root_refused() {
    local cache; cache=$(mktemp -d); chmod 0777 "$cache"
    local rc=0
    sh kmod/scripts/core-cache.sh "$cache" "$(sh kmod/scripts/find-rustc.sh)" "--target=x86_64-unknown-none" >"$log/err" 2>&1
    [ $? = 3 ] && grep -q "cannot use $cache as the core cache" "$log/err" || { cat "$log/err"; rc=1; }
    [ -z "$(ls -A "$cache")" ] || { echo "wrote into it"; rc=1; }; rm -rf "$cache"; return $rc
}
check "a cache directory others can write is refused (nothing compiled or written)" shared_root_refused
clean_cache_empties() {
    local cache; cache=$(mktemp -d); mkdir "$cache/rust-0123" "$cache/.tmp-0123-x"
    make -s -C kmod clean-cache NVPM_RUST_CACHE="$cache" >/dev/null 2>&1
    local left; left=$(ls -A "$cache"); rm -rf "$cache"; [ -z "$left" ] || { echo "left: $left"; return 1; }
}
check "make clean-cache removes the cache's entries" clean_cache_empties

echo "== warnings: fatal in CI only (issue 12 item 5)"
# Kbuild records each object's command line in its .cmd file.
strict_flags() {  # strict_flags yes|no [make args]: -Dwarnings/-Werror present or not
    local want=$1; shift
    build "$KVER_BOOKWORM" "$@" || { tail -n 20 "$log/build"; return 1; }
    local rust gcc
    rust=$(grep -c -- '-Dwarnings' kmod/.nv_peer_mem_rust.o.cmd)
    gcc=$(grep -c -- '-Werror ' kmod/glue/.nv_peer_mem_glue.o.cmd)
    echo "rustc -Dwarnings: $rust, gcc -Werror: $gcc"
    if [ "$want" = yes ]; then [ "$rust" -gt 0 ] && [ "$gcc" -gt 0 ]; else [ "$rust" = 0 ] && [ "$gcc" = 0 ]; fi
}
check "NVPM_STRICT=1: rustc -Dwarnings and gcc -Werror" strict_flags yes
check "default build (as DKMS runs it): warnings are not errors" strict_flags no NVPM_STRICT=
check "NVPM_STRICT is set in no packaging file (dkms.conf, spec, debian/)" \
    sh -c '! grep -rn NVPM_STRICT dkms/ rpm/ debian/'

echo "== the minimum rustc (kmod/Cargo.toml rust-version; docs/toolchains.md)"
# No std/core API newer than the declared minimum. (ci/test-suites.sh builds
# the module with that very rustc, Debian 13's 1.85.)
msrv_clean() {
    cargo clippy --version >/dev/null 2>&1 || { echo "clippy missing: rustup component add clippy"; return 1; }
    cargo clippy --quiet --locked -p nv-peer-mem --lib -- -D clippy::incompatible_msrv
}
check "clippy incompatible_msrv: the crate uses nothing newer than rustc $(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' kmod/Cargo.toml)" msrv_clean

echo "== bad input and missing prerequisites"
fails_with() {  # fails_with PATTERN COMMAND...: command fails and prints PATTERN
    local pattern=$1; shift
    if "$@" >"$log/err" 2>&1; then echo "succeeded unexpectedly"; return 1; fi
    grep -q -- "$pattern" "$log/err" || { echo "missing message: $pattern"; cat "$log/err"; return 1; }
}
check "explicit RUSTC without rust-src: stops with the package list" \
    fails_with 'rustc-web rust-web-src' make -C kmod KVER="$KVER_BOOKWORM" RUSTC=/bin/true
no_rustc_anywhere() {
    local bin; bin=$(mktemp -d)
    for tool in sh cat sed sort head cut dirname; do ln -s "$(command -v $tool)" "$bin/$tool"; done
    fails_with 'rust rust-src' env PATH="$bin" NVPM_SYSTEM_RUSTC=/nonexistent/rustc sh kmod/scripts/find-rustc.sh
    local rc=$?; rm -rf "$bin"; return $rc
}
check "no rustc on PATH or in the system: stops with the package list" no_rustc_anywhere
# Fake toolchains: a sysroot with core's sources and a rustc script that
# reports a version (find-rustc.sh needs nothing more).
fake_rustc() {  # fake_rustc PATH VERSION
    local sysroot; sysroot=$(dirname "$1")/sysroot-$2
    mkdir -p "$(dirname "$1")" "$sysroot/lib/rustlib/src/rust/library/core/src"
    touch "$sysroot/lib/rustlib/src/rust/library/core/src/lib.rs"
    printf '#!/bin/sh\ncase "$1" in --print) echo %s;; --version) echo "rustc %s (fake)";; esac\n' "$sysroot" "$2" >"$1"
    chmod +x "$1"
}
min_rustc=$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' kmod/Cargo.toml)
too_old_rustc() {
    local dir; dir=$(mktemp -d); fake_rustc "$dir/bin/rustc" 1.75.0
    fails_with "needs $min_rustc or newer" env RUSTC="$dir/bin/rustc" sh kmod/scripts/find-rustc.sh
    local rc=$?; rm -rf "$dir"; return $rc
}
check "RUSTC older than the minimum ($min_rustc, kmod/Cargo.toml): refused, naming it" too_old_rustc
ubuntu_versioned() {
    # Ubuntu 24.04 as it looks with rustc-1.85 installed: the default rustc is
    # 1.75, /usr/bin/rustc-1.85 and /usr/lib/rust-1.80/bin/rustc exist.
    local dir found; dir=$(mktemp -d)
    fake_rustc "$dir/bin/rustc" 1.75.0
    fake_rustc "$dir/root/usr/bin/rustc-1.85" 1.85.1
    fake_rustc "$dir/root/usr/lib/rust-1.80/bin/rustc" 1.80.1
    found=$(env PATH="$dir/bin:$PATH" NVPM_SYSTEM_RUSTC="$dir/bin/rustc" NVPM_TOOLCHAIN_ROOT="$dir/root" sh kmod/scripts/find-rustc.sh)
    echo "found: $found"
    rm -rf "$dir"
    [ "$found" = "$dir/root/usr/bin/rustc-1.85" ]
}
check "default rustc too old, versioned rustc-1.85 installed (Ubuntu): picks rustc-1.85" ubuntu_versioned
resolute_versioned() {
    # Ubuntu 26.04: rustc is rust-defaults' metapackage depending on
    # rustc-1.93 (packages.ubuntu.com/resolute/rustc); whether it puts a
    # /usr/bin/rustc in place was not read. Without one on PATH or in the
    # system, /usr/bin/rustc-1.93 must be found.
    local dir bin found tool; dir=$(mktemp -d); bin=$dir/tools
    mkdir -p "$bin"
    for tool in sh cat sed sort head cut dirname; do ln -s "$(command -v $tool)" "$bin/$tool"; done
    fake_rustc "$dir/root/usr/bin/rustc-1.93" 1.93.1
    found=$(env PATH="$bin" NVPM_SYSTEM_RUSTC=/nonexistent/rustc NVPM_TOOLCHAIN_ROOT="$dir/root" sh kmod/scripts/find-rustc.sh)
    echo "found: $found"
    rm -rf "$dir"
    [ "$found" = "$dir/root/usr/bin/rustc-1.93" ]
}
check "no rustc on PATH or in the system, rustc-1.93 installed (Ubuntu 26.04): picks rustc-1.93" resolute_versioned
check "kernel without headers: names the headers package" \
    fails_with 'linux-headers-0.0.0-none' make -C kmod KVER=0.0.0-none
check "NV_SRC without nv-p2p.h: clear error" \
    fails_with 'NV_SRC=/tmp has no nvidia/nv-p2p.h' make -C kmod KVER="$KVER_BOOKWORM" NV_SRC=/tmp
check "OFA_KERNEL without peer_mem.h: clear error" \
    fails_with 'OFA_KERNEL=/tmp has no include/rdma/peer_mem.h' make -C kmod KVER="$KVER_BOOKWORM" OFA_KERNEL=/tmp
unreadable_mapping_version() {
    # An nv-p2p.h whose dma mapping has another major version than the one
    # kmod/src/platform.rs reads must stop the build (glue static_assert).
    local dir; dir=$(mktemp -d); mkdir -p "$dir/nvidia"
    sed 's/^#define NVIDIA_P2P_DMA_MAPPING_VERSION .*/#define NVIDIA_P2P_DMA_MAPPING_VERSION 0x00030000/' \
        "$nv_src/nvidia/nv-p2p.h" >"$dir/nvidia/nv-p2p.h"
    grep -q 'DMA_MAPPING_VERSION 0x00030000' "$dir/nvidia/nv-p2p.h" || { echo "test header not made"; return 1; }
    fails_with "dma_mapping version is not one kmod/src/platform.rs can read" \
        make -C kmod KVER="$KVER_BOOKWORM" NV_SRC="$dir"
    local rc=$?; rm -rf "$dir"; return $rc
}
check "nv-p2p.h with an unreadable dma mapping version: the build stops, naming it" unreadable_mapping_version
verifier_catches_gotpcrel() {
    # The object verifier must fail on what it exists to catch: a
    # position-independent object calling an external function.
    local dir; dir=$(mktemp -d); mkdir -p "$dir/build"
    printf 'extern int ext(void);\nint f(void) { return ext(); }\n' > "$dir/t.c"
    gcc -O2 -fPIC -fno-plt -c "$dir/t.c" -o "$dir/nv_peer_mem_rust.o" && touch "$dir/nv_peer_mem.ko"
    fails_with 'GOTPCREL' sh kmod/scripts/verify-object.sh "$dir"
    local rc=$?; rm -rf "$dir"; return $rc
}
check "object verifier rejects GOTPCREL relocations" verifier_catches_gotpcrel
verifier_catches_sse() {
    local dir; dir=$(mktemp -d); mkdir -p "$dir/build"
    printf 'double f(double a, double b) { return a * b; }\n' > "$dir/t.c"
    gcc -O2 -c "$dir/t.c" -o "$dir/nv_peer_mem_rust.o" && touch "$dir/nv_peer_mem.ko"
    fails_with 'SSE/AVX' sh kmod/scripts/verify-object.sh "$dir"
    local rc=$?; rm -rf "$dir"; return $rc
}
check "object verifier rejects SSE registers" verifier_catches_sse

echo "== code generation options of other distributions' kernels (ci/config-trees.sh; docs/kmod-build.md, \"Code generation options\")"
# Each option set of kmod/tests/kernel-configs is a kernel tree from Debian's
# linux-source with Debian's configuration changed to that distribution's
# code generation options, prepared for external modules (cached). The
# module is built on it as DKMS builds it and strict; objtool must be
# silent, and rustc must have had the set's flags.
tree_release() { cat "$1/include/config/kernel.release"; }
rust_cmd_has() {  # rust_cmd_has FLAG...: the Rust object's command line has each flag
    local flag; for flag in "$@"; do
        grep -q -- " $flag\( \|$\)" kmod/.nv_peer_mem_rust.o.cmd || { echo "no $flag in:"; cat kmod/.nv_peer_mem_rust.o.cmd; return 1; }
    done
}
objtool_silent() { grep -q 'verified .*objtool silent' "$log/build" || { grep -i objtool "$log/build" | head; return 1; }; }
for set in $(bash ci/config-trees.sh list); do
    read -r series arch want_flags < <(bash ci/config-trees.sh info "$set")
    tree=$(bash ci/config-trees.sh kdir "$set" 2>"$log/tree") || { cat "$log/tree"; tree=""; }
    check "$set ($series $arch): tree prepared, the set's options kept by olddefconfig" test -f "$tree/.prepared"
    [ -n "$tree" ] || continue
    kver=$(tree_release "$tree")
    tree_make=(KDIR="$tree")
    [ "$arch" = arm64 ] && tree_make+=(ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-)
    # As dkms.conf's MAKE[0] runs it: not strict.
    check "$set: builds as DKMS builds it" build "$kver" "${tree_make[@]}" NVPM_STRICT= OFA_KERNEL=none NV_SRC=none
    if [ "$arch" = arm64 ]; then
        check "$set: object verified (branch protection as the glue's)" grep -q 'verified .*arm64' "$log/build"
    else
        check "$set: object verified, objtool silent" objtool_silent
    fi
    check "$set: builds strict (warnings are errors)" build "$kver" "${tree_make[@]}" OFA_KERNEL=none NV_SRC=none
    check "$set: rustc had the flags its options give ($want_flags)" rust_cmd_has $want_flags
done
# The suite can fail: the frame-pointer tree without rust-flags.sh's frame
# pointers must fail on objtool's warnings (issue 56's Ubuntu build).
without_frame_pointers() {
    local tree; tree=$(bash ci/config-trees.sh kdir ubuntu-frame-pointer 2>&1) || { echo "$tree"; return 1; }
    local m; m=$(mktemp -d); cp -a kmod "$m/" && echo "$version" >"$m/kmod/VERSION"
    make -s -C "$m/kmod" clean >/dev/null 2>&1
    sed -i '/need CONFIG_FRAME_POINTER -Cforce-frame-pointers=y/d' "$m/kmod/scripts/rust-flags.sh"
    grep -q 'need CONFIG_FRAME_POINTER' "$m/kmod/scripts/rust-flags.sh" && { echo "mutation not applied"; rm -rf "$m"; return 1; }
    fails_with 'objtool: .*call without frame pointer save/setup' make -C "$m/kmod" KVER="$(tree_release "$tree")" KDIR="$tree" OFA_KERNEL=none NV_SRC=none
    local rc=$?; rm -rf "$m"; return $rc
}
check "mutation: without rust-flags.sh's frame-pointer flag the ubuntu-frame-pointer build fails (objtool)" without_frame_pointers
# Options the module cannot follow stop the build, naming them.
flags_stop() {  # flags_stop 'CONFIG_X=y ...' PATTERN [rustc]: rust-flags.sh fails naming it
    local cfg; cfg=$(mktemp)
    { cat "/usr/src/linux-headers-$KVER_BOOKWORM/.config"; printf '%s\n' $1; } >"$cfg"
    fails_with "$2" sh kmod/scripts/rust-flags.sh "$cfg" "${3:-$(sh kmod/scripts/find-rustc.sh)}"
    local rc=$?; rm -f "$cfg"; return $rc
}
check "CONFIG_CFI_CLANG (kCFI): rust-flags.sh stops, naming it" flags_stop 'CONFIG_CFI_CLANG=y' 'sets CONFIG_CFI_CLANG, which the module cannot follow'
check "CONFIG_CALL_PADDING without a padding size: stops, naming it" flags_stop 'CONFIG_CALL_PADDING=y CONFIG_FUNCTION_PADDING_BYTES=' 'sets CONFIG_CALL_PADDING'
rustc_without_rethunk() {
    # A rustc that has no -Zfunction-return (older than 1.76): RETHUNK
    # cannot be followed, and the build must say so, not drop it.
    local dir; dir=$(mktemp -d)
    printf '#!/bin/sh\nfor a; do case "$a" in -Zfunction-return*) echo "error: unknown unstable option: function-return" >&2; exit 1;; esac; done\nexec %s "$@"\n' \
        "$(sh kmod/scripts/find-rustc.sh)" >"$dir/rustc"; chmod +x "$dir/rustc"
    flags_stop 'CONFIG_RETHUNK=y' "sets CONFIG_RETHUNK, which the module cannot follow: it needs the rustc flag(s) '-Zfunction-return=thunk-extern'" "$dir/rustc"
    local rc=$?; rm -rf "$dir"; return $rc
}
check "a rustc without a flag a kernel option needs (RETHUNK): stops, naming the option and the flag" rustc_without_rethunk

echo "== Debian 11's 5.10 (ci/fetch-bullseye-headers.sh): the oldest kernel built here"
kdir_510=$(bash ci/fetch-bullseye-headers.sh 2>"$log/fetch-510") || { cat "$log/fetch-510"; kdir_510=""; }
check "bullseye 5.10 headers and gcc-10 unpacked from Debian's archive" test -f "$kdir_510/.config"
if [ -n "$kdir_510" ]; then
    kver_510=$(basename "$kdir_510"); kver_510=${kver_510#linux-headers-}
    # The headers' Makefile names gcc-10 (Debian 11's compiler) as CC.
    path_510=${kdir_510%/usr/src/*}/usr/bin:$PATH
    check "$kver_510: builds as DKMS builds it" env PATH="$path_510" bash -c "$(declare -f offline build); log=$log; build $kver_510 KDIR=$kdir_510 NVPM_STRICT= OFA_KERNEL=none NV_SRC=none"
    check "$kver_510: builds strict, object verified, objtool silent" env PATH="$path_510" bash -c "$(declare -f offline build); log=$log; build $kver_510 KDIR=$kdir_510 OFA_KERNEL=none NV_SRC=none && grep -q 'objtool silent' $log/build"
    check "$kver_510: modinfo license, version, vermagic, parameters" modinfo_ok "$kver_510"
    check "$kver_510: builds with NVIDIA 535's nv-p2p.h, nv_mem_nc compiled in" env PATH="$path_510" bash -c "$(declare -f offline build nc_compiled symbols); log=$log; build $kver_510 KDIR=$kdir_510 NV_SRC=$nv_src && nc_compiled"
fi

echo "== arm64: cross build for Debian's arm64 kernel (docs/kmod-build.md, \"arm64\")"
# The arm64 kernel of the bookworm ABI, unpacked from Debian's archive
# without installing it (ci/fetch-arm64-kernel.sh), built with the cross
# compiler as an arm64 DKMS build would natively.
arm64_root=$(bash ci/fetch-arm64-kernel.sh "$KVER_BOOKWORM" 2>"$log/fetch-arm64") || { cat "$log/fetch-arm64"; arm64_root=""; }
kver_arm64=${KVER_BOOKWORM%-amd64}-arm64
kdir_arm64=$arm64_root/usr/src/linux-headers-$kver_arm64
arm64_make=(KDIR="$kdir_arm64" ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-)
check "arm64 headers and kernel unpacked from Debian's archive ($kver_arm64)" test -f "$kdir_arm64/.config"
arm64_machine() { readelf -h kmod/nv_peer_mem.ko | grep -q 'Machine: *AArch64' || { readelf -h kmod/nv_peer_mem.ko | grep Machine; return 1; }; }
arm64_verified() { grep -q "verified .*arm64, no GOT, no FP/SIMD, branch protection 'PAC' as the glue's, Rust reached by direct calls only" "$log/build" || { tail -n 5 "$log/build"; return 1; }; }
arm64_modinfo() {
    case "$(modinfo -F vermagic kmod/nv_peer_mem.ko)" in "$kver_arm64 "*aarch64*) ;; *) modinfo -F vermagic kmod/nv_peer_mem.ko; return 1;; esac
    [ "$(modinfo -F version kmod/nv_peer_mem.ko)" = "$version" ]
}
arm64_rust_flags() {  # the Rust object's command line has the kernel's arm64 flags (PAC, no BTI: Debian's 6.1 config)
    local cmd=kmod/.nv_peer_mem_rust.o.cmd
    grep -q -- '--target=aarch64-unknown-none-softfloat' $cmd && grep -q -- '-Ctarget-feature=-neon' $cmd &&
        grep -q -- '-Zbranch-protection=pac-ret ' $cmd && ! grep -q -- 'bti' $cmd || { cat $cmd; return 1; }
}
check "arm64 $kver_arm64: cross-builds offline without MLNX_OFED or NVIDIA sources" build "$kver_arm64" "${arm64_make[@]}"
check "arm64: the module is an AArch64 object" arm64_machine
# MLNX_OFED's per-kernel tree of an arm64 machine is under aarch64/, whatever
# the building host's machine is.
check "arm64: a cross build looks for MLNX_OFED in /usr/src/ofa_kernel/aarch64/$kver_arm64" sh -c \
    "make -C kmod -n -p KVER='$kver_arm64' ARCH=arm64 2>/dev/null | grep '^OFA_CANDIDATES :=' | grep -qF '/usr/src/ofa_kernel/aarch64/$kver_arm64 '"
check "arm64: object verified (no GOT, no FP/SIMD, branch protection as the glue's, no Rust address taken)" arm64_verified
check "arm64: modinfo vermagic $kver_arm64 ... aarch64, version" arm64_modinfo
check "arm64: rustc ran with the kernel's arm64 flags (softfloat target, -neon, pac-ret per CONFIG_ARM64_PTR_AUTH_KERNEL)" arm64_rust_flags
check "arm64: builds with NVIDIA 535's nv-p2p.h" build "$kver_arm64" "${arm64_make[@]}" NV_SRC="$nv_src"
check "arm64: nv_mem_nc client compiled in with NVIDIA 535" nc_compiled
with_fixture_drivers "arm64" "$kver_arm64" "${arm64_make[@]}"
# bookworm-backports' 6.12 arm64 kernel: the same flags (no BTI there
# either), its own headers.
arm64_bpo_root=$(bash ci/fetch-arm64-kernel.sh "$KVER_BACKPORTS" 2>"$log/fetch-arm64") || { cat "$log/fetch-arm64"; arm64_bpo_root=""; }
kver_arm64_bpo=${KVER_BACKPORTS%-amd64}-arm64
check "arm64 $kver_arm64_bpo: cross-builds offline" build "$kver_arm64_bpo" \
    KDIR="$arm64_bpo_root/usr/src/linux-headers-$kver_arm64_bpo" ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-
check "arm64 $kver_arm64_bpo: object verified" arm64_verified
check "arm64 $kver_arm64_bpo: modinfo vermagic" sh -c 'modinfo -F vermagic kmod/nv_peer_mem.ko | grep -q "^$1 .*aarch64"' _ "$kver_arm64_bpo"
flags_for() {  # flags_for 'CONFIG_A=y ...': rust-flags.sh on the arm64 config with these options set
    local cfg; cfg=$(mktemp)
    grep -Ev '^(# )?(CONFIG_ARM64_BTI_KERNEL|CONFIG_ARM64_PTR_AUTH_KERNEL|CONFIG_SHADOW_CALL_STACK|CONFIG_DYNAMIC_SCS)[= ]' "$kdir_arm64/.config" >"$cfg"
    printf '%s\n' $1 >>"$cfg"
    sh kmod/scripts/rust-flags.sh "$cfg" "$(sh kmod/scripts/find-rustc.sh)"; local rc=$?; rm -f "$cfg"; return $rc
}
flags_have() {  # flags_have 'CONFIG...' WANT NOT: flags contain WANT and not NOT
    local flags; flags=$(flags_for "$1") || return 1; echo "$flags"
    case " $flags " in *" $2 "*) ;; *) return 1;; esac
    [ -z "$3" ] || case " $flags " in *"$3"*) return 1;; esac
}
check "arm64 flags: CONFIG_ARM64_BTI_KERNEL -> -Zbranch-protection=bti,pac-ret" \
    flags_have 'CONFIG_ARM64_PTR_AUTH_KERNEL=y CONFIG_ARM64_BTI_KERNEL=y' -Zbranch-protection=bti,pac-ret ''
check "arm64 flags: neither PAC nor BTI -> no branch protection" \
    flags_have '' -Ccode-model=small branch-protection
check "arm64 flags: CONFIG_SHADOW_CALL_STACK -> x18 reserved and the SCS instrumentation" \
    flags_have 'CONFIG_SHADOW_CALL_STACK=y' '-Zfixed-x18 -Zsanitizer=shadow-call-stack' ''
verifier_catches_arm64() {  # verifier_catches_arm64 PATTERN C-SOURCE [gcc flags]: an arm64 object the verifier rejects
    local pattern=$1 src=$2; shift 2
    local dir; dir=$(mktemp -d); mkdir -p "$dir/build" "$dir/glue"
    printf '%b' "$src" >"$dir/t.c"
    printf 'extern void nvpm_rs_exit(void);\nvoid *nvpm_taken = (void *)nvpm_rs_exit;\n' >"$dir/g.c"
    aarch64-linux-gnu-gcc -O2 -mbranch-protection=pac-ret "$@" -c "$dir/t.c" -o "$dir/nv_peer_mem_rust.o" &&
        aarch64-linux-gnu-gcc -O2 -mbranch-protection=pac-ret -c "$dir/g.c" -o "$dir/glue/nv_peer_mem_glue.o" &&
        touch "$dir/nv_peer_mem.ko" || return 1
    CROSS_COMPILE=aarch64-linux-gnu- fails_with "$pattern" sh kmod/scripts/verify-object.sh "$dir"
    local rc=$?; rm -rf "$dir"; return $rc
}
check "object verifier rejects FP/SIMD registers in an arm64 object" \
    verifier_catches_arm64 'FP/SIMD registers used' 'double f(double a, double b) { return a * b; }\n'
check "object verifier rejects an arm64 Rust function whose address the glue takes (BTI)" \
    verifier_catches_arm64 'address of Rust code is taken.*nvpm_rs_exit' 'void nvpm_rs_exit(void) {}\n' -mgeneral-regs-only
check "object verifier rejects arm64 branch protection other than the glue's" \
    verifier_catches_arm64 "branch protection differs: Rust object 'BTI, PAC', C glue 'PAC'" 'void nvpm_rs_exit(void) {}\n' -mbranch-protection=pac-ret+bti

finish
