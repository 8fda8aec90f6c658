//! `_native.BatchResult` ([`PyBatchResult`]): one finished batch, the core's
//! [`crate::engine::BatchResult`], typed for Python. The store, the connector and LMCache's
//! completion tuples all read it; nothing parses error text.

use super::errors::{class_name, exception_class, to_py_exception};
use crate::conn::Outcome;
use crate::engine::BatchResult;
use crate::error::Error;
use crate::op::Op;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

pub fn op_from_name(name: &str) -> PyResult<Op> {
    match name {
        "get" => Ok(Op::Get),
        "set" | "put" => Ok(Op::Set),
        "exists" => Ok(Op::Exists),
        "delete" => Ok(Op::Del),
        other => Err(super::errors::invalid_input(format!(
            "unknown operation {other:?}: expected 'get', 'set', 'exists' or 'delete'"
        ))),
    }
}

pub fn op_name(op: Op) -> &'static str {
    match op {
        Op::Get => "get",
        Op::Set => "set",
        Op::Exists => "exists",
        Op::Del => "delete",
        Op::Ping => "ping",
    }
}

/// A finished batch: one outcome per key, in submission order.
#[pyclass(module = "lmcache_resp._native", name = "BatchResult", frozen)]
pub struct PyBatchResult(pub BatchResult);

impl PyBatchResult {
    fn failed(&self) -> impl Iterator<Item = (usize, &Error)> {
        self.0.outcomes.iter().enumerate().filter_map(|(i, o)| match o {
            Outcome::Failed(err) => Some((i, err)),
            _ => None,
        })
    }

    /// "3 of 500 keys failed: key 7: ValueTooLargeError: ...; ..." (at most three shown).
    fn summary(&self) -> String {
        let failed: Vec<(usize, &Error)> = self.failed().collect();
        if failed.is_empty() {
            return String::new();
        }
        let shown: Vec<String> =
            failed.iter().take(3).map(|(i, err)| format!("key {i}: {}: {err}", class_name(err.kind()))).collect();
        let more = if failed.len() > 3 { format!("; and {} more", failed.len() - 3) } else { String::new() };
        format!("{} of {} keys failed: {}{more}", failed.len(), self.0.outcomes.len(), shown.join("; "))
    }
}

#[pymethods]
impl PyBatchResult {
    /// The id `submit` returned (unique for the store's or connector's lifetime).
    #[getter]
    fn id(&self) -> u64 {
        self.0.id
    }

    /// `"get"`, `"set"`, `"exists"` or `"delete"`.
    #[getter]
    fn op(&self) -> &'static str {
        op_name(self.0.op)
    }

    /// True when no key failed (a miss is not a failure).
    #[getter]
    fn ok(&self) -> bool {
        self.failed().next().is_none()
    }

    /// Per key: GET read a value, SET stored it, EXISTS found the key, DELETE removed it.
    /// A failed key is False.
    #[getter]
    fn hits(&self) -> Vec<bool> {
        self.0
            .outcomes
            .iter()
            .map(|o| {
                matches!(o, Outcome::Hit(_) | Outcome::Bool(true)) || (self.0.op == Op::Set && *o == Outcome::Done)
            })
            .collect()
    }

    /// Per key, GET only: the bytes received, or None (a miss or a failure).
    #[getter]
    fn lengths(&self) -> Vec<Option<usize>> {
        self.0.outcomes.iter().map(|o| if let Outcome::Hit(len) = o { Some(*len) } else { None }).collect()
    }

    /// `(key index, exception)` of every key that failed.
    #[getter]
    fn failures<'py>(&self, py: Python<'py>) -> Vec<(usize, Py<PyAny>)> {
        self.failed().map(|(i, err)| (i, to_py_exception(py, err))).collect()
    }

    /// A summary of the failures ("" when none): which keys, which errors.
    #[getter]
    fn error(&self) -> String {
        self.summary()
    }

    /// Per key: GET -> bytes received or None for a miss; SET -> None; EXISTS/DELETE ->
    /// bool; a failed key -> its exception.
    #[getter]
    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let values = self
            .0
            .outcomes
            .iter()
            .map(|outcome| -> PyResult<Py<PyAny>> {
                Ok(match outcome {
                    Outcome::Done | Outcome::Miss | Outcome::Reply(_) => py.None(),
                    Outcome::Hit(len) => len.into_pyobject(py)?.into_any().unbind(),
                    Outcome::Bool(flag) => flag.into_pyobject(py)?.to_owned().into_any().unbind(),
                    Outcome::Failed(err) => to_py_exception(py, err),
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, values)
    }

    /// Raises BatchError (caused by the first failure) if any key failed; `what` names the
    /// call in the message.
    #[pyo3(signature = (what=None))]
    fn check(&self, py: Python<'_>, what: Option<&str>) -> PyResult<()> {
        let Some((_, first)) = self.failed().next() else { return Ok(()) };
        let message = format!("{}: {}", what.unwrap_or(op_name(self.0.op)), self.summary());
        let batch_error = exception_class(py, "BatchError")?.call1((message, self.values(py)?))?;
        let cause = to_py_exception(py, first);
        batch_error.setattr("__cause__", cause)?;
        Err(PyErr::from_value(batch_error))
    }

    /// LMCache's completion `(future_id, ok, error, per_key)`: `per_key` is None for SET and
    /// one bool per key otherwise; a miss is not a failure, a failed key is False.
    fn to_lmcache<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let per_key = (self.0.op != Op::Set).then(|| self.hits());
        (self.0.id, self.ok(), self.summary(), per_key).into_pyobject(py)
    }

    fn __len__(&self) -> usize {
        self.0.outcomes.len()
    }

    fn __repr__(&self) -> String {
        let failed = self.failed().count();
        format!("<BatchResult {} {} of {} keys, {failed} failed>", self.0.id, op_name(self.0.op), self.0.outcomes.len())
    }
}
