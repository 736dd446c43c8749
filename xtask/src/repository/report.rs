//! What build-repo prints when it is done: what it published and removed,
//! and how nodes use the repository.

use super::{BuildRepoArgs, Format};

/// What was done and how nodes use the repository.
pub(super) fn report(
    args: &BuildRepoArgs,
    format: Format,
    (added, given, removed): (&[String], usize, &[String]),
    valid_for: u64,
) -> String {
    let repo = args.repo.display();
    let mut text = String::new();
    for path in added {
        text.push_str(&format!("Published: {repo}/{path}\n"));
    }
    for path in removed {
        text.push_str(&format!("Removed: {repo}/{path}\n"));
    }
    if let (Some(n), false) = (args.keep_newest, removed.is_empty()) {
        text.push_str(&format!(
            "Pruned to the newest {n} kernel(s) of each series (and what each metapackage's newest version needs); nodes keep what they installed.\n"
        ));
    }
    if added.len() < given {
        text.push_str(&format!(
            "{} package(s) were already published with the same contents.\n",
            given - added.len()
        ));
    }
    if args.refresh {
        text.push_str(&format!(
            "Refreshed: {repo}'s metadata dated and signed again{}.\n",
            if format == Format::Apt {
                format!(", valid for {}: refresh again before then", days(valid_for))
            } else {
                String::new()
            }
        ));
    }
    let signed = args.sign_key.is_some();
    if !signed {
        text.push_str("\nWARNING: the repository is not signed (no --sign-key); apt and dnf refuse it. Rebuild it with --sign-key.\n");
    }
    match format {
        Format::Apt => text.push_str(&format!(
            "\nOn each node (the key from `gpg --export {key} > nv-peer-mem.gpg`):\n    /etc/apt/sources.list.d/nv-peer-mem.list:\n    deb [signed-by=/etc/apt/keyrings/nv-peer-mem.gpg] <URL of {repo}> {suite} {component}\n    apt-get update && apt-get install nvidia-peer-memory nvidia-peer-memory-modules-<flavour>\n",
            key = args.sign_key.as_deref().unwrap_or("<KEY>"),
            suite = args.suite.as_deref().unwrap_or_default(),
            component = args.component
        )),
        Format::Rpm => text.push_str(&format!(
            "\nOn each node, /etc/yum.repos.d/nv-peer-mem.repo (zypper: /etc/zypp/repos.d/):\n    [nv-peer-mem]\n    name=nv_peer_mem\n    baseurl=<URL of {repo}>\n    gpgcheck=1\n    repo_gpgcheck=1\n    gpgkey=<URL of the key from `gpg --export --armor {key}`>\n",
            key = args.sign_key.as_deref().unwrap_or("<KEY>"),
        )),
    }
    text
}

/// @seconds as people read a validity: whole days, else hours.
fn days(seconds: u64) -> String {
    match (seconds % 86_400, seconds / 86_400) {
        (0, 1) => "1 day".to_owned(),
        (0, n) => format!("{n} days"),
        _ => format!("{} hours", seconds.div_ceil(3_600)),
    }
}
