//! Debian's version order, as dpkg itself decides it (`dpkg
//! --compare-versions`): the one comparison build-modules (which kernel
//! metapackage version is newest) and build-repo (what a removal or a
//! prune leaves satisfied, which kernel is newest) make.

use anyhow::{Context, Result};
use std::cmp::Ordering;
use std::process::Command;

/// The order of versions @a and @b.
pub fn order(a: &str, b: &str) -> Result<Ordering> {
    let holds = |op: &str| -> Result<bool> {
        Ok(Command::new("dpkg")
            .args(["--compare-versions", a, op, b])
            .status()
            .context("running dpkg --compare-versions (install dpkg)")?
            .success())
    };
    Ok(if holds("lt")? {
        Ordering::Less
    } else if holds("gt")? {
        Ordering::Greater
    } else {
        Ordering::Equal
    })
}
