//! The next-boot verdict's three forms (docs/next-boot.md, "Output"): the
//! human lines as the readiness check prints its facts, JSON (schema
//! `gpudirect-rdma-check-next-boot/1`) and Prometheus text with the
//! `gpudirect_rdma_next_boot` metric a fleet alerts on before a reboot.

use crate::kernel_modules::MODULE;
use crate::next_boot::Verdict;
use crate::render::{fact_lines, json_facts, json_string, label};
use std::fmt::Write;

pub const SCHEMA: &str = "gpudirect-rdma-check-next-boot/1";

pub fn human(v: &Verdict) -> String {
    let mut out = fact_lines(&v.facts);
    let _ = writeln!(
        out,
        "{}",
        match v.loads() {
            Some(true) if v.needs_no_client => format!(
                "NEXT BOOT OK: this node needs no peer memory client on {}",
                v.release
            ),
            Some(true) => format!("NEXT BOOT OK: {MODULE} will load on {}", v.release),
            Some(false) => format!("NEXT BOOT LOST: {MODULE} will not load on {}", v.release),
            None => format!(
                "NEXT BOOT UNKNOWN: cannot tell whether {MODULE} will load on {}",
                v.release
            ),
        }
    );
    out
}

/// `stale_symbol` comes before `facts` so that a shell hook without a
/// JSON parser finds it at a fixed place (packaging/nv_peer_mem-apt-guard).
pub fn json(v: &Verdict) -> String {
    let stale = v.stale_symbol.as_ref().map_or("null".to_owned(), |s| {
        format!(
            "{{\"symbol\":{},\"provider\":{},\"exported\":\"0x{:08x}\",\"built_against\":\"0x{:08x}\"}}",
            json_string(&s.symbol),
            json_string(&s.provider),
            s.exported,
            s.built_against
        )
    });
    format!(
        "{{\"schema\":{},\"kernel\":{},\"chosen\":{},\"loads\":{},\"exit_status\":{},\"stale_symbol\":{},\"facts\":[{}]}}\n",
        json_string(SCHEMA),
        json_string(&v.release),
        json_string(&v.chosen),
        v.loads().map_or("null".to_owned(), |b| b.to_string()),
        v.exit_status(),
        stale,
        json_facts(&v.facts)
    )
}

pub fn prometheus(v: &Verdict) -> String {
    let mut out = String::new();
    let kernel = format!("{{kernel=\"{}\"}}", label(&v.release));
    let mut gauge = |name: &str, help: &str, labels: &str, value: String| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name}{labels} {value}");
    };
    gauge(
        "gpudirect_rdma_next_boot",
        &format!(
            "1 when {MODULE} will load on the kernel checked (the next boot's, or --kernel) or the node needs no peer memory client there, 0 when it will not or that cannot be told (see gpudirect_rdma_next_boot_known)."
        ),
        &kernel,
        u8::from(v.loads() == Some(true)).to_string(),
    );
    gauge(
        "gpudirect_rdma_next_boot_known",
        &format!("1 when the check could tell whether {MODULE} will load on that kernel."),
        &kernel,
        u8::from(v.loads().is_some()).to_string(),
    );
    gauge(
        "gpudirect_rdma_next_boot_exit_status",
        "gpudirect-rdma-check --next-boot's exit status (docs/next-boot.md).",
        "",
        v.exit_status().to_string(),
    );
    out
}
