//! `cargo xtask build-srpm`: the source RPM that `rpmbuild --rebuild` turns
//! into the kmod and DKMS packages.

pub mod writer;
