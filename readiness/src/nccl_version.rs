//! The NCCL a job on this node would load from the system's library
//! directories: `libnccl.so.2`, the soname link NVIDIA's libnccl2 (and
//! Debian's) installs to `libnccl.so.2.<minor>.<patch>`. The check's NCCL
//! rules are proven against NCCL's own code of the releases in the
//! fixtures (ci/test-nccl.sh, docs/nccl-harness.md), which agree on every
//! rule the check judges by; an installed NCCL outside them is said, as
//! its rules may have moved. A job may load another NCCL (a Python wheel
//! such as PyTorch's nvidia-nccl-cu12, a container): the check cannot see
//! those.

use crate::host::Host;

/// The NCCL releases the check's rules were run against (the fixtures'
/// nccl-<release>.tar.gz; ci/test-nccl.sh).
pub const PROVEN: [(u32, u32, u32); 2] = [(2, 28, 9), (2, 30, 7)];

const LINKS: [&str; 6] = [
    "usr/lib/x86_64-linux-gnu/libnccl.so.2",
    "usr/lib/aarch64-linux-gnu/libnccl.so.2",
    "usr/lib/powerpc64le-linux-gnu/libnccl.so.2",
    "usr/lib64/libnccl.so.2",
    "usr/local/lib/libnccl.so.2",
    "usr/lib/libnccl.so.2",
];

/// (where, version) of the first system NCCL found.
pub fn installed(host: &Host) -> Option<(String, (u32, u32, u32))> {
    LINKS.iter().find_map(|link| {
        let target = host.link_target(&host.root_path(link)).ok()?;
        let name = target.file_name()?.to_string_lossy().into_owned();
        let version = parse(name.strip_prefix("libnccl.so.")?)?;
        let dir = link.rsplit_once('/').map_or("", |(d, _)| d);
        Some((format!("/{dir}/{name}"), version))
    })
}

fn parse(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.split('.').map(str::parse::<u32>);
    Some((
        parts.next()?.ok()?,
        parts.next()?.ok()?,
        parts.next()?.ok()?,
    ))
}

/// What to say of @found.
pub fn said((file, (a, b, c)): &(String, (u32, u32, u32))) -> String {
    let proven = PROVEN
        .iter()
        .map(|(x, y, z)| format!("{x}.{y}.{z}"))
        .collect::<Vec<_>>()
        .join(" and ");
    let (first, last) = (PROVEN[0], PROVEN[PROVEN.len() - 1]);
    let v = (*a, *b, *c);
    let within = if v >= first && v <= last {
        format!(
            "the NCCL rules judged here are those of {proven}, which agree on them but one, said where it counts (GPUDirect RDMA over C2C under a level set below P2C; ci/test-nccl.sh runs NCCL's own code)"
        )
    } else {
        format!(
            "the NCCL rules judged here were proven against {proven} only: this release's may differ (docs/nccl-harness.md says how to add it)"
        )
    };
    format!(
        "NCCL {a}.{b}.{c} is installed ({file}): {within}; a job may load another NCCL (a Python wheel, a container)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_what_is_said() {
        assert_eq!(parse("2.28.9"), Some((2, 28, 9)));
        assert_eq!(parse("2.28"), None);
        let inside = said(&("/usr/lib64/libnccl.so.2.29.3".to_owned(), (2, 29, 3)));
        assert!(inside.contains("agree on them"), "{inside}");
        let outside = said(&("/usr/lib64/libnccl.so.2.18.5".to_owned(), (2, 18, 5)));
        assert!(outside.contains("may differ"), "{outside}");
    }
}
