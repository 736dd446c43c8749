//! Will nv_peer_mem load on a kernel that is not running? Read from files
//! only (docs/next-boot.md): which file modprobe would load there
//! (kernel_modules.rs), where it came from, whether its vermagic fits that
//! kernel, whether every symbol it imports is exported there with the CRC
//! it was built against (the providers' own `__crc_*`, elf.rs), whether
//! that kernel would refuse it for its signature, and DKMS's state.

use crate::elf::{self, Module};
use crate::kernel_modules::{self, Installed};
use crate::next_boot_dkms;
use crate::report::{Fact, Problem, Status};
use crate::signing_keys;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::kernel_modules::MODULE;

/// The answer for one kernel.
#[derive(Debug)]
pub struct Verdict {
    pub release: String,
    /// How the kernel was chosen (`--kernel`, or the boot loader's rule).
    pub chosen: String,
    pub facts: Vec<Fact>,
    /// The node needs no peer memory client: no PeerDirect core runs now,
    /// and neither MLNX_OFED's core nor nv_peer_mem is installed for any
    /// kernel (nv_peer_mem serves only above that core), nor set up in
    /// DKMS or by a package: nothing says the site wants one.
    pub needs_no_client: bool,
    /// Why it will not load, where a rebuild against what is installed
    /// mends it: an import exported there in another version.
    pub stale_symbol: Option<StaleSymbol>,
}

/// A symbol nv_peer_mem imports that the kernel or a provider installed
/// for that kernel exports in another version than the one it was built
/// against ("disagrees about version of symbol"). The JSON form carries it
/// as `stale_symbol`, which the -dkms rebuild trigger and the apt hooks
/// act on (docs/next-boot.md, "Output").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleSymbol {
    pub symbol: String,
    /// The module that exports it, or `vmlinux` for the kernel itself.
    pub provider: String,
    /// The CRC exported there now.
    pub exported: u32,
    /// The CRC nv_peer_mem was built against.
    pub built_against: u32,
}

impl Verdict {
    /// Some(true): nv_peer_mem will load there; Some(false): it will not;
    /// None: cannot tell (something could not be read or decided).
    pub fn loads(&self) -> Option<bool> {
        if self.needs_no_client {
            return Some(true);
        }
        if self
            .facts
            .iter()
            .any(|f| f.problem == Some(Problem::NoPath))
        {
            Some(false)
        } else if self.facts.iter().any(|f| f.problem.is_some()) {
            None
        } else {
            Some(true)
        }
    }

    /// 0 loads, 4 does not (no path on that kernel), 7 cannot tell
    /// (docs/readiness.md, "Exit statuses").
    pub fn exit_status(&self) -> i32 {
        match self.loads() {
            Some(true) => 0,
            Some(false) => Problem::NoPath.exit_status(),
            None => Problem::Unreadable.exit_status(),
        }
    }
}

/// The verdict when the next boot's kernel cannot be told: @why.
/// Whether anything under @root says the site wants a peer client: for
/// some kernel, modules.dep lists nv_peer_mem or modules.symbols names an
/// exporter of ib_register_peer_memory_client (MLNX_OFED's core); DKMS
/// has nv_peer_mem; a package of ours is installed. None where a kernel's
/// modules cannot be read (then nothing is concluded).
pub fn client_wanted(root: &Path) -> Option<bool> {
    if root.join("var/lib/dkms").join(MODULE).exists() {
        return Some(true);
    }
    let ours = |name: &str| {
        (name.starts_with("nvidia-peer-memory-modules-")
            || name.starts_with("nvidia-peer-memory-dkms"))
            && name.ends_with(".list")
    };
    if let Ok(entries) = std::fs::read_dir(root.join("var/lib/dpkg/info")) {
        if entries
            .flatten()
            .any(|e| ours(&e.file_name().to_string_lossy()))
        {
            return Some(true);
        }
    }
    let Ok(kernels) = std::fs::read_dir(root.join("lib/modules")) else {
        return Some(false); // no kernel modules at all (a container, a VM image)
    };
    for kernel in kernels.flatten() {
        let release = kernel.file_name().to_string_lossy().into_owned();
        match kernel_modules::read(root, &release) {
            Ok(i) => {
                if i.file_of(MODULE).is_some()
                    || i.exporter_of("ib_register_peer_memory_client").is_some()
                {
                    return Some(true);
                }
            }
            Err(_) => return None,
        }
    }
    Some(false)
}

/// Where the node runs no PeerDirect core and nothing says it wants a peer
/// client (`client_wanted`), it needs none whatever it boots next.
pub fn unknown_kernel(why: String, needs_no_client: bool) -> Verdict {
    if needs_no_client {
        return Verdict {
            release: "unknown".into(),
            chosen: why.clone(),
            facts: vec![
                Fact::info("kernel", "node", why),
                no_client_fact("the running kernel"),
            ],
            needs_no_client: true,
            stale_symbol: None,
        };
    }
    Verdict {
        release: "unknown".into(),
        chosen: why.clone(),
        facts: vec![unknown("kernel", why)],
        needs_no_client: false,
        stale_symbol: None,
    }
}

fn no_client_fact(which: &str) -> Fact {
    Fact::ok(
        "peer_core",
        "node",
        format!(
            "no PeerDirect core (MLNX_OFED/DOCA-OFED's ib_core) runs now or is installed for any kernel, and {MODULE} is not installed ({which} included): this node needs no peer memory client, {MODULE} serving only above that core; GPU memory registers through DMA-BUF where the rest allows (gpudirect-rdma-check says)"
        ),
    )
}

fn fail(check: &'static str, message: String, fix: Option<String>) -> Fact {
    Fact::problem(check, "node", Status::Fail, Problem::NoPath, message, fix)
}

fn unknown(check: &'static str, message: String) -> Fact {
    Fact::problem(
        check,
        "node",
        Status::Unknown,
        Problem::Unreadable,
        message,
        None,
    )
}

/// Where a module file came from, by where packages put it
/// (docs/next-boot.md, "Where the module came from").
/// Whether @relative (a module's path under /lib/modules/<release>) is
/// DKMS's build: where dkms installs it (dkms 3's
/// override_dest_module_location: our dkms.conf's /updates/dkms on Debian
/// and Ubuntu, /extra on Fedora and the RHEL family, /updates on SUSE),
/// the last two only where DKMS's tree says it installed ours for that
/// kernel (a kmod's module is in extra/nvidia_peer_memory/, a KMP's in
/// updates/ too).
fn from_dkms(root: &Path, release: &str, relative: &str) -> bool {
    if relative.starts_with("updates/dkms/") {
        return true;
    }
    let flat = |dir: &str| {
        relative
            .strip_prefix(dir)
            .is_some_and(|name| name.starts_with(MODULE) && !name.contains('/'))
    };
    (flat("extra/") || flat("updates/")) && next_boot_dkms::installed_for(root, release)
}

/// @built_by: what `judge` found built it (DKMS's build by `from_dkms`).
fn origin(root: &Path, release: &str, relative: &str, built_by: BuiltBy) -> String {
    if built_by == BuiltBy::Dkms {
        return "DKMS's build".into();
    }
    if relative.starts_with("weak-updates/") {
        return "a kmod package built for another kernel of the same kABI, linked by weak-modules"
            .into();
    }
    if relative.starts_with("extra/") {
        return "a kmod/KMP package".into();
    }
    let package = format!("nvidia-peer-memory-modules-{release}");
    let list = root
        .join("var/lib/dpkg/info")
        .join(format!("{package}.list"));
    let wanted = format!("/lib/modules/{release}/{relative}");
    if std::fs::read_to_string(list).is_ok_and(|t| t.lines().any(|l| l == wanted)) {
        return format!("the prebuilt package {package}");
    }
    "no package this check knows (installed by hand?)".into()
}

/// The verdict for @release under @root (`/` on a node).
/// @needs_no_client: the running kernel has no PeerDirect core (what the
/// check itself reads) and `client_wanted` says no.
pub fn verdict(
    root: &Path,
    release: &str,
    chosen: String,
    cmdline: Option<&str>,
    needs_no_client: bool,
) -> Verdict {
    judge(root, release, chosen, cmdline, needs_no_client, None)
}

/// The verdict for @file as the module of @release (`--module`): a module
/// not installed yet, judged against what is installed for @release now
/// (the apt guard asks it of a module package before dpkg unpacks it).
pub fn verdict_for_module(
    root: &Path,
    release: &str,
    file: &Path,
    needs_no_client: bool,
) -> Verdict {
    judge(
        root,
        release,
        format!("--kernel, --module {}", file.display()),
        None,
        needs_no_client,
        Some(file),
    )
}

fn judge(
    root: &Path,
    release: &str,
    chosen: String,
    cmdline: Option<&str>,
    needs_no_client: bool,
    module_file: Option<&Path>,
) -> Verdict {
    let mut facts = vec![Fact::info(
        "kernel",
        "node",
        format!("{release} ({chosen})"),
    )];
    let done = |facts| Verdict {
        release: release.to_owned(),
        chosen: chosen.clone(),
        facts,
        needs_no_client: false,
        stale_symbol: None,
    };
    if needs_no_client {
        facts.push(no_client_fact(release));
        return Verdict {
            needs_no_client: true,
            ..done(facts)
        };
    }
    if !root.join("lib/modules").join(release).is_dir() {
        facts.push(fail(
            "kernel",
            format!("kernel {release} is not installed (no /lib/modules/{release})"),
            None,
        ));
        return done(facts);
    }
    let installed = match kernel_modules::read(root, release) {
        Ok(i) => i,
        Err(u) => {
            facts.push(unknown(
                "module",
                format!(
                    "{u}: depmod has not run for {release}, so modprobe finds nothing there yet"
                ),
            ));
            facts.last_mut().expect("pushed").fix = Some(format!("depmod {release}"));
            return done(facts);
        }
    };
    // DKMS's build is mended by DKMS; a package's (or --module's, a
    // package's file about to be unpacked) by a new build of the package:
    // the RHEL kmod where the module is in extra/nvidia_peer_memory/ or
    // linked from there in weak-updates/ (kmodtool's directory and
    // weak-modules' link: docs/packaging.md), else Debian's per-kernel
    // package.
    let built_by = match (module_file, installed.file_of(MODULE)) {
        (None, Some(relative)) if from_dkms(root, release, relative) => BuiltBy::Dkms,
        (None, Some(relative))
            if relative.starts_with("extra/nvidia_peer_memory/")
                || relative.starts_with("weak-updates/nvidia_peer_memory/") =>
        {
            BuiltBy::Kmod
        }
        _ => BuiltBy::DebPackage,
    };
    let path = match (module_file, installed.file_of(MODULE)) {
        (Some(file), _) => {
            facts.push(Fact::info(
                "module",
                "node",
                format!(
                    "{} (--module), judged as the module for {release}",
                    file.display()
                ),
            ));
            file.to_path_buf()
        }
        (None, Some(relative)) => {
            facts.push(Fact::ok(
                "module",
                "node",
                format!(
                    "modprobe loads /lib/modules/{release}/{relative}, from {}",
                    origin(root, release, relative, built_by)
                ),
            ));
            installed.dir.join(relative)
        }
        (None, None) => {
            let stray = kernel_modules::unlisted_copies(&installed, MODULE);
            let fix = if stray.is_empty() {
                Some(install_fix(root, release))
            } else {
                Some(format!("depmod {release}"))
            };
            let also = if stray.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} is installed, but modules.dep does not list it)",
                    stray.join(", ")
                )
            };
            facts.push(fail(
                "module",
                format!("no {MODULE} for {release}: modprobe finds none{also}"),
                fix,
            ));
            next_boot_dkms::facts(root, release, &mut facts);
            return done(facts);
        }
    };
    let module = match kernel_modules::module_bytes(&path).and_then(|b| elf::parse(&b)) {
        Ok(m) => m,
        Err(e) => {
            facts.push(unknown(
                "module",
                format!("could not read {}: {e}", path.display()),
            ));
            return done(facts);
        }
    };
    vermagic_fact(&installed, &module, release, &mut facts);
    let stale_symbol = symbol_facts(root, &installed, &module, release, built_by, &mut facts);
    nccl_fact(root, &module, release, &mut facts);
    signature_fact(root, &module, release, cmdline, &mut facts);
    next_boot_dkms::facts(root, release, &mut facts);
    Verdict {
        stale_symbol,
        ..done(facts)
    }
}

/// What installs the module for @release: DKMS where it is set up, else
/// the prebuilt package for that kernel.
fn install_fix(root: &Path, release: &str) -> String {
    if root.join("var/lib/dkms").join(MODULE).is_dir() {
        let mut lacks = Vec::new();
        // DKMS builds against /lib/modules/<release>/build: where it is
        // missing, or a link to headers that are not installed, DKMS had
        // nothing to build with.
        if !root
            .join("lib/modules")
            .join(release)
            .join("build")
            .is_dir()
        {
            lacks.push(next_boot_dkms::headers_package(root, release));
        }
        lacks.extend(next_boot_dkms::missing_prerequisites(root, release));
        if lacks.is_empty() {
            format!("dkms autoinstall -k {release}")
        } else {
            format!(
                "install what {release} lacks ({}), then run: dkms autoinstall -k {release}",
                lacks.join(" and ")
            )
        }
    } else {
        format!(
            "apt-get install nvidia-peer-memory-modules-{release} (build it with `cargo xtask build-modules --kernel {release}` and publish it first), or on RHEL the kmod for that kernel"
        )
    }
}

/// The words after the release: with CONFIG_MODVERSIONS the kernel
/// compares only these (same_magic(), kernel/module/version.c).
fn magic_flags(vermagic: &str) -> &str {
    // From the first space on, trailing space included, as strcspn leaves it.
    vermagic.find(' ').map_or("", |i| &vermagic[i..])
}

fn vermagic_fact(installed: &Installed, module: &Module, release: &str, facts: &mut Vec<Fact>) {
    let Some(ours) = module.info("vermagic") else {
        facts.push(fail("vermagic", format!("{MODULE} has no vermagic"), None));
        return;
    };
    let theirs = installed
        .a_kernel_module()
        .map(|f| installed.dir.join(f))
        .and_then(|p| kernel_modules::module_bytes(&p).ok())
        .and_then(|b| elf::parse(&b).ok())
        .and_then(|m| m.info("vermagic").map(str::to_owned));
    let Some(theirs) = theirs else {
        facts.push(Fact::info(
            "vermagic",
            "node",
            format!("{ours}: not compared (no module of the kernel's own could be read)"),
        ));
        return;
    };
    let fits = if module.imports.is_empty() {
        ours == theirs
    } else {
        magic_flags(ours) == magic_flags(&theirs)
    };
    if fits {
        facts.push(Fact::ok(
            "vermagic",
            "node",
            format!("`{}` fits {release}'s `{}`", ours.trim(), theirs.trim()),
        ));
    } else {
        facts.push(fail(
            "vermagic",
            format!(
                "`{}` does not fit {release}'s `{}`: the kernel refuses it (invalid module format)",
                ours.trim(),
                theirs.trim()
            ),
            Some(format!("rebuild {MODULE} for {release}")),
        ));
    }
}

/// Whether NCCL will see nv_peer_mem on @release, said where the kernel's
/// own exports can be read: MLNX_OFED's core creates the files NCCL tests
/// (/sys/kernel/mm/memory_peers/<client>/version) only where the kernel
/// exports mm_kobj (its configure's HAVE_MM_KOBJ_EXPORTED, found in
/// Module.symvers; backport 0271 of MLNX_OFED 25.10), and NCCL 2.28.9 and
/// 2.30.7 test no other file of nv_peer_mem's (docs/readiness.md, "Which
/// consumer sees which path"). A module with the `memory_peers` parameter
/// makes them itself there (docs/contracts.md, "memory_peers without
/// mm_kobj"). Information: the module loads all the same.
fn nccl_fact(root: &Path, module: &Module, release: &str, facts: &mut Vec<Fact>) {
    let (exports, source) = kernel_exports(root, release);
    let Some(source) = source else {
        return;
    };
    if !exports.contains_key("mm_kobj") {
        let source = source
            .strip_prefix(root)
            .map_or(source.clone(), |p| Path::new("/").join(p));
        let makes_them = module
            .modinfo
            .iter()
            .any(|(k, v)| k == "parm" && v.starts_with("memory_peers:"));
        if makes_them {
            facts.push(Fact::info(
                "nccl",
                "node",
                format!(
                    "NCCL will see nv_peer_mem on {release}: the kernel exports no mm_kobj ({}), so MLNX_OFED's core creates no /sys/kernel/mm/memory_peers there, and this {MODULE} makes it itself (its memory_peers parameter)",
                    source.display()
                ),
            ));
            return;
        }
        facts.push(Fact::info(
            "nccl",
            "node",
            format!(
                "NCCL will not use nv_peer_mem on {release}: the kernel exports no mm_kobj ({}), so MLNX_OFED's core creates no /sys/kernel/mm/memory_peers there, the files NCCL tests (UCX 1.18 and later still find nv_peer_mem by /sys/module/nv_peer_mem/version); for NCCL there, load nvidia_peermem or register through DMA-BUF",
                source.display()
            ),
        ));
    }
}

/// The kernel's own exports with CRCs (Module.symvers of its headers, or
/// RHEL's /boot/symvers-<release>.gz) or at least their names (a real
/// System.map's `__ksymtab_*`). A file that lists no export is no source:
/// Debian's /boot/System.map is a one-line stub ("The real System.map is
/// in the linux-image-<version>-dbg package"), and taking it as the list
/// would call every kernel symbol missing.
fn kernel_exports(root: &Path, release: &str) -> (BTreeMap<String, Option<u32>>, Option<PathBuf>) {
    let symvers_map = |text: &str| -> BTreeMap<String, Option<u32>> {
        text.lines()
            .filter_map(|l| {
                let mut w = l.split('\t');
                let crc = u32::from_str_radix(w.next()?.trim_start_matches("0x"), 16).ok()?;
                let name = w.next()?;
                let owner = w.next()?;
                (owner == "vmlinux").then(|| (name.to_owned(), Some(crc)))
            })
            .collect()
    };
    let candidates = [
        root.join("lib/modules")
            .join(release)
            .join("build/Module.symvers"),
        root.join("boot").join(format!("symvers-{release}.gz")),
    ];
    for path in candidates {
        let Ok(bytes) = kernel_modules::module_bytes(&path) else {
            continue;
        };
        let map = symvers_map(&String::from_utf8_lossy(&bytes));
        if !map.is_empty() {
            return (map, Some(path));
        }
    }
    let map_file = root.join("boot").join(format!("System.map-{release}"));
    if let Ok(text) = std::fs::read_to_string(&map_file) {
        let map: BTreeMap<String, Option<u32>> = text
            .lines()
            .filter_map(|l| l.split_whitespace().nth(2)?.strip_prefix("__ksymtab_"))
            .map(|n| (n.to_owned(), None))
            .collect();
        if !map.is_empty() {
            return (map, Some(map_file));
        }
    }
    (BTreeMap::new(), None)
}

/// The `symbols` fact, and the import exported in another version where
/// that is why the module will not load.
fn symbol_facts(
    root: &Path,
    installed: &Installed,
    module: &Module,
    release: &str,
    built_by: BuiltBy,
    facts: &mut Vec<Fact>,
) -> Option<StaleSymbol> {
    if !installed.has_symbols() {
        facts.push(if module.imports.is_empty() {
            Fact::info(
                "symbols",
                "node",
                "no symbol versions recorded (built without CONFIG_MODVERSIONS): not compared",
            )
        } else {
            unknown(
                "symbols",
                format!("no modules.symbols for {release}: cannot tell which modules export what"),
            )
        });
        return None;
    }
    // Before the CRCs, and for a module built without CONFIG_MODVERSIONS
    // too: an import with no version is resolved by name alone.
    if let Some(missing) = unversioned_import_without_exporter(installed, module, release) {
        facts.push(missing);
        return None;
    }
    if module.imports.is_empty() {
        facts.push(Fact::info(
            "symbols",
            "node",
            "no symbol versions recorded (built without CONFIG_MODVERSIONS): not compared; every MLNX_OFED and NVIDIA symbol it imports is exported by an installed module",
        ));
        return None;
    }
    let (kernel, kernel_source) = kernel_exports(root, release);
    let mut providers: BTreeMap<String, Result<Module, String>> = BTreeMap::new();
    let mut by_provider: BTreeMap<String, usize> = BTreeMap::new();
    let mut kernel_unchecked = 0;
    for (symbol, crc) in &module.imports {
        if let Some(provider) = installed.exporter_of(symbol) {
            let exports = providers.entry(provider.to_owned()).or_insert_with(|| {
                let file = installed
                    .file_of(provider)
                    .ok_or_else(|| format!("modules.dep does not list {provider}"))?;
                kernel_modules::module_bytes(&installed.dir.join(file)).and_then(|b| elf::parse(&b))
            });
            let file = installed.file_of(provider).unwrap_or("?");
            match exports {
                Err(e) => {
                    facts.push(unknown(
                        "symbols",
                        format!("could not read {provider} ({file}): {e}"),
                    ));
                    return None;
                }
                Ok(p) => match p.exports.get(symbol) {
                    Some(theirs) if theirs == crc => {
                        *by_provider.entry(provider.to_owned()).or_default() += 1
                    }
                    Some(theirs) => {
                        facts.push(fail(
                            "symbols",
                            format!(
                                "{provider} (/lib/modules/{release}/{file}) exports another version of {symbol} (0x{theirs:08x}; {MODULE} was built against 0x{crc:08x}): the kernel refuses it (disagrees about version of symbol)"
                            ),
                            Some(rebuild_fix(release, provider, built_by)),
                        ));
                        return Some(StaleSymbol {
                            symbol: symbol.clone(),
                            provider: provider.to_owned(),
                            exported: *theirs,
                            built_against: *crc,
                        });
                    }
                    None => {
                        facts.push(unknown(
                            "symbols",
                            format!("{provider} ({file}) exports {symbol} per modules.symbols, but its file records no CRC for it"),
                        ));
                        return None;
                    }
                },
            }
        } else {
            match kernel.get(symbol) {
                Some(Some(theirs)) if theirs != crc => {
                    facts.push(fail(
                        "symbols",
                        format!(
                            "the kernel {release} exports another version of {symbol} (0x{theirs:08x}; {MODULE} was built against 0x{crc:08x})"
                        ),
                        Some(rebuild_fix(release, "vmlinux", built_by)),
                    ));
                    return Some(StaleSymbol {
                        symbol: symbol.clone(),
                        provider: "vmlinux".into(),
                        exported: *theirs,
                        built_against: *crc,
                    });
                }
                Some(Some(_)) => *by_provider.entry("the kernel".into()).or_default() += 1,
                Some(None) => kernel_unchecked += 1,
                None if kernel_source.is_some() || from_a_provider(symbol) => {
                    facts.push(fail(
                        "symbols",
                        format!(
                            "nothing installed for {release} exports {symbol} (Unknown symbol): {}",
                            provider_hint(symbol)
                        ),
                        Some(format!(
                            "install the {} for {release}",
                            provider_hint(symbol)
                        )),
                    ));
                    return None;
                }
                None => kernel_unchecked += 1,
            }
        }
    }
    let mut summary: Vec<String> = by_provider
        .iter()
        .map(|(p, n)| format!("{p} {n}"))
        .collect();
    if kernel_unchecked > 0 {
        summary.push(match &kernel_source {
            Some(s) => format!("{kernel_unchecked} from the kernel by name only ({})", s.display()),
            None => format!(
                "{kernel_unchecked} not found in any module, taken as the kernel's own (no Module.symvers or System.map for {release} to check them)"
            ),
        });
    }
    facts.push(Fact::ok(
        "symbols",
        "node",
        format!(
            "every imported symbol is exported with the CRC {MODULE} was built against: {}",
            summary.join(", ")
        ),
    ));
    None
}

/// A provider's symbol the module imports with no recorded version (built
/// without that provider's Module.symvers, or without CONFIG_MODVERSIONS
/// at all): the kernel resolves it by name, so it must be exported by
/// something installed, or the load fails with "Unknown symbol" whatever
/// __versions says (docs/next-boot.md, "Symbols").
fn unversioned_import_without_exporter(
    installed: &Installed,
    module: &Module,
    release: &str,
) -> Option<Fact> {
    let symbol = module.undefined.iter().find(|s| {
        from_a_provider(s) && !module.imports.contains_key(*s) && installed.exporter_of(s).is_none()
    })?;
    Some(fail(
        "symbols",
        format!(
            "nothing installed for {release} exports {symbol} (Unknown symbol), which {MODULE} imports with no recorded version (built without that provider's Module.symvers): {}",
            provider_hint(symbol)
        ),
        Some(format!(
            "install the {} for {release}, then rebuild {MODULE} against it",
            provider_hint(symbol)
        )),
    ))
}

/// Symbols only MLNX_OFED's ib_core or the NVIDIA driver export, never
/// the kernel itself (the inbox ib_core has no PeerDirect API): missing
/// from modules.symbols, they are missing, whatever the kernel's list.
fn from_a_provider(symbol: &str) -> bool {
    symbol.starts_with("nvidia_p2p_")
        || symbol == "ib_register_peer_memory_client"
        || symbol == "ib_unregister_peer_memory_client"
}

fn provider_hint(symbol: &str) -> &'static str {
    if symbol.starts_with("nvidia_p2p_") {
        "NVIDIA driver's kernel modules (nvidia.ko)"
    } else if symbol.starts_with("ib_") || symbol.starts_with("rdma_") {
        "MLNX_OFED kernel modules (ib_core with the PeerDirect API)"
    } else {
        "module that exports it"
    }
}

/// What installed the module, for the fix that builds it again.
#[derive(Clone, Copy, PartialEq)]
enum BuiltBy {
    Dkms,
    /// kmod-nvidia_peer_memory (RHEL), its file or weak-modules' link
    Kmod,
    DebPackage,
}

fn rebuild_fix(release: &str, provider: &str, built_by: BuiltBy) -> String {
    let what = match provider {
        "nvidia" => "the NVIDIA driver",
        "vmlinux" => "the kernel",
        _ => "MLNX_OFED's modules",
    };
    match built_by {
        BuiltBy::Dkms => {
            return format!(
                "rebuild {MODULE} against {what} installed for {release}: dkms remove {MODULE} -k {release} && dkms autoinstall -k {release}"
            );
        }
        // The source rpm's defines name the providers' symbol versions
        // (docs/packaging.md, "Build inputs of the prebuilt module packages").
        BuiltBy::Kmod => {
            let input = match provider {
                "nvidia" => "--define 'nvidia_symvers <the installed driver's Module.symvers>'",
                "vmlinux" => "that kernel's kernel-devel installed",
                _ => {
                    "the installed MLNX_OFED's mlnx-ofa_kernel-devel (or --define 'ofa_kernel <its tree>')"
                }
            };
            return format!(
                "build kmod-nvidia_peer_memory again against {what} installed for {release} (rpmbuild --rebuild of the source rpm with {input}, or cargo xtask build-modules --distro <rhel id> --kernel {release}; a release above the installed one), publish it, then: dnf upgrade kmod-nvidia_peer_memory"
            );
        }
        BuiltBy::DebPackage => {}
    }
    let source = if provider == "nvidia" {
        " --nvidia-src /usr/src/nvidia-<the installed driver's version>"
    } else {
        ""
    };
    format!(
        "build nvidia-peer-memory-modules-{release} again against {what} installed for {release} (cargo xtask build-modules --kernel {release}{source} --release <one more than the last>), publish it with build-repo, then: apt-get update && apt-get install nvidia-peer-memory-modules-{release}"
    )
}

/// Would @release refuse an unsigned module? CONFIG_MODULE_SIG_FORCE in its
/// config, `module.sig_enforce` on its command line, or Secure Boot with a
/// kernel that locks down under it (docs/next-boot.md, "Signatures").
fn signature_fact(
    root: &Path,
    module: &Module,
    release: &str,
    cmdline: Option<&str>,
    facts: &mut Vec<Fact>,
) {
    let config = std::fs::read_to_string(root.join("boot").join(format!("config-{release}"))).ok();
    let set = |option: &str| {
        config
            .as_deref()
            .is_some_and(|c| c.lines().any(|l| l == format!("{option}=y")))
    };
    let secure_boot = std::fs::read(
        root.join("sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"),
    )
    .ok()
    .and_then(|b| b.get(4).copied())
        == Some(1);
    let mut enforced = Vec::new();
    if set("CONFIG_MODULE_SIG_FORCE") {
        enforced.push("CONFIG_MODULE_SIG_FORCE".to_owned());
    }
    let words: Vec<&str> = cmdline.map_or(Vec::new(), |c| c.split_whitespace().collect());
    for w in &words {
        if *w == "module.sig_enforce=1"
            || *w == "lockdown=integrity"
            || *w == "lockdown=confidentiality"
        {
            enforced.push((*w).to_owned());
        }
    }
    for option in [
        "CONFIG_LOCK_DOWN_KERNEL_FORCE_INTEGRITY",
        "CONFIG_LOCK_DOWN_KERNEL_FORCE_CONFIDENTIALITY",
    ] {
        if set(option) {
            enforced.push(option.to_owned());
        }
    }
    // Debian's and Fedora's patch names the option
    // LOCK_DOWN_IN_EFI_SECURE_BOOT, Ubuntu's LOCK_DOWN_IN_SECURE_BOOT
    // (docs/next-boot.md, "Signatures").
    if secure_boot
        && (set("CONFIG_LOCK_DOWN_IN_EFI_SECURE_BOOT") || set("CONFIG_LOCK_DOWN_IN_SECURE_BOOT"))
    {
        enforced.push("Secure Boot (lockdown)".to_owned());
    }
    let enforces = if enforced.is_empty() {
        String::new()
    } else {
        format!("; {release} enforces signatures: {}", enforced.join(", "))
    };
    // Whose key: the kernel trusts its own keys and, under Secure Boot,
    // the firmware's (signing_keys.rs).
    let signer = module.signature.as_ref().and_then(|s| s.signer.as_ref());
    match (&module.signature, enforced.is_empty()) {
        (Some(_), _) if signer.is_none() => facts.push(Fact::ok(
            "signature",
            "node",
            format!("signed (its signer could not be read){enforces}"),
        )),
        (Some(_), unenforced) => {
            let signer = signer.expect("a signer");
            let by = signer.shown();
            let why = match signing_keys::trust(root, signer, secure_boot) {
                signing_keys::Trust::Mok => Some("its certificate is enrolled in the MOK list (MokListRT)".to_owned()),
                signing_keys::Trust::Db => Some("its certificate is in the firmware's db".to_owned()),
                signing_keys::Trust::Named => Some(format!(
                    "a key of that name is in the running kernel's keyrings (/proc/keys; {release}'s own keys cannot be read from files)"
                )),
                signing_keys::Trust::None => None,
            };
            let firmware = if secure_boot {
                "neither the MOK list (MokListRT) nor db holds its certificate"
            } else {
                "Secure Boot is off, so the kernel takes no key from the firmware's MOK list or db"
            };
            facts.push(match why {
                Some(why) => Fact::ok("signature", "node", format!("signed by {by}: {why}{enforces}")),
                None if unenforced => Fact::ok("signature", "node", format!(
                    "signed by {by}, a key the kernel does not list ({firmware}): {release} does not enforce signatures, so it loads, tainting the kernel"
                )),
                None => fail(
                    "signature",
                    format!("signed by {by}, a key {release} will not trust: {firmware}, and no key of that name is in the running kernel's keyrings (/proc/keys){enforces}"),
                    Some(format!(
                        "enroll the certificate it was signed with (build-modules writes it beside the packages as nv_peer_mem-modsign.der; DKMS's is /var/lib/dkms/mok.pub): mokutil --import <certificate.der>, confirm it at the next boot's MokManager prompt, and check with mokutil --test-key <certificate.der>{}",
                        if secure_boot { "" } else { "; Debian's kernels take MOKs only under Secure Boot" }
                    )),
                ),
            });
        }
        (None, true) => facts.push(Fact::info(
            "signature",
            "node",
            format!("unsigned; {release} does not enforce signatures{}", if config.is_none() { format!(" (no /boot/config-{release}: assumed)") } else { String::new() }),
        )),
        (None, false) => facts.push(fail(
            "signature",
            format!("unsigned, and {release} loads only signed modules ({})", enforced.join(", ")),
            Some(format!(
                "sign it: configure DKMS's MOK key (mokutil --import /var/lib/dkms/mok.pub, then reboot to enroll it) and run dkms autoinstall -k {release}; for prebuilt packages, build-modules --modsign-key/--modsign-cert"
            )),
        )),
    }
}
