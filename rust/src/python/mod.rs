//! PyO3 bindings: `lmcache_resp._native`. They translate between Python objects and the core
//! (keys, buffers, errors, the GIL); every decision is made in the core.

mod buffers;
mod client;
mod connector;
mod engine_config;
mod errors;
mod results;
mod store;

use pyo3::prelude::*;

#[pymodule(name = "_native")]
fn native_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<client::RedisClient>()?;
    m.add_class::<store::PagedStore>()?;
    m.add_class::<store::Page>()?;
    m.add_class::<connector::Connector>()?;
    m.add("MAX_KEY_LEN", crate::engine::MAX_KEY_LEN)?;
    Ok(())
}
