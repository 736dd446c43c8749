//! nv_peer_mem's own diagnosis, when it could serve but is not loaded: the
//! service helper's `status` (packaging/nv_peer_mem-service; docs/
//! diagnostics.md) already tells why (ONBOOT, no module for this kernel,
//! symbol versions against the installed MLNX_OFED and NVIDIA builds, the
//! last load failure, DKMS), so the check passes its lines on rather than
//! deciding the same things twice. `NV_PEER_MEM_SERVICE` names another
//! helper, for tests; the sysfs/procfs roots reach it through the same
//! environment variables.

use crate::host::Host;
use std::path::PathBuf;
use std::process::Command;

pub const HELPER: &str = "/usr/libexec/nv_peer_mem/nv_peer_mem-service";

/// The helper's status lines without their `nv_peer_mem: ` prefix, or
/// None when no helper is installed (the packages are not).
/// Asked only in the forms people read, bounded like nvidia-smi.
pub fn status_lines(host: &Host) -> Option<Vec<String>> {
    let out = host.program("nv_peer_mem-service-status", || {
        let helper = std::env::var_os("NV_PEER_MEM_SERVICE")
            .map_or_else(|| PathBuf::from(HELPER), PathBuf::from);
        if !helper.exists() {
            return None;
        }
        // its status exits non-zero when the module is not loaded: the
        // lines count all the same
        crate::memory::run_bounded(
            Command::new("sh").arg(&helper).arg("status"),
            crate::memory::TIMEOUT,
        )
        .map(|(_, out)| out)
    })?;
    Some(
        out.lines()
            .map(|l| l.strip_prefix("nv_peer_mem: ").unwrap_or(l).to_owned())
            .filter(|l| !l.is_empty())
            .collect(),
    )
}
