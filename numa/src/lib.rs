//! NUMA topology, NIC locality and CPU/memory placement for I/O threads.
//!
//! The flow is: parse the user's [`CpuAffinity`], find the NIC that carries
//! the traffic ([`nic_for_remote`] / [`locate_nic`]), compute a
//! [`Placement`] with [`plan_placement`] (pure, works on any topology,
//! including XML fixtures), then apply it on the real host with the
//! functions in [`bind`], which only ever use [`HostTopology`].
//!
//! The crate knows nothing about what the threads do or whom they talk to.

pub mod affinity;
pub mod bind;
pub mod cpu_list;
pub mod error;
pub mod nic;
pub mod plan;
pub mod topology;

pub use affinity::CpuAffinity;
pub use bind::{
    apply_worker_placement, bind_current_thread, bind_memory, current_thread_cpus, current_thread_id, memory_node_of,
    prefault, thread_cpus,
};
pub use cpu_list::{MAX_INDEX, format_cpu_list, parse_cpu_list};
pub use error::{NumaError, PlacementError, Result};
pub use nic::{LocalInterface, NicDevice, NicKind, NicLookup, local_interface_for, locate_nic, nic_for_remote};
pub use plan::{Placement, plan_placement, spread_over_cores};
pub use topology::{HostTopology, TopologySource, load_host, load_xml, load_xml_file};

/// Re-exported so callers can name the topology type without depending on
/// hwlocality themselves.
pub use hwlocality::Topology;
