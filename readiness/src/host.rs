//! The files the check reads, read once: every lookup goes through one
//! `Host`, which answers it from the node (or from a dump, `--from`) the
//! first time and from its record after, so a decision that needs a file
//! twice costs one read, and the record is exactly what the check read:
//! `--dump` writes it (snapshot.rs) and a replay of it reaches the same
//! verdict (docs/readiness.md, "Dump and replay").
//!
//! The roots tests replace: sysfs (`NV_PEER_MEM_SYSFS`, default `/sys`),
//! procfs (`NV_PEER_MEM_PROC`, default `/proc`), the file system root for
//! `/lib/modules` and `/etc/nccl.conf` (`NV_PEER_MEM_ROOT`, default `/`):
//! the same variables as `nv_peer_mem-service`. Nothing here writes.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

/// What one lookup found; the record of a run is a map of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A whole file's bytes.
    File(Vec<u8>),
    /// PCI config space, read by the dwords a capability walk needs: the
    /// size the kernel gives (`st_size`: 256 or 4096), how many bytes this
    /// reader may read (64 for non-root: pci-sysfs.c, pci_read_config) and
    /// the dwords read, by offset.
    Config {
        size: usize,
        readable: usize,
        dwords: BTreeMap<usize, u32>,
    },
    /// A symbolic link's target, as stored (sysfs's are relative).
    Link(PathBuf),
    /// A directory's names, sorted.
    Dir(Vec<String>),
    /// There (its metadata was read), contents not read.
    Present,
    /// Neither file, link nor directory.
    Missing,
    /// There, but could not be read: why.
    Error(String),
}

/// A file or directory that could not be read, and why: becomes a line of
/// the report ("could not read ..."), never a crash or a guessed verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub path: PathBuf,
    pub why: String,
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "could not read {}: {}", self.path.display(), self.why)
    }
}

impl Unreadable {
    pub fn new(path: &Path, why: impl Into<String>) -> Self {
        Unreadable {
            path: path.to_path_buf(),
            why: why.into(),
        }
    }
}

fn io_why(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => error.to_string(),
    }
}

/// Where the answers come from.
#[derive(Debug, Clone)]
enum Source {
    /// The node's own files.
    Live,
    /// A dump: its entries by path (`sys/...`, `proc/...`, `root/...`).
    Dump(BTreeMap<PathBuf, Entry>),
}

/// The node as the check reads it.
#[derive(Debug)]
pub struct Host {
    pub sys: PathBuf,
    pub proc: PathBuf,
    /// The root that holds `/lib/modules` and `/etc`.
    pub root: PathBuf,
    source: Source,
    /// Every lookup so far, by the path asked for.
    seen: RefCell<BTreeMap<PathBuf, Entry>>,
    /// The settings from the environment the rules read
    /// (`NCCL_NET_GDR_LEVEL`), recorded like files.
    env: RefCell<BTreeMap<String, Option<String>>>,
    /// Outputs of programs (the service helper, nvidia-smi, the CUDA
    /// child) and answers the node gives otherwise than by a file (the
    /// user's home from getpwuid, the CPU's hypervisor bit), recorded like
    /// files.
    commands: RefCell<BTreeMap<String, Option<String>>>,
    /// The keys of the programs this run asked for (`program`), whether
    /// run or answered from a dump: the monitoring forms ask none.
    programs_asked: RefCell<BTreeSet<String>>,
}

impl Host {
    /// The roots from the environment, as the service helper takes them.
    pub fn from_env() -> Self {
        let root = |var: &str, default: &str| {
            std::env::var_os(var)
                .filter(|v| !v.is_empty())
                .map_or_else(|| PathBuf::from(default), PathBuf::from)
        };
        Host::live(
            root("NV_PEER_MEM_SYSFS", "/sys"),
            root("NV_PEER_MEM_PROC", "/proc"),
            root("NV_PEER_MEM_ROOT", "/"),
        )
    }

    pub fn live(sys: PathBuf, proc: PathBuf, root: PathBuf) -> Self {
        Host {
            sys,
            proc,
            root,
            source: Source::Live,
            seen: RefCell::default(),
            env: RefCell::default(),
            commands: RefCell::default(),
            programs_asked: RefCell::default(),
        }
    }

    /// A dump's entries; its roots are the relative `sys`, `proc` and
    /// `root` the entries are named under.
    pub fn replay(
        entries: BTreeMap<PathBuf, Entry>,
        env: BTreeMap<String, Option<String>>,
        commands: BTreeMap<String, Option<String>>,
    ) -> Self {
        Host {
            sys: PathBuf::from("sys"),
            proc: PathBuf::from("proc"),
            root: PathBuf::from("root"),
            source: Source::Dump(entries),
            seen: RefCell::default(),
            env: RefCell::new(env),
            commands: RefCell::new(commands),
            programs_asked: RefCell::default(),
        }
    }

    pub fn is_replay(&self) -> bool {
        matches!(self.source, Source::Dump(_))
    }

    /// @path renamed from under the root it lies in (the deepest of
    /// sys, proc and root: /sys lies under /) to under that root's name in
    /// @names; None outside all three.
    fn renamed(&self, path: &Path, names: [&str; 3]) -> Option<PathBuf> {
        let roots = [&self.sys, &self.proc, &self.root];
        let mut best: Option<(usize, PathBuf)> = None;
        for (root, name) in roots.into_iter().zip(names) {
            if let Ok(rest) = path.strip_prefix(root) {
                let depth = root.components().count();
                if best.as_ref().is_none_or(|(d, _)| depth > *d) {
                    best = Some((depth, Path::new(name).join(rest)));
                }
            }
        }
        best.map(|(_, p)| p)
    }

    /// @path as the node names it (`/sys/...`, `/proc/...`, `/...`),
    /// wherever its tree or dump lies: what the report prints, the same
    /// live and replayed.
    pub fn shown(&self, path: &Path) -> PathBuf {
        self.renamed(path, ["/sys", "/proc", "/"])
            .unwrap_or_else(|| path.to_path_buf())
    }

    pub fn sys_path(&self, relative: &str) -> PathBuf {
        self.sys.join(relative)
    }

    pub fn proc_path(&self, relative: &str) -> PathBuf {
        self.proc.join(relative)
    }

    pub fn root_path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    /// Every lookup so far, named as a dump names it (`sys/...`,
    /// `proc/...`, `root/...`); lookups outside the three roots are left
    /// out (a dump holds nothing else).
    pub fn record(&self) -> BTreeMap<PathBuf, Entry> {
        self.seen
            .borrow()
            .iter()
            .filter_map(|(path, entry)| {
                let named = self.renamed(path, ["sys", "proc", "root"])?;
                Some((named, entry.clone()))
            })
            .collect()
    }

    pub fn env_record(&self) -> BTreeMap<String, Option<String>> {
        self.env.borrow().clone()
    }

    pub fn command_record(&self) -> BTreeMap<String, Option<String>> {
        self.commands.borrow().clone()
    }

    /// The entry for @path: recorded, else looked up once.
    fn entry(&self, path: &Path, look: impl FnOnce(&Path) -> Entry) -> Entry {
        // Present says only that it exists: a read reads it.
        if let Some(e) = self.seen.borrow().get(path) {
            if *e != Entry::Present {
                return e.clone();
            }
        }
        let e = match &self.source {
            Source::Live => look(path),
            Source::Dump(entries) => entries.get(path).cloned().unwrap_or(Entry::Missing),
        };
        self.seen.borrow_mut().insert(path.to_path_buf(), e.clone());
        e
    }

    fn file_entry(&self, path: &Path) -> Entry {
        self.entry(path, |p| match fs::read(p) {
            Ok(bytes) => Entry::File(bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Entry::Missing,
            Err(e) => Entry::Error(io_why(&e)),
        })
    }

    /// Whether anything is at @path (a file, link or directory). Answers
    /// from what was already read of it, else from its metadata, which is
    /// recorded as the directory it is (names not listed) or a file.
    pub fn exists(&self, path: &Path) -> bool {
        if let Some(e) = self.seen.borrow().get(path) {
            return !matches!(e, Entry::Missing);
        }
        match &self.source {
            Source::Dump(entries) => {
                if let Some(e) = entries.get(path) {
                    return !matches!(e, Entry::Missing);
                }
                // a directory the dump does not name, but under which
                // something was found
                entries
                    .iter()
                    .any(|(k, e)| k != path && k.starts_with(path) && !matches!(e, Entry::Missing))
            }
            Source::Live => {
                let there = fs::symlink_metadata(path).is_ok();
                let e = if there {
                    Entry::Present
                } else {
                    Entry::Missing
                };
                self.seen.borrow_mut().insert(path.to_path_buf(), e);
                there
            }
        }
    }

    /// A text file, trailing newline removed.
    pub fn text(&self, path: &Path) -> Result<String, Unreadable> {
        let bytes = self.bytes(path)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| Unreadable::new(&self.shown(path), "not UTF-8 text"))?;
        Ok(text.trim_end_matches('\n').to_owned())
    }

    /// A whole file.
    pub fn bytes(&self, path: &Path) -> Result<Vec<u8>, Unreadable> {
        match self.file_entry(path) {
            Entry::File(b) => Ok(b),
            Entry::Missing => Err(Unreadable::new(&self.shown(path), "no such file")),
            Entry::Error(why) => Err(Unreadable::new(&self.shown(path), why)),
            Entry::Config { .. } | Entry::Link(_) | Entry::Dir(_) | Entry::Present => {
                Err(Unreadable::new(&self.shown(path), "not a file"))
            }
        }
    }

    /// The lines of a text file that contain one of @words, the only
    /// ones kept (and dumped): for a large file of which the check needs a
    /// few lines (modules.symbols).
    pub fn lines_with(&self, path: &Path, words: &[&str]) -> Result<Vec<String>, Unreadable> {
        let e = self.entry(path, |p| {
            use std::io::BufRead;
            let file = match fs::File::open(p) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Entry::Missing,
                Err(e) => return Entry::Error(io_why(&e)),
            };
            let mut kept = Vec::new();
            for line in io::BufReader::with_capacity(1 << 16, file).split(b'\n') {
                match line {
                    Ok(l) => {
                        if words.iter().any(|w| contains(&l, w.as_bytes())) {
                            kept.extend_from_slice(&l);
                            kept.push(b'\n');
                        }
                    }
                    Err(e) => return Entry::Error(io_why(&e)),
                }
            }
            Entry::File(kept)
        });
        match e {
            Entry::File(b) => Ok(String::from_utf8_lossy(&b)
                .lines()
                .filter(|l| words.iter().any(|w| l.contains(w)))
                .map(str::to_owned)
                .collect()),
            Entry::Missing => Err(Unreadable::new(&self.shown(path), "no such file")),
            Entry::Error(why) => Err(Unreadable::new(&self.shown(path), why)),
            _ => Err(Unreadable::new(&self.shown(path), "not a file")),
        }
    }

    /// A hexadecimal sysfs attribute such as `vendor` (`0x10de`).
    pub fn hex(&self, path: &Path) -> Result<u64, Unreadable> {
        let text = self.text(path)?;
        let digits = text.trim().strip_prefix("0x").unwrap_or(text.trim());
        u64::from_str_radix(digits, 16).map_err(|_| {
            Unreadable::new(
                path,
                format!("`{}` is not a hexadecimal number", text.trim()),
            )
        })
    }

    /// The names in a directory, sorted (sysfs order is not stable across
    /// kernels; the report's is).
    pub fn names(&self, path: &Path) -> Result<Vec<String>, Unreadable> {
        let e = self.entry(path, |p| {
            let list = || -> io::Result<Vec<String>> {
                let mut names = Vec::new();
                for entry in fs::read_dir(p)? {
                    names.push(entry?.file_name().to_string_lossy().into_owned());
                }
                names.sort();
                Ok(names)
            };
            match list() {
                Ok(names) => Entry::Dir(names),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Entry::Missing,
                Err(e) => Entry::Error(io_why(&e)),
            }
        });
        match e {
            Entry::Dir(names) => Ok(names),
            Entry::Missing => Err(Unreadable::new(&self.shown(path), "no such file")),
            Entry::Error(why) => Err(Unreadable::new(&self.shown(path), why)),
            _ => Err(Unreadable::new(&self.shown(path), "not a directory")),
        }
    }

    /// Where a symlink points, resolved against its directory and
    /// normalised (`..` removed) without touching the target, so that a fake
    /// tree's or a dump's links resolve inside it.
    pub fn link_target(&self, path: &Path) -> Result<PathBuf, Unreadable> {
        let e = self.entry(path, |p| match fs::read_link(p) {
            Ok(t) => Entry::Link(t),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Entry::Missing,
            Err(e) => Entry::Error(io_why(&e)),
        });
        let target = match e {
            Entry::Link(t) => t,
            Entry::Missing => return Err(Unreadable::new(&self.shown(path), "no such file")),
            Entry::Error(why) => return Err(Unreadable::new(&self.shown(path), why)),
            _ => return Err(Unreadable::new(&self.shown(path), "not a symbolic link")),
        };
        let joined = match path.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
        let mut out = PathBuf::new();
        for part in joined.components() {
            match part {
                Component::ParentDir => {
                    out.pop();
                }
                Component::CurDir => {}
                other => out.push(other),
            }
        }
        Ok(out)
    }

    /// Config space at @path, read only by the dwords @offsets asks for
    /// through the returned reader (pread: a sysfs read costs the kernel
    /// one config access per dword, trapped in a VM; reading all 4096
    /// bytes of every bridge would cost a thousand).
    pub fn config(&self, path: &Path) -> Result<ConfigReader<'_>, Unreadable> {
        let e = self.entry(path, |p| {
            use std::os::unix::fs::MetadataExt;
            match fs::File::open(p).and_then(|f| Ok((f.metadata()?.size(), f))) {
                Ok((size, file)) => {
                    // What this reader may read: the first byte past 64
                    // answers whether it is root (pci_read_config cuts
                    // unprivileged reads at 64 bytes).
                    use std::os::unix::fs::FileExt;
                    let mut b = [0u8; 4];
                    let readable = match file.read_at(&mut b, 64) {
                        Ok(4) => size as usize,
                        _ => 64.min(size as usize),
                    };
                    Entry::Config {
                        size: size as usize,
                        readable,
                        dwords: BTreeMap::new(),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => Entry::Missing,
                Err(e) => Entry::Error(io_why(&e)),
            }
        });
        match e {
            Entry::Config { size, readable, .. } => Ok(ConfigReader {
                host: self,
                path: path.to_path_buf(),
                size,
                readable,
            }),
            // A whole file (a test tree's, or a dump of another shape):
            // its length is what the reader could read.
            Entry::File(bytes) => Ok(ConfigReader {
                host: self,
                path: path.to_path_buf(),
                size: bytes.len(),
                readable: bytes.len(),
            }),
            Entry::Missing => Err(Unreadable::new(&self.shown(path), "no such file")),
            Entry::Error(why) => Err(Unreadable::new(&self.shown(path), why)),
            _ => Err(Unreadable::new(&self.shown(path), "not a file")),
        }
    }

    /// One dword of config space (little-endian), read once.
    fn config_dword(&self, path: &Path, offset: usize) -> Option<u32> {
        let mut seen = self.seen.borrow_mut();
        match seen.get_mut(path)? {
            Entry::File(bytes) => {
                let b = bytes.get(offset..offset + 4)?;
                Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            Entry::Config {
                readable, dwords, ..
            } => {
                if offset + 4 > *readable {
                    return None;
                }
                if let Some(d) = dwords.get(&offset) {
                    return Some(*d);
                }
                let value = match &self.source {
                    // a dump holds what was read; an unread dword reads
                    // as an absent register does
                    Source::Dump(_) => 0xffff_ffff,
                    Source::Live => {
                        use std::os::unix::fs::FileExt;
                        let mut b = [0u8; 4];
                        let file = fs::File::open(path).ok()?;
                        file.read_exact_at(&mut b, offset as u64).ok()?;
                        u32::from_le_bytes(b)
                    }
                };
                dwords.insert(offset, value);
                Some(value)
            }
            _ => None,
        }
    }

    /// A setting of the environment the rules read, recorded.
    pub fn env_var(&self, name: &str) -> Option<String> {
        if let Some(v) = self.env.borrow().get(name) {
            return v.clone();
        }
        let v = match &self.source {
            Source::Live => std::env::var(name).ok(),
            Source::Dump(_) => None,
        };
        self.env.borrow_mut().insert(name.to_owned(), v.clone());
        v
    }

    /// A program's output under @key, run by @run on the node (a child
    /// process), recorded as `answer` records; the key joins
    /// `programs_asked`.
    pub fn program(&self, key: &str, run: impl FnOnce() -> Option<String>) -> Option<String> {
        self.programs_asked.borrow_mut().insert(key.to_owned());
        self.answer(key, run)
    }

    /// The programs this run asked for, by key.
    pub fn programs_asked(&self) -> BTreeSet<String> {
        self.programs_asked.borrow().clone()
    }

    /// An answer under @key that no file gives, from @run on the node,
    /// recorded; a replay answers from the dump (None where it holds
    /// none).
    pub fn answer(&self, key: &str, run: impl FnOnce() -> Option<String>) -> Option<String> {
        if let Some(v) = self.commands.borrow().get(key) {
            return v.clone();
        }
        let v = match &self.source {
            Source::Live => run(),
            Source::Dump(_) => None,
        };
        self.commands.borrow_mut().insert(key.to_owned(), v.clone());
        v
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Reads config space by the dword, through the Host's record.
pub struct ConfigReader<'a> {
    host: &'a Host,
    path: PathBuf,
    /// The size the kernel gives the file: 256 without extended config
    /// space, 4096 with it.
    pub size: usize,
    /// How many bytes this reader may read: 64 unless root.
    pub readable: usize,
}

impl ConfigReader<'_> {
    pub fn dword(&self, offset: usize) -> Option<u32> {
        if offset % 4 != 0 {
            return None;
        }
        self.host.config_dword(&self.path, offset)
    }
}
