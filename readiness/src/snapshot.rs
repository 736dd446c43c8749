//! `--dump FILE` and `--from FILE`: what one run of the check read, as a
//! tar archive a user attaches to a ticket, and the check run on it with
//! the same verdict as on the node (docs/readiness.md, "Dump and replay";
//! the model is rdma-core's kernel-boot/rdma_topo, a check with a sysfs
//! dump that replays anywhere).
//!
//! The archive is deterministic: the same reads give the same bytes (no
//! time, owner or order of its own). It holds one folder,
//! `gpudirect-rdma-check-dump/`, with
//! - `README`: what was collected and what was not;
//! - `index`: one line per lookup, tab-separated: `file PATH`, `config
//!   PATH SIZE READABLE OFFSET=DWORD...`, `link PATH TARGET`, `dir PATH
//!   NAME...`, `present PATH`, `missing PATH`, `error PATH WHY`, `env NAME
//!   [VALUE]`, `command KEY [present]`;
//! - `files/PATH`: each `file` line's bytes; `commands/KEY`: each
//!   program's output.
//!
//! PATHs start with `sys/`, `proc/` or `root/` (the file system root).
//! The archive is POSIX ustar (pax headers for names over 100 bytes), as
//! `tar tf` lists it.

use crate::host::{Entry, Host};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const TOP: &str = "gpudirect-rdma-check-dump";
const FORMAT: &str = "# gpudirect-rdma-check dump 1";

const README: &str = "\
gpudirect-rdma-check dump

What one run of gpudirect-rdma-check read on a node, and nothing else:
`index` lists every file, link and directory it looked up (under sys/ for
/sys, proc/ for /proc, root/ for /), files/ holds their contents, and
commands/ the output of the programs it ran (nv_peer_mem-service status;
nvidia-smi's memory query, `topo -m`, GPU index and bus id, compute
capability and `c2c -s`; the CUDA driver's GPUDirect RDMA attribute; none
in the monitoring forms) and the answers no file gives (the CPU's
hypervisor bit, the running user's home directory).

What it holds: PCI functions' identity, class, NUMA node, resources and
the config space dwords of the capability walk (ACS, port type); the RDMA
devices' names and PCI functions; IOMMU group types; which kernel modules
are loaded and their taint; the NVIDIA driver's version line; the kernel
release and the lines of modules.symbols that name the PeerDirect and
DMA-BUF exports; the peer memory clients' versions and counters; NCCL's
settings (NCCL_NET_GDR_LEVEL) from the environment and nccl.conf.

What it does not hold: no host name, IP or MAC address, serial number,
GPU UUID, process, log or key. It does hold the running user's home
directory (NCCL reads ~/.nccl.conf there), whose path may name the user.
Read `index` before you send it.

Replay: gpudirect-rdma-check --from THIS_FILE [--json | --prometheus | ...]
";

/// The archive of @host's record.
pub fn write(host: &Host) -> Vec<u8> {
    let mut index = vec![FORMAT.to_owned()];
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for (path, entry) in host.record() {
        let p = path.display().to_string();
        let line = match entry {
            Entry::File(bytes) => {
                files.push((format!("files/{p}"), bytes));
                format!("file\t{p}")
            }
            Entry::Config {
                size,
                readable,
                dwords,
            } => {
                let mut l = format!("config\t{p}\t{size}\t{readable}");
                for (offset, d) in dwords {
                    l.push_str(&format!("\t{offset:03x}={d:08x}"));
                }
                l
            }
            Entry::Link(target) => format!("link\t{p}\t{}", target.display()),
            Entry::Dir(names) => {
                let mut l = format!("dir\t{p}");
                for n in names {
                    l.push('\t');
                    l.push_str(&n);
                }
                l
            }
            Entry::Present => format!("present\t{p}"),
            Entry::Missing => format!("missing\t{p}"),
            Entry::Error(why) => format!("error\t{p}\t{why}"),
        };
        index.push(line);
    }
    for (name, value) in host.env_record() {
        index.push(match value {
            Some(v) => format!("env\t{name}\t{v}"),
            None => format!("env\t{name}"),
        });
    }
    for (key, output) in host.command_record() {
        match output {
            Some(out) => {
                files.push((format!("commands/{key}"), out.into_bytes()));
                index.push(format!("command\t{key}\tpresent"));
            }
            None => index.push(format!("command\t{key}")),
        }
    }
    let mut tar = Tar::default();
    tar.file(&format!("{TOP}/README"), README.as_bytes());
    tar.file(
        &format!("{TOP}/index"),
        (index.join("\n") + "\n").as_bytes(),
    );
    files.sort();
    for (name, bytes) in files {
        tar.file(&format!("{TOP}/{name}"), &bytes);
    }
    tar.finish()
}

/// A Host over the archive @bytes, or why it is not one.
pub fn read(bytes: &[u8]) -> Result<Host, String> {
    let members = untar(bytes)?;
    let get = |name: &str| members.get(&format!("{TOP}/{name}"));
    let index = get("index").ok_or("no gpudirect-rdma-check-dump/index in it")?;
    let index = std::str::from_utf8(index).map_err(|_| "its index is not UTF-8 text")?;
    let mut lines = index.lines();
    if lines.next() != Some(FORMAT) {
        return Err(format!("its index does not start with `{FORMAT}`"));
    }
    let mut entries = BTreeMap::new();
    let mut env = BTreeMap::new();
    let mut commands = BTreeMap::new();
    for (n, line) in lines.enumerate() {
        let bad = || format!("index line {}: `{line}` is not understood", n + 2);
        let f: Vec<&str> = line.split('\t').collect();
        let path = |i: usize| -> Result<PathBuf, String> {
            let p = f.get(i).ok_or_else(bad)?;
            checked_path(p).ok_or_else(bad)
        };
        match f[0] {
            "file" => {
                let p = path(1)?;
                let data = get(&format!("files/{}", p.display())).ok_or_else(|| {
                    format!("index line {}: no files/{} in it", n + 2, p.display())
                })?;
                entries.insert(p, Entry::File(data.clone()));
            }
            "config" => {
                let p = path(1)?;
                let num = |i: usize| f.get(i).and_then(|v| v.parse::<usize>().ok());
                let (Some(size), Some(readable)) = (num(2), num(3)) else {
                    return Err(bad());
                };
                let mut dwords = BTreeMap::new();
                for d in &f[4..] {
                    let (o, v) = d.split_once('=').ok_or_else(bad)?;
                    let o = usize::from_str_radix(o, 16).map_err(|_| bad())?;
                    let v = u32::from_str_radix(v, 16).map_err(|_| bad())?;
                    dwords.insert(o, v);
                }
                entries.insert(
                    p,
                    Entry::Config {
                        size,
                        readable,
                        dwords,
                    },
                );
            }
            "link" => {
                let target = f.get(2).ok_or_else(bad)?;
                entries.insert(path(1)?, Entry::Link(PathBuf::from(target)));
            }
            "dir" => {
                let names = f[2..].iter().map(|s| (*s).to_owned()).collect();
                entries.insert(path(1)?, Entry::Dir(names));
            }
            "present" => {
                entries.insert(path(1)?, Entry::Present);
            }
            "missing" => {
                entries.insert(path(1)?, Entry::Missing);
            }
            "error" => {
                let why = f.get(2).ok_or_else(bad)?;
                entries.insert(path(1)?, Entry::Error((*why).to_owned()));
            }
            "env" => {
                let name = f.get(1).ok_or_else(bad)?;
                env.insert((*name).to_owned(), f.get(2).map(|v| (*v).to_owned()));
            }
            "command" => {
                let key = f.get(1).ok_or_else(bad)?;
                let out = match f.get(2) {
                    Some(_) => {
                        let data = get(&format!("commands/{key}")).ok_or_else(bad)?;
                        Some(String::from_utf8_lossy(data).into_owned())
                    }
                    None => None,
                };
                commands.insert((*key).to_owned(), out);
            }
            _ => return Err(bad()),
        }
    }
    Ok(Host::replay(entries, env, commands))
}

/// A dump's path: relative, under sys/, proc/ or root/, no `..`: an
/// index line never names a file outside the dump.
fn checked_path(p: &str) -> Option<PathBuf> {
    let path = Path::new(p);
    let mut parts = path.components();
    let first = parts.next()?;
    let ok_root = matches!(first, std::path::Component::Normal(n) if n == "sys" || n == "proc" || n == "root");
    let rest_ok = parts.all(|c| matches!(c, std::path::Component::Normal(_)));
    (ok_root && rest_ok).then(|| path.to_path_buf())
}

/// A POSIX ustar writer: regular files only, mode 0644, owner 0, time 0.
#[derive(Default)]
struct Tar {
    out: Vec<u8>,
}

impl Tar {
    fn header(&mut self, name: &str, size: usize, kind: u8) {
        let mut h = [0u8; 512];
        let put = |h: &mut [u8; 512], at: usize, bytes: &[u8]| {
            h[at..at + bytes.len()].copy_from_slice(bytes);
        };
        put(&mut h, 0, &name.as_bytes()[..name.len().min(100)]);
        put(&mut h, 100, b"0000644\0");
        put(&mut h, 108, b"0000000\0");
        put(&mut h, 116, b"0000000\0");
        put(&mut h, 124, format!("{size:011o}\0").as_bytes());
        put(&mut h, 136, b"00000000000\0");
        put(&mut h, 148, b"        ");
        h[156] = kind;
        put(&mut h, 257, b"ustar\0");
        put(&mut h, 263, b"00");
        let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
        put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
        self.out.extend_from_slice(&h);
    }

    fn data(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
        let pad = (512 - bytes.len() % 512) % 512;
        self.out.resize(self.out.len() + pad, 0);
    }

    fn file(&mut self, name: &str, bytes: &[u8]) {
        if name.len() > 100 {
            // a pax extended header carries the whole name (POSIX
            // pax(1), "pax Extended Header"): "LEN path=NAME\n", LEN
            // counting itself
            let body = format!(" path={name}\n");
            let mut len = body.len() + 1;
            while format!("{len}{body}").len() != len {
                len += 1;
            }
            let record = format!("{len}{body}");
            self.header("././@PaxHeader", record.len(), b'x');
            self.data(record.as_bytes());
        }
        self.header(name, bytes.len(), b'0');
        self.data(bytes);
    }

    fn finish(mut self) -> Vec<u8> {
        self.out.resize(self.out.len() + 1024, 0);
        self.out
    }
}

/// The regular files of a ustar/pax archive by name.
fn untar(bytes: &[u8]) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let mut out = BTreeMap::new();
    let mut at = 0;
    let mut long_name: Option<String> = None;
    let octal = |field: &[u8]| -> Option<usize> {
        let s = std::str::from_utf8(field).ok()?;
        let s = s.trim_matches(|c: char| c == '\0' || c == ' ');
        if s.is_empty() {
            return Some(0);
        }
        usize::from_str_radix(s, 8).ok()
    };
    while at + 512 <= bytes.len() {
        let h = &bytes[at..at + 512];
        if h.iter().all(|b| *b == 0) {
            break;
        }
        let size = octal(&h[124..136]).ok_or("not a tar archive (a bad size field)")?;
        let start = at + 512;
        let end = start
            .checked_add(size)
            .filter(|e| *e <= bytes.len())
            .ok_or("a truncated tar archive")?;
        let data = &bytes[start..end];
        let cut = |f: &[u8]| {
            let n = f.iter().position(|b| *b == 0).unwrap_or(f.len());
            String::from_utf8_lossy(&f[..n]).into_owned()
        };
        let mut name = cut(&h[0..100]);
        if &h[257..262] == b"ustar" {
            let prefix = cut(&h[345..500]);
            if !prefix.is_empty() {
                name = format!("{prefix}/{name}");
            }
        }
        match h[156] {
            b'x' => {
                let text = String::from_utf8_lossy(data);
                long_name = text.lines().find_map(|l| {
                    l.split_once(' ')
                        .and_then(|(_, kv)| kv.strip_prefix("path="))
                        .map(str::to_owned)
                });
            }
            b'0' | 0 => {
                out.insert(long_name.take().unwrap_or(name), data.to_vec());
            }
            _ => {
                long_name = None;
            }
        }
        at = start + size.div_ceil(512) * 512;
    }
    if out.is_empty() {
        return Err("not a tar archive, or an empty one".to_owned());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_round_trip_through_pax_headers() {
        let mut t = Tar::default();
        let long = format!(
            "{TOP}/files/sys/devices/{}/config",
            "0000:00:01.0/".repeat(12)
        );
        t.file(&long, b"abc");
        t.file("short", b"");
        let m = untar(&t.finish()).unwrap();
        assert_eq!(m.get(&long).map(Vec::as_slice), Some(&b"abc"[..]));
        assert_eq!(m.get("short").map(Vec::len), Some(0));
    }

    #[test]
    fn an_index_path_outside_the_dump_is_refused() {
        assert!(checked_path("sys/bus/pci/devices").is_some());
        assert!(checked_path("sys/../../etc/passwd").is_none());
        assert!(checked_path("/etc/passwd").is_none());
        assert!(checked_path("etc/passwd").is_none());
    }

    #[test]
    fn garbage_is_not_a_dump() {
        assert!(read(b"not a tar").is_err());
        let mut t = Tar::default();
        t.file(&format!("{TOP}/index"), b"# something else\n");
        assert!(read(&t.finish()).unwrap_err().contains("does not start"));
    }
}
