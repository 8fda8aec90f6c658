//! Applying a placement on the running host: thread CPU affinity and memory
//! policy. All binding goes through [`HostTopology`], never a caller-given
//! topology, because hwloc silently ignores binding on XML topologies.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::io;
use std::mem::MaybeUninit;

use hwlocality::cpu::binding::CpuBindingFlags;
use hwlocality::memory::binding::{MemoryBindingFlags, MemoryBindingPolicy};

use crate::cpu_list::format_cpu_list;
use crate::error::{NumaError, Result};
use crate::plan::Placement;
use crate::topology::{HostTopology, cpuset_from, cpuset_to_vec, nodeset_from, numa_nodes};

/// Kernel thread id of the calling thread (what `top -H` and
/// [`thread_cpus`] use).
pub fn current_thread_id() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// Pins the calling thread to `cpus` (OS indices) on the real host.
///
/// Every CPU must exist and be allowed for this process; otherwise the error
/// lists the allowed ones instead of letting the kernel silently intersect.
pub fn bind_current_thread(cpus: &[u32]) -> Result<()> {
    if cpus.is_empty() {
        return Err(NumaError::InvalidArgument("cannot bind a thread to an empty CPU list".to_owned()));
    }
    let host = HostTopology::get()?;
    let allowed = cpuset_to_vec(&host.allowed_cpuset());
    let (unusable, _): (Vec<u32>, Vec<u32>) = cpus.iter().partition(|c| !allowed.contains(c));
    if !unusable.is_empty() {
        let complete = host.complete_cpuset();
        let (missing, disallowed) = unusable.into_iter().partition(|&c| !complete.is_set(c as usize));
        return Err(NumaError::CpusUnavailable { missing, disallowed, allowed });
    }
    host.bind_cpu(&cpuset_from(cpus), CpuBindingFlags::THREAD).map_err(|e| NumaError::Binding {
        action: format!("bind thread {} to CPUs {}", current_thread_id(), format_cpu_list(cpus)),
        detail: e.to_string(),
    })
}

/// Pins the calling thread as worker `worker` of `placement`.
///
/// Returns the CPU used, or `None` when the placement leaves that worker
/// unpinned (then nothing is changed).
pub fn apply_worker_placement(placement: &Placement, worker: usize) -> Result<Option<u32>> {
    match placement.worker_cpus.get(worker) {
        Some(Some(cpu)) => bind_current_thread(&[*cpu]).map(|()| Some(*cpu)),
        Some(None) => Ok(None),
        None => Err(NumaError::InvalidArgument(format!(
            "worker {worker} is out of range: the placement has {} workers",
            placement.worker_cpus.len()
        ))),
    }
}

/// CPUs the calling thread may run on (`sched_getaffinity`).
pub fn current_thread_cpus() -> Result<Vec<u32>> {
    thread_cpus(0)
}

/// CPUs thread `tid` may run on (`sched_getaffinity`); 0 means the caller.
///
/// Read straight from the kernel rather than hwloc so that it independently
/// checks what the binding functions did.
pub fn thread_cpus(tid: i32) -> Result<Vec<u32>> {
    const WORD_BITS: usize = libc::c_ulong::BITS as usize;
    // The kernel rejects buffers smaller than its CPU mask with EINVAL, so
    // start at glibc's 1024 CPUs and grow for bigger machines.
    let mut words = 1024 / WORD_BITS;
    loop {
        let mut mask: Vec<libc::c_ulong> = vec![0; words];
        let bytes = words * std::mem::size_of::<libc::c_ulong>();
        // SAFETY: `mask` is writable for `bytes` bytes and suitably aligned
        // for cpu_set_t (an array of unsigned long); the kernel writes at
        // most `bytes` bytes.
        let rc = unsafe { libc::sched_getaffinity(tid, bytes, mask.as_mut_ptr().cast::<libc::cpu_set_t>()) };
        if rc == 0 {
            return Ok(mask
                .iter()
                .enumerate()
                .flat_map(|(w, &bits)| {
                    (0..WORD_BITS).filter(move |b| bits >> b & 1 == 1).map(move |b| (w * WORD_BITS + b) as u32)
                })
                .collect());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINVAL) && words < (1 << 20) / WORD_BITS {
            words *= 2;
            continue;
        }
        return Err(NumaError::io(format!("could not read the CPU affinity of thread {tid}"), err));
    }
}

/// Binds the pages of `[ptr, ptr + len)` to NUMA node `node` on the host
/// (hwloc `set_area_membind`, policy Bind).
///
/// The binding is not STRICT, so hwloc asks the kernel to prefer `node`
/// (`MPOL_PREFERRED_MANY`/`MPOL_PREFERRED`) rather than forbid every other
/// node: when `node` runs out of memory the buffer spills over instead of the
/// process being OOM-killed.
///
/// Only pages allocated afterwards are placed on `node`; pages already
/// touched stay where they are (hwlocality refuses the MIGRATE flag for
/// areas), so call this right after mapping the buffer and before
/// [`prefault`] or any use. The kernel widens the range to whole pages.
/// `len == 0` does nothing.
///
/// # Safety
///
/// `[ptr, ptr + len)` must lie within memory mapped by this process (e.g.
/// one mmap region or allocation) for the duration of the call. The memory
/// may be uninitialized and may be concurrently used by other threads: it is
/// never read or written here.
pub unsafe fn bind_memory(ptr: *const u8, len: usize, node: u32) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    if ptr.is_null() || len > isize::MAX as usize {
        return Err(NumaError::InvalidArgument(format!("cannot bind memory at {ptr:p} with length {len}")));
    }
    let host = HostTopology::get()?;
    if host.node_with_os_index(node as usize).is_none() {
        return Err(NumaError::UnknownNumaNode { node, existing: numa_nodes(host) });
    }
    // SAFETY: the caller guarantees the range is mapped for this call and
    // `len` fits in isize. UnsafeCell<MaybeUninit<u8>> asserts neither
    // initialization nor exclusive/immutable access, so the reference is
    // valid even while other threads write to the buffer; hwloc only passes
    // the address range to mbind and never dereferences it.
    let area: &[UnsafeCell<MaybeUninit<u8>>] = unsafe { std::slice::from_raw_parts(ptr.cast(), len) };
    host.bind_memory_area(area, &nodeset_from(&[node]), MemoryBindingPolicy::Bind, MemoryBindingFlags::empty()).map_err(
        |e| NumaError::Binding {
            action: format!("bind {len} bytes at {ptr:p} to NUMA node {node}"),
            detail: e.to_string(),
        },
    )
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096).max(1)
}

/// Faults in every page of `[ptr, ptr + len)` for writing, so the physical
/// pages are allocated now (on the node chosen by [`bind_memory`]) rather
/// than on the I/O hot path. Contents are not changed.
///
/// Uses `MADV_POPULATE_WRITE` (Linux 5.14+), which does not touch the data;
/// on older kernels it falls back to rewriting one byte per page with its
/// own value.
///
/// # Safety
///
/// `[ptr, ptr + len)` must be valid, writable memory of this process. On the
/// fallback path a byte per page is read and written back, which would undo
/// a concurrent write to that byte: no other thread may write to the range
/// during the call.
pub unsafe fn prefault(ptr: *mut u8, len: usize) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let page = page_size();
    let start = ptr as usize;
    let Some(end) = start.checked_add(len) else {
        return Err(NumaError::InvalidArgument(format!(
            "prefault range at {ptr:p} with length {len} overflows the address space"
        )));
    };
    // madvise needs a page-aligned start; widening to whole pages stays in
    // the same mapping because mappings are page-granular.
    let aligned = start & !(page - 1);
    // SAFETY: the caller guarantees the range is mapped and writable;
    // MADV_POPULATE_WRITE only allocates backing pages and never changes
    // their contents, so the widened head/tail of the first/last page is
    // unaffected.
    let rc = unsafe { libc::madvise(aligned as *mut c_void, end - aligned, libc::MADV_POPULATE_WRITE) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EINVAL) {
        return Err(NumaError::io(format!("could not prefault {len} bytes at {ptr:p}"), err));
    }
    // EINVAL: kernel without MADV_POPULATE_WRITE (or a mapping it refuses);
    // touch one byte per page, staying inside the caller's range.
    let mut addr = start;
    while addr < end {
        let byte = addr as *mut u8;
        // SAFETY: addr is within [ptr, ptr + len), which the caller
        // guarantees is writable and not concurrently written; writing back
        // the value just read leaves the contents unchanged.
        unsafe { byte.write_volatile(byte.read_volatile()) };
        addr = (addr & !(page - 1)) + page;
    }
    Ok(())
}

/// The NUMA node holding the page that contains `ptr`, if the kernel can
/// tell.
///
/// `None` means unknown: the page is not populated yet (or is the shared
/// zero page), the address is unmapped, or the kernel does not allow the
/// query (no NUMA support, seccomp). It never guesses. Uses `move_pages` in
/// query mode, which unlike `get_mempolicy(MPOL_F_ADDR)` does not fault the
/// page in.
pub fn memory_node_of(ptr: *const u8) -> Result<Option<u32>> {
    let page = (ptr as usize) & !(page_size() - 1);
    let mut pages = [page as *mut c_void];
    let mut status = [i32::MIN];
    // SAFETY: with a null `nodes` array move_pages only reports each page's
    // node into `status`; `pages` and `status` are valid for one element,
    // and the kernel validates the queried address itself (any value is
    // safe to pass).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0 as libc::pid_t,
            1 as libc::c_ulong,
            pages.as_mut_ptr(),
            std::ptr::null::<libc::c_int>(),
            status.as_mut_ptr(),
            0 as libc::c_int,
        )
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::ENOSYS | libc::EPERM | libc::EACCES) => Ok(None),
            _ => Err(NumaError::io(format!("could not query the NUMA node of {ptr:p}"), err)),
        };
    }
    // Negative status is -errno (ENOENT: not present, EFAULT: zero page or
    // unmapped).
    Ok(u32::try_from(status[0]).ok())
}
