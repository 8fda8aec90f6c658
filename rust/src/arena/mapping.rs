//! The shared-memory mapping: a sealed memfd, mapped `MAP_SHARED`, with its header written.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::{MemfdFlags, SealFlags};

use super::ArenaError;
use super::layout::{ArenaHeader, ArenaLayout, ArenaSpec, FLAG_HUGE_PAGES, HEADER_SIZE, OS_PAGE_SIZE, align_up};

/// Whether to back the arena with hugetlbfs pages (`MFD_HUGETLB`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HugePages {
    /// Ordinary 4 KiB shared-memory pages.
    #[default]
    Never,
    /// Huge pages when the system has enough reserved; ordinary pages otherwise.
    Try,
    /// Huge pages or an error.
    Require,
}

/// A shared-memory arena: header, ring regions, batch counters and KV-cache pages in one
/// sealed memfd mapped read/write and shared. Shared between threads as `Arc<Arena>`; other
/// processes map the same memory through [`Arena::fd`] (SCM_RIGHTS, or `/proc/<pid>/fd/<n>`).
///
/// The arena hands out raw pointers only: page memory is written by the kernel, by Python
/// views and possibly by other processes, so no Rust reference to it is ever formed (the
/// batch counters, accessed only atomically, are the exception).
pub struct Arena {
    /// `MmapRaw`: a shared read/write mapping that, unlike `MmapMut`, never hands out
    /// `&[u8]` over memory that others write concurrently.
    map: MmapRaw,
    file: File,
    layout: ArenaLayout,
    name: String,
    huge_pages: bool,
    /// Set while a [`super::PagePool`] manages this arena's pages (in this process).
    pub(crate) pooled: AtomicBool,
}

fn os(op: &'static str) -> impl FnOnce(std::io::Error) -> ArenaError {
    move |source| ArenaError::Os { op, source }
}

/// `lmcache-resp-<hint>-<pid>-<n>`, the hint reduced to at most 32 of `[A-Za-z0-9_.-]`.
fn memfd_name(hint: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let hint: String = hint
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '_' })
        .take(32)
        .collect();
    if hint.is_empty() { format!("lmcache-resp-{pid}-{n}") } else { format!("lmcache-resp-{hint}-{pid}-{n}") }
}

/// The default huge page size from /proc/meminfo (2 MiB if it cannot be read).
fn huge_page_size() -> usize {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("Hugepagesize:"))?;
            let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        })
        .filter(|size| size.is_power_of_two() && *size >= OS_PAGE_SIZE)
        .unwrap_or(2 << 20)
}

/// Creates, sizes, seals and maps the memfd; writes the header.
fn create_mapping(layout: &ArenaLayout, name: &str, huge: bool) -> Result<(File, MmapRaw), ArenaError> {
    let mut flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    if huge {
        flags |= MemfdFlags::HUGETLB;
    }
    let fd = rustix::fs::memfd_create(name, flags).map_err(|e| os("memfd_create")(e.into()))?;
    let file = File::from(fd);
    rustix::fs::ftruncate(&file, layout.total_size as u64).map_err(|e| os("ftruncate")(e.into()))?;
    // Sealed against resizing: no one holding the fd can shrink it under a mapping (SIGBUS).
    rustix::fs::fcntl_add_seals(&file, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
        .map_err(|e| os("fcntl(F_ADD_SEALS)")(e.into()))?;
    // MAP_SHARED, read/write. Sealed against shrinking, the file keeps the range backed.
    let map = MmapOptions::new().len(layout.total_size).map_raw(&file).map_err(os("mmap"))?;
    let header = layout.header(name, if huge { FLAG_HUGE_PAGES } else { 0 });
    let base = map.as_mut_ptr();
    debug_assert_eq!(base as usize % align_of::<ArenaHeader>(), 0);
    // SAFETY: the mapping is at least HEADER_SIZE bytes (every layout starts with the header),
    // page-aligned (so aligned for ArenaHeader), and not yet visible to anyone else.
    unsafe { base.cast::<ArenaHeader>().write(header) };
    Ok((file, map))
}

impl Arena {
    /// Creates an arena of ordinary shared-memory pages.
    pub fn create(spec: &ArenaSpec) -> Result<Arena, ArenaError> {
        Arena::create_with(spec, HugePages::Never)
    }

    /// Creates an arena, with huge pages as asked. [`HugePages::Try`] falls back to ordinary
    /// pages on any failure (no hugetlbfs pages reserved, kernel without support, ...).
    pub fn create_with(spec: &ArenaSpec, huge_pages: HugePages) -> Result<Arena, ArenaError> {
        let layout = ArenaLayout::compute(spec)?;
        let name = memfd_name(&spec.name_hint);
        if huge_pages != HugePages::Never {
            let mut huge_layout = layout.clone();
            let attempt = align_up(layout.total_size, huge_page_size())
                .ok_or(ArenaError::TooLarge { what: "huge-page-rounded arena", limit: super::MAX_ARENA_SIZE })
                .and_then(|size| {
                    huge_layout.total_size = size;
                    create_mapping(&huge_layout, &name, true)
                });
            match attempt {
                Ok((file, map)) => return Ok(Arena::from_parts(file, map, huge_layout, name, true)),
                Err(err) if huge_pages == HugePages::Require => return Err(err),
                Err(_) => {}
            }
        }
        let (file, map) = create_mapping(&layout, &name, false)?;
        Ok(Arena::from_parts(file, map, layout, name, false))
    }

    fn from_parts(file: File, map: MmapRaw, layout: ArenaLayout, name: String, huge_pages: bool) -> Arena {
        debug_assert_eq!(map.len(), layout.total_size);
        Arena { map, file, layout, name, huge_pages, pooled: AtomicBool::new(false) }
    }

    /// Maps an existing arena from its fd (taking ownership of it) and validates its header:
    /// magic, version, sizes, and every recorded offset against the layout of its sizes.
    /// The file must be sealed against shrinking, as arenas made by [`Arena::create`] are.
    pub fn attach(fd: OwnedFd) -> Result<Arena, ArenaError> {
        let file = File::from(fd);
        let seals = rustix::fs::fcntl_get_seals(&file).unwrap_or(SealFlags::empty());
        if !seals.contains(SealFlags::SHRINK) {
            return Err(ArenaError::NotSealed);
        }
        let file_size = file.metadata().map_err(os("fstat"))?.len();
        let len = usize::try_from(file_size).ok().filter(|&len| len >= HEADER_SIZE).ok_or_else(|| {
            ArenaError::InvalidHeader { reason: format!("the file has {file_size} bytes, too few for an arena") }
        })?;
        // Sealed against shrinking (checked above): the whole mapping stays backed.
        let map = MmapOptions::new().len(len).map_raw(&file).map_err(os("mmap"))?;
        // SAFETY: the mapping holds at least HEADER_SIZE bytes and is page-aligned; `read`
        // copies the header out, and only the copy is validated and used.
        let header = unsafe { map.as_ptr().cast::<ArenaHeader>().read() };
        let layout = ArenaLayout::from_header(&header, file_size)?;
        Ok(Arena::from_parts(file, map, layout, header.name(), header.flags & FLAG_HUGE_PAGES != 0))
    }

    /// [`Arena::attach`] to a duplicate of `fd`.
    pub fn open_fd(fd: BorrowedFd<'_>) -> Result<Arena, ArenaError> {
        Arena::attach(fd.try_clone_to_owned().map_err(os("dup"))?)
    }

    /// [`Arena::attach`] to a path, typically `/proc/<pid>/fd/<n>` of the creating process.
    pub fn open_path(path: &Path) -> Result<Arena, ArenaError> {
        let file = File::options().read(true).write(true).open(path).map_err(os("open"))?;
        Arena::attach(file.into())
    }

    /// The memfd: another process maps the arena through it.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The memfd's name (`lmcache-resp-<hint>-<pid>-<n>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bytes mapped.
    pub fn size(&self) -> usize {
        self.layout.total_size
    }

    /// Whether the arena is backed by hugetlbfs pages.
    pub fn huge_pages(&self) -> bool {
        self.huge_pages
    }

    /// Start of the mapping; every offset of the [`ArenaLayout`] is relative to it.
    pub fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// Where the header, rings, batch counters and pages lie in the mapping.
    pub fn layout(&self) -> &ArenaLayout {
        &self.layout
    }

    /// A copy of the header as it is in the mapping now.
    pub fn header(&self) -> ArenaHeader {
        // SAFETY: the mapping starts with HEADER_SIZE bytes, page-aligned; `read` copies.
        unsafe { self.map.as_ptr().cast::<ArenaHeader>().read() }
    }

    /// Number of pages in the page area.
    pub fn num_pages(&self) -> usize {
        self.layout.num_pages
    }

    /// Data bytes per page.
    pub fn page_size(&self) -> usize {
        self.layout.page_size
    }

    /// `(submission_base, submission_len, completion_base, completion_len)` of `worker`'s rings,
    /// zeroed at creation and left for the caller to initialize.
    ///
    /// # Panics
    /// If `worker` has no rings.
    pub fn ring_region(&self, worker: usize) -> (*mut u8, usize, *mut u8, usize) {
        let Some(ring) = self.layout.rings.get(worker) else {
            panic!("ring region of worker {worker} requested from an arena with {} rings", self.layout.rings.len())
        };
        let base = self.base();
        (
            base.wrapping_add(ring.submission_offset),
            ring.submission_len,
            base.wrapping_add(ring.completion_offset),
            ring.completion_len,
        )
    }

    /// Batch completion counter `slot` (zero at creation). It lives in shared memory: every
    /// process must access it atomically only.
    ///
    /// # Panics
    /// If `slot >= batch_slots`.
    pub fn batch_counter(&self, slot: usize) -> &AtomicU32 {
        assert!(slot < self.layout.batch_slots, "batch slot {slot} of {}", self.layout.batch_slots);
        let ptr = self.base().wrapping_add(self.layout.batch_table_offset + slot * self.layout.batch_stride);
        // SAFETY: the slot lies inside the mapping (layout invariant), which lives as long as
        // `&self`; it is 64-byte aligned; nothing accesses the batch table except through
        // these atomics (documented for other processes too).
        unsafe { AtomicU32::from_ptr(ptr.cast()) }
    }

    /// Start of page `index`, 4096-aligned; `page_size` bytes are the page's.
    ///
    /// # Panics
    /// If `index >= num_pages`.
    pub fn page_ptr(&self, index: usize) -> *mut u8 {
        self.base().wrapping_add(self.checked_page_offset(index))
    }

    /// Offset of page `index` from the arena base.
    ///
    /// # Panics
    /// If `index >= num_pages`.
    pub fn page_offset(&self, index: usize) -> u64 {
        self.checked_page_offset(index) as u64
    }

    fn checked_page_offset(&self, index: usize) -> usize {
        assert!(index < self.layout.num_pages, "page {index} of an arena with {} pages", self.layout.num_pages);
        self.layout.page_offset_unchecked(index)
    }

    /// The page whose data bytes contain `offset` (from the arena base); None outside every
    /// page, including the padding between a page's last byte and the next page.
    pub fn page_index_of_offset(&self, offset: u64) -> Option<usize> {
        self.layout.page_index_of_offset(offset)
    }

    /// Whether `ptr..ptr+len` lies inside the mapping.
    pub fn contains(&self, ptr: *const u8, len: usize) -> bool {
        let base = self.base() as usize;
        let addr = ptr as usize;
        addr >= base && addr.checked_add(len).is_some_and(|end| end <= base + self.size())
    }
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("name", &self.name)
            .field("base", &self.base())
            .field("huge_pages", &self.huge_pages)
            .field("layout", &self.layout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::RingRegionSpec;
    use std::os::fd::AsRawFd;
    use std::sync::Arc;

    const MIB: usize = 1 << 20;

    fn spec(page_size: usize, num_pages: usize) -> ArenaSpec {
        ArenaSpec {
            page_size,
            num_pages,
            rings: vec![
                RingRegionSpec { submission_bytes: 1000, completion_bytes: 5000 },
                RingRegionSpec { submission_bytes: 64, completion_bytes: 64 },
            ],
            batch_slots: 16,
            name_hint: "unit test".into(),
        }
    }

    fn read(ptr: *const u8) -> u8 {
        // SAFETY: tests pass pointers into a live arena mapping.
        unsafe { ptr.read_volatile() }
    }

    fn write(ptr: *mut u8, value: u8) {
        // SAFETY: tests pass pointers into a live arena mapping that no one else writes.
        unsafe { ptr.write_volatile(value) }
    }

    #[test]
    fn arena_is_send_and_sync() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Arena>();
        shareable::<Arc<Arena>>();
    }

    #[test]
    fn every_page_first_and_last_byte_is_writable() {
        for page_size in [1, 4095, 4096, 4097, 2 * MIB, 4 * MIB + 1] {
            let arena = Arena::create(&spec(page_size, 6)).unwrap();
            assert_eq!(arena.size(), arena.layout().total_size);
            assert_eq!(arena.base() as usize % OS_PAGE_SIZE, 0);
            for i in 0..6 {
                let page = arena.page_ptr(i);
                assert_eq!(page as usize % OS_PAGE_SIZE, 0);
                assert!(arena.contains(page, page_size));
                assert_eq!(arena.page_offset(i), page as u64 - arena.base() as u64);
                write(page, i as u8 + 1);
                write(page.wrapping_add(page_size - 1), 0xF0 | i as u8);
            }
            for i in 0..6 {
                let page = arena.page_ptr(i);
                let last = page.wrapping_add(page_size - 1);
                if page_size > 1 {
                    assert_eq!(read(page), i as u8 + 1, "page {i} of {page_size} bytes");
                }
                assert_eq!(read(last), 0xF0 | i as u8, "page {i} of {page_size} bytes");
            }
            // The header is intact after writing every page.
            assert_eq!(ArenaLayout::from_header(&arena.header(), arena.size() as u64).unwrap(), *arena.layout());
        }
    }

    #[test]
    fn name_and_fd() {
        let arena = Arena::create(&spec(4096, 1)).unwrap();
        let pid = std::process::id();
        assert!(arena.name().starts_with(&format!("lmcache-resp-unit_test-{pid}-")), "{}", arena.name());
        assert_eq!(arena.header().name(), arena.name());
        let link = std::fs::read_link(format!("/proc/self/fd/{}", arena.fd().as_raw_fd())).unwrap();
        assert!(link.to_string_lossy().starts_with(&format!("/memfd:{}", arena.name())), "{link:?}");
        let other = Arena::create(&ArenaSpec { name_hint: String::new(), ..spec(4096, 1) }).unwrap();
        assert!(other.name().starts_with(&format!("lmcache-resp-{pid}-")), "{}", other.name());
        assert_ne!(other.name(), arena.name());
    }

    #[test]
    fn second_mapping_sees_the_same_memory_and_layout() {
        let first = Arena::create(&spec(4097, 4)).unwrap();
        let second = Arena::open_fd(first.fd()).unwrap();
        let third = Arena::open_path(Path::new(&format!("/proc/self/fd/{}", first.fd().as_raw_fd()))).unwrap();
        for other in [&second, &third] {
            assert_ne!(other.base(), first.base(), "a distinct mapping");
            assert_eq!(other.layout(), first.layout());
            assert_eq!(other.name(), first.name());
            assert_eq!(other.size(), first.size());
            assert!(!other.contains(first.page_ptr(0), 1));
        }

        write(first.page_ptr(3).wrapping_add(4096), 0xAB);
        assert_eq!(read(second.page_ptr(3).wrapping_add(4096)), 0xAB);
        write(third.page_ptr(0), 0x5C);
        assert_eq!(read(first.page_ptr(0)), 0x5C);

        let (sub, sub_len, comp, comp_len) = first.ring_region(1);
        let (sub2, sub_len2, comp2, comp_len2) = second.ring_region(1);
        assert_eq!((sub_len, comp_len), (sub_len2, comp_len2));
        write(sub, 7);
        write(comp.wrapping_add(comp_len - 1), 9);
        assert_eq!(read(sub2), 7);
        assert_eq!(read(comp2.wrapping_add(comp_len2 - 1)), 9);

        first.batch_counter(5).fetch_add(3, Ordering::AcqRel);
        assert_eq!(second.batch_counter(5).load(Ordering::Acquire), 3);
        assert_eq!(second.batch_counter(4).load(Ordering::Acquire), 0);
        drop(first);
        // The memory outlives the creator's mapping while another mapping holds it.
        assert_eq!(read(second.page_ptr(0)), 0x5C);
    }

    #[test]
    fn ring_only_arena() {
        let arena = Arena::create(&spec(4096, 0)).unwrap();
        assert_eq!(arena.num_pages(), 0);
        assert_eq!(arena.size(), arena.layout().pages_offset);
        let (sub, len, _, _) = arena.ring_region(0);
        assert!(arena.contains(sub, len));
        assert_eq!(Arena::open_fd(arena.fd()).unwrap().layout(), arena.layout());
    }

    #[test]
    fn regions_are_where_the_layout_says() {
        let arena = Arena::create(&spec(10_000, 3)).unwrap();
        let base = arena.base() as usize;
        let layout = arena.layout().clone();
        for (worker, ring) in layout.rings.iter().enumerate() {
            let (sub, sub_len, comp, comp_len) = arena.ring_region(worker);
            assert_eq!(sub as usize - base, ring.submission_offset);
            assert_eq!(comp as usize - base, ring.completion_offset);
            assert_eq!(sub as usize % 64, 0);
            assert!(arena.contains(sub, sub_len) && arena.contains(comp, comp_len));
        }
        for slot in 0..16 {
            let counter = arena.batch_counter(slot) as *const AtomicU32 as usize;
            assert_eq!(counter - base, layout.batch_table_offset + 64 * slot);
        }
        let page1 = arena.page_offset(1);
        assert_eq!(arena.page_index_of_offset(page1), Some(1));
        assert_eq!(arena.page_index_of_offset(page1 + 9_999), Some(1));
        assert_eq!(arena.page_index_of_offset(page1 + 10_000), None, "padding after the page");
        assert_eq!(arena.page_index_of_offset(page1 - 1), None);
        assert_eq!(arena.page_index_of_offset(0), None);
        assert_eq!(arena.page_index_of_offset(arena.size() as u64), None);
        assert_eq!(arena.page_index_of_offset(u64::MAX), None);

        assert!(arena.contains(arena.base(), arena.size()));
        assert!(arena.contains(arena.base().wrapping_add(arena.size()), 0));
        assert!(!arena.contains(arena.base(), arena.size() + 1));
        assert!(!arena.contains(arena.base().wrapping_sub(1), 1));
        assert!(!arena.contains(arena.base().wrapping_add(1), usize::MAX));
        let outside = [0u8; 4];
        assert!(!arena.contains(outside.as_ptr(), 4));
    }

    #[test]
    #[should_panic(expected = "page 3 of an arena with 3 pages")]
    fn page_out_of_range_panics() {
        Arena::create(&spec(4096, 3)).unwrap().page_ptr(3);
    }

    #[test]
    fn attach_refuses_what_is_not_an_arena() {
        // A sealed memfd with garbage in it.
        let fd = rustix::fs::memfd_create("not-an-arena", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, 8192).unwrap();
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK).unwrap();
        let err = Arena::attach(fd).unwrap_err();
        assert!(matches!(&err, ArenaError::InvalidHeader { reason } if reason.contains("magic")), "{err:?}");

        // Unsealed: a peer could shrink it under the mapping.
        let fd = rustix::fs::memfd_create("unsealed", MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 8192).unwrap();
        assert!(matches!(Arena::attach(fd), Err(ArenaError::NotSealed)));

        // Too small.
        let fd = rustix::fs::memfd_create("tiny", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, 100).unwrap();
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK).unwrap();
        assert!(matches!(Arena::attach(fd), Err(ArenaError::InvalidHeader { .. })));

        // A real arena whose header was damaged afterwards.
        let arena = Arena::create(&spec(4096, 2)).unwrap();
        let version = arena.base().wrapping_add(std::mem::offset_of!(ArenaHeader, version));
        write(version, 42);
        let err = Arena::open_fd(arena.fd()).unwrap_err();
        assert!(err.to_string().contains("version 42"), "{err}");
    }

    #[test]
    fn created_arena_cannot_be_resized() {
        let arena = Arena::create(&spec(4096, 2)).unwrap();
        assert!(rustix::fs::ftruncate(arena.fd(), 4096).is_err());
        assert!(rustix::fs::ftruncate(arena.fd(), arena.size() as u64 * 2).is_err());
    }

    #[test]
    fn huge_pages_are_optional() {
        let arena = Arena::create_with(&spec(4097, 3), HugePages::Try).unwrap();
        if arena.huge_pages() {
            assert_eq!(arena.size() % huge_page_size(), 0);
        } else {
            assert_eq!(arena.size(), ArenaLayout::compute(&spec(4097, 3)).unwrap().total_size);
        }
        write(arena.page_ptr(2), 1);
        assert_eq!(Arena::open_fd(arena.fd()).unwrap().huge_pages(), arena.huge_pages());
        match Arena::create_with(&spec(4096, 1), HugePages::Require) {
            Ok(arena) => assert!(arena.huge_pages()),
            Err(err) => assert!(matches!(err, ArenaError::Os { .. }), "{err:?}"),
        }
    }
}
