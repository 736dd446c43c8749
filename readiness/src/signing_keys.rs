//! Who signed a module, and whether a node's firmware lists that key
//! (docs/next-boot.md, "Signatures"). The kernel finds the key of a
//! module's PKCS#7 signature by the signer's identifier
//! (crypto/asymmetric_keys/pkcs7_parser.c: the issuer and serial number
//! sign-file writes by default, or the subject key identifier with its
//! `-k`) among the keys it trusts (kernel/module/signing.c,
//! verify_pkcs7_signature): those built into it, and on Debian's kernels
//! under Secure Boot also the firmware's db and MOK list
//! (security/integrity/platform_certs/load_uefi.c; docs/fleet.md, "A
//! Secure Boot node"). The firmware's lists are EFI signature lists
//! (UEFI 2.10 §32.4.1, EFI_SIGNATURE_LIST) of X.509 certificates, in
//! efivarfs after 4 bytes of attributes, or in `mok-variables/` (shim's
//! table, drivers/firmware/efi/mokvar-table.c) without them.
//!
//! The DER reading is only what that match needs: a walk over
//! tag-length-value elements, no signature is verified.

/// A module signature's signer, as the kernel looks its key up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signer {
    /// The issuer's Name (its DER element) and the serial number's
    /// INTEGER contents; with the issuer's common name, for people.
    IssuerSerial {
        issuer: Vec<u8>,
        serial: Vec<u8>,
        issuer_cn: Option<String>,
    },
    /// A subject key identifier.
    KeyId(Vec<u8>),
}

impl Signer {
    /// How people know it: `CN, serial 0a1b...` or `key id ...`.
    pub fn shown(&self) -> String {
        match self {
            Signer::IssuerSerial {
                serial, issuer_cn, ..
            } => format!(
                "'{}', serial {}",
                issuer_cn.as_deref().unwrap_or("(no common name)"),
                hex(serial)
            ),
            Signer::KeyId(id) => format!("key id {}", hex(id)),
        }
    }

    /// The common name a key in /proc/keys would start with.
    pub fn common_name(&self) -> Option<&str> {
        match self {
            Signer::IssuerSerial { issuer_cn, .. } => issuer_cn.as_deref(),
            Signer::KeyId(_) => None,
        }
    }

    /// Whether @cert (an X.509 certificate's DER) is this signer's.
    pub fn matches(&self, cert: &[u8]) -> bool {
        let Some(c) = certificate(cert) else {
            return false;
        };
        match self {
            Signer::IssuerSerial { issuer, serial, .. } => {
                c.issuer == issuer.as_slice() && c.serial == serial.as_slice()
            }
            Signer::KeyId(id) => c.key_id == Some(id.as_slice()),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One DER element: (tag, contents, the whole element, what follows).
type Element<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

fn element(b: &[u8]) -> Option<Element<'_>> {
    let tag = *b.first()?;
    let first = *b.get(1)?;
    let (len, head) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let len = b
            .get(2..2 + n)?
            .iter()
            .fold(0usize, |acc, x| (acc << 8) | usize::from(*x));
        (len, 2 + n)
    };
    let end = head.checked_add(len)?;
    Some((tag, b.get(head..end)?, &b[..end], &b[end..]))
}

/// The elements inside @contents.
fn elements(mut contents: &[u8]) -> Vec<(u8, &[u8], &[u8])> {
    let mut out = Vec::new();
    while let Some((tag, inner, whole, rest)) = element(contents) {
        out.push((tag, inner, whole));
        contents = rest;
    }
    out
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const INTEGER: u8 = 0x02;
const OCTET_STRING: u8 = 0x04;
const CONTEXT_0: u8 = 0xa0;
const CONTEXT_0_PRIMITIVE: u8 = 0x80;
/// 2.5.4.3, commonName.
const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
/// 2.5.29.14, subjectKeyIdentifier.
const OID_SKID: &[u8] = &[0x55, 0x1d, 0x0e];

/// The signer of a module's PKCS#7 (CMS) signature @der, as sign-file
/// writes it: ContentInfo { OID, [0] SignedData { version, digest
/// algorithms, content, [0] certificates?, [1] crls?, SignerInfos {
/// SignerInfo { version, sid, ... } } } } (RFC 5652 §5). None where it is
/// not that shape.
pub fn signer(der: &[u8]) -> Option<Signer> {
    let (SEQUENCE, content_info, _, _) = element(der)? else {
        return None;
    };
    let (_, explicit, _) = *elements(content_info).get(1)?;
    let (SEQUENCE, signed_data, _, _) = element(explicit)? else {
        return None;
    };
    let (_, infos, _) = elements(signed_data)
        .into_iter()
        .rev()
        .find(|(tag, _, _)| *tag == SET)?;
    let (SEQUENCE, info, _, _) = element(infos)? else {
        return None;
    };
    let (tag, sid, whole) = *elements(info).get(1)?;
    match tag {
        SEQUENCE => {
            let parts = elements(sid);
            let (SEQUENCE, name, issuer) = *parts.first()? else {
                return None;
            };
            let (INTEGER, serial, _) = *parts.get(1)? else {
                return None;
            };
            Some(Signer::IssuerSerial {
                issuer: issuer.to_vec(),
                serial: serial.to_vec(),
                issuer_cn: common_name(name),
            })
        }
        CONTEXT_0_PRIMITIVE => {
            let (_, id, _, _) = element(whole)?;
            Some(Signer::KeyId(id.to_vec()))
        }
        _ => None,
    }
}

/// The common name in a Name's contents (RDNs of attribute type-value
/// pairs).
fn common_name(name: &[u8]) -> Option<String> {
    elements(name).into_iter().find_map(|(_, rdn, _)| {
        elements(rdn).into_iter().find_map(|(_, pair, _)| {
            let parts = elements(pair);
            let (_, oid, _) = *parts.first()?;
            let (_, value, _) = *parts.get(1)?;
            (oid == OID_CN).then(|| String::from_utf8_lossy(value).into_owned())
        })
    })
}

/// What the match needs of a certificate.
struct Certificate<'a> {
    issuer: &'a [u8],
    serial: &'a [u8],
    key_id: Option<&'a [u8]>,
}

/// Certificate { tbsCertificate { [0] version?, serialNumber, signature,
/// issuer, validity, subject, subjectPublicKeyInfo, ..., [3] extensions }
/// } (RFC 5280 §4.1).
fn certificate(der: &[u8]) -> Option<Certificate<'_>> {
    let (SEQUENCE, cert, _, _) = element(der)? else {
        return None;
    };
    let (SEQUENCE, tbs, _, _) = element(cert)? else {
        return None;
    };
    let mut parts = elements(tbs).into_iter().peekable();
    if parts.peek().is_some_and(|(tag, _, _)| *tag == CONTEXT_0) {
        parts.next();
    }
    let (INTEGER, serial, _) = parts.next()? else {
        return None;
    };
    let _algorithm = parts.next()?;
    let (SEQUENCE, _, issuer) = parts.next()? else {
        return None;
    };
    let key_id = parts
        .find(|(tag, _, _)| *tag == 0xa3)
        .and_then(|(_, exts, _)| {
            let (_, list, _, _) = element(exts)?;
            elements(list).into_iter().find_map(|(_, ext, _)| {
                let parts = elements(ext);
                let (_, oid, _) = *parts.first()?;
                let (OCTET_STRING, value, _) = *parts.last()? else {
                    return None;
                };
                let (OCTET_STRING, id, _, _) = element(value)? else {
                    return None;
                };
                (oid == OID_SKID).then_some(id)
            })
        });
    Some(Certificate {
        issuer,
        serial,
        key_id,
    })
}

/// EFI_CERT_X509_GUID as it lies in memory (UEFI 2.10 §32.4.1:
/// a5c059a1-94e4-4aa7-87b5-ab155c2bf072, its first three fields little
/// endian).
const EFI_CERT_X509: [u8; 16] = [
    0xa1, 0x59, 0xc0, 0xa5, 0xe4, 0x94, 0xa7, 0x4a, 0x87, 0xb5, 0xab, 0x15, 0x5c, 0x2b, 0xf0, 0x72,
];

/// The X.509 certificates of EFI signature lists @data (a variable's
/// contents without efivarfs's attributes); the other kinds (hashes) are
/// skipped, a list cut short ends the walk.
pub fn certificates(mut data: &[u8]) -> Vec<Vec<u8>> {
    let u32_at = |b: &[u8], at: usize| -> Option<usize> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize)
    };
    let mut out = Vec::new();
    while data.len() >= 28 {
        let (Some(list), Some(header), Some(size)) =
            (u32_at(data, 16), u32_at(data, 20), u32_at(data, 24))
        else {
            break;
        };
        if list < 28 + header || list > data.len() || size <= 16 {
            break;
        }
        if data[..16] == EFI_CERT_X509 {
            let entries = &data[28 + header..list];
            out.extend(entries.chunks_exact(size).map(|e| e[16..].to_vec()));
        }
        data = &data[list..];
    }
    out
}

/// Why a node's kernel may trust a signer's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// Its certificate is in the MOK list (under Secure Boot).
    Mok,
    /// In the firmware's db (under Secure Boot).
    Db,
    /// A key of its issuer's name is in the running kernel's keyrings
    /// (/proc/keys shows `asymmetri <CN>: <key id>`): built in, or added
    /// since; the next kernel's own keys cannot be read from files.
    Named,
    /// None of those.
    None,
}

/// The MOK lists and db as the kernel reads them: shim's table in
/// `mok-variables/`, else the UEFI variables (efivarfs: 4 bytes of
/// attributes first).
const MOK_GUID: &str = "605dab50-e046-4300-abb6-3dd810dd8b23";
const DB_GUID: &str = "d719b2cb-3d3a-4596-a3bc-dad00e67656f";

/// Whether @signer's key is one the kernel booted on the node under @root
/// trusts: the firmware's lists count only under @secure_boot (Debian's
/// kernels load no MOK without it: docs/fleet.md, "A Secure Boot node").
pub fn trust(root: &std::path::Path, signer: &Signer, secure_boot: bool) -> Trust {
    let firmware = root.join("sys/firmware/efi");
    let listed = |names: &[String]| {
        names.iter().any(|name| {
            let table = std::fs::read(firmware.join("mok-variables").join(name)).ok();
            let variable = || {
                let var = std::fs::read(firmware.join("efivars").join(name)).ok()?;
                Some(var.get(4..)?.to_vec())
            };
            table
                .or_else(variable)
                .is_some_and(|data| certificates(&data).iter().any(|c| signer.matches(c)))
        })
    };
    if secure_boot {
        let mok: Vec<String> = std::iter::once("MokListRT".to_owned())
            .chain((1..10).map(|n| format!("MokListRT{n}")))
            .flat_map(|n| [n.clone(), format!("{n}-{MOK_GUID}")])
            .collect();
        if listed(&mok) {
            return Trust::Mok;
        }
        if listed(&[format!("db-{DB_GUID}")]) {
            return Trust::Db;
        }
    }
    let keys = std::fs::read_to_string(root.join("proc/keys")).unwrap_or_default();
    let named = signer.common_name().is_some_and(|cn| {
        let wanted = format!(" asymmetri {cn}: ");
        keys.lines().any(|l| l.contains(&wanted))
    });
    if named { Trust::Named } else { Trust::None }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DER element of @tag around @contents.
    fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if contents.len() < 0x80 {
            out.push(contents.len() as u8);
        } else {
            out.push(0x82);
            out.extend((contents.len() as u16).to_be_bytes());
        }
        out.extend(contents);
        out
    }

    fn name(cn: &str) -> Vec<u8> {
        let pair = [tlv(0x06, OID_CN), tlv(0x0c, cn.as_bytes())].concat();
        tlv(SEQUENCE, &tlv(SET, &tlv(SEQUENCE, &pair)))
    }

    #[test]
    fn a_signer_by_issuer_and_serial_matches_its_certificate_only() {
        let issuer = name("site modules");
        let sid = tlv(
            SEQUENCE,
            &[issuer.clone(), tlv(INTEGER, &[0x01, 0x23])].concat(),
        );
        let info = tlv(SEQUENCE, &[tlv(INTEGER, &[1]), sid].concat());
        let signed = tlv(
            SEQUENCE,
            &[
                tlv(INTEGER, &[1]),
                tlv(SET, &[]),
                tlv(SEQUENCE, &[]),
                tlv(SET, &info),
            ]
            .concat(),
        );
        let pkcs7 = tlv(
            SEQUENCE,
            &[tlv(0x06, &[0x2a]), tlv(CONTEXT_0, &signed)].concat(),
        );
        let s = signer(&pkcs7).unwrap();
        assert_eq!(s.shown(), "'site modules', serial 0123");
        let cert = |serial: &[u8], by: &str| {
            let tbs = [
                tlv(CONTEXT_0, &tlv(INTEGER, &[2])),
                tlv(INTEGER, serial),
                tlv(SEQUENCE, &[]),
                name(by),
            ]
            .concat();
            tlv(SEQUENCE, &tlv(SEQUENCE, &tbs))
        };
        assert!(s.matches(&cert(&[0x01, 0x23], "site modules")));
        assert!(!s.matches(&cert(&[0x01, 0x24], "site modules")));
        assert!(!s.matches(&cert(&[0x01, 0x23], "another CA")));
        assert!(!s.matches(b"not DER"));
        assert_eq!(signer(b"\x30\x03\x02\x01"), None);
    }

    #[test]
    fn signature_lists_give_their_x509_entries() {
        let list = |kind: [u8; 16], entries: &[&[u8]]| {
            let size = 16 + entries[0].len();
            let mut out = kind.to_vec();
            out.extend(((28 + size * entries.len()) as u32).to_le_bytes());
            out.extend(0u32.to_le_bytes());
            out.extend((size as u32).to_le_bytes());
            for e in entries {
                out.extend([7u8; 16]);
                out.extend(*e);
            }
            out
        };
        let data = [
            list([9; 16], &[b"a hash......"]),
            list(EFI_CERT_X509, &[b"cert one", b"cert two"]),
        ]
        .concat();
        assert_eq!(
            certificates(&data),
            vec![b"cert one".to_vec(), b"cert two".to_vec()]
        );
        assert!(certificates(&data[..40]).is_empty());
    }
}
