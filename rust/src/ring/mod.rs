//! Single-producer/single-consumer rings of variable-length records in shared memory.
//!
//! Python threads submit operation descriptors to the I/O workers, and the workers post
//! completions back, through these rings. A ring lives inside the shared-memory arena (a memfd
//! mapping that another process may map later), so its memory holds no pointers: only a
//! [`RingHeader`] with two byte positions, followed by `capacity` data bytes.
//!
//! # Layout
//!
//! ```text
//! RingHeader (repr(C), size_of::<RingHeader>() bytes, aligned to RING_ALIGN)
//!   magic: u64 = RING_MAGIC, version: u32, capacity: u32, header_len: u32, reserved
//!   (the above padded to 64 bytes)
//!   producer: CachePadded<AtomicU64>   bytes ever written and published by the producer
//!   consumer: CachePadded<AtomicU64>   bytes ever consumed and released by the consumer
//! data: capacity bytes (a power of two, MIN_CAPACITY..=MAX_CAPACITY)
//! ```
//!
//! Positions only grow (2^64 bytes never wrap in practice); a position's data index is
//! `pos & (capacity - 1)`. A record is an 8-byte record header (payload length as `u32` LE,
//! then a `u32` that must be 0) followed by the payload, padded to a multiple of 8. Positions
//! stay 8-aligned, so a record header never straddles the end of the data; a payload may wrap
//! around it. The largest payload is `capacity - 8`.
//!
//! # Protocol
//!
//! The producer writes records past its published position, then [`Producer::publish`] stores
//! the new position with Release. The consumer loads it with Acquire, reads records, then
//! [`Consumer::release`] stores its own position with Release, which the producer loads with
//! Acquire before reusing those bytes. Each side caches the other's position and reloads it
//! only when its cached view says full (producer) or empty (consumer), so a burst of records
//! costs one store and at most one load of the shared cache lines per side.
//!
//! # Untrusted contents
//!
//! Another process may map the ring, so the consumer does not trust what it reads: positions
//! and record lengths are checked against each other, and an impossible value yields
//! [`RingError::Corrupt`] (from [`Consumer::try_pop_into`]) or [`PushError::Corrupt`] (from
//! [`Producer::try_push`]) instead of an out-of-bounds access. Every data access is also
//! bounds-checked against the data region, so even a logic error cannot leave it.

mod storage;
mod sync;

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(test)]
pub(crate) mod test_mem;
#[cfg(all(test, not(loom)))]
mod tests;

use std::any::Any;
use std::fmt;
use std::mem::offset_of;
use std::ptr::NonNull;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use self::storage::Storage;
use self::sync::{AtomicU64, Ordering};

/// `RingHeader::magic` of an initialized ring: `b"LMCRING1"` read as a little-endian `u64`.
pub const RING_MAGIC: u64 = u64::from_le_bytes(*b"LMCRING1");
/// `RingHeader::version` this code writes and accepts.
pub const RING_VERSION: u32 = 1;
/// Smallest data capacity, in bytes.
pub const MIN_CAPACITY: usize = 64;
/// Largest data capacity, in bytes (the header stores it as a `u32`).
pub const MAX_CAPACITY: usize = 1 << 31;
/// Bytes of the header in front of each record's payload.
pub const RECORD_HEADER_LEN: usize = 8;
/// Alignment a ring's base address needs: the header's alignment, at least 64. It is 128 on
/// x86_64 and aarch64, where `CachePadded` pads to 128 bytes against adjacent-line prefetch.
pub const RING_ALIGN: usize = if align_of::<RingHeader>() > 64 { align_of::<RingHeader>() } else { 64 };

/// The start of a ring's memory. `repr(C)`: its layout is shared with other processes, which
/// check `header_len` so that builds with a different layout refuse each other's rings.
#[repr(C)]
pub struct RingHeader {
    magic: u64,
    version: u32,
    capacity: u32,
    header_len: u32,
    _reserved: [u8; 44],
    /// Written by the producer only.
    producer: CachePadded<AtomicU64>,
    /// Written by the consumer only.
    consumer: CachePadded<AtomicU64>,
}

const _: () = assert!(offset_of!(RingHeader, producer) >= 64);
const _: () = assert!(offset_of!(RingHeader, consumer) >= offset_of!(RingHeader, producer) + 64);
const _: () = assert!(size_of::<RingHeader>() % 8 == 0);

/// Whether `capacity` is a valid data capacity: a power of two in `MIN_CAPACITY..=MAX_CAPACITY`.
pub const fn is_valid_capacity(capacity: usize) -> bool {
    capacity.is_power_of_two() && capacity >= MIN_CAPACITY && capacity <= MAX_CAPACITY
}

/// Bytes a ring with `capacity` data bytes occupies (header and data), for the arena's layout.
/// Place it at an address aligned to [`RING_ALIGN`].
///
/// # Panics
/// If `capacity` is not valid ([`is_valid_capacity`]).
pub const fn ring_size(capacity: usize) -> usize {
    assert!(is_valid_capacity(capacity), "ring capacity must be a power of two in 64..=2^31");
    size_of::<RingHeader>() + storage::data_len(capacity)
}

/// Ring bytes one record with a `payload_len`-byte payload takes: header plus payload padded
/// to 8. `payload_len` must be at most [`MAX_CAPACITY`].
pub const fn record_size(payload_len: usize) -> usize {
    RECORD_HEADER_LEN + payload_len.next_multiple_of(8)
}

/// Writes a fresh, empty ring (both positions 0) at `base`, its data bytes zeroed.
///
/// # Safety
/// `base..base + ring_size(capacity)` must be valid for writes, and nothing may access it
/// meanwhile: in particular no [`Producer`] or [`Consumer`] may be attached. Handles attached
/// later, in this or another process, must be ordered after this call (thread spawn, a lock,
/// a Release/Acquire flag, passing the memfd to another process).
///
/// # Panics
/// If `capacity` is not valid or `base` is not aligned to [`RING_ALIGN`].
pub unsafe fn init_ring(base: *mut u8, capacity: usize) {
    // SAFETY: the caller's guarantees are write_header's; the data region follows the header.
    unsafe {
        write_header(base, capacity);
        storage::init(base.add(size_of::<RingHeader>()), capacity);
    }
}

/// [`init_ring`] over memory that already reads as zeros, such as a fresh memfd or anonymous
/// mapping: only the header is written, so the data's pages are touched only as records are
/// written (a bridge client's 16 MiB ring costs its header's page until it is used).
///
/// # Safety
/// As [`init_ring`]; also, every data byte must be initialized memory (a mapping of a fresh
/// file is: it reads as zeros).
pub unsafe fn init_ring_on_zeroed(base: *mut u8, capacity: usize) {
    // SAFETY: as `init_ring`; the caller guarantees the data bytes are initialized already.
    unsafe {
        write_header(base, capacity);
        storage::init_zeroed(base.add(size_of::<RingHeader>()), capacity);
    }
}

/// # Safety
/// As [`init_ring`].
unsafe fn write_header(base: *mut u8, capacity: usize) {
    assert!(is_valid_capacity(capacity), "ring capacity {capacity} is not a power of two in 64..=2^31");
    assert!(!base.is_null() && base as usize % RING_ALIGN == 0, "ring base {base:p} is not aligned to {RING_ALIGN}");
    let header = RingHeader {
        magic: RING_MAGIC,
        version: RING_VERSION,
        capacity: capacity as u32,
        header_len: size_of::<RingHeader>() as u32,
        _reserved: [0; 44],
        producer: CachePadded::new(AtomicU64::new(0)),
        consumer: CachePadded::new(AtomicU64::new(0)),
    };
    // SAFETY: the caller guarantees `ring_size(capacity)` bytes at `base` are valid for writes
    // and unshared; `base` is aligned for `RingHeader` (asserted: RING_ALIGN >= its alignment),
    // and the data region right after the header is 8-aligned (the header's size is a
    // multiple of its alignment, itself at least 64).
    unsafe { base.cast::<RingHeader>().write(header) }
}

/// Why a ring could not be attached or read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingError {
    /// The base address is null or not aligned to [`RING_ALIGN`].
    Misaligned {
        /// The base address given.
        addr: usize,
    },
    /// The memory is shorter than the header or than `ring_size(capacity)`.
    TooShort {
        /// Bytes given.
        len: usize,
        /// Bytes the ring needs.
        needed: usize,
    },
    /// The memory does not start with [`RING_MAGIC`] (never initialized, or not a ring).
    BadMagic(u64),
    /// A ring of another format version.
    BadVersion(u32),
    /// Written by a build whose `RingHeader` has another size.
    BadLayout {
        /// The header size the ring records.
        header_len: u32,
    },
    /// The capacity is not a power of two in `MIN_CAPACITY..=MAX_CAPACITY`.
    BadCapacity(u32),
    /// Positions or a record header hold impossible values: someone wrote the ring outside
    /// the protocol. The ring is unusable from then on; every later call reports it again.
    Corrupt(String),
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingError::Misaligned { addr } => write!(f, "ring at {addr:#x} is not aligned to {RING_ALIGN} bytes"),
            RingError::TooShort { len, needed } => write!(f, "ring memory is {len} bytes, needs {needed}"),
            RingError::BadMagic(magic) => write!(f, "not an initialized ring (magic {magic:#018x})"),
            RingError::BadVersion(version) => write!(f, "ring version {version}, expected {RING_VERSION}"),
            RingError::BadLayout { header_len } => {
                write!(f, "ring header is {header_len} bytes, this build expects {}", size_of::<RingHeader>())
            }
            RingError::BadCapacity(capacity) => {
                write!(f, "ring capacity {capacity} is not a power of two in 64..=2^31")
            }
            RingError::Corrupt(what) => write!(f, "ring corrupt: {what}"),
        }
    }
}

impl std::error::Error for RingError {}

/// Why [`Producer::try_push`] did not write a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushError {
    /// Not enough free space now: publish, let the consumer catch up, and retry.
    Full,
    /// The payload is longer than any record this ring can ever hold (`capacity - 8`).
    TooLarge {
        /// Bytes of the payload.
        len: usize,
        /// The longest payload this ring holds.
        max: usize,
    },
    /// The consumer position in shared memory is impossible (see [`RingError::Corrupt`]).
    Corrupt(String),
}

impl fmt::Display for PushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushError::Full => f.write_str("ring full"),
            PushError::TooLarge { len, max } => write!(f, "{len}-byte record exceeds the ring's {max}-byte maximum"),
            PushError::Corrupt(what) => write!(f, "ring corrupt: {what}"),
        }
    }
}

impl std::error::Error for PushError {}

/// What both handles hold: the header, the data, and the owner of the mapping.
struct Ring {
    header: NonNull<RingHeader>,
    storage: Storage,
    capacity: usize,
    /// Keeps the mapping alive while the handle lives. Declared after the pointers it backs.
    _owner: Arc<dyn Any + Send + Sync>,
}

impl Ring {
    /// Validates the header at `base`; returns the ring and its (producer, consumer) positions.
    ///
    /// # Safety
    /// As [`Producer::attach`].
    unsafe fn attach(
        base: *mut u8,
        len: usize,
        owner: Arc<dyn Any + Send + Sync>,
    ) -> Result<(Ring, u64, u64), RingError> {
        let Some(base) = NonNull::new(base).filter(|base| base.as_ptr() as usize % RING_ALIGN == 0) else {
            return Err(RingError::Misaligned { addr: base as usize });
        };
        if len < size_of::<RingHeader>() {
            return Err(RingError::TooShort { len, needed: size_of::<RingHeader>() });
        }
        let header = base.cast::<RingHeader>();
        // SAFETY: the caller guarantees `len` initialized bytes at `base` stay valid while the
        // owner lives; they hold a whole header (checked), suitably aligned (checked), and
        // every bit pattern is a valid `RingHeader` (integers and atomics only). The plain
        // fields are not written after `init_ring`; the positions are atomics.
        let h = unsafe { header.as_ref() };
        if h.magic != RING_MAGIC {
            return Err(RingError::BadMagic(h.magic));
        }
        if h.version != RING_VERSION {
            return Err(RingError::BadVersion(h.version));
        }
        if h.header_len as usize != size_of::<RingHeader>() {
            return Err(RingError::BadLayout { header_len: h.header_len });
        }
        let capacity = h.capacity as usize;
        if !is_valid_capacity(capacity) {
            return Err(RingError::BadCapacity(h.capacity));
        }
        if len < ring_size(capacity) {
            return Err(RingError::TooShort { len, needed: ring_size(capacity) });
        }
        let producer = h.producer.load(Ordering::Acquire);
        let consumer = h.consumer.load(Ordering::Acquire);
        if producer % 8 != 0 || consumer % 8 != 0 || consumer > producer || producer - consumer > capacity as u64 {
            return Err(RingError::Corrupt(format!("positions producer {producer}, consumer {consumer}")));
        }
        // SAFETY: the data region follows the header inside the `ring_size(capacity)` bytes
        // checked above, initialized by `init_ring` and valid while the owner lives.
        let storage = unsafe { Storage::new(base.add(size_of::<RingHeader>()), capacity) };
        Ok((Ring { header, storage, capacity, _owner: owner }, producer, consumer))
    }

    fn header(&self) -> &RingHeader {
        // SAFETY: validated in `attach`; `_owner` keeps the memory mapped while `self` lives.
        unsafe { self.header.as_ref() }
    }

    fn max_payload(&self) -> usize {
        self.capacity - RECORD_HEADER_LEN
    }

    /// Copies `src` to the data at position `pos`, wrapping around the end.
    ///
    /// # Safety
    /// `pos..pos + src.len()` must be the producer's free space (see `Storage::write`).
    unsafe fn write_at(&self, pos: u64, src: &[u8]) {
        let idx = (pos & (self.capacity as u64 - 1)) as usize;
        let first = src.len().min(self.capacity - idx);
        // SAFETY: forwarded from the caller; `Storage::write` checks the bounds.
        unsafe {
            self.storage.write(idx, &src[..first]);
            if first < src.len() {
                self.storage.write(0, &src[first..]);
            }
        }
    }

    /// Copies the data at position `pos`, wrapping around the end, into `dst`.
    ///
    /// # Safety
    /// `pos..pos + dst.len()` must be published and not yet released (see `Storage::read`).
    unsafe fn read_at(&self, pos: u64, dst: &mut [u8]) {
        let idx = (pos & (self.capacity as u64 - 1)) as usize;
        let first = dst.len().min(self.capacity - idx);
        let (head, tail) = dst.split_at_mut(first);
        // SAFETY: forwarded from the caller; `Storage::read` checks the bounds.
        unsafe {
            self.storage.read(idx, head);
            if !tail.is_empty() {
                self.storage.read(0, tail);
            }
        }
    }
}

/// The writing end of a ring. `Send` but not `Sync` or `Clone`: one thread at a time uses it.
/// Records pushed but not published when it is dropped are discarded.
pub struct Producer {
    ring: Ring,
    /// End of the records written so far (published or not).
    pos: u64,
    /// The position last stored to the header.
    published: u64,
    /// The consumer position as last loaded; the bytes before it are free.
    cached_consumer: u64,
}

// SAFETY: the handle's pointers refer to shared memory kept alive by the `Send + Sync` owner,
// and all its access to that memory follows the ring protocol, which is independent of the
// thread. It is not `Sync` (its raw pointers make it so): `&self` methods only read
// immutable header fields, but sharing would invite a second producer.
unsafe impl Send for Producer {}

impl Producer {
    /// Attaches the producer end of the ring at `base`, initialized by [`init_ring`], resuming
    /// at the published producer position.
    ///
    /// # Safety
    /// - `base..base + len` is mapped, readable, writable and initialized, and stays so while
    ///   `owner` lives (the handle holds `owner` until it is dropped).
    /// - The ring was initialized by [`init_ring`] before this call (happens-before), and is
    ///   not initialized again while the handle lives.
    /// - At most one `Producer` is attached to a ring at a time, in all processes together, and
    ///   nothing else writes the ring except one `Consumer` through this module.
    ///
    /// A ring written by someone who breaks these rules (say, a crashed or hostile process)
    /// yields errors, never an access outside `base..base + len`.
    pub unsafe fn attach(base: *mut u8, len: usize, owner: Arc<dyn Any + Send + Sync>) -> Result<Self, RingError> {
        // SAFETY: forwarded from the caller.
        let (ring, producer, consumer) = unsafe { Ring::attach(base, len, owner)? };
        Ok(Producer { ring, pos: producer, published: producer, cached_consumer: consumer })
    }

    /// Data bytes of the ring.
    pub fn capacity(&self) -> usize {
        self.ring.capacity
    }

    /// The largest payload a record can have: `capacity - 8`.
    pub fn max_payload(&self) -> usize {
        self.ring.max_payload()
    }

    /// Whether a `payload_len`-byte record could ever fit (in an empty ring).
    pub fn record_fits(&self, payload_len: usize) -> bool {
        payload_len <= self.max_payload()
    }

    /// Free ring bytes now, after reloading the consumer position: a record of
    /// [`record_size`]`(len)` bytes fits if that is at most this. A corrupt consumer position
    /// is not reported here (the count stays at the last valid view) but by the next push.
    pub fn free_bytes(&mut self) -> usize {
        let _ = self.refresh_consumer();
        self.cached_free()
    }

    /// Whether records were pushed since the last [`publish`](Self::publish).
    #[cfg(test)]
    pub fn has_unpublished(&self) -> bool {
        self.pos != self.published
    }

    fn cached_free(&self) -> usize {
        self.ring.capacity - (self.pos - self.cached_consumer) as usize
    }

    fn refresh_consumer(&mut self) -> Result<(), PushError> {
        let consumer = self.ring.header().consumer.load(Ordering::Acquire);
        // The consumer only moves forward, by whole records, and never past what we published.
        if consumer < self.cached_consumer || consumer > self.published || consumer % 8 != 0 {
            return Err(PushError::Corrupt(format!(
                "consumer position {consumer} outside {}..={} or not 8-aligned",
                self.cached_consumer, self.published
            )));
        }
        self.cached_consumer = consumer;
        Ok(())
    }

    /// Writes one record whose payload is the concatenation of `parts`, without publishing
    /// it: the consumer sees it after the next [`publish`](Self::publish).
    ///
    /// Fails with [`PushError::TooLarge`] if the payload exceeds [`max_payload`](Self::max_payload),
    /// with [`PushError::Full`] if it does not fit now. The consumer position is reloaded only
    /// when the cached one says full.
    pub fn try_push(&mut self, parts: &[&[u8]]) -> Result<(), PushError> {
        let max = self.max_payload();
        let len = parts.iter().try_fold(0usize, |sum, part| sum.checked_add(part.len())).unwrap_or(usize::MAX);
        if len > max {
            return Err(PushError::TooLarge { len, max });
        }
        let size = record_size(len);
        if self.cached_free() < size {
            self.refresh_consumer()?;
            if self.cached_free() < size {
                return Err(PushError::Full);
            }
        }
        let mut header = [0u8; RECORD_HEADER_LEN];
        header[..4].copy_from_slice(&(len as u32).to_le_bytes());
        let mut at = self.pos;
        // SAFETY: `pos..pos + size` is free: the consumer released everything before
        // `cached_consumer` (loaded with Acquire, so its reads of those bytes happened before),
        // and `size <= capacity - (pos - cached_consumer)`. The consumer reads nothing at or
        // past `published <= pos` until we publish.
        unsafe {
            self.ring.write_at(at, &header);
            at += RECORD_HEADER_LEN as u64;
            for part in parts {
                self.ring.write_at(at, part);
                at += part.len() as u64;
            }
        }
        self.pos += size as u64;
        Ok(())
    }

    /// Makes every record pushed so far visible to the consumer: one Release store, skipped
    /// when nothing was pushed since the last call.
    pub fn publish(&mut self) {
        if self.pos != self.published {
            self.ring.header().producer.store(self.pos, Ordering::Release);
            self.published = self.pos;
        }
    }
}

/// The reading end of a ring. `Send` but not `Sync` or `Clone`: one thread at a time uses it.
pub struct Consumer {
    ring: Ring,
    /// Start of the next record to read.
    pos: u64,
    /// The position last stored to the header.
    released: u64,
    /// The producer position as last loaded; the bytes before it are published.
    cached_producer: u64,
}

// SAFETY: as for `Producer`.
unsafe impl Send for Consumer {}

impl Consumer {
    /// Attaches the consumer end of the ring at `base`, resuming at the released consumer
    /// position.
    ///
    /// # Safety
    /// As [`Producer::attach`], with at most one `Consumer` attached to a ring at a time.
    pub unsafe fn attach(base: *mut u8, len: usize, owner: Arc<dyn Any + Send + Sync>) -> Result<Self, RingError> {
        // SAFETY: forwarded from the caller.
        let (ring, producer, consumer) = unsafe { Ring::attach(base, len, owner)? };
        Ok(Consumer { ring, pos: consumer, released: consumer, cached_producer: producer })
    }

    /// Data bytes of the ring.
    pub fn capacity(&self) -> usize {
        self.ring.capacity
    }

    fn refresh_producer(&mut self) -> Result<(), RingError> {
        let producer = self.ring.header().producer.load(Ordering::Acquire);
        // The producer only moves forward, by whole records, and never more than `capacity`
        // past what we released.
        if producer < self.cached_producer || producer % 8 != 0 || producer - self.released > self.ring.capacity as u64
        {
            return Err(RingError::Corrupt(format!(
                "producer position {producer} outside {}..={} or not 8-aligned",
                self.cached_producer,
                self.released + self.ring.capacity as u64
            )));
        }
        self.cached_producer = producer;
        Ok(())
    }

    /// Whether no published record is left to read. Reloads the producer position only when
    /// the cached one says empty. A corrupt ring reads as not empty, so that the following
    /// [`try_pop_into`](Self::try_pop_into) reports it.
    pub fn is_empty(&mut self) -> bool {
        if self.pos != self.cached_producer {
            return false;
        }
        // `refresh_producer` moves `cached_producer` on success.
        self.refresh_producer().is_ok() && self.pos == self.cached_producer
    }

    /// Copies the next published record's payload into `out` (cleared first) and returns
    /// `Ok(true)`, or returns `Ok(false)` if there is none. The record's bytes stay reserved
    /// until [`release`](Self::release).
    ///
    /// Returns [`RingError::Corrupt`], reading nothing and leaving the position as it was, if
    /// the producer position or the record header is impossible: a length longer than the
    /// published bytes, longer than `capacity - 8`, or a nonzero reserved field.
    pub fn try_pop_into(&mut self, out: &mut Vec<u8>) -> Result<bool, RingError> {
        out.clear();
        if self.pos == self.cached_producer {
            self.refresh_producer()?;
            if self.pos == self.cached_producer {
                return Ok(false);
            }
        }
        // Both positions are 8-aligned and distinct, so at least one record header is published.
        let published = self.cached_producer - self.pos;
        let mut header = [0u8; RECORD_HEADER_LEN];
        // SAFETY: `pos..pos + 8` is published (loaded with Acquire, so the producer's writes
        // happened before) and not released, so the producer does not write it now.
        unsafe { self.ring.read_at(self.pos, &mut header) };
        let len = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
        let reserved = u32::from_le_bytes(header[4..].try_into().unwrap());
        if reserved != 0 || len > self.ring.max_payload() || record_size(len) as u64 > published {
            return Err(RingError::Corrupt(format!(
                "record at position {} has length {len} (reserved {reserved:#x}) but {published} bytes are published",
                self.pos
            )));
        }
        out.resize(len, 0);
        // SAFETY: `pos + 8..pos + 8 + len` lies inside the published, unreleased bytes
        // (`record_size(len) <= published`, checked above).
        unsafe { self.ring.read_at(self.pos + RECORD_HEADER_LEN as u64, out) };
        self.pos += record_size(len) as u64;
        Ok(true)
    }

    /// As [`try_pop_into`](Self::try_pop_into), for callers that treat a corrupt ring as a bug.
    ///
    /// # Panics
    /// If the ring is corrupt, with a message saying what was found.
    #[cfg(test)]
    pub fn pop_into(&mut self, out: &mut Vec<u8>) -> bool {
        match self.try_pop_into(out) {
            Ok(popped) => popped,
            Err(err) => panic!("ring consumer: {err}"),
        }
    }

    /// Hands the bytes of every record read so far back to the producer: one Release store,
    /// skipped when nothing was read since the last call. `out` buffers filled earlier stay
    /// valid: they are copies.
    pub fn release(&mut self) {
        if self.pos != self.released {
            self.ring.header().consumer.store(self.pos, Ordering::Release);
            self.released = self.pos;
        }
    }
}
