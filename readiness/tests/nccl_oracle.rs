//! NCCL's own code as the oracle (issue 42; docs/nccl-harness.md): the
//! check's NCCL verdict for a GPU and its NIC equals NCCL's, computed by
//! NCCL's own code (nccl-harness, both fixture releases), on the same node
//! shape under every arrangement of `NCCL_NET_GDR_LEVEL` in the
//! environment and in NCCL's configuration files. The node is described
//! twice, as a sysfs tree for the check (tests/common) and as NCCL's
//! topology XML for the harness (nccl-harness/topologies): the harness does
//! not read sysfs yet, so what these tests hold is the level rule, with the
//! distance of each shape NCCL's own (PHB, SYS).
//!
//! Ignored by a plain `cargo test`: ci/test-nccl.sh runs them once it has
//! built the harnesses (`cargo xtask nccl-harness`), with
//! `--ignored`; NVPM_NCCL_HARNESS_DIR (default target/nccl-harness) holds
//! one `<release>/nccl-harness` per NCCL release.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The built harnesses: (release, binary).
fn harnesses() -> Vec<(String, PathBuf)> {
    let dir = std::env::var_os("NVPM_NCCL_HARNESS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/nccl-harness"),
        PathBuf::from,
    );
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        e.path().join("nccl-harness"),
                    )
                })
                .filter(|(_, b)| b.is_file())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    assert!(
        !found.is_empty(),
        "no harness under {}: run cargo xtask nccl-harness first (ci/test-nccl.sh does)",
        dir.display()
    );
    found
}

/// One arrangement: the environment's value and the three files' texts
/// (None: unset, or no such file).
struct Arrangement {
    what: &'static str,
    env: Option<&'static str>,
    conf_file: Option<&'static str>,
    home: Option<&'static str>,
    etc: Option<&'static str>,
}

const ARRANGEMENTS: [Arrangement; 13] = [
    Arrangement {
        what: "nothing set",
        env: None,
        conf_file: None,
        home: None,
        etc: None,
    },
    Arrangement {
        what: "the environment: SYS",
        env: Some("SYS"),
        conf_file: None,
        home: None,
        etc: None,
    },
    Arrangement {
        what: "the environment: PHB",
        env: Some("PHB"),
        conf_file: None,
        home: None,
        etc: None,
    },
    Arrangement {
        what: "/etc/nccl.conf: SYS",
        env: None,
        conf_file: None,
        home: None,
        etc: Some("NCCL_NET_GDR_LEVEL=SYS\n"),
    },
    Arrangement {
        what: "the environment (PXB) before /etc/nccl.conf (SYS)",
        env: Some("PXB"),
        conf_file: None,
        home: None,
        etc: Some("NCCL_NET_GDR_LEVEL=SYS\n"),
    },
    Arrangement {
        what: "~/.nccl.conf (PHB) before /etc/nccl.conf (SYS)",
        env: None,
        conf_file: None,
        home: Some("NCCL_NET_GDR_LEVEL=PHB\n"),
        etc: Some("NCCL_NET_GDR_LEVEL=SYS\n"),
    },
    Arrangement {
        what: "NCCL_CONF_FILE (PHB) instead of ~/.nccl.conf (SYS)",
        env: None,
        conf_file: Some("NCCL_NET_GDR_LEVEL=PHB\n"),
        home: Some("NCCL_NET_GDR_LEVEL=SYS\n"),
        etc: Some("NCCL_NET_GDR_LEVEL=SYS\n"),
    },
    Arrangement {
        what: "an empty value in the environment, SYS in /etc/nccl.conf",
        env: Some(""),
        conf_file: None,
        home: None,
        etc: Some("NCCL_NET_GDR_LEVEL=SYS\n"),
    },
    Arrangement {
        what: "a lower-case level",
        env: Some("sys"),
        conf_file: None,
        home: None,
        etc: None,
    },
    Arrangement {
        what: "a spaced value in /etc/nccl.conf",
        env: None,
        conf_file: None,
        home: None,
        etc: Some("NCCL_NET_GDR_LEVEL= SYS\n"),
    },
    Arrangement {
        what: "the first line of /etc/nccl.conf wins, not the first valid one",
        env: None,
        conf_file: None,
        home: None,
        etc: Some("# site\nNCCL_NET_GDR_LEVEL=far\nNCCL_NET_GDR_LEVEL=SYS\n"),
    },
    Arrangement {
        what: "a legacy number (4: SYS)",
        env: Some("4"),
        conf_file: None,
        home: None,
        etc: None,
    },
    Arrangement {
        what: "a legacy number in hexadecimal (0x3: PHB)",
        env: Some("0x3"),
        conf_file: None,
        home: None,
        etc: None,
    },
];

/// The shapes: the check's tree and the harness's XML of the same node.
fn shape(name: &str) -> (Tree, PathBuf) {
    let t = Tree::new(&format!("oracle-{name}"));
    match name {
        "sys" => {
            t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
            t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0x2330, 0, 128 << 30);
            t.bridge("pci0000:80/0000:80:01.0", 4, None, 1);
            t.nic("pci0000:80/0000:80:01.0/0000:81:00.0", "mlx5_0", 1);
        }
        "phb" => {
            t.bridge("pci0000:00/0000:00:01.0", 4, None, 0);
            t.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0x2330, 0, 128 << 30);
            t.bridge("pci0000:00/0000:00:02.0", 4, None, 0);
            t.nic("pci0000:00/0000:00:02.0/0000:02:00.0", "mlx5_0", 0);
        }
        _ => unreachable!(),
    }
    t.nvidia_open_580();
    t.mofed_with("nv_peer_mem");
    let xml = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../nccl-harness/topologies/{name}.xml"));
    (t, xml)
}

/// The check's answer: does NCCL use GPUDirect RDMA between the GPU and
/// mlx5_0, and the level it says it took.
fn check_says(t: &Tree, a: &Arrangement) -> (bool, String) {
    let mut env: Vec<(&str, PathBuf)> = Vec::new();
    for (text, name, var) in [
        (a.home, "home-nccl.conf", "NV_PEER_MEM_USER_NCCL_CONF"),
        (a.etc, "etc-nccl.conf", "NV_PEER_MEM_NCCL_CONF"),
    ] {
        if let Some(text) = text {
            t.write(name, text);
            env.push((var, t.root.join(name)));
        }
    }
    // NCCL_CONF_FILE names a file of the node: under the tree's root.
    if let Some(text) = a.conf_file {
        t.write("site/nccl.conf", text);
        env.push(("NCCL_CONF_FILE", PathBuf::from("/site/nccl.conf")));
    }
    if let Some(v) = a.env {
        env.push(("NCCL_NET_GDR_LEVEL", PathBuf::from(v)));
    }
    let (_, out) = t.run_with(&[], &env);
    let line = out
        .lines()
        .find(|l| {
            // the `nccl` fact of the pair (its tag, then its check's name)
            let mut words = l.split_whitespace();
            let first = words.next();
            (first == Some("nccl") || words.next() == Some("nccl"))
                && l.contains("0000:01:00.0")
                && l.contains("mlx5_0")
        })
        .unwrap_or_else(|| panic!("no nccl line for the pair:\n{out}"))
        .to_owned();
    (line.contains("NCCL uses GPUDirect RDMA"), line)
}

/// NCCL's own answer for the same arrangement, from @harness over @xml.
fn nccl_says(harness: &Path, xml: &Path, t: &Tree, a: &Arrangement) -> (bool, String) {
    let mut cmd = Command::new(harness);
    cmd.arg(xml)
        .env("NCCL_HOSTID", "nccl-harness")
        .env_remove("NCCL_NET_GDR_LEVEL")
        .env_remove("NCCL_CONF_FILE")
        .env_remove("NCCL_HARNESS_ETC_NCCL_CONF")
        .env_remove("NCCL_HARNESS_HOME_NCCL_CONF");
    if a.home.is_some() {
        cmd.env("NCCL_HARNESS_HOME_NCCL_CONF", t.root.join("home-nccl.conf"));
    }
    if a.etc.is_some() {
        cmd.env("NCCL_HARNESS_ETC_NCCL_CONF", t.root.join("etc-nccl.conf"));
    }
    if a.conf_file.is_some() {
        cmd.env("NCCL_CONF_FILE", t.root.join("site/nccl.conf"));
    }
    if let Some(v) = a.env {
        cmd.env("NCCL_NET_GDR_LEVEL", v);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}: {:?}", harness.display(), out);
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("gpu "))
        .unwrap_or_else(|| panic!("no pair from the harness:\n{text}"))
        .to_owned();
    let read = line.contains("gdr_read on");
    let write = line.contains("gdr_write on");
    assert_eq!(
        read, write,
        "reads and writes differ (the check has one answer): {line}"
    );
    (read, line)
}

fn differential(name: &str) {
    let harnesses = harnesses();
    let mut differ = Vec::new();
    for a in &ARRANGEMENTS {
        let (t, xml) = shape(name);
        let (ours, our_line) = check_says(&t, a);
        for (release, harness) in &harnesses {
            let (theirs, their_line) = nccl_says(harness, &xml, &t, a);
            println!("{name}, {}: check {ours}, NCCL {release} {theirs}", a.what);
            if ours != theirs {
                differ.push(format!(
                    "{name}, {}:\n  check: {our_line}\n  NCCL {release}: {their_line}",
                    a.what
                ));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "the check and NCCL differ:\n{}",
        differ.join("\n")
    );
}

#[test]
#[ignore = "needs cargo xtask nccl-harness; run by ci/test-nccl.sh"]
fn the_level_rule_on_a_phb_node_is_nccls() {
    differential("phb");
}

#[test]
#[ignore = "needs cargo xtask nccl-harness; run by ci/test-nccl.sh"]
fn the_level_rule_on_a_sys_node_is_nccls() {
    differential("sys");
}
