#!/bin/sh
# Prints the path of a rustc that can build the module: one whose sysroot
# has the library sources its own `core` must be compiled from (the
# kernel target's core is not shipped prebuilt). An explicit $RUSTC must be
# usable; otherwise tries rustc on PATH, then the system's rustc
# ($NVPM_SYSTEM_RUSTC, default /usr/bin/rustc: rustup's toolchains usually
# lack rust-src, the distro's rustc has it). Exits 1 with the packages to
# install when none is usable.
set -u
usable() {
    path=$(command -v "$1" 2>/dev/null) || return 1
    sysroot=$("$path" --print sysroot 2>/dev/null) && [ -n "$sysroot" ] || return 1
    [ -f "$sysroot/lib/rustlib/src/rust/library/core/src/lib.rs" ]
}
if [ -n "${RUSTC:-}" ]; then
    if usable "$RUSTC"; then echo "$path"; exit 0; fi
    echo "nv_peer_mem: RUSTC=$RUSTC is not a rustc with library sources (rust-src) in its sysroot." >&2
else
    for candidate in rustc "${NVPM_SYSTEM_RUSTC:-/usr/bin/rustc}"; do
        if usable "$candidate"; then echo "$path"; exit 0; fi
    done
fi
cat >&2 <<'MSG'
nv_peer_mem: no usable Rust toolchain: the module needs rustc and the Rust
library sources of the same version (to compile core for the kernel).
Install them with your distribution's packages:
  Debian 12:               apt-get install -t bookworm-security rustc-web rust-web-src
  Debian 13, Ubuntu:       apt-get install rustc rust-src
  RHEL, Rocky, Alma, Fedora: dnf install rust rust-src
  SLES 15:                 zypper install rust rust-src
or point RUSTC= at a rustc whose `rustc --print sysroot`/lib/rustlib/src/rust/library holds the sources.
MSG
exit 1
