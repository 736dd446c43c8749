//! DKMS's side of the next-boot verdict (docs/next-boot.md, "The checks",
//! dkms): what DKMS has of nv_peer_mem for a kernel, and, where it has
//! nothing, whether our dkms.conf skips that kernel and for want of what.

use crate::kernel_modules::MODULE;
use crate::report::Fact;
use std::path::Path;

/// What dkms.conf finds missing for @release ("MLNX_OFED (no
/// ib_register_peer_memory_client)", "the NVIDIA driver (no
/// nvidia_p2p_get_pages)", or both joined by "and"), by the same rule, so
/// the verdict gives the one line DKMS printed when it skipped the kernel
/// (dkms/dkms.conf.tera: a prerequisite counts when it is registered with
/// DKMS, which builds it first, or when something built for the kernel
/// exports its symbol); None when nothing is missing.
pub fn missing_prerequisites(root: &Path, release: &str) -> Option<String> {
    let mut missing = Vec::new();
    if !registered(root, |n| n == "mlnx-ofed-kernel" || n == "mlnx-ofa_kernel")
        && !exported(root, release, "ib_register_peer_memory_client")
    {
        missing.push("MLNX_OFED (no ib_register_peer_memory_client)");
    }
    if !registered(root, |n| {
        matches!(n, "nvidia" | "nvidia-current" | "nvidia-current-open")
            || n.starts_with("nvidia-tesla-")
    }) && !exported(root, release, "nvidia_p2p_get_pages")
    {
        missing.push("the NVIDIA driver (no nvidia_p2p_get_pages)");
    }
    (!missing.is_empty()).then(|| missing.join(" and "))
}

/// The package that holds @release's headers, by the package manager
/// that installed that kernel (docs/diagnostics.md, the `module` row):
/// dpkg's linux-image-<release> gets linux-headers-<release>; where rpm
/// installed it, Fedora's and RHEL's kernel-devel-<release> (a NEVRA:
/// kernel-core's uname release is its <version>-<release>.<arch>), for a
/// flavour's release (<vra>+debug, +64k, +64k_debug: kernel.spec's
/// uname_suffix, docs/fleet.md "Which package is a kernel") that
/// flavour's kernel-<flavour>-devel-<vra>, or for a SUSE flavor's release
/// (-default, -64kb, -rt) that flavor's kernel-<flavor>-devel, named
/// without a version.
pub fn headers_package(root: &Path, release: &str) -> String {
    let dpkg_kernel = root
        .join("var/lib/dpkg/info")
        .join(format!("linux-image-{release}.list"))
        .exists();
    let rpm = ["var/lib/rpm", "usr/lib/sysimage/rpm"]
        .iter()
        .any(|d| root.join(d).is_dir());
    if !dpkg_kernel && rpm {
        return match release.rsplit_once('-') {
            Some((_, flavor)) if matches!(flavor, "default" | "64kb" | "rt") => {
                format!("its headers, kernel-{flavor}-devel of {release}")
            }
            _ => match release.split_once('+') {
                // uname_suffix wrote the variant's '-' as '_'; the
                // package's name keeps it. The part before '+' ends in
                // the package's arch (a Debian release has a '+' too).
                Some((vra, flavour))
                    if vra.rsplit_once('.').is_some_and(|(_, arch)| {
                        matches!(arch, "x86_64" | "aarch64" | "ppc64le" | "s390x")
                    }) =>
                {
                    format!(
                        "its headers, kernel-{}-devel-{vra}",
                        flavour.replace('_', "-")
                    )
                }
                _ => format!("its headers, kernel-devel-{release}"),
            },
        };
    }
    if dpkg_kernel || root.join("var/lib/dpkg/status").exists() {
        return format!("its headers, linux-headers-{release}");
    }
    "its headers".into()
}

/// A DKMS module whose name @wanted accepts is registered: some version of
/// it has a source (/var/lib/dkms/<name>/<version>/source), as `dkms add`
/// leaves it (nvpm_dkms_registered in dkms.conf).
fn registered(root: &Path, wanted: impl Fn(&str) -> bool) -> bool {
    let Ok(modules) = std::fs::read_dir(root.join("var/lib/dkms")) else {
        return false;
    };
    modules.flatten().any(|m| {
        wanted(&m.file_name().to_string_lossy())
            && std::fs::read_dir(m.path())
                .map(|vs| vs.flatten().any(|v| v.path().join("source").exists()))
                .unwrap_or(false)
    })
}

/// Something built for @release exports @symbol (nvpm_exports in
/// dkms.conf): an installed module (depmod's modules.symbols), MLNX_OFED's
/// per-kernel build tree (/usr/src/ofa_kernel/<arch>/<release>, or without
/// the arch), or the kernel itself (its build tree's Module.symvers).
fn exported(root: &Path, release: &str, symbol: &str) -> bool {
    let modules = root.join("lib/modules").join(release);
    let alias = format!("alias symbol:{symbol} ");
    if std::fs::read_to_string(modules.join("modules.symbols"))
        .is_ok_and(|t| t.lines().any(|l| l.starts_with(&alias)))
    {
        return true;
    }
    let ofa = root.join("usr/src/ofa_kernel");
    let mut symvers = vec![
        ofa.join(release).join("Module.symvers"),
        modules.join("build/Module.symvers"),
    ];
    if let Ok(arches) = std::fs::read_dir(&ofa) {
        symvers.extend(
            arches
                .flatten()
                .map(|a| a.path().join(release).join("Module.symvers")),
        );
    }
    symvers.iter().any(|f| {
        std::fs::read_to_string(f)
            .is_ok_and(|t| t.lines().any(|l| l.split('\t').nth(1) == Some(symbol)))
    })
}

/// DKMS installed nv_peer_mem for @release: the kernel-<release>-<arch>
/// link `dkms install` makes in its tree.
pub fn installed_for(root: &Path, release: &str) -> bool {
    std::fs::read_dir(root.join("var/lib/dkms").join(MODULE))
        .map(|d| {
            d.flatten().any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("kernel-{release}-"))
            })
        })
        .unwrap_or(false)
}

/// DKMS's state for @release: built or installed for it, per DKMS's tree
/// (/var/lib/dkms/<module>/<version>/<release>/<arch>, and the
/// kernel-<release>-<arch> link `dkms install` makes).
pub fn facts(root: &Path, release: &str, facts: &mut Vec<Fact>) {
    let tree = root.join("var/lib/dkms").join(MODULE);
    let Ok(entries) = std::fs::read_dir(&tree) else {
        return;
    };
    let mut versions: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().is_dir() && !e.file_name().to_string_lossy().starts_with("kernel-"))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    versions.sort();
    let installed = installed_for(root, release);
    let built = versions
        .iter()
        .filter(|v| tree.join(v).join(release).is_dir())
        .cloned()
        .collect::<Vec<_>>();
    let message = match (installed, built.is_empty()) {
        (true, _) => format!(
            "DKMS: {MODULE} {} installed for {release}",
            built.join(", ")
        ),
        (false, false) => format!(
            "DKMS: {MODULE} {} built for {release}, not installed",
            built.join(", ")
        ),
        (false, true) => format!(
            "DKMS: {MODULE} {} added, not built for {release}{}{}",
            versions.join(", "),
            missing_prerequisites(root, release)
                .map(|m| format!("; its dkms.conf skips that kernel: it lacks {m}"))
                .unwrap_or_default(),
            last_build_error(&tree, &versions)
                .map(|e| format!("; its last failed build's log says: {e}"))
                .unwrap_or_default()
        ),
    };
    // The module's own line says whether one loads; this says what DKMS
    // has, for the admin who expected DKMS to build it.
    facts.push(Fact::info("dkms", "node", message));
}

/// The last line that reports an error in the make.log a failed DKMS
/// build leaves in its build directory (dkms 3: /var/lib/dkms/<module>/
/// <version>/build/make.log), for the one-line reason.
fn last_build_error(tree: &Path, versions: &[String]) -> Option<String> {
    versions.iter().rev().find_map(|v| {
        let log = std::fs::read_to_string(tree.join(v).join("build/make.log")).ok()?;
        log.lines()
            .rev()
            .find(|l| l.contains("error") || l.contains("Error"))
            .map(|l| l.trim().chars().take(200).collect())
    })
}
