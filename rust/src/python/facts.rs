//! What an engine can tell about itself, as dicts: where it runs and what it tracks. A store
//! or connector attached to a bridge has no engine here: its answers say so.

use super::errors::{invalid_input, to_py_err};
use super::settings::policy_name;
use crate::capacity::TrackedEngine;
use lmcache_resp_numa::Placement;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The placement: `worker_cpus`, `cpuset`, `memory_node`, `explanation`.
pub fn placement_dict<'py>(py: Python<'py>, placement: &Placement) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("worker_cpus", placement.worker_cpus.clone())?;
    out.set_item("cpuset", placement.cpuset.clone())?;
    out.set_item("memory_node", placement.memory_node)?;
    out.set_item("explanation", placement.explanation.clone())?;
    Ok(out)
}

/// Capacity figures, or None when tracking is off.
pub fn capacity_dict<'py>(py: Python<'py>, engine: &TrackedEngine) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some((config, stats)) = engine.capacity() else { return Ok(None) };
    let out = PyDict::new(py);
    out.set_item("capacity_bytes", stats.capacity_bytes)?;
    out.set_item("stored_bytes", stats.stored_bytes)?;
    out.set_item("reserved_bytes", stats.reserved_bytes)?;
    out.set_item("keys", stats.keys)?;
    out.set_item("evictions", stats.evictions)?;
    out.set_item("evicted_bytes", stats.evicted_bytes)?;
    out.set_item("eviction_runs", stats.eviction_runs)?;
    out.set_item("policy", policy_name(config.policy))?;
    out.set_item("trigger_watermark", config.trigger_watermark)?;
    out.set_item("eviction_ratio", config.eviction_ratio)?;
    Ok(Some(out))
}

/// The placement of `engine`, or, with none in this process, where the I/O threads are.
pub fn engine_placement<'py>(
    py: Python<'py>,
    engine: Option<&TrackedEngine>,
    endpoint: &str,
) -> PyResult<Bound<'py, PyDict>> {
    match engine {
        Some(engine) => placement_dict(py, engine.placement()),
        None => {
            let elsewhere = Placement {
                worker_cpus: Vec::new(),
                cpuset: Vec::new(),
                memory_node: None,
                explanation: vec![format!("the I/O threads run in the bridge process ({endpoint})")],
            };
            placement_dict(py, &elsewhere)
        }
    }
}

pub fn engine_worker_threads(engine: Option<&TrackedEngine>) -> Vec<(i32, Option<u32>)> {
    engine.map(|e| e.worker_threads()).unwrap_or_default()
}

pub fn engine_capacity<'py>(py: Python<'py>, engine: Option<&TrackedEngine>) -> PyResult<Option<Bound<'py, PyDict>>> {
    match engine {
        Some(engine) => capacity_dict(py, engine),
        None => Ok(None),
    }
}

pub fn corrupt_engine_ring(engine: Option<&TrackedEngine>, worker: usize) -> PyResult<()> {
    match engine {
        Some(engine) => engine.corrupt_ring_for_test(worker).map_err(|e| to_py_err(&e)),
        None => Err(invalid_input("the engine runs in the bridge process")),
    }
}
