#!/bin/sh
# Usage: rust-flags.sh <kernel .config> <rustc>
# Prints the rustc flags that make Rust code fit the target kernel: its
# architecture's kernel target and the mitigations its .config enables
# (docs/kmod-build.md). core, compiler_builtins and the module crate must all be
# built with the same flags, or rustc refuses to link them (ABI mismatch).
# Config names cover kernels from RHEL 8's 4.18 (CONFIG_RETPOLINE) to 6.12
# (CONFIG_MITIGATION_RETPOLINE); flag spellings are probed on the rustc.
set -eu
config=$1
rustc=$2
[ -r "$config" ] || { echo "rust-flags.sh: cannot read kernel config $config" >&2; exit 1; }

enabled() {  # enabled CONFIG_A [CONFIG_B ...]: any of them =y
    for option in "$@"; do
        grep -q "^$option=y" "$config" && return 0
    done
    return 1
}
value() { sed -n "s/^$1=//p" "$config" | tr -d '"'; }

if enabled CONFIG_X86_64; then
    target=x86_64-unknown-none
elif enabled CONFIG_ARM64; then
    # Reserved for aarch64-unknown-none-softfloat; its flag set (BTI, PAC,
    # shadow call stack) is not written and tested yet.
    echo "nv_peer_mem: this architecture (arm64) is not supported yet; x86_64 kernels only" >&2
    exit 1
else
    echo "nv_peer_mem: unsupported architecture in $config; x86_64 kernels only" >&2
    exit 1
fi

probe() {  # probe FLAG...: whether this rustc accepts the flags
    RUSTC_BOOTSTRAP=1 "$rustc" --target="$target" "$@" --print cfg >/dev/null 2>&1
}

flags="--target=$target -Crelocation-model=static -Zplt=yes -Cpanic=abort"
flags="$flags -Cforce-unwind-tables=n -Copt-level=2 -Cdebug-assertions=n -Coverflow-checks=n"
flags="$flags -Csymbol-mangling-version=v0"
# No jump tables: indirect jumps need retpolines and ENDBR landing pads.
if probe -Cjump-tables=n; then flags="$flags -Cjump-tables=n"; else flags="$flags -Zno-jump-tables"; fi

if enabled CONFIG_RETPOLINE CONFIG_MITIGATION_RETPOLINE; then
    if probe -Zretpoline-external-thunk; then
        flags="$flags -Zretpoline-external-thunk"
    else
        flags="$flags -Ctarget-feature=+retpoline-external-thunk,+retpoline-indirect-branches,+retpoline-indirect-calls"
    fi
    if probe -Zindirect-branch-cs-prefix; then flags="$flags -Zindirect-branch-cs-prefix"; fi
fi
if enabled CONFIG_RETHUNK CONFIG_MITIGATION_RETHUNK; then
    flags="$flags -Zfunction-return=thunk-extern"
fi
if enabled CONFIG_SLS CONFIG_MITIGATION_SLS; then
    flags="$flags -Ctarget-feature=+harden-sls-ijmp,+harden-sls-ret"
fi
if enabled CONFIG_X86_KERNEL_IBT; then
    flags="$flags -Zcf-protection=branch"
fi
if enabled CONFIG_CALL_PADDING; then
    padding=$(value CONFIG_FUNCTION_PADDING_BYTES)
    flags="$flags -Zpatchable-function-entry=$padding,$padding"
fi
echo "$flags"
