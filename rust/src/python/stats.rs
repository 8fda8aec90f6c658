//! The counters as Python dicts: `stats()` of every front returns one, and
//! `lmcache_resp.stats.Stats` gives it typed fields (docs/observability.md).

use crate::error::ErrorKind;
use crate::metrics::{self, EndpointSnapshot, Histogram, Snapshot};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The label of an error kind in stats and metrics (`value_too_large`).
pub fn kind_label(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Connection => "connection",
        ErrorKind::Authentication => "authentication",
        ErrorKind::Timeout => "timeout",
        ErrorKind::Server => "server",
        ErrorKind::ValueTooLarge => "value_too_large",
        ErrorKind::Protocol => "protocol",
        ErrorKind::Closed => "closed",
        ErrorKind::InvalidInput => "invalid_input",
        ErrorKind::Page => "page",
        ErrorKind::Os => "os",
        ErrorKind::PartialRead => "partial_read",
        ErrorKind::Forked => "forked",
        ErrorKind::EngineFailed => "engine_failed",
        ErrorKind::Tls => "tls",
    }
}

fn per_op<'py>(py: Python<'py>, counts: &[u64; 4]) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (name, count) in metrics::OP_NAMES.iter().zip(counts) {
        out.set_item(name, count)?;
    }
    Ok(out)
}

fn histogram<'py>(py: Python<'py>, h: &Histogram) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    let bounds: Vec<f64> = (0..metrics::BUCKETS).map(metrics::bucket_bound_seconds).collect();
    out.set_item("bounds", bounds)?;
    out.set_item("counts", h.counts.to_vec())?;
    out.set_item("count", h.count())?;
    out.set_item("sum", h.sum_ns as f64 / 1e9)?;
    Ok(out)
}

fn endpoint<'py>(py: Python<'py>, e: &EndpointSnapshot) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("endpoint", &e.endpoint)?;
    out.set_item("keys", per_op(py, &e.keys)?)?;
    out.set_item("bytes_sent", e.bytes_sent)?;
    out.set_item("bytes_received", e.bytes_received)?;
    out.set_item("hits", e.hits)?;
    out.set_item("misses", e.misses)?;
    let errors = PyDict::new(py);
    for code in 1..metrics::KINDS as u8 {
        if let Some(kind) = ErrorKind::from_code(code) {
            errors.set_item(kind_label(kind), e.errors[code as usize])?;
        }
    }
    out.set_item("errors", errors)?;
    out.set_item("retries", e.retries)?;
    out.set_item("reconnects", e.reconnects)?;
    out.set_item("moved", e.moved)?;
    out.set_item("ask", e.ask)?;
    out.set_item("in_flight", e.in_flight)?;
    out.set_item("down", e.down != 0)?;
    out.set_item("server", &e.server)?;
    out.set_item("reads", &e.reads)?;
    out.set_item("key_latency", histogram(py, &e.key_latency)?)?;
    Ok(out)
}

/// `{"endpoint", "enabled", "batches", "batch_latency", "endpoints": {name: {...}}}`.
pub fn snapshot_dict<'py>(py: Python<'py>, s: &Snapshot) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("endpoint", &s.endpoint)?;
    out.set_item("enabled", metrics::ENABLED)?;
    out.set_item("batches", per_op(py, &s.batches)?)?;
    out.set_item("batch_latency", histogram(py, &s.batch_latency)?)?;
    let endpoints = PyDict::new(py);
    for e in &s.endpoints {
        endpoints.set_item(&e.endpoint, endpoint(py, e)?)?;
    }
    out.set_item("endpoints", endpoints)?;
    Ok(out)
}
