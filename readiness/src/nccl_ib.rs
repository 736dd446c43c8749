//! Which RDMA devices NCCL's IB plugin takes (net_ib.cc,
//! ncclIbInitDevices, NCCL 2.28.9; net_ib/init.cc, the same loop, 2.30.7):
//! each device's ports that are ACTIVE with an InfiniBand or Ethernet link
//! layer (rdma::Port::active), and of those the ones `NCCL_IB_HCA` admits.
//! A device NCCL does not take is one it never uses, however near a GPU it
//! is; the check judges each GPU with the nearest device NCCL takes. NCCL's
//! own code decides the same trees in ci/test-nccl.sh (nccl-harness,
//! readiness/tests/nccl_oracle.rs).

use crate::consumers;
use crate::host::Host;
use crate::rdma::Nic;

/// `NCCL_IB_HCA` as NCCL parses it: a leading `^` excludes the devices
/// listed, then a leading `=` matches names exactly (else as prefixes);
/// the list is comma-separated `name[:port]` (misc/utils.cc,
/// parseStringList).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hca {
    exclude: bool,
    exact: bool,
    list: Vec<(String, Option<i64>)>,
    /// `NCCL_IB_HCA=<value> in <where>`
    pub shown: String,
}

/// NCCL's `NCCL_IB_HCA`, where any source sets it (the environment, then
/// NCCL's configuration files: consumers::nccl_setting).
pub fn hca(host: &Host) -> Option<Hca> {
    let (value, from) = consumers::nccl_setting(host, "NCCL_IB_HCA")?;
    Some(parse(&value, format!("NCCL_IB_HCA={value} in {from}")))
}

fn parse(value: &str, shown: String) -> Hca {
    let exclude = value.starts_with('^');
    let rest = value.strip_prefix('^').unwrap_or(value);
    let exact = rest.starts_with('=');
    let rest = rest.strip_prefix('=').unwrap_or(rest);
    // 2.30.7's parseStringList: strtok_r at ',' (empty entries skipped),
    // the entry's text up to ':' the prefix (an empty one skips it, at
    // most 63 bytes, its buffer's 64), then the port by atoi, -1 where
    // absent or empty. 2.28.9's character loop agrees except on an empty
    // port (`mlx5_0:`), which it reads as port 0.
    let list = rest
        .split(',')
        .filter(|e| !e.is_empty())
        .filter_map(|entry| {
            let mut parts = entry.split(':');
            let prefix = parts.next().filter(|p| !p.is_empty())?;
            let port = parts.next().filter(|p| !p.is_empty()).map(atoi);
            let cut = (0..=prefix.len().min(63))
                .rev()
                .find(|i| prefix.is_char_boundary(*i))
                .unwrap_or(0);
            Some((prefix[..cut].to_owned(), port))
        })
        .collect();
    Hca {
        exclude,
        exact,
        list,
        shown,
    }
}

/// C's atoi: leading blanks, a sign, then digits as far as they go.
fn atoi(text: &str) -> i64 {
    let t = text.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (sign, digits) = match t.as_bytes().first() {
        Some(b'-') => (-1, &t[1..]),
        Some(b'+') => (1, &t[1..]),
        _ => (1, t),
    };
    let n = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |acc, d| {
            acc.saturating_mul(10).saturating_add(i64::from(d - b'0'))
        });
    sign * n
}

impl Hca {
    /// Whether NCCL takes port @port of @name: matchIfList (an empty list
    /// matches everything; a name matches a prefix, or equals it with
    /// `=`; a port matches where either side has none) XOR the `^`.
    pub fn admits(&self, name: &str, port: u32) -> bool {
        let listed = self.list.is_empty()
            || self.list.iter().any(|(prefix, p)| {
                let name_matches = if self.exact {
                    name == prefix
                } else {
                    name.starts_with(prefix.as_str())
                };
                name_matches && p.is_none_or(|p| p == -1 || p == i64::from(port))
            });
        listed ^ self.exclude
    }
}

/// Why NCCL does not take @nic; None where it takes some port of it (or
/// its ports could not be read: then the check does not guess it away).
pub fn refusal(nic: &Nic, hca: Option<&Hca>) -> Option<String> {
    let ports = nic.ports.as_ref()?;
    let active: Vec<u32> = ports
        .iter()
        .filter(|p| p.active())
        .map(|p| p.number)
        .collect();
    if active.is_empty() {
        let states = ports
            .iter()
            .map(|p| format!("port {} {} ({})", p.number, p.state, p.link_layer))
            .collect::<Vec<_>>()
            .join(", ");
        return Some(if ports.is_empty() {
            "it has no port".to_owned()
        } else {
            format!("no port is ACTIVE with an InfiniBand or Ethernet link ({states})")
        });
    }
    let hca = hca?;
    (!active.iter().any(|p| hca.admits(&nic.name, *p)))
        .then(|| format!("{} does not admit it", hca.shown))
}

/// Where NCCL's IB plugin places an RDMA device's PCI function
/// (net_ib.cc `ncclIbGetPciPath`, 2.28.9; net_ib/init.cc, 2.30.7): the
/// last digit of its sysfs path set to 0, merging an adapter's ports onto
/// function 0, and, with `NCCL_IB_MERGE_VFS` (default 1), the two digits
/// of its device number too, merging VFs. NCCL then reads that function's
/// place in the tree; where the kernel shows no function there, it knows
/// none and puts the NIC on CPU -1 (graph/xml.cc, ncclTopoGetXmlFromSys:
/// "No information on /sys"). Behind a PCIe port a function is device 0
/// already, so this moves only an adapter on a root bus (a VM's, or an
/// integrated endpoint) or a second port or VF.
pub fn placed_at(address: &str, merge_vfs: bool) -> String {
    let mut a: Vec<char> = address.chars().collect();
    let n = a.len();
    if n >= 4 {
        a[n - 1] = '0';
        if merge_vfs {
            a[n - 3] = '0';
            a[n - 4] = '0';
        }
    }
    a.into_iter().collect()
}

/// `NCCL_IB_MERGE_VFS` as NCCL reads it (NCCL_PARAM, default 1): false
/// where a source sets it to 0.
pub fn merge_vfs(host: &Host) -> bool {
    !consumers::nccl_setting(host, "NCCL_IB_MERGE_VFS")
        .is_some_and(|(v, _)| consumers::param_zero(&v))
}

/// The ports NCCL's IB plugin holds at most (net_ib.cc, 2.28.9;
/// net_ib/common.h, 2.30.7).
pub const MAX_IB_DEVS: usize = 32;

/// The devices NCCL's IB plugin never lists, each with its reason: it
/// lists devices, in the verbs library's order (by name, as @nics are),
/// only until it holds MAX_IB_DEVS ports (net_ib.cc / net_ib/init.cc,
/// ncclIbInitDevices: `ncclNIbDevs < MAX_IB_DEVS`; 2.30.7 sorts by PCI
/// address after), so of @nics not @refused, those after the 32nd port
/// (issue 57's long run found a node of 44).
pub fn beyond_max_ib_devs<'a>(
    nics: &'a [Nic],
    refused: &[(&Nic, String)],
) -> Vec<(&'a Nic, String)> {
    let mut ports = 0;
    let mut out = Vec::new();
    for n in nics {
        if refused.iter().any(|(r, _)| *r == n) {
            continue;
        }
        if ports >= MAX_IB_DEVS {
            out.push((
                n,
                format!(
                    "NCCL's IB plugin takes the first {MAX_IB_DEVS} ports by device name (MAX_IB_DEVS) and {} comes after them",
                    n.name
                ),
            ));
            continue;
        }
        ports += n
            .ports
            .iter()
            .flatten()
            .filter(|p| p.active())
            .count()
            .max(1);
    }
    out
}

/// NCCL's devices after it merges an adapter's functions (issue 57):
/// graph/topo.cc, ncclTopoAutoMerge, with NCCL_NET_MERGE_LEVEL at its
/// default PORT, merges the devices of @taken (in the IB plugin's order)
/// whose paths meet at one NIC node, that is those NCCL places at one
/// function (placed_at: an adapter's second port or, with
/// NCCL_IB_MERGE_VFS, its VFs); the IB plugin's makeVDevice (net_ib.cc /
/// net_ib/init.cc, NCCL_IB_MERGE_NICS, default 1) names the merged
/// device by its members joined with `+`, as NCCL logs it
/// (`mlx5_0+mlx5_1`). As AutoMerge does it: the first unplaced device
/// takes every unplaced one of its place, @max_devs at most
/// (Rule::max_devs_per_nic: four in 2.28.9, eight in 2.30.7); where the
/// plugin's makeVDevice refuses the group (devices of different link
/// layers: "Attempted to merge incompatible devices"), AutoMerge unplaces
/// them, marks the first's path to each of the others disconnected
/// (PATH_DIS) and starts again, at device 1 (its `i = 0` before the
/// loop's `i++`). A device no group keeps stays its own.
/// The result lists the devices left alone in the plugin's order, then
/// the merged ones in the order they were made: NCCL numbers each merged
/// device after every physical one (ncclTopoPopulateNics), which
/// nccl_local_net::topology_order keeps.
/// Where @merge is false (NCCL_IB_MERGE_NICS=0, NCCL_NET_MERGE_LEVEL=LOC)
/// each device stays its own.
pub fn merged(taken: &[Nic], merge_vfs: bool, merge: bool, max_devs: usize) -> Vec<Nic> {
    let n = taken.len();
    let at: Vec<String> = taken
        .iter()
        .map(|t| placed_at(&t.address, merge_vfs))
        .collect();
    let mut disconnected = vec![vec![false; n]; n];
    let mut placed = vec![false; n];
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut i = 0;
    while i < n {
        if !placed[i] {
            placed[i] = true;
            let mut devs = vec![i];
            for j in 0..n {
                if merge && at[j] == at[i] && !disconnected[i][j] && !placed[j] && j != i {
                    placed[j] = true;
                    devs.push(j);
                }
                if devs.len() == max_devs {
                    break;
                }
            }
            let compatible = devs.iter().all(|&d| link(&taken[d]) == link(&taken[i]));
            if !compatible {
                placed[i] = false;
                for &d in &devs[1..] {
                    placed[d] = false;
                    disconnected[i][d] = true;
                    disconnected[d][i] = true;
                }
                i = 1;
                continue;
            }
            if devs.len() > 1 {
                groups.push(devs);
            }
        }
        i += 1;
    }
    let in_group: Vec<bool> = (0..n)
        .map(|d| groups.iter().any(|g| g.contains(&d)))
        .collect();
    let mut out: Vec<Nic> = (0..n)
        .filter(|&d| !in_group[d])
        .map(|d| taken[d].clone())
        .collect();
    for g in groups {
        let mut nic = taken[g[0]].clone();
        nic.name = g
            .iter()
            .map(|&d| taken[d].name.as_str())
            .collect::<Vec<_>>()
            .join("+");
        out.push(nic);
    }
    out
}

/// The first member of a device [`merged`] named (`mlx5_0` of
/// `mlx5_0+mlx5_1`): NCCL places a merged device where its first is.
pub fn first_member(name: &str) -> &str {
    name.split('+').next().unwrap_or(name)
}

/// The link layer of the port NCCL takes of @nic (its first active one).
fn link(nic: &Nic) -> Option<&str> {
    nic.ports
        .as_ref()?
        .iter()
        .find(|p| p.active())
        .map(|p| p.link_layer.as_str())
}

/// Whether NCCL merges an adapter's functions: NCCL_IB_MERGE_NICS not 0
/// and NCCL_NET_MERGE_LEVEL not LOC (topo.cc, ncclTopoGetFusionEnv; other
/// levels, which merge separate adapters, are not modelled:
/// docs/readiness.md, "Known limits").
pub fn merge_nics(host: &Host) -> bool {
    let off = consumers::nccl_setting(host, "NCCL_IB_MERGE_NICS")
        .is_some_and(|(v, _)| consumers::param_zero(&v));
    let loc =
        consumers::nccl_setting(host, "NCCL_NET_MERGE_LEVEL").is_some_and(|(v, _)| v == "LOC");
    !off && !loc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::Port;

    fn hca(value: &str) -> Hca {
        parse(value, String::new())
    }

    #[test]
    fn ib_hca_as_nccl_matches_it() {
        assert!(hca("mlx5").admits("mlx5_1", 1));
        assert!(!hca("=mlx5").admits("mlx5_1", 1));
        assert!(hca("=mlx5_1:1").admits("mlx5_1", 1));
        assert!(!hca("=mlx5_1:1").admits("mlx5_1", 2));
        assert!(!hca("^mlx5_0").admits("mlx5_0", 1));
        assert!(hca("^mlx5_0").admits("mlx5_1", 1));
        assert!(hca("mlx5_0:2,mlx5_1").admits("mlx5_1", 1));
        assert!(!hca("mlx5_0:2,mlx5_1").admits("mlx5_0", 1));
        // an empty list takes all, and `^` with it none
        assert!(hca("").admits("mlx5_0", 1));
        assert!(!hca("^").admits("mlx5_0", 1));
        // empty entries and an empty port
        assert!(hca(",,mlx5_0:,").admits("mlx5_0", 3));
        assert_eq!(atoi(" 12x"), 12);
        assert_eq!(atoi("x"), 0);
    }

    #[test]
    fn a_device_without_an_active_port_is_refused() {
        let nic = |ports: Vec<Port>| Nic {
            name: "mlx5_0".to_owned(),
            address: "0000:04:00.0".to_owned(),
            ports: Some(ports),
        };
        let port = |n, state: &str, layer: &str| Port {
            number: n,
            state: state.to_owned(),
            link_layer: layer.to_owned(),
            phys_state: None,
        };
        assert!(refusal(&nic(vec![port(1, "4: ACTIVE", "InfiniBand")]), None).is_none());
        assert!(refusal(&nic(vec![port(1, "4: ACTIVE", "Ethernet")]), None).is_none());
        let down = refusal(&nic(vec![port(1, "1: DOWN", "InfiniBand")]), None).unwrap();
        assert!(down.contains("port 1 1: DOWN (InfiniBand)"), "{down}");
        assert!(refusal(&nic(vec![port(1, "4: ACTIVE", "Unknown")]), None).is_some());
        let second = nic(vec![
            port(1, "1: DOWN", "InfiniBand"),
            port(2, "4: ACTIVE", "InfiniBand"),
        ]);
        assert!(refusal(&second, None).is_none());
        assert!(refusal(&second, Some(&hca("mlx5_0:1"))).is_some());
        assert!(refusal(&second, Some(&hca("mlx5_0:2"))).is_none());
    }

    #[test]
    fn where_nccl_places_a_function() {
        assert_eq!(placed_at("0000:41:00.0", true), "0000:41:00.0");
        assert_eq!(placed_at("0000:41:00.1", true), "0000:41:00.0");
        assert_eq!(placed_at("0000:00:07.0", true), "0000:00:00.0");
        assert_eq!(placed_at("0000:3b:01.3", true), "0000:3b:00.0");
        assert_eq!(placed_at("0000:3b:01.3", false), "0000:3b:01.0");
    }

    #[test]
    fn the_ib_plugin_lists_thirty_two_ports() {
        let active = |number| Port {
            number,
            state: "4: ACTIVE".to_owned(),
            link_layer: "InfiniBand".to_owned(),
            phys_state: None,
        };
        // 33 devices of one port, by name as the verbs library lists them;
        // the first of two ports.
        let mut nics: Vec<Nic> = (0..33)
            .map(|i| Nic {
                name: format!("mlx5_{i:02}"),
                address: format!("0000:{:02x}:00.0", i + 1),
                ports: Some(vec![active(1)]),
            })
            .collect();
        let names = |v: Vec<(&Nic, String)>| {
            v.into_iter()
                .map(|(n, _)| n.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(beyond_max_ib_devs(&nics, &[])), ["mlx5_32"]);
        // one refused before: the 33rd is taken
        let refused = [(&nics[3], "down".to_owned())];
        assert!(beyond_max_ib_devs(&nics, &refused).is_empty());
        // a device of two active ports holds two
        nics[0].ports = Some(vec![active(1), active(2)]);
        assert_eq!(
            names(beyond_max_ib_devs(&nics, &[])),
            ["mlx5_31", "mlx5_32"]
        );
    }

    #[test]
    fn an_adapters_functions_are_one_device_to_nccl() {
        let nic = |name: &str, address: &str| Nic {
            name: name.to_owned(),
            address: address.to_owned(),
            ports: None,
        };
        let taken = [
            nic("mlx5_0", "0000:41:00.0"),
            nic("mlx5_1", "0000:42:00.0"),
            nic("mlx5_2", "0000:41:00.1"),
            nic("mlx5_3", "0000:43:00.0"),
        ];
        let names = |v: Vec<Nic>| v.into_iter().map(|n| n.name).collect::<Vec<_>>();
        assert_eq!(
            names(merged(&taken, true, true, 4)),
            ["mlx5_1", "mlx5_3", "mlx5_0+mlx5_2"]
        );
        assert_eq!(
            names(merged(&taken, true, false, 4)),
            ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
        );
        // VFs merge with their PF only where NCCL_IB_MERGE_VFS places them there.
        let vfs = [nic("mlx5_0", "0000:3b:00.0"), nic("mlx5_4", "0000:3b:01.2")];
        assert_eq!(names(merged(&vfs, true, true, 4)), ["mlx5_0+mlx5_4"]);
        assert_eq!(names(merged(&vfs, false, true, 4)), ["mlx5_0", "mlx5_4"]);
        // An InfiniBand port and an Ethernet one are not merged.
        let on = |mut n: Nic, layer: &str| {
            n.ports = Some(vec![Port {
                number: 1,
                state: "4: ACTIVE".to_owned(),
                link_layer: layer.to_owned(),
                phys_state: None,
            }]);
            n
        };
        let mixed = [
            on(nic("mlx5_0", "0000:41:00.0"), "InfiniBand"),
            on(nic("mlx5_1", "0000:41:00.1"), "Ethernet"),
        ];
        assert_eq!(names(merged(&mixed, true, true, 4)), ["mlx5_0", "mlx5_1"]);
        // Two PFs and three VFs of one adapter: 2.28.9 merges four, 2.30.7
        // all five (the generated nodes of issue 57 found this).
        let five: Vec<Nic> = ["00.0", "00.1", "00.2", "00.3", "00.4"]
            .iter()
            .enumerate()
            .map(|(i, f)| nic(&format!("mlx5_{i}"), &format!("0000:3b:{f}")))
            .collect();
        assert_eq!(
            names(merged(&five, true, true, 4)),
            ["mlx5_4", "mlx5_0+mlx5_1+mlx5_2+mlx5_3"]
        );
        assert_eq!(
            names(merged(&five, true, true, 8)),
            ["mlx5_0+mlx5_1+mlx5_2+mlx5_3+mlx5_4"]
        );
        // An Ethernet PF, an InfiniBand PF and six Ethernet VFs of the
        // first (generated seed 86): 2.28.9's first group of four is
        // refused, the two PFs' paths to the three taken with them are cut
        // and the search starts again; NCCL 2.28.9's own answer is
        // mlx5_22, mlx5_21+mlx5_25+mlx5_26+mlx5_27, mlx5_23+mlx5_24+mlx5_28.
        // Another adapter first, as in that node (AutoMerge's restart
        // begins at device 1).
        let adapter: Vec<Nic> = std::iter::once(on(nic("mlx5_15", "0000:97:00.0"), "Ethernet"))
            .chain((0..8).map(|i| {
                let layer = if i == 1 { "InfiniBand" } else { "Ethernet" };
                on(
                    nic(&format!("mlx5_2{}", i + 1), &format!("0000:9d:00.{i}")),
                    layer,
                )
            }))
            .collect();
        assert_eq!(
            names(merged(&adapter, true, true, 4)),
            [
                "mlx5_15",
                "mlx5_22",
                "mlx5_21+mlx5_25+mlx5_26+mlx5_27",
                "mlx5_23+mlx5_24+mlx5_28"
            ]
        );
    }
}
