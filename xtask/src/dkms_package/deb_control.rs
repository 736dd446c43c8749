//! debian/control as dpkg-gencontrol turns it into a binary package's
//! control file: the package's paragraph, the fields the source paragraph
//! passes on, substitution variables expanded, dpkg's field order.

use crate::deb::SOURCE_PACKAGE;
use anyhow::{Context, Result, bail, ensure};

/// dpkg-gencontrol's order of binary control fields (Dpkg::Control::FieldsCore).
pub const FIELD_ORDER: [&str; 22] = [
    "Package",
    "Source",
    "Version",
    "Architecture",
    "Essential",
    "Protected",
    "Maintainer",
    "Installed-Size",
    "Pre-Depends",
    "Depends",
    "Recommends",
    "Suggests",
    "Breaks",
    "Conflicts",
    "Enhances",
    "Provides",
    "Replaces",
    "Section",
    "Priority",
    "Multi-Arch",
    "Homepage",
    "Description",
];

/// Fields the source paragraph of debian/control passes on to a binary
/// package that does not set them.
const INHERITED_FIELDS: [&str; 4] = ["Section", "Priority", "Maintainer", "Homepage"];

/// The paragraphs of a control file: (field, value) in order, continuation
/// lines kept in the value after a newline.
pub fn paragraphs(text: &str) -> Result<Vec<Vec<(String, String)>>> {
    let mut out: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for line in text.lines() {
        if line.trim().is_empty() {
            if out.last().is_some_and(|p| !p.is_empty()) {
                out.push(Vec::new());
            }
        } else if line.starts_with('#') {
            continue;
        } else if line.starts_with([' ', '\t']) {
            let field = out
                .last_mut()
                .and_then(|p| p.last_mut())
                .context("debian/control starts with a continuation line")?;
            field.1.push('\n');
            field.1.push_str(line);
        } else {
            let (name, value) = line
                .split_once(':')
                .with_context(|| format!("debian/control line {line:?} is not `Field: value`"))?;
            out.last_mut()
                .expect("one paragraph at least")
                .push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    out.retain(|p| !p.is_empty());
    Ok(out)
}

/// The binary package's control fields as dpkg-gencontrol writes them,
/// of @package, without Installed-Size (which needs the files).
pub fn control_fields(
    control: &str,
    package: &str,
    version: &str,
    misc_depends: &str,
) -> Result<Vec<(String, String)>> {
    let paragraphs = paragraphs(control)?;
    let source = paragraphs.first().context("debian/control is empty")?;
    let binary = paragraphs
        .iter()
        .find(|p| p.iter().any(|(k, v)| k == "Package" && v == package))
        .with_context(|| format!("debian/control has no `Package: {package}` paragraph"))?;
    let mut fields: Vec<(String, String)> = Vec::new();
    let get = |p: &[(String, String)], name: &str| {
        p.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    };
    for name in FIELD_ORDER {
        let value = match name {
            "Source" => Some(SOURCE_PACKAGE.to_owned()),
            "Version" => Some(version.to_owned()),
            "Installed-Size" => None,
            _ => get(binary, name).or_else(|| {
                INHERITED_FIELDS
                    .contains(&name)
                    .then(|| get(source, name))
                    .flatten()
            }),
        };
        let Some(value) = value else { continue };
        let value = expand_substvars(&value, misc_depends)?;
        if !value.trim().is_empty() {
            fields.push((name.to_owned(), value));
        }
    }
    for (name, _) in binary {
        ensure!(
            FIELD_ORDER.contains(&name.as_str()),
            "debian/control: build-dkms does not write the {name} field of {package}; extend FIELD_ORDER in xtask/src/dkms_package/deb_control.rs"
        );
    }
    Ok(fields)
}

/// `${misc:Depends}` -> @misc_depends; other `${misc:*}`/`${shlibs:*}`
/// are empty (nothing else adds to them for this package); any other
/// variable is refused. Dependency lists are then tidied as dpkg does:
/// empty items dropped, `dkms` merged into a versioned `dkms (>= x)`.
pub fn expand_substvars(value: &str, misc_depends: &str) -> Result<String> {
    let mut out = String::new();
    let mut rest = value;
    let mut had_variable = false;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let end = rest[at..]
            .find('}')
            .with_context(|| format!("unclosed substitution variable in {value:?}"))?;
        let name = &rest[at + 2..at + end];
        match name {
            "misc:Depends" => out.push_str(misc_depends),
            _ if name.starts_with("misc:") || name.starts_with("shlibs:") => {}
            _ => bail!(
                "debian/control: build-dkms does not know the substitution variable ${{{name}}}; extend xtask/src/dkms_package/deb_control.rs"
            ),
        }
        had_variable = true;
        rest = &rest[at + end + 1..];
    }
    out.push_str(rest);
    if !had_variable {
        return Ok(out);
    }
    let mut items: Vec<String> = Vec::new();
    for item in out.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let name = item.split([' ', '(']).next().unwrap_or(item);
        let single = !item.contains('|');
        let same = items.iter().position(|existing| {
            single && !existing.contains('|') && existing.split([' ', '(']).next() == Some(name)
        });
        match same {
            Some(i) if items[i] == item => {}
            Some(i) if !items[i].contains('(') => items[i] = item.to_owned(),
            Some(_) if !item.contains('(') => {}
            _ => items.push(item.to_owned()),
        }
    }
    Ok(items.join(", "))
}

#[cfg(test)]
#[path = "deb_control_tests.rs"]
mod tests;
