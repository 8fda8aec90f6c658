//! Loading hwloc topologies (host or XML) with I/O devices kept, and the
//! [`HostTopology`] wrapper that alone is allowed to bind.

use std::ops::Deref;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hwlocality::Topology;
use hwlocality::cpu::cpuset::CpuSet;
use hwlocality::memory::nodeset::NodeSet;
use hwlocality::object::types::ObjectType;
use hwlocality::topology::builder::{TopologyBuilder, TypeFilter};

use crate::error::{NumaError, Result};

/// Where a topology comes from.
///
/// Placement logic accepts any topology, which is what makes it testable on
/// a laptop with a fixture describing a dual-socket server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologySource {
    /// Discover the machine we are running on.
    Host,
    /// An hwloc XML export (`lstopo --of xml`), e.g. a test fixture.
    XmlFile(PathBuf),
}

impl TopologySource {
    /// Builds the topology, keeping PCI devices, bridges and OS devices.
    ///
    /// I/O objects are filtered out by hwloc by default; without them NICs
    /// cannot be located, so they are always enabled here.
    pub fn load(&self) -> Result<Topology> {
        match self {
            Self::Host => load_host(),
            Self::XmlFile(path) => load_xml_file(path),
        }
    }
}

/// hwloc's default builder with every I/O object type kept.
fn io_builder() -> std::result::Result<TopologyBuilder, String> {
    // KeepImportant drops e.g. PCI bridges without devices and uninteresting
    // OS devices but keeps NICs, InfiniBand HCAs and the bridges above them.
    Topology::builder().with_io_type_filter(TypeFilter::KeepImportant).map_err(|e| e.to_string())
}

/// Loads an hwloc XML file with I/O devices kept.
pub fn load_xml_file(path: impl AsRef<Path>) -> Result<Topology> {
    let path = path.as_ref();
    // Read it ourselves: hwlocality panics instead of returning an error
    // when hwloc reports a missing file.
    let xml = std::fs::read_to_string(path).map_err(|e| NumaError::TopologyLoad {
        source: format!("XML file {}", path.display()),
        detail: e.to_string(),
    })?;
    load_xml(&xml, &format!("XML file {}", path.display()))
}

/// Loads an hwloc XML document held in memory with I/O devices kept;
/// `source` names it in errors.
pub fn load_xml(xml: &str, source: &str) -> Result<Topology> {
    let fail = |detail: String| NumaError::TopologyLoad { source: source.to_owned(), detail };
    // hwlocality treats any errno other than EINVAL from hwloc's XML import
    // as unreachable and panics, but libxml2 can leave other errno values
    // behind on malformed input; a bad file must be an error, not a crash.
    let builder =
        std::panic::catch_unwind(AssertUnwindSafe(|| io_builder().map(|b| b.from_xml(xml).map_err(|e| e.to_string()))))
            .map_err(|_| fail("hwloc rejected the XML (see the panic message above)".to_owned()))?
            .map_err(fail)?
            .map_err(fail)?;
    builder.build().map_err(|e| fail(e.to_string()))
}

/// Discovers the running machine with I/O devices kept.
///
/// Fails if hwloc was redirected elsewhere (e.g. `HWLOC_XMLFILE` in the
/// environment), because such a topology would silently ignore binding.
pub fn load_host() -> Result<Topology> {
    let fail = |detail: String| NumaError::TopologyLoad { source: "this host".to_owned(), detail };
    let topology = io_builder().map_err(fail)?.build().map_err(|e| fail(e.to_string()))?;
    if !topology.is_this_system() {
        return Err(fail(
            "hwloc did not describe the running system (is HWLOC_XMLFILE or \
             HWLOC_SYNTHETIC set in the environment?)"
                .to_owned(),
        ));
    }
    Ok(topology)
}

/// The topology of the machine this process runs on.
///
/// hwloc accepts binding requests on XML or synthetic topologies and then
/// does nothing, which would make a misconfigured deployment look pinned
/// when it is not. The binding functions therefore only use this type, and
/// the only way to obtain it is [`HostTopology::get`], which discovers the
/// real machine and checks `is_this_system()`.
#[derive(Debug)]
pub struct HostTopology(Topology);

impl HostTopology {
    /// The process-wide host topology, discovered on first use.
    ///
    /// Discovery with I/O devices takes tens of milliseconds, so it is done
    /// once; the topology describes hardware, which does not change while we
    /// run. A failure is remembered too, so every caller gets the same error.
    pub fn get() -> Result<&'static HostTopology> {
        static HOST: OnceLock<std::result::Result<HostTopology, (String, String)>> = OnceLock::new();
        let loaded = HOST.get_or_init(|| {
            load_host().map(HostTopology).map_err(|e| match e {
                NumaError::TopologyLoad { source, detail } => (source, detail),
                other => ("this host".to_owned(), other.to_string()),
            })
        });
        match loaded {
            Ok(host) => Ok(host),
            Err((source, detail)) => Err(NumaError::TopologyLoad { source: source.clone(), detail: detail.clone() }),
        }
    }

    /// Read-only access for placement and NIC lookup.
    pub fn topology(&self) -> &Topology {
        &self.0
    }
}

impl Deref for HostTopology {
    type Target = Topology;

    fn deref(&self) -> &Topology {
        &self.0
    }
}

/// OS indices of the PUs in a cpuset, ascending.
pub fn cpuset_to_vec(set: &CpuSet) -> Vec<u32> {
    set.iter_set().filter_map(|i| u32::try_from(usize::from(i)).ok()).collect()
}

/// OS indices of the NUMA nodes in a nodeset, ascending.
pub fn nodeset_to_vec(set: &NodeSet) -> Vec<u32> {
    set.iter_set().filter_map(|i| u32::try_from(usize::from(i)).ok()).collect()
}

/// Builds a cpuset from OS indices.
pub fn cpuset_from(cpus: &[u32]) -> CpuSet {
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu as usize);
    }
    set
}

/// Builds a nodeset from OS indices.
pub fn nodeset_from(nodes: &[u32]) -> NodeSet {
    let mut set = NodeSet::new();
    for &node in nodes {
        set.set(node as usize);
    }
    set
}

/// CPUs that this process may run on, per the topology.
pub fn allowed_cpus(topology: &Topology) -> Vec<u32> {
    cpuset_to_vec(&topology.allowed_cpuset())
}

/// OS indices of all NUMA nodes in the topology, ascending.
pub fn numa_nodes(topology: &Topology) -> Vec<u32> {
    let mut nodes: Vec<u32> = topology
        .objects_with_type(ObjectType::NUMANode)
        .filter_map(|n| n.os_index().and_then(|i| u32::try_from(i).ok()))
        .collect();
    nodes.sort_unstable();
    nodes
}
