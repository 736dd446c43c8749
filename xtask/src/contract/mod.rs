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

mod parse;

use anyhow::{Context, Result};
use parse::{HEADER, KERNEL, PLATFORM, parse_header, parse_rust};
use std::collections::BTreeMap;
use std::path::Path;

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
                if let Some(prefix) = name.strip_suffix(variant.as_str())
                    && let Some(prefix) = prefix.strip_suffix('_').filter(|p| !p.is_empty())
                {
                    prefixes
                        .entry(enum_name)
                        .or_default()
                        .push(prefix.to_owned());
                    found.push((format!("{enum_name}::{variant}"), *rust_value));
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

/// Reads the three files below @root and checks them.
pub fn check_files(root: &Path) -> Result<Vec<String>> {
    let read = |relative: &str| {
        std::fs::read_to_string(root.join(relative)).with_context(|| format!("reading {relative}"))
    };
    check(&read(HEADER)?, &read(PLATFORM)?, &read(KERNEL)?)
}

#[cfg(test)]
mod tests;
