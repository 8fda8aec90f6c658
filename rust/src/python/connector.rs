//! `_native.Connector`: the engine over the caller's own memory (LMCache's pinned pool).
//! Buffers are taken during submit; their exporters are held until the batch is drained, so
//! the memory cannot go away under a worker even if the caller drops its views.

use super::buffers::{Access, HeldBuffer, key_bytes};
use super::engine_config::EngineArgs;
use super::errors::{invalid_input, to_py_err};
use super::results::{lmcache_tuple, op_from_name, rich_tuple};
use crate::conn::Op;
use crate::engine::{BatchResult, Engine, Item, Region};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::sync::Mutex;

#[pyclass(module = "lmcache_resp._native", frozen)]
pub struct Connector {
    engine: Engine,
    /// Buffers of submitted batches, by batch id, released when the batch is drained.
    held: Mutex<HashMap<u64, Vec<HeldBuffer>>>,
}

// Lock order: `held` is only ever taken with the GIL released (inside `detach`), so a thread
// holding the GIL never waits for it while its holder waits for the GIL.
impl Connector {
    fn drain_results(&self, py: Python<'_>) -> Vec<BatchResult> {
        let (results, released) = py.detach(|| {
            let results = self.engine.drain();
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            let released: Vec<Vec<HeldBuffer>> = results.iter().filter_map(|r| held.remove(&r.id)).collect();
            (results, released)
        });
        // Released here, with the GIL held, after the workers are done with them.
        drop(released);
        results
    }
}

#[pymethods]
impl Connector {
    #[new]
    #[pyo3(signature = (host, port, *, unix_path=None, username=None, password=None, db=0, timeout=10.0,
        connect_timeout=None, num_workers=8, connections_per_worker=1, max_inflight_bytes=None,
        max_inflight_requests=None, cpu_affinity=None, capacity_bytes=0, eviction_policy="lru",
        trigger_watermark=0.8, eviction_ratio=0.2))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        host: Option<String>,
        port: u16,
        unix_path: Option<std::path::PathBuf>,
        username: Option<String>,
        password: Option<String>,
        db: u32,
        timeout: f64,
        connect_timeout: Option<f64>,
        num_workers: usize,
        connections_per_worker: usize,
        max_inflight_bytes: Option<usize>,
        max_inflight_requests: Option<usize>,
        cpu_affinity: Option<String>,
        capacity_bytes: u64,
        eviction_policy: &str,
        trigger_watermark: f64,
        eviction_ratio: f64,
    ) -> PyResult<Self> {
        let config = EngineArgs {
            host,
            port,
            unix_path,
            username,
            password,
            db,
            timeout,
            connect_timeout,
            num_workers,
            connections_per_worker,
            max_inflight_bytes,
            max_inflight_requests,
            cpu_affinity,
            capacity_bytes,
            eviction_policy: eviction_policy.to_owned(),
            trigger_watermark,
            eviction_ratio,
            page_size: 0,
            num_pages: 0,
        }
        .into_config()?;
        let engine = py.detach(|| Engine::start(config)).map_err(|e| to_py_err(&e))?;
        Ok(Connector { engine, held: Mutex::new(HashMap::new()) })
    }

    /// Submits a batch over caller buffers (GET: writable; SET: any contiguous buffer; sizes
    /// may differ per key, in bytes). EXISTS and DELETE take keys only. Returns the batch id.
    #[pyo3(signature = (op, keys, buffers=None))]
    fn submit(
        &self,
        py: Python<'_>,
        op: &str,
        keys: &Bound<'_, PyAny>,
        buffers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let op = op_from_name(op)?;
        let keys: Vec<Bound<'_, PyAny>> = keys.try_iter()?.collect::<PyResult<_>>()?;
        let key_slices = keys.iter().map(key_bytes).collect::<PyResult<Vec<&[u8]>>>()?;
        let held: Vec<HeldBuffer> = match (op, buffers) {
            (Op::Get | Op::Set, Some(buffers)) => {
                let access = if op == Op::Get { Access::Write } else { Access::Read };
                buffers
                    .try_iter()?
                    .enumerate()
                    .map(|(i, b)| {
                        HeldBuffer::get(&b?, access).map_err(|e| {
                            let message = format!("buffer {i}: {}", e.value(py));
                            PyErr::from_type(e.get_type(py), message)
                        })
                    })
                    .collect::<PyResult<_>>()?
            }
            (Op::Get | Op::Set, None) => return Err(invalid_input("get and set need one buffer per key")),
            (_, _) => Vec::new(),
        };
        if !held.is_empty() && held.len() != key_slices.len() {
            return Err(invalid_input(format!("{} keys but {} buffers", key_slices.len(), held.len())));
        }
        let items: Vec<Item<'_>> = key_slices
            .iter()
            .enumerate()
            .map(|(i, key)| match held.get(i) {
                Some(buffer) => Item {
                    key,
                    region: Region::Process,
                    offset: buffer.raw().as_ptr() as u64,
                    len: buffer.raw().len() as u64,
                },
                None => Item { key, region: Region::Process, offset: 0, len: 0 },
            })
            .collect();
        // Holding the map across the submit means no drain can see the batch before its
        // buffers are filed.
        let outcome = py.detach(|| {
            let mut map = self.held.lock().unwrap_or_else(|p| p.into_inner());
            match self.engine.submit(op, &items) {
                Ok(id) => {
                    if !held.is_empty() {
                        map.insert(id, held);
                    }
                    Ok(id)
                }
                Err(err) => Err((err, held)),
            }
        });
        outcome.map_err(|(err, held)| {
            drop(held);
            to_py_err(&err)
        })
    }

    /// LMCache's completion tuples `(future_id, ok, error, per_key)`.
    fn drain_completions<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.drain_results(py).iter().map(|r| lmcache_tuple(py, r)).collect()
    }

    /// `(id, op, per_key_values)` with lengths and exceptions (see PagedStore.drain).
    fn drain<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.drain_results(py).iter().map(|r| rich_tuple(py, r)).collect()
    }

    fn event_fd(&self) -> i32 {
        self.engine.event_fd().as_raw_fd()
    }

    fn close(&self, py: Python<'_>) {
        py.detach(|| self.engine.close());
    }

    #[getter]
    fn closed(&self) -> bool {
        self.engine.is_closed()
    }

    #[getter]
    fn num_workers(&self) -> usize {
        self.engine.num_workers()
    }

    #[getter]
    fn endpoint(&self) -> String {
        self.engine.endpoint().to_owned()
    }

    #[getter]
    fn placement<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        super::engine_config::placement_dict(py, self.engine.placement())
    }

    #[getter]
    fn worker_threads(&self) -> Vec<(i32, Option<u32>)> {
        self.engine.worker_threads()
    }

    /// Capacity tracking figures, or None when tracking is off.
    #[getter]
    fn capacity_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
        super::engine_config::capacity_dict(py, &self.engine)
    }
}
