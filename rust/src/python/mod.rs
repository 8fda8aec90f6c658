//! PyO3 bindings: `lmcache_resp._native`. They translate between Python objects and the core
//! (keys, buffers, errors, the GIL); every decision is made in the core.

mod bridge;
mod buffers;
mod connector;
mod errors;
mod facts;
mod logging;
mod redis_client;
mod results;
mod settings;
mod stats;
mod store;

use pyo3::prelude::*;

/// Raw local stream throughput (no Redis): `{"seconds", "bytes", "gb_per_s", "cpu_seconds",
/// "sender_cpu_seconds", "receiver_cpu_seconds"}`. Each side cycles through `working_set_bytes`
/// of distinct blocks (0: one block, copied from and to cache).
#[pyfunction]
#[pyo3(signature = (pairs, block_bytes, total_bytes, unix=false, working_set_bytes=0))]
fn loopback_ceiling<'py>(
    py: Python<'py>,
    pairs: usize,
    block_bytes: usize,
    total_bytes: u64,
    unix: bool,
    working_set_bytes: usize,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let result = py
        .detach(|| crate::ceiling::loopback_ceiling(pairs, block_bytes, total_bytes, unix, working_set_bytes))
        .map_err(|e| errors::invalid_input(format!("loopback ceiling probe failed: {e}")))?;
    let out = pyo3::types::PyDict::new(py);
    out.set_item("seconds", result.seconds)?;
    out.set_item("bytes", result.bytes)?;
    out.set_item("gb_per_s", result.gb_per_s())?;
    out.set_item("cpu_seconds", result.cpu_seconds)?;
    out.set_item("sender_cpu_seconds", result.sender_cpu_seconds)?;
    out.set_item("receiver_cpu_seconds", result.receiver_cpu_seconds)?;
    Ok(out)
}

/// Plans placement without starting anything: for `python -m lmcache_resp.topology`.
#[pyfunction]
#[pyo3(signature = (settings, *, topology_xml=None, interface=None))]
fn explain_placement<'py>(
    py: Python<'py>,
    settings: &Bound<'py, PyAny>,
    topology_xml: Option<std::path::PathBuf>,
    interface: Option<String>,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let settings = settings::settings_of(settings)?;
    let source =
        crate::placement::PlanSource { topology_xml: topology_xml.as_deref(), interface: interface.as_deref() };
    let placement = py
        .detach(|| {
            let endpoint = settings.endpoint();
            let addresses = endpoint.resolve()?;
            crate::placement::plan(endpoint, &addresses, &settings.cpu_affinity, settings.num_workers, source)
        })
        .map_err(|e| errors::to_py_err(&e))?;
    facts::placement_dict(py, &placement)
}

#[pymodule(name = "_native")]
fn native_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<redis_client::RedisClient>()?;
    m.add_class::<store::PagedStore>()?;
    m.add_class::<store::Page>()?;
    m.add_class::<connector::Connector>()?;
    m.add_class::<results::PyBatchResult>()?;
    m.add_class::<bridge::Bridge>()?;
    m.add_class::<settings::PySettings>()?;
    m.add_class::<settings::PyEviction>()?;
    m.add_class::<settings::PySecret>()?;
    m.add("MAX_KEY_LEN", crate::op::MAX_KEY_LEN)?;
    m.add("METRICS_ENABLED", crate::metrics::ENABLED)?;
    logging::register(m)?;
    m.add_function(wrap_pyfunction!(loopback_ceiling, m)?)?;
    m.add_function(wrap_pyfunction!(explain_placement, m)?)?;
    Ok(())
}
