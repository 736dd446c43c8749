//! Each GPU's memory size, which neither sysfs nor procfs holds: asked of
//! `nvidia-smi --query-gpu=pci.bus_id,memory.total --format=csv,noheader,nounits`
//! in the forms people read (never in the monitoring forms: nvidia-smi
//! wakes GPUs without persistence mode and can hang on a wedged one), and
//! given up after `TIMEOUT` (`NV_PEER_MEM_NVIDIA_SMI` names another
//! program, for tests). Its absence only leaves the BAR1 fact without a
//! comparison.

use crate::host::Host;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long nvidia-smi may take: with persistence mode it answers in
/// about 60 ms on the lent 4-GPU host (docs/readiness.md); without it,
/// initialising the GPUs takes seconds.
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// GPU memory in bytes by PCI address (`0000:00:06.0`).
pub fn gpu_memory(host: &Host) -> BTreeMap<String, u64> {
    let out = host.program("nvidia-smi-memory", || {
        nvidia_smi(&[
            "--query-gpu=pci.bus_id,memory.total",
            "--format=csv,noheader,nounits",
        ])
    });
    out.map(|o| parse(&o)).unwrap_or_default()
}

/// What `nvidia-smi @args` prints where it succeeds within `TIMEOUT`
/// (`NV_PEER_MEM_NVIDIA_SMI` names another program, for tests).
pub fn nvidia_smi(args: &[&str]) -> Option<String> {
    nvidia_smi_exit(args)
        .filter(|(code, _)| *code == Some(0))
        .map(|(_, out)| out)
}

/// `nvidia-smi @args`'s exit code and stdout, where it ends within
/// `TIMEOUT`, whatever its code.
pub fn nvidia_smi_exit(args: &[&str]) -> Option<(Option<i32>, String)> {
    let program =
        std::env::var("NV_PEER_MEM_NVIDIA_SMI").unwrap_or_else(|_| "nvidia-smi".to_owned());
    run_bounded(Command::new(program).args(args), TIMEOUT)
}

/// A program's exit code (None: ended by a signal) and stdout if it ends
/// within @limit; killed after it.
pub fn run_bounded(command: &mut Command, limit: Duration) -> Option<(Option<i32>, String)> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(2)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let out = child.wait_with_output().ok()?;
    Some((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

/// `00000000:00:06.0, 81559` (memory in MiB) per line.
pub fn parse(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (bus_id, mib) = line.split_once(',')?;
            let mib: u64 = mib.trim().parse().ok()?;
            Some((sysfs_bus_id(bus_id)?, mib << 20))
        })
        .collect()
}

/// nvidia-smi's `00000000:1B:00.0` as sysfs names the function,
/// `0000:1b:00.0`: nvidia-smi's domain has 8 digits, sysfs's 4.
pub fn sysfs_bus_id(text: &str) -> Option<String> {
    let bus_id = text.trim().to_ascii_lowercase();
    let (domain, rest) = bus_id.split_once(':')?;
    let domain = &domain[domain.len().saturating_sub(4)..];
    Some(format!("{domain}:{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probed_h100() {
        let m = parse("00000000:00:06.0, 81559\n00000000:1B:00.0, 81559\nbad line\n");
        assert_eq!(m.get("0000:00:06.0"), Some(&(81559 << 20)));
        assert_eq!(m.get("0000:1b:00.0"), Some(&(81559 << 20)));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn a_program_past_its_time_is_killed_and_gives_nothing() {
        let start = Instant::now();
        let out = run_bounded(
            Command::new("sh").args(["-c", "sleep 5; echo late"]),
            Duration::from_millis(200),
        );
        assert_eq!(out, None);
        assert!(start.elapsed() < Duration::from_secs(4));
        let out = run_bounded(Command::new("sh").args(["-c", "echo x"]), TIMEOUT);
        assert_eq!(out, Some((Some(0), "x\n".to_owned())));
    }
}
