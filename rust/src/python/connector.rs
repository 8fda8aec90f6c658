//! `_native.Connector`: batches over the caller's own memory (LMCache's pinned pool, SGLang's
//! host pool), through the engine in this process or through a bridge. Buffers are taken
//! during submit; their exporters are held until the batch is drained, so the memory cannot go
//! away under a worker even if the caller drops its views. A registered region's exporter is
//! held until the region is unregistered (refused while a batch names it) or the connector
//! closes.

use super::bridge::attach_timeout;
use super::buffers::{Access, HeldBuffer, batch_list, key_bytes, key_list, spans_of};
use super::errors::to_py_err;
use super::facts::{capacity_dict, facts_placement};
use super::results::{PyBatchResult, op_from_name};
use super::settings::settings_of;
use crate::capacity::TrackedEngine;
use crate::engine::EngineConfig;
use crate::front::{BridgedConnector, BufferConnector, RangeBatch};
use crate::memory::RawBuf;
use crate::op::Op;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Mutex;

#[pyclass(module = "lmcache_resp._native", frozen)]
pub struct Connector {
    connector: Box<dyn BufferConnector>,
    /// Buffers of submitted batches, by batch id, released when the batch is drained.
    held: Mutex<HashMap<u64, Vec<HeldBuffer>>>,
    /// Registered regions' buffers, by region id, released when the region is unregistered.
    regions: Mutex<HashMap<u32, HeldBuffer>>,
}

// Lock order: `held` and `regions` are only ever taken with the GIL released (inside
// `detach`), so a thread holding the GIL never waits for them while their holder waits for the
// GIL.

#[pymethods]
impl Connector {
    #[new]
    fn new(py: Python<'_>, settings: &Bound<'_, PyAny>) -> PyResult<Self> {
        let config = EngineConfig::new(settings_of(settings)?);
        let engine = py.detach(|| TrackedEngine::start(config)).map_err(|e| to_py_err(&e))?;
        Ok(Connector::over(Box::new(engine)))
    }

    /// A connector through the bridge listening at `path`: values are staged through pages of
    /// the bridge's arena (one copy each way); the bridge holds the connections and credentials.
    #[staticmethod]
    #[pyo3(signature = (path, *, timeout=10.0))]
    fn attach(py: Python<'_>, path: PathBuf, timeout: f64) -> PyResult<Self> {
        let timeout = attach_timeout(timeout)?;
        let staged = py.detach(|| BridgedConnector::attach(&path, timeout)).map_err(|e| to_py_err(&e))?;
        Ok(Connector::over(Box::new(staged)))
    }

    /// Submits a batch over caller buffers (GET: writable, and only a value of exactly the
    /// buffer's length is read into it: LMCache's chunks have fixed sizes, so any other length
    /// is a miss; SET: any contiguous buffer; sizes may differ per key, in bytes). EXISTS and
    /// DELETE take keys only. Returns the batch id.
    #[pyo3(signature = (op, keys, buffers=None))]
    fn submit(
        &self,
        py: Python<'_>,
        op: &str,
        keys: &Bound<'_, PyAny>,
        buffers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let op = op_from_name(op)?;
        let keys = key_list(keys)?;
        let key_slices = key_slices(&keys)?;
        // A GET receives into its buffers, so they must be writable; whether the batch may have
        // buffers at all, and how many, the core decides.
        let access = if op == Op::Get { Access::Write } else { Access::Read };
        let held: Vec<HeldBuffer> = match buffers {
            Some(buffers) => batch_list(buffers, "buffers")?
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    HeldBuffer::get(b, access).map_err(|e| {
                        let message = format!("buffer {i}: {}", e.value(py));
                        PyErr::from_type(e.get_type(py), message)
                    })
                })
                .collect::<PyResult<_>>()?,
            None => Vec::new(),
        };
        let raws: Vec<RawBuf> = held.iter().map(HeldBuffer::raw).collect();
        // Holding the map across the submit means no drain can see the batch before its
        // buffers are filed.
        let outcome = py.detach(|| {
            let mut map = self.held.lock().unwrap_or_else(|p| p.into_inner());
            match self.connector.submit(op, &key_slices, &raws) {
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

    /// Registers `buffer` (writable, C-contiguous: a host KV pool) with the engine once; batches
    /// then name `(offset, length)` ranges of it. Returns the region's id.
    fn register_region(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>) -> PyResult<u32> {
        let held = HeldBuffer::get(buffer, Access::Write)?;
        let memory = held.raw();
        let outcome = py.detach(|| {
            let mut regions = self.regions.lock().unwrap_or_else(|p| p.into_inner());
            match self.connector.register_region(memory) {
                Ok(id) => {
                    regions.insert(id, held);
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

    /// Forgets a region; refused while a batch in flight names it. Its buffer is released.
    fn unregister_region(&self, py: Python<'_>, region: u32) -> PyResult<()> {
        let released = py
            .detach(|| {
                let mut regions = self.regions.lock().unwrap_or_else(|p| p.into_inner());
                self.connector.unregister_region(region)?;
                Ok(regions.remove(&region))
            })
            .map_err(|e: crate::Error| to_py_err(&e))?;
        drop(released);
        Ok(())
    }

    /// Runs a batch over ranges of a registered region and waits for it: `keys` name pages,
    /// `suffixes` their segments (page `p`'s segment `j` is `prefix + keys[p] + suffixes[j]`), and
    /// `spans` (uint64 `(offset, length)` pairs, page by page) the segments' ranges. One
    /// outcome per segment.
    #[pyo3(signature = (op, region, keys, spans=None, suffixes=None, prefix=None))]
    #[allow(clippy::too_many_arguments)] // the Python signature, and the GIL token
    fn run_ranges(
        &self,
        py: Python<'_>,
        op: &str,
        region: u32,
        keys: &Bound<'_, PyAny>,
        spans: Option<&Bound<'_, PyAny>>,
        suffixes: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyBatchResult> {
        let ran = with_ranges(op, region, keys, spans, suffixes, prefix, |batch| {
            py.detach(|| self.connector.run_ranges(batch))
        })?;
        ran.map(PyBatchResult).map_err(|e| to_py_err(&e))
    }

    /// Submits a batch over ranges of a registered region (as `run_ranges`) for `drain`.
    #[pyo3(signature = (op, region, keys, spans=None, suffixes=None, prefix=None))]
    #[allow(clippy::too_many_arguments)] // the Python signature, and the GIL token
    fn submit_ranges(
        &self,
        py: Python<'_>,
        op: &str,
        region: u32,
        keys: &Bound<'_, PyAny>,
        spans: Option<&Bound<'_, PyAny>>,
        suffixes: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let submitted = with_ranges(op, region, keys, spans, suffixes, prefix, |batch| {
            py.detach(|| self.connector.submit_ranges(batch))
        })?;
        submitted.map_err(|e| to_py_err(&e))
    }

    /// Finished batches; clears the eventfd's readiness.
    fn drain(&self, py: Python<'_>) -> PyResult<Vec<PyBatchResult>> {
        let (results, released) = py
            .detach(|| {
                let results = self.connector.drain()?;
                let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
                let released: Vec<Vec<HeldBuffer>> = results.iter().filter_map(|r| held.remove(&r.id)).collect();
                Ok((results, released))
            })
            .map_err(|e: crate::Error| to_py_err(&e))?;
        // Released here, with the GIL held, after the workers are done with them.
        drop(released);
        Ok(results.into_iter().map(PyBatchResult).collect())
    }

    fn event_fd(&self) -> i32 {
        self.connector.event_fd().as_raw_fd()
    }

    fn close(&self, py: Python<'_>) {
        py.detach(|| self.connector.close());
    }

    #[getter]
    fn closed(&self) -> bool {
        self.connector.is_closed()
    }

    #[getter]
    fn num_workers(&self) -> usize {
        self.connector.num_workers()
    }

    #[getter]
    fn endpoint(&self) -> String {
        self.connector.endpoint()
    }

    #[getter]
    fn placement<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        facts_placement(py, &self.connector.facts())
    }

    #[getter]
    fn worker_threads(&self) -> Vec<(i32, Option<u32>)> {
        self.connector.facts().worker_threads
    }

    /// Capacity tracking figures, or None when tracking is off.
    #[getter]
    fn capacity_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        capacity_dict(py, self.connector.facts().capacity)
    }

    /// The engine's counters, as a dict (through a bridge: the bridge engine's).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let snapshot = py.detach(|| self.connector.stats()).map_err(|e| to_py_err(&e))?;
        super::stats::snapshot_dict(py, &snapshot)
    }

    /// Pushes garbage into a worker's ring: the engine must fail cleanly (test builds only).
    #[cfg(feature = "test-hooks")]
    fn _corrupt_ring_for_test(&self, worker: usize) -> PyResult<()> {
        self.connector.corrupt_ring_for_test(worker).map_err(|e| to_py_err(&e))
    }
}

impl Connector {
    fn over(connector: Box<dyn BufferConnector>) -> Connector {
        Connector { connector, held: Mutex::new(HashMap::new()), regions: Mutex::new(HashMap::new()) }
    }
}

/// `run_ranges`'s and `submit_ranges`'s arguments as the core's batch, handed to `then`.
fn with_ranges<R>(
    op: &str,
    region: u32,
    keys: &Bound<'_, PyAny>,
    spans: Option<&Bound<'_, PyAny>>,
    suffixes: Option<&Bound<'_, PyAny>>,
    prefix: Option<&Bound<'_, PyAny>>,
    then: impl FnOnce(&RangeBatch<'_>) -> R,
) -> PyResult<R> {
    let op = op_from_name(op)?;
    let (keys, suffixes, spans) = (key_list(keys)?, suffix_list(suffixes)?, spans_of(spans)?);
    let (keys, suffixes) = (key_slices(&keys)?, key_slices(&suffixes)?);
    let prefix = prefix.map(key_bytes).transpose()?.unwrap_or_default();
    Ok(then(&RangeBatch { op, region, prefix, keys: &keys, suffixes: &suffixes, spans: &spans }))
}

fn suffix_list<'py>(suffixes: Option<&Bound<'py, PyAny>>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    suffixes.map_or(Ok(Vec::new()), |s| batch_list(s, "suffixes"))
}

fn key_slices<'a>(keys: &'a [Bound<'_, PyAny>]) -> PyResult<Vec<&'a [u8]>> {
    keys.iter().map(key_bytes).collect()
}

impl Drop for Connector {
    fn drop(&mut self) {
        // Closing waits for the workers: never with the GIL held.
        Python::attach(|py| py.detach(|| self.connector.close()));
    }
}
