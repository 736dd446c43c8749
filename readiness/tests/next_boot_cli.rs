//! The command line of `--kernel` and `--next-boot` (docs/next-boot.md):
//! its forms, exit statuses and refusals, over a fake root. The verdicts
//! themselves are tested in readiness/src/next_boot_tests.rs.

mod common;
use common::*;

const K2: &str = "6.12.95+deb12-amd64";

/// A kernel whose modules.dep has no nv_peer_mem, booted next by GRUB, on
/// a node that runs MLNX_OFED's core now (so it wants a peer client).
fn root() -> Tree {
    let t = bare_root();
    t.exports(&[("ib_register_peer_memory_client", "ib_core")]);
    t
}

/// The same without MLNX_OFED anywhere.
fn bare_root() -> Tree {
    let t = Tree::new("next-boot-cli");
    let dir = t.root.join(format!("lib/modules/{K2}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("modules.dep"),
        "kernel/drivers/infiniband/core/ib_core.ko:\n",
    )
    .unwrap();
    std::fs::create_dir_all(t.root.join("boot/grub")).unwrap();
    std::fs::write(
        t.root.join("boot/grub/grub.cfg"),
        format!("set default=\"0\"\nmenuentry 'Debian GNU/Linux' {{\n\tlinux\t/boot/vmlinuz-{K2} root=/dev/vda ro\n}}\n"),
    )
    .unwrap();
    t
}

fn run(t: &Tree, args: &[&str]) -> (i32, String) {
    t.run_with(args, &[("NV_PEER_MEM_ROOT", t.root.clone())])
}

#[test]
fn next_boot_says_lost_in_every_form_with_exit_4() {
    let t = root();
    let (status, out) = run(&t, &["--next-boot"]);
    assert_eq!(status, 4, "{out}");
    assert_line(&out, &["kernel", K2, "GRUB: default `0`"]);
    assert_line(
        &out,
        &[
            "FAIL",
            "module",
            "no nv_peer_mem for",
            "modprobe finds none",
        ],
    );
    assert_line(&out, &["NEXT BOOT LOST: nv_peer_mem will not load on", K2]);
    let (status, out) = run(&t, &["--kernel", K2, "--json"]);
    assert_eq!(status, 4);
    assert!(out.starts_with(&format!(
        "{{\"schema\":\"gpudirect-rdma-check-next-boot/1\",\"kernel\":\"{K2}\",\"chosen\":\"--kernel\",\"loads\":false,\"exit_status\":4,\"stale_symbol\":null,\"facts\":[{{\"check\":\"kernel\""
    )), "{out}");
    let (_, out) = run(&t, &["--kernel", K2, "--prometheus"]);
    assert!(
        out.contains(&format!("gpudirect_rdma_next_boot{{kernel=\"{K2}\"}} 0\n")),
        "{out}"
    );
    let dir = t.root.join("textfile");
    std::fs::create_dir_all(&dir).unwrap();
    let (status, out) = run(&t, &["--next-boot", "--textfile", dir.to_str().unwrap()]);
    assert_eq!(status, 0, "{out}");
    let written = std::fs::read_to_string(dir.join("gpudirect_rdma_next_boot.prom")).unwrap();
    assert!(
        written.contains("gpudirect_rdma_next_boot_exit_status 4\n"),
        "{written}"
    );
}

#[test]
fn no_boot_loader_is_cannot_tell_with_exit_7() {
    let t = root();
    std::fs::remove_dir_all(t.root.join("boot/grub")).unwrap();
    let (status, out) = run(&t, &["--next-boot"]);
    assert_eq!(status, 7, "{out}");
    assert_line(&out, &["??", "kernel", "cannot tell"]);
    assert_line(&out, &["NEXT BOOT UNKNOWN"]);
}

/// The lent GPU hosts' case: no PeerDirect core runs and none is
/// installed for the next kernel, so no peer client is needed; before,
/// this printed NEXT BOOT LOST (exit 4) or UNKNOWN (exit 7).
#[test]
fn a_node_without_mofed_needs_no_client_whatever_it_boots() {
    let t = bare_root();
    let (status, out) = run(&t, &["--next-boot"]);
    assert_eq!(status, 0, "{out}");
    assert_line(
        &out,
        &["NEXT BOOT OK: this node needs no peer memory client on", K2],
    );
    let (status, out) = run(&t, &["--kernel", "6.99.0-1-amd64"]);
    assert_eq!(status, 0, "{out}");
    std::fs::remove_dir_all(t.root.join("boot/grub")).unwrap();
    let (status, out) = run(&t, &["--next-boot", "--prometheus"]);
    assert_eq!(status, 0, "{out}");
    assert!(
        out.contains("gpudirect_rdma_next_boot_known{kernel=\"unknown\"} 1\n"),
        "{out}"
    );
}

#[test]
fn bad_combinations_exit_2_and_print_nothing() {
    let t = root();
    for args in [
        &["--kernel", K2, "--health"][..],
        &["--next-boot", "--nfd", "/tmp"],
        &["--next-boot", "--expect", "peer"],
        &["--kernel", "../etc"],
        &["--kernel"],
        &["--nfd-expiry", "60"],
    ] {
        let (status, out) = run(&t, args);
        assert_eq!(status, 2, "{args:?}: {out}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
}

/// `--module` judges a file only for a named kernel: alone, or with
/// --next-boot, it is a usage error (exit 2).
#[test]
fn module_goes_with_kernel_only() {
    let t = root();
    for args in [
        &["--module", "/x.ko"][..],
        &["--next-boot", "--module", "/x.ko"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpudirect-rdma-check"))
            .args(args)
            .env("NV_PEER_MEM_ROOT", &t.root)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("--module goes with --kernel RELEASE"), "{err}");
    }
}
