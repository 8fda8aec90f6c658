//! Engine settings from the keyword arguments the Python layer resolved.

use super::client::{connect_options, seconds};
use super::errors::invalid_input;
use crate::conn::{PipelineLimits, ReconnectPolicy};
use crate::engine::EngineConfig;
use pyo3::prelude::*;
use std::path::PathBuf;

/// Keyword arguments shared by the store and the connector.
pub struct EngineArgs {
    pub host: Option<String>,
    pub port: u16,
    pub unix_path: Option<PathBuf>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub db: u32,
    pub timeout: f64,
    pub connect_timeout: Option<f64>,
    pub num_workers: usize,
    pub connections_per_worker: usize,
    pub max_inflight_bytes: Option<usize>,
    pub max_inflight_requests: Option<usize>,
    /// `auto`, `none`, a CPU list like `0-3,8`, or `numa:N`; `None` means `auto`.
    pub cpu_affinity: Option<String>,
    pub page_size: usize,
    pub num_pages: usize,
    /// Client-side capacity tracking: 0 disables it.
    pub capacity_bytes: u64,
    pub eviction_policy: String,
    pub trigger_watermark: f64,
    pub eviction_ratio: f64,
}

impl EngineArgs {
    pub fn into_config(self) -> PyResult<EngineConfig> {
        let timeout = seconds(self.timeout, "timeout")?;
        let connect_timeout = self
            .connect_timeout
            .map_or(Ok(timeout.min(std::time::Duration::from_secs(5))), |t| seconds(t, "connect_timeout"))?;
        if self.num_workers == 0 || self.num_workers > 1024 {
            return Err(invalid_input(format!("num_workers must be in 1..1024, got {}", self.num_workers)));
        }
        if self.connections_per_worker == 0 || self.connections_per_worker > 64 {
            return Err(invalid_input(format!(
                "connections_per_worker must be in 1..64, got {}",
                self.connections_per_worker
            )));
        }
        let connect = connect_options(
            self.host,
            self.port,
            self.unix_path,
            self.username,
            self.password,
            self.db,
            connect_timeout,
        )?;
        let mut config = EngineConfig::new(connect);
        config.num_workers = self.num_workers;
        config.connections_per_worker = self.connections_per_worker;
        config.timeout = timeout;
        let defaults = PipelineLimits::default();
        config.pipeline = PipelineLimits {
            max_inflight_bytes: self.max_inflight_bytes.unwrap_or(defaults.max_inflight_bytes).max(1),
            max_inflight_requests: self.max_inflight_requests.unwrap_or(defaults.max_inflight_requests).max(1),
        };
        config.reconnect = ReconnectPolicy::default();
        config.page_size = self.page_size;
        config.num_pages = self.num_pages;
        config.cpu_affinity = parse_affinity(self.cpu_affinity.as_deref())?;
        if self.capacity_bytes > 0 {
            let capacity = crate::capacity::CapacityConfig {
                capacity_bytes: self.capacity_bytes,
                policy: self.eviction_policy.parse().map_err(|e: crate::Error| invalid_input(e.message()))?,
                trigger_watermark: self.trigger_watermark,
                eviction_ratio: self.eviction_ratio,
            };
            capacity.validate().map_err(|e| invalid_input(e.message()))?;
            config.capacity = Some(capacity);
        }
        Ok(config)
    }
}

pub fn parse_affinity(text: Option<&str>) -> PyResult<lmcache_resp_numa::CpuAffinity> {
    match text {
        None => Ok(lmcache_resp_numa::CpuAffinity::Auto),
        Some(text) => text.parse().map_err(|e| invalid_input(format!("cpu_affinity={text:?}: {e}"))),
    }
}

/// The placement as a dict: `worker_cpus`, `cpuset`, `memory_node`, `explanation`.
pub fn placement_dict<'py>(
    py: Python<'py>,
    placement: &lmcache_resp_numa::Placement,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let out = pyo3::types::PyDict::new(py);
    out.set_item("worker_cpus", placement.worker_cpus.clone())?;
    out.set_item("cpuset", placement.cpuset.clone())?;
    out.set_item("memory_node", placement.memory_node)?;
    out.set_item("explanation", placement.explanation.clone())?;
    Ok(out)
}

/// Capacity figures as a dict, or None when tracking is off.
pub fn capacity_dict<'py>(
    py: Python<'py>,
    engine: &crate::engine::Engine,
) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
    let Some((config, stats)) = engine.capacity() else { return Ok(None) };
    let policy = match config.policy {
        crate::capacity::EvictionPolicy::Lru => "LRU",
        crate::capacity::EvictionPolicy::Noop => "noop",
    };
    let out = pyo3::types::PyDict::new(py);
    out.set_item("capacity_bytes", stats.capacity_bytes)?;
    out.set_item("stored_bytes", stats.stored_bytes)?;
    out.set_item("reserved_bytes", stats.reserved_bytes)?;
    out.set_item("keys", stats.keys)?;
    out.set_item("evictions", stats.evictions)?;
    out.set_item("evicted_bytes", stats.evicted_bytes)?;
    out.set_item("eviction_runs", stats.eviction_runs)?;
    out.set_item("policy", policy)?;
    out.set_item("trigger_watermark", config.trigger_watermark)?;
    out.set_item("eviction_ratio", config.eviction_ratio)?;
    Ok(Some(out))
}
