//! `_native.Bridge`: the bridge process's engine, page pool and socket, for
//! `python -m lmcache_resp.bridge`.

use super::errors::{invalid_input, to_py_err};
use super::facts::{capacity_dict, placement_dict};
use super::settings::settings_of;
use crate::bridge::{BridgeLimits, BridgeServer};
use crate::engine::EngineConfig;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;
use std::time::Duration;

#[pyclass(module = "lmcache_resp._native", frozen)]
pub struct Bridge {
    server: BridgeServer,
    socket: PathBuf,
}

#[pymethods]
impl Bridge {
    /// Starts the engine (connecting to the servers of `settings`) and listens on `socket`.
    /// `num_pages` pages of `page_size` bytes are shared by the clients, each holding at most
    /// `client_pages` (0: all of them); the other keywords bound what one client may use and
    /// who may attach (see `docs/bridge.md`).
    #[new]
    #[pyo3(signature = (
        settings, socket, *, page_size, num_pages, client_pages=0, max_clients=64, client_inflight_bytes=32 << 20,
        allow_uids=Vec::new(), allow_gids=Vec::new(), socket_mode=0o660, handshake_timeout=5.0
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        settings: &Bound<'_, PyAny>,
        socket: PathBuf,
        page_size: usize,
        num_pages: usize,
        client_pages: usize,
        max_clients: usize,
        client_inflight_bytes: usize,
        allow_uids: Vec<u32>,
        allow_gids: Vec<u32>,
        socket_mode: u32,
        handshake_timeout: f64,
    ) -> PyResult<Self> {
        let mut config = EngineConfig::new(settings_of(settings)?);
        config.page_size = page_size;
        config.num_pages = num_pages;
        let limits = BridgeLimits {
            client_pages,
            max_clients,
            client_inflight_bytes,
            allow_uids,
            allow_gids,
            socket_mode,
            handshake_timeout: attach_timeout(handshake_timeout)?,
            ..BridgeLimits::default()
        };
        let server = py.detach(|| BridgeServer::start(config, &socket, limits)).map_err(|e| to_py_err(&e))?;
        Ok(Bridge { server, socket })
    }

    /// Completes or fails what is in flight, drops the clients, removes the socket.
    fn stop(&self, py: Python<'_>) {
        py.detach(|| self.server.stop());
    }

    #[getter]
    fn socket(&self) -> PathBuf {
        self.socket.clone()
    }

    #[getter]
    fn clients(&self) -> usize {
        self.server.clients()
    }

    #[getter]
    fn page_size(&self) -> usize {
        self.server.page_size()
    }

    #[getter]
    fn num_pages(&self) -> usize {
        self.server.num_pages()
    }

    #[getter]
    fn free_pages(&self) -> usize {
        self.server.free_pages()
    }

    /// The most pages one client may hold.
    #[getter]
    fn client_pages(&self) -> usize {
        self.server.limits().client_pages
    }

    #[getter]
    fn num_workers(&self) -> usize {
        self.server.engine().num_workers()
    }

    #[getter]
    fn endpoint(&self) -> String {
        self.server.engine().endpoint().to_owned()
    }

    #[getter]
    fn placement<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let engine = self.server.engine();
        placement_dict(py, engine.placement(), Some(&engine.io_loop()))
    }

    /// The bridge engine's counters (every client's batches), as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        super::stats::snapshot_dict(py, &self.server.engine().stats())
    }

    #[getter]
    fn capacity_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        capacity_dict(py, self.server.engine().capacity())
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        Python::attach(|py| py.detach(|| self.server.stop()));
    }
}

/// How long an attaching client waits for the bridge's welcome.
pub fn attach_timeout(seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| invalid_input(format!("timeout must be a positive number of seconds, got {seconds}")))
}
