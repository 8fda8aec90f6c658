//! Where the I/O threads and the arena go: the NIC that carries traffic to the server, its
//! NUMA node, and the CPUs of that node, as the `numa` crate plans them. Binding is done by
//! the engine; this module only decides, from the host topology or an XML description.

use crate::error::{Error, Result};
use crate::net::{Address, Endpoint};
use lmcache_resp_numa::{self as numa, CpuAffinity, NicLookup, Placement, Topology};
use std::path::Path;

/// Which topology to plan on, and optionally which interface to follow.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlanSource<'a> {
    /// An hwloc XML file instead of the host (for explaining and testing; never bound).
    pub topology_xml: Option<&'a Path>,
    /// Follow this interface instead of the route to the server.
    pub interface: Option<&'a str>,
}

/// Plans placement for `workers` I/O threads talking to `addresses` (resolved from
/// `endpoint`). With `auto`, anything that prevents following the NIC (no device, no readable
/// topology) falls back to no pinning, and the explanation says why; explicit choices that
/// cannot be honoured are errors.
pub fn plan(
    endpoint: &Endpoint,
    addresses: &[Address],
    affinity: &CpuAffinity,
    workers: usize,
    source: PlanSource<'_>,
) -> Result<Placement> {
    if *affinity == CpuAffinity::None {
        return Ok(unpinned(
            workers,
            "cpu_affinity=none: threads are not pinned and memory is not bound; the kernel decides".into(),
        ));
    }
    let loaded;
    let topology: &Topology = match source.topology_xml {
        Some(path) => {
            loaded = numa::load_xml_file(path).map_err(placement_error)?;
            &loaded
        }
        None => match numa::HostTopology::get() {
            Ok(host) => host.topology(),
            Err(err) if *affinity == CpuAffinity::Auto => {
                return Ok(unpinned(
                    workers,
                    format!(
                        "auto: hwloc could not read this host's topology ({err}); falling back to no pinning and no memory binding"
                    ),
                ));
            }
            Err(err) => return Err(placement_error(err)),
        },
    };
    let nic = match (source.interface, addresses.first()) {
        (Some(interface), _) => numa::locate_nic(topology, interface),
        (None, Some(Address::Tcp(addr))) => match numa::nic_for_remote(topology, *addr) {
            Ok(nic) => nic,
            Err(err) => NicLookup::NoDevice { reason: format!("the route to {endpoint} could not be found: {err}") },
        },
        (None, Some(Address::Unix(path))) => NicLookup::unix_socket(&path.display().to_string()),
        (None, None) => NicLookup::NoDevice { reason: format!("{endpoint} has no address") },
    };
    let mut placement = numa::plan_placement(topology, affinity, Some(&nic), workers).map_err(placement_error)?;
    if *affinity != CpuAffinity::Auto {
        // `auto` explains the NIC itself; for an explicit choice it is still worth knowing.
        placement.explanation.insert(0, format!("server {endpoint}: {nic}"));
    }
    Ok(placement)
}

fn placement_error(err: impl std::fmt::Display) -> Error {
    Error::invalid(format!("cpu_affinity: {err}"))
}

fn unpinned(workers: usize, why: String) -> Placement {
    Placement { worker_cpus: vec![None; workers], cpuset: Vec::new(), memory_node: None, explanation: vec![why] }
}

/// Puts the page arena where the plan says: bound to `node` and faulted in there, or (without
/// a node) just faulted in when `prefault` asks, so the first batch does not pay for page
/// faults. Returns the line that explains what happened; a failure costs speed, not
/// correctness, so it is reported rather than fatal.
pub fn place_arena(arena: &crate::arena::Arena, node: Option<u32>, prefault: bool) -> String {
    let size = arena.size();
    match node {
        Some(node) => {
            // SAFETY: the mapping is `size` bytes, alive while `arena` is, and nothing else
            // uses it yet (no page has been handed out). Prefaulting keeps the (zero)
            // contents.
            let outcome = unsafe {
                numa::bind_memory(arena.base(), size, node).and_then(|()| numa::prefault(arena.base(), size))
            };
            match outcome {
                Ok(()) => format!("the arena ({size} bytes) is bound to NUMA node {node} and pre-faulted"),
                Err(err) => format!("the arena could not be bound to NUMA node {node} ({err}); the kernel places it"),
            }
        }
        None if prefault => {
            // SAFETY: as above.
            match unsafe { numa::prefault(arena.base(), size) } {
                Ok(()) => format!("the arena ({size} bytes) is pre-faulted (prefault=false turns this off)"),
                Err(err) => format!("the arena could not be pre-faulted ({err}); pages fault in on first use"),
            }
        }
        None => format!("the arena ({size} bytes) is not pre-faulted (prefault=false): pages fault in on first use"),
    }
}
