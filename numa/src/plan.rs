//! Turning a [`CpuAffinity`] setting, a topology and a NIC into concrete
//! per-worker CPUs and a memory node, with the reasoning spelled out.

use std::fmt;

use hwlocality::Topology;
use hwlocality::object::types::ObjectType;

use crate::affinity::CpuAffinity;
use crate::cpu_list::format_cpu_list;
use crate::error::{NumaError, PlacementError};
use crate::nic::NicLookup;
use crate::topology::{allowed_cpus, cpuset_to_vec, nodeset_to_vec, numa_nodes};

/// Where each I/O worker runs and where its buffers live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// One PU (OS index) per worker; `None` leaves that worker unpinned.
    pub worker_cpus: Vec<Option<u32>>,
    /// All CPUs the placement draws from, ascending; empty when unpinned.
    pub cpuset: Vec<u32>,
    /// NUMA node to bind buffers to; `None` leaves memory to the kernel.
    pub memory_node: Option<u32>,
    /// Human-readable lines saying what was chosen and why.
    pub explanation: Vec<String>,
}

impl Placement {
    fn unpinned(num_workers: usize, explanation: Vec<String>) -> Self {
        Self { worker_cpus: vec![None; num_workers], cpuset: Vec::new(), memory_node: None, explanation }
    }

    /// Whether any worker is pinned.
    pub fn is_pinned(&self) -> bool {
        self.worker_cpus.iter().any(Option::is_some)
    }

    /// The explanation as one multi-line string, for logs and `--explain`.
    pub fn describe(&self) -> String {
        self.explanation.join("\n")
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

const FALLBACK: &str = "falling back to no pinning and no memory binding (same as cpu_affinity=none)";

/// Decides CPUs and memory node for `num_workers` I/O threads.
///
/// * `Auto` follows the NIC (`nic`): its local CPUs, and its NUMA node for
///   memory when it has exactly one. Without a device (loopback, unix
///   socket, virtual interface, unknown) or without usable local CPUs it
///   falls back to `None`, and says so.
/// * `None` pins nothing and binds no memory.
/// * `Cpus` uses exactly those CPUs; each must exist and be allowed. Memory
///   goes to their node if they share a single one.
/// * `NumaNode(n)` uses node `n`'s allowed CPUs and binds memory to `n`.
///
/// Workers are spread with [`spread_over_cores`] and wrap around when there
/// are more workers than CPUs. Works on any topology (host or XML).
pub fn plan_placement(
    topology: &Topology,
    affinity: &CpuAffinity,
    nic: Option<&NicLookup>,
    num_workers: usize,
) -> Result<Placement, PlacementError> {
    let (cpus, memory_node, mut explanation) = match affinity {
        CpuAffinity::None => {
            return Ok(Placement::unpinned(
                num_workers,
                vec![
                    "cpu_affinity=none: threads are not pinned and memory is not bound; \
                     the kernel decides"
                        .to_owned(),
                ],
            ));
        }
        CpuAffinity::Auto => match plan_auto(topology, nic) {
            Ok(chosen) => chosen,
            Err(explanation) => return Ok(Placement::unpinned(num_workers, explanation)),
        },
        CpuAffinity::Cpus(requested) => plan_cpus(topology, requested)?,
        CpuAffinity::NumaNode(node) => plan_node(topology, *node)?,
    };

    let order = spread_over_cores(topology, &cpus);
    let worker_cpus: Vec<Option<u32>> = (0..num_workers).map(|i| Some(order[i % order.len()])).collect();
    let assigned: Vec<String> = worker_cpus.iter().flatten().map(u32::to_string).collect();
    explanation.push(format!(
        "{num_workers} I/O worker(s) pinned to CPUs [{}] in that order: one per \
         physical core first, then hyperthread siblings",
        assigned.join(", ")
    ));
    if num_workers > order.len() {
        explanation.push(format!(
            "more workers ({num_workers}) than CPUs ({}): wrapping around, so some CPUs \
             run several workers",
            order.len()
        ));
    }
    explanation.push(match memory_node {
        Some(node) => format!("buffers are bound to NUMA node {node}"),
        None => "buffers are not bound to a NUMA node".to_owned(),
    });
    Ok(Placement { worker_cpus, cpuset: cpus, memory_node, explanation })
}

type Chosen = (Vec<u32>, Option<u32>, Vec<String>);

/// `Err` carries the explanation of why auto falls back to no pinning.
fn plan_auto(topology: &Topology, nic: Option<&NicLookup>) -> Result<Chosen, Vec<String>> {
    let device = match nic {
        None => {
            return Err(vec![format!("auto: no network path was given, so there is no NIC to follow; {FALLBACK}")]);
        }
        Some(NicLookup::NoDevice { reason }) => {
            return Err(vec![format!("auto: {reason}; {FALLBACK}")]);
        }
        Some(NicLookup::Found(device)) => device,
    };
    let mut lines = vec![format!("auto: {}", device.locality())];
    if !device.companions.is_empty() {
        let others: Vec<String> = device.companions.iter().map(|(name, kind)| format!("{name} ({kind})")).collect();
        lines.push(format!(
            "auto: {} shares its PCI device{} with {}",
            device.os_device,
            device.pci_bus_id.as_deref().map(|id| format!(" {id}")).unwrap_or_default(),
            others.join(", ")
        ));
    }
    let allowed = allowed_cpus(topology);
    let cpus: Vec<u32> = device.cpus.iter().copied().filter(|c| allowed.contains(c)).collect();
    if cpus.is_empty() {
        lines.push(format!(
            "auto: none of those CPUs may be used by this process (allowed CPUs: {}); \
             {FALLBACK}",
            format_cpu_list(&allowed)
        ));
        return Err(lines);
    }
    if cpus.len() < device.cpus.len() {
        lines.push(format!("auto: only CPUs {} of them are allowed for this process", format_cpu_list(&cpus)));
    }
    let memory_node = match device.numa_nodes.as_slice() {
        [node] if node_allowed(topology, *node) => Some(*node),
        [node] => {
            lines.push(format!(
                "auto: NUMA node {node} is not in this process's allowed memory nodes, \
                 so memory is not bound"
            ));
            None
        }
        _ => {
            lines.push("auto: the NIC is not local to exactly one NUMA node, so memory is not bound".to_owned());
            None
        }
    };
    Ok((cpus, memory_node, lines))
}

fn plan_cpus(topology: &Topology, requested: &[u32]) -> Result<Chosen, PlacementError> {
    if requested.is_empty() {
        return Err(NumaError::InvalidArgument("cpu_affinity names no CPUs".to_owned()));
    }
    let complete = topology.complete_cpuset();
    let usable = topology.cpuset().clone_target() & topology.allowed_cpuset().clone_target();
    let mut cpus = requested.to_vec();
    cpus.sort_unstable();
    cpus.dedup();
    let (missing, disallowed): (Vec<u32>, Vec<u32>) =
        cpus.iter().filter(|&&c| !usable.is_set(c as usize)).partition(|&&c| !complete.is_set(c as usize));
    if !missing.is_empty() || !disallowed.is_empty() {
        return Err(NumaError::CpusUnavailable { missing, disallowed, allowed: cpuset_to_vec(&usable) });
    }
    let mut nodes: Vec<u32> = cpus
        .iter()
        .filter_map(|&c| topology.pu_with_os_index(c as usize))
        .filter_map(|pu| pu.nodeset())
        .flat_map(|set| nodeset_to_vec(&set))
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    let list = format_cpu_list(&cpus);
    let mut lines = Vec::new();
    let memory_node = match nodes.as_slice() {
        [node] if node_allowed(topology, *node) => {
            lines.push(format!(
                "cpu_affinity={list}: using CPUs {list} as requested; they are all on \
                 NUMA node {node}"
            ));
            Some(*node)
        }
        [node] => {
            lines.push(format!(
                "cpu_affinity={list}: using CPUs {list} as requested; their NUMA node \
                 {node} is not in this process's allowed memory nodes"
            ));
            None
        }
        _ => {
            lines.push(format!(
                "cpu_affinity={list}: using CPUs {list} as requested; they span NUMA \
                 nodes {}, so memory is not bound to one node",
                format_cpu_list(&nodes)
            ));
            None
        }
    };
    Ok((cpus, memory_node, lines))
}

fn plan_node(topology: &Topology, node: u32) -> Result<Chosen, PlacementError> {
    let Some(object) = topology.node_with_os_index(node as usize) else {
        return Err(NumaError::UnknownNumaNode { node, existing: numa_nodes(topology) });
    };
    let allowed = allowed_cpus(topology);
    let node_cpus = object.cpuset().map(|s| cpuset_to_vec(&s)).unwrap_or_default();
    let cpus: Vec<u32> = node_cpus.iter().copied().filter(|c| allowed.contains(c)).collect();
    if cpus.is_empty() {
        return Err(NumaError::NodeWithoutCpus { node, allowed });
    }
    let mut lines = vec![format!("cpu_affinity=numa:{node}: using NUMA node {node}'s CPUs {}", format_cpu_list(&cpus))];
    if cpus.len() < node_cpus.len() {
        lines.push(format!(
            "numa:{node}: node {node} has CPUs {} but only {} are allowed for this process",
            format_cpu_list(&node_cpus),
            format_cpu_list(&cpus)
        ));
    }
    let memory_node = if node_allowed(topology, node) {
        Some(node)
    } else {
        lines.push(format!(
            "numa:{node}: node {node} is not in this process's allowed memory nodes, so \
             memory is not bound"
        ));
        None
    };
    Ok((cpus, memory_node, lines))
}

fn node_allowed(topology: &Topology, node: u32) -> bool {
    topology.allowed_nodeset().is_set(node as usize)
}

/// Orders `cpus` so that consecutive workers land on distinct physical
/// cores: the first PU of every core (in topology order), then every core's
/// second PU, and so on.
///
/// Hyperthread siblings share a core's execution units, so two busy I/O
/// threads on siblings slow each other down; they are used only once every
/// core has one thread. CPUs the topology does not know are appended last.
pub fn spread_over_cores(topology: &Topology, cpus: &[u32]) -> Vec<u32> {
    let mut cores: Vec<(Option<u64>, Vec<u32>)> = Vec::new();
    let mut seen = Vec::new();
    for pu in topology.objects_with_type(ObjectType::PU) {
        let Some(cpu) = pu.os_index().and_then(|i| u32::try_from(i).ok()) else {
            continue;
        };
        if !cpus.contains(&cpu) || seen.contains(&cpu) {
            continue;
        }
        seen.push(cpu);
        // A PU without a Core ancestor (some VMs) counts as its own core.
        let core = pu.first_ancestor_with_type(ObjectType::Core).map(|c| c.global_persistent_index());
        match cores.iter_mut().find(|(key, _)| core.is_some() && *key == core) {
            Some((_, pus)) => pus.push(cpu),
            None => cores.push((core, vec![cpu])),
        }
    }
    let deepest = cores.iter().map(|(_, pus)| pus.len()).max().unwrap_or(0);
    let mut order: Vec<u32> =
        (0..deepest).flat_map(|rank| cores.iter().filter_map(move |(_, pus)| pus.get(rank).copied())).collect();
    let mut unknown: Vec<u32> = cpus.iter().copied().filter(|c| !seen.contains(c)).collect();
    unknown.sort_unstable();
    unknown.dedup();
    order.extend(unknown);
    order
}
