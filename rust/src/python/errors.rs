//! Core errors become the exceptions of `lmcache_resp.errors`, defined in Python so that they
//! can also derive from the matching builtins (ConnectionError, TimeoutError, ValueError,
//! OSError).

use crate::error::{Error, ErrorKind};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

static ERRORS_MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

pub fn exception_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    let module = ERRORS_MODULE.get_or_try_init(py, || py.import("lmcache_resp.errors").map(Bound::unbind))?;
    Ok(module.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

pub fn class_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Connection => "RespConnectionError",
        ErrorKind::Authentication => "AuthenticationError",
        ErrorKind::Timeout => "RespTimeoutError",
        ErrorKind::Server => "ServerError",
        ErrorKind::ValueTooLarge => "ValueTooLargeError",
        ErrorKind::Protocol => "ProtocolError",
        ErrorKind::Closed => "ClosedError",
        ErrorKind::InvalidInput => "InvalidInputError",
        ErrorKind::Page => "PageError",
        ErrorKind::Os => "RespOSError",
        ErrorKind::PartialRead => "PartialReadError",
        ErrorKind::Forked => "ForkedError",
        ErrorKind::EngineFailed => "EngineFailedError",
        ErrorKind::Tls => "TlsError",
    }
}

/// The Python exception for a core error. OS errors carry their errno, as OSError does.
pub fn to_py_err(err: &Error) -> PyErr {
    Python::attach(|py| match exception_class(py, class_name(err.kind())) {
        Ok(class) => match err.os_code() {
            Some(code) => PyErr::from_type(class, (code, err.message().to_owned())),
            None => PyErr::from_type(class, err.message().to_owned()),
        },
        Err(import_failure) => import_failure,
    })
}

/// The exception object itself, for per-key results handed back as values.
pub fn to_py_exception(py: Python<'_>, err: &Error) -> Py<PyAny> {
    to_py_err(err).into_value(py).into_any()
}

pub fn invalid_input(message: impl Into<String>) -> PyErr {
    to_py_err(&Error::invalid(message))
}
