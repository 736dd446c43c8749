//! What a kernel module file says about itself, read from its bytes: the
//! `.modinfo` strings (vermagic, srcversion, ...), the symbol versions it
//! imports (`__versions`), the CRCs of the symbols it exports (`__crc_*`
//! symbols into `__kcrctab*`) and whether a signature is appended. The
//! layouts and where each is defined are in docs/next-boot.md, "Reading a
//! module file". 64-bit little-endian ELF only (x86_64, arm64, the
//! architectures the packages are built for); anything else is an error
//! naming what the file is, never a guess.

use std::collections::BTreeMap;

/// ELF's own constants (the System V gABI, `include/uapi/linux/elf.h`).
const ELFCLASS64: u8 = 2;
const ELFDATA2LSB: u8 = 1;
const SHT_SYMTAB: u32 = 2;
const SHN_UNDEF: u16 = 0;
const SHN_ABS: u16 = 0xfff1;
const SHDR_SIZE: usize = 64;
const SYM_SIZE: usize = 24;

/// `struct modversion_info` on a 64-bit kernel (`include/linux/module.h`):
/// an `unsigned long crc` and a 56-byte NUL-padded name.
const MODVERSION_SIZE: usize = 64;

/// `MODULE_SIG_STRING` (`include/linux/module_signature.h`), the last bytes
/// of a signed module, after `struct module_signature` (12 bytes, the
/// signature's length big-endian in its last 4).
pub const SIGNATURE_MAGIC: &[u8] = b"~Module signature appended~\n";
const SIGNATURE_INFO_SIZE: usize = 12;
/// `id_type` of a PKCS#7 signature (`PKEY_ID_PKCS7`), the only kind
/// `sign-file` writes.
const PKEY_ID_PKCS7: u8 = 2;

/// An appended signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// PKCS#7, or the `id_type` number of another kind.
    pub pkcs7: bool,
    pub length: u32,
    /// Who signed it, where the PKCS#7 reads as sign-file writes it.
    pub signer: Option<crate::signing_keys::Signer>,
}

/// A module file, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// `.modinfo`'s `key=value` strings, in file order (a key may repeat:
    /// `alias`, `depends` once).
    pub modinfo: Vec<(String, String)>,
    /// Imported symbol -> the CRC the module was built against.
    pub imports: BTreeMap<String, u32>,
    /// Exported symbol -> its CRC (empty without CONFIG_MODVERSIONS).
    pub exports: BTreeMap<String, u32>,
    /// The symbols it leaves undefined (`.symtab`, `SHN_UNDEF`): every
    /// import, also those `__versions` has no entry for (a build that had
    /// no Module.symvers for their provider; the kernel then resolves
    /// them by name alone, kernel/module/version.c `check_version()`).
    pub undefined: std::collections::BTreeSet<String>,
    pub signature: Option<Signature>,
}

impl Module {
    /// The first value of @key in `.modinfo`.
    pub fn info(&self, key: &str) -> Option<&str> {
        self.modinfo
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

struct Section {
    name: String,
    kind: u32,
    offset: usize,
    size: usize,
    link: u32,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}
fn c_string(b: &[u8], at: usize) -> Option<String> {
    let rest = b.get(at..)?;
    let end = rest.iter().position(|&c| c == 0)?;
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// Parses @bytes (a whole `.ko`, signed or not).
pub fn parse(bytes: &[u8]) -> Result<Module, String> {
    let signature = signature(bytes)?;
    if bytes.get(..4) != Some(b"\x7fELF") {
        return Err("not an ELF file".into());
    }
    if bytes.get(4) != Some(&ELFCLASS64) || bytes.get(5) != Some(&ELFDATA2LSB) {
        return Err("not a 64-bit little-endian ELF file (x86_64 and arm64 modules are)".into());
    }
    let malformed = |what: &str| format!("malformed ELF: {what}");
    let shoff = u64_at(bytes, 0x28).ok_or_else(|| malformed("header"))? as usize;
    let shentsize = u16_at(bytes, 0x3a).ok_or_else(|| malformed("header"))? as usize;
    let shnum = u16_at(bytes, 0x3c).ok_or_else(|| malformed("header"))? as usize;
    let shstrndx = u16_at(bytes, 0x3e).ok_or_else(|| malformed("header"))? as usize;
    if shentsize != SHDR_SIZE || shstrndx >= shnum {
        return Err(malformed("section header table"));
    }
    let mut raw = Vec::with_capacity(shnum);
    for i in 0..shnum {
        let at = shoff
            .checked_add(i * SHDR_SIZE)
            .ok_or_else(|| malformed("section header offset"))?;
        let field = |off: usize| u32_at(bytes, at + off).ok_or_else(|| malformed("section header"));
        let wide = |off: usize| u64_at(bytes, at + off).ok_or_else(|| malformed("section header"));
        let (name, kind, offset, size, link) = (
            field(0)?,
            field(4)?,
            wide(24)? as usize,
            wide(32)? as usize,
            field(40)?,
        );
        if offset.checked_add(size).is_none_or(|end| end > bytes.len()) && kind != 8 {
            // SHT_NOBITS (8) occupies nothing in the file; anything else must fit.
            return Err(malformed("a section runs past the end of the file"));
        }
        raw.push((name, kind, offset, size, link));
    }
    let names_at = raw[shstrndx].2;
    let sections: Vec<Section> = raw
        .into_iter()
        .map(|(name, kind, offset, size, link)| Section {
            name: c_string(bytes, names_at + name as usize).unwrap_or_default(),
            kind,
            offset,
            size,
            link,
        })
        .collect();
    let data = |s: &Section| &bytes[s.offset..s.offset + s.size];
    let find = |name: &str| sections.iter().find(|s| s.name == name);

    let modinfo = find(".modinfo")
        .map(|s| {
            data(s)
                .split(|&c| c == 0)
                .filter(|e| !e.is_empty())
                .filter_map(|e| {
                    let text = String::from_utf8_lossy(e);
                    let (k, v) = text.split_once('=')?;
                    Some((k.to_owned(), v.to_owned()))
                })
                .collect()
        })
        .unwrap_or_default();

    let mut imports = BTreeMap::new();
    if let Some(s) = find("__versions") {
        let d = data(s);
        if d.len() % MODVERSION_SIZE != 0 {
            return Err(malformed("__versions is not a whole number of entries"));
        }
        for entry in d.chunks(MODVERSION_SIZE) {
            let crc = u64_at(entry, 0).ok_or_else(|| malformed("__versions"))? as u32;
            let name = c_string(entry, 8).ok_or_else(|| malformed("__versions name"))?;
            imports.insert(name, crc);
        }
    }

    let mut exports = BTreeMap::new();
    let mut undefined = std::collections::BTreeSet::new();
    if let Some(symtab) = sections.iter().find(|s| s.kind == SHT_SYMTAB) {
        let strtab = sections
            .get(symtab.link as usize)
            .ok_or_else(|| malformed("symbol table's string table"))?;
        for sym in data(symtab)
            .chunks(SYM_SIZE)
            .filter(|c| c.len() == SYM_SIZE)
        {
            let name_at = u32_at(sym, 0).ok_or_else(|| malformed("symbol"))? as usize;
            let Some(name) = c_string(data(strtab), name_at) else {
                continue;
            };
            let shndx = u16_at(sym, 6).ok_or_else(|| malformed("symbol"))?;
            if shndx == SHN_UNDEF && !name.is_empty() {
                undefined.insert(name);
                continue;
            }
            let Some(exported) = name.strip_prefix("__crc_") else {
                continue;
            };
            let value = u64_at(sym, 8).ok_or_else(|| malformed("symbol"))?;
            // libkmod's rule: an absolute symbol's value is the CRC;
            // otherwise it is where in its section (__kcrctab*) the CRC is.
            let crc = match shndx {
                SHN_UNDEF => continue,
                SHN_ABS => value as u32,
                i => {
                    let s = sections
                        .get(i as usize)
                        .ok_or_else(|| malformed("a CRC symbol's section"))?;
                    let at = usize::try_from(value).map_err(|_| malformed("a CRC symbol"))?;
                    if at + 4 > s.size {
                        return Err(malformed("a CRC symbol points past its section"));
                    }
                    u32_at(bytes, s.offset + at).ok_or_else(|| malformed("a CRC"))?
                }
            };
            exports.insert(exported.to_owned(), crc);
        }
    }
    Ok(Module {
        modinfo,
        imports,
        exports,
        undefined,
        signature,
    })
}

/// The appended signature, if the file ends with its magic.
fn signature(bytes: &[u8]) -> Result<Option<Signature>, String> {
    let Some(before) = bytes.strip_suffix(SIGNATURE_MAGIC) else {
        return Ok(None);
    };
    let info_at = before
        .len()
        .checked_sub(SIGNATURE_INFO_SIZE)
        .ok_or("malformed module signature: too short")?;
    let info = &before[info_at..];
    let length = u32::from_be_bytes(info[8..12].try_into().expect("4 bytes"));
    if (length as usize) > info_at {
        return Err("malformed module signature: longer than the file".into());
    }
    let pkcs7 = info[2] == PKEY_ID_PKCS7;
    let der = &before[info_at - length as usize..info_at];
    Ok(Some(Signature {
        pkcs7,
        length,
        signer: pkcs7.then(|| crate::signing_keys::signer(der)).flatten(),
    }))
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A relocatable ELF64 LE file laid out as the kernel's build writes a
    /// module: the sections named, a symbol table whose `__crc_*` symbols
    /// point into `__kcrctab` (or are absolute), `.modinfo` strings and
    /// `__versions` entries of 64 bytes.
    #[derive(Default)]
    pub struct ModuleBytes {
        pub modinfo: Vec<(String, String)>,
        pub imports: Vec<(String, u32)>,
        /// (symbol, crc, absolute): absolute CRC symbols as older kernels
        /// wrote them, else an offset into __kcrctab as 6.1 and 6.12 do.
        pub exports: Vec<(String, u32, bool)>,
        /// Undefined symbols with no `__versions` entry.
        pub undefined: Vec<String>,
    }

    impl ModuleBytes {
        pub fn new() -> Self {
            Self::default()
        }
        pub fn info(mut self, k: &str, v: &str) -> Self {
            self.modinfo.push((k.into(), v.into()));
            self
        }
        pub fn import(mut self, name: &str, crc: u32) -> Self {
            self.imports.push((name.into(), crc));
            self
        }
        pub fn export(mut self, name: &str, crc: u32, absolute: bool) -> Self {
            self.exports.push((name.into(), crc, absolute));
            self
        }
        pub fn undefined(mut self, name: &str) -> Self {
            self.undefined.push(name.into());
            self
        }

        pub fn build(&self) -> Vec<u8> {
            let modinfo: Vec<u8> = self
                .modinfo
                .iter()
                .flat_map(|(k, v)| format!("{k}={v}\0").into_bytes())
                .collect();
            let mut versions = Vec::new();
            for (name, crc) in &self.imports {
                let mut e = vec![0u8; MODVERSION_SIZE];
                e[..8].copy_from_slice(&u64::from(*crc).to_le_bytes());
                e[8..8 + name.len()].copy_from_slice(name.as_bytes());
                versions.extend(e);
            }
            let mut kcrctab = Vec::new();
            let mut strtab = vec![0u8];
            let mut symtab = vec![0u8; SYM_SIZE]; // the null symbol
            for (name, crc, absolute) in &self.exports {
                let name_at = strtab.len() as u32;
                strtab.extend(format!("__crc_{name}\0").bytes());
                let (shndx, value) = if *absolute {
                    (SHN_ABS, u64::from(*crc))
                } else {
                    let at = kcrctab.len() as u64;
                    kcrctab.extend(crc.to_le_bytes());
                    (4u16, at) // __kcrctab is section 4 below
                };
                let mut s = vec![0u8; SYM_SIZE];
                s[0..4].copy_from_slice(&name_at.to_le_bytes());
                s[6..8].copy_from_slice(&shndx.to_le_bytes());
                s[8..16].copy_from_slice(&value.to_le_bytes());
                symtab.extend(s);
            }
            // every import is undefined in .symtab too, as in a real module
            let undefined = self.imports.iter().map(|(n, _)| n).chain(&self.undefined);
            for name in undefined {
                let name_at = strtab.len() as u32;
                strtab.extend(format!("{name}\0").bytes());
                let mut s = vec![0u8; SYM_SIZE];
                s[0..4].copy_from_slice(&name_at.to_le_bytes());
                s[4] = 0x10; // STB_GLOBAL, STT_NOTYPE
                symtab.extend(s);
            }
            // sections: 0 null, 1 .shstrtab, 2 .modinfo, 3 __versions,
            // 4 __kcrctab, 5 .symtab, 6 .strtab
            let names = b"\0.shstrtab\0.modinfo\0__versions\0__kcrctab\0.symtab\0.strtab\0";
            let name_at = |n: &str| {
                names
                    .windows(n.len() + 1)
                    .position(|w| &w[..n.len()] == n.as_bytes() && w[n.len()] == 0)
                    .unwrap() as u32
            };
            let bodies: [(&str, u32, &[u8], u32); 6] = [
                (".shstrtab", 3, names, 0),
                (".modinfo", 1, &modinfo, 0),
                ("__versions", 1, &versions, 0),
                ("__kcrctab", 1, &kcrctab, 0),
                (".symtab", SHT_SYMTAB, &symtab, 6),
                (".strtab", 3, &strtab, 0),
            ];
            let mut out = vec![0u8; 64];
            out[..4].copy_from_slice(b"\x7fELF");
            out[4] = ELFCLASS64;
            out[5] = ELFDATA2LSB;
            out[6] = 1; // EV_CURRENT
            out[16..18].copy_from_slice(&1u16.to_le_bytes()); // ET_REL
            out[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
            let mut headers = vec![0u8; SHDR_SIZE]; // the null section
            for (name, kind, body, link) in bodies {
                while out.len() % 8 != 0 {
                    out.push(0);
                }
                let offset = out.len() as u64;
                out.extend_from_slice(body);
                let mut h = vec![0u8; SHDR_SIZE];
                h[0..4].copy_from_slice(&name_at(name).to_le_bytes());
                h[4..8].copy_from_slice(&kind.to_le_bytes());
                h[24..32].copy_from_slice(&offset.to_le_bytes());
                h[32..40].copy_from_slice(&(body.len() as u64).to_le_bytes());
                h[40..44].copy_from_slice(&link.to_le_bytes());
                headers.extend(h);
            }
            while out.len() % 8 != 0 {
                out.push(0);
            }
            let shoff = out.len() as u64;
            out.extend(headers);
            out[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
            out[0x34..0x36].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
            out[0x3a..0x3c].copy_from_slice(&(SHDR_SIZE as u16).to_le_bytes());
            out[0x3c..0x3e].copy_from_slice(&7u16.to_le_bytes());
            out[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
            out
        }
    }

    /// sign-file's trailer: the signature, struct module_signature, magic.
    pub fn signed(mut module: Vec<u8>) -> Vec<u8> {
        let sig = vec![0x30u8; 300];
        module.extend(&sig);
        let mut info = [0u8; SIGNATURE_INFO_SIZE];
        info[2] = PKEY_ID_PKCS7;
        info[8..12].copy_from_slice(&(sig.len() as u32).to_be_bytes());
        module.extend(info);
        module.extend(SIGNATURE_MAGIC);
        module
    }

    fn sample() -> ModuleBytes {
        ModuleBytes::new()
            .info("version", "1.4.0")
            .info(
                "vermagic",
                "6.1.0-56-amd64 SMP preempt mod_unload modversions ",
            )
            .info("depends", "ib_core,nvidia")
            .import("module_layout", 0x0ddd51b3)
            .import("ib_register_peer_memory_client", 0x11111111)
            .export("ib_register_peer_memory_client", 0x22222222, false)
            .export("ib_umem_get", 0x33333333, true)
    }

    #[test]
    fn reads_modinfo_versions_and_exported_crcs() {
        let m = parse(&sample().build()).unwrap();
        assert_eq!(m.info("version"), Some("1.4.0"));
        assert_eq!(m.info("depends"), Some("ib_core,nvidia"));
        assert_eq!(
            m.info("vermagic"),
            Some("6.1.0-56-amd64 SMP preempt mod_unload modversions ")
        );
        assert_eq!(m.imports["ib_register_peer_memory_client"], 0x11111111);
        assert_eq!(m.imports["module_layout"], 0x0ddd51b3);
        assert_eq!(m.exports["ib_register_peer_memory_client"], 0x22222222);
        assert_eq!(m.exports["ib_umem_get"], 0x33333333);
        assert_eq!(m.signature, None);
    }

    #[test]
    fn an_appended_signature_is_seen_and_the_elf_still_read() {
        let m = parse(&signed(sample().build())).unwrap();
        assert_eq!(
            m.signature,
            Some(Signature {
                pkcs7: true,
                length: 300,
                signer: None,
            })
        );
        assert_eq!(m.info("version"), Some("1.4.0"));
    }

    #[test]
    fn broken_files_are_errors_never_guesses() {
        assert!(parse(b"hello").unwrap_err().contains("not an ELF"));
        let mut b = sample().build();
        b[4] = 1; // ELFCLASS32
        assert!(parse(&b).unwrap_err().contains("64-bit"));
        let b = sample().build();
        assert!(parse(&b[..b.len() - 40]).unwrap_err().contains("malformed"));
        let mut b = sample().build();
        let len = b.len();
        b.truncate(len); // a signature trailer longer than the file
        b.extend([0u8; 8]);
        b.extend(0xffff_ffffu32.to_be_bytes());
        b.extend(SIGNATURE_MAGIC);
        assert!(parse(&b).unwrap_err().contains("signature"));
    }
}

/// Against a real module when NVPM_REAL_MODULE names one (a manual check;
/// the booted image runs the parser over the installed modules in CI):
/// prints what it read, for comparison with modprobe --dump-modversions.
#[cfg(test)]
#[test]
#[ignore = "needs NVPM_REAL_MODULE=<path to a .ko>"]
fn real_module() {
    let path = std::env::var("NVPM_REAL_MODULE").unwrap();
    let m = parse(&std::fs::read(path).unwrap()).unwrap();
    println!(
        "vermagic={:?} signature={:?}",
        m.info("vermagic"),
        m.signature
    );
    for (k, v) in &m.imports {
        println!("import 0x{v:08x}\t{k}");
    }
    for (k, v) in &m.exports {
        println!("export 0x{v:08x}\t{k}");
    }
}
