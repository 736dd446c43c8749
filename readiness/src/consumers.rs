//! What NCCL and UCX decide, from the files they test and NCCL's distance
//! rule (docs/diagnostics.md, "NCCL and UCX"):
//! - NCCL (src/transport/net_ib/gdr.cc, ncclIbGdrSupport) enables
//!   GPUDirect RDMA for an HCA when one of its peer-memory files exists,
//!   or DMA-BUF works (ncclIbDmaBufSupport); then per GPU-NIC pair only
//!   within its level (src/graph/paths.cc, ncclTopoCheckGdr):
//!   `NCCL_NET_GDR_LEVEL`, else PXB on a PCIe host;
//! - UCX (src/uct/ib/base/ib_md.c, uct_ib_check_gpudirect_driver) registers
//!   CUDA memory when one of its files exists or DMA-BUF works; it has no
//!   distance rule.

use crate::host::Host;
use crate::topology::Distance;

/// The files NCCL tests, relative to sysfs (gdr.cc, ibGdrSupportInitOnce).
pub const NCCL_FILES: [&str; 3] = [
    "kernel/mm/memory_peers/nv_mem/version",
    "kernel/mm/memory_peers/nv_mem_nc/version",
    "module/nvidia_peermem/version",
];

/// The files UCX tests for CUDA memory (ib_md.c).
pub const UCX_FILES: [&str; 3] = [
    "kernel/mm/memory_peers/nv_mem/version",
    "module/nvidia_peermem/version",
    "module/nv_peer_mem/version",
];

/// NCCL's path types in their order since 2.27.5 (graph.h), the ones
/// `NCCL_NET_GDR_LEVEL` accepts by name (paths.cc, ncclGetLevel).
const NCCL_LEVELS: [&str; 10] = [
    "LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS",
];

/// A distance by NCCL's name for it, the one `NCCL_NET_GDR_LEVEL` takes:
/// NCCL has no NODE, its CPU nodes are NUMA nodes, so a path between host
/// bridges of one node is PHB (ncclGetLevel accepts only NCCL_LEVELS).
pub fn nccl_name(d: Distance) -> &'static str {
    match d {
        Distance::Pix => "PIX",
        Distance::Pxb => "PXB",
        Distance::Phb | Distance::Node => "PHB",
        Distance::Sys => "SYS",
    }
}

/// The index of a distance in NCCL's order.
fn nccl_index(d: Distance) -> usize {
    let name = nccl_name(d);
    NCCL_LEVELS
        .iter()
        .position(|l| *l == name)
        .expect("a level")
}

/// A `NCCL_NET_GDR_LEVEL` value as NCCL's ncclGetLevel (paths.cc) takes
/// it: exactly one of its names (no spaces trimmed, case kept), or, if the
/// value starts with a digit, a legacy number as strtol(str, NULL, 0)
/// reads it (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and up SYS: levelsOldToNew).
/// None: NCCL knows no such level and keeps its default.
pub fn parse_level(value: &str) -> Option<usize> {
    if let Some(i) = NCCL_LEVELS.iter().position(|l| *l == value) {
        return Some(i);
    }
    if value.starts_with(|c: char| c.is_ascii_digit()) {
        let old = strtol_base0(value).min(5) as usize;
        let name = ["LOC", "PIX", "PXB", "PHB", "SYS", "SYS"][old];
        return NCCL_LEVELS.iter().position(|l| *l == name);
    }
    None
}

/// The leading number of @s (which starts with a digit) as strtol with
/// base 0 reads it: 0x.. hexadecimal, 0.. octal, else decimal; saturating.
fn strtol_base0(s: &str) -> u64 {
    let (digits, radix) = if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        if hex.starts_with(|c: char| c.is_ascii_hexdigit()) {
            (hex, 16)
        } else {
            return 0; // "0x" alone: strtol reads the 0
        }
    } else if s.starts_with('0') {
        (s, 8)
    } else {
        (s, 10)
    };
    digits
        .chars()
        .map_while(|c| c.to_digit(radix))
        .fold(0u64, |n, d| {
            n.saturating_mul(u64::from(radix))
                .saturating_add(u64::from(d))
        })
}

pub fn level_name(index: usize) -> &'static str {
    NCCL_LEVELS[index]
}

/// The value NCCL takes for @name from the text of a configuration file:
/// misc/param.cc's setEnvFile reads it line by line, skips a line that
/// starts with `#`, splits the rest at its first `=` with nothing trimmed,
/// and sets the variable only if it is not set yet (setenv(name, value,
/// 0)): the first line naming it wins, whatever its value.
fn conf_value(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|line| {
        if line.starts_with('#') {
            return None;
        }
        let (key, value) = line.split_once('=')?;
        (key == name).then(|| value.to_owned())
    })
}

/// The files NCCL reads its settings from, in its order (misc/param.cc,
/// initEnvFunc): the one `NCCL_CONF_FILE` names or, without it, the
/// user's `~/.nccl.conf` (the home directory of the user running this
/// check, as getpwuid(getuid()) gives it: /etc/passwd under the root),
/// then `/etc/nccl.conf`. Each with the name it is shown by.
/// `NV_PEER_MEM_USER_NCCL_CONF` and `NV_PEER_MEM_NCCL_CONF` (tests) stand
/// for the last two on a node, never in a replay (a dump holds the files).
fn conf_files(host: &Host) -> Vec<(std::path::PathBuf, String)> {
    // A test's stand-in, shown by its own name.
    let test_file = |var: &str| {
        let file = std::path::PathBuf::from(std::env::var_os(var).filter(|_| !host.is_replay())?);
        let shown = file.display().to_string();
        Some((file, shown))
    };
    let mut files = Vec::new();
    match host.env_var("NCCL_CONF_FILE").filter(|f| !f.is_empty()) {
        Some(file) => {
            let path = std::path::PathBuf::from(&file);
            let under_root = host.root.join(path.strip_prefix("/").unwrap_or(&path));
            files.push((under_root, format!("{file} (NCCL_CONF_FILE)")));
        }
        None => {
            if let Some(file) = test_file("NV_PEER_MEM_USER_NCCL_CONF") {
                files.push(file);
            } else if let Some(home) = user_home(host) {
                let file = format!("{}/.nccl.conf", home.trim_end_matches('/'));
                files.push((host.root_path(file.trim_start_matches('/')), file));
            }
        }
    }
    files.push(
        test_file("NV_PEER_MEM_NCCL_CONF")
            .unwrap_or_else(|| (host.root_path("etc/nccl.conf"), "/etc/nccl.conf".to_owned())),
    );
    files
}

/// The home directory of the user this check runs as, from /etc/passwd
/// under the root (recorded, so that a replay reads the same file). None
/// where the user is not in it (NSS elsewhere, LDAP): then NCCL's
/// ~/.nccl.conf is not read here, which the level's source line says by
/// not naming it.
fn user_home(host: &Host) -> Option<String> {
    host.answer("user home (getpwuid(getuid()))", || {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .next()?
            .to_owned();
        let passwd = std::fs::read_to_string(host.root_path("etc/passwd")).ok()?;
        passwd.lines().find_map(|l| {
            let fields: Vec<&str> = l.split(':').collect();
            (fields.len() >= 6 && fields[2] == uid).then(|| fields[5].to_owned())
        })
    })
}

/// NCCL's value of setting @name and where it came from: the first NCCL
/// meets, in the environment of the process, then in each configuration
/// file in its order (`conf_files`); None where none sets it.
pub fn nccl_setting(host: &Host, name: &str) -> Option<(String, String)> {
    match host.env_var(name) {
        Some(value) => Some((value, "the environment".to_owned())),
        None => conf_files(host).into_iter().find_map(|(path, shown)| {
            let text = host.text(&path).ok()?;
            conf_value(&text, name).map(|v| (v, shown))
        }),
    }
}

/// NCCL's level: (index, where it came from). NCCL takes the first value
/// of `NCCL_NET_GDR_LEVEL` it meets: the environment of the process, then
/// each configuration file in its order (`conf_files`; NCCL's docs: "set
/// statically in /etc/nccl.conf (for an administrator to set system-wide
/// values) or in ~/.nccl.conf (for users)"). A value NCCL does not know as
/// a level, an empty one included, leaves its default, PXB (ncclGetLevel).
pub fn nccl_level(host: &Host) -> (usize, String) {
    let default = parse_level("PXB").expect("PXB");
    match nccl_setting(host, "NCCL_NET_GDR_LEVEL") {
        None => (default, "NCCL's default, PXB".to_owned()),
        Some((value, from)) => match parse_level(&value) {
            Some(i) => (i, format!("NCCL_NET_GDR_LEVEL={value} in {from}")),
            None => (
                default,
                format!(
                    "NCCL's default, PXB (NCCL_NET_GDR_LEVEL={value:?} in {from} is no level NCCL knows)"
                ),
            ),
        },
    }
}

/// Where DMA-BUF can serve, NCCL registers GPU memory through it, before
/// a peer client (NCCL 2.28.9 and 2.30.7 transport/net.cc: `useDmaBuf =
/// useGdr && dmaBufSupport && ptrSupport & NCCL_PTR_DMABUF`; init.cc's
/// dmaBufSupported: `NCCL_DMABUF_ENABLE`, default 1, the CUDA driver's
/// CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED; net_ib.cc: the kernel's
/// ibv_reg_dmabuf_mr). What turns it off: `NCCL_DMABUF_ENABLE` set to
/// anything strtoll(str, NULL, 0) reads as 0 (misc/param.cc,
/// ncclLoadParam, both releases: no check of the rest, so `0`, `0x0` and
/// `off`, which has no digits, alike; an empty value keeps the default),
/// said with where it was set; None where it is on.
pub fn nccl_dmabuf_off(host: &Host) -> Option<String> {
    let (value, from) = nccl_setting(host, "NCCL_DMABUF_ENABLE")?;
    param_zero(&value).then(|| format!("NCCL_DMABUF_ENABLE={value} in {from}"))
}

/// Whether NCCL reads @value of an integer parameter as 0: misc/param.cc's
/// ncclLoadParam takes strtoll(str, NULL, 0) of a set, non-empty value
/// with no check of the rest (so `0`, `0x0` and `off`, which has no
/// digits, alike); an empty value keeps the default.
pub fn param_zero(value: &str) -> bool {
    let text = value.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    !value.is_empty() && strtol_base0(digits) == 0
}

/// `NCCL_NET_GDR_LEVEL` where it is set to a level NCCL knows (None: NCCL
/// keeps its default, which the release decides: c2c.rs).
pub fn nccl_level_given(host: &Host) -> Option<usize> {
    nccl_setting(host, "NCCL_NET_GDR_LEVEL").and_then(|(v, _)| parse_level(&v))
}

/// Whether NCCL lets GPUDirect RDMA through a C2C link (paths.cc,
/// `NCCL_NET_GDR_C2C`, default 1 in both fixture releases); with where
/// it was turned off.
pub fn nccl_gdr_c2c(host: &Host) -> (bool, String) {
    match nccl_setting(host, "NCCL_NET_GDR_C2C") {
        Some((value, from)) if param_zero(&value) => {
            (false, format!("NCCL_NET_GDR_C2C={value} in {from}"))
        }
        Some((value, from)) if !value.is_empty() => {
            (true, format!("NCCL_NET_GDR_C2C={value} in {from}"))
        }
        _ => (true, "NCCL_NET_GDR_C2C's default, 1".to_owned()),
    }
}

/// Whether NCCL uses GPUDirect RDMA over a path of @distance at @level.
pub fn nccl_within(distance: Distance, level: usize) -> bool {
    nccl_index(distance) <= level
}

/// Those of @files that exist under sysfs.
pub fn present(host: &Host, files: &[&'static str]) -> Vec<&'static str> {
    files
        .iter()
        .copied()
        .filter(|f| host.exists(&host.sys_path(f)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_by_name_and_legacy_number() {
        assert_eq!(parse_level("PXB").map(level_name), Some("PXB"));
        assert_eq!(parse_level("SYS").map(level_name), Some("SYS"));
        assert_eq!(parse_level("3").map(level_name), Some("PHB"));
        assert_eq!(parse_level("0").map(level_name), Some("LOC"));
        assert_eq!(parse_level("9").map(level_name), Some("SYS"));
        assert_eq!(parse_level("pxb"), None); // NCCL compares case-sensitively
        assert_eq!(parse_level("far"), None);
        // strcmp, then strtol(str, NULL, 0) when the first character is a digit
        assert_eq!(parse_level(" PXB"), None);
        assert_eq!(parse_level("PXB "), None);
        assert_eq!(parse_level(""), None);
        assert_eq!(parse_level("0x2").map(level_name), Some("PXB"));
        assert_eq!(parse_level("010").map(level_name), Some("SYS"));
        assert_eq!(parse_level("3abc").map(level_name), Some("PHB"));
        assert_eq!(parse_level("0x").map(level_name), Some("LOC"));
    }

    #[test]
    fn a_configuration_file_as_nccls_set_env_file_reads_it() {
        let text = "#NCCL_NET_GDR_LEVEL=SYS\nNCCL_NET_GDR_LEVEL=PHB\nNCCL_NET_GDR_LEVEL=SYS\n";
        assert_eq!(
            conf_value(text, "NCCL_NET_GDR_LEVEL").as_deref(),
            Some("PHB")
        );
        // no trimming: a spaced name is another variable, a spaced value kept
        assert_eq!(
            conf_value("NCCL_NET_GDR_LEVEL = SYS\n", "NCCL_NET_GDR_LEVEL"),
            None
        );
        assert_eq!(
            conf_value("NCCL_NET_GDR_LEVEL= SYS\n", "NCCL_NET_GDR_LEVEL").as_deref(),
            Some(" SYS")
        );
        // the first line wins even when its value is no level
        assert_eq!(
            conf_value(
                "NCCL_NET_GDR_LEVEL=far\nNCCL_NET_GDR_LEVEL=SYS\n",
                "NCCL_NET_GDR_LEVEL"
            )
            .as_deref(),
            Some("far")
        );
    }

    #[test]
    fn dmabuf_is_off_where_strtoll_reads_zero() {
        let off = param_zero;
        assert!(off("0") && off("0x0") && off("off") && off(" 0"));
        assert!(!off("1") && !off("") && !off("2") && !off("-1"));
    }

    #[test]
    fn the_default_admits_pix_and_pxb_only() {
        let pxb = parse_level("PXB").unwrap();
        assert!(nccl_within(Distance::Pix, pxb));
        assert!(nccl_within(Distance::Pxb, pxb));
        assert!(!nccl_within(Distance::Phb, pxb));
        assert!(!nccl_within(Distance::Node, pxb));
        assert!(!nccl_within(Distance::Sys, pxb));
        // P2C (2.30.7's default level with NCCL_NET_GDR_C2C) admits the same on a PCIe host
        let p2c = parse_level("P2C").unwrap();
        assert!(nccl_within(Distance::Pxb, p2c) && !nccl_within(Distance::Phb, p2c));
        // PHB admits NODE too: NCCL's CPU nodes are NUMA nodes
        assert!(nccl_within(Distance::Node, parse_level("PHB").unwrap()));
        assert!(!nccl_within(Distance::Pix, parse_level("LOC").unwrap()));
    }
}
