//! What a front can tell about its engine ([`EngineFacts`]), as Python dicts: where the I/O
//! threads run and what capacity tracking has seen.

use crate::capacity::CapacityStats;
use crate::engine::IoLoopChoice;
use crate::front::EngineFacts;
use crate::settings::CapacityConfig;
use lmcache_resp_numa::Placement;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The placement: `worker_cpus`, `cpuset`, `memory_node`, `explanation`, and `io_loop`
/// (`{"loop", "setting", "why"}`, or None behind a bridge).
pub fn placement_dict<'py>(
    py: Python<'py>,
    placement: &Placement,
    io_loop: Option<&IoLoopChoice>,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("worker_cpus", placement.worker_cpus.clone())?;
    out.set_item("cpuset", placement.cpuset.clone())?;
    out.set_item("memory_node", placement.memory_node)?;
    out.set_item("explanation", placement.explanation.clone())?;
    let io_loop = match io_loop {
        Some(choice) => {
            let entry = PyDict::new(py);
            entry.set_item("loop", choice.name)?;
            entry.set_item("setting", choice.setting.name())?;
            entry.set_item("why", &choice.why)?;
            Some(entry)
        }
        None => None,
    };
    out.set_item("io_loop", io_loop)?;
    Ok(out)
}

/// Capacity figures, or None when tracking is off.
pub fn capacity_dict<'py>(
    py: Python<'py>,
    capacity: Option<(CapacityConfig, CapacityStats)>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some((config, stats)) = capacity else { return Ok(None) };
    let out = PyDict::new(py);
    out.set_item("capacity_bytes", stats.capacity_bytes)?;
    out.set_item("stored_bytes", stats.stored_bytes)?;
    out.set_item("reserved_bytes", stats.reserved_bytes)?;
    out.set_item("keys", stats.keys)?;
    out.set_item("evictions", stats.evictions)?;
    out.set_item("evicted_bytes", stats.evicted_bytes)?;
    out.set_item("eviction_runs", stats.eviction_runs)?;
    out.set_item("policy", config.policy.name())?;
    out.set_item("trigger_watermark", config.trigger_watermark)?;
    out.set_item("eviction_ratio", config.eviction_ratio)?;
    Ok(Some(out))
}

/// The placement part of a front's facts.
pub fn facts_placement<'py>(py: Python<'py>, facts: &EngineFacts) -> PyResult<Bound<'py, PyDict>> {
    placement_dict(py, &facts.placement, facts.io_loop.as_ref())
}
