//! Which network interface carries the traffic to a peer, and where that
//! interface's device sits in the topology.

use std::ffi::CStr;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use hwlocality::Topology;
use hwlocality::object::TopologyObject;
use hwlocality::object::attributes::ObjectAttributes;
use hwlocality::object::types::{OSDeviceType, ObjectType};

use crate::cpu_list::format_cpu_list;
use crate::error::{NumaError, Result};
use crate::topology::{cpuset_to_vec, nodeset_to_vec};

/// The local end of the route to a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalInterface {
    /// Interface name, e.g. `eth1` or `lo`.
    pub name: String,
    /// The local address the kernel picked for the route.
    pub local_ip: IpAddr,
    /// Whether the interface has `IFF_LOOPBACK` set.
    pub loopback: bool,
}

/// Finds the interface the kernel would use to reach `remote`.
///
/// Connecting a UDP socket only runs the route lookup and sends nothing, so
/// this is cheap and works even when `remote` is down. Returns `None` if the
/// chosen local address belongs to no interface (unusual policy routing).
pub fn local_interface_for(remote: SocketAddr) -> Result<Option<LocalInterface>> {
    let bind_addr: SocketAddr = match remote {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket =
        UdpSocket::bind(bind_addr).map_err(|e| NumaError::io("could not open a UDP socket for the route lookup", e))?;
    socket.connect(remote).map_err(|e| NumaError::io(format!("no route to {remote}"), e))?;
    let local_ip = socket
        .local_addr()
        .map_err(|e| NumaError::io("could not read the local address of the route", e))?
        .ip()
        .to_canonical();
    let found = interface_addresses()?
        .into_iter()
        .find(|(_, ip, _)| *ip == local_ip)
        .map(|(name, _, flags)| LocalInterface { name, local_ip, loopback: flags & libc::IFF_LOOPBACK as u32 != 0 });
    Ok(found)
}

/// `(name, address, flags)` for every IPv4/IPv6 address of every interface.
fn interface_addresses() -> Result<Vec<(String, IpAddr, u32)>> {
    /// Frees the getifaddrs list on every exit path.
    struct IfAddrs(*mut libc::ifaddrs);
    impl Drop for IfAddrs {
        fn drop(&mut self) {
            // SAFETY: self.0 came from a successful getifaddrs and is freed
            // exactly once, here.
            unsafe { libc::freeifaddrs(self.0) }
        }
    }

    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs only writes the list head into `head`, a valid
    // out-pointer; on failure it leaves nothing to free.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(NumaError::io("could not list network interfaces (getifaddrs)", io::Error::last_os_error()));
    }
    let list = IfAddrs(head);
    let mut out = Vec::new();
    let mut cursor = list.0;
    while !cursor.is_null() {
        // SAFETY: cursor is a node of the list getifaddrs returned, which
        // stays allocated until `list` is dropped at the end of this function.
        let entry = unsafe { &*cursor };
        cursor = entry.ifa_next;
        if entry.ifa_addr.is_null() || entry.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points at a socket address whose
        // leading family field is always initialized. Only that field is
        // read (address structs of other families may be shorter than
        // sockaddr), unaligned to avoid assuming the allocation's alignment.
        let family = unsafe { std::ptr::addr_of!((*entry.ifa_addr).sa_family).read_unaligned() };
        let ip = match i32::from(family) {
            libc::AF_INET => {
                // SAFETY: the family says this is a sockaddr_in.
                let sin = unsafe { std::ptr::read_unaligned(entry.ifa_addr.cast::<libc::sockaddr_in>()) };
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: the family says this is a sockaddr_in6.
                let sin6 = unsafe { std::ptr::read_unaligned(entry.ifa_addr.cast::<libc::sockaddr_in6>()) };
                IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
            }
            _ => continue,
        };
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(entry.ifa_name) }.to_string_lossy().into_owned();
        out.push((name, ip, entry.ifa_flags));
    }
    Ok(out)
}

/// The kind of OS device a NIC shows up as in hwloc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NicKind {
    /// A kernel network interface (`eth1`, `ens5f0`...).
    Network,
    /// An RDMA device (`mlx5_0`, `hfi1_0`...).
    OpenFabrics,
}

impl fmt::Display for NicKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Network => "network",
            Self::OpenFabrics => "OpenFabrics",
        })
    }
}

/// A NIC found in the topology, with its locality.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicDevice {
    /// The interface name that was looked up (may be a VLAN such as
    /// `eth1.100` whose device is `eth1`).
    pub interface: String,
    /// The hwloc OS device that matched.
    pub os_device: String,
    /// What kind of OS device matched.
    pub kind: NicKind,
    /// PCI address of the device, e.g. `0000:40:00.0`, when hwloc knows it.
    pub pci_bus_id: Option<String>,
    /// Other NIC OS devices on the same PCI device (e.g. the `mlx5_0` RDMA
    /// device behind `eth1`), so logs show the whole picture.
    pub companions: Vec<(String, NicKind)>,
    /// PU OS indices local to the device (cpuset of its first non-I/O
    /// ancestor).
    pub cpus: Vec<u32>,
    /// NUMA nodes local to the device.
    pub numa_nodes: Vec<u32>,
}

impl NicDevice {
    /// One-line summary such as `eth1 is on NUMA node 1 (CPUs 4-7)`.
    pub fn locality(&self) -> String {
        let name = if self.interface == self.os_device {
            self.interface.clone()
        } else {
            format!("{} (device {})", self.interface, self.os_device)
        };
        match self.numa_nodes.as_slice() {
            [node] => format!("{name} is on NUMA node {node} (CPUs {})", format_cpu_list(&self.cpus)),
            [] => format!("{name} is local to CPUs {} (no NUMA node information)", format_cpu_list(&self.cpus)),
            nodes => format!(
                "{name} is not local to a single NUMA node (nodes {}, CPUs {})",
                format_cpu_list(nodes),
                format_cpu_list(&self.cpus)
            ),
        }
    }
}

/// Result of looking a NIC up in a topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NicLookup {
    /// The interface is backed by a device hwloc knows about.
    Found(NicDevice),
    /// There is no device to follow; `reason` says why in plain words.
    NoDevice {
        /// Human-readable reason, e.g. "127.0.0.1:6379 routes over the
        /// loopback interface lo, which has no device".
        reason: String,
    },
}

impl NicLookup {
    /// The lookup result for traffic over a unix domain socket.
    pub fn unix_socket(path: &str) -> Self {
        Self::NoDevice { reason: format!("{path} is a unix socket, so traffic never touches a NIC") }
    }

    /// The device, if one was found.
    pub fn device(&self) -> Option<&NicDevice> {
        match self {
            Self::Found(device) => Some(device),
            Self::NoDevice { .. } => None,
        }
    }
}

impl fmt::Display for NicLookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Found(device) => f.write_str(&device.locality()),
            Self::NoDevice { reason } => f.write_str(reason),
        }
    }
}

/// The NIC kind of an OS device, if it is a NIC at all.
fn nic_kind(object: &TopologyObject) -> Option<NicKind> {
    match object.attributes() {
        Some(ObjectAttributes::OSDevice(attr)) => match attr.device_type() {
            OSDeviceType::Network => Some(NicKind::Network),
            OSDeviceType::OpenFabrics => Some(NicKind::OpenFabrics),
            _ => None,
        },
        _ => None,
    }
}

fn object_name(object: &TopologyObject) -> Option<String> {
    object.name().map(|n| n.to_string_lossy().into_owned())
}

/// Interface names that are virtual by convention and never have a device.
fn virtual_interface_reason(name: &str) -> Option<String> {
    if name == "lo" {
        return Some("lo is the loopback interface, which has no device".to_owned());
    }
    let kinds: &[(&str, &str)] = &[
        ("veth", "a veth pair end (container networking)"),
        ("docker", "a Docker bridge"),
        ("br-", "a Docker/Linux bridge"),
        ("br", "a Linux bridge"),
        ("virbr", "a libvirt bridge"),
        ("cni", "a CNI bridge"),
        ("flannel", "a flannel overlay"),
        ("cali", "a Calico interface"),
        ("vxlan", "a VXLAN tunnel"),
        ("tun", "a TUN device"),
        ("tap", "a TAP device"),
        ("wg", "a WireGuard tunnel"),
        ("bond", "a bond; hwloc only sees its member NICs"),
        ("team", "a team device; hwloc only sees its member NICs"),
        ("dummy", "a dummy interface"),
        ("ifb", "an intermediate functional block device"),
    ];
    kinds
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map(|(_, what)| format!("{name} looks like {what}, which has no PCI device"))
}

/// Finds the NIC behind `interface_name` in `topology`.
///
/// Matches network and OpenFabrics OS devices by name. A VLAN interface
/// (`eth1.100`) resolves to its parent device. Never fails: when nothing
/// matches, the answer says why (loopback, virtual interface, topology
/// without I/O devices...).
pub fn locate_nic(topology: &Topology, interface_name: &str) -> NicLookup {
    let find = |name: &str| {
        topology
            .objects_with_type(ObjectType::OSDevice)
            .find(|obj| nic_kind(obj).is_some() && object_name(obj).as_deref() == Some(name))
    };
    let matched = find(interface_name).or_else(|| {
        // VLAN sub-interfaces share their parent's device.
        interface_name.split_once('.').and_then(|(parent, _)| find(parent))
    });
    let Some(osdev) = matched else {
        let reason = virtual_interface_reason(interface_name).unwrap_or_else(|| {
            if topology.objects_with_type(ObjectType::OSDevice).len() == 0 {
                format!(
                    "{interface_name} cannot be located: the topology has no I/O devices \
                     (loaded without I/O, or the machine exposes no PCI information)"
                )
            } else {
                format!(
                    "no network or OpenFabrics device named {interface_name} in the \
                     topology (virtual interface?)"
                )
            }
        });
        return NicLookup::NoDevice { reason };
    };
    let kind = nic_kind(osdev).unwrap_or(NicKind::Network);
    let os_device = object_name(osdev).unwrap_or_else(|| interface_name.to_owned());
    let pci = osdev.ancestors().find(|a| a.object_type() == ObjectType::PCIDevice);
    let pci_bus_id = pci.and_then(|p| match p.attributes() {
        Some(ObjectAttributes::PCIDevice(attr)) => {
            Some(format!("{:04x}:{:02x}:{:02x}.{:x}", attr.domain(), attr.bus_id(), attr.bus_device(), attr.function()))
        }
        _ => None,
    });
    let companions = pci
        .map(|p| {
            p.io_children()
                .filter(|c| c.global_persistent_index() != osdev.global_persistent_index())
                .filter_map(|c| Some((object_name(c)?, nic_kind(c)?)))
                .collect()
        })
        .unwrap_or_default();
    let local = osdev.first_non_io_ancestor();
    let cpus = local.and_then(|a| a.cpuset()).map(|s| cpuset_to_vec(&s)).unwrap_or_default();
    let numa_nodes = local.and_then(|a| a.nodeset()).map(|s| nodeset_to_vec(&s)).unwrap_or_default();
    NicLookup::Found(NicDevice {
        interface: interface_name.to_owned(),
        os_device,
        kind,
        pci_bus_id,
        companions,
        cpus,
        numa_nodes,
    })
}

/// Route lookup plus [`locate_nic`]: where is the NIC that talks to `remote`?
///
/// The route is the host's, so `topology` should be the host's too (e.g.
/// [`HostTopology`](crate::HostTopology)). Reasons for `NoDevice` name the
/// peer, e.g. "127.0.0.1:6379 routes over the loopback interface lo, which
/// has no device".
pub fn nic_for_remote(topology: &Topology, remote: SocketAddr) -> Result<NicLookup> {
    let Some(iface) = local_interface_for(remote)? else {
        return Ok(NicLookup::NoDevice {
            reason: format!("the local address used to reach {remote} belongs to no interface"),
        });
    };
    if iface.loopback {
        return Ok(NicLookup::NoDevice {
            reason: format!("{remote} routes over the loopback interface {}, which has no device", iface.name),
        });
    }
    Ok(match locate_nic(topology, &iface.name) {
        NicLookup::NoDevice { reason } => {
            // sysfs is authoritative for "is there a device at all?".
            let sys_device = format!("/sys/class/net/{}/device", iface.name);
            let extra = if std::path::Path::new(&sys_device).exists() {
                String::new()
            } else {
                format!(" ({sys_device} does not exist: virtual interface)")
            };
            NicLookup::NoDevice {
                reason: format!("{remote} is reached via {} ({}): {reason}{extra}", iface.name, iface.local_ip),
            }
        }
        found => found,
    })
}
