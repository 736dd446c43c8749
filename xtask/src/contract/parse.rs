//! Parsers for the subset of C and Rust the contract files use: the
//! header's `#define NVPM_*` constants and `nvpm_*` prototypes; Rust's
//! `#[repr(u32)]` enums, one-array tuple structs, consts and `extern "C"`
//! functions.

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;

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
            if let Some((name, body)) = rest.split_once('(')
                && let Some(size) = array_size(body)
            {
                items
                    .struct_sizes
                    .insert(screaming_snake(name.trim()), size);
            }
        } else if let Some(rest) = line.split_once("const ").map(|(_, rest)| rest)
            && let (Some((name, _)), Some((_, value))) =
                (rest.split_once(':'), rest.split_once('='))
            && let Some(value) = rust_number(value.trim_end_matches(';'))
        {
            items.consts.insert(name.trim().to_owned(), value);
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
