//! The command line: which form to print; the exit status is the report's
//! (docs/readiness.md, "Exit statuses").

use readiness::host::Host;
use readiness::report::USAGE;
use readiness::{check, render};
use std::io::Write;

const HELP: &str = "\
gpudirect-rdma-check: can this node do GPUDirect RDMA, by which path, and what stands in the way

Usage: gpudirect-rdma-check [--json | --prometheus]

Reads sysfs, procfs and (when installed) nvidia-smi's memory sizes; changes
nothing. Run it as root: ACS settings are in the part of PCI config space
only root can read.

Output:
  (default)     one line per fact; a problem's line is followed by its fix
  --json        the same facts as JSON (schema gpudirect-rdma-check/1)
  --prometheus  Prometheus text format, for node_exporter's textfile
                collector (gpudirect_rdma_* metrics)

Exit status:
  0  ready: a path registers GPU memory and nothing stands in the way
  2  bad command line
  3  nothing to check: no NVIDIA GPU or no RDMA device
  4  no path registers GPU memory for RDMA (no peer client, no DMA-BUF)
  5  peer-to-peer traffic is redirected (ACS) or translated (IOMMU)
  6  it works, but NCCL's defaults will not use it or it is capped
     (GPU-to-NIC distance beyond PXB, BAR1 smaller than GPU memory)
  7  something could not be read (e.g. not root)
The first status in this order that applies is the one returned.

NCCL's level for GPUDirect RDMA is NCCL_NET_GDR_LEVEL from the environment
or /etc/nccl.conf, as NCCL reads it; PXB when unset.

Environment: NV_PEER_MEM_SYSFS (/sys) and NV_PEER_MEM_PROC (/proc) read
another tree; NV_PEER_MEM_NVIDIA_SMI names another nvidia-smi,
NV_PEER_MEM_NCCL_CONF another nccl.conf.
";

enum Form {
    Human,
    Json,
    Prometheus,
}

fn main() {
    let mut form = Form::Human;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => form = Form::Json,
            "--prometheus" => form = Form::Prometheus,
            "-h" | "--help" => {
                print!("{HELP}");
                return;
            }
            other => {
                eprintln!(
                    "gpudirect-rdma-check: unknown argument `{other}`; see gpudirect-rdma-check --help"
                );
                std::process::exit(USAGE);
            }
        }
    }
    let report = check::check(&Host::from_env());
    let text = match form {
        Form::Human => render::human(&report),
        Form::Json => render::json(&report),
        Form::Prometheus => render::prometheus(&report),
    };
    // A closed stdout (`| head`) ends quietly, with the report's status.
    let _ = std::io::stdout().write_all(text.as_bytes());
    std::process::exit(report.exit_status());
}
