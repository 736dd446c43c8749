//! The verdict as Kubernetes node labels: a Node Feature Discovery local
//! feature file (`--nfd DIR`, read by nfd-worker's local source from
//! /etc/kubernetes/node-feature-discovery/features.d/). Its rules, with
//! their sources, are in docs/monitoring.md, "Node Feature Discovery";
//! `validate` holds every label to them before the file is written.

use crate::report::Report;

/// The file's name in the features directory.
pub const FILE_NAME: &str = "gpudirect-rdma";
/// The namespace of every label: NFD's own, allowed by default.
pub const NAMESPACE: &str = "feature.node.kubernetes.io";
/// NFD's limit on one feature file.
pub const MAX_FILE_BYTES: usize = 64 * 1024;

/// The labels, fully qualified, in a fixed order.
pub fn labels(r: &Report) -> Vec<(String, String)> {
    let mut l = vec![
        (
            format!("{NAMESPACE}/gpudirect-rdma.ready"),
            r.ready().to_string(),
        ),
        (
            format!("{NAMESPACE}/gpudirect-rdma.path"),
            r.path.name().to_owned(),
        ),
    ];
    if let Some(p) = r.problems().first() {
        l.push((
            format!("{NAMESPACE}/gpudirect-rdma.problem"),
            p.name().to_owned(),
        ));
    }
    l
}

/// The feature file: the expiry directive (so NFD drops labels a stopped
/// timer no longer renews), then one `name=value` line per label. An
/// error names the label that breaks NFD's rules.
pub fn file(r: &Report, expires_unix: u64) -> Result<String, String> {
    let mut out = format!("# +expiry-time={}\n", rfc3339(expires_unix));
    for (key, value) in labels(r) {
        validate(&key, &value)?;
        out.push_str(&format!("{key}={value}\n"));
    }
    if out.len() > MAX_FILE_BYTES {
        return Err(format!(
            "the feature file is {} bytes, over NFD's {MAX_FILE_BYTES}",
            out.len()
        ));
    }
    Ok(out)
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters:
/// a label's name part and a non-empty label value.
fn is_name(s: &str) -> bool {
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    !s.is_empty()
        && s.len() <= 63
        && ends_ok(s.chars().next())
        && ends_ok(s.chars().last())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A DNS subdomain (RFC 1123): lowercase labels of `[a-z0-9-]` that start
/// and end alphanumeric, joined by dots, at most 253 characters.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part.len() <= 63
                && part.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && part.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

/// NFD's rules for a label it publishes: a qualified key whose prefix is a
/// namespace nfd-master allows without configuration, and a valid label
/// value. Unprefixed keys are refused here although nfd-master still adds
/// its prefix to them: NFD's documentation says not to rely on that.
pub fn validate(key: &str, value: &str) -> Result<(), String> {
    let (prefix, name) = key
        .split_once('/')
        .ok_or_else(|| format!("label {key}: no namespace"))?;
    if !is_dns_subdomain(prefix) || !is_name(name) {
        return Err(format!("label {key}: not a qualified name"));
    }
    // nfd-master refuses kubernetes.io and its subdomains, except its own
    // feature and profile namespaces and their subdomains.
    let own = ["feature.node.kubernetes.io", "profile.node.kubernetes.io"]
        .iter()
        .any(|ns| prefix == *ns || prefix.ends_with(&format!(".{ns}")));
    if (prefix == "kubernetes.io" || prefix.ends_with(".kubernetes.io")) && !own {
        return Err(format!(
            "label {key}: nfd-master does not allow the namespace {prefix}"
        ));
    }
    if !value.is_empty() && !is_name(value) {
        return Err(format!(
            "label {key}: value {value:?} is not a valid label value"
        ));
    }
    Ok(())
}

/// Seconds since the epoch as RFC 3339 UTC (`2026-11-25T22:00:00Z`).
pub fn rfc3339(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registration::Path;
    use crate::report::{Fact, Problem, Status};

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_651_199), "2026-11-25T23:59:59Z");
    }

    #[test]
    fn rules_refuse_what_nfd_refuses() {
        assert!(
            validate(
                "feature.node.kubernetes.io/gpudirect-rdma.path",
                "nv_peer_mem"
            )
            .is_ok()
        );
        assert!(validate("gpu.feature.node.kubernetes.io/x", "true").is_ok());
        assert!(validate("feature.node.kubernetes.io/x", "").is_ok());
        assert!(
            validate("gpudirect-rdma.path", "x").is_err(),
            "no namespace"
        );
        assert!(
            validate("kubernetes.io/x", "y").is_err(),
            "not an allowed namespace"
        );
        assert!(
            validate("node.kubernetes.io/x", "y").is_err(),
            "a kubernetes.io subdomain"
        );
        assert!(
            validate("example.com/x", "y").is_ok(),
            "other namespaces are allowed by default"
        );
        assert!(validate("feature.node.kubernetes.io/-x", "y").is_err());
        assert!(validate("feature.node.kubernetes.io/x", "a,b").is_err());
        assert!(validate("feature.node.kubernetes.io/x", &"a".repeat(64)).is_err());
        assert!(
            validate("Feature.node.kubernetes.io/x", "y").is_err(),
            "prefix is lowercase"
        );
    }

    fn report(path: Path, facts: Vec<Fact>) -> Report {
        Report {
            path,
            dmabuf: false,
            facts,
            gpus: vec![],
            nics: vec![],
            peer_clients: vec![],
        }
    }

    #[test]
    fn every_path_and_problem_gives_valid_labels() {
        for path in Path::ALL {
            for problem in Problem::ALL.iter().map(Some).chain([None]) {
                let facts = problem
                    .map(|p| vec![Fact::problem("x", "node", Status::Fail, *p, "m", None)])
                    .unwrap_or_default();
                let r = report(path, facts);
                let text = file(&r, 1_795_651_199).unwrap();
                assert!(
                    text.starts_with("# +expiry-time=2026-11-25T23:59:59Z\n"),
                    "{text}"
                );
                assert!(text.contains(&format!("gpudirect-rdma.path={}\n", path.name())));
                assert_eq!(
                    text.contains("gpudirect-rdma.ready=true\n"),
                    problem.is_none()
                );
                if let Some(p) = problem {
                    assert!(text.contains(&format!("gpudirect-rdma.problem={}\n", p.name())));
                }
            }
        }
    }
}
