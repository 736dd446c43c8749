#!/bin/sh
# Usage: rust-flags.sh <kernel .config> <rustc>
# Prints the rustc flags that make Rust code fit the target kernel: its
# architecture's kernel target and what its .config makes the kernel's own
# build give C (and, in kernels with Rust support, Rust) for code
# generation: frame pointers, mitigations, branch protection, padding. The
# table "Code generation options" in docs/kmod-build.md lists every option,
# the kernel file it is read from and whether the module follows it; this
# script is that table as code. core, compiler_builtins and the module crate
# must all be built with the same flags, or rustc refuses to link them.
# Config names cover kernels from RHEL 8's 4.18 (CONFIG_RETPOLINE) to 6.12
# (CONFIG_MITIGATION_RETPOLINE); flag spellings are probed on the rustc.
#
# An option the module cannot follow, or one this rustc has no flag for,
# stops the build (exit 1) with a message naming it: a module built
# silently against another ABI, or with a mitigation missing, is worse than
# none.
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
stop() {  # stop CONFIG_X WHY: the kernel sets an option the module cannot follow
    echo "nv_peer_mem: the kernel's $config sets $1, which the module cannot follow: $2. Not building a module whose code differs from what the kernel expects (docs/kmod-build.md, \"Code generation options\")." >&2
    exit 1
}
need() {  # need CONFIG_X FLAG...: the flags the option needs, if this rustc has them
    option=$1; shift
    probe "$@" || stop "$option" "it needs the rustc flag(s) '$*', which $rustc ($("$rustc" --version 2>/dev/null)) does not accept; build with a newer rustc (RUSTC=<rustc>)"
    flags="$flags $*"
}
rustc_release=$("$rustc" -vV | sed -n 's/^release: *//p')
rustc_older_than() {  # rustc_older_than MAJOR MINOR
    major=${rustc_release%%.*} minor=${rustc_release#*.}; minor=${minor%%.*}
    [ "$major" -lt "$1" ] || { [ "$major" = "$1" ] && [ "$minor" -lt "$2" ]; }
}

# Options no flag of ours can follow (docs/kmod-build.md).
# kCFI: every indirect call checks a type hash before its target; the kernel
# gives its own Rust -Zsanitizer=kcfi (Linux 6.12 Makefile). Untested here
# (no distribution kernel of ours is built with Clang), so not followed.
for option in CONFIG_CFI_CLANG CONFIG_CFI; do
    enabled "$option" && stop "$option" "kernel control-flow integrity (kCFI, a Clang-built kernel) is not supported"
done
enabled CONFIG_CPU_BIG_ENDIAN && stop CONFIG_CPU_BIG_ENDIAN "the Rust targets used are little-endian"

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

# Frame pointers, on both architectures: with CONFIG_FRAME_POINTER the
# kernel gives C -fno-omit-frame-pointer and Rust -Cforce-frame-pointers=y
# (top Makefile, Linux 6.1 and 6.12); x86's frame-pointer unwinder needs
# them in every function, and objtool's stack validation rejects a call
# made without one (Ubuntu's 24.04 and later kernels). Linux 6.12 adds
# LLVM's module flag for rustc before 1.98 (rust-lang/rust#156980), so
# frame pointers reach the functions LLVM itself makes too.
if enabled CONFIG_FRAME_POINTER; then
    need CONFIG_FRAME_POINTER -Cforce-frame-pointers=y
    if rustc_older_than 1 98 && probe -Zllvm_module_flag=frame-pointer:u32:2:max; then
        flags="$flags -Zllvm_module_flag=frame-pointer:u32:2:max"
    fi
fi

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
        need CONFIG_ARM64_BTI_KERNEL -Zbranch-protection=bti,pac-ret
    elif enabled CONFIG_ARM64_PTR_AUTH_KERNEL; then
        need CONFIG_ARM64_PTR_AUTH_KERNEL -Zbranch-protection=pac-ret
    fi
    if enabled CONFIG_SHADOW_CALL_STACK; then
        # rustc accepts the sanitizer on this target only with x18 reserved.
        if enabled CONFIG_DYNAMIC_SCS; then
            need CONFIG_SHADOW_CALL_STACK -Zfixed-x18
        else
            need CONFIG_SHADOW_CALL_STACK -Zfixed-x18 -Zsanitizer=shadow-call-stack
        fi
    fi
    # CONFIG_UNWIND_TABLES (Linux 6.12 arch/arm64/Makefile, for the
    # dynamic shadow call stack's patching): unwind tables in every
    # function, as the kernel gives its own Rust.
    if enabled CONFIG_UNWIND_TABLES; then
        flags=$(echo "$flags" | sed 's/-Cforce-unwind-tables=n/-Cforce-unwind-tables=y/')
        need CONFIG_UNWIND_TABLES -Zuse-sync-unwind=n
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
        need CONFIG_RETPOLINE -Ctarget-feature=+retpoline-external-thunk,+retpoline-indirect-branches,+retpoline-indirect-calls
    fi
    # gcc's -mindirect-branch-cs-prefix, where the compiler has it (the
    # kernel adds it with cc-option): lets the kernel rewrite the thunk calls
    # in place (ITS, retpoline patching). Optional as it is for C.
    if probe -Zindirect-branch-cs-prefix; then flags="$flags -Zindirect-branch-cs-prefix"; fi
fi
enabled CONFIG_RETHUNK CONFIG_MITIGATION_RETHUNK && need CONFIG_RETHUNK -Zfunction-return=thunk-extern
enabled CONFIG_SLS CONFIG_MITIGATION_SLS && need CONFIG_SLS -Ctarget-feature=+harden-sls-ijmp,+harden-sls-ret
enabled CONFIG_X86_KERNEL_IBT && need CONFIG_X86_KERNEL_IBT -Zcf-protection=branch
if enabled CONFIG_CALL_PADDING; then
    padding=$(value CONFIG_FUNCTION_PADDING_BYTES)
    case "$padding" in
        ''|*[!0-9]*) stop CONFIG_CALL_PADDING "CONFIG_FUNCTION_PADDING_BYTES is '$padding', not a number" ;;
    esac
    need CONFIG_CALL_PADDING "-Zpatchable-function-entry=$padding,$padding"
fi
echo "$flags"
