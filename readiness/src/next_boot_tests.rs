//! Tests of the next-boot verdict (next_boot.rs) and of finding the next
//! boot's kernel (boot_loader.rs) over fake roots: module files in ELF's
//! real layout (elf::tests::ModuleBytes), modules.dep and modules.symbols
//! as depmod writes them, grub.cfg as Debian's grub-mkconfig and RHEL's
//! BLS setup write it, systemd-boot's loader.conf and EFI variables.

use crate::boot_loader::{self, NextBoot};
use crate::elf::tests::{ModuleBytes, signed};
use crate::next_boot::{self, Verdict};
use crate::report::Status;
use std::path::PathBuf;

const K1: &str = "6.1.0-56-amd64";
const K2: &str = "6.12.95+deb12-amd64";
const MAGIC_FLAGS: &str = "SMP preempt mod_unload modversions ";

struct Root(PathBuf);

impl Root {
    fn new(name: &str) -> Root {
        let p = std::env::temp_dir().join(format!("nvpm-nextboot-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Root(p)
    }
    /// DKMS's tree after `dkms install` of nv_peer_mem 1.4.0 for @k: its
    /// build and the kernel-<k>-<arch> link.
    fn dkms_installed(&self, k: &str) {
        self.write(
            &format!("var/lib/dkms/nv_peer_mem/1.4.0/{k}/x86_64/module/nv_peer_mem.ko"),
            "",
        );
        std::os::unix::fs::symlink(
            format!("1.4.0/{k}/x86_64"),
            self.0
                .join(format!("var/lib/dkms/nv_peer_mem/kernel-{k}-x86_64")),
        )
        .unwrap();
    }
    fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    /// A kernel @k with its own ib_core (exporting @core_crc), the NVIDIA
    /// driver's module and nv_peer_mem at @ours (None: not installed),
    /// modules.dep and modules.symbols as depmod writes them.
    fn kernel(&self, k: &str, core_crc: u32, ours: Option<(&str, Vec<u8>)>) {
        let m = format!("lib/modules/{k}");
        self.write(
            &format!("{m}/kernel/drivers/infiniband/core/ib_uverbs.ko"),
            ModuleBytes::new()
                .info("vermagic", &format!("{k} {MAGIC_FLAGS}"))
                .build(),
        );
        self.write(
            &format!("{m}/updates/ib_core.ko"),
            ModuleBytes::new()
                .info("vermagic", &format!("{k} {MAGIC_FLAGS}"))
                .export("ib_register_peer_memory_client", core_crc, false)
                .build(),
        );
        self.write(
            &format!("{m}/updates/nvidia.ko"),
            ModuleBytes::new()
                .info("vermagic", &format!("{k} {MAGIC_FLAGS}"))
                .export("nvidia_p2p_get_pages", 0x5555_5555, false)
                .build(),
        );
        let mut dep = String::from(
            "kernel/drivers/infiniband/core/ib_uverbs.ko:\nupdates/ib_core.ko:\nupdates/nvidia.ko:\n",
        );
        if let Some((rel, bytes)) = ours {
            self.write(&format!("{m}/{rel}"), bytes);
            dep.push_str(&format!("{rel}: updates/ib_core.ko updates/nvidia.ko\n"));
        }
        self.write(&format!("{m}/modules.dep"), dep);
        self.write(
            &format!("{m}/modules.symbols"),
            "# Aliases for symbols, used by symbol_request().\nalias symbol:ib_register_peer_memory_client ib_core\nalias symbol:nvidia_p2p_get_pages nvidia\n",
        );
        self.write(
            &format!("boot/System.map-{k}"),
            "ffffffff81000000 T _text\nffffffff82a5b0c0 r __ksymtab_kmalloc\n",
        );
    }
    /// MLNX_OFED gone for @k: modules.symbols lists the NVIDIA driver's
    /// export only, as depmod writes it once ib_core is removed.
    fn without_mofed(&self, k: &str) {
        self.write(
            &format!("lib/modules/{k}/modules.symbols"),
            "alias symbol:nvidia_p2p_get_pages nvidia\n",
        );
    }
    fn verdict(&self, k: &str) -> Verdict {
        next_boot::verdict(&self.0, k, "--kernel".into(), None, false)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// nv_peer_mem's modinfo for @k (version, vermagic), its symbols to add.
fn ours_for(k: &str) -> ModuleBytes {
    ModuleBytes::new()
        .info("version", "1.4.0")
        .info("vermagic", &format!("{k} {MAGIC_FLAGS}"))
}

/// nv_peer_mem built for @k against ib_core's @core_crc.
fn ours(k: &str, core_crc: u32) -> Vec<u8> {
    ours_for(k)
        .import("ib_register_peer_memory_client", core_crc)
        .import("nvidia_p2p_get_pages", 0x5555_5555)
        .import("kmalloc", 0x1234_5678)
        .build()
}

fn line(v: &Verdict, check: &str) -> String {
    v.facts
        .iter()
        .filter(|f| f.check == check)
        .map(|f| {
            format!(
                "{:?} {} {}",
                f.status,
                f.message,
                f.fix.clone().unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_dkms_build_that_fits_will_load() {
    let r = Root::new("fits");
    r.kernel(
        K2,
        0x1111_1111,
        Some(("updates/dkms/nv_peer_mem.ko", ours(K2, 0x1111_1111))),
    );
    r.dkms_installed(K2);
    let v = r.verdict(K2);
    assert_eq!(v.loads(), Some(true), "{v:#?}");
    assert_eq!(v.exit_status(), 0);
    assert_eq!(v.stale_symbol, None);
    assert!(crate::next_boot_render::json(&v).contains(",\"stale_symbol\":null,\"facts\":["));
    assert!(line(&v, "module").contains(&format!(
        "/lib/modules/{K2}/updates/dkms/nv_peer_mem.ko, from DKMS's build"
    )));
    assert!(
        line(&v, "vermagic").starts_with("Ok"),
        "{}",
        line(&v, "vermagic")
    );
    assert!(
        line(&v, "symbols").contains("ib_core 1, nvidia 1, 1 from the kernel by name only"),
        "{}",
        line(&v, "symbols")
    );
    assert!(
        line(&v, "signature").contains("unsigned"),
        "{}",
        line(&v, "signature")
    );
    assert!(
        line(&v, "dkms").contains(&format!("installed for {K2}")),
        "{}",
        line(&v, "dkms")
    );
    let text = crate::next_boot_render::human(&v);
    assert!(
        text.ends_with(&format!("NEXT BOOT OK: nv_peer_mem will load on {K2}\n")),
        "{text}"
    );
    let prom = crate::next_boot_render::prometheus(&v);
    assert!(
        prom.contains(&format!("gpudirect_rdma_next_boot{{kernel=\"{K2}\"}} 1\n")),
        "{prom}"
    );
}

/// Debian's /boot/System.map is a stub that lists nothing: the kernel's
/// own symbols are then not checked, never called missing (found by the
/// booted fleet node, whose nodes have no kernel headers).
#[test]
fn debians_stub_system_map_is_no_list_of_exports() {
    let r = Root::new("stub-map");
    r.kernel(
        K2,
        0x1111_1111,
        Some(("updates/nv_peer_mem.ko", ours(K2, 0x1111_1111))),
    );
    r.write(
        &format!("boot/System.map-{K2}"),
        "ffffffffffffffff B The real System.map is in the linux-image-<version>-dbg package\n",
    );
    let v = r.verdict(K2);
    assert_eq!(v.loads(), Some(true), "{v:#?}");
    assert!(
        line(&v, "symbols").contains("1 not found in any module, taken as the kernel's own"),
        "{}",
        line(&v, "symbols")
    );
    // a Module.symvers from the kernel's headers checks them by CRC
    r.write(
        &format!("lib/modules/{K2}/build/Module.symvers"),
        "0x12345678\tkmalloc\tvmlinux\tEXPORT_SYMBOL\t\n",
    );
    assert!(
        line(&r.verdict(K2), "symbols").contains("the kernel 1"),
        "{}",
        line(&r.verdict(K2), "symbols")
    );
    r.write(
        &format!("lib/modules/{K2}/build/Module.symvers"),
        "0x0badc0de\tkmalloc\tvmlinux\tEXPORT_SYMBOL\t\n",
    );
    assert_eq!(r.verdict(K2).loads(), Some(false));
}

#[test]
fn a_provider_with_other_crcs_is_named_and_it_will_not_load() {
    let r = Root::new("crc");
    // MLNX_OFED was updated for K2; nv_peer_mem was built against the old one
    r.kernel(
        K2,
        0x0bad_c0de,
        Some(("updates/nv_peer_mem.ko", ours(K2, 0x1111_1111))),
    );
    let v = r.verdict(K2);
    assert_eq!(v.loads(), Some(false));
    assert_eq!(v.exit_status(), 4);
    let s = line(&v, "symbols");
    assert!(s.contains("ib_core (/lib/modules/6.12.95+deb12-amd64/updates/ib_core.ko) exports another version of ib_register_peer_memory_client (0x0badc0de; nv_peer_mem was built against 0x11111111)"), "{s}");
    // A package's module: the package is built again, against that
    // MLNX_OFED (a DKMS build: below).
    assert!(
        s.contains(" build nvidia-peer-memory-modules-6.12.95+deb12-amd64 again against MLNX_OFED's modules installed for 6.12.95+deb12-amd64 (cargo xtask build-modules --kernel 6.12.95+deb12-amd64 --release <one more than the last>), publish it with build-repo, then: apt-get update && apt-get install nvidia-peer-memory-modules-6.12.95+deb12-amd64"),
        "{s}"
    );
    // The same, for the hooks that act on it (the JSON form's stale_symbol).
    assert_eq!(
        v.stale_symbol,
        Some(next_boot::StaleSymbol {
            symbol: "ib_register_peer_memory_client".into(),
            provider: "ib_core".into(),
            exported: 0x0bad_c0de,
            built_against: 0x1111_1111,
        })
    );
    let json = crate::next_boot_render::json(&v);
    assert!(
        json.contains(",\"stale_symbol\":{\"symbol\":\"ib_register_peer_memory_client\",\"provider\":\"ib_core\",\"exported\":\"0x0badc0de\",\"built_against\":\"0x11111111\"},\"facts\":["),
        "{json}"
    );
    let prom = crate::next_boot_render::prometheus(&v);
    assert!(
        prom.contains(&format!("gpudirect_rdma_next_boot{{kernel=\"{K2}\"}} 0\n")),
        "{prom}"
    );
    assert!(
        prom.contains(&format!(
            "gpudirect_rdma_next_boot_known{{kernel=\"{K2}\"}} 1\n"
        )),
        "{prom}"
    );
    // DKMS's build of it: DKMS rebuilds it.
    let r = Root::new("crc-dkms");
    r.kernel(
        K2,
        0x0bad_c0de,
        Some(("updates/dkms/nv_peer_mem.ko", ours(K2, 0x1111_1111))),
    );
    let s = line(&r.verdict(K2), "symbols");
    assert!(
        s.contains(" rebuild nv_peer_mem against MLNX_OFED's modules installed for 6.12.95+deb12-amd64: dkms remove nv_peer_mem -k 6.12.95+deb12-amd64 && dkms autoinstall -k 6.12.95+deb12-amd64"),
        "{s}"
    );
    // DKMS's build on Fedora and the RHEL family (extra/) or SUSE
    // (updates/), where dkms puts it: DKMS's tree says it installed it,
    // so DKMS rebuilds it; the same file without that is a package's.
    for (name, path) in [
        ("crc-dkms-extra", "extra/nv_peer_mem.ko"),
        ("crc-dkms-suse", "updates/nv_peer_mem.ko"),
    ] {
        let r = Root::new(name);
        r.kernel(K2, 0x0bad_c0de, Some((path, ours(K2, 0x1111_1111))));
        let s = line(&r.verdict(K2), "symbols");
        assert!(!s.contains("dkms remove"), "{s}");
        r.dkms_installed(K2);
        let v = r.verdict(K2);
        let s = line(&v, "symbols");
        assert!(
            s.contains(&format!(" rebuild nv_peer_mem against MLNX_OFED's modules installed for {K2}: dkms remove nv_peer_mem -k {K2} && dkms autoinstall -k {K2}")),
            "{s}"
        );
        assert!(
            line(&v, "module").contains(&format!("/lib/modules/{K2}/{path}, from DKMS's build")),
            "{}",
            line(&v, "module")
        );
    }
    // RHEL's kmod, its own file or weak-modules' link: the kmod is built
    // again and dnf upgrades it (the dnf plugin prints this line).
    for (name, path) in [
        ("crc-kmod", "extra/nvidia_peer_memory/nv_peer_mem.ko"),
        ("crc-weak", "weak-updates/nvidia_peer_memory/nv_peer_mem.ko"),
    ] {
        let r = Root::new(name);
        r.kernel(K2, 0x0bad_c0de, Some((path, ours(K2, 0x1111_1111))));
        let s = line(&r.verdict(K2), "symbols");
        assert!(
            s.contains(" build kmod-nvidia_peer_memory again against MLNX_OFED's modules installed for 6.12.95+deb12-amd64 (rpmbuild --rebuild of the source rpm with the installed MLNX_OFED's mlnx-ofa_kernel-devel") && s.ends_with("then: dnf upgrade kmod-nvidia_peer_memory"),
            "{s}"
        );
    }
}

#[test]
fn a_missing_provider_is_an_unknown_symbol() {
    let r = Root::new("unknown-symbol");
    r.kernel(
        K2,
        0x1111_1111,
        Some(("updates/nv_peer_mem.ko", ours(K2, 0x1111_1111))),
    );
    // MLNX_OFED not installed for K2: nothing exports the PeerDirect API
    r.without_mofed(K2);
    let v = r.verdict(K2);
    assert_eq!(v.loads(), Some(false));
    assert_eq!(
        v.stale_symbol, None,
        "a missing provider is no rebuild's to mend"
    );
    let s = line(&v, "symbols");
    assert!(s.contains("nothing installed for 6.12.95+deb12-amd64 exports ib_register_peer_memory_client (Unknown symbol): MLNX_OFED kernel modules"), "{s}");
    // the same on a node with no list of the kernel's exports (no headers,
    // Debian's stub System.map): the PeerDirect API is never the kernel's
    std::fs::remove_file(r.0.join(format!("boot/System.map-{K2}"))).unwrap();
    let v = r.verdict(K2);
    assert_eq!(v.loads(), Some(false), "{v:#?}");
}

#[test]
fn no_module_names_the_package_or_dkms_and_an_unlisted_copy_names_depmod() {
    let r = Root::new("none");
    r.kernel(
        K1,
        0x1111_1111,
        Some(("updates/nv_peer_mem.ko", ours(K1, 0x1111_1111))),
    );
    r.kernel(K2, 0x1111_1111, None);
    let v = r.verdict(K2);
    assert_eq!(v.loads(), Some(false));
    let m = line(&v, "module");
    assert!(
        m.contains("no nv_peer_mem for 6.12.95+deb12-amd64: modprobe finds none"),
        "{m}"
    );
    assert!(
        m.contains("apt-get install nvidia-peer-memory-modules-6.12.95+deb12-amd64"),
        "{m}"
    );
    // installed after depmod ran: modprobe does not find it yet
    r.write(
        &format!("lib/modules/{K2}/updates/nv_peer_mem.ko"),
        ours(K2, 0x1111_1111),
    );
    let m = line(&r.verdict(K2), "module");
    assert!(
        m.contains("(updates/nv_peer_mem.ko is installed, but modules.dep does not list it)"),
        "{m}"
    );
    assert!(m.contains(&format!("depmod {K2}")), "{m}");
    // DKMS set up but not built for K2
    std::fs::remove_file(r.0.join(format!("lib/modules/{K2}/updates/nv_peer_mem.ko"))).unwrap();
    r.write("var/lib/dkms/nv_peer_mem/1.4.0/source/dkms.conf", "");
    let v = r.verdict(K2);
    assert!(
        line(&v, "module").contains(&format!("dkms autoinstall -k {K2}")),
        "{}",
        line(&v, "module")
    );
    // no headers for K2: the fix names them first, by the package manager
    // that installed the kernel
    let m = line(&v, "module");
    assert!(
        m.contains(&format!(
            "install what {K2} lacks (its headers), then run: dkms autoinstall -k {K2}"
        )),
        "{m}"
    );
    r.write("var/lib/rpm/rpmdb.sqlite", "");
    let m = line(&r.verdict(K2), "module");
    assert!(
        m.contains(&format!("(its headers, kernel-devel-{K2})")),
        "{m}"
    );
    r.write(&format!("var/lib/dpkg/info/linux-image-{K2}.list"), "");
    let m = line(&r.verdict(K2), "module");
    assert!(
        m.contains(&format!("(its headers, linux-headers-{K2})")),
        "{m}"
    );
    std::fs::remove_dir_all(r.0.join("var/lib/rpm")).unwrap();
    std::fs::remove_file(r.0.join(format!("var/lib/dpkg/info/linux-image-{K2}.list"))).unwrap();
    // headers there: DKMS is asked again, nothing more named
    std::fs::create_dir_all(r.0.join(format!("lib/modules/{K2}/build"))).unwrap();
    let m = line(&r.verdict(K2), "module");
    assert!(
        m.ends_with(&format!(" dkms autoinstall -k {K2}")) && !m.contains("lacks"),
        "{m}"
    );
    assert!(
        line(&v, "dkms").contains(&format!("1.4.0 added, not built for {K2}")),
        "{}",
        line(&v, "dkms")
    );
    // a failed build's log gives the one-line reason
    r.write(
        "var/lib/dkms/nv_peer_mem/1.4.0/build/make.log",
        "make -C kmod\nerror: the Rust toolchain (rustc 1.85 or newer) was not found\nmake: *** [Makefile:9] Error 1\n",
    );
    let d = line(&r.verdict(K2), "dkms");
    assert!(
        d.contains("its last failed build's log says: make: *** [Makefile:9] Error 1"),
        "{d}"
    );
    // both prerequisites there: dkms.conf would build; no skip is claimed
    assert!(!line(&r.verdict(K2), "dkms").contains("skips"));
    // MLNX_OFED exports nothing for K2: dkms.conf skips it, and says why
    r.without_mofed(K2);
    let v = r.verdict(K2);
    let d = line(&v, "dkms");
    assert!(
        d.contains("its dkms.conf skips that kernel: it lacks MLNX_OFED (no ib_register_peer_memory_client)")
            && !d.contains("NVIDIA"),
        "{d}"
    );
    let m = line(&v, "module");
    assert!(
        m.contains(&format!("install what {K2} lacks (MLNX_OFED (no ib_register_peer_memory_client)), then run: dkms autoinstall -k {K2}")),
        "{m}"
    );
    // MLNX_OFED's per-kernel build tree counts, as in dkms.conf
    r.write(
        &format!("usr/src/ofa_kernel/x86_64/{K2}/Module.symvers"),
        "0x11111111\tib_register_peer_memory_client\tdrivers/infiniband/core/ib_core\tEXPORT_SYMBOL\t\n",
    );
    assert!(!line(&r.verdict(K2), "dkms").contains("skips"));
    std::fs::remove_file(r.0.join(format!("usr/src/ofa_kernel/x86_64/{K2}/Module.symvers")))
        .unwrap();
    // neither: both named; a DKMS-registered MLNX_OFED counts as present
    r.write(&format!("lib/modules/{K2}/modules.symbols"), "");
    assert!(line(&r.verdict(K2), "dkms").contains(
        "it lacks MLNX_OFED (no ib_register_peer_memory_client) and the NVIDIA driver (no nvidia_p2p_get_pages)"
    ));
    r.write("var/lib/dkms/mlnx-ofed-kernel/25.10/source/dkms.conf", "");
    let d = line(&r.verdict(K2), "dkms");
    assert!(
        d.contains("it lacks the NVIDIA driver (no nvidia_p2p_get_pages)")
            && !d.contains("MLNX_OFED"),
        "{d}"
    );
    r.write(
        "var/lib/dkms/nvidia-tesla-535/535.216.03/source/dkms.conf",
        "",
    );
    assert!(!line(&r.verdict(K2), "dkms").contains("skips"));
    // not installed at all, depmod never ran
    assert!(line(&r.verdict("6.19.0-1-amd64"), "kernel").contains("is not installed"));
    r.write("lib/modules/6.19.0-1-amd64/kernel/x.ko", "");
    let v = r.verdict("6.19.0-1-amd64");
    assert_eq!(v.loads(), None);
    assert!(
        line(&v, "module").contains("depmod has not run"),
        "{}",
        line(&v, "module")
    );
}

#[test]
fn vermagic_and_signature_refusals() {
    let r = Root::new("refusals");
    let other = ModuleBytes::new()
        .info("vermagic", &format!("{K2} SMP mod_unload modversions "))
        .import("ib_register_peer_memory_client", 0x1111_1111)
        .build();
    r.kernel(K2, 0x1111_1111, Some(("updates/nv_peer_mem.ko", other)));
    let v = r.verdict(K2);
    assert_eq!(v.loads(), Some(false));
    assert!(
        line(&v, "vermagic").contains("does not fit"),
        "{}",
        line(&v, "vermagic")
    );

    let r = Root::new("sig");
    r.kernel(
        K2,
        0x1111_1111,
        Some(("updates/nv_peer_mem.ko", ours(K2, 0x1111_1111))),
    );
    r.write(
        &format!("boot/config-{K2}"),
        "CONFIG_MODULE_SIG=y\nCONFIG_LOCK_DOWN_IN_EFI_SECURE_BOOT=y\n",
    );
    assert_eq!(
        r.verdict(K2).loads(),
        Some(true),
        "no Secure Boot: unsigned loads"
    );
    r.write(
        "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
        [6, 0, 0, 0, 1],
    );
    let v = r.verdict(K2);
    assert_eq!(v.loads(), Some(false));
    assert!(
        line(&v, "signature").contains(
            "unsigned, and 6.12.95+deb12-amd64 loads only signed modules (Secure Boot (lockdown))"
        ),
        "{}",
        line(&v, "signature")
    );
    assert!(line(&v, "signature").contains("mokutil --import"));
    r.write(
        &format!("lib/modules/{K2}/updates/nv_peer_mem.ko"),
        signed(ours(K2, 0x1111_1111)),
    );
    let v = r.verdict(K2);
    assert_eq!(v.loads(), Some(true));
    assert!(
        line(&v, "signature").starts_with(
            "Ok signed (its signer could not be read); 6.12.95+deb12-amd64 enforces signatures"
        ),
        "{}",
        line(&v, "signature")
    );
    // module.sig_enforce on the next boot's command line
    let r = Root::new("sig-enforce");
    r.kernel(
        K2,
        0x1111_1111,
        Some(("updates/nv_peer_mem.ko", ours(K2, 0x1111_1111))),
    );
    let v = next_boot::verdict(
        &r.0,
        K2,
        "test".into(),
        Some("root=/dev/vda ro module.sig_enforce=1"),
        false,
    );
    assert_eq!(v.loads(), Some(false));
}

#[test]
fn a_broken_module_file_is_cannot_tell() {
    let r = Root::new("broken");
    r.kernel(
        K2,
        0x1111_1111,
        Some(("updates/nv_peer_mem.ko", b"not an ELF".to_vec())),
    );
    let v = r.verdict(K2);
    assert_eq!(v.loads(), None);
    assert_eq!(v.exit_status(), 7);
    assert!(
        line(&v, "module").contains("not an ELF file"),
        "{}",
        line(&v, "module")
    );
    assert!(v.facts.iter().any(|f| f.status == Status::Unknown));
}

// --- which kernel boots next ----------------------------------------------

/// grub.cfg as Debian 12's grub-mkconfig writes it (00_header's default
/// logic, 10_linux's entries: the newest kernel first, the others in the
/// "Advanced options" submenu; docs/next-boot.md names the sources).
fn debian_grub_cfg(default: &str) -> String {
    format!(
        r#"#
# DO NOT EDIT THIS FILE
#
### BEGIN /etc/grub.d/00_header ###
if [ -s $prefix/grubenv ]; then
  set have_grubenv=true
  load_env
fi
if [ "${{next_entry}}" ] ; then
   set default="${{next_entry}}"
   set next_entry=
   save_env next_entry
   set boot_once=true
else
   set default="{default}"
fi
function load_video {{
  if [ x$feature_all_video_module = xy ]; then
    insmod all_video
  fi
}}
### END /etc/grub.d/00_header ###
### BEGIN /etc/grub.d/10_linux ###
menuentry 'Debian GNU/Linux' --class debian --class gnu-linux --class gnu --class os $menuentry_id_option 'gnulinux-simple-1234' {{
	load_video
	insmod ext2
	echo	'Loading Linux {K2} ...'
	linux	/boot/vmlinuz-{K2} root=UUID=1234 ro  quiet
	echo	'Loading initial ramdisk ...'
	initrd	/boot/initrd.img-{K2}
}}
submenu 'Advanced options for Debian GNU/Linux' $menuentry_id_option 'gnulinux-advanced-1234' {{
	menuentry 'Debian GNU/Linux, with Linux {K2}' --class debian $menuentry_id_option 'gnulinux-{K2}-advanced-1234' {{
		linux	/boot/vmlinuz-{K2} root=UUID=1234 ro  quiet
	}}
	menuentry 'Debian GNU/Linux, with Linux {K1}' --class debian $menuentry_id_option 'gnulinux-{K1}-advanced-1234' {{
		linux	/boot/vmlinuz-{K1} root=UUID=1234 ro  quiet module.sig_enforce=1
	}}
}}
### END /etc/grub.d/10_linux ###
"#
    )
}

fn grubenv(entries: &str) -> String {
    let mut s = format!("# GRUB Environment Block\n{entries}");
    while s.len() < 1024 {
        s.push('#');
    }
    s
}

fn nb(root: &Root) -> NextBoot {
    boot_loader::next_boot(&root.0)
}

#[test]
fn grub_default_zero_is_the_first_entry_the_newest_kernel() {
    let r = Root::new("grub0");
    r.write("boot/grub/grub.cfg", debian_grub_cfg("0"));
    let n = nb(&r);
    assert_eq!(n.release.as_deref(), Some(K2), "{n:?}");
    assert!(n.how.contains("\"Debian GNU/Linux\""), "{n:?}");
    assert_eq!(n.cmdline.as_deref(), Some("root=UUID=1234 ro  quiet"));
}

#[test]
fn grub_saved_entry_and_the_one_shot_next_entry() {
    let r = Root::new("grub-saved");
    r.write("boot/grub/grub.cfg", debian_grub_cfg("${saved_entry}"));
    r.write(
        "boot/grub/grubenv",
        grubenv(&format!(
            "saved_entry=gnulinux-advanced-1234>gnulinux-{K1}-advanced-1234\n"
        )),
    );
    let n = nb(&r);
    assert_eq!(n.release.as_deref(), Some(K1), "{n:?}");
    assert!(n.how.contains("saved_entry in grubenv"), "{n:?}");
    assert!(n.cmdline.unwrap().contains("module.sig_enforce=1"));
    // by title, and by number inside the submenu
    r.write(
        "boot/grub/grubenv",
        grubenv(&format!(
            "saved_entry=Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux {K1}\n"
        )),
    );
    assert_eq!(nb(&r).release.as_deref(), Some(K1));
    r.write("boot/grub/grubenv", grubenv("saved_entry=1>0\n"));
    assert_eq!(nb(&r).release.as_deref(), Some(K2));
    // grub-reboot's one-shot entry wins
    r.write(
        "boot/grub/grubenv",
        grubenv(&format!(
            "saved_entry=0\nnext_entry=gnulinux-advanced-1234>gnulinux-{K1}-advanced-1234\n"
        )),
    );
    let n = nb(&r);
    assert_eq!(n.release.as_deref(), Some(K1));
    assert!(n.how.contains("next_entry"), "{n:?}");
    // an entry that is not there: GRUB falls back to entry 0
    r.write("boot/grub/grubenv", grubenv("saved_entry=gnulinux-gone\n"));
    let n = nb(&r);
    assert_eq!(n.release.as_deref(), Some(K2), "{n:?}");
    assert!(
        n.how.contains("names no entry") && n.how.contains("falls back to entry 0"),
        "{n:?}"
    );
}

#[test]
fn bls_saved_entry_is_the_entry_file() {
    let r = Root::new("bls");
    r.write(
        "boot/grub2/grub.cfg",
        "set default=\"${saved_entry}\"\ninsmod blscfg\nblscfg\n",
    );
    r.write(
        "boot/grub2/grubenv",
        grubenv("saved_entry=0123abcd-5.14.0-503.11.1.el9_5.x86_64\n"),
    );
    r.write(
        "boot/loader/entries/0123abcd-5.14.0-503.11.1.el9_5.x86_64.conf",
        "title Red Hat Enterprise Linux (5.14.0-503.11.1.el9_5.x86_64) 9.5 (Plow)\nversion 5.14.0-503.11.1.el9_5.x86_64\nlinux /vmlinuz-5.14.0-503.11.1.el9_5.x86_64\ninitrd /initramfs-5.14.0-503.11.1.el9_5.x86_64.img\noptions root=/dev/mapper/rhel-root ro crashkernel=auto\n",
    );
    let n = nb(&r);
    assert_eq!(
        n.release.as_deref(),
        Some("5.14.0-503.11.1.el9_5.x86_64"),
        "{n:?}"
    );
    assert_eq!(
        n.cmdline.as_deref(),
        Some("root=/dev/mapper/rhel-root ro crashkernel=auto")
    );
    r.write("boot/grub2/grubenv", grubenv("saved_entry=0\n"));
    assert!(nb(&r).how.contains("blscfg's sort"), "{:?}", nb(&r));
}

#[test]
fn systemd_boot_one_shot_default_and_patterns() {
    let r = Root::new("sdboot");
    r.write(
        "efi/loader/loader.conf",
        "timeout 3\ndefault debian-6.12.conf\n",
    );
    r.write(
        "efi/loader/entries/debian-6.12.conf",
        format!("title Debian\nlinux /vmlinuz-{K2}\noptions root=/dev/vda\n"),
    );
    r.write(
        "efi/loader/entries/debian-6.1.conf",
        format!("title Debian\nlinux /vmlinuz-{K1}\n"),
    );
    assert_eq!(nb(&r).release.as_deref(), Some(K2));
    let utf16 = |s: &str| -> Vec<u8> {
        let mut b = vec![7, 0, 0, 0];
        for u in s.encode_utf16().chain([0]) {
            b.extend(u.to_le_bytes());
        }
        b
    };
    r.write(
        "sys/firmware/efi/efivars/LoaderEntryOneShot-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f",
        utf16("debian-6.1.conf"),
    );
    let n = nb(&r);
    assert_eq!(n.release.as_deref(), Some(K1));
    assert!(n.how.contains("LoaderEntryOneShot"), "{n:?}");
    std::fs::remove_file(
        r.0.join(
            "sys/firmware/efi/efivars/LoaderEntryOneShot-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f",
        ),
    )
    .unwrap();
    r.write("efi/loader/loader.conf", "default debian-*\n");
    assert!(nb(&r).how.contains("matches 2 entries"), "{:?}", nb(&r));
    r.write("efi/loader/loader.conf", "default Debian-6.12*\n");
    assert_eq!(
        nb(&r).release.as_deref(),
        Some(K2),
        "one match decides: {:?}",
        nb(&r)
    );
    r.write("efi/loader/loader.conf", "default @saved\n");
    assert!(nb(&r).how.starts_with("cannot tell"), "{:?}", nb(&r));
}

#[test]
fn the_vmlinuz_link_is_the_last_resort_and_nothing_is_cannot_tell() {
    let r = Root::new("link");
    assert_eq!(nb(&r).release, None);
    assert!(nb(&r).how.starts_with("cannot tell"));
    std::os::unix::fs::symlink(format!("boot/vmlinuz-{K2}"), r.0.join("vmlinuz")).unwrap();
    let n = nb(&r);
    assert_eq!(n.release.as_deref(), Some(K2));
    assert!(n.how.contains("/vmlinuz points at"), "{n:?}");
}

/// A build that had no Module.symvers for MLNX_OFED imports its symbols
/// with no `__versions` entry: the kernel resolves them by name, so the
/// verdict must find them exported (test-image's DKMS-skip attempt built
/// such a module, and `__versions` alone called it loadable).
#[test]
fn an_unversioned_provider_import_needs_an_exporter() {
    let r = Root::new("unversioned");
    let built_without_mofed = ours_for(K1)
        .import("nvidia_p2p_get_pages", 0x5555_5555)
        .import("kmalloc", 0x1234_5678)
        .undefined("ib_register_peer_memory_client")
        .build();
    r.kernel(
        K1,
        0x1111_1111,
        Some(("updates/dkms/nv_peer_mem.ko", built_without_mofed)),
    );
    // MLNX_OFED's ib_core installed: it loads (no version to compare)
    assert_eq!(
        r.verdict(K1).loads(),
        Some(true),
        "{}",
        line(&r.verdict(K1), "symbols")
    );
    // nothing exports it: Unknown symbol at load, so LOST
    r.without_mofed(K1);
    let v = r.verdict(K1);
    assert_eq!(v.loads(), Some(false));
    let s = line(&v, "symbols");
    assert!(
        s.contains("nothing installed for 6.1.0-56-amd64 exports ib_register_peer_memory_client (Unknown symbol), which nv_peer_mem imports with no recorded version"),
        "{s}"
    );
}

#[test]
fn a_module_without_modversions_still_needs_its_providers_exporters() {
    let r = Root::new("no-modversions");
    // No __versions at all (built without CONFIG_MODVERSIONS): its imports
    // are resolved by name alone. Without CRCs same_magic() compares the
    // whole vermagic, so it is the fake kernel's own string.
    let no_modversions = ours_for(K1)
        .undefined("ib_register_peer_memory_client")
        .undefined("nvidia_p2p_get_pages")
        .undefined("kmalloc")
        .build();
    r.kernel(
        K1,
        0x1111_1111,
        Some(("updates/dkms/nv_peer_mem.ko", no_modversions)),
    );
    let v = r.verdict(K1);
    let s = line(&v, "symbols");
    assert!(
        s.contains("not compared") && s.contains("exported by an installed module"),
        "{s}"
    );
    assert_eq!(v.loads(), Some(true), "{s}");
    // MLNX_OFED gone: Unknown symbol at load, whatever the CRCs
    r.without_mofed(K1);
    let v = r.verdict(K1);
    assert_eq!(v.loads(), Some(false), "{}", line(&v, "symbols"));
    let s = line(&v, "symbols");
    assert!(
        s.contains("nothing installed for 6.1.0-56-amd64 exports ib_register_peer_memory_client (Unknown symbol)"),
        "{s}"
    );
}

/// A node with no PeerDirect core now, none installed for any kernel and
/// nv_peer_mem installed nowhere needs no peer client, so the next boot
/// loses nothing (the lent GPU hosts: DMA-BUF nodes without MLNX_OFED
/// printed NEXT BOOT LOST / UNKNOWN before); anything that says the site
/// wants one (MLNX_OFED's core or nv_peer_mem for any kernel, DKMS, our
/// packages) keeps the verdict as it was.
#[test]
fn a_node_that_wants_no_peer_client_loses_nothing_on_the_next_boot() {
    let r = Root::new("no-core");
    r.kernel(K2, 0x1111_1111, None);
    r.without_mofed(K2);
    assert_eq!(next_boot::client_wanted(&r.0), Some(false));
    let v = next_boot::verdict(&r.0, K2, "--kernel".into(), None, true);
    assert!(v.needs_no_client);
    assert_eq!((v.loads(), v.exit_status()), (Some(true), 0));
    let v = next_boot::verdict(&r.0, "6.99.0-1-amd64", "--kernel".into(), None, true);
    assert_eq!(v.loads(), Some(true));
    let v = next_boot::unknown_kernel("no grub.cfg".into(), true);
    assert_eq!(v.exit_status(), 0);
    assert_eq!(next_boot::unknown_kernel("x".into(), false).loads(), None);
    // no /lib/modules at all (the lent hosts): nothing wanted
    let empty = Root::new("empty");
    assert_eq!(next_boot::client_wanted(&empty.0), Some(false));
    // MLNX_OFED's core installed for some kernel: wanted
    let r = Root::new("core-there");
    r.kernel(K2, 0x1111_1111, None);
    assert_eq!(next_boot::client_wanted(&r.0), Some(true));
    // nv_peer_mem installed for another kernel only: wanted
    let r = Root::new("ours-elsewhere");
    r.kernel(
        K1,
        0x1111_1111,
        Some(("updates/nv_peer_mem.ko", ours(K1, 0x1111_1111))),
    );
    r.without_mofed(K1);
    r.kernel(K2, 0x1111_1111, None);
    r.without_mofed(K2);
    assert_eq!(next_boot::client_wanted(&r.0), Some(true));
    // a kernel whose modules cannot be read: nothing is concluded
    let r = Root::new("unreadable");
    r.kernel(K2, 0x1111_1111, None);
    r.without_mofed(K2);
    std::fs::remove_file(r.0.join(format!("lib/modules/{K2}/modules.dep"))).unwrap();
    assert_eq!(next_boot::client_wanted(&r.0), None);
}

/// On a kernel that exports no mm_kobj (Debian's 6.12) MLNX_OFED's core
/// makes none of the files NCCL tests: the verdict says so beside "will
/// load", and says nothing of it where the kernel exports mm_kobj.
#[test]
fn a_kernel_without_mm_kobj_is_said_to_hide_nv_peer_mem_from_nccl() {
    let r = Root::new("mm-kobj");
    r.kernel(
        K2,
        0x1111_1111,
        Some(("updates/nv_peer_mem.ko", ours(K2, 0x1111_1111))),
    );
    let v = r.verdict(K2);
    assert_eq!(v.loads(), Some(true), "{:?}", v.facts);
    assert!(
        line(&v, "nccl").contains("NCCL will not use nv_peer_mem on"),
        "{:?}",
        v.facts
    );
    assert!(line(&v, "nccl").contains(&format!("/boot/System.map-{K2}")));
    r.write(
        &format!("boot/System.map-{K2}"),
        "ffffffff81000000 T _text\nffffffff82a5b0c0 r __ksymtab_kmalloc\nffffffff82a5b0d0 r __ksymtab_mm_kobj\n",
    );
    let v = r.verdict(K2);
    assert!(v.facts.iter().all(|f| f.check != "nccl"), "{:?}", v.facts);
}

/// A module that makes memory_peers itself where the core makes none
/// (its `memory_peers` parameter, in .modinfo as the kernel's
/// MODULE_PARM_DESC writes it: `parm=memory_peers:<description>`): on the
/// same kernel the verdict says NCCL will see it.
#[test]
fn a_module_that_makes_memory_peers_is_said_to_be_seen_by_nccl() {
    let r = Root::new("mm-kobj-module-makes");
    let module = ours_for(K2)
        .info(
            "parm",
            "memory_peers:Read-only: who made /sys/kernel/mm/memory_peers/<client>/version",
        )
        .import("ib_register_peer_memory_client", 0x1111_1111)
        .import("nvidia_p2p_get_pages", 0x5555_5555)
        .import("kmalloc", 0x1234_5678)
        .build();
    r.kernel(K2, 0x1111_1111, Some(("updates/nv_peer_mem.ko", module)));
    let v = r.verdict(K2);
    assert_eq!(v.loads(), Some(true), "{:?}", v.facts);
    let nccl = line(&v, "nccl");
    assert!(nccl.contains("NCCL will see nv_peer_mem on"), "{nccl}");
    assert!(nccl.contains("makes it itself"), "{nccl}");
    assert!(!nccl.contains("will not use"), "{nccl}");
}

/// `--module FILE`: a module not installed yet (a package about to be
/// unpacked) judged against what @k has now. Built against another NVIDIA
/// driver (another nvidia_p2p_get_pages CRC) it will not load, and the
/// verdict names the symbol and nvidia; against this one it will. The
/// installed module, if any, is not what is judged.
#[test]
fn a_module_file_is_judged_against_the_installed_providers() {
    let r = Root::new("module-file");
    r.kernel(K2, 0x1111_1111, None);
    let other_driver = ours_for(K2)
        .import("ib_register_peer_memory_client", 0x1111_1111)
        .import("nvidia_p2p_get_pages", 0x6666_6666)
        .build();
    let file = r.0.join("unpacked/nv_peer_mem.ko");
    r.write("unpacked/nv_peer_mem.ko", other_driver);
    let v = next_boot::verdict_for_module(&r.0, K2, &file, false);
    assert_eq!(v.loads(), Some(false), "{:?}", v.facts);
    let symbols = line(&v, "symbols");
    assert!(
        symbols.contains("nvidia")
            && symbols.contains("exports another version of nvidia_p2p_get_pages")
            && symbols.contains("against the NVIDIA driver installed for")
            && symbols.contains("--nvidia-src /usr/src/nvidia-<the installed driver's version>"),
        "{symbols}"
    );
    assert_eq!(
        v.stale_symbol
            .as_ref()
            .map(|s| (s.provider.as_str(), s.symbol.as_str())),
        Some(("nvidia", "nvidia_p2p_get_pages"))
    );
    assert!(line(&v, "module").contains("(--module), judged as the module for"));
    r.write("unpacked/nv_peer_mem.ko", ours(K2, 0x1111_1111));
    let v = next_boot::verdict_for_module(&r.0, K2, &file, false);
    assert_eq!(v.loads(), Some(true), "{:?}", v.facts);
}

#[test]
fn the_headers_package_is_named_by_the_kernels_package_manager() {
    use crate::next_boot_dkms::headers_package;
    let r = Root::new("headers");
    assert_eq!(
        headers_package(&r.0, "6.17.7-300.fc43.x86_64"),
        "its headers"
    );
    r.write("var/lib/dpkg/status", "");
    assert_eq!(
        headers_package(&r.0, "6.12.95+deb12-amd64"),
        "its headers, linux-headers-6.12.95+deb12-amd64"
    );
    // a kernel rpm installed beside dpkg (this project's dnf5 test node)
    r.write("usr/lib/sysimage/rpm/rpmdb.sqlite", "");
    for (release, headers) in [
        (
            "6.17.7-300.fc43.x86_64",
            "kernel-devel-6.17.7-300.fc43.x86_64",
        ),
        // a flavour's kernel: its uname release ends in +<flavour> (with
        // '_' for '-'), its headers are kernel-<flavour>-devel
        (
            "6.17.7-300.fc43.x86_64+debug",
            "kernel-debug-devel-6.17.7-300.fc43.x86_64",
        ),
        (
            "6.12.0-55.el10.aarch64+64k_debug",
            "kernel-64k-debug-devel-6.12.0-55.el10.aarch64",
        ),
        // a '+' that follows no rpm arch is no flavour
        ("6.12.95+deb12-amd64", "kernel-devel-6.12.95+deb12-amd64"),
        (
            "6.4.0-150600.23.25-default",
            "kernel-default-devel of 6.4.0-150600.23.25-default",
        ),
    ] {
        assert_eq!(
            headers_package(&r.0, release),
            format!("its headers, {headers}"),
            "{release}"
        );
    }
}
