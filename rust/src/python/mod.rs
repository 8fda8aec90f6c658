//! PyO3 bindings: `lmcache_resp._native`. They translate between Python objects and the core
//! (keys, buffers, errors, the GIL); every decision is made in the core.
//!
//! One module is not a translation: [`ceiling`], the loopback probe the benchmark
//! (`python -m lmcache_resp.bench --ceiling`) measures against. It lives here, compiled only
//! with the bindings, because only the benchmark uses it; the core library does not carry it.

mod bridge;
mod buffers;
mod ceiling;
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
    facts::placement_dict(py, &placement, None)
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
    settings::add_setting_getters(m)?;
    m.add_class::<settings::PyEviction>()?;
    m.add_class::<settings::PySecret>()?;
    m.add("MAX_KEY_LEN", crate::op::MAX_KEY_LEN)?;
    m.add("METRICS_ENABLED", crate::metrics::ENABLED)?;
    logging::register(m)?;
    m.add_function(wrap_pyfunction!(ceiling::loopback_ceiling, m)?)?;
    m.add_function(wrap_pyfunction!(explain_placement, m)?)?;
    Ok(())
}
