//! The payload of a source rpm: its files as a newc cpio archive, gzip'd
//! without a timestamp, so the same files give the same bytes.

use anyhow::{Context, Result};
use flate2::{Compression, write::GzEncoder};
use std::io::Write;

/// `S_IFREG`: the file type bits of a regular file in a cpio mode.
pub const S_IFREG: u16 = 0o100000;

/// One file of the payload: its bare name, permission bits and contents.
pub struct PayloadFile<'a> {
    pub name: &'a str,
    pub permissions: u16,
    pub contents: &'a [u8],
}

/// The newc ("070701") cpio archive rpm payloads use, files in the given
/// order, inode numbers (1, 2, ...) matching the header's FILEINODES.
pub fn cpio_archive(files: &[PayloadFile<'_>], mtime: u32) -> Vec<u8> {
    let capacity = files.iter().map(|f| f.contents.len() + 256).sum::<usize>() + 256;
    let mut archive = Vec::with_capacity(capacity);
    for (index, file) in files.iter().enumerate() {
        let mode = u32::from(S_IFREG | file.permissions);
        cpio_entry(
            &mut archive,
            index as u32 + 1,
            mode,
            mtime,
            file.name,
            file.contents,
        );
    }
    cpio_entry(&mut archive, 0, 0, 0, "TRAILER!!!", &[]);
    archive
}

fn cpio_entry(archive: &mut Vec<u8>, ino: u32, mode: u32, mtime: u32, name: &str, data: &[u8]) {
    let fields = [
        ino,
        mode,
        0, // uid
        0, // gid
        1, // nlink
        mtime,
        data.len() as u32,
        0, // dev major
        0, // dev minor
        0, // rdev major
        0, // rdev minor
        name.len() as u32 + 1,
        0, // checksum (unused by newc)
    ];
    archive.extend_from_slice(b"070701");
    for field in fields {
        archive.extend_from_slice(format!("{field:08x}").as_bytes());
    }
    archive.extend_from_slice(name.as_bytes());
    archive.push(0);
    pad4(archive);
    archive.extend_from_slice(data);
    pad4(archive);
}

fn pad4(archive: &mut Vec<u8>) {
    while !archive.len().is_multiple_of(4) {
        archive.push(0);
    }
}

/// gzip without a file name or timestamp in its header (flate2's
/// `GzEncoder::new` writes mtime 0), so the same input gives the same bytes.
pub fn gzip(data: &[u8], level: u32) -> Result<Vec<u8>> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(data.len() / 2), Compression::new(level));
    encoder
        .write_all(data)
        .context("compressing the rpm payload")?;
    encoder.finish().context("compressing the rpm payload")
}
