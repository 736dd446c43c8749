//! The JSON and Prometheus forms of one fixed node, compared with golden
//! files: a field renamed, dropped or added fails here until the golden
//! file (and docs/readiness.md, which documents the schema) is updated
//! with it. `UPDATE_GOLDEN=1 cargo test -p readiness --test forms`
//! rewrites them; review the diff.

mod common;
use common::*;

/// One GPU and one NIC under a switch whose GPU-side port redirects (ACS),
/// BAR1 below GPU memory, nv_peer_mem above MLNX_OFED's core.
fn node() -> Tree {
    let t = Tree::new("forms");
    t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
    t.bridge("pci0000:00/0000:00:01.0/0000:01:00.0", 5, None, 0);
    t.bridge(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0",
        6,
        Some((0x5f, 0x0d)),
        0,
    );
    t.bridge(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0",
        6,
        Some((0x5f, 0)),
        0,
    );
    t.gpu(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
        0x20b0,
        0,
        256 << 20,
    );
    t.nic(
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
        "mlx5_0",
        0,
    );
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    // Three registrations of 2 MiB (32 pages of 64 KiB), one released.
    t.counters("nv_mem", ["3", "1", "96", "32", "6291456", "2097152", "0"]);
    t.nvidia_smi("00000000:03:00.0, 40960\n");
    t
}

fn compare(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "{} differs from the output:\n{actual}\nIf the change is intended, run `UPDATE_GOLDEN=1 cargo test -p readiness --test forms` and update docs/readiness.md.",
        path.display()
    );
}

#[test]
fn json_schema_is_the_documented_one() {
    let (status, out) = node().run(&["--json"]);
    assert_eq!(status, 5);
    compare("node.json", &out);
}

#[test]
fn prometheus_metrics_are_the_documented_ones() {
    let (status, out) = node().run(&["--prometheus"]);
    assert_eq!(status, 5);
    compare("node.prom", &out);
    // every sample belongs to a metric declared with HELP and TYPE
    let declared: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    for sample in out.lines().filter(|l| !l.starts_with('#')) {
        let name = sample.split(['{', ' ']).next().unwrap();
        assert!(declared.contains(&name), "{sample}");
        assert!(
            sample.rsplit(' ').next().unwrap().parse::<f64>().is_ok(),
            "{sample}"
        );
    }
}
