//! MLNX_OFED's PeerDirect core as MLNX_OFED builds it (issue 25 item 1):
//! its backport 0271 applied to peer_mem.c, and the `HAVE_*` switches the
//! patch uses decided for each guest kernel the way MLNX_OFED 25.10's
//! configure decides them (docs/testing.md, "The core's backport and its
//! switches"):
//! - an `MLNX_RDMA_TEST_CASE(NAME, [desc], [includes], [body])` of
//!   compat/config/rdma.m4 is a module that MLNX_RDMA_BUILD_MODULES
//!   compiles against the kernel with `ccflags-y=$ERROR_FLAGS`; NAME is
//!   defined when its object was built (MLNX_RDMA_CHECK_RESULTS);
//! - `LB_CHECK_SYMBOL_EXPORT([mm_kobj], [mm/mm_init.c])` (HAVE_MM_KOBJ_EXPORTED,
//!   compat/config/build-linux.m4): the symbol in the kernel's
//!   Module.symvers, else `EXPORT_SYMBOL.*(mm_kobj)` in that source file;
//! - HAVE_BASECODE_EXTRAS: ofed_scripts/configure defines it when
//!   CONFIG_ENABLE_BASECODE_EXTRAS is y, its default.
//!
//! The test modules are written here from the fixture's own text, never
//! copied into the repository.

use anyhow::{Context, Result, bail, ensure};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The backport for peer_mem.c, in the fixture tarball.
pub const BACKPORT: &str = "backports/0271-BACKPORT-drivers-infiniband-core-peer_mem.c.patch";
/// MLNX_OFED's configure tests.
pub const RDMA_M4: &str = "compat/config/rdma.m4";
/// MLNX_RDMA_BUILD_MODULES's flags (compat/config/rdma.m4).
const ERROR_FLAGS: &str =
    "-Werror -Wno-unused-variable -Wno-unused-value -Wno-uninitialized -Wno-missing-braces";

/// The `HAVE_*` names a patch tests, sorted.
pub fn switches(patch: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in patch.lines().filter(|l| l.starts_with("+#if")) {
        let mut rest = line;
        while let Some(at) = rest.find("HAVE_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            out.insert(name);
        }
    }
    out
}

/// The (includes, body) of rdma.m4's test case @name.
pub fn test_case(m4: &str, name: &str) -> Result<(String, String)> {
    let start = format!("MLNX_RDMA_TEST_CASE({name},");
    let at = m4
        .find(&start)
        .with_context(|| format!("{RDMA_M4} has no MLNX_RDMA_TEST_CASE({name}, ...)"))?;
    let mut rest = &m4[at + start.len()..];
    let mut groups = Vec::new();
    for _ in 0..3 {
        let open = rest
            .find('[')
            .context("a test case argument is not quoted")?;
        let mut depth = 0;
        let mut end = None;
        for (i, c) in rest[open..].char_indices() {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(open + i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let end = end.with_context(|| format!("{name}: unbalanced quotes in {RDMA_M4}"))?;
        // One level of m4 quoting comes off, as m4 expands the macro.
        groups.push(rest[open + 1..end].replace("[[", "[").replace("]]", "]"));
        rest = &rest[end + 1..];
    }
    Ok((groups[1].clone(), groups[2].clone()))
}

/// The test module MLNX_RDMA_TEST_CASE writes for (includes, body).
pub fn test_module(includes: &str, body: &str) -> String {
    format!(
        "#include <linux/module.h>\n#include <linux/kernel.h>\nMODULE_LICENSE(\"GPL\");\n{includes}\nstatic int __maybe_unused test_func (void) {{\n{body}\n\treturn 0;\n}}\n"
    )
}

/// The switches of @patch decided for the kernel in @kdir: the defined
/// ones (the others are left undefined, as configure leaves them).
pub fn decide(kdir: &Path, work: &Path, m4: &str, patch: &str) -> Result<BTreeSet<String>> {
    let mut defined = BTreeSet::new();
    let tests = work.join("mofed-configure");
    if tests.exists() {
        std::fs::remove_dir_all(&tests)?;
    }
    std::fs::create_dir_all(&tests)?;
    // configure's MLNX_RDMA_CHECK_BUILD_SANITY: an empty test must build.
    let mut top = String::from("obj-m += KBUILD_WORKS/\n");
    std::fs::create_dir_all(tests.join("KBUILD_WORKS"))?;
    std::fs::write(tests.join("KBUILD_WORKS/test.c"), test_module("", ""))?;
    std::fs::write(tests.join("KBUILD_WORKS/Makefile"), "obj-m += test.o\n")?;
    let mut compiled = Vec::new();
    for name in switches(patch) {
        match name.as_str() {
            "HAVE_BASECODE_EXTRAS" => {
                defined.insert(name);
            }
            "HAVE_MM_KOBJ_EXPORTED" => {
                if symbol_exported(kdir, "mm_kobj", "mm/mm_init.c")? {
                    defined.insert(name);
                }
            }
            _ => {
                let (includes, body) = test_case(m4, &name)?;
                let dir = tests.join(&name);
                std::fs::create_dir_all(&dir)?;
                std::fs::write(dir.join("test.c"), test_module(&includes, &body))?;
                std::fs::write(dir.join("Makefile"), "obj-m += test.o\n")?;
                top.push_str(&format!("obj-m += {name}/\n"));
                compiled.push(name);
            }
        }
    }
    std::fs::write(tests.join("Makefile"), top)?;
    // -k: a test that fails to compile is an undefined switch, not a failed
    // build (configure's `make -k`); make's status is not read.
    let mut make = Command::new("make");
    make.arg("-s")
        .arg("-C")
        .arg(kdir)
        .arg("-k")
        .arg(format!("ccflags-y={ERROR_FLAGS}"))
        .arg(format!("M={}", tests.display()))
        .arg("modules");
    // The guest's architecture (arm64: cross-compiled), as every build here.
    super::arch::cross_make_vars(&mut make);
    let _ = make
        .output()
        .context("running make for MLNX_OFED's configure tests")?;
    ensure!(
        tests.join("KBUILD_WORKS/test.o").exists(),
        "an empty module does not compile against {}; is it a kernel build tree?",
        kdir.display()
    );
    for name in compiled {
        if tests.join(&name).join("test.o").exists() {
            defined.insert(name);
        }
    }
    Ok(defined)
}

/// LB_CHECK_SYMBOL_EXPORT: @symbol in the kernel's Module.symvers, else an
/// EXPORT_SYMBOL of it in @file of the kernel's sources.
/// An unreadable Module.symvers is an error here, not "not exported": it
/// would quietly turn the scenarios' expectation of `memory_peers` into
/// "absent" (see [`expected_mm_kobj`]).
fn symbol_exported(kdir: &Path, symbol: &str, file: &str) -> Result<bool> {
    let path = kdir.join("Module.symvers");
    let symvers = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (configure's LB_CHECK_SYMBOL_EXPORT reads it)",
            path.display()
        )
    })?;
    if symvers
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(symbol))
    {
        return Ok(true);
    }
    let source = std::fs::read_to_string(kdir.join("source").join(file)).unwrap_or_default();
    Ok(source
        .lines()
        .any(|l| l.contains("EXPORT_SYMBOL") && l.contains(&format!("({symbol})"))))
}

/// Whether MLNX_OFED's configure defines HAVE_MM_KOBJ_EXPORTED for a guest
/// kernel, as recorded in docs/testing.md ("MLNX_OFED's configure, per
/// guest kernel"): Debian's 6.1 exports `mm_kobj` (its Module.symvers), the
/// 6.12 backports kernel does not. The scenarios take their expectation of
/// `memory_peers` from the decision, so the decision is held to this
/// record: a change (a new kernel, a broken check) stops the run instead
/// of changing what they assert. None for a kernel not recorded.
pub fn expected_mm_kobj(kver: &str) -> Option<bool> {
    if kver.starts_with("6.1.") {
        Some(true)
    } else if kver.starts_with("6.12.") {
        Some(false)
    } else {
        None
    }
}

/// [`expected_mm_kobj`] against the decision @defined for @kver.
pub fn check_recorded(kver: &str, defined: &BTreeSet<String>) -> Result<()> {
    let decided = defined.contains("HAVE_MM_KOBJ_EXPORTED");
    match expected_mm_kobj(kver) {
        Some(expected) if expected != decided => bail!(
            "MLNX_OFED's configure decided HAVE_MM_KOBJ_EXPORTED {} for {kver}, but docs/testing.md records it {} for this kernel series: update the record (and expected_mm_kobj in xtask/src/vm/mofed_config.rs) if the kernel changed, else the decision is broken",
            if decided { "defined" } else { "undefined" },
            if expected { "defined" } else { "undefined" }
        ),
        Some(_) => Ok(()),
        None => bail!(
            "no record of MLNX_OFED's configure for {kver} (docs/testing.md, expected_mm_kobj in xtask/src/vm/mofed_config.rs): add one"
        ),
    }
}

/// The config.h MLNX_OFED's build includes in every object (`-include`),
/// with the switches of @all that are @defined.
pub fn config_h(all: &BTreeSet<String>, defined: &BTreeSet<String>) -> String {
    let mut out = String::from(
        "/* MLNX_OFED's configure, for backport 0271's switches (xtask/src/vm/mofed_config.rs) */\n",
    );
    for name in all {
        if defined.contains(name) {
            out.push_str(&format!("#define {name} 1\n"));
        } else {
            out.push_str(&format!("/* #undef {name} */\n"));
        }
    }
    out
}

/// @original with @patch applied (patch(1), which MLNX_OFED's build uses),
/// the patch's paths stripped to the file name.
pub fn apply(original: &Path, patch: &Path, out: &Path) -> Result<()> {
    let status = Command::new("patch")
        .args(["--silent", "--forward", "-p4", "-o"])
        .arg(out)
        .arg(original)
        .arg(patch)
        .status()
        .context("running patch (install it: apt install patch)")?;
    if !status.success() {
        bail!(
            "{} does not apply to {}: the fixture is not MLNX_OFED 25.10's",
            patch.display(),
            original.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decision_is_held_to_the_record() {
        let mut defined = BTreeSet::new();
        assert!(check_recorded("6.12.57+deb12-amd64", &defined).is_ok());
        let e = check_recorded("6.1.0-56-arm64", &defined).unwrap_err();
        assert!(
            format!("{e}").contains("undefined for 6.1.0-56-arm64"),
            "{e}"
        );
        defined.insert("HAVE_MM_KOBJ_EXPORTED".to_string());
        assert!(check_recorded("6.1.0-56-amd64", &defined).is_ok());
        assert!(check_recorded("6.12.57+deb12-amd64", &defined).is_err());
        assert!(check_recorded("6.19.1-amd64", &defined).is_err());
    }

    #[test]
    fn an_unreadable_module_symvers_is_an_error_not_unexported() {
        let dir = std::env::temp_dir().join(format!("nvpm-symvers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(symbol_exported(&dir, "mm_kobj", "mm/mm_init.c").is_err());
        std::fs::write(
            dir.join("Module.symvers"),
            "0x13886227\tmm_kobj\tvmlinux\tEXPORT_SYMBOL_GPL\t\n",
        )
        .unwrap();
        assert!(symbol_exported(&dir, "mm_kobj", "mm/mm_init.c").unwrap());
        assert!(!symbol_exported(&dir, "other", "mm/mm_init.c").unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn switches_and_test_cases_are_read_from_mlnx_ofeds_text() {
        let patch = "+#ifdef HAVE_A\n #ifdef HAVE_NOT_ADDED\n+#if defined(HAVE_B) && !defined(HAVE_C2)\n+#endif\n";
        assert_eq!(
            switches(patch).into_iter().collect::<Vec<_>>(),
            ["HAVE_A", "HAVE_B", "HAVE_C2"]
        );
        let m4 = "\tMLNX_RDMA_TEST_CASE(HAVE_X, [x is defined], [\n\t\t#include <linux/x.h>\n\t],[\n\t\tint a[[2]];\n\t\treturn 0;\n\t])\n";
        let (includes, body) = test_case(m4, "HAVE_X").unwrap();
        assert!(includes.contains("#include <linux/x.h>"));
        assert!(body.contains("int a[2];"), "{body}");
        assert!(test_case(m4, "HAVE_Y").is_err());
        let module = test_module(&includes, &body);
        assert!(module.starts_with("#include <linux/module.h>\n"));
        assert!(module.contains("static int __maybe_unused test_func (void) {"));
    }
}
