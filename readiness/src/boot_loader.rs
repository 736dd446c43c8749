//! Which kernel the node boots next, read from the boot loader's files
//! the way the boot loader reads them (docs/next-boot.md, "Which kernel
//! boots next", has every rule and its source): GRUB's generated grub.cfg
//! and its environment block (one-shot `next_entry`, `saved_entry`), BLS
//! entries where grub.cfg runs `blscfg`, systemd-boot's loader.conf, and
//! Debian's /vmlinuz link as the last resort. Where the rules do not
//! decide, the answer is "cannot tell", never a guess.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The boot loader's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextBoot {
    /// The kernel release, when the rules decide it.
    pub release: Option<String>,
    /// How it was decided, or why it could not be.
    pub how: String,
    /// That entry's kernel command line, when the entry gives one.
    pub cmdline: Option<String>,
}

fn cannot(how: String) -> NextBoot {
    NextBoot {
        release: None,
        how,
        cmdline: None,
    }
}

/// The next boot's kernel under @root.
pub fn next_boot(root: &Path) -> NextBoot {
    for dir in ["boot/grub", "boot/grub2"] {
        let cfg = root.join(dir).join("grub.cfg");
        if let Ok(text) = std::fs::read_to_string(&cfg) {
            let env = grubenv(&root.join(dir).join("grubenv"));
            return grub(root, &cfg, &text, &env);
        }
    }
    for dir in ["efi", "boot", "boot/efi"] {
        let conf = root.join(dir).join("loader/loader.conf");
        if conf.is_file() {
            return systemd_boot(root, &root.join(dir), &conf);
        }
    }
    for link in ["vmlinuz", "boot/vmlinuz"] {
        if let Ok(target) = std::fs::read_link(root.join(link)) {
            if let Some(release) = release_of(&target.to_string_lossy()) {
                return NextBoot {
                    release: Some(release),
                    how: format!(
                        "/{link} points at {} (no GRUB or systemd-boot configuration found)",
                        target.display()
                    ),
                    cmdline: None,
                };
            }
        }
    }
    cannot("cannot tell: no /boot/grub/grub.cfg, /boot/grub2/grub.cfg, loader/loader.conf or /vmlinuz link".into())
}

/// `vmlinuz-<release>` (or `vmlinux-`, `Image-`) anywhere in a path.
pub fn release_of(path: &str) -> Option<String> {
    let base = path.rsplit('/').next()?;
    ["vmlinuz-", "vmlinux-", "Image-"]
        .iter()
        .find_map(|p| base.strip_prefix(p))
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
}

/// GRUB's environment block: `key=value` lines, `#` padding.
pub fn grubenv(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// A menu item of grub.cfg.
#[derive(Debug)]
enum Item {
    Entry {
        title: String,
        id: Option<String>,
        linux: Option<String>,
    },
    Submenu {
        title: String,
        id: Option<String>,
        items: Vec<Item>,
    },
    /// Where `blscfg` inserts the BLS entries.
    Bls,
}

/// The first quoted word of a `menuentry`/`submenu` line, and the word
/// after `$menuentry_id_option` (grub-mkconfig writes `--id` that way).
fn title_and_id(line: &str) -> (String, Option<String>) {
    let quoted = |s: &str| -> Option<(String, usize)> {
        let start = s.find(['\'', '"'])?;
        let q = s.as_bytes()[start] as char;
        let end = s[start + 1..].find(q)? + start + 1;
        Some((s[start + 1..end].to_owned(), end + 1))
    };
    let (title, _) = quoted(line).unwrap_or_default();
    let id = line
        .find("$menuentry_id_option")
        .or_else(|| line.find("--id"))
        .and_then(|at| quoted(&line[at..]).map(|(id, _)| id));
    (title, id)
}

fn parse_items(lines: &mut std::iter::Peekable<std::str::Lines>) -> Vec<Item> {
    let mut items = Vec::new();
    while let Some(raw) = lines.next() {
        let line = raw.trim();
        if line == "}" {
            break;
        }
        if line.starts_with("menuentry ") {
            let (title, id) = title_and_id(line);
            let linux = block_body(lines)
                .into_iter()
                .find(|b| {
                    b.starts_with("linux ")
                        || b.starts_with("linux\t")
                        || b.starts_with("linuxefi ")
                })
                .map(|b| {
                    b.split_once(char::is_whitespace)
                        .map_or("", |(_, r)| r)
                        .trim()
                        .to_owned()
                });
            items.push(Item::Entry { title, id, linux });
        } else if line.starts_with("submenu ") {
            let (title, id) = title_and_id(line);
            let inner = parse_items(lines);
            items.push(Item::Submenu {
                title,
                id,
                items: inner,
            });
        } else if line == "blscfg" {
            items.push(Item::Bls);
        } else if line.ends_with('{') {
            // Another block (`function load_video {`): not a menu item,
            // and its closing brace is not this level's.
            block_body(lines);
        }
    }
    items
}

/// The trimmed lines of a block whose opening `{` was just read, up to
/// and including the line that closes it (braces counted per line).
fn block_body<'a>(lines: &mut std::iter::Peekable<std::str::Lines<'a>>) -> Vec<&'a str> {
    let mut body = Vec::new();
    let mut depth = 1;
    for line in lines.by_ref() {
        let b = line.trim();
        depth += b.matches('{').count();
        depth -= b.matches('}').count().min(depth);
        body.push(b);
        if depth == 0 {
            break;
        }
    }
    body
}

/// The value grub.cfg gives `default` when no `next_entry` is set: the
/// `set default=` that is not `${next_entry}` (00_header's else branch).
fn configured_default(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("set default="))
        .map(|v| v.trim_matches('"').to_owned())
        .find(|v| v != "${next_entry}")
}

fn grub(root: &Path, cfg: &Path, text: &str, env: &BTreeMap<String, String>) -> NextBoot {
    let items = parse_items(&mut text.lines().peekable());
    let (value, source) = match env.get("next_entry").filter(|v| !v.is_empty()) {
        Some(v) => (
            v.clone(),
            "next_entry (grub-reboot's one-shot) in grubenv".to_owned(),
        ),
        None => match configured_default(text) {
            Some(v) if v == "${saved_entry}" => (
                env.get("saved_entry").cloned().unwrap_or_default(),
                "saved_entry in grubenv (GRUB_DEFAULT=saved)".to_owned(),
            ),
            Some(v) => (v, format!("set default in {}", cfg.display())),
            None => (
                "0".to_owned(),
                format!("{} sets no default: GRUB's is 0", cfg.display()),
            ),
        },
    };
    let value = if value.is_empty() {
        "0".to_owned()
    } else {
        value
    };
    let has_bls = items.iter().any(|i| matches!(i, Item::Bls));
    if has_bls {
        return bls(root, cfg, &value, &source);
    }
    if let Some(decided) = resolve(&items, &value, &source) {
        return decided;
    }
    // GRUB boots entry 0 when its default names no entry (upstream
    // grub-core/normal/menu.c, get_entry_number: "not found or out of
    // range" falls back to 0).
    let fallback = format!(
        "{source}; `{value}` names no entry of {}, so GRUB falls back to entry 0",
        cfg.display()
    );
    resolve(&items, "0", &fallback)
        .unwrap_or_else(|| cannot(format!("cannot tell: {} has no menu entry", cfg.display())))
}

/// The entry @value names in @items (a number, title or id per level,
/// levels joined by `>`), as GRUB resolves `default`; None when it names
/// none.
fn resolve(items: &[Item], value: &str, source: &str) -> Option<NextBoot> {
    let mut level = items;
    let mut path = Vec::new();
    let parts: Vec<&str> = value.split('>').collect();
    for (n, part) in parts.iter().enumerate() {
        let found = match part.parse::<usize>() {
            Ok(i) => level.get(i),
            Err(_) => level.iter().find(|it| match it {
                Item::Entry { title, id, .. } | Item::Submenu { title, id, .. } => {
                    title == part || id.as_deref() == Some(part)
                }
                Item::Bls => false,
            }),
        };
        match found {
            Some(Item::Submenu { title, items, .. }) if n + 1 < parts.len() => {
                path.push(title.clone());
                level = items;
            }
            Some(Item::Entry { title, linux, .. }) if n + 1 == parts.len() => {
                path.push(title.clone());
                let how = format!(
                    "GRUB: default `{value}` from {source}: \"{}\"",
                    path.join(" > ")
                );
                let Some(linux) = linux else {
                    return Some(cannot(format!("cannot tell: {how} has no linux line")));
                };
                let (image, args) = linux.split_once(char::is_whitespace).unwrap_or((linux, ""));
                return Some(match release_of(image) {
                    Some(release) => NextBoot {
                        release: Some(release),
                        how,
                        cmdline: Some(args.trim().to_owned()),
                    },
                    None => cannot(format!(
                        "cannot tell: {how} boots {image}, whose release is not in its name"
                    )),
                });
            }
            _ => return None,
        }
    }
    None
}

/// grub.cfg runs `blscfg`: the entries are /boot/loader/entries/*.conf and
/// a saved default is an entry's id (its file name without `.conf`).
fn bls(root: &Path, cfg: &Path, value: &str, source: &str) -> NextBoot {
    let entry = bls_entries_dir(root).join(format!("{value}.conf"));
    match std::fs::read_to_string(&entry) {
        Ok(text) => bls_entry(
            &entry,
            &text,
            format!("GRUB with BLS: default `{value}` from {source}"),
        ),
        Err(_) => cannot(format!(
            "cannot tell: {} runs blscfg and its default `{value}` (from {source}) is not a BLS entry id (no {}); a numbered default depends on blscfg's sort",
            cfg.display(),
            entry.display()
        )),
    }
}

fn bls_entries_dir(root: &Path) -> PathBuf {
    root.join("boot/loader/entries")
}

/// A BLS entry's kernel: its `linux` key (`/vmlinuz-<release>`), and
/// `options` as the command line.
fn bls_entry(path: &Path, text: &str, how: String) -> NextBoot {
    let key = |k: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(k).filter(|r| r.starts_with([' ', '\t'])))
            .map(|r| r.trim().to_owned())
    };
    match key("linux").as_deref().and_then(release_of) {
        Some(release) => NextBoot {
            release: Some(release),
            how: format!("{how}: {}", path.display()),
            cmdline: key("options"),
        },
        None => cannot(format!(
            "cannot tell: {how}: {} has no linux /vmlinuz-<release> line",
            path.display()
        )),
    }
}

/// systemd-boot: the one-shot and default EFI variables, else loader.conf's
/// `default`, naming an entry of <esp>/loader/entries exactly.
fn systemd_boot(root: &Path, esp: &Path, conf: &Path) -> NextBoot {
    const VENDOR: &str = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f";
    let var = |name: &str| -> Option<String> {
        let b =
            std::fs::read(root.join(format!("sys/firmware/efi/efivars/{name}-{VENDOR}"))).ok()?;
        let units: Vec<u16> = b
            .get(4..)?
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .take_while(|&u| u != 0)
            .collect();
        String::from_utf16(&units).ok().filter(|s| !s.is_empty())
    };
    let text = std::fs::read_to_string(conf).unwrap_or_default();
    let configured = text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some("default"))
            .then(|| w.next().map(str::to_owned))
            .flatten()
    });
    let (value, source) = match (
        var("LoaderEntryOneShot"),
        var("LoaderEntryDefault"),
        configured,
    ) {
        (Some(v), _, _) => (v, "the EFI variable LoaderEntryOneShot".to_owned()),
        (None, Some(v), _) => (v, "the EFI variable LoaderEntryDefault".to_owned()),
        (None, None, Some(v)) => (v, format!("`default` in {}", conf.display())),
        (None, None, None) => {
            return cannot(format!(
                "cannot tell: systemd-boot with no default ({} has none): it boots the first entry of its own sort",
                conf.display()
            ));
        }
    };
    if value.starts_with('@') {
        return cannot(format!(
            "cannot tell: systemd-boot's default `{value}` (from {source}) names the entry booted last, which no file records"
        ));
    }
    // Entry ids are the entry file names, `.conf` included, lowercased;
    // a default is a glob over them and the first match in systemd-boot's
    // sort wins (systemd src/boot/boot.c): decided here only when one
    // entry matches.
    let dir = esp.join("loader/entries");
    let pattern = value.to_lowercase();
    let mut matches: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".conf"))
                .filter(|n| {
                    let id = n.to_lowercase();
                    glob(&pattern, &id) || glob(&format!("{pattern}.conf"), &id)
                })
                .collect()
        })
        .unwrap_or_default();
    matches.sort();
    if matches.len() > 1 {
        return cannot(format!(
            "cannot tell: systemd-boot's default `{value}` (from {source}) matches {} entries ({}); which it boots depends on its sort",
            matches.len(),
            matches.join(", ")
        ));
    }
    let Some(name) = matches.pop() else {
        return cannot(format!(
            "cannot tell: systemd-boot's default `{value}` (from {source}) matches no entry in {}",
            dir.display()
        ));
    };
    let entry = dir.join(name);
    match std::fs::read_to_string(&entry) {
        Ok(t) => bls_entry(
            &entry,
            &t,
            format!("systemd-boot: default `{value}` from {source}"),
        ),
        Err(_) => cannot(format!(
            "cannot tell: systemd-boot's default `{value}` (from {source}) has no {}",
            entry.display()
        )),
    }
}

/// Shell-style glob with `*` and `?` (systemd-boot's patterns for its
/// default; `[...]` classes are not matched here and fail to match).
fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) && p[pi] != '*' {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}
