//! Writes a binary `.deb` without dpkg-deb: the small part of cargo-deb this
//! project needs (docs/packaging.md says why it is not cargo-deb itself).
//!
//! The format (deb(5)): an `ar` archive of three members, in this order:
//! `debian-binary` ("2.0\n"), `control.tar.gz` (control, md5sums, the
//! maintainer scripts) and `data.tar.gz` (the files, as `./usr/...`).
//! dpkg accepts gzip for both tarballs (deb(5): "control.tar.gz",
//! "data.tar.gz"); dpkg-deb would pick xz, which needs a C library or a
//! second compressor crate for no gain on a 30 KiB package.
//!
//! Everything is deterministic: entries sorted by path with their parent
//! directories first, owner root:root (0:0), one mtime for every entry,
//! gzip without name or timestamp, ar members with the same mtime and
//! owner 0.

use anyhow::{Context, Result, ensure};
use flate2::{Compression, GzBuilder};
use md5::{Digest, Md5};
use std::collections::BTreeSet;
use std::io::Write;

/// One regular file of the package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebFile {
    /// Where it is installed, relative to / (`usr/src/x/dkms.conf`).
    pub path: String,
    /// Permission bits (0o644, 0o755).
    pub mode: u32,
    pub contents: Vec<u8>,
}

/// A binary package: its control fields in order, maintainer scripts
/// (`postinst`, ...) and `triggers`, and files.
#[derive(Debug, Clone)]
pub struct DebPackage {
    pub control: Vec<(String, String)>,
    pub scripts: Vec<(String, String)>,
    pub files: Vec<DebFile>,
    /// Every mtime in the package (SOURCE_DATE_EPOCH).
    pub mtime: u64,
}

/// The package's directories: every ancestor of a file, without the root.
fn directories(files: &[DebFile]) -> BTreeSet<String> {
    let mut dirs = BTreeSet::new();
    for file in files {
        let mut at = file.path.as_str();
        while let Some(slash) = at.rfind('/') {
            at = &at[..slash];
            dirs.insert(at.to_owned());
        }
    }
    dirs
}

/// `Installed-Size` as dpkg-gencontrol computes it (Dpkg 1.21,
/// scripts/dpkg-gencontrol.pl): it walks the package's build directory,
/// counting each regular file's size in KiB rounded up and every other
/// object (directories, the root) as 1. Under debhelper that directory
/// already holds DEBIAN/ with the maintainer scripts (dh_installdeb runs
/// before dh_gencontrol), so they count too.
pub fn installed_size_kib(files: &[DebFile], scripts: &[(String, String)]) -> u64 {
    let kib = |len: usize| (len as u64).div_ceil(1024);
    let file_kib: u64 = files.iter().map(|f| kib(f.contents.len())).sum();
    let script_kib: u64 = scripts.iter().map(|(_, text)| kib(text.len())).sum();
    let debian_dir = u64::from(!scripts.is_empty());
    file_kib + script_kib + debian_dir + directories(files).len() as u64 + 1
}

/// The `.deb` bytes of @package.
pub fn write_deb(package: &DebPackage) -> Result<Vec<u8>> {
    for file in &package.files {
        ensure!(
            !file.path.is_empty()
                && !file.path.starts_with('/')
                && !file.path.ends_with('/')
                && file
                    .path
                    .split('/')
                    .all(|c| !c.is_empty() && c != "." && c != ".."),
            "package path {:?} must be relative, without `.`/`..` or empty components",
            file.path
        );
    }
    let mut sorted: Vec<&DebFile> = package.files.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    for pair in sorted.windows(2) {
        ensure!(
            pair[0].path != pair[1].path,
            "two files of the package are both installed as /{}",
            pair[0].path
        );
    }
    let dirs = directories(&package.files);
    if let Some(file) = sorted.iter().find(|f| dirs.contains(&f.path)) {
        anyhow::bail!("/{} is both a file and a directory", file.path);
    }

    let mut data = TarWriter::new(package.mtime);
    data.directory("./")?;
    // Parents before children, siblings by name: sort by path components.
    let mut entries: Vec<(Vec<&str>, Option<&DebFile>, &str)> = dirs
        .iter()
        .map(|d| (d.split('/').collect(), None, d.as_str()))
        .chain(
            sorted
                .iter()
                .map(|f| (f.path.split('/').collect(), Some(*f), f.path.as_str())),
        )
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, file, path) in entries {
        match file {
            None => data.directory(&format!("./{path}/"))?,
            Some(file) => data.file(&format!("./{path}"), file.mode, &file.contents)?,
        }
    }

    let mut control = TarWriter::new(package.mtime);
    control.directory("./")?;
    let mut members: Vec<(String, u32, Vec<u8>)> = vec![
        ("control".to_owned(), 0o644, control_text(&package.control)?),
        ("md5sums".to_owned(), 0o644, md5sums(&sorted)),
    ];
    for (name, text) in &package.scripts {
        // The triggers file is data for dpkg, not a program.
        let mode = if name == "triggers" { 0o644 } else { 0o755 };
        members.push((name.clone(), mode, text.clone().into_bytes()));
    }
    members.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, mode, contents) in &members {
        control.file(&format!("./{name}"), *mode, contents)?;
    }

    let mut deb = b"!<arch>\n".to_vec();
    ar_member(&mut deb, "debian-binary", package.mtime, b"2.0\n")?;
    ar_member(
        &mut deb,
        "control.tar.gz",
        package.mtime,
        &control.finish()?,
    )?;
    ar_member(&mut deb, "data.tar.gz", package.mtime, &data.finish()?)?;
    Ok(deb)
}

/// The control file: `Field: value` lines, continuation lines as given
/// (a multi-line value such as Description keeps its ` `-indented lines).
fn control_text(fields: &[(String, String)]) -> Result<Vec<u8>> {
    let mut text = String::new();
    for (name, value) in fields {
        ensure!(
            !value.trim().is_empty(),
            "control field {name} is empty; an empty field must be left out"
        );
        text.push_str(&format!("{name}: {value}\n"));
    }
    Ok(text.into_bytes())
}

/// `md5sums`: `<md5>  <path>` per regular file, as dh_md5sums writes it.
fn md5sums(files: &[&DebFile]) -> Vec<u8> {
    let mut text = String::new();
    for file in files {
        let digest = Md5::digest(&file.contents);
        for byte in digest {
            text.push_str(&format!("{byte:02x}"));
        }
        text.push_str(&format!("  {}\n", file.path));
    }
    text.into_bytes()
}

/// One member of an ar archive (deb(5): 16-byte name, decimal mtime, owner,
/// group, octal mode, decimal size, "`\n", data padded to an even length).
fn ar_member(out: &mut Vec<u8>, name: &str, mtime: u64, data: &[u8]) -> Result<()> {
    ensure!(name.len() <= 16, "ar member name {name} is too long");
    let header = format!(
        "{name:<16}{mtime:<12}{:<6}{:<6}{:<8}{:<10}`\n",
        0,
        0,
        "100644",
        data.len()
    );
    ensure!(header.len() == 60, "ar header of {name} is malformed");
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    if data.len() % 2 == 1 {
        out.push(b'\n');
    }
    Ok(())
}

/// A ustar archive with `./`-prefixed names (as dpkg-deb writes them; the
/// tar crate's `set_path` would drop the `./`), gzip'd at the end.
struct TarWriter {
    archive: Vec<u8>,
    mtime: u64,
}

impl TarWriter {
    fn new(mtime: u64) -> TarWriter {
        TarWriter {
            archive: Vec::new(),
            mtime,
        }
    }

    fn directory(&mut self, path: &str) -> Result<()> {
        self.entry(path, tar::EntryType::Directory, 0o755, &[])
    }

    fn file(&mut self, path: &str, mode: u32, contents: &[u8]) -> Result<()> {
        self.entry(path, tar::EntryType::Regular, mode, contents)
    }

    fn entry(
        &mut self,
        path: &str,
        kind: tar::EntryType,
        mode: u32,
        contents: &[u8],
    ) -> Result<()> {
        let mut header = tar::Header::new_ustar();
        set_ustar_name(&mut header, path)?;
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_username("root")?;
        header.set_groupname("root")?;
        header.set_mtime(self.mtime);
        header.set_size(contents.len() as u64);
        header.set_cksum();
        self.archive.extend_from_slice(header.as_bytes());
        self.archive.extend_from_slice(contents);
        let padding = (512 - contents.len() % 512) % 512;
        self.archive.extend(std::iter::repeat_n(0u8, padding));
        Ok(())
    }

    fn finish(mut self) -> Result<Vec<u8>> {
        self.archive.extend([0u8; 1024]); // two zero blocks end a tar archive
        let mut encoder = GzBuilder::new()
            .mtime(0)
            .write(Vec::new(), Compression::best());
        encoder
            .write_all(&self.archive)
            .context("compressing a .deb member")?;
        encoder.finish().context("compressing a .deb member")
    }
}

/// Puts @path into the ustar name field (100 bytes), or splits it at a `/`
/// into prefix (155 bytes) and name when it is longer.
fn set_ustar_name(header: &mut tar::Header, path: &str) -> Result<()> {
    let bytes = path.as_bytes();
    let ustar = header
        .as_ustar_mut()
        .context("a ustar header has ustar fields")?;
    if bytes.len() <= ustar.name.len() {
        ustar.name[..bytes.len()].copy_from_slice(bytes);
        return Ok(());
    }
    let split = path
        .char_indices()
        .filter(|&(at, c)| c == '/' && at <= ustar.prefix.len() && bytes.len() - at - 1 <= 100)
        .map(|(at, _)| at)
        .next()
        .with_context(|| format!("{path} is too long for a ustar archive (155 + 100 bytes)"))?;
    ustar.prefix[..split].copy_from_slice(&bytes[..split]);
    let name = &bytes[split + 1..];
    ustar.name[..name.len()].copy_from_slice(name);
    Ok(())
}

#[cfg(test)]
#[path = "deb_archive_tests.rs"]
mod tests;
