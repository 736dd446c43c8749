//! Errors in packaging/distros.yaml, in the data file's terms: the line,
//! the field and what the field must be, instead of the YAML library's
//! wording (which names its own options, e.g. DuplicateKeyPolicy).

/// What each field of the data file must be, for messages about a value of
/// the wrong type.
fn field_expectation(field: &str) -> Option<&'static str> {
    Some(match field {
        "maintainer" => "text such as `Name <email@example.org>`",
        "release" => "a whole number, 1 or more",
        "distros" => "a list of distro entries (`- id: ...`)",
        "id" => "an id of lowercase letters and digits, such as debian12",
        "family" => "`deb` or `rpm`",
        "name"
        | "codename"
        | "standards_version"
        | "dkms_addon_build_depends"
        | "group"
        | "kernel_devel"
        | "macros"
        | "flavor"
        | "module_dir" => "text",
        "rust_packages" | "build_requires" | "dkms_requires" | "arches" => {
            "a list of package names, such as [rustc, rust-src]"
        }
        "dh_with_dkms" => "true or false",
        "route" => "`kmod`, `kmp` or `dkms`",
        "compression" => "`xz`, `zstd` or `none`",
        "rpm" => "an rpm block (`rpm:` with route, group, arches, ...)",
        _ => return None,
    })
}

/// A YAML or type error of the data file, in the data file's terms.
pub fn data_error(text: &str, error: &serde_saphyr::Error, data_file: &str) -> anyhow::Error {
    let inner = error.without_snippet();
    let line = error
        .location()
        .map(|location| location.line())
        .unwrap_or(0);
    let at = if line > 0 {
        format!("line {line}: ")
    } else {
        String::new()
    };
    let line_text = usize::try_from(line)
        .ok()
        .and_then(|line| text.lines().nth(line.checked_sub(1)?))
        .unwrap_or_default();
    // `key: value` on the error's line (also as a list item `- key: value`);
    // not when the value opens a flow collection, whose error may be a
    // syntax error anywhere inside it.
    let entry = line_text
        .trim_start()
        .trim_start_matches("- ")
        .split_once(':')
        .map(|(key, value)| (key.trim(), value.trim()))
        .filter(|(_, value)| !value.starts_with(['[', '{']));
    match inner {
        serde_saphyr::Error::DuplicateMappingKey { key, .. } => {
            let key = key.as_deref().unwrap_or("a key");
            anyhow::anyhow!(
                "{at}`{key}` is given twice at the same level; keep one (schema at the top of {data_file})"
            )
        }
        // Not a value of the wrong type: the library's words, our line.
        serde_saphyr::Error::SerdeUnknownField { .. }
        | serde_saphyr::Error::SerdeMissingField { .. }
        | serde_saphyr::Error::Eof { .. } => {
            anyhow::anyhow!(
                "{at}{}; fix the entry (schema at the top of {data_file})",
                library_message(inner)
            )
        }
        _ => match entry.and_then(|(key, value)| Some((key, value, field_expectation(key)?))) {
            Some((field, value, expected)) => anyhow::anyhow!(
                "{at}`{field}` must be {expected}, not `{value}` (schema at the top of {data_file})"
            ),
            None => anyhow::anyhow!(
                "{at}malformed packaging data: {}; fix the YAML (schema at the top of {data_file})",
                library_message(inner)
            ),
        },
    }
}

/// The library's one-line message, without its "error: line L column C: "
/// prefix (the caller gives the line).
fn library_message(error: &serde_saphyr::Error) -> String {
    let text = error.to_string();
    let first = text.lines().next().unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    match first.split_once(": ") {
        Some((place, rest)) if place.starts_with("line ") => rest.to_owned(),
        _ => first.to_owned(),
    }
}

/// Line numbers (1-based) of the `id: @id` lines, block (`- id: x`) or
/// flow (`{id: x, ...}`) style.
pub fn id_lines(text: &str, id: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let line = line.trim_start().trim_start_matches('-').trim_start();
            let line = line.trim_start_matches('{').trim_start();
            line.strip_prefix("id:").is_some_and(|rest| {
                let value = rest.split([',', '}', '#']).next().unwrap_or_default();
                value.trim().trim_matches(['"', '\'']) == id
            })
        })
        .map(|(index, _)| index + 1)
        .collect()
}
