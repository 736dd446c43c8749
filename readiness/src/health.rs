//! The health-check verdict (`--health`): what a site's node health check
//! (LBNL NHC under Slurm, docs/monitoring.md) asks of this node, answered
//! in one line. The site names the path it expects (`--expect`) and
//! whether NCCL must use GPUDirect RDMA with its defaults (`--nccl`);
//! anything else that stands in the way, an unreadable fact included,
//! fails the check with the fact and its fix, so a node never passes
//! silently.

use crate::registration::Path;
use crate::report::{Fact, Problem, Report, Status};

/// The path a site expects to serve GPU memory registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// A peer memory client: nv_peer_mem or nvidia_peermem.
    Peer,
    /// DMA-BUF can serve (whether or not a peer client is loaded too).
    DmaBuf,
    /// Any path.
    Any,
}

impl Expected {
    pub fn parse(s: &str) -> Option<Expected> {
        match s {
            "peer" => Some(Expected::Peer),
            "dmabuf" => Some(Expected::DmaBuf),
            "any" => Some(Expected::Any),
            _ => None,
        }
    }
}

/// Adds the fact that the path is not the one the site expects, if so. A
/// missing path is already a `no_path` fact of its own.
pub fn expect(r: &mut Report, want: Expected) {
    let fact = match want {
        Expected::Peer if !matches!(r.path, Path::NvPeerMem | Path::NvidiaPeermem | Path::None) => {
            Fact::problem(
                "expect",
                "node",
                Status::Fail,
                Problem::NoPath,
                format!(
                    "GPU memory registers through {}, but this site expects a peer memory client (--expect peer)",
                    r.path.name()
                ),
                Some("start nv_peer_mem: systemctl start nv_peer_mem (nv_peer_mem-service status says why it is not loaded); where DMA-BUF is acceptable, check with --expect any".to_owned()),
            )
        }
        Expected::DmaBuf if !r.dmabuf => Fact::problem(
            "expect",
            "node",
            Status::Fail,
            Problem::NoPath,
            "DMA-BUF cannot serve on this node (see the dmabuf line), but this site expects it (--expect dmabuf)",
            Some("DMA-BUF needs Linux 5.12 or newer and the NVIDIA open kernel module driving every GPU (Turing or newer); where a peer memory client is acceptable, check with --expect any".to_owned()),
        ),
        _ => return,
    };
    r.facts.push(fact);
}

/// The fact that fails the health check, if any: the first problem fact
/// of the first kind of problem (the exit statuses' order), where a
/// `topology` problem (NCCL's defaults will not use it, BAR1 caps it)
/// counts only when the site requires NCCL to use it.
pub fn failing_fact(r: &Report, nccl: bool) -> Option<&Fact> {
    let counts = |p: Problem| nccl || p != Problem::Topology;
    r.problems()
        .into_iter()
        .filter(|p| counts(*p))
        .find_map(|p| r.facts.iter().find(|f| f.problem == Some(p)))
}

/// One line: `ok: ...` or the failing fact with its fix. NHC passes the
/// line to a shell `eval` inside single quotes (nhc's `die`), and Slurm
/// keeps it as the node's Reason, so it holds no quote and no newline.
pub fn line(r: &Report, nccl: bool) -> String {
    let text = match failing_fact(r, nccl) {
        None => {
            let tolerated = if r.problems().contains(&Problem::Topology) {
                " (NCCL's defaults will not use it: see gpudirect-rdma-check)"
            } else {
                ""
            };
            format!("ok: GPUDirect RDMA through {}{tolerated}", r.path.name())
        }
        Some(f) => {
            let subject = if f.subject == "node" {
                String::new()
            } else {
                format!("{}: ", f.subject)
            };
            let fix = f
                .fix
                .as_deref()
                .map_or(String::new(), |x| format!("; fix: {x}"));
            format!("gpudirect-rdma {} {}{}{fix}", f.check, subject, f.message)
        }
    };
    without_quotes(&text)
}

/// @text with no single quote and no line break: an apostrophe between
/// letters (`adapter's`) becomes U+2019, the typographic apostrophe, which
/// shells do not treat as a quote (a double quote there read
/// `adapter"s`); any other single quote (around a command) becomes a
/// double quote.
fn without_quotes(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    chars
        .iter()
        .enumerate()
        .map(|(i, c)| match c {
            '\'' => {
                let letter = |j: Option<usize>| {
                    j.and_then(|j| chars.get(j))
                        .is_some_and(|c| c.is_alphanumeric())
                };
                if letter(i.checked_sub(1)) && letter(Some(i + 1)) {
                    '\u{2019}'
                } else {
                    '"'
                }
            }
            '\n' | '\r' | '\t' => ' ',
            c => *c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(path: Path, dmabuf: bool, facts: Vec<Fact>) -> Report {
        Report {
            path,
            dmabuf,
            facts,
            gpus: vec![],
            nics: vec![],
            peer_clients: vec![],
        }
    }

    fn topology() -> Fact {
        Fact::problem(
            "nccl",
            "0000:1b:00.0",
            Status::Warn,
            Problem::Topology,
            "NCCL will not use GPUDirect RDMA to mlx5_0 (SYS)",
            Some("NCCL_NET_GDR_LEVEL=SYS".to_owned()),
        )
    }

    #[test]
    fn peer_expected_dmabuf_serving_fails_with_the_expectation() {
        let mut r = report(Path::DmaBuf, true, vec![Fact::ok("path", "node", "x")]);
        expect(&mut r, Expected::Peer);
        let f = failing_fact(&r, false).expect("fails");
        assert_eq!(f.check, "expect");
        assert!(line(&r, false).contains("expects a peer memory client"));
    }

    #[test]
    fn dmabuf_expected_passes_beside_a_peer_client_when_dmabuf_can_serve() {
        let mut r = report(Path::NvPeerMem, true, vec![Fact::ok("path", "node", "x")]);
        expect(&mut r, Expected::DmaBuf);
        assert_eq!(failing_fact(&r, false), None);
        let mut r = report(Path::NvPeerMem, false, vec![]);
        expect(&mut r, Expected::DmaBuf);
        assert_eq!(failing_fact(&r, false).map(|f| f.check), Some("expect"));
    }

    #[test]
    fn topology_fails_only_when_nccl_is_required() {
        let r = report(Path::NvPeerMem, false, vec![topology()]);
        assert_eq!(failing_fact(&r, false), None);
        assert!(line(&r, false).starts_with("ok: GPUDirect RDMA through nv_peer_mem (NCCL"));
        assert_eq!(failing_fact(&r, true).map(|f| f.check), Some("nccl"));
    }

    #[test]
    fn an_unreadable_fact_fails_even_where_topology_would_decide_the_exit_status() {
        let unreadable = Fact::problem(
            "acs",
            "0000:00:01.0",
            Status::Unknown,
            Problem::Unreadable,
            "could not read config",
            None,
        );
        let r = report(Path::NvPeerMem, false, vec![topology(), unreadable]);
        assert_eq!(r.exit_status(), 6);
        assert_eq!(failing_fact(&r, false).map(|f| f.check), Some("acs"));
    }

    #[test]
    fn an_apostrophe_stays_one_and_a_quoted_command_is_double_quoted() {
        let l = without_quotes("load the adapter's RDMA driver: run 'modprobe mlx5_ib'");
        assert_eq!(
            l,
            "load the adapter\u{2019}s RDMA driver: run \"modprobe mlx5_ib\""
        );
    }

    #[test]
    fn the_line_holds_no_single_quote_or_newline() {
        let r = report(
            Path::None,
            false,
            vec![Fact::problem(
                "path",
                "node",
                Status::Fail,
                Problem::NoPath,
                "no path\nat all",
                Some("run 'modprobe x'".to_owned()),
            )],
        );
        let l = line(&r, false);
        assert!(!l.contains('\'') && !l.contains('\n'), "{l}");
        assert_eq!(
            l,
            "gpudirect-rdma path no path at all; fix: run \"modprobe x\""
        );
    }
}
