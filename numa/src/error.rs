//! The crate's single error type.

use std::fmt;
use std::io;

use crate::cpu_list::format_cpu_list;

/// Everything that can go wrong while parsing, planning or binding.
///
/// Messages are written for the person who typed the `cpu_affinity` setting
/// or reads the log, so they name the offending values and what would have
/// been accepted instead.
#[derive(Debug)]
#[non_exhaustive]
pub enum NumaError {
    /// A `cpu_affinity` string could not be parsed.
    InvalidAffinity {
        /// The text as given by the user.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// hwloc could not build a topology.
    TopologyLoad {
        /// Where the topology was meant to come from ("host", a file path).
        source: String,
        /// hwloc's own description of the failure.
        detail: String,
    },
    /// Some requested CPUs are missing from the topology or not allowed for
    /// this process (cgroup / taskset restrictions).
    CpusUnavailable {
        /// Requested CPUs that the topology does not contain at all.
        missing: Vec<u32>,
        /// Requested CPUs that exist but this process may not run on.
        disallowed: Vec<u32>,
        /// The CPUs that could have been used.
        allowed: Vec<u32>,
    },
    /// A NUMA node number that the topology does not have.
    UnknownNumaNode {
        /// The requested node.
        node: u32,
        /// The nodes that do exist.
        existing: Vec<u32>,
    },
    /// A NUMA node exists but none of its CPUs can be used (memory-only
    /// nodes such as CXL/HBM, or all its CPUs excluded by the cgroup).
    NodeWithoutCpus {
        /// The requested node.
        node: u32,
        /// The CPUs this process is allowed to use.
        allowed: Vec<u32>,
    },
    /// An argument that can never be valid (empty CPU list, null pointer...).
    InvalidArgument(String),
    /// The OS or hwloc refused a CPU or memory binding request.
    Binding {
        /// What we were trying to do, e.g. "bind thread 1234 to CPUs 0-3".
        action: String,
        /// Why it failed, as reported by hwloc or the kernel.
        detail: String,
    },
    /// A system call failed.
    Io {
        /// What we were trying to do.
        context: String,
        /// The underlying OS error.
        source: io::Error,
    },
}

impl NumaError {
    pub(crate) fn invalid_affinity(input: &str, reason: impl Into<String>) -> Self {
        Self::InvalidAffinity { input: input.to_owned(), reason: reason.into() }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io { context: context.into(), source }
    }
}

/// Renders a node list the same way as CPU lists ("0-1,3"), or "none".
fn list_or_none(items: &[u32]) -> String {
    if items.is_empty() { "none".to_owned() } else { format_cpu_list(items) }
}

impl fmt::Display for NumaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidAffinity { input, reason } => write!(
                f,
                "invalid cpu_affinity {input:?}: {reason} (expected \"auto\", \"none\", \
                 a CPU list such as \"0-3,8\", or \"numa:N\")"
            ),
            Self::TopologyLoad { source, detail } => {
                write!(f, "could not load the hardware topology from {source}: {detail}")
            }
            Self::CpusUnavailable { missing, disallowed, allowed } => {
                let mut parts = Vec::new();
                if !missing.is_empty() {
                    parts.push(format!("CPU(s) {} do not exist on this machine", format_cpu_list(missing)));
                }
                if !disallowed.is_empty() {
                    parts.push(format!(
                        "CPU(s) {} exist but this process is not allowed to use them \
                         (cgroup/cpuset or taskset restriction)",
                        format_cpu_list(disallowed)
                    ));
                }
                write!(f, "{}; allowed CPUs are {}", parts.join(", "), list_or_none(allowed))
            }
            Self::UnknownNumaNode { node, existing } => {
                write!(f, "NUMA node {node} does not exist; existing nodes are {}", list_or_none(existing))
            }
            Self::NodeWithoutCpus { node, allowed } => write!(
                f,
                "NUMA node {node} has no CPUs this process may use (memory-only node, \
                 or all its CPUs are excluded); allowed CPUs are {}",
                list_or_none(allowed)
            ),
            Self::InvalidArgument(msg) => f.write_str(msg),
            Self::Binding { action, detail } => write!(f, "could not {action}: {detail}"),
            Self::Io { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl std::error::Error for NumaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Placement failures are ordinary [`NumaError`]s; the alias keeps the
/// planner's signature self-describing.
pub type PlacementError = NumaError;

/// Crate-wide result type.
pub type Result<T, E = NumaError> = std::result::Result<T, E>;
