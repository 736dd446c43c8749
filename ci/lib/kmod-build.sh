# What the module build suites (ci/test-kmod.sh on this host's kernel
# trees, ci/test-suites.sh in newer suites' chroots) read from a build.

# verified_object LOG: the build whose output is LOG verified the Rust
# object (kmod/scripts/verify-object.sh: no GOTPCREL relocation, no SSE or
# AVX instruction, objtool silent).
verified_object() { grep -q 'verified .*no GOTPCREL, no SSE/AVX, objtool silent' "$1"; }
