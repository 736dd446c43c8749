#!/bin/sh
# Prints the path of a rustc that can build the module: one whose sysroot
# has the library sources its own `core` must be compiled from (the
# kernel target's core is not shipped prebuilt). Tries $RUSTC, then rustc on
# PATH, then /usr/bin/rustc (rustup's toolchains usually lack rust-src, the
# distro's rustc has it). Exits 1 with the packages to install otherwise.
set -u
for candidate in ${RUSTC:-} rustc /usr/bin/rustc; do
    path=$(command -v "$candidate" 2>/dev/null) || continue
    sysroot=$("$path" --print sysroot 2>/dev/null) || continue
    if [ -f "$sysroot/lib/rustlib/src/rust/library/core/src/lib.rs" ]; then
        echo "$path"
        exit 0
    fi
done
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
