//! Reads one subpackage (`%package dkms`) out of the rendered spec, so that
//! build-dkms's rpm says what `rpmbuild --rebuild` of build-srpm's spec
//! would: its name, the header tags it inherits from the main package,
//! its dependency tags, description, scriptlets and `%files` list.
//!
//! Only the spec language the subpackage uses is understood: `Tag: value`
//! and `Tag(qualifiers): value` lines, `%global`/`%define` at top level
//! (definitions inside `%if` blocks are left alone, they configure the
//! kmod build), the build host's `%dist`, `%{name}`, `%{?name}` (empty
//! when undefined) and plain `%%`. Anything else in the subpackage's sections (a conditional, a
//! `-p` interpreter, a `%files` directive other than `%dir`, an unknown
//! macro) is refused, naming what to extend, so a spec change cannot
//! silently make the two routes differ.

use anyhow::{Result, bail, ensure};
use std::collections::BTreeMap;

/// Scriptlet sections rpm knows for a package, in rpm's order.
pub const SCRIPTLETS: [&str; 6] = ["pretrans", "pre", "post", "preun", "postun", "posttrans"];

/// Dependency tags a subpackage may carry.
const DEPENDENCY_TAGS: [&str; 9] = [
    "Requires",
    "Conflicts",
    "Provides",
    "Obsoletes",
    "Recommends",
    "Suggests",
    "Supplements",
    "Enhances",
    "OrderWithRequires",
];

/// Header tags a subpackage inherits from the main package unless it sets
/// them (rpm's `copyTagsDuringParse`: Version, Release, Epoch, License,
/// Group, URL, Vendor, Packager, ...).
const INHERITED_TAGS: [&str; 7] = [
    "Version", "Release", "Epoch", "License", "Group", "URL", "Vendor",
];

/// One subpackage, macros expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subpackage {
    pub name: String,
    /// Header tags (Summary, Version, Release, License, Group, URL,
    /// BuildArch, ...), inherited ones included.
    pub tags: BTreeMap<String, String>,
    /// (tag, qualifiers such as `post`, dependency text), in spec order.
    pub dependencies: Vec<(String, Vec<String>, String)>,
    pub description: String,
    /// Scriptlet section name (`post`) -> body, without trailing blank lines.
    pub scriptlets: BTreeMap<String, String>,
    /// `%transfiletriggerin <suffix> -- PATH` sections: (path, body), in
    /// spec order.
    pub trans_file_triggers_in: Vec<(String, String)>,
    /// `%files` lines: (is `%dir`, path).
    pub files: Vec<(bool, String)>,
}

impl Subpackage {
    pub fn tag(&self, name: &str) -> Result<&str> {
        self.tags.get(name).map(String::as_str).ok_or_else(|| {
            anyhow::anyhow!(
                "the spec's {} package has no {name}: tag (nor does the main package); fix rpm/nvidia_peer_memory.spec.tera",
                self.name
            )
        })
    }
}

/// A line that starts a section, and which one: (`package`, `dkms`).
fn section_header(line: &str) -> Option<(&str, &str)> {
    const SECTIONS: [&str; 16] = [
        "package",
        "description",
        "prep",
        "build",
        "install",
        "check",
        "clean",
        "files",
        "changelog",
        "pretrans",
        "pre",
        "post",
        "preun",
        "postun",
        "posttrans",
        "verifyscript",
    ];
    let rest = line.strip_prefix('%')?;
    let word_end = rest.find(|c: char| c.is_whitespace()).unwrap_or(rest.len());
    let word = &rest[..word_end];
    (SECTIONS.contains(&word)
        || word.starts_with("trigger")
        || word.starts_with("filetrigger")
        || word.starts_with("transfiletrigger"))
    .then(|| (word, rest[word_end..].trim()))
}

/// Reads subpackage @suffix (`%package dkms`) of @spec, as rpmbuild reads
/// it on a build host whose `%dist` is @dist (packaging/distros.yaml's
/// `dist`; empty: undefined, as on SUSE).
pub fn read(spec: &str, suffix: &str, dist: &str) -> Result<Subpackage> {
    let mut macros = Macros::default();
    if !dist.is_empty() {
        macros.define("dist", dist);
    }
    let mut main_tags: BTreeMap<String, String> = BTreeMap::new();
    let mut sections: Vec<(String, String, Vec<&str>)> = Vec::new();
    let mut if_depth = 0usize;
    for line in spec.lines() {
        if let Some((kind, argument)) = section_header(line) {
            sections.push((kind.to_owned(), argument.to_owned(), Vec::new()));
            continue;
        }
        if let Some((_, _, body)) = sections.last_mut() {
            body.push(line);
            continue;
        }
        // The main preamble.
        let trimmed = line.trim_start();
        if trimmed.starts_with("%if") {
            if_depth += 1;
        } else if trimmed.starts_with("%endif") {
            if_depth = if_depth.saturating_sub(1);
        } else if if_depth == 0 {
            if let Some(definition) = trimmed
                .strip_prefix("%global ")
                .or_else(|| trimmed.strip_prefix("%define "))
            {
                let (name, value) = definition
                    .trim()
                    .split_once(char::is_whitespace)
                    .unwrap_or((definition.trim(), ""));
                macros.define(name, value.trim());
            } else if let Some((tag, value)) = tag_line(line) {
                main_tags.insert(tag.to_owned(), value.to_owned());
                let lower = tag.to_ascii_lowercase();
                if ["name", "version", "release"].contains(&lower.as_str()) {
                    macros.define(&lower, value);
                }
            }
        }
    }
    let main_name = macros.expand(main_tags.get("Name").map_or("", String::as_str))?;
    ensure!(
        !main_name.is_empty(),
        "the spec has no Name: tag; fix rpm/nvidia_peer_memory.spec.tera"
    );
    let name = format!("{main_name}-{suffix}");
    let is_ours = |argument: &str| {
        argument == suffix
            || argument
                .strip_prefix("-n ")
                .is_some_and(|n| n.trim() == name)
    };
    let Some((_, _, preamble)) = sections
        .iter()
        .find(|(kind, argument, _)| kind == "package" && is_ours(argument))
    else {
        bail!("the spec has no `%package {suffix}`; fix rpm/nvidia_peer_memory.spec.tera");
    };

    let mut tags = BTreeMap::new();
    for tag in INHERITED_TAGS {
        if let Some(value) = main_tags.get(tag) {
            tags.insert(tag.to_owned(), macros.expand(value)?);
        }
    }
    let mut dependencies = Vec::new();
    for line in preamble {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((tag, value)) = tag_line(line) else {
            bail!(
                "`%package {suffix}` line {trimmed:?} is not a `Tag: value` line; build-dkms reads only those (extend xtask/src/dkms_package/spec_subpackage.rs)"
            );
        };
        let value = macros.expand(value)?;
        let (base, qualifiers) = match tag.split_once('(') {
            Some((base, rest)) => (
                base,
                rest.trim_end_matches(')')
                    .split(',')
                    .map(|q| q.trim().to_owned())
                    .collect(),
            ),
            None => (tag, Vec::new()),
        };
        if DEPENDENCY_TAGS.contains(&base) {
            dependencies.push((base.to_owned(), qualifiers, value));
        } else {
            tags.insert(tag.to_owned(), value);
        }
    }

    let mut description = None;
    let mut scriptlets = BTreeMap::new();
    let mut files = Vec::new();
    let mut trans_file_triggers_in = Vec::new();
    for (kind, argument, body) in &sections {
        // `%transfiletriggerin dkms -- /path`: one path, no options.
        if kind == "transfiletriggerin"
            && let Some((package, path)) = argument.split_once(" -- ")
            && is_ours(package.trim())
        {
            let path = macros.expand(path.trim())?;
            ensure!(
                path.starts_with('/') && !path.contains(char::is_whitespace),
                "`%{kind} {argument}`: build-dkms writes one absolute path per file trigger (extend xtask/src/dkms_package/spec_subpackage.rs)"
            );
            let text = section_text(body, kind, &mut macros)?;
            trans_file_triggers_in.push((path, text));
            continue;
        }
        if kind == "package" || !is_ours(argument) {
            // `%post -p /bin/foo dkms` and the like would not match: refuse them.
            if kind != "package" && argument.split_whitespace().any(|w| w == suffix) {
                bail!(
                    "`%{kind} {argument}`: build-dkms does not understand these options (extend xtask/src/dkms_package/spec_subpackage.rs)"
                );
            }
            continue;
        }
        let text = section_text(body, kind, &mut macros)?;
        match kind.as_str() {
            "description" => description = Some(text),
            "files" => {
                for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
                    match line.strip_prefix("%dir ") {
                        Some(path) => files.push((true, path.trim().to_owned())),
                        None if line.starts_with('%') => bail!(
                            "`%files {suffix}` line {line:?}: build-dkms understands only paths and %dir (extend xtask/src/dkms_package/spec_subpackage.rs)"
                        ),
                        None => files.push((false, line.to_owned())),
                    }
                }
            }
            scriptlet if SCRIPTLETS.contains(&scriptlet) => {
                scriptlets.insert(scriptlet.to_owned(), text);
            }
            other => bail!(
                "`%{other} {suffix}`: build-dkms does not build this section (extend xtask/src/dkms_package/spec_subpackage.rs)"
            ),
        }
    }
    let description =
        description.ok_or_else(|| anyhow::anyhow!("the spec has no `%description {suffix}`"))?;
    ensure!(!files.is_empty(), "the spec has no `%files {suffix}` list");
    Ok(Subpackage {
        name,
        tags,
        dependencies,
        description,
        scriptlets,
        trans_file_triggers_in,
        files,
    })
}

/// `Tag: value` (tag letters, digits and `(qualifiers)`), else None.
fn tag_line(line: &str) -> Option<(&str, &str)> {
    let (tag, value) = line.split_once(':')?;
    let base = tag.split('(').next()?;
    (!base.is_empty()
        && base.chars().all(|c| c.is_ascii_alphanumeric())
        && base.starts_with(|c: char| c.is_ascii_uppercase()))
    .then(|| (tag, value.trim()))
}

/// A section's body as rpmbuild stores it: comments stay (the shell reads
/// them), macros expanded, trailing blank lines dropped.
fn section_text(body: &[&str], kind: &str, macros: &mut Macros) -> Result<String> {
    let mut lines = Vec::new();
    for line in body {
        let trimmed = line.trim_start();
        if trimmed.starts_with("%if")
            || trimmed.starts_with("%else")
            || trimmed.starts_with("%endif")
        {
            bail!(
                "a conditional in `%{kind}` of the -dkms package: build-dkms does not evaluate them (extend xtask/src/dkms_package/spec_subpackage.rs)"
            );
        }
        if kind == "files"
            && trimmed.starts_with('%')
            && !trimmed.starts_with("%{")
            && !trimmed.starts_with("%dir ")
        {
            bail!(
                "`%files` line {trimmed:?}: build-dkms understands only paths and %dir (extend xtask/src/dkms_package/spec_subpackage.rs)"
            );
        }
        lines.push(macros.expand(line)?);
    }
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    Ok(lines.join("\n"))
}

/// The spec's macro definitions.
#[derive(Default)]
struct Macros(BTreeMap<String, String>);

impl Macros {
    fn define(&mut self, name: &str, value: &str) {
        self.0.insert(name.to_owned(), value.to_owned());
    }

    /// Expands `%{name}`, `%{?name}`, `%name` and `%%` in @text.
    fn expand(&self, text: &str) -> Result<String> {
        self.expand_depth(text, 0)
    }

    fn expand_depth(&self, text: &str, depth: usize) -> Result<String> {
        ensure!(depth < 16, "macro expansion of {text:?} does not end");
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find('%') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            if let Some(tail) = after.strip_prefix('%') {
                out.push('%');
                rest = tail;
                continue;
            }
            let (name, optional, tail) = if let Some(braced) = after.strip_prefix('{') {
                let end = braced
                    .find('}')
                    .ok_or_else(|| anyhow::anyhow!("unclosed macro in {text:?}"))?;
                let inner = &braced[..end];
                match inner.strip_prefix('?') {
                    Some(name) => (name, true, &braced[end + 1..]),
                    None => (inner, false, &braced[end + 1..]),
                }
            } else {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], false, &after[end..])
            };
            match self.0.get(name) {
                Some(value) => out.push_str(&self.expand_depth(value, depth + 1)?),
                None if optional => {}
                None => bail!(
                    "macro %{{{name}}} in {text:?} is not defined at the top of the spec; build-dkms expands only %global/%define, name, version and release (extend xtask/src/dkms_package/spec_subpackage.rs)"
                ),
            }
            rest = tail;
        }
        out.push_str(rest);
        Ok(out)
    }
}

#[cfg(test)]
#[path = "spec_subpackage_tests.rs"]
mod tests;
