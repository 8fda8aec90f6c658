//! `_native.PagedStore` and `_native.Page`: the paged store and zero-copy views of its pages.

use super::buffers::key_bytes;
use super::engine_config::EngineArgs;
use super::errors::{invalid_input, to_py_err};
use super::results::{lmcache_tuple, op_from_name, outcome_values, rich_tuple};
use crate::arena::{Arena, PageHandle};
use crate::conn::Op;
use crate::error::Error;
use crate::store::PagedStore as CoreStore;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::os::fd::{AsFd, AsRawFd};
use std::os::raw::c_int;
use std::sync::{Arc, Weak};

#[pyclass(module = "lmcache_resp._native", frozen)]
pub struct PagedStore {
    store: Arc<CoreStore>,
}

/// One page of a store's arena. Supports the buffer protocol (writable, one dimension of
/// bytes): `memoryview(page)`, `numpy.frombuffer(page, ...)`, `torch.frombuffer(page, ...)`.
#[pyclass(module = "lmcache_resp._native", frozen)]
pub struct Page {
    handle: PageHandle,
    /// Keeps the memory mapped for views that outlive the store.
    _arena: Arc<Arena>,
    store: Weak<CoreStore>,
    address: usize,
    size: usize,
    offset: u64,
}

fn key_list<'py>(keys: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    keys.try_iter()?.collect()
}

fn page_handles(pages: &Bound<'_, PyAny>) -> PyResult<Vec<PageHandle>> {
    pages
        .try_iter()?
        .map(|page| {
            let page = page?;
            let page = page.cast::<Page>().map_err(|_| {
                let name = page.get_type().name().map(|n| n.to_string()).unwrap_or_default();
                pyo3::exceptions::PyTypeError::new_err(format!("expected Page objects from allocate(), got {name}"))
            })?;
            Ok(page.get().handle)
        })
        .collect()
}

impl PagedStore {
    fn new_page(&self, handle: PageHandle) -> PyResult<Page> {
        let ptr = self.store.page_ptr(&handle).map_err(|e| to_py_err(&e))?;
        let offset = self.store.pool().page_offset(&handle).map_err(|e| to_py_err(&Error::invalid(e.to_string())))?;
        Ok(Page {
            handle,
            _arena: self.store.engine().arena().clone(),
            store: Arc::downgrade(&self.store),
            address: ptr as usize,
            size: self.store.pool().page_size(),
            offset,
        })
    }
}

#[pymethods]
impl PagedStore {
    #[new]
    #[pyo3(signature = (host, port, *, page_size, num_pages, unix_path=None, username=None, password=None, db=0,
        timeout=10.0, connect_timeout=None, num_workers=8, connections_per_worker=1, max_inflight_bytes=None,
        max_inflight_requests=None, cpu_affinity=None, capacity_bytes=0, eviction_policy="lru",
        trigger_watermark=0.8, eviction_ratio=0.2))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        host: Option<String>,
        port: u16,
        page_size: usize,
        num_pages: usize,
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
        if page_size == 0 {
            return Err(invalid_input("page_size must be at least 1 byte"));
        }
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
            page_size,
            num_pages,
        }
        .into_config()?;
        let store = py.detach(|| CoreStore::start(config)).map_err(|e| to_py_err(&e))?;
        Ok(PagedStore { store: Arc::new(store) })
    }

    /// A free page, or None when the pool is exhausted.
    fn allocate(&self) -> PyResult<Option<Page>> {
        match self.store.allocate().map_err(|e| to_py_err(&e))? {
            Some(handle) => Ok(Some(self.new_page(handle)?)),
            None => Ok(None),
        }
    }

    /// `n` pages, or PageError (and none allocated) if fewer are free.
    fn allocate_many(&self, n: usize) -> PyResult<Vec<Page>> {
        let handles = self.store.allocate_many(n).map_err(|e| to_py_err(&e))?;
        handles.into_iter().map(|h| self.new_page(h)).collect()
    }

    fn free(&self, page: &Bound<'_, Page>) -> PyResult<()> {
        self.store.free(&page.get().handle).map_err(|e| to_py_err(&e))
    }

    /// Runs a batch and waits for it: one value per key (see `outcome_value`).
    #[pyo3(signature = (op, keys, pages=None, lengths=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        op: &str,
        keys: &Bound<'py, PyAny>,
        pages: Option<&Bound<'py, PyAny>>,
        lengths: Option<Vec<u64>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let op = op_from_name(op)?;
        let keys = key_list(keys)?;
        let key_slices = keys.iter().map(key_bytes).collect::<PyResult<Vec<&[u8]>>>()?;
        let store = &self.store;
        let result = match (op, pages) {
            (Op::Get | Op::Set, Some(pages)) => {
                let handles = page_handles(pages)?;
                py.detach(|| store.run(op, &key_slices, &handles, lengths.as_deref()))
            }
            (Op::Get | Op::Set, None) => return Err(invalid_input("get and set need pages")),
            (_, _) => py.detach(|| store.run_keys(op, &key_slices)),
        }
        .map_err(|e| to_py_err(&e))?;
        outcome_values(py, &result)
    }

    /// Submits a batch for `drain`/`drain_completions`; returns its id.
    #[pyo3(signature = (op, keys, pages=None, lengths=None))]
    fn submit(
        &self,
        py: Python<'_>,
        op: &str,
        keys: &Bound<'_, PyAny>,
        pages: Option<&Bound<'_, PyAny>>,
        lengths: Option<Vec<u64>>,
    ) -> PyResult<u64> {
        let op = op_from_name(op)?;
        let keys = key_list(keys)?;
        let key_slices = keys.iter().map(key_bytes).collect::<PyResult<Vec<&[u8]>>>()?;
        let store = &self.store;
        match (op, pages) {
            (Op::Get | Op::Set, Some(pages)) => {
                let handles = page_handles(pages)?;
                py.detach(|| store.submit(op, &key_slices, &handles, lengths.as_deref()))
            }
            (Op::Get | Op::Set, None) => return Err(invalid_input("get and set need pages")),
            (_, _) => py.detach(|| store.submit_keys(op, &key_slices)),
        }
        .map_err(|e| to_py_err(&e))
    }

    /// Finished submitted batches as `(id, op, values)`; clears the eventfd's readiness.
    fn drain<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let results = py.detach(|| self.store.drain());
        results.iter().map(|r| rich_tuple(py, r)).collect()
    }

    /// Finished submitted batches as LMCache's `(future_id, ok, error, per_key)` tuples.
    fn drain_completions<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let results = py.detach(|| self.store.drain());
        results.iter().map(|r| lmcache_tuple(py, r)).collect()
    }

    fn event_fd(&self) -> i32 {
        self.store.engine().event_fd().as_raw_fd()
    }

    fn close(&self, py: Python<'_>) {
        py.detach(|| self.store.close());
    }

    #[getter]
    fn closed(&self) -> bool {
        self.store.engine().is_closed()
    }

    #[getter]
    fn page_size(&self) -> usize {
        self.store.pool().page_size()
    }

    #[getter]
    fn num_pages(&self) -> usize {
        self.store.pool().capacity()
    }

    #[getter]
    fn free_pages(&self) -> usize {
        self.store.pool().free_count()
    }

    #[getter]
    fn num_workers(&self) -> usize {
        self.store.engine().num_workers()
    }

    /// The arena's memfd (another process can map it through /proc/<pid>/fd/<fd>).
    #[getter]
    fn arena_fd(&self) -> i32 {
        self.store.engine().arena().fd().as_fd().as_raw_fd()
    }

    #[getter]
    fn arena_name(&self) -> String {
        self.store.engine().arena().name().to_owned()
    }

    #[getter]
    fn arena_size(&self) -> usize {
        self.store.engine().arena().size()
    }

    #[getter]
    fn endpoint(&self) -> String {
        self.store.engine().endpoint().to_owned()
    }

    /// Where the I/O threads run and the arena lives, and why.
    #[getter]
    fn placement<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        super::engine_config::placement_dict(py, self.store.engine().placement())
    }

    /// `(kernel thread id, planned CPU or None)` per I/O worker.
    #[getter]
    fn worker_threads(&self) -> Vec<(i32, Option<u32>)> {
        self.store.engine().worker_threads()
    }

    /// Capacity tracking figures, or None when tracking is off.
    #[getter]
    fn capacity_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
        super::engine_config::capacity_dict(py, self.store.engine())
    }
}

impl Page {
    /// The page may be used: its store is open and it has not been freed.
    fn check_live(&self) -> PyResult<()> {
        let store = self.store.upgrade().ok_or_else(|| to_py_err(&Error::closed("the page's store")))?;
        if store.engine().is_closed() {
            return Err(to_py_err(&Error::closed("the page's store")));
        }
        store
            .pool()
            .check(&self.handle)
            .map_err(|e| to_py_err(&Error::new(crate::error::ErrorKind::Page, e.to_string())))
    }
}

#[pymethods]
impl Page {
    #[getter]
    fn index(&self) -> u32 {
        self.handle.index
    }

    /// Offset of the page from the start of the arena.
    #[getter]
    fn offset(&self) -> u64 {
        self.offset
    }

    /// The page's address in this process (LMCache's `data_ptr`).
    #[getter]
    fn address(&self) -> usize {
        self.address
    }

    #[getter]
    fn data_ptr(&self) -> usize {
        self.address
    }

    #[getter]
    fn size(&self) -> usize {
        self.size
    }

    fn __len__(&self) -> usize {
        self.size
    }

    /// The NUMA node holding the page's memory, where the kernel can say (None otherwise).
    #[getter]
    fn memory_node(&self) -> Option<u32> {
        lmcache_resp_numa::memory_node_of(self.address as *const u8).ok().flatten()
    }

    /// True while the page is allocated and its store open.
    #[getter]
    fn valid(&self) -> bool {
        self.check_live().is_ok()
    }

    /// A writable memoryview of the page's bytes (LMCache's `byte_array`).
    #[getter]
    fn byte_array<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py().import("builtins")?.getattr("memoryview")?.call1((slf,))
    }

    /// Copies `data` (any buffer) into the page at `offset`.
    #[pyo3(signature = (data, offset=0))]
    fn write_bytes(&self, data: &Bound<'_, PyAny>, offset: usize) -> PyResult<()> {
        self.check_live()?;
        let source = super::buffers::HeldBuffer::get(data, super::buffers::Access::Read)?;
        let raw = source.raw();
        if offset.checked_add(raw.len()).is_none_or(|end| end > self.size) {
            return Err(invalid_input(format!(
                "{} bytes at offset {offset} do not fit a {}-byte page",
                raw.len(),
                self.size
            )));
        }
        // SAFETY: the destination range is inside the page (checked above), which the held
        // arena keeps mapped; the source is a live, contiguous buffer of `raw.len()` bytes. The
        // two may overlap only if the caller passes a view of this very page, hence `copy`.
        unsafe { std::ptr::copy(raw.as_ptr(), (self.address as *mut u8).add(offset), raw.len()) };
        Ok(())
    }

    /// A numpy array over the page (no copy): `dtype` and optional `shape`.
    #[pyo3(signature = (dtype=None, shape=None))]
    fn numpy<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        shape: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let numpy = py.import("numpy")?;
        let dtype = match dtype {
            Some(dtype) => dtype.clone(),
            None => numpy.getattr("uint8")?,
        };
        let array = numpy.getattr("frombuffer")?.call1((slf, dtype))?;
        match shape {
            Some(shape) => array.call_method1("reshape", (shape,)),
            None => Ok(array),
        }
    }

    /// A torch tensor over the page (no copy), when torch is installed.
    #[pyo3(signature = (dtype=None, shape=None))]
    fn torch<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        shape: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let torch = py
            .import("torch")
            .map_err(|_| pyo3::exceptions::PyImportError::new_err("Page.torch() needs torch: pip install torch"))?;
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("dtype", dtype.map_or_else(|| torch.getattr("uint8"), |d| Ok(d.clone()))?)?;
        let tensor = torch.getattr("frombuffer")?.call((slf,), Some(&kwargs))?;
        match shape {
            Some(shape) => tensor.call_method1("view", (shape,)),
            None => Ok(tensor),
        }
    }

    fn __repr__(&self) -> String {
        let state = if self.check_live().is_ok() { "" } else { ", freed or closed" };
        format!("<Page {} of {} bytes at arena offset {:#x}{state}>", self.handle.index, self.size, self.offset)
    }

    /// Exports the page as a writable, contiguous byte buffer.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let page = slf.get();
        page.check_live()?;
        if view.is_null() {
            return Err(PyBufferError::new_err("view is null"));
        }
        // SAFETY: `view` is the caller's Py_buffer to fill (non-null, checked). The memory is
        // the page inside an arena mapping that `slf` (referenced by the view's `obj`, which
        // PyBuffer_FillInfo increments) keeps alive through its `Arc<Arena>`.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), page.address as *mut _, page.size as ffi::Py_ssize_t, 0, flags)
        };
        if rc == -1 { Err(PyErr::fetch(slf.py())) } else { Ok(()) }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
