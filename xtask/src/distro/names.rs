//! What the names and versions in packaging/distros.yaml may contain.

pub fn is_distro_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

pub fn is_dotted_number(text: &str) -> bool {
    !text.is_empty()
        && text
            .split('.')
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
}

/// A Debian revision suffix that sorts below the bare revision (Policy
/// 5.6.12: `~` sorts before anything, even the end of the version) and uses
/// only characters a revision may contain.
pub fn is_backport_suffix(suffix: &str) -> bool {
    suffix.len() >= 2
        && suffix.starts_with('~')
        && suffix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+.~".contains(&b))
}

/// Debian Policy 5.6.1: lowercase letters, digits, `+ - .`, at least two
/// characters, starting with an alphanumeric.
pub fn is_debian_package_name(name: &str) -> bool {
    name.len() >= 2
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
}
