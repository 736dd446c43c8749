//! The differential oracle and the side-by-side benchmark of test-vm.
//!
//! In the same boot as nv_peer_mem's own scenarios, and after all of them
//! have reported, the guest (kmod/tests/vm/oracle/guest.sh) runs the same
//! scenarios against other implementations of the same peer memory clients,
//! each built here at test time from its upstream source against the same
//! real MLNX_OFED core header and the same NVIDIA double:
//!   - NVIDIA's nvidia-peermem.c from Debian's nvidia-open-kernel-dkms 535
//!     (bookworm contrib, ci/fetch-nvidia-src.sh) and 550 (trixie contrib,
//!     ci/fetch-nvidia-p2p.sh trixie), downloaded and unpacked, never
//!     installed;
//!   - Mellanox's nv_peer_mem.c from the nv_peer_memory 1.3 fixture.
//!
//! It also times the full registration lifecycle with nv_peer_mem.ko and
//! with nvidia-peermem (550, else 535) alternately. Only nv_peer_mem's own
//! results decide the run; this module prints information: a scenario x
//! module table, one line per row where nv_peer_mem deliberately differs
//! from nvidia-peermem (`DIFFERENCES`), and the benchmark's figures.

use super::builds::{Doubles, kbuild};
use super::sync::{sync_bytes, sync_file};
use crate::{fixtures, workspace};
use anyhow::{Context, Result, bail};
use flate2::read::GzDecoder;
use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Mellanox's nv_peer_memory 1.3 source tarball (a fixture).
pub const MELLANOX_TARBALL: &str = "nv_peer_memory-1.3.tar.gz";

/// The other clients, in the order the guest runs them: (module name, which
/// is also the name the upstream source is built under, column label).
pub const ORACLES: [(&str, &str); 3] = [
    ("nvidia_peermem_535", "nvidia-peermem 535"),
    ("nvidia_peermem_550", "nvidia-peermem 550"),
    ("mellanox_nv_peer_mem_1_3", "mellanox 1.3"),
];

/// The scenarios the guest runs against each other client (the names of
/// nv_peer_mem's own scenarios in console::SCENARIOS), in table order.
/// Kept equal to what oracle/guest.sh reports by a test.
pub const ORACLE_SCENARIOS: &[&str] = &[
    "register",
    "acquire",
    "lifecycle",
    "several",
    "dma_map_refusals",
    "invalidate",
    "nc",
    "inject",
    "race",
    "rmmod_busy",
    "unregister",
    "legacy",
    "invalidate_legacy",
    "peerdirect_invalid",
    "free_during_get",
];

/// Why nv_peer_mem's result deliberately differs from nvidia-peermem's in a
/// row of the table: (scenario, reason). The reasons are design facts of
/// this module (docs/testing.md, kmod/tests/vm/README.md); a test keeps
/// every scenario named here in ORACLE_SCENARIOS.
pub const DIFFERENCES: &[(&str, &str)] = &[
    (
        "acquire",
        "ours refuses a range whose end overflows (near the top of the address space) without asking nvidia.ko; nvidia-peermem's rounded end wraps and it asks the driver for the wrapped range",
    ),
    (
        "race",
        "ours' release waits for a free callback still inside the core's invalidation (peer_mem.c: release can run concurrently with invalidate); nvidia-peermem frees its context meanwhile and its callback then writes callback_task = NULL into freed memory (slub: Poison overwritten)",
    ),
    (
        "legacy",
        "ours registers peerdirect_support=1 as an old-style client (version[15]=0, what MLNX_OFED 4.9's core reads); nvidia-peermem sets the new-style byte with ex_size 0, which MOFED 25.10 also treats as legacy, so only the registration bytes differ",
    ),
    (
        "free_during_get",
        "ours calls nvidia_p2p_free_page_table from a free callback that arrives before dma_map, as the double requires (a no-op in 535's driver); nvidia-peermem returns early ('invalid dma_mapping') without it: flagged by the double, harmless on 535",
    ),
];

/// One other client as prepared for the guest: its module, or why its
/// column is skipped.
pub struct Prepared {
    pub name: &'static str,
    pub label: &'static str,
    pub ko: std::result::Result<PathBuf, String>,
}

/// What the oracle phase needs in the initramfs.
pub struct Plan {
    pub oracles: Vec<Prepared>,
    /// nvpm_bench.ko, or why the benchmark cannot run.
    pub bench_ko: std::result::Result<PathBuf, String>,
    /// The nvidia-peermem the benchmark compares with: (name, label).
    pub bench_reference: Option<(&'static str, &'static str)>,
}

impl Plan {
    /// (source, path inside the initramfs) of every file the guest's oracle
    /// phase reads, plus the files naming the modules to run.
    pub fn files(&self, work: &Path) -> Result<Vec<(PathBuf, String)>> {
        let dir = work.join("oracle");
        fs::create_dir_all(&dir)?;
        let mut files = vec![(
            workspace::path("kmod/tests/vm/oracle/guest.sh"),
            "lib/nvpm/oracle/guest.sh".to_string(),
        )];
        let mut names = String::new();
        for o in &self.oracles {
            if let Ok(ko) = &o.ko {
                files.push((ko.clone(), format!("lib/nvpm/oracle/{}.ko", o.name)));
                names.push_str(o.name);
                names.push('\n');
            }
        }
        sync_bytes(&dir.join("modules"), names.as_bytes())?;
        files.push((dir.join("modules"), "lib/nvpm/oracle/modules".to_string()));
        if let (Ok(ko), Some((name, _))) = (&self.bench_ko, self.bench_reference) {
            files.push((ko.clone(), "lib/nvpm/nvpm_bench.ko".to_string()));
            sync_bytes(&dir.join("bench_reference"), format!("{name}\n").as_bytes())?;
            files.push((
                dir.join("bench_reference"),
                "lib/nvpm/oracle/bench_reference".to_string(),
            ));
        }
        Ok(files)
    }
}

/// Builds every other client and the benchmark module for @kver. Nothing
/// here fails the run: a client that cannot be fetched or built becomes a
/// skipped column with the reason.
pub fn prepare(kver: &str, kdir: &Path, work: &Path, d: &Doubles, nv_535: &Path) -> Plan {
    let nv_550 = fetch_550();
    let mellanox = fixtures::file(MELLANOX_TARBALL);
    let mut oracles = Vec::new();
    for (name, label) in ORACLES {
        let source = match name {
            "nvidia_peermem_535" => Ok(NvidiaTree(nv_535.to_path_buf())),
            "nvidia_peermem_550" => nv_550.clone().map(NvidiaTree),
            _ => Err(String::new()),
        };
        let ko = if name.starts_with("nvidia_peermem") {
            source.and_then(|tree| {
                build_nvidia_peermem(kver, kdir, work, d, name, &tree.0)
                    .map_err(|e| format!("build failed: {e:#}"))
            })
        } else {
            mellanox.clone().and_then(|tarball| {
                build_mellanox(kver, kdir, work, d, name, &tarball, nv_535)
                    .map_err(|e| format!("build failed: {e:#}"))
            })
        };
        oracles.push(Prepared { name, label, ko });
    }
    let bench_reference = ["nvidia_peermem_550", "nvidia_peermem_535"]
        .iter()
        .find_map(|want| {
            oracles
                .iter()
                .find(|o| o.name == *want && o.ko.is_ok())
                .map(|o| (o.name, o.label))
        });
    let bench_ko = build_bench(kver, kdir, d).map_err(|e| format!("build failed: {e:#}"));
    Plan {
        oracles,
        bench_ko,
        bench_reference,
    }
}

/// An unpacked nvidia-open-kernel-dkms source tree (holds nvidia/nv-p2p.h
/// and nvidia-peermem/nvidia-peermem.c).
struct NvidiaTree(PathBuf);

/// NVIDIA 550 from trixie contrib, through a private apt state (never the
/// host's sources): ci/fetch-nvidia-p2p.sh, cached.
fn fetch_550() -> std::result::Result<PathBuf, String> {
    let out = Command::new("bash")
        .args(["ci/fetch-nvidia-p2p.sh", "trixie"])
        .current_dir(workspace::root())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run ci/fetch-nvidia-p2p.sh: {e}"))?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && dir.join("nvidia-peermem/nvidia-peermem.c").is_file() {
        Ok(dir)
    } else {
        Err("ci/fetch-nvidia-p2p.sh trixie did not provide nvidia-peermem/nvidia-peermem.c (trixie contrib unreachable?)".to_string())
    }
}

/// The driver version of an unpacked tree, from its directory name
/// (usr/src/nvidia-current-open-535.261.03 -> 535.261.03): NVIDIA's build
/// passes it to nvidia-peermem.c as NV_VERSION_STRING.
fn nvidia_version(tree: &Path) -> Result<String> {
    let name = tree
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.rsplit_once('-') {
        Some((_, v)) if v.chars().next().is_some_and(|c| c.is_ascii_digit()) => Ok(v.to_string()),
        _ => bail!("cannot read the driver version from {}", tree.display()),
    }
}

/// Lays out @work/oracle/@name (Kbuild and shim/ from kmod/tests/vm/oracle,
/// the upstream source as @name.c) and runs Kbuild there.
/// One other client's build: its name, upstream source, the directory of
/// the nv-p2p.h it is built against, and extra compiler flags.
struct OracleSource<'a> {
    name: &'a str,
    source: &'a [u8],
    nv_inc: &'a Path,
    cflags: &'a str,
}

fn build_oracle(
    kver: &str,
    kdir: &Path,
    work: &Path,
    d: &Doubles,
    o: &OracleSource,
) -> Result<PathBuf> {
    let OracleSource {
        name,
        source,
        nv_inc,
        cflags,
    } = *o;
    let dir = work.join("oracle").join(name);
    let ours = workspace::path("kmod/tests/vm/oracle");
    sync_file(&ours.join("Kbuild"), &dir.join("Kbuild"))?;
    sync_file(&ours.join("shim/conftest.h"), &dir.join("shim/conftest.h"))?;
    sync_bytes(&dir.join(format!("{name}.c")), source)?;
    kbuild(
        kdir,
        &dir,
        &[
            ("NVPM_ORACLE", name.to_string()),
            ("NVPM_NV_INC", nv_inc.display().to_string()),
            (
                "NVPM_OFA_INC",
                d.ofa_dir.join("include").display().to_string(),
            ),
            ("NVPM_ORACLE_CFLAGS", cflags.to_string()),
            ("KBUILD_EXTRA_SYMBOLS", d.extra_symbols()),
        ],
        &format!("building {name}.ko for {kver}"),
    )?;
    Ok(dir.join(format!("{name}.ko")))
}

fn build_nvidia_peermem(
    kver: &str,
    kdir: &Path,
    work: &Path,
    d: &Doubles,
    name: &str,
    tree: &Path,
) -> Result<PathBuf> {
    let file = tree.join("nvidia-peermem/nvidia-peermem.c");
    let source = fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let version = nvidia_version(tree)?;
    build_oracle(
        kver,
        kdir,
        work,
        d,
        &OracleSource {
            name,
            source: &source,
            nv_inc: &tree.join("nvidia"),
            cflags: &format!("-DNV_VERSION_STRING=\\\"{version}\\\""),
        },
    )
}

/// Mellanox 1.3 against the NVIDIA double's own nv-p2p.h (535's).
fn build_mellanox(
    kver: &str,
    kdir: &Path,
    work: &Path,
    d: &Doubles,
    name: &str,
    tarball: &Path,
    nv_535: &Path,
) -> Result<PathBuf> {
    let source = file_from_tarball(tarball, "nv_peer_mem.c")?;
    build_oracle(
        kver,
        kdir,
        work,
        d,
        &OracleSource {
            name,
            source: &source,
            nv_inc: &nv_535.join("nvidia"),
            cflags: "",
        },
    )
}

/// The bytes of the file called @file_name directly below the tarball's
/// top directory.
fn file_from_tarball(tarball: &Path, file_name: &str) -> Result<Vec<u8>> {
    let file = fs::File::open(tarball).with_context(|| format!("opening {}", tarball.display()))?;
    let mut archive = tar::Archive::new(GzDecoder::new(file));
    for entry in archive
        .entries()
        .with_context(|| format!("reading {}", tarball.display()))?
    {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        if path.components().count() == 2 && path.file_name() == Some(file_name.as_ref()) {
            let mut data = Vec::new();
            entry.read_to_end(&mut data)?;
            return Ok(data);
        }
    }
    bail!("{} holds no */{file_name}", tarball.display())
}

fn build_bench(kver: &str, kdir: &Path, d: &Doubles) -> Result<PathBuf> {
    let dir = d.src_dir.join("oracle/bench");
    kbuild(
        kdir,
        &dir,
        &[
            ("NVPM_NV_INC", d.nv_dir.join("nvidia").display().to_string()),
            (
                "NVPM_OFA_INC",
                d.ofa_dir.join("include").display().to_string(),
            ),
            ("KBUILD_EXTRA_SYMBOLS", d.extra_symbols()),
        ],
        &format!("building nvpm_bench.ko for {kver}"),
    )?;
    Ok(dir.join("nvpm_bench.ko"))
}

// ------------------------------------------------------------ the console

/// One cell of the table.
#[derive(Clone, Debug, PartialEq)]
enum Cell {
    Pass,
    Fail(String),
}

/// One benchmark round: (pages, iterations, total ns, client that claimed).
type BenchRound = (u64, u64, u64, String);

/// What the oracle phase of one guest printed.
#[derive(Default)]
pub struct Observed {
    /// (module, scenario) -> result
    cells: BTreeMap<(String, String), Cell>,
    /// module -> why it could not be loaded or unloaded
    module_failures: BTreeMap<String, String>,
    /// (module, case) -> the rounds
    bench: BTreeMap<(String, String), Vec<BenchRound>>,
    bench_failures: Vec<String>,
    /// the scenario running now, for a splat
    running: Option<(String, String)>,
    stop: Option<String>,
}

impl Observed {
    /// Takes one console line of the oracle phase.
    pub fn line(&mut self, line: &str, splat: bool) {
        if let Some(rest) = after(line, "NVPMORACLE-RUN ") {
            if let Some((m, s)) = rest.split_once(' ') {
                self.running = Some((m.to_string(), s.trim().to_string()));
            }
        } else if let Some(rest) = after(line, "NVPMORACLE-MODULE ") {
            if let Some((m, why)) = rest.split_once(' ') {
                self.module_failures
                    .entry(m.to_string())
                    .or_insert_with(|| why.trim_start_matches("FAIL: ").to_string());
            }
        } else if let Some(rest) = after(line, "NVPMORACLE-STOP ") {
            self.stop = Some(rest.trim().to_string());
        } else if let Some(rest) = after(line, "NVPMORACLE ") {
            if let Some((module, pass, scenario, detail)) = parse_oracle_result(rest) {
                let key = (module, scenario);
                // a splat already failed this cell: keep that
                if !matches!(self.cells.get(&key), Some(Cell::Fail(_))) {
                    let cell = if pass { Cell::Pass } else { Cell::Fail(detail) };
                    self.cells.insert(key, cell);
                }
                self.running = None;
            }
        } else if let Some(rest) = after(line, "NVPMBENCH-FAIL ") {
            self.bench_failures.push(rest.trim().to_string());
        } else if let Some(rest) = after(line, "NVPMBENCH ") {
            let f: Vec<&str> = rest.split_whitespace().collect();
            if let [module, case, pages, iters, ns, client] = f[..]
                && let (Ok(p), Ok(i), Ok(n)) = (pages.parse(), iters.parse(), ns.parse())
            {
                self.bench
                    .entry((module.to_string(), case.to_string()))
                    .or_default()
                    .push((p, i, n, client.to_string()));
            }
        } else if splat && let Some(key) = self.running.clone() {
            self.cells
                .entry(key)
                .or_insert_with(|| Cell::Fail(format!("kernel splat: {}", line.trim())));
        }
    }

    /// The guest stopped (crash, or the host's bound) during the oracle
    /// phase: @why, for the cells that never reported.
    pub fn stopped(&mut self, why: String) {
        if let Some(key) = self.running.take() {
            self.cells
                .entry(key)
                .or_insert_with(|| Cell::Fail(format!("guest died here: {why}")));
        }
        self.stop.get_or_insert(why);
    }
}

fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|i| &line[i + marker.len()..])
}

/// "<module> PASS|FAIL <scenario>: <detail>"
fn parse_oracle_result(rest: &str) -> Option<(String, bool, String, String)> {
    let mut it = rest.splitn(3, ' ');
    let module = it.next()?.to_string();
    let pass = match it.next()? {
        "PASS" => true,
        "FAIL" => false,
        _ => return None,
    };
    let (scenario, detail) = it.next()?.split_once(": ").unwrap_or((rest, ""));
    Some((
        module,
        pass,
        scenario.trim().to_string(),
        detail.trim().to_string(),
    ))
}

// ------------------------------------------------------------ the report

/// Prints the scenario x module table, the reasons for deliberate
/// differences and the benchmark. @ours: nv_peer_mem's results by scenario.
pub fn report(kver: &str, plan: &Plan, ours: &BTreeMap<String, bool>, seen: &Observed) {
    println!("  [{kver}] differential oracle (information; only ours decides the run):");
    for o in &plan.oracles {
        if let Err(why) = &o.ko {
            let why = if why.is_empty() {
                "no source".to_string()
            } else {
                why.lines().next().unwrap_or("").to_string()
            };
            println!("    {}: skipped: {why}", o.label);
        } else if let Some(why) = seen.module_failures.get(o.name) {
            println!("    {}: {why}", o.label);
        }
    }
    match &seen.stop {
        Some(stop) if stop != "done" => println!("    oracle phase stopped early: {stop}"),
        Some(_) => {}
        None => println!("    oracle phase did not report (see the console log)"),
    }
    let mut header = format!("    {:<20} {:<6}", "scenario", "ours");
    for o in &plan.oracles {
        header.push_str(&format!(" {:<20}", o.label));
    }
    println!("{header}");
    for scenario in ORACLE_SCENARIOS {
        let mut row = format!(
            "    {:<20} {:<6}",
            scenario,
            match ours.get(*scenario) {
                Some(true) => "pass",
                Some(false) => "FAIL",
                None => "n.a.",
            }
        );
        for o in &plan.oracles {
            let cell = match (
                &o.ko,
                seen.cells.get(&(o.name.to_string(), scenario.to_string())),
            ) {
                (Err(_), _) => "skipped",
                (Ok(_), Some(Cell::Pass)) => "pass",
                (Ok(_), Some(Cell::Fail(_))) => "fail",
                (Ok(_), None) => "n.a.",
            };
            row.push_str(&format!(" {cell:<20}"));
        }
        println!("{row}");
    }
    for o in &plan.oracles {
        for scenario in ORACLE_SCENARIOS {
            if let Some(Cell::Fail(why)) =
                seen.cells.get(&(o.name.to_string(), scenario.to_string()))
            {
                println!("    {} {scenario}: {why}", o.label);
            }
        }
    }
    println!("  [{kver}] where ours deliberately differs from nvidia-peermem:");
    for (scenario, why) in DIFFERENCES {
        println!("    {scenario}: {why}");
    }
    for scenario in ORACLE_SCENARIOS {
        let ours_passed = ours.get(*scenario).copied();
        let differs = plan
            .oracles
            .iter()
            .filter(|o| o.name.starts_with("nvidia_peermem") && o.ko.is_ok())
            .filter_map(|o| seen.cells.get(&(o.name.to_string(), scenario.to_string())))
            .any(|cell| Some(*cell == Cell::Pass) != ours_passed);
        if differs && !DIFFERENCES.iter().any(|(s, _)| s == scenario) {
            println!(
                "    {scenario}: ours and nvidia-peermem differ, and DIFFERENCES (xtask/src/vm/oracle.rs) gives no reason"
            );
        }
    }
    report_bench(kver, plan, seen);
}

/// The fastest round of (module, case): (ns per registration, pages,
/// client, slowest round's ns per registration). Noise on a shared host
/// only slows a round down, so the fastest is the estimate; the slowest
/// shows how noisy the rounds were.
fn best(seen: &Observed, module: &str, case: &str) -> Option<(f64, u64, String, f64)> {
    let rounds: Vec<(f64, u64, String)> = seen
        .bench
        .get(&(module.to_string(), case.to_string()))?
        .iter()
        .filter(|(_, iters, _, _)| *iters > 0)
        .map(|(pages, iters, ns, client)| (*ns as f64 / *iters as f64, *pages, client.clone()))
        .collect();
    let slowest = rounds.iter().map(|r| r.0).fold(0.0, f64::max);
    let (ns, pages, client) = rounds.into_iter().min_by(|a, b| a.0.total_cmp(&b.0))?;
    Some((ns, pages, client, slowest))
}

fn report_bench(kver: &str, plan: &Plan, seen: &Observed) {
    let Some((reference, label)) = plan.bench_reference else {
        println!("  [{kver}] benchmark: skipped: no nvidia-peermem (550 or 535) was built");
        return;
    };
    if let Err(why) = &plan.bench_ko {
        println!("  [{kver}] benchmark: skipped: nvpm_bench.ko {why}");
        return;
    }
    println!(
        "  [{kver}] benchmark: full registration lifecycle through the real core (get_pages, dma_map, activate, stop, dma_unmap, put_pages, release), fastest of 5 alternating rounds; figures include the core and doubles, under TCG with slub_debug:"
    );
    println!(
        "    {:<22} {:>14} {:>12} {:>16} {:>12} {:>12}  goal ours <= 1.0x",
        "range", "ours ns/reg", "ours ns/page", "nvidia ns/reg", "nvidia ns/pg", "ours/nvidia"
    );
    for (case, what) in [
        ("small", "2 pages (128 KiB)"),
        ("1GiB", "1 GiB (16384 pages)"),
    ] {
        match (best(seen, "nv_peer_mem", case), best(seen, reference, case)) {
            (Some((ours, pages, oc, ours_slow)), Some((theirs, _, tc, theirs_slow))) => {
                let ratio = ours / theirs;
                println!(
                    "    {:<22} {:>14.0} {:>12.1} {:>16.0} {:>12.1} {:>11.2}x  {} (clients {oc} / {tc}; slowest rounds {:.0} / {:.0} ns/reg)",
                    what,
                    ours,
                    ours / pages as f64,
                    theirs,
                    theirs / pages as f64,
                    ratio,
                    if ratio <= 1.0 { "met" } else { "NOT met" },
                    ours_slow,
                    theirs_slow
                );
            }
            _ => println!("    {what:<22} no figures (see NVPMBENCH lines in the console log)"),
        }
    }
    println!("    (reference: {label})");
    for f in &seen.bench_failures {
        println!("    benchmark failure: {f}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scenario names guest.sh reports for the other clients.
    fn guest_scenarios() -> Vec<String> {
        let text = fs::read_to_string(workspace::path("kmod/tests/vm/oracle/guest.sh"))
            .expect("kmod/tests/vm/oracle/guest.sh");
        let mut names = Vec::new();
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let name = match words[..] {
                ["o_scenario", _, _, name, ..] => name,
                ["o_report", _, _, name, ..] if !name.starts_with('"') => name,
                _ => continue,
            };
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
        names
    }

    #[test]
    fn oracle_scenarios_are_the_guests_and_ours() {
        let mut from_guest = guest_scenarios();
        from_guest.sort();
        let mut listed: Vec<String> = ORACLE_SCENARIOS.iter().map(|s| s.to_string()).collect();
        listed.sort();
        assert_eq!(from_guest, listed, "ORACLE_SCENARIOS vs oracle/guest.sh");
        for s in ORACLE_SCENARIOS {
            assert!(
                super::super::console::SCENARIOS.contains(s),
                "{s} is not one of nv_peer_mem's scenarios (console::SCENARIOS)"
            );
        }
    }

    #[test]
    fn every_difference_names_an_oracle_scenario_once() {
        for (i, (s, why)) in DIFFERENCES.iter().enumerate() {
            assert!(
                ORACLE_SCENARIOS.contains(s),
                "DIFFERENCES names {s}, not run against the others"
            );
            assert!(!why.is_empty());
            assert!(!DIFFERENCES[..i].iter().any(|(t, _)| t == s), "{s} twice");
        }
    }

    #[test]
    fn parses_oracle_lines_and_attributes_splats() {
        let mut o = Observed::default();
        o.line("NVPMORACLE-RUN m1 lifecycle", false);
        o.line("[ 1.0] WARNING: CPU: 0 PID: 1 at x", true);
        o.line("NVPMORACLE m1 PASS lifecycle: ok", false);
        o.line("NVPMORACLE m1 FAIL race: iteration 3: boom", false);
        o.line("NVPMBENCH m1 small 2 10 1000 nv_mem", false);
        o.line("NVPMBENCH m1 small 2 10 800 nv_mem", false);
        assert!(matches!(
            o.cells.get(&("m1".into(), "lifecycle".into())),
            Some(Cell::Fail(w)) if w.contains("WARNING")
        ));
        assert_eq!(
            o.cells.get(&("m1".into(), "race".into())),
            Some(&Cell::Fail("iteration 3: boom".into()))
        );
        assert_eq!(best(&o, "m1", "small").map(|b| b.0), Some(80.0));
        o.line("NVPMORACLE-RUN m1 free_during_get", false);
        o.stopped("crash".into());
        assert!(matches!(
            o.cells.get(&("m1".into(), "free_during_get".into())),
            Some(Cell::Fail(_))
        ));
    }

    #[test]
    fn reads_driver_versions_from_tree_names() {
        assert_eq!(
            nvidia_version(Path::new("/x/usr/src/nvidia-current-open-535.261.03")).unwrap(),
            "535.261.03"
        );
        assert!(nvidia_version(Path::new("/x/usr/src/nvidia")).is_err());
    }
}
