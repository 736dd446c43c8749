//! MLNX_OFED's per-client counters: its PeerDirect core keeps, for every
//! registered peer memory client, `/sys/kernel/mm/memory_peers/<name>/`
//! with `version` and seven counters (MLNX_OFED 25.10,
//! backports/0271-BACKPORT-drivers-infiniband-core-peer_mem.c.patch, under
//! HAVE_MM_KOBJ_EXPORTED: `num_alloc_mrs`, `num_dealloc_mrs`,
//! `num_reg_pages`, `num_dereg_pages`, `num_reg_bytes`, `num_dereg_bytes`,
//! atomic64 counts since the client registered, and `num_free_callbacks`).
//! A fleet reads them for pinned GPU memory and registration leaks per node
//! (docs/readiness.md, "Peer memory counters").

use crate::host::{Host, Unreadable};

/// The counter files, in the patch's order, each with what it counts.
pub const COUNTERS: [(&str, &str); 7] = [
    (
        "num_alloc_mrs",
        "memory regions registered through the client",
    ),
    ("num_dealloc_mrs", "memory regions deregistered"),
    ("num_reg_pages", "pages registered"),
    ("num_dereg_pages", "pages deregistered"),
    ("num_reg_bytes", "bytes registered"),
    ("num_dereg_bytes", "bytes deregistered"),
    (
        "num_free_callbacks",
        "free callbacks (the GPU memory freed under a registration)",
    ),
];

/// One client's directory: its name, version and counters (None where a
/// file could not be read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerClient {
    pub name: String,
    pub version: Option<String>,
    pub counters: [Option<u64>; 7],
}

impl PeerClient {
    fn counter(&self, name: &str) -> Option<u64> {
        let i = COUNTERS.iter().position(|(n, _)| *n == name)?;
        self.counters[i]
    }

    /// Registrations not deregistered yet.
    pub fn live_registrations(&self) -> Option<u64> {
        Some(
            self.counter("num_alloc_mrs")?
                .saturating_sub(self.counter("num_dealloc_mrs")?),
        )
    }

    /// Bytes registered and not deregistered yet: GPU memory pinned for RDMA.
    pub fn pinned_bytes(&self) -> Option<u64> {
        Some(
            self.counter("num_reg_bytes")?
                .saturating_sub(self.counter("num_dereg_bytes")?),
        )
    }

    pub fn free_callbacks(&self) -> Option<u64> {
        self.counter("num_free_callbacks")
    }
}

/// Every client's directory under memory_peers (none when the core has no
/// such directory), and what could not be read.
pub fn read(host: &Host) -> (Vec<PeerClient>, Vec<Unreadable>) {
    let dir = host.sys_path("kernel/mm/memory_peers");
    let mut unreadable = Vec::new();
    if !host.exists(&dir) {
        return (Vec::new(), unreadable);
    }
    let names = match host.names(&dir) {
        Ok(names) => names,
        Err(e) => return (Vec::new(), vec![e]),
    };
    let mut clients = Vec::new();
    for name in names {
        let client = dir.join(&name);
        let version = match host.text(&client.join("version")) {
            Ok(v) => Some(v.trim().to_owned()),
            Err(e) => {
                unreadable.push(e);
                None
            }
        };
        let mut counters = [None; 7];
        for (slot, (file, _)) in counters.iter_mut().zip(COUNTERS) {
            let path = client.join(file);
            match host.text(&path) {
                Ok(text) => match text.trim().parse::<u64>() {
                    Ok(n) => *slot = Some(n),
                    Err(_) => unreadable.push(Unreadable::new(
                        &host.shown(&path),
                        format!("`{}` is not a count", text.trim()),
                    )),
                },
                Err(e) => unreadable.push(e),
            }
        }
        clients.push(PeerClient {
            name,
            version,
            counters,
        });
    }
    (clients, unreadable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_and_pinned_are_differences_that_never_go_negative() {
        let c = PeerClient {
            name: "nv_mem".into(),
            version: Some("1.4.0".into()),
            counters: [
                Some(5),
                Some(3),
                Some(80),
                Some(48),
                Some(5 << 20),
                Some(3 << 20),
                Some(1),
            ],
        };
        assert_eq!(c.live_registrations(), Some(2));
        assert_eq!(c.pinned_bytes(), Some(2 << 20));
        assert_eq!(c.free_callbacks(), Some(1));
        let odd = PeerClient {
            counters: [Some(1), Some(2), None, None, None, Some(0), None],
            ..c
        };
        assert_eq!(odd.live_registrations(), Some(0));
        assert_eq!(odd.pinned_bytes(), None);
    }
}
