#!/bin/sh
# Usage: verify-object.sh <kmod dir>
# Checks what the module loader and the kernel's mitigations require of the
# Rust object, after every build (docs/kmod-build.md):
#   - no GOTPCREL relocations: the module loader rejects them;
#   - no SSE/AVX registers: kernel code must not touch FPU state;
#   - objtool printed nothing about the module.
set -eu
dir=$1
obj=$dir/nv_peer_mem_rust.o
ko=$dir/nv_peer_mem.ko
log=$dir/build/kbuild.log
fail=0
[ -f "$ko" ] || { echo "nv_peer_mem: verify: $ko was not built" >&2; exit 1; }
if readelf -rW "$obj" | grep -q GOTPCREL; then
    echo "nv_peer_mem: verify: GOTPCREL relocations in $obj (the module loader rejects them; is -Zplt=yes -Crelocation-model=static in effect?)" >&2
    fail=1
fi
if objdump -d "$obj" | grep -Eq '%[xyz]mm[0-9]'; then
    echo "nv_peer_mem: verify: SSE/AVX registers used in $obj (kernel code must be soft-float)" >&2
    fail=1
fi
if [ -f "$log" ] && grep -E 'objtool' "$log" | grep -Ev '^ *(OBJTOOL|LD)' | grep -q .; then
    echo "nv_peer_mem: verify: objtool reported problems:" >&2
    grep -E 'objtool' "$log" | grep -Ev '^ *(OBJTOOL|LD)' >&2
    fail=1
fi
[ "$fail" = 0 ] && echo "nv_peer_mem: verified $ko: no GOTPCREL, no SSE/AVX, objtool silent"
exit $fail
