#!/bin/sh
# Prints the path of a rustc that can build the module: one at least the
# module's minimum version (`rust-version` in kmod/Cargo.toml, the one place
# it is declared) whose sysroot has the library sources its own `core` must
# be compiled from (the kernel target's core is not shipped prebuilt).
# An explicit $RUSTC must be usable; otherwise the candidates are, in order:
#   - rustc on PATH, then the system's ($NVPM_SYSTEM_RUSTC, default
#     /usr/bin/rustc): rustup's toolchains usually lack rust-src, the
#     distro's rustc has it;
#   - versioned toolchains, newest first: Ubuntu installs rustc-1.NN beside
#     its default rustc (1.75 on 22.04 and 24.04, too old; on 26.04 the
#     default rustc is rust-defaults' package depending on rustc-1.93) as
#     /usr/bin/rustc-1.NN with its sysroot in /usr/lib/rust-1.NN
#     (packages.ubuntu.com, file lists of rustc-1.80 and libstd-rust-1.89-dev).
#     ($NVPM_TOOLCHAIN_ROOT prefixes those two paths, for ci/test-kmod.sh.)
# Exits 1 with the packages to install when none is usable.
set -u
here=$(cd "$(dirname "$0")" && pwd)
min=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$here/../Cargo.toml" 2>/dev/null | head -n 1)
min=${min:-1.85}
too_old=""

# at_least VERSION: VERSION >= $min (sort -V: GNU coreutils, on every target)
at_least() { [ "$(printf '%s\n%s\n' "$min" "$1" | sort -V | head -n 1)" = "$min" ]; }

usable() {
    path=$(command -v "$1" 2>/dev/null) || return 1
    sysroot=$("$path" --print sysroot 2>/dev/null) && [ -n "$sysroot" ] || return 1
    [ -f "$sysroot/lib/rustlib/src/rust/library/core/src/lib.rs" ] || return 1
    version=$("$path" --version 2>/dev/null | sed -n 's/^rustc \([0-9][0-9.]*\).*/\1/p')
    if [ -z "$version" ] || ! at_least "$version"; then
        too_old="$too_old $path (${version:-unknown version})"
        return 1
    fi
}

if [ -n "${RUSTC:-}" ]; then
    if usable "$RUSTC"; then echo "$path"; exit 0; fi
    if [ -n "$too_old" ]; then
        echo "nv_peer_mem: RUSTC=$RUSTC is rustc ${version:-of unknown version}; the module needs $min or newer." >&2
    else
        echo "nv_peer_mem: RUSTC=$RUSTC is not a rustc with library sources (rust-src) in its sysroot." >&2
    fi
else
    versioned=$(for f in "${NVPM_TOOLCHAIN_ROOT:-}"/usr/bin/rustc-1.* "${NVPM_TOOLCHAIN_ROOT:-}"/usr/lib/rust-1.*/bin/rustc; do
            [ -x "$f" ] && echo "$(echo "$f" | sed -n 's:.*rustc*-\(1\.[0-9]*\).*:\1:p') $f"
        done | sort -rV | cut -d' ' -f2)
    for candidate in rustc "${NVPM_SYSTEM_RUSTC:-/usr/bin/rustc}" $versioned; do
        if usable "$candidate"; then echo "$path"; exit 0; fi
    done
fi
[ -z "$too_old" ] || echo "nv_peer_mem: older than the module's minimum rustc $min:$too_old" >&2
cat >&2 <<MSG
nv_peer_mem: no usable Rust toolchain: the module needs rustc $min or newer
and the Rust library sources of the same version (to compile core for the
kernel). Install them with your distribution's packages:
  Debian 12:               apt-get install -t bookworm-security rustc-web rust-web-src
  Debian 13 and newer:     apt-get install rustc rust-src
  Ubuntu 22.04, 24.04:     apt-get install rustc-1.85 rust-1.85-src
  Ubuntu 26.04:            apt-get install rustc rust-src   (rust-defaults: rustc-1.93)
  RHEL, Rocky, Alma, Fedora: dnf install rust rust-src
  SLES 15, 16:             zypper install rust rust1.NN-src (NN: the minor version rustc --version prints)
or point RUSTC= at a rustc whose \`rustc --print sysroot\`/lib/rustlib/src/rust/library holds the sources.
MSG
exit 1
