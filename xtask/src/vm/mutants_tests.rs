//! Tests of mutants.rs: the mutants apply to the current kmod/, and a stale
//! or undescribed one is an error naming it.

use super::*;
use crate::vm::console::Outcome;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nvpm-mutants-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// The mutants are checked against the current kmod/ on every cargo
/// test, so one cannot rot silently when the source changes.
#[test]
fn every_mutant_applies_to_the_current_source() {
    let mutants = list(&workspace::path(MUTANTS_DIR)).unwrap();
    assert!(mutants.len() >= 4, "the issue asks for at least four");
    for m in &mutants {
        apply(m, &workspace::path("kmod"), true).unwrap();
    }
}

#[test]
fn a_patch_that_no_longer_applies_names_its_mutant() {
    let dir = scratch("rot");
    fs::create_dir_all(dir.join("tree/src")).unwrap();
    fs::write(dir.join("tree/src/a.rs"), "one\ntwo changed\nthree\n").unwrap();
    let patch = dir.join("stale_mutant.patch");
    fs::write(
        &patch,
        "Defect: something\n\n--- a/kmod/src/a.rs\n+++ b/kmod/src/a.rs\n@@ -1,3 +1,3 @@\n one\n-two\n+deux\n three\n",
    )
    .unwrap();
    let m = &list(&dir).unwrap()[0];
    assert_eq!(m.name, "stale_mutant");
    assert_eq!(m.defect, "something");
    let err = format!("{:#}", apply(m, &dir.join("tree"), true).unwrap_err());
    assert!(
        err.contains("mutant stale_mutant no longer applies"),
        "{err}"
    );
    // The same patch against the text it was made for applies.
    fs::write(dir.join("tree/src/a.rs"), "one\ntwo\nthree\n").unwrap();
    apply(m, &dir.join("tree"), false).unwrap();
    assert_eq!(
        fs::read_to_string(dir.join("tree/src/a.rs")).unwrap(),
        "one\ndeux\nthree\n"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_patch_without_its_defect_line_is_refused() {
    let dir = scratch("nodefect");
    fs::write(dir.join("quiet.patch"), "--- a/kmod/x\n+++ b/kmod/x\n").unwrap();
    let err = format!("{:#}", list(&dir).err().unwrap());
    assert!(err.contains("mutant quiet"), "{err}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_noted_pass_counts_only_for_the_same_inputs() {
    let dir = scratch("stamp");
    let files = vec![dir.join("nv_peer_mem.ko"), dir.join("init")];
    fs::write(&files[0], "module").unwrap();
    fs::write(&files[1], "init").unwrap();
    assert!(!noted(&dir, &files), "nothing noted yet");
    note(&dir, &files, true).unwrap();
    assert!(noted(&dir, &files));
    fs::write(&files[0], "another module").unwrap();
    assert!(
        !noted(&dir, &files),
        "a changed module is not the one that passed"
    );
    note(&dir, &files, true).unwrap();
    note(&dir, &files, false).unwrap();
    assert!(
        !noted(&dir, &files),
        "a failed run forgets the earlier pass"
    );
    fs::remove_dir_all(&dir).unwrap();
}

fn outcome(failed: usize, splats: usize, stopped_by_host: bool) -> Outcome {
    let mut o = Outcome::setup_failed();
    o.failed = failed;
    o.splats = splats;
    o.stopped_by_host = stopped_by_host;
    o
}

/// A kill needs evidence against the module: a FAIL line, a kernel report
/// or a hang. A guest that just stopped (QEMU aborted) is no verdict.
#[test]
fn only_evidence_against_the_module_kills_a_mutant() {
    let mut o = outcome(1, 0, true);
    o.ours.insert("acquire".into(), true);
    o.ours.insert("memory_peers".into(), false);
    assert_eq!(o.evidence().unwrap(), ["memory_peers"]);
    assert_eq!(
        outcome(1, 2, false).evidence().unwrap(),
        ["console (kernel report)"]
    );
    assert_eq!(
        outcome(1, 0, true).evidence().unwrap(),
        ["console (hang: the host's bound)"]
    );
    assert!(
        outcome(1, 0, false)
            .evidence()
            .unwrap_err()
            .contains("no verdict")
    );
    assert!(outcome(0, 0, false).evidence().unwrap().is_empty());
}
