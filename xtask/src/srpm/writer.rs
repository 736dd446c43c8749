//! Writes a source RPM (`.src.rpm`) from a spec and its sources, without
//! rpmbuild.
//!
//! The `rpm` crate's `PackageBuilder` only makes binary packages, so this
//! assembles the package from the crate's lower-level pieces the same way
//! `rpmbuild -bs` (rpm 4.18) lays a source package out:
//!
//! - lead: type 1 (source); the crate's `Lead::new` always writes type 0 and
//!   has no setter, so the two type bytes are patched after serialising (the
//!   lead is covered by no digest, rpm only checks its magic);
//! - main header: `SOURCEPACKAGE` = 1 and no `SOURCERPM` (that pair is how
//!   rpm tells a source package from a binary one), one empty directory name,
//!   the spec flagged `RPMFILE_SPECFILE`, `BuildRequires` as requires plus the
//!   rpmlib() features the layout needs, payload digests (compressed and not);
//! - signature header: header SHA-1/SHA-256 and the header+payload size,
//!   computed over the final main header bytes (what `rpm -K` checks);
//! - payload: a gzip'd newc cpio archive of the files under their bare names
//!   (source packages carry no `./` prefix), sorted by name as rpm expects.
//!
//! Everything that could vary between runs is an input: file mtimes and the
//! build time are the caller's timestamp, owners are root, the build host is
//! the caller's string, and gzip writes no timestamp.
//!
//! Longer than 400 lines: the main header is one list of ~40 tags whose
//! order and types follow rpmbuild's; split across files it would be harder
//! to compare with `rpm -qp --dump` output. The payload is in payload.rs,
//! the tests in writer_tests.rs.

use super::payload::{PayloadFile, S_IFREG, cpio_archive, gzip};
use anyhow::{Context, Result, bail, ensure};
use rpm::{
    Dependency, DependencyFlags, DigestAlgorithm, FileFlags, Header, HeaderEntry, IndexData,
    IndexTag, Lead, Package, PackageMetadata, RpmFormat, SignatureHeaderBuilder,
};
use sha2::{Digest, Sha256};

/// One file of the source package: the spec or a source (tarball, patch).
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The bare file name (`foo.spec`, `foo-1.0.tar.gz`): source packages
    /// keep every file in one unnamed directory.
    pub name: String,
    pub contents: Vec<u8>,
    /// Permission bits (e.g. 0o644).
    pub permissions: u16,
}

/// One `%changelog` entry, as rpm stores it in the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangelogEntry {
    /// Seconds since the epoch (the entry's day).
    pub time: u32,
    /// The entry's author line after the date, e.g. `Jane <j@x.org> - 1.0-1`.
    pub name: String,
    /// The entry's text, e.g. `- Initial package.`.
    pub text: String,
}

/// Parses one dependency as written in a spec: `name`, or `name OP version`
/// with OP one of `<`, `<=`, `=`, `>=`, `>`.
pub fn parse_dependency(text: &str) -> Result<Dependency> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let (name, flags, version) = match words.as_slice() {
        [name] => (*name, DependencyFlags::ANY, ""),
        [name, op, version] => {
            let flags = match *op {
                "<" => DependencyFlags::LESS,
                "<=" => DependencyFlags::LESS | DependencyFlags::EQUAL,
                "=" | "==" => DependencyFlags::EQUAL,
                ">=" => DependencyFlags::GREATER | DependencyFlags::EQUAL,
                ">" => DependencyFlags::GREATER,
                _ => bail!(
                    "dependency {text:?}: unknown operator {op:?}; write `name`, or `name OP version` with OP one of < <= = >= >"
                ),
            };
            (*name, flags, *version)
        }
        _ => bail!(
            "dependency {text:?} is not `name` or `name OP version` (one dependency per list item, words separated by spaces)"
        ),
    };
    // Rich (boolean) dependencies would need rpmlib(RichDependencies)
    // and a real parser; the packaging data has no use for them.
    ensure!(
        !name.starts_with('(') && name.chars().all(|c| !c.is_control() && c != ','),
        "dependency {text:?}: the name must be a plain package or capability name (no rich dependencies, no commas)"
    );
    Ok(Dependency {
        name: name.to_owned(),
        flags,
        version: version.to_owned(),
    })
}

/// A rich dependency, e.g. `(kmod-mlnx-ofa_kernel or mlnx-ofa_kernel-modules)`:
/// rpm stores the whole expression as the name, with no flags and no
/// version (rpmbuild's parseRCPOT), and the rpm crate adds the
/// rpmlib(RichDependencies) requirement rpm needs to read it.
pub fn parse_rich_dependency(word: &str) -> Result<Dependency> {
    const OPERATORS: [&str; 7] = ["and", "or", "if", "else", "with", "without", "unless"];
    ensure!(
        word.ends_with(')')
            && word.split_whitespace().any(|w| OPERATORS.contains(&w))
            && word.chars().all(|c| !c.is_control()),
        "dependency {word:?}: a rich dependency is `(A or B)` and the like, with one of {}",
        OPERATORS.join(", ")
    );
    Ok(Dependency {
        name: word.to_owned(),
        flags: DependencyFlags::ANY,
        version: String::new(),
    })
}

/// Everything a source package header says, and its files.
#[derive(Debug, Clone)]
pub struct SourcePackage {
    pub name: String,
    pub version: String,
    pub release: String,
    pub summary: String,
    pub description: String,
    pub license: String,
    /// The spec's `Group:`.
    pub group: String,
    /// The spec's `URL:`, when it has one (docs/packaging.md, "Package
    /// metadata").
    pub url: Option<String>,
    /// The spec's `BuildRequires`, in spec order.
    pub build_requires: Vec<Dependency>,
    /// Newest first, as in the spec.
    pub changelog: Vec<ChangelogEntry>,
    /// Build time and every file's mtime (SOURCE_DATE_EPOCH).
    pub build_time: u32,
    pub build_host: String,
    /// The architecture rpm records for the source package (rpmbuild writes
    /// the building host's; it does not restrict where the package builds).
    pub arch: String,
    pub spec: SourceFile,
    /// Tarballs and other sources, named by the spec's `SourceN:` lines.
    pub sources: Vec<SourceFile>,
}

/// Checks that `value` can be an RPM version or release: not empty, and only
/// the characters rpm accepts there (no `-`, which separates version from
/// release in N-V-R, no spaces).
pub fn check_version_part(what: &str, value: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._+~^".contains(c);
    ensure!(
        !value.is_empty() && value.chars().all(allowed),
        "{what} {value:?} cannot be carried by RPM: use only letters, digits and . _ + ~ ^ (no '-', which separates version and release)"
    );
    Ok(())
}

/// gzip level of the payload, also recorded in `PAYLOADFLAGS`.
const PAYLOAD_GZIP_LEVEL: u32 = 9;

/// Source package lead type (`RPMLEAD_SOURCE`).
const LEAD_TYPE_SOURCE: u16 = 1;
/// Offset of the 16-bit type field in the 96-byte lead (after the 4-byte
/// magic and the major and minor version bytes).
const LEAD_TYPE_OFFSET: usize = 6;

/// Every bit of file verification on (rpm's default `%verify`).
const VERIFY_ALL: u32 = 0xffff_ffff;

/// Serialises `package` into the bytes of a `.src.rpm`.
pub fn write_source_rpm(package: &SourcePackage) -> Result<Vec<u8>> {
    check_version_part("version", &package.version)?;
    check_version_part("release", &package.release)?;

    let mut files: Vec<(&SourceFile, FileFlags)> = vec![(&package.spec, FileFlags::SPECFILE)];
    files.extend(
        package
            .sources
            .iter()
            .map(|file| (file, FileFlags::empty())),
    );
    // rpm looks files up by binary search over the header's sorted file list.
    files.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    for pair in files.windows(2) {
        ensure!(
            pair[0].0.name != pair[1].0.name,
            "two files of the source package are both named {:?}",
            pair[0].0.name
        );
    }
    for (file, _) in &files {
        ensure!(
            !file.name.is_empty()
                && !file.name.contains('/')
                && file.name != "."
                && file.name != "..",
            "source package file name {:?} must be a bare file name",
            file.name
        );
        ensure!(
            file.contents.len() < u32::MAX as usize,
            "{} is too large for a source package without large-file support (4 GiB)",
            file.name
        );
    }

    let payload_files: Vec<PayloadFile<'_>> = files
        .iter()
        .map(|(file, _)| PayloadFile {
            name: &file.name,
            permissions: file.permissions,
            contents: &file.contents,
        })
        .collect();
    let cpio = cpio_archive(&payload_files, package.build_time);
    let payload = gzip(&cpio, PAYLOAD_GZIP_LEVEL)?;
    let header = main_header(package, &files, &cpio, &payload)?;

    let mut metadata = PackageMetadata {
        lead: Lead::new(&format!(
            "{}-{}-{}",
            package.name, package.version, package.release
        )),
        signature: Header::new_empty(),
        header,
    };
    let header_bytes = metadata
        .header_bytes()
        .context("serialising the rpm header")?;
    metadata.signature = SignatureHeaderBuilder::new()
        .format(RpmFormat::V4)
        .set_content_length(header_bytes.len() as u64 + payload.len() as u64)
        .calculate_digests(&header_bytes)
        .build()
        .context("building the rpm signature header")?;

    let mut bytes = Vec::with_capacity(header_bytes.len() + payload.len() + 8192);
    Package { metadata, payload }
        .write(&mut bytes)
        .context("serialising the source rpm")?;
    bytes[LEAD_TYPE_OFFSET..LEAD_TYPE_OFFSET + 2].copy_from_slice(&LEAD_TYPE_SOURCE.to_be_bytes());
    Ok(bytes)
}

fn main_header(
    package: &SourcePackage,
    files: &[(&SourceFile, FileFlags)],
    cpio: &[u8],
    payload: &[u8],
) -> Result<Header<IndexTag>> {
    let count = files.len();
    let string_list = |value: &str| IndexData::StringArray(vec![value.to_owned(); count]);
    let total_size: u64 = files
        .iter()
        .map(|(file, _)| file.contents.len() as u64)
        .sum();
    let total_size = u32::try_from(total_size)
        .context("the source package's files add up to more than 4 GiB")?;

    // BuildRequires, then the rpmlib() features this layout relies on, as
    // rpmbuild records them.
    let mut requires = package.build_requires.clone();
    for (feature, version) in [
        ("CompressedFileNames", "3.0.4-1"),
        ("FileDigests", "4.6.0-1"),
    ] {
        requires.push(Dependency {
            name: format!("rpmlib({feature})"),
            flags: DependencyFlags::RPMLIB | DependencyFlags::LESS | DependencyFlags::EQUAL,
            version: version.to_owned(),
        });
    }

    let tag = |tag: IndexTag, data: IndexData| HeaderEntry::new(tag.into(), data);
    let text = |value: &str| IndexData::StringTag(value.to_owned());
    let i18n = |value: &str| IndexData::I18NString(vec![value.to_owned()]);
    let mut entries = vec![
        tag(
            IndexTag::RPMTAG_HEADERI18NTABLE,
            IndexData::StringArray(vec!["C".into()]),
        ),
        tag(IndexTag::RPMTAG_NAME, text(&package.name)),
        tag(IndexTag::RPMTAG_VERSION, text(&package.version)),
        tag(IndexTag::RPMTAG_RELEASE, text(&package.release)),
        tag(IndexTag::RPMTAG_SUMMARY, i18n(&package.summary)),
        tag(IndexTag::RPMTAG_DESCRIPTION, i18n(&package.description)),
        tag(
            IndexTag::RPMTAG_BUILDTIME,
            IndexData::Int32(vec![package.build_time]),
        ),
        tag(IndexTag::RPMTAG_BUILDHOST, text(&package.build_host)),
        tag(IndexTag::RPMTAG_SIZE, IndexData::Int32(vec![total_size])),
        tag(IndexTag::RPMTAG_LICENSE, text(&package.license)),
        tag(IndexTag::RPMTAG_GROUP, i18n(&package.group)),
        tag(IndexTag::RPMTAG_OS, text("linux")),
        tag(IndexTag::RPMTAG_ARCH, text(&package.arch)),
        tag(
            IndexTag::RPMTAG_RPMVERSION,
            text(concat!("rpm-rs ", "0.30 (cargo xtask build-srpm)")),
        ),
        tag(IndexTag::RPMTAG_ENCODING, text("utf-8")),
        tag(IndexTag::RPMTAG_SOURCEPACKAGE, IndexData::Int32(vec![1])),
        // File list, in the sorted order of the payload.
        tag(
            IndexTag::RPMTAG_FILESIZES,
            IndexData::Int32(files.iter().map(|(f, _)| f.contents.len() as u32).collect()),
        ),
        tag(
            IndexTag::RPMTAG_FILEMODES,
            IndexData::Int16(files.iter().map(|(f, _)| S_IFREG | f.permissions).collect()),
        ),
        tag(IndexTag::RPMTAG_FILERDEVS, IndexData::Int16(vec![0; count])),
        tag(
            IndexTag::RPMTAG_FILEMTIMES,
            IndexData::Int32(vec![package.build_time; count]),
        ),
        tag(
            IndexTag::RPMTAG_FILEDIGESTS,
            IndexData::StringArray(files.iter().map(|(f, _)| sha256_hex(&f.contents)).collect()),
        ),
        tag(IndexTag::RPMTAG_FILELINKTOS, string_list("")),
        tag(
            IndexTag::RPMTAG_FILEFLAGS,
            IndexData::Int32(files.iter().map(|(_, flags)| flags.bits()).collect()),
        ),
        tag(IndexTag::RPMTAG_FILEUSERNAME, string_list("root")),
        tag(IndexTag::RPMTAG_FILEGROUPNAME, string_list("root")),
        tag(
            IndexTag::RPMTAG_FILEVERIFYFLAGS,
            IndexData::Int32(vec![VERIFY_ALL; count]),
        ),
        tag(
            IndexTag::RPMTAG_FILEDEVICES,
            IndexData::Int32(vec![1; count]),
        ),
        tag(
            IndexTag::RPMTAG_FILEINODES,
            IndexData::Int32((1..=count as u32).collect()),
        ),
        tag(IndexTag::RPMTAG_FILELANGS, string_list("")),
        tag(
            IndexTag::RPMTAG_DIRINDEXES,
            IndexData::Int32(vec![0; count]),
        ),
        tag(
            IndexTag::RPMTAG_BASENAMES,
            IndexData::StringArray(files.iter().map(|(f, _)| f.name.clone()).collect()),
        ),
        // Source packages keep all files in one directory with an empty name.
        tag(
            IndexTag::RPMTAG_DIRNAMES,
            IndexData::StringArray(vec![String::new()]),
        ),
        tag(
            IndexTag::RPMTAG_FILEDIGESTALGO,
            IndexData::Int32(vec![DigestAlgorithm::Sha2_256 as u32]),
        ),
        tag(
            IndexTag::RPMTAG_SOURCE,
            IndexData::StringArray(package.sources.iter().map(|f| f.name.clone()).collect()),
        ),
        tag(
            IndexTag::RPMTAG_ARCHIVESIZE,
            IndexData::Int32(vec![cpio.len() as u32]),
        ),
        // A source package provides its own name at its exact version.
        tag(
            IndexTag::RPMTAG_PROVIDENAME,
            IndexData::StringArray(vec![package.name.clone()]),
        ),
        tag(
            IndexTag::RPMTAG_PROVIDEFLAGS,
            IndexData::Int32(vec![DependencyFlags::EQUAL.bits()]),
        ),
        tag(
            IndexTag::RPMTAG_PROVIDEVERSION,
            IndexData::StringArray(vec![format!("{}-{}", package.version, package.release)]),
        ),
        tag(
            IndexTag::RPMTAG_REQUIRENAME,
            IndexData::StringArray(requires.iter().map(|d| d.name.clone()).collect()),
        ),
        tag(
            IndexTag::RPMTAG_REQUIREFLAGS,
            IndexData::Int32(requires.iter().map(|d| d.flags.bits()).collect()),
        ),
        tag(
            IndexTag::RPMTAG_REQUIREVERSION,
            IndexData::StringArray(requires.iter().map(|d| d.version.clone()).collect()),
        ),
        tag(IndexTag::RPMTAG_PAYLOADFORMAT, text("cpio")),
        tag(IndexTag::RPMTAG_PAYLOADCOMPRESSOR, text("gzip")),
        tag(
            IndexTag::RPMTAG_PAYLOADFLAGS,
            text(&PAYLOAD_GZIP_LEVEL.to_string()),
        ),
        // Payload digests: of the compressed payload, and of the archive
        // inside it (rpm checks the first with `rpm -K`).
        tag(
            IndexTag::RPMTAG_PAYLOADSHA256,
            IndexData::StringArray(vec![sha256_hex(payload)]),
        ),
        tag(
            IndexTag::RPMTAG_PAYLOADSHA256ALGO,
            IndexData::Int32(vec![DigestAlgorithm::Sha2_256 as u32]),
        ),
        tag(
            IndexTag::RPMTAG_PAYLOADSHA256ALT,
            IndexData::StringArray(vec![sha256_hex(cpio)]),
        ),
    ];
    if let Some(url) = &package.url {
        entries.push(tag(IndexTag::RPMTAG_URL, text(url)));
    }
    if !package.changelog.is_empty() {
        entries.extend([
            tag(
                IndexTag::RPMTAG_CHANGELOGTIME,
                IndexData::Int32(package.changelog.iter().map(|e| e.time).collect()),
            ),
            tag(
                IndexTag::RPMTAG_CHANGELOGNAME,
                IndexData::StringArray(package.changelog.iter().map(|e| e.name.clone()).collect()),
            ),
            tag(
                IndexTag::RPMTAG_CHANGELOGTEXT,
                IndexData::StringArray(package.changelog.iter().map(|e| e.text.clone()).collect()),
            ),
        ]);
    }
    // from_entries sorts the entries by tag and adds the immutable region.
    Ok(Header::from_entries(
        entries,
        IndexTag::RPMTAG_HEADERIMMUTABLE,
    ))
}

fn sha256_hex(data: &[u8]) -> String {
    let digest = Sha256::digest(data);
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
