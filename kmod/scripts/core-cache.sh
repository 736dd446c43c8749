#!/bin/sh
# Usage: core-cache.sh <cache root> <rustc> <rust flags>
# Prints the directory of a libcore.rlib compiled by <rustc> from its own
# library sources with exactly <rust flags> (plus core's fixed flags below),
# compiling it first if the cache has no verified one. core is the slow,
# memory-hungry part of the module build and depends on nothing of the
# module or the kernel but the flag set, so one compiled core serves every
# kernel with the same mitigations and every DKMS build (docs/kmod-build.md,
# "The core cache").
#
# An entry is rust-<key>/ where <key> is the SHA-256 of everything core's
# bytes depend on: `rustc -vV` (version, commit, LLVM), the sysroot path,
# a listing of the core sources (name, size, mtime) and the full command
# line. An entry is used only if
#   - it and the root are owned by this user and writable by nobody else;
#   - its `key` file holds exactly that text (no truncated-hash collision);
#   - libcore.rlib matches the SHA-256 recorded beside it;
#   - rustc accepts it as core for a no_std crate with these flags.
# Anything else is discarded and compiled again. Exits 3 if <cache root>
# cannot be used at all (kmod/Makefile then uses the build tree). A new entry is written in
# a temporary directory and renamed into place (atomic), under a lock so
# that parallel builds compile it once.
set -eu
root=$1
rustc=$2
flags=$3
here=$(cd "$(dirname "$0")" && pwd)
note() { echo "nv_peer_mem: $*" >&2; }

lib=$("$rustc" --print sysroot)/lib/rustlib/src/rust/library
# core is compiled in the edition its own Cargo.toml declares, not ours:
# Rust's library moved from 2021 to 2024 after 1.85, and 1.85's core (Debian
# 13's rustc) fails in 2024 ("extern blocks must be unsafe").
edition=$(sed -n 's/^edition *= *"\([0-9]*\)".*/\1/p' "$lib/core/Cargo.toml" 2>/dev/null)
edition=${edition:-2021}
# no_fp_fmt_parse: core's float formatting/parsing is left out (the module
# has no floats, and it is the largest part of core).
# -Clinker-plugin-lto: core is kept as LLVM bitcode only, so the module's
# fat LTO pulls in just what the module uses (docs/kmod-build.md, "Size").
# -Copt-level=0: that LTO optimises core's code with the module's; optimising
# the bitcode beforehand only costs time (measured: same module, ~10% less
# CPU for core).
core_args="$flags -Copt-level=0 --edition=$edition --crate-type=rlib --crate-name=core --cfg no_fp_fmt_parse -Clinker-plugin-lto -Awarnings"

key_text=$(
    "$rustc" -vV
    echo "sysroot library: $lib"
    (cd "$lib/core" && find . -type f -printf '%p %s %T@\n' | LC_ALL=C sort)
    echo "core: $core_args"
)
key=$(printf '%s\n' "$key_text" | sha256sum | cut -c1-32)
entry=$root/rust-$key
uid=$(id -u)

# owned_private DIR: DIR is a directory owned by us that no one else can write
owned_private() {
    [ -d "$1" ] && [ ! -L "$1" ] && [ -n "$(find "$1" -maxdepth 0 -user "$uid" ! -perm /022)" ]
}

# rustc_accepts DIR: rustc loads DIR/libcore.rlib as core for a no_std
# crate built with these flags (rustc checks its own version, the target
# and the crate hash recorded in the rlib's metadata).
rustc_accepts() {
    printf '#![no_std]\n#![feature(compiler_builtins)]\n#![compiler_builtins]\npub fn probe(a: u32) -> Option<u32> { a.checked_add(1) }\n' |
        RUSTC_BOOTSTRAP=1 "$rustc" $flags --edition=2021 --crate-type=rlib --crate-name=compiler_builtins \
            --emit=metadata --extern core="$1/libcore.rlib" -o "$1/probe.rmeta.tmp" - >/dev/null 2>&1
    rc=$?
    rm -f "$1/probe.rmeta.tmp"
    return $rc
}

# verified DIR: prints why DIR cannot be used, if it cannot
verified() {
    owned_private "$1" || { echo "not a directory owned by uid $uid and private to it"; return 1; }
    [ "$(cat "$1/key" 2>/dev/null)" = "$key_text" ] || { echo "its key differs"; return 1; }
    (cd "$1" && sha256sum --quiet --status -c libcore.rlib.sha256 2>/dev/null) || { echo "libcore.rlib does not match its recorded SHA-256"; return 1; }
    rustc_accepts "$1" || { echo "rustc does not accept its libcore.rlib"; return 1; }
}

clear_hint="clear it with: make -C $(dirname "$here") clean-cache NVPM_RUST_CACHE=$root, or rm -rf $root"

mkdir -p -m 0755 "$root" 2>/dev/null || true
if ! owned_private "$root"; then
    note "cannot use $root as the core cache (not a directory owned by uid $uid that only it can write)"
    exit 3
fi

# Parallel builds (DKMS for several kernels) wait for each other here, so
# the second one reuses what the first compiled.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$root/.lock"
    flock 9
fi

if [ -e "$entry" ]; then
    if why=$(verified "$entry"); then
        touch "$entry"
        note "core: reusing $entry ($clear_hint)"
        echo "$entry"
        exit 0
    fi
    note "core: discarding $entry: $why"
    rm -rf "$entry"
fi

note "core: compiling $(basename "$entry") into $root (once per rustc and flag set; $clear_hint)"
tmp=$(mktemp -d "$root/.tmp-$key-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
chmod 0755 "$tmp"
start=$(date +%s)
# shellcheck disable=SC2086 # $core_args is a list of flags
RUSTC_BOOTSTRAP=1 "$rustc" $core_args "$lib/core/src/lib.rs" -o "$tmp/libcore.rlib"
printf '%s\n' "$key_text" >"$tmp/key"
(cd "$tmp" && sha256sum libcore.rlib >libcore.rlib.sha256)
why=$(verified "$tmp") || { note "core: the freshly compiled core fails verification: $why"; exit 1; }
echo "RUSTC   core ($(($(date +%s) - start)) s, $(($(stat -c %s "$tmp/libcore.rlib") / 1024)) KiB)" >&2
mv -T "$tmp" "$entry"
trap - EXIT
# Entries not used for 90 days belong to toolchains or kernels long gone.
find "$root" -mindepth 1 -maxdepth 1 -name 'rust-*' -mtime +90 -exec rm -rf {} + 2>/dev/null || true
echo "$entry"
