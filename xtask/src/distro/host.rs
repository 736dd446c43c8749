//! Which distros.yaml entry the machine we run on is, from its os-release.

/// The distros.yaml id an os-release file describes, whether or not the
/// data file has it: `debian` 12 -> debian12, `ubuntu` 22.04 -> ubuntu2204,
/// RHEL/CentOS 9.4 -> rhel9, Rocky -> rocky9, AlmaLinux -> alma9, Fedora ->
/// fedora, SLES/SLED/Leap 15.6 -> sles15 (16.0 -> sles16). Ubuntu's ids carry the whole
/// version (its releases are YY.MM), the others the major version. None
/// without an ID, or without a VERSION_ID (Debian testing/sid) except for
/// Fedora, whose id has no version.
pub fn host_distro_id(os_release: &str) -> Option<String> {
    let field = |key: &str| {
        os_release.lines().find_map(|line| {
            line.strip_prefix(key)?
                .strip_prefix('=')
                .map(|value| value.trim().trim_matches('"').to_owned())
        })
    };
    let id = field("ID")?;
    if id == "fedora" {
        return Some(id);
    }
    let version = field("VERSION_ID").filter(|v| !v.is_empty())?;
    let major = version.split('.').next().unwrap_or_default();
    Some(match id.as_str() {
        "ubuntu" => format!("ubuntu{}", version.replace('.', "")),
        "rhel" | "centos" => format!("rhel{major}"),
        "almalinux" => format!("alma{major}"),
        "sles" | "sled" | "opensuse-leap" => format!("sles{major}"),
        other => format!("{other}{major}"),
    })
}
