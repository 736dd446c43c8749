//! Each GPU's memory size, which neither sysfs nor procfs holds: asked of
//! `nvidia-smi --query-gpu=pci.bus_id,memory.total --format=csv,noheader,nounits`
//! when it is installed (a read-only query; `NV_PEER_MEM_NVIDIA_SMI` names
//! another program, for tests). Its absence only leaves the BAR1 fact
//! without a comparison.

use crate::host::Host;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};

/// GPU memory in bytes by PCI address (`0000:00:06.0`).
pub fn gpu_memory(_host: &Host) -> BTreeMap<String, u64> {
    let program =
        std::env::var("NV_PEER_MEM_NVIDIA_SMI").unwrap_or_else(|_| "nvidia-smi".to_owned());
    let output = Command::new(program)
        .args([
            "--query-gpu=pci.bus_id,memory.total",
            "--format=csv,noheader,nounits",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    match output {
        Ok(o) if o.status.success() => parse(&String::from_utf8_lossy(&o.stdout)),
        _ => BTreeMap::new(),
    }
}

/// `00000000:00:06.0, 81559` (memory in MiB) per line.
pub fn parse(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (bus_id, mib) = line.split_once(',')?;
            let bus_id = bus_id.trim().to_ascii_lowercase();
            // nvidia-smi's domain has 8 digits, sysfs's 4
            let (domain, rest) = bus_id.split_once(':')?;
            let domain = &domain[domain.len().saturating_sub(4)..];
            let mib: u64 = mib.trim().parse().ok()?;
            Some((format!("{domain}:{rest}"), mib << 20))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_probed_h100() {
        let m = super::parse("00000000:00:06.0, 81559\n00000000:1B:00.0, 81559\nbad line\n");
        assert_eq!(m.get("0000:00:06.0"), Some(&(81559 << 20)));
        assert_eq!(m.get("0000:1b:00.0"), Some(&(81559 << 20)));
        assert_eq!(m.len(), 2);
    }
}
