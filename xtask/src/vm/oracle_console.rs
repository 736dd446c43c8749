//! The console of test-vm's oracle phase (kmod/tests/vm/oracle/guest.sh):
//! every line after NVPMTEST-ORACLE-BEGIN, collected per other client and
//! scenario, with benchmark rounds, for oracle_report.rs.

use std::collections::BTreeMap;

/// One cell of the table.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Cell {
    Pass,
    Fail(String),
}

/// One benchmark round: (pages, iterations, total ns, client that claimed).
pub(super) type BenchRound = (u64, u64, u64, String);

/// What the oracle phase of one guest printed.
#[derive(Default)]
pub struct Observed {
    /// (module, scenario) -> result
    pub(super) cells: BTreeMap<(String, String), Cell>,
    /// module -> why it could not be loaded or unloaded
    pub(super) module_failures: BTreeMap<String, String>,
    /// (module, case) -> the rounds
    pub(super) bench: BTreeMap<(String, String), Vec<BenchRound>>,
    pub(super) bench_failures: Vec<String>,
    /// the scenario running now, for a splat
    running: Option<(String, String)>,
    pub(super) stop: Option<String>,
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            o.bench.get(&("m1".to_string(), "small".to_string())),
            Some(&vec![
                (2, 10, 1000, "nv_mem".to_string()),
                (2, 10, 800, "nv_mem".to_string())
            ])
        );
        o.line("NVPMORACLE-RUN m1 free_during_get", false);
        o.stopped("crash".into());
        assert!(matches!(
            o.cells.get(&("m1".into(), "free_during_get".into())),
            Some(Cell::Fail(_))
        ));
    }
}
