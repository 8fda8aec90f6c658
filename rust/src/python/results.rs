//! Batch results as Python values.

use super::errors::to_py_exception;
use crate::conn::{Op, Outcome};
use crate::engine::BatchResult;
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

/// One key's result: GET -> bytes received (int) or None for a miss; SET -> None;
/// EXISTS/DELETE -> bool; a failure -> the exception object.
pub fn outcome_value(py: Python<'_>, outcome: &Outcome) -> PyResult<Py<PyAny>> {
    Ok(match outcome {
        Outcome::Done | Outcome::Miss => py.None(),
        Outcome::Hit(len) => len.into_pyobject(py)?.into_any().unbind(),
        Outcome::Bool(flag) => flag.into_pyobject(py)?.to_owned().into_any().unbind(),
        Outcome::Failed(err) => to_py_exception(py, err),
    })
}

pub fn outcome_values<'py>(py: Python<'py>, result: &BatchResult) -> PyResult<Bound<'py, PyList>> {
    let values = result.outcomes.iter().map(|o| outcome_value(py, o)).collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, values)
}

/// `(id, op, per_key_values)`.
pub fn rich_tuple<'py>(py: Python<'py>, result: &BatchResult) -> PyResult<Bound<'py, PyTuple>> {
    let values = outcome_values(py, result)?;
    (result.id, op_name(result.op), values).into_pyobject(py)
}

/// LMCache's completion tuple `(future_id, ok, error, per_key)`: `ok` is false when any key
/// failed (a miss is not a failure); `error` names the failures; `per_key` is None for SET and
/// one bool per key otherwise (GET: value received, EXISTS: exists, DELETE: deleted; a failed
/// key is False).
pub fn lmcache_tuple<'py>(py: Python<'py>, result: &BatchResult) -> PyResult<Bound<'py, PyTuple>> {
    let failures: Vec<(usize, &crate::error::Error)> = result
        .outcomes
        .iter()
        .enumerate()
        .filter_map(|(i, o)| match o {
            Outcome::Failed(err) => Some((i, err)),
            _ => None,
        })
        .collect();
    let ok = failures.is_empty();
    let error = summarize_failures(&failures, result.outcomes.len());
    let per_key: Option<Vec<bool>> = match result.op {
        Op::Set | Op::Ping => None,
        _ => Some(result.outcomes.iter().map(|o| matches!(o, Outcome::Hit(_) | Outcome::Bool(true))).collect()),
    };
    (result.id, ok, error, per_key).into_pyobject(py)
}

/// "3 of 500 keys failed: key 7: <message>; key 9: <message>; ..." (at most three shown).
pub fn summarize_failures(failures: &[(usize, &crate::error::Error)], total: usize) -> String {
    if failures.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = failures.iter().take(3).map(|(i, err)| format!("key {i}: {err}")).collect();
    let more = if failures.len() > 3 { format!("; and {} more", failures.len() - 3) } else { String::new() };
    format!("{} of {total} keys failed: {}{more}", failures.len(), shown.join("; "))
}
