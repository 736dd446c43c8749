//! The facts of one node and the verdict they add up to. Every fact has a
//! status, a sentence, and for a problem the command or setting that fixes
//! it; the exit status is decided by the kinds of problem present
//! (docs/readiness.md, "Exit statuses").

/// How a fact stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// Worth knowing, changes nothing.
    Info,
    /// Works, but slower or not used by default.
    Warn,
    Fail,
    /// Could not be read or decided.
    Unknown,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Unknown => "unknown",
        }
    }
}

/// The kinds of problem, each with its exit status. The order of the
/// variants is the precedence: the first kind present decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Problem {
    /// No NVIDIA GPU, or no RDMA device: nothing to do GPUDirect RDMA with.
    NothingToCheck,
    /// No path registers GPU memory for RDMA.
    NoPath,
    /// Peer-to-peer traffic is redirected or translated on its way (ACS,
    /// IOMMU).
    DataPath,
    /// It works, but NCCL's defaults will not use it or it is capped
    /// (distance, BAR1).
    Topology,
    /// Something could not be read (not root, a file missing).
    Unreadable,
}

impl Problem {
    pub fn exit_status(self) -> i32 {
        match self {
            Problem::NothingToCheck => 3,
            Problem::NoPath => 4,
            Problem::DataPath => 5,
            Problem::Topology => 6,
            Problem::Unreadable => 7,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Problem::NothingToCheck => "nothing_to_check",
            Problem::NoPath => "no_path",
            Problem::DataPath => "data_path",
            Problem::Topology => "topology",
            Problem::Unreadable => "unreadable",
        }
    }

    pub const ALL: [Problem; 5] = [
        Problem::NothingToCheck,
        Problem::NoPath,
        Problem::DataPath,
        Problem::Topology,
        Problem::Unreadable,
    ];
}

/// Exit status of a ready node.
pub const READY: i32 = 0;
/// Exit status of bad command-line arguments.
pub const USAGE: i32 = 2;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    /// Which check: `path`, `dmabuf`, `peer_core`, `clients`, `driver`,
    /// `gpu`, `nic`, `distance`, `acs`, `iommu`, `bar1`, `read`.
    pub check: &'static str,
    /// What it is about (a GPU's address, a bridge, "node").
    pub subject: String,
    pub status: Status,
    pub message: String,
    pub fix: Option<String>,
    /// The kind of problem a Warn, Fail or Unknown fact is.
    pub problem: Option<Problem>,
}

impl Fact {
    pub fn ok(check: &'static str, subject: impl Into<String>, message: impl Into<String>) -> Self {
        Fact {
            check,
            subject: subject.into(),
            status: Status::Ok,
            message: message.into(),
            fix: None,
            problem: None,
        }
    }

    pub fn info(
        check: &'static str,
        subject: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Fact {
            status: Status::Info,
            ..Fact::ok(check, subject, message)
        }
    }

    /// What could not be read for @check: an unknown, never a verdict.
    pub fn unreadable(
        check: &'static str,
        subject: impl Into<String>,
        what: &crate::host::Unreadable,
    ) -> Self {
        Fact::problem(
            check,
            subject,
            Status::Unknown,
            Problem::Unreadable,
            what.to_string(),
            None,
        )
    }

    pub fn problem(
        check: &'static str,
        subject: impl Into<String>,
        status: Status,
        problem: Problem,
        message: impl Into<String>,
        fix: Option<String>,
    ) -> Self {
        Fact {
            check,
            subject: subject.into(),
            status,
            message: message.into(),
            fix,
            problem: Some(problem),
        }
    }
}

/// A GPU's summary for the JSON and Prometheus forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    pub address: String,
    pub device_id: u16,
    pub bar1_bytes: Option<u64>,
    /// Every RDMA device's name and its distance from this GPU, by name.
    pub nic_distances: Vec<(String, crate::topology::Distance)>,
    /// The closest of the RDMA devices NCCL uses (nccl_ib.rs) and the
    /// distance to it: the first by name of the nearest. None where NCCL
    /// uses none.
    pub closest: Option<(String, crate::topology::Distance)>,
}

impl Gpu {
    /// The closest RDMA device NCCL uses and the distance to it.
    pub fn closest_nic(&self) -> Option<&(String, crate::topology::Distance)> {
        self.closest.as_ref()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub path: crate::registration::Path,
    /// DMA-BUF can serve on this node (whether or not it is the path).
    pub dmabuf: bool,
    pub facts: Vec<Fact>,
    pub gpus: Vec<Gpu>,
    pub nics: Vec<crate::rdma::Nic>,
    /// MLNX_OFED's per-client counters (empty without its core's sysfs).
    pub peer_clients: Vec<crate::peer_clients::PeerClient>,
}

impl Report {
    /// The kinds of problem present, in precedence order.
    pub fn problems(&self) -> Vec<Problem> {
        let mut p: Vec<Problem> = self.facts.iter().filter_map(|f| f.problem).collect();
        p.sort();
        p.dedup();
        p
    }

    pub fn ready(&self) -> bool {
        self.problems().is_empty()
    }

    pub fn exit_status(&self) -> i32 {
        self.problems().first().map_or(READY, |p| p.exit_status())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registration::Path;

    #[test]
    fn the_first_kind_of_problem_decides_the_exit_status() {
        let mut r = Report {
            path: Path::DmaBuf,
            dmabuf: true,
            facts: vec![Fact::ok("path", "node", "x")],
            gpus: vec![],
            nics: vec![],
            peer_clients: vec![],
        };
        assert_eq!(r.exit_status(), READY);
        r.facts.push(Fact::problem(
            "acs",
            "b",
            Status::Unknown,
            Problem::Unreadable,
            "m",
            None,
        ));
        assert_eq!(r.exit_status(), 7);
        r.facts.push(Fact::problem(
            "distance",
            "g",
            Status::Warn,
            Problem::Topology,
            "m",
            None,
        ));
        assert_eq!(r.exit_status(), 6);
        r.facts.push(Fact::problem(
            "acs",
            "b",
            Status::Fail,
            Problem::DataPath,
            "m",
            None,
        ));
        assert_eq!(r.exit_status(), 5);
        r.facts.push(Fact::problem(
            "path",
            "node",
            Status::Fail,
            Problem::NoPath,
            "m",
            None,
        ));
        assert_eq!(r.exit_status(), 4);
        r.facts.push(Fact::problem(
            "gpu",
            "node",
            Status::Fail,
            Problem::NothingToCheck,
            "m",
            None,
        ));
        assert_eq!(r.exit_status(), 3);
        assert!(!r.ready());
        // every status is distinct from success and usage errors
        let mut codes: Vec<i32> = Problem::ALL.iter().map(|p| p.exit_status()).collect();
        codes.extend([READY, USAGE]);
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), Problem::ALL.len() + 2);
    }
}
