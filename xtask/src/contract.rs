//! The C/Rust contract of the module, kept in step by a test (in the manner
//! of rust-analyzer's tidy checks): `kmod/glue/nv_peer_mem_glue.h` against
//! `kmod/src/platform.rs` and `kmod/src/kernel.rs`. Both sides are parsed
//! whole, so a constant or function added on one side only fails the test.
//!
//! - Every `#define NVPM_*` of the header has a Rust counterpart with the
//!   same value: a variant of a `#[repr(u32)]` enum (`NVPM_<P>_<VARIANT>`,
//!   one prefix P per enum; every such enum has at least one constant), a
//!   struct size (`NVPM_<STRUCT>_SIZE` for `struct <Struct>(pub [T; N])`),
//!   or a `const` of the same name without `NVPM_`.
//! - The header's `nvpm_*` prototypes and the Rust `extern "C"` functions
//!   (the `nvpm_c_*` declarations and the `nvpm_rs_*` definitions) are the
//!   same set, with the same arity and the same types (C `int` = `i32`,
//!   `u64` = `u64`, `size_t` = `usize`, `s64` = `i64`, any pointer = a raw
//!   pointer of the same constness).
//!
//! The parsers read the subset of C and Rust these files use (one item per
//! declaration, no macros in prototypes); a shape they do not know is an
//! error that names it, not a silent pass.

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::Path;

pub const HEADER: &str = "kmod/glue/nv_peer_mem_glue.h";
pub const PLATFORM: &str = "kmod/src/platform.rs";
pub const KERNEL: &str = "kmod/src/kernel.rs";

/// A function's shape: parameter types and return type, in one vocabulary
/// for both languages (`i32`, `u64`, `ptr`, `const ptr`, `void`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub params: Vec<String>,
    pub ret: String,
}

/// Everything the contract compares, from one side.
#[derive(Debug, Default)]
pub struct Side {
    /// Constant name (without `NVPM_` on the C side) -> value.
    pub constants: BTreeMap<String, u64>,
    pub functions: BTreeMap<String, Signature>,
}

/// The Rust side's values: enum variants by enum, struct sizes and consts.
#[derive(Debug, Default)]
pub struct RustItems {
    /// Enum name -> [(variant in SCREAMING_SNAKE, value)].
    pub enums: BTreeMap<String, Vec<(String, u64)>>,
    /// SCREAMING_SNAKE struct name -> size in bytes.
    pub struct_sizes: BTreeMap<String, u64>,
    pub consts: BTreeMap<String, u64>,
    pub functions: BTreeMap<String, Signature>,
}

/// Every disagreement between @header (C) and @platform/@kernel (Rust).
pub fn check(header: &str, platform: &str, kernel: &str) -> Result<Vec<String>> {
    let c = parse_header(header)?;
    let mut rust = parse_rust(platform)?;
    let kernel_items = parse_rust(kernel)?;
    rust.consts.extend(kernel_items.consts);
    rust.functions.extend(kernel_items.functions);
    rust.enums.extend(kernel_items.enums);
    rust.struct_sizes.extend(kernel_items.struct_sizes);
    let mut problems = Vec::new();

    // Constants, header -> Rust.
    let mut prefixes: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (name, value) in &c.constants {
        let mut found: Vec<(String, u64)> = Vec::new();
        for (enum_name, variants) in &rust.enums {
            for (variant, rust_value) in variants {
                if let Some(prefix) = name.strip_suffix(variant.as_str()) {
                    if let Some(prefix) = prefix.strip_suffix('_').filter(|p| !p.is_empty()) {
                        prefixes
                            .entry(enum_name)
                            .or_default()
                            .push(prefix.to_owned());
                        found.push((format!("{enum_name}::{variant}"), *rust_value));
                    }
                }
            }
        }
        if let Some(size) = name
            .strip_suffix("_SIZE")
            .and_then(|s| rust.struct_sizes.get(s))
        {
            found.push((format!("size of {}", &name[..name.len() - 5]), *size));
        }
        if let Some(rust_value) = rust.consts.get(name) {
            found.push((format!("const {name}"), *rust_value));
        }
        match found.as_slice() {
            [] => problems.push(format!(
                "{HEADER}: NVPM_{name} has no Rust counterpart (an enum variant, a struct size or a const {name})"
            )),
            [(what, rust_value)] if rust_value != value => problems.push(format!(
                "NVPM_{name} is {value} in {HEADER} but {what} is {rust_value} in Rust"
            )),
            [_] => {}
            many => problems.push(format!(
                "NVPM_{name} could be any of {:?}; rename one so the match is unique",
                many.iter().map(|(what, _)| what).collect::<Vec<_>>()
            )),
        }
    }
    for enum_name in rust.enums.keys() {
        match prefixes.get(enum_name.as_str()) {
            None => problems.push(format!(
                "the #[repr(u32)] enum {enum_name} has no NVPM_<PREFIX>_<VARIANT> constant in {HEADER}"
            )),
            Some(found) if found.iter().any(|p| *p != found[0]) => problems.push(format!(
                "the constants of {enum_name} use several prefixes in {HEADER}: {found:?}"
            )),
            Some(_) => {}
        }
    }

    // Functions, both ways.
    for (name, c_signature) in &c.functions {
        match rust.functions.get(name) {
            None => problems.push(format!(
                "{name} is declared in {HEADER} but is no extern \"C\" function in {KERNEL}"
            )),
            Some(rust_signature) if rust_signature.params.len() != c_signature.params.len() => {
                problems.push(format!(
                    "{name} takes {} parameters in {HEADER} but {} in {KERNEL}",
                    c_signature.params.len(),
                    rust_signature.params.len()
                ))
            }
            Some(rust_signature) if rust_signature != c_signature => problems.push(format!(
                "{name} is {c_signature:?} in {HEADER} but {rust_signature:?} in {KERNEL}"
            )),
            Some(_) => {}
        }
    }
    for name in rust.functions.keys() {
        if !c.functions.contains_key(name) {
            problems.push(format!(
                "{name} is an extern \"C\" function in {KERNEL} but has no prototype in {HEADER}"
            ));
        }
    }
    Ok(problems)
}

/// `#define NVPM_X <number>` constants and `nvpm_*` prototypes.
pub fn parse_header(text: &str) -> Result<Side> {
    let text = strip_c_comments(text);
    let mut side = Side::default();
    let mut code = String::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(define) = line.strip_prefix("#define ") {
            let Some((name, value)) = define.trim().split_once(char::is_whitespace) else {
                continue;
            };
            if let Some(name) = name.strip_prefix("NVPM_") {
                let value = c_number(value).with_context(|| {
                    format!("{HEADER}: #define NVPM_{name} {value}: not a number")
                })?;
                side.constants.insert(name.to_owned(), value);
            }
        } else if !line.starts_with('#') {
            code.push_str(line);
            code.push(' ');
        }
    }
    for statement in code.split(';') {
        let Some((before, rest)) = statement.split_once('(') else {
            continue;
        };
        let name_start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let name = before[name_start..].trim();
        if !name.starts_with("nvpm_") {
            continue;
        }
        let params = rest
            .rsplit_once(')')
            .with_context(|| format!("{HEADER}: prototype of {name} has no closing parenthesis"))?
            .0;
        let params = match params.trim() {
            "void" | "" => Vec::new(),
            list => list
                .split(',')
                .map(|param| c_type(param, true))
                .collect::<Result<_>>()?,
        };
        let ret = c_type(&before[..name_start], false)?;
        side.functions
            .insert(name.to_owned(), Signature { params, ret });
    }
    Ok(side)
}

fn strip_c_comments(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        rest = rest[start..]
            .split_once("*/")
            .map_or("", |(_, after)| after);
    }
    out.push_str(rest);
    out
}

/// `0u`, `32`, `0x10`, `(1u << 3)` -> the value.
fn c_number(text: &str) -> Option<u64> {
    let text = text.trim().trim_start_matches('(').trim_end_matches(')');
    if let Some((left, right)) = text.split_once("<<") {
        return Some(c_number(left)? << c_number(right)?);
    }
    let digits = text.trim().trim_end_matches(['u', 'U', 'l', 'L']);
    match digits.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => digits.parse().ok(),
    }
}

/// A C type (a parameter with its name when @named) in the shared
/// vocabulary.
fn c_type(text: &str, named: bool) -> Result<String> {
    let text = text.trim();
    if let Some(star) = text.find('*') {
        let pointee_is_const = text[..star].split_whitespace().any(|w| w == "const");
        return Ok(if pointee_is_const { "const ptr" } else { "ptr" }.to_owned());
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    let type_words = if named && words.len() > 1 {
        &words[..words.len() - 1]
    } else {
        &words[..]
    };
    let type_name = type_words.join(" ");
    Ok(match type_name.as_str() {
        "void" => "void",
        "int" | "s32" => "i32",
        "unsigned int" | "u32" => "u32",
        "u64" => "u64",
        "s64" => "i64",
        "u16" => "u16",
        "s16" => "i16",
        "u8" => "u8",
        "s8" => "i8",
        "size_t" => "usize",
        "bool" => "bool",
        other => bail!(
            "{HEADER}: C type `{other}` is not in the contract's vocabulary; add it to contract.rs"
        ),
    }
    .to_owned())
}

/// A Rust type in the shared vocabulary.
fn rust_type(text: &str) -> Result<String> {
    let text = text.trim();
    if let Some(pointer) = text.strip_prefix('*') {
        let is_const = pointer.trim_start().starts_with("const");
        return Ok(if is_const { "const ptr" } else { "ptr" }.to_owned());
    }
    Ok(match text {
        "" | "()" => "void",
        "i32" | "c_int" => "i32",
        "u32" | "c_uint" => "u32",
        "u64" | "i64" | "u16" | "i16" | "u8" | "i8" | "usize" | "bool" => text,
        "!" => "void",
        other => {
            bail!("Rust type `{other}` is not in the contract's vocabulary; add it to contract.rs")
        }
    }
    .to_owned())
}

/// `#[repr(u32)]` enums, tuple structs of one array, `const`s and the
/// `nvpm_*` functions of `extern "C"` blocks or `extern "C" fn`s.
pub fn parse_rust(text: &str) -> Result<RustItems> {
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut items = RustItems::default();
    let mut repr_u32 = false;
    let mut lines = code.lines().peekable();
    while let Some(line) = lines.next() {
        let line = line.trim();
        if line.starts_with("#[repr(u32)]") {
            repr_u32 = true;
            continue;
        }
        if line.starts_with("#[") {
            continue;
        }
        if let Some(rest) = line
            .split_once("enum ")
            .map(|(_, rest)| rest)
            .filter(|_| repr_u32)
        {
            let name = rest.trim_end_matches('{').trim().to_owned();
            let mut variants = Vec::new();
            let mut next_value = 0;
            for body_line in lines.by_ref() {
                let body_line = body_line.trim();
                if body_line.starts_with('}') {
                    break;
                }
                let entry = body_line.trim_end_matches(',');
                if entry.is_empty() || entry.starts_with('#') {
                    continue;
                }
                let (variant, value) = match entry.split_once('=') {
                    Some((variant, value)) => (
                        variant.trim(),
                        rust_number(value).with_context(|| format!("enum {name}: {entry}"))?,
                    ),
                    None => (entry, next_value),
                };
                next_value = value + 1;
                variants.push((screaming_snake(variant), value));
            }
            items.enums.insert(name, variants);
        } else if let Some(rest) = line.split_once("struct ").map(|(_, rest)| rest) {
            // `pub struct Name(pub [u64; 4]);`
            if let Some((name, body)) = rest.split_once('(') {
                if let Some(size) = array_size(body) {
                    items
                        .struct_sizes
                        .insert(screaming_snake(name.trim()), size);
                }
            }
        } else if let Some(rest) = line.split_once("const ").map(|(_, rest)| rest) {
            if let (Some((name, _)), Some((_, value))) =
                (rest.split_once(':'), rest.split_once('='))
            {
                if let Some(value) = rust_number(value.trim_end_matches(';')) {
                    items.consts.insert(name.trim().to_owned(), value);
                }
            }
        }
        repr_u32 = false;
    }
    // Functions: `fn nvpm_...(` up to the end of its signature.
    let mut offset = 0;
    while let Some(found) = code[offset..].find("fn nvpm_") {
        let start = offset + found;
        let before = &code[..start];
        let rest = &code[start + 3..];
        offset = start + 3;
        let line_start = before.rfind(['\n', '{', '}', ';']).map_or(0, |i| i + 1);
        let qualifiers = &before[line_start..];
        let open = rest.find('(').context("fn nvpm_ without parameters")?;
        let name = rest[..open].trim().to_owned();
        let close = matching_paren(rest, open).with_context(|| format!("fn {name}: unbalanced"))?;
        let params_text = &rest[open + 1..close];
        let after = &rest[close + 1..];
        let end = after.find(['{', ';']).unwrap_or(after.len());
        let ret = after[..end].trim().strip_prefix("->").unwrap_or_default();
        // In an extern block the declaration has no `extern` of its own.
        let is_ffi = qualifiers.contains("extern \"C\"") || in_extern_block(before);
        if !is_ffi {
            continue;
        }
        let params = params_text
            .split(',')
            .filter(|param| !param.trim().is_empty())
            .map(|param| {
                let (_, ty) = param
                    .split_once(':')
                    .with_context(|| format!("fn {name}: parameter `{param}`"))?;
                rust_type(ty)
            })
            .collect::<Result<_>>()?;
        items.functions.insert(
            name,
            Signature {
                params,
                ret: rust_type(ret)?,
            },
        );
    }
    Ok(items)
}

/// Whether the end of @before is inside an `extern "C" {` block.
fn in_extern_block(before: &str) -> bool {
    let Some(start) = before.rfind("extern \"C\" {") else {
        return false;
    };
    let inside = &before[start + "extern \"C\" {".len()..];
    inside.matches('{').count() >= inside.matches('}').count()
}

fn matching_paren(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `[u64; 4]` -> 32.
fn array_size(body: &str) -> Option<u64> {
    let inner = body.split_once('[')?.1.split_once(']')?.0;
    let (element, count) = inner.split_once(';')?;
    let element_size = match element.trim() {
        "u8" | "i8" => 1,
        "u16" | "i16" => 2,
        "u32" | "i32" => 4,
        "u64" | "i64" | "usize" => 8,
        _ => return None,
    };
    Some(element_size * rust_number(count)?)
}

fn rust_number(text: &str) -> Option<u64> {
    let text = text.trim().replace('_', "");
    let text = text.trim_end_matches("u32").trim_end_matches("u64");
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// `InvalidateUnmaps` -> `INVALIDATE_UNMAPS`.
fn screaming_snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// Reads the three files below @root and checks them.
pub fn check_files(root: &Path) -> Result<Vec<String>> {
    let read = |relative: &str| {
        std::fs::read_to_string(root.join(relative)).with_context(|| format!("reading {relative}"))
    };
    check(&read(HEADER)?, &read(PLATFORM)?, &read(KERNEL)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real files agree.
    #[test]
    fn the_glue_header_matches_platform_rs_and_kernel_rs() {
        let problems = check_files(crate::workspace::root()).unwrap();
        assert!(
            problems.is_empty(),
            "the C/Rust contract disagrees:\n  {}",
            problems.join("\n  ")
        );
    }

    /// The real files are parsed into something (a parser that finds
    /// nothing would pass the check above vacuously).
    #[test]
    fn the_real_files_yield_constants_and_functions() {
        let root = crate::workspace::root();
        let header = parse_header(&std::fs::read_to_string(root.join(HEADER)).unwrap()).unwrap();
        let kernel = parse_rust(&std::fs::read_to_string(root.join(KERNEL)).unwrap()).unwrap();
        assert!(header.constants.len() >= 5, "{:?}", header.constants);
        assert!(
            header.functions.len() >= 20,
            "{:?}",
            header.functions.keys()
        );
        assert!(
            kernel.functions.keys().any(|n| n.starts_with("nvpm_rs_"))
                && kernel.functions.keys().any(|n| n.starts_with("nvpm_c_")),
            "{:?}",
            kernel.functions.keys()
        );
    }

    const HEADER_OK: &str = "/* x */\n#define NVPM_KIND_ONE 0u\n#define NVPM_KIND_TWO_WORDS 1u\n#define NVPM_BUF_SIZE 16\n#define NVPM_LIMIT (1u << 4)\nint nvpm_rs_go(u32 kind, const void *p,\n\tsize_t n);\nvoid *nvpm_c_get(void);\n";
    const PLATFORM_OK: &str = "#[repr(u32)]\npub enum Kind {\n    /// one\n    One = 0,\n    TwoWords = 1,\n}\n#[repr(C)]\npub struct Buf(pub [u64; 2]);\npub const LIMIT: u32 = 16;\n";
    const KERNEL_OK: &str = "mod ffi {\n    unsafe extern \"C\" {\n        pub fn nvpm_c_get() -> *mut c_void;\n        pub fn panic(fmt: *const u8, ...) -> !;\n    }\n}\nfn nvpm_helper(x: u32) {}\n#[unsafe(no_mangle)]\npub unsafe extern \"C\" fn nvpm_rs_go(\n    kind: u32,\n    p: *const c_void,\n    n: usize,\n) -> i32 {\n    0\n}\n";

    #[test]
    fn agreeing_files_pass() {
        assert_eq!(
            check(HEADER_OK, PLATFORM_OK, KERNEL_OK).unwrap(),
            Vec::<String>::new()
        );
    }

    /// Each kind of disagreement is reported, naming the item.
    #[test]
    fn disagreements_are_named() {
        for (header, platform, kernel, expected) in [
            (
                HEADER_OK.replace("KIND_TWO_WORDS 1u", "KIND_TWO_WORDS 2u"),
                PLATFORM_OK.to_owned(),
                KERNEL_OK.to_owned(),
                "NVPM_KIND_TWO_WORDS is 2",
            ),
            (
                format!("{HEADER_OK}#define NVPM_KIND_THREE 2u\n"),
                PLATFORM_OK.to_owned(),
                KERNEL_OK.to_owned(),
                "NVPM_KIND_THREE has no Rust counterpart",
            ),
            (
                HEADER_OK.to_owned(),
                PLATFORM_OK.replace("[u64; 2]", "[u64; 3]"),
                KERNEL_OK.to_owned(),
                "NVPM_BUF_SIZE is 16",
            ),
            (
                HEADER_OK.to_owned(),
                format!("{PLATFORM_OK}#[repr(u32)]\nenum Other {{\n    A = 0,\n}}\n"),
                KERNEL_OK.to_owned(),
                "enum Other has no NVPM_",
            ),
            (
                HEADER_OK.replace("size_t n", "size_t n, int extra"),
                PLATFORM_OK.to_owned(),
                KERNEL_OK.to_owned(),
                "nvpm_rs_go takes 4 parameters",
            ),
            (
                HEADER_OK.replace("const void *p", "void *p"),
                PLATFORM_OK.to_owned(),
                KERNEL_OK.to_owned(),
                "nvpm_rs_go is",
            ),
            (
                format!("{HEADER_OK}void nvpm_c_new(u64 x);\n"),
                PLATFORM_OK.to_owned(),
                KERNEL_OK.to_owned(),
                "nvpm_c_new is declared in",
            ),
            (
                HEADER_OK.to_owned(),
                PLATFORM_OK.to_owned(),
                KERNEL_OK.replace(
                    "pub fn panic",
                    "pub fn nvpm_c_more(x: u64);\n        pub fn panic",
                ),
                "nvpm_c_more is an extern \"C\" function",
            ),
        ] {
            let problems = check(&header, &platform, &kernel).unwrap().join("\n");
            assert!(
                problems.contains(expected),
                "expected {expected:?} in:\n{problems}"
            );
        }
    }
}
