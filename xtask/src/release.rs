//! The package release (Debian revision, RPM Release) as `--release` and
//! `release:` in packaging/distros.yaml take it on every route: one parser,
//! one message. Its own module: both distro and pipeline read it.

use std::fmt;
use std::str::FromStr;

/// What a release is and what to pass: the whole message a bad `--release`
/// gets on every route (clap prefixes it with the value and the option).
pub const RELEASE_HELP: &str = "a release numbers the packages built from one upstream version (the N in 1.4.0-N): a whole number from 1 to 999999999, digits only, without sign or leading zeros; pass e.g. --release 2";

/// The largest release: nine digits fit the u32 both formats are read into.
const MAX_DIGITS: usize = 9;

/// A valid package release: 1 to 999999999, written in plain digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release(u32);

impl Release {
    pub fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Why a `--release` value is refused: always [`RELEASE_HELP`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRelease;

impl fmt::Display for BadRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(RELEASE_HELP)
    }
}

impl std::error::Error for BadRelease {}

impl FromStr for Release {
    type Err = BadRelease;

    /// Digits only, so `+1`, ` 1`, `1-2`, `1.0` and `a b` are refused
    /// (u32's own parser takes `+1`); no leading zero, so one release has
    /// one spelling; nine digits at most.
    fn from_str(text: &str) -> Result<Release, BadRelease> {
        let digits_only = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        if !digits_only || text.starts_with('0') || text.len() > MAX_DIGITS {
            return Err(BadRelease);
        }
        text.parse().map(Release).map_err(|_| BadRelease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_plain_positive_numbers() {
        assert_eq!("1".parse(), Ok(Release(1)));
        assert_eq!("42".parse(), Ok(Release(42)));
        assert_eq!("999999999".parse(), Ok(Release(999_999_999)));
        for bad in [
            "",
            "0",
            "01",
            "+1",
            "-1",
            "1-2",
            "a b",
            " 1",
            "1.0",
            "1000000000",
            "99999999999999999999999",
        ] {
            assert_eq!(bad.parse::<Release>(), Err(BadRelease), "{bad:?}");
        }
    }
}
