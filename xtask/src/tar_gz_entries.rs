//! Test support: what a `.tar.gz` holds, entry by entry, for the tests of
//! the two writers that make them (tarball.rs for the source tarballs,
//! dkms_package's deb writer for control.tar.gz and data.tar.gz).

use std::io::Read;

/// One entry's header fields and contents.
#[derive(Debug)]
pub struct TarEntry {
    /// The full path (ustar prefix or long name included), as stored.
    pub path: String,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub mtime: u64,
    pub owner: String,
    pub data: Vec<u8>,
}

/// The entries of `tar_gz`, in archive order; panics on a malformed archive
/// (these are tests of our own writers).
pub fn tar_gz_entries(tar_gz: &[u8]) -> Vec<TarEntry> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tar_gz));
    archive
        .entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let path = String::from_utf8(e.path_bytes().into_owned()).unwrap();
            let h = e.header().clone();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            TarEntry {
                path,
                mode: h.mode().unwrap(),
                uid: h.uid().unwrap(),
                gid: h.gid().unwrap(),
                mtime: h.mtime().unwrap(),
                owner: h.username().unwrap().unwrap_or("").to_owned(),
                data,
            }
        })
        .collect()
}
