//! Where fleets look (docs/monitoring.md): the one-line health form that
//! NHC drains a node with, the textfile for node_exporter and the Node
//! Feature Discovery labels, over fake trees. The tests marked `ignore`
//! run the real consumers (LBNL NHC from the fixture, Debian's
//! prometheus-node-exporter and promtool); ci/test-monitoring.sh provides
//! them and runs those tests, or says which are skipped and why.

mod common;
use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One GPU and its NIC under one PCIe switch (PIX), MLNX_OFED's core with
/// nv_peer_mem and its counters, the open 580 driver: ready. `acs_ctl` on
/// the GPU's downstream port; `nic_numa` 1 puts the NIC on the other
/// socket instead (SYS).
fn pair(name: &str, acs_ctl: u16, other_socket: bool) -> Tree {
    let t = Tree::new(name);
    t.bridge("pci0000:00/0000:00:01.0", 4, Some((0x5f, 0)), 0);
    t.bridge("pci0000:00/0000:00:01.0/0000:01:00.0", 5, None, 0);
    let dsp = "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0";
    t.bridge(dsp, 6, Some((0x5f, acs_ctl)), 0);
    t.gpu(&format!("{dsp}/0000:03:00.0"), 0x2330, 0, 128 * GIB);
    if other_socket {
        t.bridge("pci0000:80/0000:80:01.0", 4, None, 1);
        t.nic("pci0000:80/0000:80:01.0/0000:81:00.0", "mlx5_0", 1);
    } else {
        let nic_dsp = "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0";
        t.bridge(nic_dsp, 6, Some((0x5f, 0)), 0);
        t.nic(&format!("{nic_dsp}/0000:04:00.0"), "mlx5_0", 0);
    }
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    t.counters(
        "nv_mem",
        ["12", "10", "64", "48", "4194304", "3145728", "1"],
    );
    t
}

/// The same pair on the kernel's own RDMA stack: DMA-BUF serves, no peer
/// memory client can.
fn inbox(name: &str) -> Tree {
    let t = pair(name, 0, false);
    t.unload("nv_peer_mem");
    let _ = fs::remove_dir_all(t.sys().join("kernel/mm/memory_peers"));
    t.exports(&[("ib_umem_dmabuf_get", "ib_uverbs")]);
    t
}

// ---- the health form (`--health`) ----

#[test]
fn health_says_ok_with_the_path_and_exits_0() {
    let t = pair("health-ok", 0, false);
    let (status, out) = t.run(&["--health", "--expect", "peer"]);
    assert_eq!(
        (status, out.as_str()),
        (0, "ok: GPUDirect RDMA through nv_peer_mem\n")
    );
}

#[test]
fn health_names_the_fact_and_its_fix_on_one_line() {
    let t = pair("health-acs", 0x1d, false);
    let (status, out) = t.run(&["--health"]);
    assert_eq!(status, 1, "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("gpudirect-rdma acs "), "{out}");
    assert!(out.contains("; fix: "), "{out}");
    assert!(!out.contains('\''), "{out}");
}

#[test]
fn health_nccl_decides_whether_distance_fails() {
    let t = pair("health-sys", 0, true);
    let (status, out) = t.run(&["--health"]);
    assert_eq!(status, 0, "{out}");
    assert!(
        out.starts_with("ok: GPUDirect RDMA through nv_peer_mem (NCCL"),
        "{out}"
    );
    let (status, out) = t.run(&["--health", "--nccl"]);
    assert_eq!(status, 1, "{out}");
    assert!(out.contains("SYS"), "{out}");
}

#[test]
fn health_expect_peer_fails_where_only_dmabuf_serves() {
    let t = inbox("health-inbox");
    assert_eq!(t.run(&["--health", "--expect", "dmabuf"]).0, 0);
    let (status, out) = t.run(&["--health", "--expect", "peer"]);
    assert_eq!(status, 1, "{out}");
    assert!(
        out.starts_with("gpudirect-rdma expect GPU memory registers through dmabuf"),
        "{out}"
    );
    // the other forms carry the expectation too
    let (status, out) = t.run(&["--json", "--expect", "peer"]);
    assert_eq!(status, 4, "{out}");
    assert!(out.contains("\"check\":\"expect\""), "{out}");
}

#[test]
fn health_fails_on_what_could_not_be_read() {
    let t = pair("health-unreadable", 0, false);
    fs::remove_file(t.root.join("proc/sys/kernel/osrelease")).unwrap();
    let (status, out) = t.run(&["--health"]);
    assert_eq!(status, 1, "{out}");
    assert!(
        out.starts_with("gpudirect-rdma path ") && out.contains("osrelease"),
        "{out}"
    );
}

#[test]
fn bad_monitoring_arguments_exit_2() {
    let t = pair("args", 0, false);
    for args in [
        &["--expect", "rdma"][..],
        &["--expect"],
        &["--nccl"],
        &["--textfile", "/tmp", "--json"],
        &["--nfd", "/tmp", "--nfd-expiry", "0"],
    ] {
        let (status, out) = t.run(args);
        assert_eq!((status, out.as_str()), (2, ""), "{args:?}");
    }
}

// ---- the files (`--textfile`, `--nfd`) ----

fn scratch(t: &Tree, name: &str) -> PathBuf {
    let d = t.root.join(name);
    fs::create_dir_all(&d).unwrap();
    d
}

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

#[test]
fn textfile_and_nfd_files_are_written_whole_and_exit_0() {
    let t = pair("files", 0x1d, false);
    let (prom, features) = (scratch(&t, "textfile"), scratch(&t, "features.d"));
    let (status, out) = t.run(&[
        "--textfile",
        prom.to_str().unwrap(),
        "--nfd",
        features.to_str().unwrap(),
    ]);
    assert_eq!(
        (status, out.as_str()),
        (0, ""),
        "a not-ready node is still written"
    );
    assert_eq!(names(&prom), ["gpudirect_rdma.prom"]);
    assert_eq!(names(&features), ["gpudirect-rdma"]);
    let metrics = fs::read_to_string(prom.join("gpudirect_rdma.prom")).unwrap();
    assert!(metrics.contains("gpudirect_rdma_ready 0\n"), "{metrics}");
    assert!(
        metrics.contains("gpudirect_rdma_peer_memory_free_callbacks_total{client=\"nv_mem\"} 1\n"),
        "{metrics}"
    );
    let labels = fs::read_to_string(features.join("gpudirect-rdma")).unwrap();
    let mut lines = labels.lines();
    let expiry = lines.next().unwrap();
    assert!(
        expiry.starts_with("# +expiry-time=20") && expiry.ends_with('Z'),
        "{labels}"
    );
    let rest: Vec<&str> = lines.collect();
    assert_eq!(
        rest,
        [
            "feature.node.kubernetes.io/gpudirect-rdma.ready=false",
            "feature.node.kubernetes.io/gpudirect-rdma.path=nv_peer_mem",
            "feature.node.kubernetes.io/gpudirect-rdma.problem=data_path",
        ]
    );
    for line in rest {
        let (key, value) = line.split_once('=').unwrap();
        readiness::nfd::validate(key, value).unwrap();
    }
    assert!(labels.len() <= readiness::nfd::MAX_FILE_BYTES);
}

#[test]
fn an_unwritable_directory_exits_1_and_leaves_the_old_file() {
    let t = pair("unwritable", 0, false);
    let features = scratch(&t, "features.d");
    fs::write(features.join("gpudirect-rdma"), "old\n").unwrap();
    let missing = t.root.join("no-such-dir");
    let (status, _) = t.run(&[
        "--textfile",
        missing.to_str().unwrap(),
        "--nfd",
        features.to_str().unwrap(),
    ]);
    assert_eq!(status, 1);
    assert!(!missing.exists());
    // the NFD file was still written: one failed file does not stop the other
    assert_ne!(
        fs::read_to_string(features.join("gpudirect-rdma")).unwrap(),
        "old\n"
    );
    assert_eq!(names(&features), ["gpudirect-rdma"]);
}

// ---- the real consumers (run by ci/test-monitoring.sh) ----

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run ci/test-monitoring.sh, which provides it")
    }))
}

/// Runs LBNL NHC (the fixture's `nhc` script, unmodified) with nhc.conf
/// holding `check`, our check file beside the fixture's common.nhc, over
/// the tree; `binary` is the gpudirect-rdma-check it runs. Nodes are not
/// marked offline here (MARK_OFFLINE=0): that is the Slurm test's.
fn nhc(t: &Tree, check: &str, binary: &Path) -> (i32, String) {
    let nhc_tree = env_path("NVPM_NHC_TREE");
    let conf = t.root.join("nhc");
    let scripts = conf.join("scripts");
    fs::create_dir_all(&scripts).unwrap();
    fs::copy(
        nhc_tree.join("scripts/common.nhc"),
        scripts.join("common.nhc"),
    )
    .unwrap();
    let ours = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/nvpm_gpudirect.nhc");
    fs::copy(ours, scripts.join("nvpm_gpudirect.nhc")).unwrap();
    fs::write(conf.join("nhc.conf"), format!("* || {check}\n")).unwrap();
    let out = Command::new("bash")
        .arg(nhc_tree.join("nhc"))
        .args(["-D", conf.to_str().unwrap(), "-t", "60"])
        .args(["LOGFILE=-", "MARK_OFFLINE=0", "SYSCONFIGDIR=/nonexistent"])
        .env("NV_PEER_MEM_SYSFS", t.sys())
        .env("NV_PEER_MEM_PROC", t.root.join("proc"))
        .env("NV_PEER_MEM_ROOT", &t.root)
        .env("NV_PEER_MEM_SERVICE", "/nonexistent/nv_peer_mem-service")
        .env("NV_PEER_MEM_NCCL_CONF", "/nonexistent/nccl.conf")
        .env("NV_PEER_MEM_USER_NCCL_CONF", "/nonexistent/user-nccl.conf")
        .env_remove("NCCL_CONF_FILE")
        .env("NV_PEER_MEM_NVIDIA_SMI", "/nonexistent/nvidia-smi")
        .env("GPUDIRECT_RDMA_CHECK", binary)
        .env_remove("NCCL_NET_GDR_LEVEL")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn ours() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpudirect-rdma-check"))
}

/// The reason NHC failed with (its `die` logs "Health check failed:").
fn nhc_reason(out: &str) -> &str {
    out.lines()
        .find_map(|l| l.split_once("Health check failed:  ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("NHC did not fail a check:\n{out}"))
}

#[test]
#[ignore = "needs LBNL NHC: ci/test-monitoring.sh"]
fn nhc_passes_a_ready_node() {
    let t = pair("nhc-ready", 0, false);
    for check in [
        "check_gpudirect_rdma",
        "check_gpudirect_rdma peer nccl",
        "check_gpudirect_rdma any",
    ] {
        let (status, out) = nhc(&t, check, &ours());
        assert_eq!(status, 0, "{check}: {out}");
    }
}

#[test]
#[ignore = "needs LBNL NHC: ci/test-monitoring.sh"]
fn nhc_fails_each_kind_of_not_ready_with_its_reason() {
    let acs = pair("nhc-acs", 0x1d, false);
    let sys = pair("nhc-sys", 0, true);
    let dmabuf_only = inbox("nhc-inbox");
    let no_path = inbox("nhc-no-path");
    no_path.exports(&[]);
    let unreadable = pair("nhc-unreadable", 0, false);
    fs::remove_file(unreadable.root.join("proc/sys/kernel/osrelease")).unwrap();
    let nothing = Tree::new("nhc-nothing");
    nothing.nvidia_open_580();
    let cases: [(&Tree, &str, &[&str]); 6] = [
        (
            &acs,
            "check_gpudirect_rdma",
            &["gpudirect-rdma acs", "fix: "],
        ),
        (
            &sys,
            "check_gpudirect_rdma any nccl",
            &["gpudirect-rdma", "SYS", "fix: ", "NCCL_NET_GDR_LEVEL"],
        ),
        (
            &dmabuf_only,
            "check_gpudirect_rdma peer",
            &[
                "gpudirect-rdma expect",
                "expects a peer memory client",
                "fix: ",
            ],
        ),
        (
            &no_path,
            "check_gpudirect_rdma",
            &["gpudirect-rdma path no path registers GPU memory", "fix: "],
        ),
        (
            &unreadable,
            "check_gpudirect_rdma",
            &["gpudirect-rdma path", "osrelease"],
        ),
        (
            &nothing,
            "check_gpudirect_rdma",
            &["gpudirect-rdma gpu no NVIDIA GPU"],
        ),
    ];
    for (tree, check, words) in cases {
        let (status, out) = nhc(tree, check, &ours());
        assert_ne!(status, 0, "{check}: {out}");
        let reason = nhc_reason(&out);
        for w in words {
            assert!(reason.contains(w), "{check}: {w:?} not in {reason:?}");
        }
    }
    // distance alone passes unless NCCL is required
    assert_eq!(nhc(&sys, "check_gpudirect_rdma any", &ours()).0, 0);
}

#[test]
#[ignore = "needs LBNL NHC: ci/test-monitoring.sh"]
fn nhc_fails_when_the_check_is_missing_crashes_or_is_misused() {
    let t = pair("nhc-broken", 0, false);
    let (status, out) = nhc(
        &t,
        "check_gpudirect_rdma",
        Path::new("/nonexistent/gpudirect-rdma-check"),
    );
    assert_ne!(status, 0);
    assert!(
        nhc_reason(&out).contains("is missing: install nvidia-peer-memory"),
        "{out}"
    );
    let crashing = t.root.join("crashing-check");
    fs::write(
        &crashing,
        "#!/bin/sh\necho 'thread main panicked'\nkill -SEGV $$\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&crashing, fs::Permissions::from_mode(0o755)).unwrap();
    let (status, out) = nhc(&t, "check_gpudirect_rdma", &crashing);
    assert_ne!(status, 0);
    let reason = nhc_reason(&out);
    assert!(
        reason.contains("failed (exit status 139)") && reason.contains("thread main panicked"),
        "{out}"
    );
    let (status, out) = nhc(&t, "check_gpudirect_rdma peer everything", &ours());
    assert_ne!(status, 0);
    assert!(
        nhc_reason(&out).contains("usage: check_gpudirect_rdma [peer|dmabuf|any] [nccl]"),
        "{out}"
    );
}

/// Kills the daemon it holds when dropped, so a failed assertion leaves
/// nothing running.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET `path` from 127.0.0.1:`port` (HTTP/1.0, so the server closes).
fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    Ok(body)
}

#[test]
#[ignore = "needs prometheus-node-exporter and promtool: ci/test-monitoring.sh"]
fn node_exporter_serves_the_textfile_and_promtool_finds_nothing_to_fix() {
    let t = pair("node-exporter", 0, false);
    let dir = scratch(&t, "textfile");
    assert_eq!(t.run(&["--textfile", dir.to_str().unwrap()]).0, 0);
    let prom = dir.join("gpudirect_rdma.prom");

    let out = Command::new(env_path("NVPM_PROMTOOL"))
        .args(["check", "metrics"])
        .stdin(fs::File::open(&prom).unwrap())
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {said}"
    );

    let scraped = scrape_textfile(&t, &dir);
    for line in [
        "node_textfile_scrape_error 0",
        "gpudirect_rdma_ready 1",
        "gpudirect_rdma_path{path=\"nv_peer_mem\"} 1",
        "gpudirect_rdma_peer_memory_client_info{client=\"nv_mem\",version=\"1.4.0\"} 1",
        "gpudirect_rdma_peer_memory_pinned_bytes{client=\"nv_mem\"} 1.048576e+06",
        "gpudirect_rdma_peer_memory_free_callbacks_total{client=\"nv_mem\"} 1",
        "# TYPE gpudirect_rdma_peer_memory_reg_bytes_total counter",
    ] {
        assert!(
            scraped.lines().any(|l| l == line),
            "{line:?} not scraped:\n{scraped}"
        );
    }
}

/// Serves @dir with node_exporter's textfile collector on a free loopback
/// port and returns one scrape of /metrics.
fn scrape_textfile(t: &Tree, dir: &std::path::Path) -> String {
    // a free port on the loopback interface, for node_exporter to take
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _daemon = Daemon(
        Command::new(env_path("NVPM_NODE_EXPORTER"))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--collector.disable-defaults")
            .arg("--collector.textfile")
            .arg(format!("--collector.textfile.directory={}", dir.display()))
            .stdout(std::process::Stdio::null())
            .stderr(fs::File::create(t.root.join("node-exporter.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut scraped = None;
    for _ in 0..100 {
        if let Ok(body) = http_get(port, "/metrics") {
            scraped = Some(body);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    scraped.unwrap_or_else(|| {
        panic!(
            "node_exporter did not answer on 127.0.0.1:{port}: {}",
            fs::read_to_string(t.root.join("node-exporter.log")).unwrap_or_default()
        )
    })
}

/// promtool check metrics on the Prometheus form of every real node in
/// the corpus (tests/real, replayed with --from) and of a bridge on two
/// GPUs' paths (where the check once printed one series twice): it says
/// nothing.
#[test]
#[ignore = "needs promtool and prometheus-node-exporter: ci/test-monitoring.sh"]
fn promtool_finds_nothing_to_fix_in_the_corpus() {
    let real = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real");
    let mut forms = Vec::new();
    for case in fs::read_dir(&real).unwrap() {
        let dump = case.unwrap().path().join("dump.tar");
        if !dump.is_file() {
            continue;
        }
        let out = Command::new(env!("CARGO_BIN_EXE_gpudirect-rdma-check"))
            .arg("--from")
            .arg(&dump)
            .arg("--prometheus")
            .output()
            .unwrap();
        forms.push((dump.display().to_string(), out.stdout));
    }
    assert!(forms.len() >= 2, "the corpus is in {}", real.display());
    // redirection on the NIC's downstream port, on both GPUs' paths
    let t = pair("promtool-shared", 0, false);
    t.write(
        "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/config",
        readiness::config_space::layout::bridge(0x10b5, 0xc010, 6, Some((0x5f, 0x0c))),
    );
    t.bridge(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0",
        6,
        None,
        0,
    );
    t.gpu(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0/0000:05:00.0",
        0x2330,
        0,
        128 * GIB,
    );
    forms.push((
        "a bridge on two GPUs' paths".into(),
        t.run(&["--prometheus"]).1.into_bytes(),
    ));
    // node_exporter serves it (1.5.0, Debian 12's, keeps one of two
    // repeated series without an error, so repeats are caught by
    // tests/verdicts.rs on the file itself)
    let dir = scratch(&t, "textfile");
    assert_eq!(t.run(&["--textfile", dir.to_str().unwrap()]).0, 0);
    let scraped = scrape_textfile(&t, &dir);
    assert!(
        scraped.lines().any(|l| l == "node_textfile_scrape_error 0")
            && scraped.contains("gpudirect_rdma_check_failed{check=\"acs\",status=\"fail\",subject=\"0000:02:01.0\"} 1"),
        "{scraped}"
    );
    for (what, text) in forms {
        let mut child = Command::new(env_path("NVPM_PROMTOOL"))
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(&text).unwrap();
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && said.trim().is_empty(),
            "{what}: promtool check metrics: {said}"
        );
    }
}

/// The two trees of ci/test-monitoring.sh's Slurm scenario, left on disk
/// under `NVPM_EXPORT_TREES`: `not-ready` (DMA-BUF serves, the site expects
/// a peer memory client) and `ready` (nv_peer_mem serves); the scenario
/// repairs the node by pointing its tree link at `ready`.
#[test]
#[ignore = "writes trees for ci/test-monitoring.sh's Slurm scenario"]
fn export_trees_for_the_slurm_scenario() {
    let out = env_path("NVPM_EXPORT_TREES");
    fs::create_dir_all(&out).unwrap();
    for (name, tree) in [
        ("not-ready", inbox("export-not-ready")),
        ("ready", pair("export-ready", 0, false)),
    ] {
        let _ = fs::remove_dir_all(out.join(name));
        let status = Command::new("cp")
            .arg("-a")
            .arg(&tree.root)
            .arg(out.join(name))
            .status()
            .unwrap();
        assert!(status.success());
    }
}

/// What could not be read is never a pass in the files either: the
/// metrics say not ready with the `unreadable` problem, the labels too.
#[test]
fn an_unreadable_tree_is_not_ready_in_the_textfile_and_the_labels() {
    let t = pair("files-unreadable", 0, false);
    fs::remove_file(t.root.join("proc/sys/kernel/osrelease")).unwrap();
    let dir = scratch(&t, "out");
    let (status, _) = t.run(&[
        "--textfile",
        dir.to_str().unwrap(),
        "--nfd",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(status, 0);
    let metrics = fs::read_to_string(dir.join("gpudirect_rdma.prom")).unwrap();
    for line in [
        "gpudirect_rdma_ready 0",
        "gpudirect_rdma_problem{problem=\"unreadable\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line:?} not in:\n{metrics}"
        );
    }
    let labels = fs::read_to_string(dir.join("gpudirect-rdma")).unwrap();
    assert!(labels.contains("gpudirect-rdma.ready=false\n"), "{labels}");
    assert!(labels.contains("gpudirect-rdma.problem="), "{labels}");
}
