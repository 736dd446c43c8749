//! Reading a guest's serial console: which scenarios passed or failed, when
//! the guest booted and finished, and kernel splats anywhere in between.
//! The guest's init script prints `NVPMTEST-BOOTED`, one
//! `NVPMTEST PASS|FAIL <scenario>: <detail>` line per scenario,
//! `NVPMTEST-SUMMARY ...` and `NVPMTEST-END`.

use super::oracle_console::Observed;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Scenarios the guest's init script reports, in order. One that never
/// prints a line (guest crashed, hung, init broke) counts as failed.
pub const SCENARIOS: &[&str] = &[
    "load",
    "memory_peers",
    "register",
    "acquire",
    "lifecycle",
    "several",
    "dma_map_refusals",
    "page_table_version",
    "invalidate",
    "peer_counters",
    "free_during_get",
    "nc",
    "inject",
    "race",
    "stale_page_table",
    "bench",
    "no_slab_growth",
    "rmmod_busy",
    "memory_peers_unload",
    "memory_peers_taken",
    "late_callback",
    "unregister",
    "load_cycles",
    "persistent_default",
    "nc_as_nv_mem",
    "no_persistent_api",
    "legacy",
    "invalidate_legacy",
    "peerdirect_invalid",
    "persistent_api_invalid",
    "register_rollback",
    "final",
    "memory_peers_reload",
];

/// Console text that fails a run wherever it appears: kernel warnings,
/// oopses, module loader complaints, refcount/lockdep splats, SLUB debug
/// reports (slub_debug=FZP makes double frees and use-after-free writes
/// print "BUG <cache> (...): Object already free / Poison overwritten").
pub const SPLATS: &[&str] = &[
    "WARNING:",
    "BUG:",
    "kernel BUG",
    "Oops",
    "Unknown symbol",
    "disagrees about version",
    "refcount_t:",
    "lockdep",
    "possible circular locking",
    "possible recursive locking",
    "Kernel panic",
    "general protection fault",
    "Call Trace:",
    "INFO: task",
    "Object already free",
    "Poison overwritten",
    "Redzone overwritten",
    "Freepointer corrupt",
];

/// One kernel's count: every scenario plus the console as a whole.
pub struct Outcome {
    pub passed: usize,
    pub failed: usize,
    /// nv_peer_mem's result per scenario, and what the oracle phase after
    /// them printed (oracle.rs): information, not part of the count.
    pub ours: BTreeMap<String, bool>,
    pub oracle: Observed,
    /// Kernel reports (WARNING, BUG, Oops, ...) seen on the console.
    pub splats: usize,
    /// The host stopped the guest (a bound hit, or its first failure);
    /// false when it ended by itself, finished or crashed.
    pub stopped_by_host: bool,
}

impl Outcome {
    /// The scenarios that said FAIL, or the console check when none did
    /// but the run failed: a kernel report (splat, oops) or a hang (the host's
    /// bound). Err when the guest just stopped with neither: no verdict.
    pub fn evidence(&self) -> Result<Vec<String>, String> {
        // The guest stops at its first failure (RunTo::FirstFailure): the
        // scenarios after it never ran, so only those that said FAIL are named.
        let mut names: Vec<String> = SCENARIOS
            .iter()
            .filter(|n| self.ours.get(**n) == Some(&false))
            .map(|n| n.to_string())
            .collect();
        if names.is_empty() && self.failed > 0 {
            if self.splats > 0 {
                names.push("console (kernel report)".to_string());
            } else if self.stopped_by_host {
                names.push("console (hang: the host's bound)".to_string());
            } else {
                return Err(
                    "the guest stopped with no FAIL line and no kernel report (QEMU or the guest died; no verdict)"
                        .to_string(),
                );
            }
        }
        Ok(names)
    }

    /// Every scenario failed before the guest ran (a setup failure).
    pub fn setup_failed() -> Self {
        Outcome {
            passed: 0,
            failed: SCENARIOS.len(),
            ours: BTreeMap::new(),
            oracle: Observed::default(),
            splats: 0,
            stopped_by_host: false,
        }
    }
}

/// What one guest's console said so far.
pub struct Console {
    kver: String,
    /// The checks the guest must report, in order.
    expected: Vec<String>,
    booted: bool,
    ended: bool,
    results: BTreeMap<String, (bool, String)>,
    splats: Vec<String>,
    last_scenario: String,
    guest_summary: Option<String>,
    /// past NVPMTEST-ORACLE-BEGIN: nv_peer_mem's part is over, what
    /// follows goes to the oracle (kmod/tests/vm/oracle/guest.sh)
    in_oracle: bool,
    /// the oracle phase printed NVPMTEST-END too
    guest_finished: bool,
    oracle: Observed,
}

impl Console {
    /// A console that expects test-vm's SCENARIOS.
    pub fn new(kver: &str) -> Self {
        Self::expecting(kver, SCENARIOS.iter().map(|s| s.to_string()).collect())
    }

    /// A console that expects the checks @expected (a booted image's).
    pub fn expecting(kver: &str, expected: Vec<String>) -> Self {
        Console {
            kver: kver.to_string(),
            expected,
            booted: false,
            ended: false,
            results: BTreeMap::new(),
            splats: Vec::new(),
            last_scenario: String::from("boot"),
            guest_summary: None,
            in_oracle: false,
            guest_finished: false,
            oracle: Observed::default(),
        }
    }

    /// The kernel (or label) this console belongs to.
    pub fn kver(&self) -> &str {
        &self.kver
    }

    /// The guest's init has started (the boot bound no longer applies).
    pub fn booted(&self) -> bool {
        self.booted
    }

    /// A scenario reported FAIL or the kernel splatted: enough to kill a
    /// mutant (mutants.rs stops such a guest there).
    pub fn failed_already(&self) -> bool {
        !self.splats.is_empty() || self.results.values().any(|(pass, _)| !pass)
    }

    /// The last scenario that reported, or "boot".
    pub fn last_scenario(&self) -> &str {
        &self.last_scenario
    }

    /// Takes one console line, @elapsed after QEMU started, and prints what
    /// it means for the run.
    pub fn line(&mut self, line: &str, elapsed: Duration) {
        let kver = &self.kver;
        if self.in_oracle || line.contains("NVPMTEST-ORACLE-BEGIN") {
            if !self.in_oracle {
                println!(
                    "  [{kver}] nv_peer_mem's scenarios done at {:.1} s; benchmark and differential oracle follow",
                    elapsed.as_secs_f64()
                );
            }
            // nv_peer_mem's part ended cleanly; a crash or splat from here
            // on belongs to another client.
            self.in_oracle = true;
            self.ended = true;
            self.guest_finished |= line.contains("NVPMTEST-END");
            if let Some(i) = line.find("NVPMORACLE-RUN ") {
                // for the host's "still running after ..." notices
                self.last_scenario = format!("oracle: {}", &line[i + "NVPMORACLE-RUN ".len()..]);
            }
            let splat = SPLATS.iter().any(|s| line.contains(s));
            self.oracle.line(line, splat);
            return;
        }
        if line.contains("NVPMTEST-BOOTED") {
            self.booted = true;
            println!(
                "  [{kver}] booted in {:.1} s: {}",
                elapsed.as_secs_f64(),
                line.split("NVPMTEST-BOOTED").nth(1).unwrap_or("").trim()
            );
        } else if let Some(rest) = line.split("NVPMTEST-SUMMARY ").nth(1) {
            self.guest_summary = Some(rest.trim().to_string());
        } else if line.contains("NVPMTEST-END") {
            self.ended = true;
        } else if let Some((pass, name, detail)) = parse_result(line) {
            // [kver]: --mutants boots two guests at once (mutants.rs)
            println!(
                "  [{kver}] {} {name}: {detail}",
                if pass { "PASS" } else { "FAIL" }
            );
            self.last_scenario = name.clone();
            self.results.insert(name, (pass, detail));
        }
        if !line.contains("NVPMTEST ") && SPLATS.iter().any(|s| line.contains(s)) {
            if self.splats.is_empty() {
                // Scenario lines print when a scenario ends: a splat
                // belongs to the one after the last reported.
                let during = self
                    .expected
                    .iter()
                    .position(|s| *s == self.last_scenario)
                    .and_then(|i| self.expected.get(i + 1))
                    .map(String::as_str)
                    .unwrap_or("boot");
                println!("  [{kver}] kernel splat during \"{during}\": {line}");
                self.splats.push(format!("(during \"{during}\") {line}"));
                return;
            }
            self.splats.push(line.to_string());
        }
    }

    /// The count once the guest is gone: @failure is why the run stopped
    /// early (a bound hit), if it did; a guest that never printed
    /// NVPMTEST-END crashed. Prints one line per failed or missing scenario
    /// and the console check.
    pub fn verdict(mut self, mut failure: Option<String>, log_path: &Path) -> Outcome {
        let stopped_by_host = failure.is_some();
        if self.in_oracle {
            // The guest stopped during the oracle phase: not ours.
            if let Some(f) = failure.take() {
                self.oracle.stopped(f);
            } else if !self.guest_finished {
                self.oracle.stopped(format!(
                    "guest stopped (crash or panic), see {}",
                    log_path.display()
                ));
            }
        }
        if failure.is_none() && !self.ended {
            failure = Some(format!(
                "guest stopped before finishing (after \"{}\"): crash or panic, see {}",
                self.last_scenario,
                log_path.display()
            ));
        }
        let mut passed = 0;
        let mut failed = 0;
        for name in &self.expected {
            match self.results.get(name) {
                Some((true, _)) => passed += 1,
                Some((false, _)) => failed += 1,
                None => {
                    failed += 1;
                    println!(
                        "  [{}] FAIL {name}: did not run{}",
                        self.kver,
                        failure
                            .as_ref()
                            .map(|f| format!(" ({f})"))
                            .unwrap_or_default()
                    );
                }
            }
        }
        for (name, _) in self
            .results
            .iter()
            .filter(|(n, _)| !self.expected.contains(n))
        {
            println!("  note: the guest reported an unlisted scenario \"{name}\"");
        }
        // The console as a whole is one more check.
        if self.splats.is_empty() && failure.is_none() {
            passed += 1;
            println!(
                "  PASS console: no WARNING/BUG/Oops/Unknown symbol/version/refcount/lockdep/slub report"
            );
        } else {
            failed += 1;
            if let Some(f) = &failure {
                println!("  FAIL console: {f}");
            }
            for s in self.splats.iter().take(5) {
                println!("  FAIL console: {s}");
            }
            if self.splats.len() > 5 {
                println!(
                    "  FAIL console: ... {} more splat lines in {}",
                    self.splats.len() - 5,
                    log_path.display()
                );
            }
        }
        if let Some(s) = &self.guest_summary {
            println!("  [{}] guest's own count: {s}", self.kver);
        }
        let ours = self
            .results
            .iter()
            .map(|(name, (pass, _))| (name.clone(), *pass))
            .collect();
        Outcome {
            passed,
            failed,
            ours,
            oracle: self.oracle,
            splats: self.splats.len(),
            stopped_by_host,
        }
    }
}

/// "NVPMTEST PASS name: detail" (possibly after other console text).
fn parse_result(line: &str) -> Option<(bool, String, String)> {
    let rest = &line[line.find("NVPMTEST ")? + "NVPMTEST ".len()..];
    let (verdict, rest) = rest.split_once(' ')?;
    let pass = match verdict {
        "PASS" => true,
        "FAIL" => false,
        _ => return None,
    };
    let (name, detail) = rest.split_once(": ").unwrap_or((rest, ""));
    Some((pass, name.trim().to_string(), detail.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::parse_result;

    #[test]
    fn parses_scenario_lines() {
        assert_eq!(
            parse_result("NVPMTEST PASS acquire: mine/not mine"),
            Some((true, "acquire".into(), "mine/not mine".into()))
        );
        assert_eq!(
            parse_result("[   3.1] x NVPMTEST FAIL race: iteration 3: boom"),
            Some((false, "race".into(), "iteration 3: boom".into()))
        );
        assert_eq!(parse_result("NVPMTEST-END"), None);
        assert_eq!(parse_result("nothing"), None);
    }
}
