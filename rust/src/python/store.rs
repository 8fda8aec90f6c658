//! `_native.PagedStore` and `_native.Page`: the paged store and zero-copy views of its pages.

use super::bridge::attach_timeout;
use super::buffers::{batch_list, count_of, key_bytes, key_list, lengths_of};
use super::errors::{invalid_input, to_py_err};
use super::facts::{capacity_dict, facts_placement};
use super::results::{PyBatchResult, op_from_name};
use super::settings::settings_of;
use crate::arena::{Arena, ArenaSpec, PageHandle};
use crate::engine::EngineConfig;
use crate::error::{Error, ErrorKind};
use crate::front::{BridgedPageStore, LocalPageStore, PageStore};
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::os::fd::{AsFd, AsRawFd};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

#[pyclass(module = "lmcache_resp._native", frozen)]
pub struct PagedStore {
    /// The engine in this process, or a bridge's, reached through its socket.
    store: Arc<dyn PageStore>,
}

/// One page of a store's arena. Supports the buffer protocol (writable, one dimension of
/// bytes): `memoryview(page)`, `numpy.frombuffer(page, ...)`, `torch.frombuffer(page, ...)`.
#[pyclass(module = "lmcache_resp._native", frozen)]
pub struct Page {
    handle: PageHandle,
    /// Keeps the memory mapped for views that outlive the store.
    _arena: Arc<Arena>,
    store: Weak<dyn PageStore>,
    address: usize,
    size: usize,
    offset: u64,
    /// Buffer views (memoryview, numpy, torch) alive now: while there are any, the page is
    /// not freed, since they would read and write the next owner's data.
    exports: AtomicUsize,
}

fn page_handles<'py>(pages: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, Page>>> {
    batch_list(pages, "pages")?
        .into_iter()
        .map(|page| {
            page.cast_into::<Page>().map_err(|e| {
                let name = e.into_inner().get_type().name().map(|n| n.to_string()).unwrap_or_default();
                pyo3::exceptions::PyTypeError::new_err(format!("expected Page objects from allocate(), got {name}"))
            })
        })
        .collect()
}

impl PagedStore {
    fn new_page(&self, handle: PageHandle) -> PyResult<Page> {
        let ptr = self.store.page_ptr(&handle).map_err(|e| to_py_err(&e))?;
        let offset = self.store.page_offset(&handle).map_err(|e| to_py_err(&e))?;
        Ok(Page {
            handle,
            _arena: self.store.arena().clone(),
            store: Arc::downgrade(&self.store),
            address: ptr as usize,
            size: self.store.page_size(),
            offset,
            exports: AtomicUsize::new(0),
        })
    }

    fn batch(
        &self,
        py: Python<'_>,
        op: &str,
        keys: &Bound<'_, PyAny>,
        pages: Option<&Bound<'_, PyAny>>,
        lengths: Option<&Bound<'_, PyAny>>,
        wait: bool,
    ) -> PyResult<Batched> {
        let op = op_from_name(op)?;
        let keys = key_list(keys)?;
        let key_slices = keys.iter().map(key_bytes).collect::<PyResult<Vec<&[u8]>>>()?;
        let lengths = lengths_of(lengths)?;
        let handles: Vec<PageHandle> = match pages {
            Some(pages) => page_handles(pages)?.iter().map(|p| p.get().handle).collect(),
            None => Vec::new(),
        };
        let store = &self.store;
        py.detach(|| {
            if wait {
                store.run(op, &key_slices, &handles, lengths.as_deref()).map(Batched::Done)
            } else {
                store.submit(op, &key_slices, &handles, lengths.as_deref()).map(Batched::Submitted)
            }
        })
        .map_err(|e| to_py_err(&e))
    }
}

enum Batched {
    Done(crate::engine::BatchResult),
    Submitted(u64),
}

#[pymethods]
impl PagedStore {
    /// `num_pages` pages, or as many whole pages as `pool_size` bytes hold (LMCache's way).
    #[new]
    #[pyo3(signature = (settings, *, page_size, num_pages=None, pool_size=None))]
    fn new(
        py: Python<'_>,
        settings: &Bound<'_, PyAny>,
        page_size: &Bound<'_, PyAny>,
        num_pages: Option<&Bound<'_, PyAny>>,
        pool_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let page_size = count_of(Some(page_size), "page_size")?.unwrap_or(0);
        let (num_pages, pool_size) = (count_of(num_pages, "num_pages")?, count_of(pool_size, "pool_size")?);
        let num_pages =
            ArenaSpec::pool_pages(page_size, num_pages, pool_size).map_err(|e| invalid_input(e.to_string()))?;
        let mut config = EngineConfig::new(settings_of(settings)?);
        config.page_size = page_size;
        config.num_pages = num_pages;
        let store: Arc<dyn PageStore> =
            Arc::new(py.detach(|| LocalPageStore::start(config)).map_err(|e| to_py_err(&e))?);
        Ok(PagedStore { store })
    }

    /// A store over the page pool and I/O engine of the bridge listening at `path`.
    #[staticmethod]
    #[pyo3(signature = (path, *, timeout=10.0))]
    fn attach(py: Python<'_>, path: std::path::PathBuf, timeout: f64) -> PyResult<Self> {
        let timeout = attach_timeout(timeout)?;
        let client = py.detach(|| BridgedPageStore::attach(&path, timeout)).map_err(|e| to_py_err(&e))?;
        let store: Arc<dyn PageStore> = Arc::new(client);
        Ok(PagedStore { store })
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

    /// Returns a page to the pool; refused while views of it (memoryview, numpy, torch) are
    /// alive or an operation uses it.
    fn free(&self, page: &Bound<'_, Page>) -> PyResult<()> {
        let page = page.get();
        let views = page.exports.load(Ordering::Acquire);
        if views > 0 && self.store.check(&page.handle).is_ok() {
            return Err(to_py_err(&Error::new(
                ErrorKind::Page,
                format!(
                    "page {} still has {views} live view(s) (memoryview, numpy or torch): they would read and write \
                     the next owner's data; drop them (del the arrays) before free()",
                    page.handle.index
                ),
            )));
        }
        self.store.free(&page.handle).map_err(|e| to_py_err(&e))
    }

    /// Runs a batch and waits for it.
    #[pyo3(signature = (op, keys, pages=None, lengths=None))]
    fn run(
        &self,
        py: Python<'_>,
        op: &str,
        keys: &Bound<'_, PyAny>,
        pages: Option<&Bound<'_, PyAny>>,
        lengths: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyBatchResult> {
        match self.batch(py, op, keys, pages, lengths, true)? {
            Batched::Done(result) => Ok(PyBatchResult(result)),
            Batched::Submitted(_) => unreachable!("run waits"),
        }
    }

    /// Submits a batch for `drain`; returns its id.
    #[pyo3(signature = (op, keys, pages=None, lengths=None))]
    fn submit(
        &self,
        py: Python<'_>,
        op: &str,
        keys: &Bound<'_, PyAny>,
        pages: Option<&Bound<'_, PyAny>>,
        lengths: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        match self.batch(py, op, keys, pages, lengths, false)? {
            Batched::Submitted(id) => Ok(id),
            Batched::Done(_) => unreachable!("submit does not wait"),
        }
    }

    /// Finished submitted batches; clears the eventfd's readiness.
    fn drain(&self, py: Python<'_>) -> PyResult<Vec<PyBatchResult>> {
        let results = py.detach(|| self.store.drain()).map_err(|e| to_py_err(&e))?;
        Ok(results.into_iter().map(PyBatchResult).collect())
    }

    fn event_fd(&self) -> i32 {
        self.store.event_fd().as_raw_fd()
    }

    fn close(&self, py: Python<'_>) {
        py.detach(|| self.store.close());
    }

    #[getter]
    fn closed(&self) -> bool {
        self.store.is_closed()
    }

    #[getter]
    fn page_size(&self) -> usize {
        self.store.page_size()
    }

    #[getter]
    fn num_pages(&self) -> usize {
        self.store.num_pages()
    }

    #[getter]
    fn free_pages(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.store.free_pages()).map_err(|e| to_py_err(&e))
    }

    #[getter]
    fn num_workers(&self) -> usize {
        self.store.num_workers()
    }

    /// The arena's memfd (another process can map it through /proc/<pid>/fd/<fd>).
    #[getter]
    fn arena_fd(&self) -> i32 {
        self.store.arena().fd().as_fd().as_raw_fd()
    }

    #[getter]
    fn arena_name(&self) -> String {
        self.store.arena().name().to_owned()
    }

    #[getter]
    fn arena_size(&self) -> usize {
        self.store.arena().size()
    }

    #[getter]
    fn endpoint(&self) -> String {
        self.store.endpoint()
    }

    /// Where the I/O threads run and the arena lives, and why.
    #[getter]
    fn placement<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        facts_placement(py, &self.store.facts())
    }

    /// `(kernel thread id, planned CPU or None)` per I/O worker.
    #[getter]
    fn worker_threads(&self) -> Vec<(i32, Option<u32>)> {
        self.store.facts().worker_threads
    }

    /// Capacity tracking figures, or None when tracking is off.
    #[getter]
    fn capacity_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        capacity_dict(py, self.store.facts().capacity)
    }

    /// The engine's counters, as a dict (through a bridge: the bridge engine's).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let snapshot = py.detach(|| self.store.stats()).map_err(|e| to_py_err(&e))?;
        super::stats::snapshot_dict(py, &snapshot)
    }

    /// Pushes garbage into a worker's ring: the store must fail cleanly (test builds only).
    #[cfg(feature = "test-hooks")]
    fn _corrupt_ring_for_test(&self, worker: usize) -> PyResult<()> {
        self.store.corrupt_ring_for_test(worker).map_err(|e| to_py_err(&e))
    }
}

impl Drop for PagedStore {
    fn drop(&mut self) {
        // Closing waits for the workers: never with the GIL held.
        Python::attach(|py| py.detach(|| self.store.close()));
    }
}

impl Page {
    /// The page may be used: its store is open and it has not been freed.
    fn check_live(&self) -> PyResult<()> {
        let store = self.store.upgrade().ok_or_else(|| to_py_err(&Error::closed("the page's store")))?;
        if store.is_closed() {
            return Err(to_py_err(&Error::closed("the page's store")));
        }
        store.check(&self.handle).map_err(|e| to_py_err(&e))
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
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        page.exports.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.fetch_sub(1, Ordering::AcqRel);
    }

    /// Views of the page alive now (memoryview, numpy, torch).
    #[getter]
    fn views(&self) -> usize {
        self.exports.load(Ordering::Acquire)
    }
}
