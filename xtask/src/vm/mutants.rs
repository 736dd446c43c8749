//! `cargo xtask test-vm --mutants`: the mutation check. Each mutant is a
//! unified diff against kmod/ (kmod/tests/vm/mutants/NAME.patch, first line
//! `Defect: <what it models>`) that plants one deliberate defect. Each is
//! built like the module under test (a per-mutant copy of kmod/, kmod/'s own
//! Makefile, the shared core cache), booted with the same guest and
//! scenarios, and must be killed: at least one scenario, the leak ledger
//! (`final`) or the console check fails. The unmutated module runs in the
//! same mode (the baseline; a clean normal run of byte-identical inputs
//! stands in for it): if it does not pass, nothing a mutant shows means
//! anything. The oracle phase is left out of these boots (it
//! never counts for nv_peer_mem's verdict anyway).

use super::arch::Arch;
use super::boot::{RunTo, boot_until};
use super::builds::{Doubles, build_module_from};
use super::console::SCENARIOS;
use super::initramfs::make_initramfs;
use super::sync::sync_tree;
use crate::workspace;
use anyhow::{Context, Result, bail};
use std::collections::VecDeque;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where the mutants live, relative to the workspace.
pub const MUTANTS_DIR: &str = "kmod/tests/vm/mutants";

/// Guests booted at once. Each has 2 vCPUs (the race scenario needs two);
/// two guests share the CI machine's 2 cores.
const PARALLEL_BOOTS: usize = 2;

/// One deliberate defect.
pub struct Mutant {
    pub name: String,
    /// the patch's first line, after `Defect: `
    pub defect: String,
    pub patch: PathBuf,
}

/// Every `*.patch` in @dir, by name. A patch without its `Defect:` line is
/// an error naming it.
pub fn list(dir: &Path) -> Result<Vec<Mutant>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".patch"))
        else {
            continue;
        };
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let defect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("Defect: "))
            .map(str::trim)
            .filter(|d| !d.is_empty());
        let Some(defect) = defect else {
            bail!(
                "mutant {name}: {} does not start with a `Defect: <what it models>` line; add one",
                path.display()
            );
        };
        out.push(Mutant {
            name: name.to_string(),
            defect: defect.to_string(),
            patch: path,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    if out.is_empty() {
        bail!("no mutants (*.patch) in {}", dir.display());
    }
    Ok(out)
}

/// Applies @m to the kmod/ tree at @tree (the patch names files as
/// a/kmod/...). Context must match exactly (line offsets are fine), so a
/// mutant whose code changed under it is an error naming it rather than a
/// defect planted somewhere else. @dry_run: only check.
pub fn apply(m: &Mutant, tree: &Path, dry_run: bool) -> Result<()> {
    let mut cmd = Command::new("patch");
    cmd.arg("-d")
        .arg(tree)
        .args([
            "-p2",
            "--batch",
            "--forward",
            "--fuzz=0",
            "--no-backup-if-mismatch",
            "--reject-file=-",
        ])
        .arg("-i")
        .arg(&m.patch);
    if dry_run {
        cmd.arg("--dry-run");
    }
    let out = cmd.output().with_context(|| {
        format!(
            "mutant {}: cannot run patch (apt-get install patch)",
            m.name
        )
    })?;
    if !out.status.success() {
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        bail!(
            "mutant {} no longer applies to kmod/ ({}): rewrite it so it plants the same defect (\"{}\") in the current source.\n{}",
            m.name,
            m.patch.display(),
            m.defect,
            text.trim()
        );
    }
    Ok(())
}

/// The fixed parts of every boot of the mutation check.
pub struct Setup<'a> {
    pub kver: &'a str,
    pub kdir: &'a Path,
    pub vmlinuz: &'a Path,
    /// the guest's busybox (x86_64: the host's static one)
    pub busybox: &'a Path,
    /// the per-kernel work directory of the normal run
    pub work: &'a Path,
    pub mods: &'a Doubles,
    /// the unmutated module, as the normal run builds it
    pub module: &'a Path,
    pub no_persistent: &'a Path,
    pub timeout: Duration,
}

/// Where the normal run notes that the module passed every scenario, and
/// with which inputs (`digest`).
const BASELINE_STAMP: &str = "baseline-passed";

/// Everything nv_peer_mem's part of the guest depends on: the module, its
/// no-persistent-API build, the doubles, the scenario driver and the
/// guest's init.
fn baseline_inputs(mods: &Doubles, module: &Path, no_persistent: &Path) -> Vec<PathBuf> {
    vec![
        module.to_path_buf(),
        no_persistent.to_path_buf(),
        mods.nv_ko.clone(),
        mods.core_ko.clone(),
        mods.scen_ko.clone(),
        workspace::path("kmod/tests/vm/guest/init"),
    ]
}

/// A digest of @files' bytes and of the scenario list the host expects.
/// Same digest, same baseline boot.
fn digest(files: &[PathBuf]) -> Result<String> {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: deterministic for one xtask build, which is
    // all a cache key needs (another build just reruns the baseline).
    let mut h = std::hash::DefaultHasher::new();
    SCENARIOS.hash(&mut h);
    for f in files {
        fs::read(f)
            .with_context(|| format!("reading {}", f.display()))?
            .hash(&mut h);
    }
    Ok(format!("{:016x}", h.finish()))
}

/// Called by the normal run after a boot: notes in @work that the guest
/// passed with these inputs, or forgets an earlier pass.
pub fn note_baseline(
    work: &Path,
    mods: &Doubles,
    module: &Path,
    no_persistent: &Path,
    passed: bool,
) -> Result<()> {
    note(work, &baseline_inputs(mods, module, no_persistent), passed)
}

fn note(work: &Path, files: &[PathBuf], passed: bool) -> Result<()> {
    let stamp = work.join(BASELINE_STAMP);
    let _ = fs::remove_file(&stamp);
    if passed {
        fs::write(&stamp, digest(files)?)?;
    }
    Ok(())
}

/// Whether a pass with exactly @files is noted in @work.
fn noted(work: &Path, files: &[PathBuf]) -> bool {
    let stamp = fs::read_to_string(work.join(BASELINE_STAMP)).ok();
    stamp.is_some() && digest(files).ok() == stamp
}

/// What one boot showed.
struct Verdict {
    /// scenarios (and `console`) that failed or never reported
    failing: Vec<String>,
    /// None: the normal run's boot, reused
    seconds: Option<f64>,
}

impl Verdict {
    fn took(&self) -> String {
        match self.seconds {
            Some(s) => format!("{s:.0} s"),
            None => "in the normal run".to_string(),
        }
    }
}

/// Builds every mutant, boots the baseline and the mutants
/// (PARALLEL_BOOTS at a time), prints the table and one `N passed, M
/// failed` line per boot. Ok(true) when the baseline passed and every
/// mutant was killed.
pub fn run(s: &Setup) -> Result<bool> {
    let mutants = list(&workspace::path(MUTANTS_DIR))?;
    let root = s.work.join("mutants");
    fs::create_dir_all(&root)?;
    // Built one at a time (each build is a heavy job on its own); a build
    // failure is an error naming the mutant, never a kill.
    let mut jobs: VecDeque<(String, PathBuf)> = VecDeque::new();
    let baseline_reused = noted(s.work, &baseline_inputs(s.mods, s.module, s.no_persistent));
    if baseline_reused {
        println!(
            "  [{}] baseline: the normal run passed with this module, these doubles and this guest; not booted again",
            s.kver
        );
    } else {
        jobs.push_back(("baseline".to_string(), s.module.to_path_buf()));
    }
    for m in &mutants {
        let t = Instant::now();
        let dir = root.join(&m.name);
        let stage = dir.join("src");
        let _ = fs::remove_dir_all(&stage);
        sync_tree(
            &workspace::path("kmod"),
            &stage,
            &["tests", "build", "target"],
        )?;
        apply(m, &stage, false)?;
        // Built from a copy that is rewritten only where bytes changed, so
        // a warm rerun rebuilds nothing.
        let ko = build_module_from(s.kver, s.kdir, &stage, &dir.join("kmod"), s.mods)
            .with_context(|| format!("mutant {}: the mutated module does not build", m.name))?;
        println!(
            "  [{}] mutant {} built ({:.1} s)",
            s.kver,
            m.name,
            t.elapsed().as_secs_f64()
        );
        jobs.push_back((m.name.clone(), ko));
    }

    let queue = Mutex::new(jobs);
    let results: Mutex<Vec<(String, Result<Verdict>)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL_BOOTS {
            scope.spawn(|| {
                loop {
                    let job = queue.lock().expect("queue").pop_front();
                    let Some((name, ko)) = job else { break };
                    let verdict = boot_one(s, &root.join(&name), &name, &ko);
                    results.lock().expect("results").push((name, verdict));
                }
            });
        }
    });
    let mut results = results.into_inner().expect("results");
    if baseline_reused {
        results.push((
            "baseline".to_string(),
            Ok(Verdict {
                failing: Vec::new(),
                seconds: None,
            }),
        ));
    }
    let order = |n: &str| {
        mutants
            .iter()
            .position(|m| m.name == n)
            .map_or(0, |i| i + 1)
    };
    results.sort_by_key(|(n, _)| order(n));
    Ok(report(s.kver, &mutants, &results))
}

/// Boots @ko with the standard guest (no oracle phase) in @dir.
fn boot_one(s: &Setup, dir: &Path, name: &str, ko: &Path) -> Result<Verdict> {
    let t = Instant::now();
    fs::create_dir_all(dir)?;
    let initrd = make_initramfs(dir, s.busybox, s.mods, ko, s.no_persistent, &[])?;
    let label = format!("{} {name}", s.kver);
    // A guest that stops with no FAIL, no kernel report and no bound hit
    // says nothing about the module (QEMU itself aborted once, TCG's
    // iotlb_to_section assertion, before any module was loaded): boot it
    // again, and count it as an error, never a kill, if it does so twice.
    let mut why = String::new();
    for _ in 0..2 {
        let outcome = boot_until(
            &label,
            Arch::X86_64,
            s.vmlinuz,
            &initrd,
            dir,
            s.timeout,
            RunTo::FirstFailure,
        )?;
        match outcome.evidence() {
            Ok(failing) => {
                return Ok(Verdict {
                    failing,
                    seconds: Some(t.elapsed().as_secs_f64()),
                });
            }
            Err(e) => {
                println!("  [{label}] {e}: booting it again");
                why = e;
            }
        }
    }
    bail!(
        "{why}, twice (console log: {})",
        dir.join("console.log").display()
    )
}

/// Prints the table and the counts; true when the baseline passed and
/// every mutant was killed.
fn report(kver: &str, mutants: &[Mutant], results: &[(String, Result<Verdict>)]) -> bool {
    println!("==> [{kver}] mutation check");
    println!("  mutant | killed? | failing scenarios");
    let mut ok = true;
    for (name, r) in results {
        let (cell, detail, good) = match (name.as_str(), r) {
            (_, Err(e)) => ("error", format!("{e:#}"), false),
            ("baseline", Ok(v)) if v.failing.is_empty() => (
                "n/a",
                format!("none: the unmutated module passes ({})", v.took()),
                true,
            ),
            ("baseline", Ok(v)) => (
                "n/a",
                format!(
                    "{} (the unmutated module must pass, or no mutant result means anything)",
                    v.failing.join(", ")
                ),
                false,
            ),
            (_, Ok(v)) if v.failing.is_empty() => (
                "SURVIVED",
                "none: the suite misses this defect".to_string(),
                false,
            ),
            (_, Ok(v)) => (
                "killed",
                format!("{} ({})", v.failing.join(", "), v.took()),
                true,
            ),
        };
        println!("  {name} | {cell} | {detail}");
        ok &= good;
    }
    for m in mutants {
        println!("  {}: {}", m.name, m.defect);
    }
    for (name, r) in results {
        let good = match (name.as_str(), r) {
            (_, Err(_)) => false,
            ("baseline", Ok(v)) => v.failing.is_empty(),
            (_, Ok(v)) => !v.failing.is_empty(),
        };
        println!(
            "{} passed, {} failed",
            usize::from(good),
            usize::from(!good)
        );
    }
    ok
}

#[cfg(test)]
#[path = "mutants_tests.rs"]
mod tests;
