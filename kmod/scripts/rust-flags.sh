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
    arch=x86_64
    target=x86_64-unknown-none
elif enabled CONFIG_ARM64; then
    arch=arm64
    # Linux's own arm64 Rust target (arch/arm64/Makefile, Linux 6.12+): the
    # built-in aarch64-unknown-none-softfloat (no FP/SIMD registers, like
    # the C code's -mgeneral-regs-only); its core is compiled here from the
    # library sources like x86_64's, so no prebuilt target is needed.
    target=aarch64-unknown-none-softfloat
else
    echo "nv_peer_mem: unsupported architecture in $config; x86_64 and arm64 kernels only" >&2
    exit 1
fi

probe() {  # probe FLAG...: whether this rustc accepts the flags
    RUSTC_BOOTSTRAP=1 "$rustc" --target="$target" "$@" --print cfg >/dev/null 2>&1
}

# -Zplt=yes (x86_64): calls to the kernel take the PLT form (R_X86_64_PLT32),
# never a GOT entry the module loader rejects. arm64's calls are BL (CALL26)
# either way.
plt=""
[ "$arch" = x86_64 ] && plt=" -Zplt=yes"
flags="--target=$target -Crelocation-model=static$plt -Cpanic=abort"
flags="$flags -Cforce-unwind-tables=n -Copt-level=2 -Cdebug-assertions=n -Coverflow-checks=n"
flags="$flags -Csymbol-mangling-version=v0"
# No jump tables: on x86 indirect jumps need retpolines and ENDBR landing
# pads; on arm64 a BTI kernel needs `bti j` pads. None is simpler than both.
if probe -Cjump-tables=n; then flags="$flags -Cjump-tables=n"; else flags="$flags -Zno-jump-tables"; fi

if [ "$arch" = arm64 ]; then
    # As arch/arm64/Makefile sets KBUILD_RUSTFLAGS (Linux 6.12), from the
    # same config options as the C flags of the module's glue:
    #   - -neon: the softfloat target already has no FP/SIMD; the kernel
    #     says it explicitly, so do we;
    #   - branch protection: BTI landing pads plus return-address signing
    #     with CONFIG_ARM64_BTI_KERNEL, signing alone with
    #     CONFIG_ARM64_PTR_AUTH_KERNEL (C: -mbranch-protection=pac-ret[+bti]);
    #   - shadow call stack: x18 reserved (-Zfixed-x18), and unless the
    #     kernel patches it in at boot (CONFIG_DYNAMIC_SCS) the instrumentation
    #     itself, as the top-level Makefile adds for Rust;
    #   - code model: small, as the kernel compiles modules; kernels before
    #     5.x with CONFIG_ARM64_MODULE_CMODEL_LARGE compiled modules with
    #     -mcmodel=large (arch/arm64/Makefile of Linux 4.x).
    flags="$flags -Ctarget-feature=-neon"
    if enabled CONFIG_ARM64_BTI_KERNEL; then
        flags="$flags -Zbranch-protection=bti,pac-ret"
    elif enabled CONFIG_ARM64_PTR_AUTH_KERNEL; then
        flags="$flags -Zbranch-protection=pac-ret"
    fi
    if enabled CONFIG_SHADOW_CALL_STACK; then
        flags="$flags -Zfixed-x18"
        enabled CONFIG_DYNAMIC_SCS || flags="$flags -Zsanitizer=shadow-call-stack"
    fi
    if enabled CONFIG_ARM64_MODULE_CMODEL_LARGE; then
        flags="$flags -Ccode-model=large"
    else
        flags="$flags -Ccode-model=small"
    fi
    echo "$flags"
    exit 0
fi

# x86_64 from here on.
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
