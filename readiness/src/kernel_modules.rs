//! A kernel's installed modules as modprobe finds them, read from files:
//! `/lib/modules/<release>/modules.dep` (the one file each module name
//! resolves to, depmod having applied its search order: `updates/` before
//! the kernel's own, `weak-updates/` last on RHEL), `modules.symbols`
//! (which module exports a symbol) and the module files, compressed ones
//! through xz, zstd or gzip. Formats and sources: docs/next-boot.md,
//! "What modprobe would load".

use crate::host::Unreadable;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Our module's name, as modprobe and /sys/module know it.
pub const MODULE: &str = "nv_peer_mem";

/// What depmod wrote for one kernel.
#[derive(Debug, Clone)]
pub struct Installed {
    /// `<root>/lib/modules/<release>`
    pub dir: PathBuf,
    /// module name -> its file, relative to `dir` (as modules.dep has it)
    files: BTreeMap<String, String>,
    /// exported symbol -> the module name that exports it
    symbols: BTreeMap<String, String>,
}

/// The module name of a file: its base name without `.ko` and a
/// compression suffix, `-` as `_` (modprobe treats them alike).
pub fn module_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = [".ko.xz", ".ko.zst", ".ko.gz", ".ko"]
        .iter()
        .find_map(|s| base.strip_suffix(s))
        .unwrap_or(base);
    stem.replace('-', "_")
}

/// Reads @root's `lib/modules/<release>`: modules.dep must be there (no
/// depmod run means modprobe finds nothing); modules.symbols may be
/// missing (depmod writes both, so that is said by the caller).
pub fn read(root: &Path, release: &str) -> Result<Installed, Unreadable> {
    let dir = root.join("lib/modules").join(release);
    let dep_path = dir.join("modules.dep");
    let dep = std::fs::read_to_string(&dep_path).map_err(|e| {
        Unreadable::new(
            &dep_path,
            match e.kind() {
                std::io::ErrorKind::NotFound => "no such file".to_owned(),
                _ => e.to_string(),
            },
        )
    })?;
    let mut files = BTreeMap::new();
    for line in dep.lines() {
        let Some((file, _deps)) = line.split_once(':') else {
            continue;
        };
        // kmod writes paths relative to the directory; old depmod wrote
        // absolute ones.
        let file = file.trim();
        let relative = file
            .strip_prefix(&format!("/lib/modules/{release}/"))
            .unwrap_or(file);
        files
            .entry(module_name(relative))
            .or_insert_with(|| relative.to_owned());
    }
    let mut symbols = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(dir.join("modules.symbols")) {
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if let (Some("alias"), Some(symbol), Some(module)) =
                (words.next(), words.next(), words.next())
            {
                if let Some(symbol) = symbol.strip_prefix("symbol:") {
                    symbols.insert(symbol.to_owned(), module.replace('-', "_"));
                }
            }
        }
    }
    Ok(Installed {
        dir,
        files,
        symbols,
    })
}

impl Installed {
    /// The file modprobe loads for @module, relative to `dir`.
    pub fn file_of(&self, module: &str) -> Option<&str> {
        self.files.get(module).map(String::as_str)
    }

    /// The module that exports @symbol, per modules.symbols.
    pub fn exporter_of(&self, symbol: &str) -> Option<&str> {
        self.symbols.get(symbol).map(String::as_str)
    }

    pub fn has_symbols(&self) -> bool {
        !self.symbols.is_empty()
    }

    /// One of the kernel's own modules (under `kernel/`), for its
    /// vermagic: every module built with the kernel carries the same.
    pub fn a_kernel_module(&self) -> Option<&str> {
        self.files
            .values()
            .find(|f| f.starts_with("kernel/"))
            .map(String::as_str)
    }
}

/// Files named like @module under `dir` that modules.dep does not point
/// at (installed after depmod last ran, or shadowed): `(relative path)`.
pub fn unlisted_copies(installed: &Installed, module: &str) -> Vec<String> {
    let listed = installed.file_of(module);
    let mut found = Vec::new();
    walk(&installed.dir, &installed.dir, module, &mut found);
    found.retain(|f| Some(f.as_str()) != listed);
    found.sort();
    found
}

fn walk(base: &Path, dir: &Path, module: &str, found: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        // `build` and `source` are links into the kernel's headers.
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            walk(base, &path, module, found);
        } else if let Some(rel) = path.strip_prefix(base).ok().and_then(|p| p.to_str()) {
            if rel.contains(".ko") && module_name(rel) == module {
                found.push(rel.to_owned());
            }
        }
    }
}

/// A module file's bytes, decompressed by its suffix with the tool that
/// kmod's own builds use (xz, zstd, gzip), when that tool is installed.
pub fn module_bytes(path: &Path) -> Result<Vec<u8>, String> {
    let name = path.to_string_lossy();
    let tool = [(".xz", "xz"), (".zst", "zstd"), (".gz", "gzip")]
        .iter()
        .find(|(suffix, _)| name.ends_with(suffix))
        .map(|(_, tool)| *tool);
    let Some(tool) = tool else {
        return std::fs::read(path).map_err(|e| e.to_string());
    };
    let out = Command::new(tool)
        .args(["-dc", "--"])
        .arg(path)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {tool} to decompress it ({e}): install {tool}"))?;
    if !out.status.success() {
        return Err(format!("{tool} -dc failed on it"));
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(name: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("nvpm-kmods-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("lib/modules/6.1.0-56-amd64")).unwrap();
        root
    }

    #[test]
    fn module_names_as_modprobe_sees_them() {
        assert_eq!(module_name("updates/dkms/nv_peer_mem.ko"), "nv_peer_mem");
        assert_eq!(
            module_name("extra/nvidia_peer_memory/nv_peer_mem.ko.xz"),
            "nv_peer_mem"
        );
        assert_eq!(
            module_name("kernel/drivers/infiniband/core/ib-core.ko.zst"),
            "ib_core"
        );
    }

    #[test]
    fn modules_dep_and_symbols_as_depmod_writes_them() {
        let root = tree("dep");
        let dir = root.join("lib/modules/6.1.0-56-amd64");
        std::fs::write(
            dir.join("modules.dep"),
            "kernel/drivers/infiniband/core/ib_core.ko:\nupdates/ib_core.ko:\nupdates/dkms/nv_peer_mem.ko: updates/ib_core.ko updates/nvidia.ko\n/lib/modules/6.1.0-56-amd64/updates/nvidia.ko:\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("modules.symbols"),
            "# Aliases for symbols, used by symbol_request().\nalias symbol:ib_register_peer_memory_client ib_core\nalias symbol:nvidia_p2p_get_pages nvidia\n",
        )
        .unwrap();
        let i = read(&root, "6.1.0-56-amd64").unwrap();
        assert_eq!(
            i.file_of("nv_peer_mem"),
            Some("updates/dkms/nv_peer_mem.ko")
        );
        // depmod lists the file it chose first; modprobe takes that one
        assert_eq!(
            i.file_of("ib_core"),
            Some("kernel/drivers/infiniband/core/ib_core.ko")
        );
        assert_eq!(i.file_of("nvidia"), Some("updates/nvidia.ko"));
        assert_eq!(i.exporter_of("nvidia_p2p_get_pages"), Some("nvidia"));
        assert_eq!(i.exporter_of("kmalloc"), None);
        assert_eq!(
            i.a_kernel_module(),
            Some("kernel/drivers/infiniband/core/ib_core.ko")
        );
        std::fs::create_dir_all(dir.join("extra")).unwrap();
        std::fs::write(dir.join("extra/nv_peer_mem.ko.xz"), "").unwrap();
        std::fs::create_dir_all(dir.join("updates/dkms")).unwrap();
        std::fs::write(dir.join("updates/dkms/nv_peer_mem.ko"), "").unwrap();
        assert_eq!(
            unlisted_copies(&i, "nv_peer_mem"),
            ["extra/nv_peer_mem.ko.xz"]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn no_modules_dep_is_unreadable_not_empty() {
        let root = tree("nodep");
        let e = read(&root, "6.1.0-56-amd64").unwrap_err();
        assert!(e.to_string().contains("modules.dep: no such file"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
