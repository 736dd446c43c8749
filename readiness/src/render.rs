//! The report's three forms: lines for people, JSON (schema
//! `gpudirect-rdma-check/1`, docs/readiness.md) and Prometheus text for
//! node_exporter's textfile collector.

use crate::registration::Path;
use crate::report::{Fact, Gpu, Problem, Report, Status};
use crate::topology::Distance;
use std::fmt::Write;

pub const SCHEMA: &str = "gpudirect-rdma-check/1";

pub fn human(r: &Report) -> String {
    let mut out = fact_lines(&r.facts);
    let verdict = if r.ready() {
        format!("READY: GPUDirect RDMA through {}", r.path.name())
    } else {
        let kinds: Vec<&str> = r.problems().iter().map(|p| p.name()).collect();
        format!("NOT READY ({}), path: {}", kinds.join(", "), r.path.name())
    };
    let _ = writeln!(out, "{verdict}");
    out
}

/// One line per fact (a problem's fix on the next), as `human` prints them.
pub(crate) fn fact_lines(facts: &[Fact]) -> String {
    let mut out = String::new();
    for f in facts {
        let tag = match f.status {
            Status::Ok => "ok  ",
            Status::Info => "    ",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Unknown => "??  ",
        };
        let subject = if f.subject == "node" {
            String::new()
        } else {
            format!("{}: ", f.subject)
        };
        let _ = writeln!(out, "{tag} {:<9} {subject}{}", f.check, f.message);
        if let Some(fix) = &f.fix {
            let _ = writeln!(out, "     {:<9} fix: {fix}", "");
        }
    }
    out
}

/// The facts as JSON objects, comma-separated (the schema's `facts`).
pub(crate) fn json_facts(facts: &[Fact]) -> String {
    let mut out = String::new();
    for (i, f) in facts.iter().enumerate() {
        let _ = write!(
            out,
            "{}{{\"check\":{},\"subject\":{},\"status\":{},\"problem\":{},\"message\":{},\"fix\":{}}}",
            if i > 0 { "," } else { "" },
            json_string(f.check),
            json_string(&f.subject),
            json_string(f.status.name()),
            opt_string(f.problem.map(Problem::name)),
            json_string(&f.message),
            opt_string(f.fix.as_deref()),
        );
    }
    out
}

pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub(crate) fn opt_string(s: Option<&str>) -> String {
    s.map_or("null".to_owned(), json_string)
}

pub fn json(r: &Report) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "{{\"schema\":{},\"ready\":{},\"exit_status\":{},\"path\":{},\"problems\":[{}],\"facts\":[",
        json_string(SCHEMA),
        r.ready(),
        r.exit_status(),
        json_string(r.path.name()),
        r.problems()
            .iter()
            .map(|p| json_string(p.name()))
            .collect::<Vec<_>>()
            .join(",")
    );
    out.push_str(&json_facts(&r.facts));
    out.push_str("],\"gpus\":[");
    for (i, g) in r.gpus.iter().enumerate() {
        let _ = write!(
            out,
            "{}{{\"address\":{},\"device_id\":{},\"bar1_bytes\":{},\"closest_nic\":{},\"distance\":{},\"nic_distances\":[{}]}}",
            if i > 0 { "," } else { "" },
            json_string(&g.address),
            json_string(&format!("0x{:04x}", g.device_id)),
            g.bar1_bytes.map_or("null".to_owned(), |b| b.to_string()),
            opt_string(g.closest_nic().map(|(n, _)| n.as_str())),
            opt_string(g.closest_nic().map(|(_, d)| d.name())),
            g.nic_distances
                .iter()
                .map(|(n, d)| format!(
                    "{{\"nic\":{},\"distance\":{}}}",
                    json_string(n),
                    json_string(d.name())
                ))
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    out.push_str("],\"nics\":[");
    for (i, n) in r.nics.iter().enumerate() {
        let _ = write!(
            out,
            "{}{{\"name\":{},\"address\":{}}}",
            if i > 0 { "," } else { "" },
            json_string(&n.name),
            json_string(&n.address)
        );
    }
    out.push_str("],\"peer_memory_clients\":[");
    for (i, c) in r.peer_clients.iter().enumerate() {
        let _ = write!(
            out,
            "{}{{\"name\":{},\"version\":{}",
            if i > 0 { "," } else { "" },
            json_string(&c.name),
            opt_string(c.version.as_deref()),
        );
        for ((file, _), value) in crate::peer_clients::COUNTERS.iter().zip(c.counters) {
            let _ = write!(
                out,
                ",{}:{}",
                json_string(file),
                value.map_or("null".to_owned(), |v| v.to_string())
            );
        }
        out.push('}');
    }
    out.push_str("]}\n");
    out
}

/// The per-client counters (peer_clients.rs: MLNX_OFED's core's, or
/// nv_peer_mem's own where it made memory_peers), named by
/// Prometheus' rules: base units, `_total` on counters, an `_info` metric
/// for the version; live registrations and pinned bytes as gauges.
fn peer_client_metrics(
    r: &Report,
    typed: &mut impl FnMut(&str, &str, &str, Vec<(String, String)>),
) {
    let per_client = |value: &dyn Fn(&crate::peer_clients::PeerClient) -> Option<u64>| {
        r.peer_clients
            .iter()
            .filter_map(|c| {
                Some((
                    format!("{{client=\"{}\"}}", label(&c.name)),
                    value(c)?.to_string(),
                ))
            })
            .collect::<Vec<_>>()
    };
    typed(
        "gpudirect_rdma_peer_memory_client_info",
        "gauge",
        "1 for each peer memory client listed in /sys/kernel/mm/memory_peers (by MLNX_OFED's core, or by nv_peer_mem where the kernel exports no mm_kobj), with its version.",
        r.peer_clients
            .iter()
            .map(|c| {
                (
                    format!(
                        "{{client=\"{}\",version=\"{}\"}}",
                        label(&c.name),
                        label(c.version.as_deref().unwrap_or(""))
                    ),
                    "1".to_owned(),
                )
            })
            .collect(),
    );
    typed(
        "gpudirect_rdma_peer_memory_live_registrations",
        "gauge",
        "Memory regions registered through the client and not deregistered (num_alloc_mrs - num_dealloc_mrs).",
        per_client(&|c| c.live_registrations()),
    );
    typed(
        "gpudirect_rdma_peer_memory_pinned_bytes",
        "gauge",
        "GPU memory registered through the client and not deregistered (num_reg_bytes - num_dereg_bytes).",
        per_client(&|c| c.pinned_bytes()),
    );
    for (i, (file, what)) in crate::peer_clients::COUNTERS.iter().enumerate() {
        let name = format!(
            "gpudirect_rdma_peer_memory_{}_total",
            file.trim_start_matches("num_")
        );
        typed(
            &name,
            "counter",
            &format!("MLNX_OFED's {file}: {what}, since the client registered."),
            per_client(&|c| c.counters[i]),
        );
    }
}

/// A label value in the text exposition format: backslash, quote and
/// newline escaped.
pub(crate) fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One sample of a GPU-NIC distance metric: its labels and the level.
fn distance_sample(g: &Gpu, nic: &str, d: Distance) -> (String, String) {
    (
        format!(
            "{{gpu=\"{}\",nic=\"{}\",class=\"{}\"}}",
            label(&g.address),
            label(nic),
            d.name()
        ),
        d.level().to_string(),
    )
}

pub fn prometheus(r: &Report) -> String {
    let mut out = String::new();
    let mut typed = |name: &str, kind: &str, help: &str, samples: Vec<(String, String)>| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    let mut metric = |name: &str, help: &str, samples: Vec<(String, String)>| {
        typed(name, "gauge", help, samples)
    };
    metric(
        "gpudirect_rdma_ready",
        "1 when the node can do GPUDirect RDMA with nothing in the way (gpudirect-rdma-check exit status 0).",
        vec![(String::new(), u8::from(r.ready()).to_string())],
    );
    metric(
        "gpudirect_rdma_exit_status",
        "gpudirect-rdma-check's exit status (docs/readiness.md).",
        vec![(String::new(), r.exit_status().to_string())],
    );
    metric(
        "gpudirect_rdma_path",
        "1 for the path that registers GPU memory for RDMA (nv_peer_mem, nvidia_peermem, dmabuf, none).",
        Path::ALL
            .iter()
            .map(|p| {
                (
                    format!("{{path=\"{}\"}}", p.name()),
                    u8::from(*p == r.path).to_string(),
                )
            })
            .collect(),
    );
    metric(
        "gpudirect_rdma_problem",
        "1 for each kind of problem present.",
        Problem::ALL
            .iter()
            .map(|p| {
                (
                    format!("{{problem=\"{}\"}}", p.name()),
                    u8::from(r.problems().contains(p)).to_string(),
                )
            })
            .collect(),
    );
    metric(
        "gpudirect_rdma_gpu_nic_distance",
        "PCIe distance from each GPU to its closest RDMA device: 1 PIX, 2 PXB, 3 PHB, 4 NODE, 5 SYS.",
        r.gpus
            .iter()
            .filter_map(|g| g.closest_nic().map(|(nic, d)| distance_sample(g, nic, *d)))
            .collect(),
    );
    metric(
        "gpudirect_rdma_gpu_nic_pair_distance",
        "PCIe distance from each GPU to each RDMA device: 1 PIX, 2 PXB, 3 PHB, 4 NODE, 5 SYS.",
        r.gpus
            .iter()
            .flat_map(|g| {
                g.nic_distances
                    .iter()
                    .map(move |(nic, d)| distance_sample(g, nic, *d))
            })
            .collect(),
    );
    metric(
        "gpudirect_rdma_gpu_bar1_bytes",
        "Size of each GPU's BAR1.",
        r.gpus
            .iter()
            .filter_map(|g| {
                Some((
                    format!("{{gpu=\"{}\"}}", label(&g.address)),
                    g.bar1_bytes?.to_string(),
                ))
            })
            .collect(),
    );
    metric(
        "gpudirect_rdma_check_failed",
        "1 for each fact that is a problem (warn, fail, unknown), by check and subject.",
        r.facts
            .iter()
            .filter(|f| f.problem.is_some())
            .map(|f| {
                (
                    format!(
                        "{{check=\"{}\",subject=\"{}\",status=\"{}\"}}",
                        f.check,
                        label(&f.subject),
                        f.status.name()
                    ),
                    "1".to_owned(),
                )
            })
            .collect(),
    );
    peer_client_metrics(r, &mut typed);
    out
}
