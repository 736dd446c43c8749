//! What test-vm prints after a guest's oracle phase: the scenario x module
//! table, why ours deliberately differs from nvidia-peermem, and the
//! benchmark's figures with the ratio ours/nvidia (oracle.rs says what runs).

use super::oracle::{DIFFERENCES, ORACLE_SCENARIOS, Plan};
use super::oracle_console::{Cell, Observed};
use std::collections::BTreeMap;

/// Prints the scenario x module table, the reasons for deliberate
/// differences and the benchmark. @ours: nv_peer_mem's results by scenario.
pub fn report(kver: &str, plan: &Plan, ours: &BTreeMap<String, bool>, seen: &Observed) {
    println!("  [{kver}] differential oracle (information; only ours decides the run):");
    // Ours' column comes from its own scenarios, which load it with
    // persistent_api_support=0 (the default 1 registers the persistent
    // client alone): the same two clients 535/550 always register.
    println!(
        "    ours loaded with persistent_api_support=0: nv_mem (invalidating) + nv_mem_nc, as nvidia-peermem 535/550 register and 580/595 with persistent_api_support=0"
    );
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
}

/// The fastest round of (module, case): (instructions per registration,
/// pages, client, slowest round's). Counted instructions do not depend on
/// the host, but a round still depends on the guest's state (warm slab
/// caches, a timer tick landing in it), which only adds: the fastest is
/// the estimate, the slowest shows the spread.
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

pub fn report_bench(kver: &str, plan: &Plan, seen: &Observed) {
    let Some((reference, label)) = plan.bench_reference else {
        println!(
            "  [{kver}] benchmark: skipped: no nvidia-peermem of this boot's driver generation was built (535-style: 550 or 535; 580-style: 595 or 580)"
        );
        return;
    };
    if let Err(why) = &plan.bench_ko {
        println!("  [{kver}] benchmark: skipped: nvpm_bench.ko {why}");
        return;
    }
    println!(
        "  [{kver}] benchmark: full registration lifecycle through the real core (get_pages, dma_map, activate, stop, dma_unmap, put_pages, release), fastest of 5 alternating rounds, in a boot of its own under QEMU -icount (1 virtual ns per guest instruction, so the figures count instructions, whatever the host's load); they include the core and doubles; no slub_debug in this boot:"
    );
    println!(
        "    {:<22} {:>14} {:>12} {:>16} {:>12} {:>12}  goal ours <= 1.0x",
        "range",
        "ours insn/reg",
        "ours insn/pg",
        "nvidia insn/reg",
        "nvidia insn/pg",
        "ours/nvidia"
    );
    for (case, what) in [
        ("small", "2 pages (128 KiB)"),
        ("1GiB", "1 GiB (16384 pages)"),
    ] {
        match (best(seen, "nv_peer_mem", case), best(seen, reference, case)) {
            (Some((ours, pages, oc, ours_slow)), Some((theirs, _, tc, theirs_slow))) => {
                let ratio = ours / theirs;
                println!(
                    "    {:<22} {:>14.0} {:>12.1} {:>16.0} {:>12.1} {:>11.2}x  {} (clients {oc} / {tc}; slowest rounds {:.0} / {:.0} insn/reg)",
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
    println!(
        "    (reference: {label}; like for like: ours loaded with persistent_api_support=0, both through their invalidating nv_mem; persistent vs persistent is not measured: nvidia-peermem 535/550 (580/595 with persistent_api_support=0) register nv_mem first, which claims all GPU memory, so the core never reaches their nv_mem_nc)"
    );
    for f in &seen.bench_failures {
        println!("    benchmark failure: {f}");
    }
}

#[cfg(test)]
mod tests {
    use super::super::oracle::{DIFFERENCES, ORACLE_SCENARIOS};
    use super::super::oracle_console::Observed;
    use super::best;
    use crate::workspace;
    use std::fs;

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
    fn the_fastest_round_is_the_estimate_and_the_slowest_is_shown() {
        let mut o = Observed::default();
        o.line("NVPMBENCH m1 small 2 10 1000 nv_mem", false);
        o.line("NVPMBENCH m1 small 2 10 800 nv_mem", false);
        o.line("NVPMBENCH m2 small 2 10 900 nv_mem", false);
        assert_eq!(
            best(&o, "m1", "small"),
            Some((80.0, 2, "nv_mem".to_string(), 100.0))
        );
        assert_eq!(best(&o, "m1", "1GiB"), None);
    }
}
