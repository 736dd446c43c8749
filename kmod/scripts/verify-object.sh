#!/bin/sh
# Usage: verify-object.sh <kmod dir>
# Checks what the module loader and the kernel's mitigations require of the
# Rust object, after every build (docs/kmod-build.md):
#   - no GOT relocations: the module loader rejects them;
#   - no FP/SIMD registers (x86_64: SSE/AVX; arm64: the V registers):
#     kernel code must not touch FPU state;
#   - x86_64: objtool printed nothing about the module;
#   - arm64: the Rust object's branch protection (its GNU property note:
#     PAC, BTI) is the C glue's, which Kbuild compiled with the kernel's own
#     -mbranch-protection; and no Rust function's address is taken (every
#     reference to Rust code is a direct BL/B), so indirect calls reach only
#     C glue functions, whose landing pads gcc emits.
# Cross builds pass CROSS_COMPILE (kmod/Makefile does) for a disassembler of
# the module's architecture.
set -eu
dir=$1
obj=$dir/nv_peer_mem_rust.o
glue=$dir/glue/nv_peer_mem_glue.o
ko=$dir/nv_peer_mem.ko
log=$dir/build/kbuild.log
fail=0
complain() { echo "nv_peer_mem: verify: $*" >&2; fail=1; }
[ -f "$ko" ] || { echo "nv_peer_mem: verify: $ko was not built" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# To files, not pipes: a failing objdump must fail the check, not pass it.
readelf -hrW "$obj" >"$tmp/rust.rel"
if ! "${CROSS_COMPILE:-}objdump" -d "$obj" >"$tmp/rust.dis" 2>"$tmp/objdump.err" || [ -s "$tmp/objdump.err" ]; then
    echo "nv_peer_mem: verify: cannot disassemble $obj with ${CROSS_COMPILE:-}objdump: $(cat "$tmp/objdump.err")" >&2
    exit 1
fi
got=$(grep -o 'R_[A-Z0-9_]*GOT[A-Z0-9_]*' "$tmp/rust.rel" | sort -u || true)
if [ -n "$got" ]; then
    complain "GOT relocations ($(echo $got)) in $obj (the module loader rejects them; is -Crelocation-model=static (and -Zplt=yes on x86_64) in effect?)"
fi
case "$(sed -n 's/^ *Machine: *//p' "$tmp/rust.rel")" in
AArch64)
    # Operands naming a V register as v/q/d/s/h/b<n> (objdump's AArch64 syntax).
    if grep -Eq '[[:space:],{[](v|q|d|s|h|b)([0-9]|[12][0-9]|3[01])([.,}]|$)' "$tmp/rust.dis"; then
        complain "FP/SIMD registers used in $obj (kernel code must be soft-float):"
        grep -E '[[:space:],{[](v|q|d|s|h|b)([0-9]|[12][0-9]|3[01])([.,}]|$)' "$tmp/rust.dis" | head -n 5 >&2
    fi
    features() { readelf -nW "$1" | sed -n 's/.*AArch64 feature: *//p'; }
    rust_bp=$(features "$obj") glue_bp=$(features "$glue")
    if [ "$rust_bp" != "$glue_bp" ]; then
        complain "branch protection differs: Rust object '${rust_bp:-none}', C glue '${glue_bp:-none}' (rust-flags.sh must follow the kernel's CONFIG_ARM64_BTI_KERNEL / CONFIG_ARM64_PTR_AUTH_KERNEL)"
    fi
    # Relocations against Rust code other than calls and tail calls: in the
    # Rust object, any against .text or one of its functions; in the glue,
    # any against an nvpm_rs_* function.
    readelf -sW "$obj" | awk '$4 == "FUNC" && $7 != "UND" { print $8 }' >"$tmp/rust.funcs"
    readelf -rW "$glue" >"$tmp/glue.rel"
    refs() { awk '$3 ~ /^R_AARCH64_/ && $3 !~ /CALL26|JUMP26/ { print $5 }' "$1"; }
    taken=$( { refs "$tmp/rust.rel" | grep -Fx -e .text -f "$tmp/rust.funcs" || true;
               refs "$tmp/glue.rel" | grep -Fx -f "$tmp/rust.funcs" || true; } | sort -u)
    if [ -n "$taken" ]; then
        complain "the address of Rust code is taken (an indirect call target needs a BTI landing pad; keep callbacks in the C glue): $(echo $taken)"
    fi
    [ "$fail" = 0 ] && echo "nv_peer_mem: verified $ko: arm64, no GOT, no FP/SIMD, branch protection '${rust_bp:-none}' as the glue's, Rust reached by direct calls only"
    ;;
*)
    if grep -Eq '%[xyz]mm[0-9]' "$tmp/rust.dis"; then
        complain "SSE/AVX registers used in $obj (kernel code must be soft-float)"
    fi
    if [ -f "$log" ] && grep -E 'objtool' "$log" | grep -Ev '^ *(OBJTOOL|LD)' | grep -q .; then
        complain "objtool reported problems:"
        grep -E 'objtool' "$log" | grep -Ev '^ *(OBJTOOL|LD)' >&2
    fi
    [ "$fail" = 0 ] && echo "nv_peer_mem: verified $ko: no GOTPCREL, no SSE/AVX, objtool silent"
    ;;
esac
exit $fail
