//! Keys and buffers from Python, without copying.

use super::errors::invalid_input;
use crate::memory::RawBuf;
use pyo3::buffer::PyUntypedBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyInt, PyString};

/// The elements of a batch argument (`keys`, `pages`, `buffers`, `lengths`): any iterable but
/// a lone str or bytes, which would silently become one key per character.
pub fn batch_list<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() || obj.is_instance_of::<PyByteArray>() {
        let type_name = obj.get_type().name()?;
        return Err(invalid_input(format!(
            "{what} must be a list (or other sequence) with one entry per key, not a single {type_name}: \
             wrap it in a list"
        )));
    }
    obj.try_iter()
        .map_err(|_| {
            let type_name = obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            pyo3::exceptions::PyTypeError::new_err(format!("{what} must be a sequence, not {type_name}"))
        })?
        .collect()
}

/// The keys of a batch, as the bytes that go on the wire.
pub fn key_list<'py>(keys: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    batch_list(keys, "keys")
}

/// A count or size given by keyword (`page_size`, `num_pages`, `pool_size`): a whole number
/// >= 0, not a float or a bool, which would be truncated or misread.
pub fn count_of(value: Option<&Bound<'_, PyAny>>, name: &str) -> PyResult<Option<usize>> {
    let Some(value) = value.filter(|v| !v.is_none()) else { return Ok(None) };
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        let type_name = value.get_type().name()?;
        return Err(invalid_input(format!("{name} must be an int, got {type_name} {value}")));
    }
    value.extract::<usize>().map(Some).map_err(|_| invalid_input(format!("{name} must be >= 0, got {value}")))
}

/// SET lengths: whole numbers of bytes (not floats, not bools, which would be truncated or
/// misread).
pub fn lengths_of(lengths: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<u64>>> {
    let Some(lengths) = lengths else { return Ok(None) };
    batch_list(lengths, "lengths")?
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if n.is_instance_of::<PyBool>() || !n.is_instance_of::<PyInt>() {
                let type_name = n.get_type().name()?;
                return Err(invalid_input(format!("lengths[{i}] must be an int number of bytes, got {type_name} {n}")));
            }
            n.extract::<u64>()
                .map_err(|_| invalid_input(format!("lengths[{i}] must be a number of bytes >= 0, got {n}")))
        })
        .collect::<PyResult<Vec<u64>>>()
        .map(Some)
}

/// A key's bytes: UTF-8 of a `str`, or the bytes of `bytes` (binary-safe). The core decides
/// whether a key is acceptable.
pub fn key_bytes<'a>(key: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    if let Ok(text) = key.cast::<PyString>() {
        Ok(text.to_str()?.as_bytes())
    } else if let Ok(bytes) = key.cast::<PyBytes>() {
        Ok(bytes.as_bytes())
    } else {
        let type_name = key.get_type().name()?;
        Err(pyo3::exceptions::PyTypeError::new_err(format!("keys must be str or bytes, not {type_name}")))
    }
}

/// `(offset, length)` pairs from a buffer of unsigned 64-bit integers (a numpy uint64 array of
/// shape `(n, 2)` or `(2n,)`), read without a Python object per pair. None: no spans.
pub fn spans_of(spans: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(u64, u64)>> {
    let Some(spans) = spans.filter(|s| !s.is_none()) else { return Ok(Vec::new()) };
    let buffer = PyUntypedBuffer::get(spans).map_err(|_| {
        let type_name = spans.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        pyo3::exceptions::PyTypeError::new_err(format!(
            "spans must be a buffer of uint64 (offset, length) pairs (a numpy uint64 array), not {type_name}"
        ))
    })?;
    let format = buffer.format().to_string_lossy();
    let unsigned_64 = buffer.item_size() == 8 && matches!(format.trim_start_matches(['@', '=', '<']), "Q" | "L");
    if !unsigned_64 || !buffer.is_c_contiguous() {
        return Err(invalid_input(format!(
            "spans must be a C-contiguous array of uint64 (offset, length) pairs, got format {format:?} of {} bytes per \
             item: use numpy.ascontiguousarray(spans, dtype=numpy.uint64)",
            buffer.item_size()
        )));
    }
    if buffer.len_bytes() % 16 != 0 {
        return Err(invalid_input(format!(
            "spans hold {} integers: they come in (offset, length) pairs",
            buffer.len_bytes() / 8
        )));
    }
    // SAFETY: the exporter keeps `buf_ptr..+len_bytes` valid while `buffer` is held (through
    // this function), and with the GIL held no Python code writes it while it is read, once,
    // as bytes, into owned pairs.
    let bytes = unsafe { std::slice::from_raw_parts(buffer.buf_ptr().cast::<u8>(), buffer.len_bytes()) };
    Ok(bytes
        .chunks_exact(16)
        .map(|pair| {
            let (offset, len) = pair.split_at(8);
            (
                u64::from_ne_bytes(offset.try_into().expect("8 bytes")),
                u64::from_ne_bytes(len.try_into().expect("8 bytes")),
            )
        })
        .collect())
}

/// What the buffer will be used for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Sent from (SET): any contiguous buffer.
    Read,
    /// Received into (GET): must also be writable.
    Write,
}

/// A contiguous buffer held for the duration of an operation. Dropping it releases the
/// exporter's buffer (and needs the GIL, which `PyUntypedBuffer` re-acquires itself).
pub struct HeldBuffer {
    _buffer: PyUntypedBuffer,
    raw: RawBuf,
}

impl HeldBuffer {
    /// Takes any buffer-protocol object (bytes, bytearray, memoryview, numpy arrays of any
    /// dtype, mmap). Its length is in bytes, whatever the item size.
    pub fn get(obj: &Bound<'_, PyAny>, access: Access) -> PyResult<HeldBuffer> {
        let buffer = PyUntypedBuffer::get(obj).map_err(|_| {
            let type_name = obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            pyo3::exceptions::PyTypeError::new_err(format!(
                "a buffer (bytes, bytearray, memoryview, numpy array, mmap) is required, not {type_name}"
            ))
        })?;
        if !buffer.is_c_contiguous() {
            return Err(invalid_input(
                "the buffer is not C-contiguous: pass a contiguous buffer (e.g. numpy.ascontiguousarray)",
            ));
        }
        if access == Access::Write && buffer.readonly() {
            return Err(invalid_input(
                "the buffer is read-only: GET needs a writable buffer (bytearray, numpy array, ...)",
            ));
        }
        // SAFETY: the exporter keeps `buf_ptr..+len_bytes` valid and (being C-contiguous)
        // in one piece until the buffer is released, which happens when this HeldBuffer is
        // dropped, after the operation using `raw` has completed.
        let raw = unsafe { RawBuf::new(buffer.buf_ptr().cast(), buffer.len_bytes()) };
        Ok(HeldBuffer { _buffer: buffer, raw })
    }

    pub fn raw(&self) -> RawBuf {
        self.raw
    }
}
