# The next-boot verdict (issue 26, docs/next-boot.md) over fake root
# trees made of real built modules: what the unit tests check with
# synthetic ELF files (readiness/src/next_boot_tests.rs), here with the
# modules this project and its stand-ins really build. Sourced by
# ci/test-fleet.sh, which built them; it needs from there check(), $work,
# $k1, $k2, $p1, $p2 (the module packages for $k1 and $k2), the signed
# package of $k1 in $work/signed, $work/standins/<kernel>/ (vm-standins:
# MLNX_OFED's PeerDirect core as ib_core.ko, its abi_variant/ with other
# ib_* CRCs, the NVIDIA double as nvidia.ko) and Debian's kernel package of
# $k1 (ci/image.sh kernel-debs), whose own ib_core.ko and ib_uverbs.ko (the
# kernel's RDMA stack, no PeerDirect API) and /boot/config are taken.
#
# Each tree is NV_PEER_MEM_ROOT for the packaged gpudirect-rdma-check;
# modules.dep is depmod's own (depmod -b), so modprobe's choice between
# updates/, extra/ and kernel/ is depmod's, not ours. The package origin is
# what dpkg records: its .list file, written from the package's contents.

nbt=$work/next-boot-trees
check_bin=$root/target/release/gpudirect-rdma-check
rm -rf "$nbt" && mkdir -p "$nbt/pkg1" "$nbt/pkg2" "$nbt/pkg-signed" "$nbt/kernel"
nb_unpack() {
    dpkg-deb -x "$p1" "$nbt/pkg1" && dpkg-deb -x "$p2" "$nbt/pkg2" &&
        dpkg-deb -x "$work/signed/$(basename "$p1")" "$nbt/pkg-signed" || return 1
    local image
    image=$(bash "$here/image.sh" kernel-debs "$k1" 2>>"$work/log" | grep "/linux-image-$k1-unsigned_") || return 1
    dpkg-deb --fsys-tarfile "$image" | tar -x -C "$nbt/kernel" -f - --wildcards \
        "./lib/modules/$k1/kernel/drivers/infiniband/core/ib_core.ko" \
        "./lib/modules/$k1/kernel/drivers/infiniband/core/ib_uverbs.ko" "./boot/config-$k1"
}
check "next-boot trees: the module packages, the signed one and Debian's $k1 (its ib_core, ib_uverbs, config) unpacked" nb_unpack
check "gpudirect-rdma-check builds" cargo build --release --locked -q -p readiness

# nb_tree NAME [NV_PEER_MEM-KO [IB_CORE-KO|none [NVIDIA-KO|none]]]: a root
# with Debian's $k1 modules and config, nv_peer_mem (default: the $k1
# package's, recorded as installed by it), ib_core (default: MLNX_OFED's
# stand-in) and nvidia (default: the double) in updates/; then depmod.
nb_tree() {
    local t=$nbt/$1 ko=${2:-$nbt/pkg1/lib/modules/$k1/updates/nv_peer_mem.ko}
    local ib=${3:-$work/standins/$k1/ib_core.ko} nv=${4:-$work/standins/$k1/nvidia.ko}
    local u=$t/lib/modules/$k1/updates
    rm -rf "$t" && mkdir -p "$u" "$t/boot" "$t/var/lib/dpkg/info" &&
        cp -a "$nbt/kernel/lib" "$t/" && cp "$nbt/kernel/boot/config-$k1" "$t/boot/" || return 1
    [ "$ko" = none ] || cp "$ko" "$u/nv_peer_mem.ko" || return 1
    [ "$ib" = none ] || cp "$ib" "$u/ib_core.ko" || return 1
    [ "$nv" = none ] || cp "$nv" "$u/nvidia.ko" || return 1
    if [ "$ko" = "$nbt/pkg1/lib/modules/$k1/updates/nv_peer_mem.ko" ]; then
        dpkg-deb -c "$p1" | awk '{ sub(/^\./, "", $6); if ($6 != "/") print $6 }' | sed 's:/$::' \
            >"$t/var/lib/dpkg/info/nvidia-peer-memory-modules-$k1.list"
    fi
    depmod -b "$t" "$k1" 2>>"$work/log"
}
# nb_says TREE EXIT PATTERN... : gpudirect-rdma-check ARGS (default
# --kernel $k1; set nb_args) over TREE exits EXIT and says every PATTERN
# (fixed strings).
nb_says() {
    local t=$nbt/$1 want=$2 out rc p
    shift 2
    out=$(NV_PEER_MEM_ROOT=$t "$check_bin" ${nb_args:---kernel $k1} 2>&1)
    rc=$?
    echo "$out"
    [ "$rc" = "$want" ] || { echo "exit status $rc, want $want"; return 1; }
    for p in "$@"; do echo "$out" | grep -qF -- "$p" || { echo "missing: $p"; return 1; }; done
}

nb_tree ok
check "next boot, real modules: the prebuilt package's module, MLNX_OFED's ib_core and the NVIDIA double: OK (exit 0), vermagic compared with the kernel's own modules" \
    nb_says ok 0 "NEXT BOOT OK: nv_peer_mem will load on $k1" \
    "ok   module    modprobe loads /lib/modules/$k1/updates/nv_peer_mem.ko, from the prebuilt package nvidia-peer-memory-modules-$k1" \
    "ok   vermagic" "ok   symbols   every imported symbol is exported with the CRC nv_peer_mem was built against: ib_core 2, nvidia 8"
nb_tree crc "" "$work/standins/$k1/abi_variant/ib_core.ko"
check "next boot, real modules: MLNX_OFED's ib_core rebuilt with other ib_* CRCs: LOST (exit 4), the symbol and both CRCs named, the rebuild" \
    nb_says crc 4 "NEXT BOOT LOST: nv_peer_mem will not load on $k1" \
    "FAIL symbols   ib_core (/lib/modules/$k1/updates/ib_core.ko) exports another version of ib_register_peer_memory_client" \
    "build-modules --kernel $k1"
nb_tree inbox "" none
check "next boot, real modules: only the kernel's own ib_core (no PeerDirect API): LOST (exit 4), install MLNX_OFED" \
    nb_says inbox 4 "FAIL symbols   nothing installed for $k1 exports ib_register_peer_memory_client" \
    "fix: install the MLNX_OFED kernel modules (ib_core with the PeerDirect API) for $k1"
nb_tree nonvidia "" "" none
check "next boot, real modules: no NVIDIA driver for the kernel: LOST (exit 4), an nvidia_p2p_* import named" \
    nb_says nonvidia 4 "NEXT BOOT LOST" "exports nvidia_p2p_"
nb_tree vermagic "$nbt/pkg2/lib/modules/$k2/updates/nv_peer_mem.ko"
# With CONFIG_MODVERSIONS the kernel compares vermagic from the first space
# on (same_magic(), kernel/module/version.c; docs/next-boot.md): another
# release's build passes that and is refused on its symbol versions.
check "next boot, real modules: $k2's module in $k1's tree: vermagic fits as the kernel compares it (release aside), LOST (exit 4) on ib_register_peer_memory_client's CRC" \
    nb_says vermagic 4 "ok   vermagic  \`$k2 SMP" "exports another version of ib_register_peer_memory_client"
nb_precedence() {
    nb_tree precedence && mkdir -p "$nbt/precedence/lib/modules/$k1/extra" &&
        cp "$nbt/pkg2/lib/modules/$k2/updates/nv_peer_mem.ko" "$nbt/precedence/lib/modules/$k1/extra/" &&
        depmod -b "$nbt/precedence" "$k1" 2>>"$work/log" &&
        nb_says precedence 0 "modprobe loads /lib/modules/$k1/updates/nv_peer_mem.ko"
}
check "next boot, real modules: updates/ before extra/ as depmod orders them (a $k2 build in extra/ is not the one loaded): OK" nb_precedence
nb_tree none none
check "next boot, real modules: no nv_peer_mem for the kernel: LOST (exit 4), the package to install" \
    nb_says none 4 "FAIL module    no nv_peer_mem for $k1: modprobe finds none" "apt-get install nvidia-peer-memory-modules-$k1"
nb_tree nodep && rm -f "$nbt/nodep/lib/modules/$k1/modules.dep" "$nbt/nodep/lib/modules/$k1/modules.dep.bin"
check "next boot, real modules: modules.dep missing: cannot tell (exit 7), depmod named, no verdict" \
    nb_says nodep 7 "NEXT BOOT UNKNOWN" "depmod has not run for $k1" "fix: depmod $k1"
nb_tree baddep && rm -f "$nbt/baddep/lib/modules/$k1/modules.dep" && mkdir "$nbt/baddep/lib/modules/$k1/modules.dep"
check "next boot, real modules: modules.dep unreadable (a directory): cannot tell (exit 7), no verdict" \
    nb_says baddep 7 "NEXT BOOT UNKNOWN" "could not read $nbt/baddep/lib/modules/$k1/modules.dep"
nb_tree sigforce && sed -i 's/^# CONFIG_MODULE_SIG_FORCE is not set$/CONFIG_MODULE_SIG_FORCE=y/' "$nbt/sigforce/boot/config-$k1"
check "next boot, real modules: a kernel built with CONFIG_MODULE_SIG_FORCE and the unsigned module: LOST (exit 4) on its signature" \
    nb_says sigforce 4 "FAIL signature unsigned, and $k1 loads only signed modules (CONFIG_MODULE_SIG_FORCE)"
# The module build-modules signed with the test key (sign-file's PKCS#7,
# issuer and serial), judged by whether the kernel would trust that key
# (readiness/src/signing_keys.rs): Debian's $k1 config, enforcing by
# CONFIG_MODULE_SIG_FORCE or by Secure Boot's lockdown
# (CONFIG_LOCK_DOWN_IN_EFI_SECURE_BOOT=y in it).
signer="'nv_peer_mem test signing key', serial $(openssl x509 -in "$work/signing.der" -inform DER -noout -serial | sed 's/^serial=//' | tr 'A-F' 'a-f')"
# nb_firmware TREE SECUREBOOT CERT.der: efivarfs's SecureBoot (4 bytes of
# attributes, then the value) and MokListRT holding CERT in one
# EFI_SIGNATURE_LIST (UEFI 2.10 §32.4.1: the X.509 type's GUID, list,
# header and entry sizes, then the owner's GUID and the DER).
nb_firmware() {
    local v=$nbt/$1/sys/firmware/efi/efivars
    mkdir -p "$v" &&
        printf '\x06\x00\x00\x00\x0'"$2" >"$v/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c" &&
        python3 - "$3" "$v/MokListRT-605dab50-e046-4300-abb6-3dd810dd8b23" <<'PY'
import struct, sys, uuid
cert = open(sys.argv[1], "rb").read()
entry = uuid.UUID("605dab50-e046-4300-abb6-3dd810dd8b23").bytes_le + cert
esl = uuid.UUID("a5c059a1-94e4-4aa7-87b5-ab155c2bf072").bytes_le + struct.pack("<III", 28 + len(entry), 0, len(entry)) + entry
open(sys.argv[2], "wb").write(struct.pack("<I", 6) + esl)
PY
}
nb_signed() {  # TREE: the signed package's module under CONFIG_MODULE_SIG_FORCE
    nb_tree "$1" "$nbt/pkg-signed/lib/modules/$k1/updates/nv_peer_mem.ko" &&
        sed -i 's/^# CONFIG_MODULE_SIG_FORCE is not set$/CONFIG_MODULE_SIG_FORCE=y/' "$nbt/$1/boot/config-$k1"
}
nb_signed signed
check "next boot, real modules: the same kernel and the module build-modules signed, its key in no keyring and Secure Boot off: LOST (exit 4), the signer and mokutil named" \
    nb_says signed 4 "NEXT BOOT LOST" "FAIL signature signed by $signer, a key $k1 will not trust: Secure Boot is off" "mokutil --import"
nb_signed signed-mok && nb_firmware signed-mok 1 "$work/signing.der"
check "next boot, real modules: Secure Boot on, its certificate in MokListRT: OK (exit 0), the MOK list named" \
    nb_says signed-mok 0 "NEXT BOOT OK" "ok   signature signed by $signer: its certificate is enrolled in the MOK list (MokListRT); $k1 enforces signatures: CONFIG_MODULE_SIG_FORCE, Secure Boot (lockdown)"
nb_other_mok() {
    nb_tree signed-other "$nbt/pkg-signed/lib/modules/$k1/updates/nv_peer_mem.ko" &&
        openssl req -new -nodes -utf8 -sha256 -days 1 -batch -x509 -subj "/CN=nv_peer_mem test signing key/" \
            -newkey rsa:2048 -keyout "$nbt/other.key" -outform DER -out "$nbt/other.der" 2>>"$work/log" &&
        nb_firmware signed-other 1 "$nbt/other.der" &&
        nb_says signed-other 4 "NEXT BOOT LOST" "FAIL signature signed by $signer, a key $k1 will not trust: neither the MOK list (MokListRT) nor db holds its certificate" "Secure Boot (lockdown)"
}
check "next boot, real modules: Secure Boot on, MokListRT holding another certificate of the same name: LOST (exit 4)" nb_other_mok
nb_signed signed-keys && mkdir -p "$nbt/signed-keys/proc" &&
    echo "1d4ea0a6 I------     1 perm 1f010000     0     0 asymmetri nv_peer_mem test signing key: 0123456789abcdef0123456789abcdef01234567 X509.rsa 01234567 []" >"$nbt/signed-keys/proc/keys"
check "next boot, real modules: a key of its issuer's name in the running kernel's keyrings (/proc/keys): OK (exit 0), said as what files can tell" \
    nb_says signed-keys 0 "NEXT BOOT OK" "ok   signature signed by $signer: a key of that name is in the running kernel's keyrings"
nb_tree loaderless
nb_args=--next-boot check "next boot, real modules: --next-boot with no boot loader and no /vmlinuz link: cannot tell (exit 7)" \
    nb_says loaderless 7 "NEXT BOOT UNKNOWN" "cannot tell: no /boot/grub/grub.cfg"
nb_tree linked && ln -s "boot/vmlinuz-$k1" "$nbt/linked/vmlinuz"
nb_args=--next-boot check "next boot, real modules: --next-boot follows Debian's /vmlinuz link to $k1: OK (exit 0)" \
    nb_says linked 0 "NEXT BOOT OK: nv_peer_mem will load on $k1"
nb_args="--kernel 9.9.9" check "next boot: --kernel 9.9.9, a kernel this root does not have: says so, exit 4" \
    nb_says ok 4 "kernel 9.9.9 is not installed (no /lib/modules/9.9.9)"
