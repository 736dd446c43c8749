//! The topology file NCCL reads before sysfs (graph/topo.cc,
//! ncclTopoGetSystem, 2.28.9 and 2.30.7): `NCCL_TOPO_FILE` (the
//! environment, then NCCL's configuration files: Azure's HPC images set it
//! in /etc/nccl.conf), else `/var/run/nvidia-topologyd/virtualTopology.xml`
//! where it exists. NCCL places a GPU or NIC where the file does (a PCI
//! node of the GPU's bus id; a net of the NIC's name, or a PCI node of its
//! bus id) and climbs sysfs only for what the file does not place
//! (xml.cc, ncclTopoGetXmlFromSys: a node with a parent is not moved). So
//! where the file places both, the distance NCCL sees is the file's, not
//! sysfs's: a VM's devices on one root bus (PHB in sysfs) sit below one
//! switch in Azure's files (PIX). NCCL's own code judges the same files in
//! ci/test-nccl.sh (readiness/tests/nccl_oracle.rs).

use crate::consumers;
use crate::host::Host;
use crate::topology::Distance;

/// An element of NCCL's topology XML: its tag, attributes and parent.
#[derive(Debug)]
struct Element {
    tag: String,
    attrs: Vec<(String, String)>,
    parent: Option<usize>,
}

impl Element {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The file NCCL reads and the elements in it.
#[derive(Debug)]
pub struct TopoFile {
    /// Where NCCL takes it from: `NCCL_TOPO_FILE=<file> in <source>` or the
    /// nvidia-topologyd file.
    pub shown: String,
    elements: Vec<Element>,
}

/// The topology file NCCL reads on this node, if any: Ok(None) where there
/// is none, Err (what to say) where NCCL_TOPO_FILE names a file that is
/// not there, or the file cannot be read or parsed.
pub fn read(host: &Host) -> Result<Option<TopoFile>, String> {
    let (path, shown, must) = match consumers::nccl_setting(host, "NCCL_TOPO_FILE") {
        Some((file, from)) => {
            let p = std::path::PathBuf::from(&file);
            let under_root = host.root.join(p.strip_prefix("/").unwrap_or(&p));
            (under_root, format!("NCCL_TOPO_FILE={file} in {from}"), true)
        }
        None => (
            host.root_path("var/run/nvidia-topologyd/virtualTopology.xml"),
            "/var/run/nvidia-topologyd/virtualTopology.xml (nvidia-topologyd's, which NCCL reads without NCCL_TOPO_FILE)".to_owned(),
            false,
        ),
    };
    if !host.exists(&path) {
        return match must {
            // graph/xml.cc, ncclTopoGetXmlFromFile: a file that does not
            // open is warned about and skipped.
            true => Err(format!(
                "{shown}: no such file: NCCL warns \"Could not open XML topology file\" and reads sysfs"
            )),
            false => Ok(None),
        };
    }
    let text = host.text(&path).map_err(|e| format!("{shown}: {e}"))?;
    // NCCL's parser fails on it too: ncclTopoGetSystem, and with it every
    // communicator's start, fails (ncclInternalError).
    let elements = parse(&text).map_err(|e| {
        format!("{shown}: not a topology NCCL can read ({e}): NCCL fails to start a communicator")
    })?;
    Ok(Some(TopoFile { shown, elements }))
}

/// The elements of @text, each with its parent (a tolerant reader of the
/// subset NCCL writes and reads: `<tag a="v" ...>`, `</tag>`, `<tag .../>`,
/// `<!-- -->` and `<? ?>` skipped).
fn parse(text: &str) -> Result<Vec<Element>, String> {
    let mut out: Vec<Element> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        rest = &rest[start..];
        if let Some(after) = rest.strip_prefix("<!--") {
            let end = after.find("-->").ok_or("an unterminated comment")?;
            rest = &after[end + 3..];
            continue;
        }
        let end = rest.find('>').ok_or("a tag without its '>'")?;
        let inner = &rest[1..end];
        rest = &rest[end + 1..];
        if inner.starts_with('?') || inner.starts_with('!') {
            continue;
        }
        if let Some(name) = inner.strip_prefix('/') {
            let top = open
                .pop()
                .ok_or_else(|| format!("</{name}> closes nothing"))?;
            if out[top].tag != name.trim() {
                return Err(format!("</{}> closes <{}>", name.trim(), out[top].tag));
            }
            continue;
        }
        let closed = inner.ends_with('/');
        let inner = inner.trim_end_matches('/');
        let tag_end = inner.find(char::is_whitespace).unwrap_or(inner.len());
        let tag = inner[..tag_end].to_owned();
        let mut attrs = Vec::new();
        let mut a = inner[tag_end..].trim_start();
        while !a.is_empty() {
            let eq = a
                .find('=')
                .ok_or_else(|| format!("<{tag}>: an attribute without a value"))?;
            let key = a[..eq].trim().to_owned();
            let v = a[eq + 1..].trim_start();
            let quote = v.chars().next().filter(|c| *c == '"' || *c == '\'');
            let quote = quote.ok_or_else(|| format!("<{tag}>: {key}'s value is not quoted"))?;
            let close = v[1..]
                .find(quote)
                .ok_or_else(|| format!("<{tag}>: {key}'s value is not closed"))?;
            attrs.push((key, v[1..1 + close].to_owned()));
            a = v[close + 2..].trim_start();
        }
        out.push(Element {
            tag,
            attrs,
            parent: open.last().copied(),
        });
        if !closed {
            open.push(out.len() - 1);
        }
    }
    if let Some(top) = open.last() {
        return Err(format!("<{}> is not closed", out[*top].tag));
    }
    Ok(out)
}

impl TopoFile {
    /// The element of the PCI device @bus_id (bus ids compared as NCCL's
    /// lower-case ones).
    fn pci(&self, bus_id: &str) -> Option<usize> {
        self.elements.iter().position(|e| {
            e.tag == "pci"
                && e.attr("busid")
                    .is_some_and(|b| b.eq_ignore_ascii_case(bus_id))
        })
    }

    /// Where the file places RDMA device @name at @bus_id: the element its
    /// `nic` hangs from (a PCI device, or a CPU for a NIC outside PCI), as
    /// ncclTopoFillNet finds it: a net of that name first, else the PCI
    /// node of its bus id.
    fn nic(&self, name: &str, bus_id: &str) -> Option<usize> {
        let by_name = self
            .elements
            .iter()
            .position(|e| e.tag == "net" && e.attr("name") == Some(name));
        match by_name {
            Some(net) => {
                let nic = self.elements[net].parent?;
                self.elements[nic].parent
            }
            None => self.pci(bus_id),
        }
    }

    /// The elements above @index, nearest first, up to its CPU.
    fn above(&self, index: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut at = self.elements[index].parent;
        while let Some(i) = at {
            if !matches!(self.elements[i].tag.as_str(), "pci" | "cpu") {
                break;
            }
            out.push(i);
            if self.elements[i].tag == "cpu" {
                break;
            }
            at = self.elements[i].parent;
        }
        out
    }

    /// The NUMA ids of the file's CPUs, in the file's order: the first
    /// CPUs of NCCL's XML, before any it adds for what sysfs places.
    pub fn cpus(&self) -> Vec<i64> {
        self.elements
            .iter()
            .filter(|e| e.tag == "cpu")
            .filter_map(|e| e.attr("numaid")?.trim().parse().ok())
            .collect()
    }

    /// The NUMA id of the CPU the file places PCI device @bus_id on (a
    /// GPU), None where it does not place it.
    pub fn cpu_of(&self, bus_id: &str) -> Option<i64> {
        let at = self.pci(bus_id)?;
        let cpu = *self.above(at).last()?;
        (self.elements[cpu].tag == "cpu")
            .then(|| self.elements[cpu].attr("numaid")?.trim().parse().ok())
            .flatten()
    }

    /// Where the file places RDMA device @name at @bus_id, for the order
    /// of NCCL's devices (nccl_local_net::Place): its CPU's NUMA id and
    /// the bus ids from below the CPU down to the device, as NCCL's XML
    /// walk meets them (the file's order under each parent, which equals
    /// bus id order where the file is sorted: docs/readiness.md, "Known
    /// limits"). None where the file does not place it.
    pub fn place(&self, name: &str, bus_id: &str) -> Option<(i64, Vec<String>)> {
        let n = self.nic(name, bus_id)?;
        let mut up = if self.elements[n].tag == "cpu" {
            vec![n]
        } else {
            let mut up = vec![n];
            up.extend(self.above(n));
            up
        };
        let cpu = up.pop().filter(|c| self.elements[*c].tag == "cpu")?;
        let numa = self.elements[cpu].attr("numaid")?.trim().parse().ok()?;
        let chain = up
            .iter()
            .rev()
            .filter_map(|i| self.elements[*i].attr("busid"))
            .map(str::to_ascii_lowercase)
            .collect();
        Some((numa, chain))
    }

    /// The bandwidth of the PCI links the file gives a device's path up to
    /// its CPU (@name: an RDMA device's name, None for a GPU; at @bus_id):
    /// the narrowest `link_width` x `link_speed` / 80 of its element and
    /// the PCI elements above it, as topo.cc's ncclTopoAddPci gives each
    /// link; elements without them are skipped (NCCL fills a device's own
    /// from sysfs, which the tree's are). None where the file does not
    /// place it. The whole path up to the CPU, also where two devices meet
    /// below it (the files here give every link one width).
    pub fn side_bw(&self, name: Option<&str>, bus_id: &str) -> Option<f64> {
        let at = match name {
            Some(n) => self.nic(n, bus_id)?,
            None => self.pci(bus_id)?,
        };
        let mut up = vec![at];
        up.extend(self.above(at));
        let bw = up
            .iter()
            .map(|i| &self.elements[*i])
            .filter(|e| e.tag == "pci")
            .filter_map(|e| {
                let speed = crate::nccl_bandwidth::speed_units(e.attr("link_speed")?);
                let width: f64 = e.attr("link_width")?.trim().parse().ok()?;
                Some(width * f64::from(speed) / 80.0)
            })
            .fold(f64::MAX, f64::min);
        Some(bw)
    }

    /// Whether the file places both GPU @gpu and RDMA device @name at @nic.
    pub fn places_both(&self, gpu: &str, name: &str, nic: &str) -> bool {
        self.pci(gpu).is_some() && self.nic(name, nic).is_some()
    }

    /// The distance NCCL computes between GPU @gpu and RDMA device @name
    /// (at @nic, the bus id NCCL's IB plugin gives: nccl_ib::placed_at),
    /// each with its sysfs NUMA node (-1 where unset or not found), where
    /// the file places either; None where it places neither (NCCL then
    /// takes both from sysfs). NCCL's path types (paths.cc,
    /// ncclTopoSetPaths): a link through one PCI switch is PIX, through two
    /// or more PXB, through a CPU PHB, between CPUs SYS. A device the file
    /// does not place NCCL climbs sysfs for, up to the CPU of its NUMA node,
    /// which is the file's CPU of that `numaid` where it has one
    /// (xml.cc, ncclTopoGetXmlFromSys: xmlGetSubKv on "numaid"): PHB from
    /// a device on that CPU, SYS from one on another.
    pub fn distance(&self, gpu: (&str, i64), name: &str, nic: (&str, i64)) -> Option<Distance> {
        let g = self.pci(gpu.0);
        let n = self.nic(name, nic.0);
        // a NIC on a CPU (no PCI device of its own) starts from it
        let up_nic = |n: usize| {
            if self.elements[n].tag == "cpu" {
                vec![n]
            } else {
                self.above(n)
            }
        };
        let cpu_of = |up: &[usize]| {
            up.last()
                .copied()
                .filter(|c| self.elements[*c].tag == "cpu")
        };
        let (mut up_g, mut up_n) = match (g, n) {
            (Some(g), Some(n)) => (self.above(g), up_nic(n)),
            (None, None) => return None,
            (Some(g), None) => return self.beside(cpu_of(&self.above(g))?, nic.1),
            (None, Some(n)) => return self.beside(cpu_of(&up_nic(n))?, gpu.1),
        };
        let (cg, cn) = (cpu_of(&up_g)?, cpu_of(&up_n)?);
        if cg != cn {
            return Some(Distance::Sys);
        }
        up_g.pop();
        up_n.pop();
        // the switches on the path: each side's up to where they meet
        let meet = up_g.iter().position(|x| up_n.contains(x));
        let Some(meet) = meet else {
            return Some(Distance::Phb);
        };
        let at = up_g[meet];
        let from_n = up_n.iter().position(|x| *x == at).unwrap_or(0);
        let switches = meet + from_n + 1;
        Some(if switches <= 1 {
            Distance::Pix
        } else {
            Distance::Pxb
        })
    }

    /// From a device the file places on CPU element @cpu to one it does
    /// not, on NUMA node @numa in sysfs: PHB where @cpu is that node's,
    /// SYS otherwise; None where @cpu names no node (not modelled).
    fn beside(&self, cpu: usize, numa: i64) -> Option<Distance> {
        let id: i64 = self.elements[cpu].attr("numaid")?.trim().parse().ok()?;
        Some(if id == numa {
            Distance::Phb
        } else {
            Distance::Sys
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AZURE_LIKE: &str = r#"<?xml version="1.0"?>
<system version="1">
  <!-- a made-up switch, as cloud topology files have -->
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="ffff:ff:01.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0001:00:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"/>
      <pci busid="0101:00:00.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_ib0" dev="0" speed="400000" port="1" gdr="1"/>
        </nic>
      </pci>
      <pci busid="ffff:ff:02.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
        <pci busid="0002:00:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"/>
      </pci>
    </pci>
    <pci busid="0003:00:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"/>
    <nic>
      <net name="eth0" dev="1" speed="10000" port="0" gdr="0"/>
    </nic>
  </cpu>
  <cpu numaid="1" affinity="ffff0000" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0004:00:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"/>
  </cpu>
</system>
"#;

    fn file() -> TopoFile {
        TopoFile {
            shown: String::new(),
            elements: parse(AZURE_LIKE).unwrap(),
        }
    }

    #[test]
    fn the_files_places_give_ncclss_distances() {
        let f = file();
        let d = |gpu: &str| f.distance((gpu, 0), "mlx5_ib0", ("0101:00:00.0", 0));
        assert_eq!(d("0001:00:00.0"), Some(Distance::Pix));
        assert_eq!(d("0002:00:00.0"), Some(Distance::Pxb));
        assert_eq!(d("0003:00:00.0"), Some(Distance::Phb));
        assert_eq!(d("0004:00:00.0"), Some(Distance::Sys));
        // a NIC found by its bus id; one on the CPU itself
        assert_eq!(
            f.distance(("0001:00:00.0", 0), "other", ("0101:00:00.0", 0)),
            Some(Distance::Pix)
        );
        assert_eq!(
            f.distance(("0001:00:00.0", 0), "eth0", ("none", 0)),
            Some(Distance::Phb)
        );
        // Not placed: NCCL climbs sysfs for it, to the file's CPU of its
        // NUMA node where there is one (PHB from what the file puts
        // there), else to a CPU of its own (SYS).
        assert_eq!(d("0005:00:00.0"), Some(Distance::Phb));
        let from = |numa: i64| f.distance(("0005:00:00.0", numa), "mlx5_ib0", ("0101:00:00.0", 0));
        assert_eq!(from(1), Some(Distance::Sys));
        assert_eq!(from(-1), Some(Distance::Sys));
        assert_eq!(
            f.distance(("0004:00:00.0", 1), "mlx5_9", ("0009:00:00.0", 1)),
            Some(Distance::Phb)
        );
        // placed by neither: sysfs's, both sides
        assert_eq!(
            f.distance(("0005:00:00.0", 0), "mlx5_9", ("0009:00:00.0", 0)),
            None
        );
    }

    #[test]
    fn the_files_places_order_and_links_are_ncclss() {
        let f = file();
        assert_eq!(f.cpus(), vec![0, 1]);
        // By its net's name, else its bus id; below the CPU, top first.
        assert_eq!(
            f.place("mlx5_ib0", "none"),
            Some((
                0,
                vec!["ffff:ff:01.0".to_owned(), "0101:00:00.0".to_owned()]
            ))
        );
        assert_eq!(
            f.place("other", "0101:00:00.0"),
            f.place("mlx5_ib0", "none")
        );
        assert_eq!(f.place("eth0", "none"), Some((0, Vec::new())));
        assert_eq!(f.place("mlx5_9", "0009:00:00.0"), None);
        // 32 GT/s x16 on every link: 48 GB/s, as ncclTopoAddPci gives it.
        assert_eq!(f.side_bw(None, "0002:00:00.0"), Some(48.0));
        assert_eq!(f.side_bw(Some("mlx5_ib0"), "none"), Some(48.0));
        assert_eq!(f.side_bw(None, "0005:00:00.0"), None);
        let narrow = TopoFile {
            shown: String::new(),
            elements: parse(&AZURE_LIKE.replace(
                r#"busid="ffff:ff:02.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16""#,
                r#"busid="ffff:ff:02.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="8""#,
            ))
            .unwrap(),
        };
        assert_eq!(narrow.side_bw(None, "0002:00:00.0"), Some(12.0));
        assert_eq!(narrow.side_bw(None, "0001:00:00.0"), Some(48.0));
    }

    #[test]
    fn a_broken_file_is_said_not_guessed() {
        assert!(parse("<system><cpu></system>").is_err());
        assert!(parse("<system version=1/>").is_err());
        assert!(parse("<system").is_err());
    }
}
