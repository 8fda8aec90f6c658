//! Where everything lives inside an arena: computed from an [`ArenaSpec`], recorded in the
//! [`ArenaHeader`] at offset 0 so that a second mapping (or another process) can find it again.

use super::ArenaError;

/// Size of the header region at offset 0. The [`ArenaHeader`] struct fills it exactly.
pub const HEADER_SIZE: usize = 4096;
/// Alignment of the page area, of every page, and of every ring region (the OS page size
/// on every platform this crate targets).
pub const OS_PAGE_SIZE: usize = 4096;
/// Distance between two batch counters: one cache line each, so that batches completing on
/// different threads do not false-share.
pub const BATCH_SLOT_STRIDE: usize = 64;
/// The most ring pairs (I/O workers) one header can describe.
pub const MAX_RINGS: usize = 122;
/// Pages are addressed by a `u32` index in [`super::PageHandle`].
pub const MAX_PAGES: usize = u32::MAX as usize;
/// Upper bound on the size of one arena (64 TiB): anything larger is a sizing bug.
pub const MAX_ARENA_SIZE: usize = 1 << 46;
/// `b"LMCARENA"`, the first eight bytes of every arena.
pub const ARENA_MAGIC: [u8; 8] = *b"LMCARENA";
/// Version of the header format below. Bump on any incompatible change.
pub const ARENA_VERSION: u32 = 1;
/// Bytes reserved for the arena's name in the header (NUL-padded UTF-8).
pub const HEADER_NAME_LEN: usize = 96;
/// Header `flags` bit: the arena is backed by hugetlbfs pages.
pub const FLAG_HUGE_PAGES: u32 = 1;

/// The sizes of one I/O worker's ring pair. Sizes are whole region sizes, ring header included,
/// as computed by the caller (e.g. with `ring::ring_size`); the arena only reserves and aligns
/// them and leaves initialization to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RingRegionSpec {
    /// Bytes of the submission ring's region (client to worker).
    pub submission_bytes: usize,
    /// Bytes of the completion ring's region (worker to client).
    pub completion_bytes: usize,
}

/// What an arena must hold.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ArenaSpec {
    /// Bytes per KV-cache page (LMCache's `obj_size`). Must be > 0.
    pub page_size: usize,
    /// Number of pages. 0 is allowed: an arena holding only rings, for foreign page memory.
    pub num_pages: usize,
    /// One ring pair per I/O worker.
    pub rings: Vec<RingRegionSpec>,
    /// Number of `AtomicU32` batch completion counters.
    pub batch_slots: usize,
    /// Goes into the memfd name (`lmcache-resp-<hint>-<pid>-<n>`), sanitized and shortened.
    pub name_hint: String,
}

impl ArenaSpec {
    /// The pages of a pool given either as a page count or, as LMCache gives it, as a size in
    /// bytes (`pool_size // page_size`): exactly one of the two.
    pub fn pool_pages(
        page_size: usize,
        num_pages: Option<usize>,
        pool_size: Option<usize>,
    ) -> Result<usize, ArenaError> {
        match (num_pages, pool_size) {
            (Some(pages), None) => Ok(pages),
            (None, Some(bytes)) => ArenaSpec::pages_for_pool_size(bytes, page_size),
            _ => Err(ArenaError::PoolSize),
        }
    }

    /// LMCache's page count for a pool: `pool_size // page_size`; an incomplete tail is
    /// skipped.
    pub fn pages_for_pool_size(pool_size: usize, page_size: usize) -> Result<usize, ArenaError> {
        if page_size == 0 {
            return Err(ArenaError::ZeroPageSize);
        }
        Ok(pool_size / page_size)
    }
}

/// The byte offsets of one worker's rings, relative to the arena base.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RingRegion {
    /// Where the submission ring's region starts; 4096-aligned.
    pub submission_offset: usize,
    /// Bytes of the submission ring's region, as the spec asked (not rounded up).
    pub submission_len: usize,
    /// Where the completion ring's region starts; 4096-aligned.
    pub completion_offset: usize,
    /// Bytes of the completion ring's region, as the spec asked (not rounded up).
    pub completion_len: usize,
}

/// Where everything is, in bytes from the arena base:
///
/// ```text
/// 0                  header (ArenaHeader, 4096 bytes)
/// rings_offset       ring 0 submission | ring 0 completion | ring 1 submission | ...
///                    (each region starts on its own 4096-byte boundary)
/// batch_table_offset batch_slots counters, one AtomicU32 per 64-byte line (4096-aligned)
/// pages_offset       page i at pages_offset + i * page_stride (4096-aligned)
/// total_size         end of the mapping (a multiple of 4096; of the huge page size for
///                    hugetlb arenas)
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ArenaLayout {
    /// Bytes of the whole mapping: a multiple of 4096 (of the huge page size for hugetlb
    /// arenas).
    pub total_size: usize,
    /// Data bytes per page, as the spec asked.
    pub page_size: usize,
    /// `page_size` rounded up to 4096.
    pub page_stride: usize,
    /// Number of pages in the page area.
    pub num_pages: usize,
    /// Where page 0 starts.
    pub pages_offset: usize,
    /// Where the first ring region starts (right after the header).
    pub rings_offset: usize,
    /// Each I/O worker's ring regions, in worker order.
    pub rings: Vec<RingRegion>,
    /// Where the batch counter table starts.
    pub batch_table_offset: usize,
    /// Number of batch counters in the table.
    pub batch_slots: usize,
    /// Bytes from one batch counter to the next ([`BATCH_SLOT_STRIDE`]).
    pub batch_stride: usize,
}

fn too_large(what: &'static str) -> ArenaError {
    ArenaError::TooLarge { what, limit: MAX_ARENA_SIZE }
}

/// `value` rounded up to a multiple of `align` (a power of two), or None on overflow.
pub(crate) fn align_up(value: usize, align: usize) -> Option<usize> {
    debug_assert!(align.is_power_of_two());
    Some(value.checked_add(align - 1)? & !(align - 1))
}

impl ArenaLayout {
    /// Lays out `spec`. Errors on a zero page size, empty ring regions, too many rings or
    /// pages, and any size that overflows or exceeds [`MAX_ARENA_SIZE`].
    pub fn compute(spec: &ArenaSpec) -> Result<ArenaLayout, ArenaError> {
        if spec.page_size == 0 {
            return Err(ArenaError::ZeroPageSize);
        }
        if spec.rings.len() > MAX_RINGS {
            return Err(ArenaError::TooManyRings { requested: spec.rings.len(), max: MAX_RINGS });
        }
        if spec.num_pages > MAX_PAGES {
            return Err(ArenaError::TooManyPages { requested: spec.num_pages, max: MAX_PAGES });
        }
        if spec.page_size > MAX_ARENA_SIZE {
            return Err(too_large("page size"));
        }
        let place = |offset: usize, len: usize, what: &'static str| -> Result<usize, ArenaError> {
            let end = offset.checked_add(len).ok_or_else(|| too_large(what))?;
            let next = align_up(end, OS_PAGE_SIZE).ok_or_else(|| too_large(what))?;
            if next > MAX_ARENA_SIZE { Err(too_large(what)) } else { Ok(next) }
        };

        let rings_offset = HEADER_SIZE;
        let mut offset = rings_offset;
        let mut rings = Vec::with_capacity(spec.rings.len());
        for (worker, ring) in spec.rings.iter().enumerate() {
            if ring.submission_bytes == 0 || ring.completion_bytes == 0 {
                return Err(ArenaError::EmptyRingRegion { worker });
            }
            let submission_offset = offset;
            offset = place(offset, ring.submission_bytes, "ring regions")?;
            let completion_offset = offset;
            offset = place(offset, ring.completion_bytes, "ring regions")?;
            rings.push(RingRegion {
                submission_offset,
                submission_len: ring.submission_bytes,
                completion_offset,
                completion_len: ring.completion_bytes,
            });
        }

        let batch_table_offset = offset;
        let batch_bytes = spec.batch_slots.checked_mul(BATCH_SLOT_STRIDE).ok_or_else(|| too_large("batch table"))?;
        offset = place(offset, batch_bytes, "batch table")?;

        let pages_offset = offset;
        let page_stride = align_up(spec.page_size, OS_PAGE_SIZE).ok_or_else(|| too_large("page size"))?;
        let page_bytes = spec.num_pages.checked_mul(page_stride).ok_or_else(|| too_large("page area"))?;
        let total_size = place(pages_offset, page_bytes, "page area")?;

        Ok(ArenaLayout {
            total_size,
            page_size: spec.page_size,
            page_stride,
            num_pages: spec.num_pages,
            pages_offset,
            rings_offset,
            rings,
            batch_table_offset,
            batch_slots: spec.batch_slots,
            batch_stride: BATCH_SLOT_STRIDE,
        })
    }

    /// The spec this layout was computed from (without the name hint).
    pub fn spec(&self) -> ArenaSpec {
        ArenaSpec {
            page_size: self.page_size,
            num_pages: self.num_pages,
            rings: self
                .rings
                .iter()
                .map(|r| RingRegionSpec { submission_bytes: r.submission_len, completion_bytes: r.completion_len })
                .collect(),
            batch_slots: self.batch_slots,
            name_hint: String::new(),
        }
    }

    /// Offset of page `index` from the arena base (no bounds check).
    pub(crate) fn page_offset_unchecked(&self, index: usize) -> usize {
        self.pages_offset + index * self.page_stride
    }

    /// The page whose `page_size` data bytes contain `offset` (padding between pages belongs
    /// to no page).
    pub fn page_index_of_offset(&self, offset: u64) -> Option<usize> {
        let offset = usize::try_from(offset).ok()?;
        let rel = offset.checked_sub(self.pages_offset)?;
        let index = rel / self.page_stride;
        (index < self.num_pages && rel % self.page_stride < self.page_size).then_some(index)
    }

    /// The header that describes this layout.
    pub(crate) fn header(&self, name: &str, flags: u32) -> ArenaHeader {
        let mut name_bytes = [0u8; HEADER_NAME_LEN];
        // Keep a terminating NUL; names are ASCII (sanitized), so any cut is a char boundary.
        let n = name.len().min(HEADER_NAME_LEN - 1);
        name_bytes[..n].copy_from_slice(&name.as_bytes()[..n]);
        let mut rings = [RingHeaderEntry::default(); MAX_RINGS];
        for (entry, ring) in rings.iter_mut().zip(&self.rings) {
            *entry = RingHeaderEntry {
                submission_offset: ring.submission_offset as u64,
                submission_len: ring.submission_len as u64,
                completion_offset: ring.completion_offset as u64,
                completion_len: ring.completion_len as u64,
            };
        }
        ArenaHeader {
            magic: ARENA_MAGIC,
            version: ARENA_VERSION,
            header_size: HEADER_SIZE as u32,
            total_size: self.total_size as u64,
            page_size: self.page_size as u64,
            page_stride: self.page_stride as u64,
            num_pages: self.num_pages as u64,
            pages_offset: self.pages_offset as u64,
            rings_offset: self.rings_offset as u64,
            batch_table_offset: self.batch_table_offset as u64,
            batch_slots: self.batch_slots as u64,
            batch_stride: self.batch_stride as u64,
            num_rings: self.rings.len() as u32,
            flags,
            name: name_bytes,
            rings,
        }
    }

    /// Rebuilds the layout from a header read out of a mapping of `file_size` bytes. Nothing in
    /// the header is trusted: the layout is recomputed from its sizes and every recorded offset
    /// must match, so every region is known to lie inside the mapping.
    pub(crate) fn from_header(header: &ArenaHeader, file_size: u64) -> Result<ArenaLayout, ArenaError> {
        let bad = |reason: String| ArenaError::InvalidHeader { reason };
        if header.magic != ARENA_MAGIC {
            return Err(bad(format!("magic is {:?}, expected {:?}", header.magic, ARENA_MAGIC)));
        }
        if header.version != ARENA_VERSION {
            return Err(bad(format!("format version {} is not the supported {ARENA_VERSION}", header.version)));
        }
        if header.header_size as usize != HEADER_SIZE {
            return Err(bad(format!("header size {} is not {HEADER_SIZE}", header.header_size)));
        }
        if header.total_size != file_size {
            return Err(bad(format!("header says {} bytes but the file has {file_size}", header.total_size)));
        }
        let num_rings = header.num_rings as usize;
        if num_rings > MAX_RINGS {
            return Err(bad(format!("{num_rings} rings, at most {MAX_RINGS} fit the header")));
        }
        let size = |value: u64, what: &str| {
            usize::try_from(value).map_err(|_| bad(format!("{what} {value} does not fit this platform")))
        };
        let spec = ArenaSpec {
            page_size: size(header.page_size, "page size")?,
            num_pages: size(header.num_pages, "page count")?,
            rings: header.rings[..num_rings]
                .iter()
                .map(|r| {
                    Ok(RingRegionSpec {
                        submission_bytes: size(r.submission_len, "ring size")?,
                        completion_bytes: size(r.completion_len, "ring size")?,
                    })
                })
                .collect::<Result<_, ArenaError>>()?,
            batch_slots: size(header.batch_slots, "batch slot count")?,
            name_hint: String::new(),
        };
        let mut layout =
            ArenaLayout::compute(&spec).map_err(|err| bad(format!("its sizes do not make an arena: {err}")))?;
        let total_size = size(header.total_size, "total size")?;
        if total_size < layout.total_size || total_size % OS_PAGE_SIZE != 0 {
            return Err(bad(format!("total size {total_size} does not hold the {} bytes laid out", layout.total_size)));
        }
        // A hugetlb arena is rounded up to its huge page size.
        layout.total_size = total_size;
        if layout.header(&header.name(), header.flags) != *header {
            return Err(bad("its recorded offsets disagree with the layout of its sizes".to_string()));
        }
        Ok(layout)
    }
}

/// One ring pair's entry in the header.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingHeaderEntry {
    /// [`RingRegion::submission_offset`].
    pub submission_offset: u64,
    /// [`RingRegion::submission_len`].
    pub submission_len: u64,
    /// [`RingRegion::completion_offset`].
    pub completion_offset: u64,
    /// [`RingRegion::completion_len`].
    pub completion_len: u64,
}

/// The arena header at offset 0, in native byte order (the arena is shared between processes
/// of one host). Byte offsets of the fields: magic 0, version 8, header_size 12, total_size 16,
/// page_size 24, page_stride 32, num_pages 40, pages_offset 48, rings_offset 56,
/// batch_table_offset 64, batch_slots 72, batch_stride 80, num_rings 88, flags 92, name 96,
/// rings 192 (32 bytes each: submission offset, submission len, completion offset,
/// completion len; the first `num_rings` are used).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaHeader {
    /// [`ARENA_MAGIC`]: tells an arena from any other file.
    pub magic: [u8; 8],
    /// [`ARENA_VERSION`] of the writer; a reader refuses any other.
    pub version: u32,
    /// [`HEADER_SIZE`] of the writer; a reader refuses any other.
    pub header_size: u32,
    /// [`ArenaLayout::total_size`]; must equal the size of the file.
    pub total_size: u64,
    /// [`ArenaLayout::page_size`].
    pub page_size: u64,
    /// [`ArenaLayout::page_stride`].
    pub page_stride: u64,
    /// [`ArenaLayout::num_pages`].
    pub num_pages: u64,
    /// [`ArenaLayout::pages_offset`].
    pub pages_offset: u64,
    /// [`ArenaLayout::rings_offset`].
    pub rings_offset: u64,
    /// [`ArenaLayout::batch_table_offset`].
    pub batch_table_offset: u64,
    /// [`ArenaLayout::batch_slots`].
    pub batch_slots: u64,
    /// [`ArenaLayout::batch_stride`].
    pub batch_stride: u64,
    /// How many entries of `rings` are used.
    pub num_rings: u32,
    /// `FLAG_*` bits, e.g. [`FLAG_HUGE_PAGES`].
    pub flags: u32,
    /// The arena's name: NUL-padded UTF-8 with at least one terminating NUL
    /// ([`ArenaHeader::name`]).
    pub name: [u8; HEADER_NAME_LEN],
    /// Every worker's ring regions; entries past `num_rings` are zero.
    pub rings: [RingHeaderEntry; MAX_RINGS],
}

const _: () = assert!(size_of::<ArenaHeader>() == HEADER_SIZE);
const _: () = assert!(std::mem::offset_of!(ArenaHeader, name) == 96);
const _: () = assert!(std::mem::offset_of!(ArenaHeader, rings) == 192);

impl ArenaHeader {
    /// The name recorded at creation (up to the first NUL).
    pub fn name(&self) -> String {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(self.name.len());
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: usize = 1 << 20;

    /// Every invariant the rest of the crate relies on.
    fn assert_layout_ok(spec: &ArenaSpec, l: &ArenaLayout) {
        assert_eq!(l.page_size, spec.page_size);
        assert_eq!(l.num_pages, spec.num_pages);
        assert_eq!(l.page_stride % OS_PAGE_SIZE, 0);
        assert!(l.page_stride >= l.page_size && l.page_stride - l.page_size < OS_PAGE_SIZE);
        assert_eq!(l.total_size % OS_PAGE_SIZE, 0);
        assert_eq!(l.pages_offset % OS_PAGE_SIZE, 0);
        assert_eq!(l.batch_table_offset % OS_PAGE_SIZE, 0);
        assert_eq!(l.batch_stride, 64);

        // (start, len) of every region, all of which must lie in the mapping.
        let mut regions = vec![(0usize, HEADER_SIZE)];
        assert_eq!(l.rings.len(), spec.rings.len());
        for (r, s) in l.rings.iter().zip(&spec.rings) {
            assert_eq!((r.submission_len, r.completion_len), (s.submission_bytes, s.completion_bytes));
            assert_eq!(r.submission_offset % OS_PAGE_SIZE, 0, "ring on its own 4 KiB boundary");
            assert_eq!(r.completion_offset % OS_PAGE_SIZE, 0, "ring on its own 4 KiB boundary");
            assert_eq!(r.submission_offset % 64, 0);
            regions.push((r.submission_offset, r.submission_len));
            regions.push((r.completion_offset, r.completion_len));
        }
        for slot in 0..l.batch_slots {
            let off = l.batch_table_offset + slot * l.batch_stride;
            assert_eq!(off % 64, 0, "batch counter on its own cache line");
            regions.push((off, 64));
        }
        for i in 0..l.num_pages {
            let off = l.page_offset_unchecked(i);
            assert_eq!(off % OS_PAGE_SIZE, 0, "page {i} 4096-aligned");
            assert_eq!(l.page_index_of_offset(off as u64), Some(i));
            assert_eq!(l.page_index_of_offset((off + l.page_size - 1) as u64), Some(i));
            regions.push((off, l.page_size));
        }
        for &(start, len) in &regions {
            assert!(start.checked_add(len).unwrap() <= l.total_size, "region {start}+{len} past {}", l.total_size);
        }
        regions.sort();
        for pair in regions.windows(2) {
            assert!(pair[0].0 + pair[0].1 <= pair[1].0, "{:?} overlaps {:?}", pair[0], pair[1]);
        }
        // The layout survives a round trip through its header.
        let header = l.header("test", 0);
        assert_eq!(ArenaLayout::from_header(&header, l.total_size as u64).unwrap(), *l);
    }

    fn ring(sub: usize, comp: usize) -> RingRegionSpec {
        RingRegionSpec { submission_bytes: sub, completion_bytes: comp }
    }

    #[test]
    fn layouts_of_awkward_page_sizes_are_aligned_and_disjoint() {
        for page_size in [1, 4095, 4096, 4097, 2 * MIB, 4 * MIB + 1] {
            for num_rings in [0, 1, 3, 8] {
                for batch_slots in [0, 1, 65] {
                    let spec = ArenaSpec {
                        page_size,
                        num_pages: 5,
                        rings: (0..num_rings).map(|i| ring(64 + i * 4000, 4096 * (i + 1) + 1)).collect(),
                        batch_slots,
                        name_hint: "t".into(),
                    };
                    let layout = ArenaLayout::compute(&spec).unwrap();
                    assert_layout_ok(&spec, &layout);
                }
            }
        }
    }

    #[test]
    fn page_stride_rounds_up_to_4096() {
        let stride = |page_size| {
            ArenaLayout::compute(&ArenaSpec { page_size, num_pages: 1, ..Default::default() }).unwrap().page_stride
        };
        assert_eq!(stride(1), 4096);
        assert_eq!(stride(4095), 4096);
        assert_eq!(stride(4096), 4096);
        assert_eq!(stride(4097), 8192);
        assert_eq!(stride(4 * MIB + 1), 4 * MIB + 4096);
    }

    #[test]
    fn incomplete_tail_is_skipped() {
        assert_eq!(ArenaSpec::pages_for_pool_size(10 * 4096 + 100, 4096).unwrap(), 10);
        assert_eq!(ArenaSpec::pages_for_pool_size(10 * 4096, 4096).unwrap(), 10);
        assert_eq!(ArenaSpec::pages_for_pool_size(4095, 4096).unwrap(), 0);
        assert_eq!(ArenaSpec::pages_for_pool_size(100 * MIB - 1, 4 * MIB).unwrap(), 24);
        assert_eq!(ArenaSpec::pages_for_pool_size(0, 7).unwrap(), 0);
        assert!(matches!(ArenaSpec::pages_for_pool_size(4096, 0), Err(ArenaError::ZeroPageSize)));
        assert_eq!(ArenaSpec::pool_pages(1000, None, Some(10_500)).unwrap(), 10);
        assert_eq!(ArenaSpec::pool_pages(1000, Some(3), None).unwrap(), 3);
        assert!(matches!(ArenaSpec::pool_pages(1000, Some(3), Some(4000)), Err(ArenaError::PoolSize)));
        assert!(matches!(ArenaSpec::pool_pages(1000, None, None), Err(ArenaError::PoolSize)));
    }

    #[test]
    fn zero_pages_is_a_ring_only_arena() {
        let spec = ArenaSpec { page_size: 4096, num_pages: 0, rings: vec![ring(100, 100)], ..Default::default() };
        let layout = ArenaLayout::compute(&spec).unwrap();
        assert_layout_ok(&spec, &layout);
        assert_eq!(layout.total_size, layout.pages_offset);
        assert_eq!(layout.page_index_of_offset(layout.pages_offset as u64), None);
    }

    #[test]
    fn bad_specs_are_refused_clearly() {
        let spec = |page_size, num_pages| ArenaSpec { page_size, num_pages, ..Default::default() };
        let err = ArenaLayout::compute(&spec(0, 1)).unwrap_err();
        assert!(matches!(err, ArenaError::ZeroPageSize));
        assert!(err.to_string().contains("page size must be at least 1 byte"), "{err}");

        for (page_size, num_pages) in [(usize::MAX, 1), (usize::MAX - 4095, 1), (1 << 40, 1 << 20), (MAX_ARENA_SIZE, 1)]
        {
            let err = ArenaLayout::compute(&spec(page_size, num_pages)).unwrap_err();
            assert!(matches!(err, ArenaError::TooLarge { .. }), "{page_size} x {num_pages}: {err:?}");
        }
        let err = ArenaLayout::compute(&spec(1, MAX_PAGES + 1)).unwrap_err();
        assert!(matches!(err, ArenaError::TooManyPages { .. }), "{err:?}");

        let too_many = ArenaSpec { page_size: 1, rings: vec![ring(1, 1); MAX_RINGS + 1], ..Default::default() };
        assert!(matches!(ArenaLayout::compute(&too_many), Err(ArenaError::TooManyRings { requested: 123, max: 122 })));
        let ok = ArenaSpec { page_size: 1, rings: vec![ring(1, 1); MAX_RINGS], ..Default::default() };
        assert_layout_ok(&ok, &ArenaLayout::compute(&ok).unwrap());

        let empty = ArenaSpec { page_size: 1, rings: vec![ring(8, 8), ring(8, 0)], ..Default::default() };
        assert!(matches!(ArenaLayout::compute(&empty), Err(ArenaError::EmptyRingRegion { worker: 1 })));
        let huge_ring = ArenaSpec { page_size: 1, rings: vec![ring(usize::MAX, 8)], ..Default::default() };
        assert!(matches!(ArenaLayout::compute(&huge_ring), Err(ArenaError::TooLarge { .. })));
        let huge_table = ArenaSpec { page_size: 1, batch_slots: usize::MAX / 2, ..Default::default() };
        assert!(matches!(ArenaLayout::compute(&huge_table), Err(ArenaError::TooLarge { .. })));
    }

    #[test]
    fn tampered_headers_are_rejected() {
        let spec = ArenaSpec {
            page_size: 5000,
            num_pages: 3,
            rings: vec![ring(100, 200)],
            batch_slots: 4,
            ..Default::default()
        };
        let layout = ArenaLayout::compute(&spec).unwrap();
        let good = layout.header("x", 0);
        let size = layout.total_size as u64;
        assert_eq!(ArenaLayout::from_header(&good, size).unwrap(), layout);
        type Tamper = fn(&mut ArenaHeader);
        let cases: Vec<(&str, Tamper, u64)> = vec![
            ("magic", |h| h.magic[0] = b'X', size),
            ("version", |h| h.version = 99, size),
            ("header size", |h| h.header_size = 100, size),
            ("file size", |_| (), size + 4096),
            ("total size", |h| h.total_size -= 4096, size - 4096),
            ("num rings", |h| h.num_rings = 200, size),
            ("page offset", |h| h.pages_offset += 4096, size),
            ("ring offset", |h| h.rings[0].completion_offset = 0, size),
            ("page count", |h| h.num_pages = 1 << 40, size),
        ];
        for (what, tamper, file_size) in cases {
            let mut h = good;
            tamper(&mut h);
            let err = ArenaLayout::from_header(&h, file_size).unwrap_err();
            assert!(matches!(err, ArenaError::InvalidHeader { .. }), "{what}: {err:?}");
        }
    }

    proptest! {
        #[test]
        fn any_layout_is_aligned_in_bounds_and_disjoint(
            page_size in prop_oneof![
                Just(1usize), Just(4095), Just(4096), Just(4097), Just(2 * MIB), Just(4 * MIB + 1), 1usize..20_000
            ],
            num_pages in 0usize..40,
            rings in proptest::collection::vec((1usize..70_000, 1usize..70_000), 0..10),
            batch_slots in 0usize..300,
        ) {
            let spec = ArenaSpec {
                page_size,
                num_pages,
                rings: rings.into_iter().map(|(s, c)| ring(s, c)).collect(),
                batch_slots,
                name_hint: String::new(),
            };
            let layout = ArenaLayout::compute(&spec).unwrap();
            assert_layout_ok(&spec, &layout);
        }
    }
}
