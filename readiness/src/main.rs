//! The command line: which form to print; the exit status is the report's
//! (docs/readiness.md, "Exit statuses").

use readiness::health::{self, Expected};
use readiness::host::Host;
use readiness::report::{Report, USAGE};
use readiness::{
    boot_loader, check, cuda, next_boot, next_boot_render, nfd, output_file, registration, render,
    snapshot,
};
use std::io::Write;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

const HELP: &str = "\
gpudirect-rdma-check: can this node do GPUDirect RDMA, by which path, and what stands in the way

Usage: gpudirect-rdma-check [--json | --prometheus | --health [--nccl]] [--expect PATH]
       gpudirect-rdma-check [--textfile DIR] [--nfd DIR [--nfd-expiry SECONDS]] [--expect PATH]
       gpudirect-rdma-check --dump FILE [--json]
       gpudirect-rdma-check --from FILE [any form above]
       gpudirect-rdma-check --next-boot | --kernel RELEASE [--module FILE] [--json | --prometheus | --textfile DIR]

Reads sysfs and procfs, each file once; changes nothing but the files it
is told to write. Only the default form and --json ask programs, each
given up after 3 seconds: the nv_peer_mem service helper's status;
nvidia-smi for memory sizes and, where a rule needs them, `topo -m` and the
GPUs' index and bus id (NVLink, for PXN), their compute capability (NCCL's
rule for older GPUs) and `c2c -s` (Grace's C2C); and a child of its own
that asks the CUDA driver which GPUs support GPUDirect RDMA. The path
verdict's --health, --prometheus, --textfile and --nfd never do. Run it as
root: ACS settings are in the part of PCI config space only root can read.

Output:
  (default)     one line per fact; a problem's line is followed by its fix
  --json        the same facts as JSON (schema gpudirect-rdma-check/1)
  --prometheus  Prometheus text format (gpudirect_rdma_* metrics)
  --health      one line for a node health check (NHC, Slurm's drain
                reason): ok, or the fact in the way and its fix; exit 0
                or 1. NCCL's distance and BAR1 count only with --nccl
  --expect PATH the path this site expects: peer (nv_peer_mem or
                nvidia_peermem), dmabuf (DMA-BUF can serve) or any (the
                default); another path is a no_path problem
  --textfile DIR  write the Prometheus form to DIR/gpudirect_rdma.prom for
                node_exporter's textfile collector (Debian's directory:
                /var/lib/prometheus/node-exporter)
  --nfd DIR     write Node Feature Discovery labels to DIR/gpudirect-rdma
                (NFD's directory: /etc/kubernetes/node-feature-discovery/features.d)
  --nfd-expiry SECONDS  the labels expire this long after the run unless
                renewed (default 600)
For a ticket (docs/readiness.md, Dump and replay):
  --dump FILE   also write what this run read (a tar archive; its README
                says what is in it, and nothing secret is) to FILE
  --from FILE   judge the node a --dump archive recorded instead of this
                one: the same verdict as where it was taken
Before a reboot (docs/next-boot.md):
  --next-boot   will nv_peer_mem load on the kernel the node boots next
                (GRUB's default or one-shot entry, BLS, systemd-boot,
                /vmlinuz; `cannot tell` where those do not decide)?
  --kernel RELEASE  the same for an installed kernel RELEASE: the module
                modprobe would load there and where it came from, its
                vermagic, its symbol versions against the modules installed
                for RELEASE, its signature, DKMS's state. Reads files only.
                Exit 0 it will load, 4 it will not, 7 cannot tell.
  --module FILE  with --kernel: judge FILE (an nv_peer_mem.ko not yet
                installed, e.g. from a package about to be) as the module
                for RELEASE, against what is installed for RELEASE now
                --textfile DIR writes DIR/gpudirect_rdma_next_boot.prom.
                A compressed module (.ko.xz, .ko.zst, .ko.gz) is read
                through xz, zstd or gzip, in every form.
Files are replaced atomically (a dotfile in DIR, then renamed); with
--textfile or --nfd nothing is printed and the exit status is 0 when every
file was written, 1 when one could not be (docs/monitoring.md).

Exit status:
  0  ready: a path registers GPU memory and nothing stands in the way
  2  bad command line
  3  nothing to check: no NVIDIA GPU or no RDMA device
  4  no path registers GPU memory for RDMA (no peer client, no DMA-BUF),
     or not the path --expect names
  5  peer-to-peer traffic is redirected (ACS) or translated (IOMMU)
  6  it works, but NCCL's defaults will not use it or it is capped
     (GPU-to-NIC distance beyond PXB, BAR1 smaller than GPU memory)
  7  something could not be read or decided (ACS needs root; a file or
     a register even root could not read)
The first status in this order that applies is the one returned; every
problem is listed in the output (--json: each fact with its problem).

NCCL's level for GPUDirect RDMA is NCCL_NET_GDR_LEVEL's first value as NCCL
reads it: the environment, then the file NCCL_CONF_FILE names or else
~/.nccl.conf (of the user running this), then /etc/nccl.conf; PXB when
unset or not a level NCCL knows.

Environment: NV_PEER_MEM_SYSFS (/sys) and NV_PEER_MEM_PROC (/proc) read
another tree; NV_PEER_MEM_NVIDIA_SMI names another nvidia-smi,
NV_PEER_MEM_NCCL_CONF another /etc/nccl.conf and NV_PEER_MEM_USER_NCCL_CONF
another ~/.nccl.conf; NV_PEER_MEM_ROOT (/) the root
that holds /lib/modules, /boot and /var/lib/dkms for --kernel and
--next-boot.
";

enum Form {
    Human,
    Json,
    Prometheus,
    Health,
}

/// What the command line asks for.
struct Args {
    form: Form,
    nccl: bool,
    expect: Expected,
    textfile: Option<PathBuf>,
    nfd: Option<PathBuf>,
    nfd_expiry: u64,
    nfd_expiry_given: bool,
    /// --kernel RELEASE, or --next-boot (None inside: find it).
    next_boot: Option<Option<String>>,
    dump: Option<PathBuf>,
    from: Option<PathBuf>,
    expect_given: bool,
    /// --module FILE (with --kernel).
    module: Option<PathBuf>,
}

fn usage(message: &str) -> ! {
    eprintln!("gpudirect-rdma-check: {message}; see gpudirect-rdma-check --help");
    std::process::exit(USAGE);
}

fn parse_args() -> Args {
    let mut a = Args {
        form: Form::Human,
        nccl: false,
        expect: Expected::Any,
        textfile: None,
        nfd: None,
        nfd_expiry: 600,
        nfd_expiry_given: false,
        next_boot: None,
        expect_given: false,
        dump: None,
        from: None,
        module: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |what: &str| {
            args.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs {what}")))
        };
        match arg.as_str() {
            "--json" => a.form = Form::Json,
            "--prometheus" => a.form = Form::Prometheus,
            "--health" => a.form = Form::Health,
            "--nccl" => a.nccl = true,
            "--expect" => {
                let v = value("peer, dmabuf or any");
                a.expect = Expected::parse(&v).unwrap_or_else(|| {
                    usage(&format!("--expect {v}: expected peer, dmabuf or any"))
                });
                a.expect_given = true;
            }
            "--textfile" => a.textfile = Some(PathBuf::from(value("a directory"))),
            "--nfd" => a.nfd = Some(PathBuf::from(value("a directory"))),
            "--nfd-expiry" => {
                let v = value("a number of seconds");
                a.nfd_expiry = v.parse().ok().filter(|s| *s > 0).unwrap_or_else(|| {
                    usage(&format!("--nfd-expiry {v}: expected seconds, more than 0"))
                });
                a.nfd_expiry_given = true;
            }
            "--dump" => a.dump = Some(PathBuf::from(value("a file to write"))),
            "--from" => a.from = Some(PathBuf::from(value("a --dump archive"))),
            "--next-boot" => a.next_boot = Some(None),
            "--module" => a.module = Some(PathBuf::from(value("an nv_peer_mem.ko file"))),
            "--kernel" => {
                let v = value("a kernel release (uname -r)");
                if v.is_empty() || v.contains('/') || v.starts_with('.') {
                    usage(&format!(
                        "--kernel {v}: expected a kernel release such as 6.1.0-56-amd64"
                    ));
                }
                a.next_boot = Some(Some(v));
            }
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    if a.module.is_some() && !matches!(a.next_boot, Some(Some(_))) {
        usage("--module goes with --kernel RELEASE");
    }
    if a.nccl && !matches!(a.form, Form::Health) {
        usage("--nccl goes with --health");
    }
    if a.nfd_expiry_given && a.nfd.is_none() {
        usage("--nfd-expiry goes with --nfd");
    }
    if a.next_boot.is_some()
        && (matches!(a.form, Form::Health) || a.nfd.is_some() || a.expect_given)
    {
        usage("--next-boot and --kernel go with --json, --prometheus or --textfile only");
    }
    if (a.dump.is_some() || a.from.is_some()) && a.next_boot.is_some() {
        usage(
            "--dump and --from judge this node's path; --next-boot and --kernel read /lib/modules and /boot instead",
        );
    }
    if a.dump.is_some() && a.from.is_some() {
        usage("--dump writes what is read from this node; with --from nothing is");
    }
    if a.dump.is_some() && !matches!(a.form, Form::Human | Form::Json) {
        usage(
            "--dump goes with the default form or --json: the monitoring forms ask no program, so their dump would lack what the others need",
        );
    }
    if (a.textfile.is_some() || a.nfd.is_some()) && !matches!(a.form, Form::Human) {
        usage(
            "--textfile and --nfd write files and print nothing: leave out --json, --prometheus and --health",
        );
    }
    a
}

/// Writes the files asked for; the exit status is 1 when one could not be.
fn write_files(a: &Args, report: &Report) -> i32 {
    let mut status = 0;
    let mut write = |dir: &PathBuf, name: &str, contents: Result<String, String>| {
        let written = contents.and_then(|c| output_file::write_atomically(dir, name, &c));
        if let Err(e) = written {
            eprintln!("gpudirect-rdma-check: {e}");
            status = 1;
        }
    };
    if let Some(dir) = &a.textfile {
        write(dir, "gpudirect_rdma.prom", Ok(render::prometheus(report)));
    }
    if let Some(dir) = &a.nfd {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        write(dir, nfd::FILE_NAME, nfd::file(report, now + a.nfd_expiry));
    }
    status
}

/// --next-boot / --kernel: the verdict for that kernel, in the form asked.
fn next_boot(a: &Args, asked: &Option<String>) -> ! {
    let root = std::env::var_os("NV_PEER_MEM_ROOT")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/"), PathBuf::from);
    // Whether the node needs a peer client at all: MLNX_OFED's core
    // running (read as the check reads it), or installed, or ours.
    let needs_no_client = !registration::peer_core_running(&Host::from_env())
        && next_boot::client_wanted(&root) == Some(false);
    let verdict = match asked {
        Some(release) => match &a.module {
            Some(file) => next_boot::verdict_for_module(&root, release, file, needs_no_client),
            None => next_boot::verdict(&root, release, "--kernel".into(), None, needs_no_client),
        },
        None => {
            let nb = boot_loader::next_boot(&root);
            match &nb.release {
                Some(release) => next_boot::verdict(
                    &root,
                    release,
                    nb.how.clone(),
                    nb.cmdline.as_deref(),
                    needs_no_client,
                ),
                None => next_boot::unknown_kernel(nb.how, needs_no_client),
            }
        }
    };
    if let Some(dir) = &a.textfile {
        let written = output_file::write_atomically(
            dir,
            "gpudirect_rdma_next_boot.prom",
            next_boot_render::prometheus(&verdict),
        );
        if let Err(e) = written {
            eprintln!("gpudirect-rdma-check: {e}");
            std::process::exit(1);
        }
        std::process::exit(0);
    }
    let text = match a.form {
        Form::Json => next_boot_render::json(&verdict),
        Form::Prometheus => next_boot_render::prometheus(&verdict),
        _ => next_boot_render::human(&verdict),
    };
    let _ = std::io::stdout().write_all(text.as_bytes());
    std::process::exit(verdict.exit_status());
}

fn main() {
    // The check's own child, asking libcuda (cuda.rs); not for people.
    if std::env::args().nth(1).as_deref() == Some(cuda::CHILD_ARG) {
        std::process::exit(cuda::child());
    }
    let a = parse_args();
    if let Some(asked) = &a.next_boot {
        next_boot(&a, asked);
    }
    let host = match &a.from {
        Some(file) => {
            let read = std::fs::read(file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))
                .and_then(|bytes| snapshot::read(&bytes));
            match read {
                Ok(h) => h,
                Err(e) => usage(&format!(
                    "--from {}: not a gpudirect-rdma-check --dump archive: {e}",
                    file.display()
                )),
            }
        }
        None => Host::from_env(),
    };
    // Programs only where people read the answer.
    let programs =
        matches!(a.form, Form::Human | Form::Json) && a.textfile.is_none() && a.nfd.is_none();
    let mut report = check::check(&host, programs);
    health::expect(&mut report, a.expect);
    if let Some(file) = &a.dump {
        let dir = file
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
        let written = match name {
            Some(n) => output_file::write_atomically(dir, &n, snapshot::write(&host)),
            None => Err(format!("--dump {}: not a file name", file.display())),
        };
        match written {
            Ok(path) => eprintln!(
                "gpudirect-rdma-check: wrote {} (what this run read; `tar tf` lists it, its README says what is in it)",
                path.display()
            ),
            Err(e) => {
                eprintln!("gpudirect-rdma-check: {e}");
                std::process::exit(1);
            }
        }
    }
    if a.textfile.is_some() || a.nfd.is_some() {
        std::process::exit(write_files(&a, &report));
    }
    let (text, status) = match a.form {
        Form::Human => (render::human(&report), report.exit_status()),
        Form::Json => (render::json(&report), report.exit_status()),
        Form::Prometheus => (render::prometheus(&report), report.exit_status()),
        Form::Health => (
            health::line(&report, a.nccl) + "\n",
            i32::from(health::failing_fact(&report, a.nccl).is_some()),
        ),
    };
    // A closed stdout (`| head`) ends quietly, with the report's status.
    let _ = std::io::stdout().write_all(text.as_bytes());
    std::process::exit(status);
}
