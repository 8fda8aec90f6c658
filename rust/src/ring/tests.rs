use std::collections::VecDeque;
use std::mem::offset_of;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::test_mem::{AlignedMem, new_ring};
use super::*;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i as u8).wrapping_mul(31)) ^ (i >> 8) as u8).collect()
}

fn pop(consumer: &mut Consumer) -> Option<Vec<u8>> {
    let mut out = vec![0xEE; 3];
    match consumer.try_pop_into(&mut out) {
        Ok(true) => Some(out),
        Ok(false) => {
            assert!(out.is_empty(), "out is cleared even when the ring is empty");
            None
        }
        Err(err) => panic!("unexpected {err}"),
    }
}

#[test]
fn layout_constants() {
    assert_eq!(RING_MAGIC.to_le_bytes(), *b"LMCRING1");
    assert!(RING_ALIGN >= 64 && RING_ALIGN.is_power_of_two());
    assert!(RING_ALIGN >= align_of::<RingHeader>());
    assert_eq!(offset_of!(RingHeader, magic), 0);
    assert_eq!(offset_of!(RingHeader, version), 8);
    assert_eq!(offset_of!(RingHeader, capacity), 12);
    assert_eq!(offset_of!(RingHeader, header_len), 16);
    assert!(offset_of!(RingHeader, producer) >= 64);
    assert_eq!(ring_size(64), size_of::<RingHeader>() + 64);
    assert_eq!(ring_size(4096), size_of::<RingHeader>() + 4096);
    assert_eq!(record_size(0), 8);
    assert_eq!(record_size(1), 16);
    assert_eq!(record_size(8), 16);
    assert_eq!(record_size(9), 24);
    assert!(is_valid_capacity(64) && is_valid_capacity(1 << 31));
    assert!(!is_valid_capacity(32) && !is_valid_capacity(96) && !is_valid_capacity(1 << 32) && !is_valid_capacity(0));
}

#[test]
#[should_panic(expected = "power of two")]
fn ring_size_rejects_bad_capacity() {
    ring_size(100);
}

#[test]
fn fresh_ring_is_empty_and_round_trips_parts() {
    let (mut producer, mut consumer) = new_ring(256);
    assert_eq!(producer.capacity(), 256);
    assert_eq!(consumer.capacity(), 256);
    assert_eq!(producer.max_payload(), 248);
    assert_eq!(producer.free_bytes(), 256);
    assert!(consumer.is_empty());
    assert_eq!(pop(&mut consumer), None);

    producer.try_push(&[b"head", b"", b"-key-", b"tail"]).unwrap();
    producer.try_push(&[]).unwrap();
    assert!(producer.has_unpublished());
    assert_eq!(producer.free_bytes(), 256 - 24 - 8);
    assert!(consumer.is_empty(), "unpublished records are invisible");
    producer.publish();
    assert!(!producer.has_unpublished());
    assert!(!consumer.is_empty());
    assert_eq!(pop(&mut consumer).as_deref(), Some(&b"head-key-tail"[..]));
    assert_eq!(pop(&mut consumer).as_deref(), Some(&b""[..]));
    assert_eq!(pop(&mut consumer), None);
    assert_eq!(producer.free_bytes(), 256 - 32, "nothing is free before release");
    consumer.release();
    assert_eq!(producer.free_bytes(), 256);
}

#[test]
fn too_large_is_distinct_from_full() {
    let (mut producer, mut consumer) = new_ring(64);
    assert!(producer.record_fits(56));
    assert!(!producer.record_fits(57));
    assert_eq!(producer.try_push(&[&[1; 57]]), Err(PushError::TooLarge { len: 57, max: 56 }));
    assert_eq!(producer.try_push(&[&[1; 30], &[2; 27]]), Err(PushError::TooLarge { len: 57, max: 56 }));
    producer.try_push(&[&[7; 56]]).unwrap();
    assert_eq!(producer.try_push(&[]), Err(PushError::Full));
    producer.publish();
    assert_eq!(pop(&mut consumer), Some(vec![7; 56]));
    assert_eq!(producer.try_push(&[]), Err(PushError::Full), "popped but not released");
    consumer.release();
    producer.try_push(&[&[1; 20], &[2; 36]]).unwrap();
    producer.publish();
    let mut expected = vec![1; 20];
    expected.extend([2; 36]);
    assert_eq!(pop(&mut consumer), Some(expected));
}

/// A ring and the memory under it, for tests that write the memory behind the handles' backs.
fn raw_ring(capacity: usize) -> Arc<AlignedMem> {
    let mem = AlignedMem::new(ring_size(capacity));
    // SAFETY: fresh, aligned, large enough, unshared.
    unsafe { init_ring(mem.ptr(), capacity) };
    mem
}

fn attach_both(mem: &Arc<AlignedMem>, len: usize) -> (Result<Producer, RingError>, Result<Consumer, RingError>) {
    // SAFETY: `mem` is at least `len` bytes (callers pass at most its length), initialized, kept
    // alive by the owner; each test attaches at most one handle of each kind per ring.
    unsafe { (Producer::attach(mem.ptr(), len, mem.clone()), Consumer::attach(mem.ptr(), len, mem.clone())) }
}

fn attach_err(mem: &Arc<AlignedMem>, len: usize) -> RingError {
    let (producer, consumer) = attach_both(mem, len);
    let err = producer.err().expect("producer attach should fail");
    assert_eq!(consumer.err().as_ref(), Some(&err), "both ends validate alike");
    err
}

/// Writes `bytes` at `offset` into the ring memory, as a scribbling process would.
fn scribble(mem: &AlignedMem, offset: usize, bytes: &[u8]) {
    assert!(offset + bytes.len() <= mem.len());
    // SAFETY: inside the block (asserted); no handle is using the bytes concurrently (tests
    // are single-threaded here).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), mem.ptr().add(offset), bytes.len()) }
}

#[test]
fn attach_validates_header() {
    let capacity = 128;
    let len = ring_size(capacity);

    let mem = raw_ring(capacity);
    let (producer, consumer) = attach_both(&mem, len);
    assert!(producer.is_ok() && consumer.is_ok());

    let mem = raw_ring(capacity);
    scribble(&mem, 0, b"LMCRINGX");
    assert_eq!(attach_err(&mem, len), RingError::BadMagic(u64::from_le_bytes(*b"LMCRINGX")));

    let mem = AlignedMem::new(len);
    assert_eq!(attach_err(&mem, len), RingError::BadMagic(0), "zeroed memory was never initialized");

    let mem = raw_ring(capacity);
    scribble(&mem, 8, &2u32.to_ne_bytes());
    assert_eq!(attach_err(&mem, len), RingError::BadVersion(2));

    let mem = raw_ring(capacity);
    scribble(&mem, 16, &64u32.to_ne_bytes());
    assert_eq!(attach_err(&mem, len), RingError::BadLayout { header_len: 64 });

    for bad in [96u32, 100, 0, 32, 1 << 31 | 1] {
        let mem = raw_ring(capacity);
        scribble(&mem, 12, &bad.to_ne_bytes());
        assert_eq!(attach_err(&mem, len), RingError::BadCapacity(bad));
    }

    // A valid but larger capacity than the memory holds.
    let mem = raw_ring(capacity);
    scribble(&mem, 12, &256u32.to_ne_bytes());
    assert_eq!(attach_err(&mem, len), RingError::TooShort { len, needed: ring_size(256) });

    let mem = raw_ring(capacity);
    assert_eq!(attach_err(&mem, len - 1), RingError::TooShort { len: len - 1, needed: len });
    assert_eq!(attach_err(&mem, 10), RingError::TooShort { len: 10, needed: size_of::<RingHeader>() });
}

#[test]
fn attach_rejects_misaligned_and_null() {
    let mem = AlignedMem::new(ring_size(64) + 8);
    // SAFETY: init at an aligned address; the attaches below fail before touching memory.
    unsafe {
        init_ring(mem.ptr(), 64);
        let off = mem.ptr().add(8);
        let err = Producer::attach(off, ring_size(64), mem.clone()).err();
        assert_eq!(err, Some(RingError::Misaligned { addr: off as usize }));
        let err = Consumer::attach(std::ptr::null_mut(), ring_size(64), mem.clone()).err();
        assert_eq!(err, Some(RingError::Misaligned { addr: 0 }));
    }
}

#[test]
#[should_panic(expected = "not aligned")]
fn init_rejects_misaligned() {
    let mem = AlignedMem::new(ring_size(64) + 8);
    // SAFETY: in bounds; panics before writing.
    unsafe { init_ring(mem.ptr().add(8), 64) };
}

fn set_position(mem: &AlignedMem, field: usize, value: u64) {
    scribble(mem, field, &value.to_ne_bytes());
}

#[test]
fn attach_rejects_impossible_positions() {
    let producer_at = offset_of!(RingHeader, producer);
    let consumer_at = offset_of!(RingHeader, consumer);
    for (producer, consumer) in [(8, 16), (136, 0), (4, 0), (16, 12)] {
        let mem = raw_ring(128);
        set_position(&mem, producer_at, producer);
        set_position(&mem, consumer_at, consumer);
        assert!(matches!(attach_err(&mem, ring_size(128)), RingError::Corrupt(_)), "{producer} {consumer}");
    }
}

#[test]
fn attach_resumes_at_shared_positions() {
    let mem = raw_ring(64);
    let (producer, consumer) = attach_both(&mem, ring_size(64));
    let (mut producer, mut consumer) = (producer.unwrap(), consumer.unwrap());
    producer.try_push(&[b"one"]).unwrap();
    producer.try_push(&[b"two"]).unwrap();
    producer.publish();
    producer.try_push(&[b"lost"]).unwrap(); // never published: a reattached producer overwrites it
    assert_eq!(pop(&mut consumer).as_deref(), Some(&b"one"[..]));
    consumer.release();
    drop((producer, consumer));

    let (producer, consumer) = attach_both(&mem, ring_size(64));
    let (mut producer, mut consumer) = (producer.unwrap(), consumer.unwrap());
    assert_eq!(producer.free_bytes(), 64 - 16);
    producer.try_push(&[b"three"]).unwrap();
    producer.publish();
    assert_eq!(pop(&mut consumer).as_deref(), Some(&b"two"[..]));
    assert_eq!(pop(&mut consumer).as_deref(), Some(&b"three"[..]));
    assert_eq!(pop(&mut consumer), None);
}

#[test]
fn corrupt_record_length_is_an_error_not_an_overread() {
    let capacity = 64;
    let data_at = size_of::<RingHeader>();
    let mem = raw_ring(capacity);
    let (producer, consumer) = attach_both(&mem, ring_size(capacity));
    let (mut producer, mut consumer) = (producer.unwrap(), consumer.unwrap());
    producer.try_push(&[&[5; 10]]).unwrap();
    producer.publish();

    let mut out = Vec::new();
    for (len, reserved) in [(17u32, 0u32), (1000, 0), (u32::MAX, 0), (10, 1)] {
        scribble(&mem, data_at, &len.to_le_bytes());
        scribble(&mem, data_at + 4, &reserved.to_le_bytes());
        let err = consumer.try_pop_into(&mut out).unwrap_err();
        assert!(matches!(&err, RingError::Corrupt(what) if what.contains("length")), "{err}");
    }
    // Repairing the header makes the record readable again: the failed pops consumed nothing.
    scribble(&mem, data_at, &10u32.to_le_bytes());
    scribble(&mem, data_at + 4, &0u32.to_le_bytes());
    assert_eq!(pop(&mut consumer), Some(vec![5; 10]));
}

#[test]
#[should_panic(expected = "ring consumer: ring corrupt")]
fn pop_into_panics_on_corrupt_length() {
    let mem = raw_ring(64);
    let (producer, consumer) = attach_both(&mem, ring_size(64));
    let (mut producer, mut consumer) = (producer.unwrap(), consumer.unwrap());
    producer.try_push(&[b"x"]).unwrap();
    producer.publish();
    scribble(&mem, size_of::<RingHeader>(), &48u32.to_le_bytes());
    consumer.pop_into(&mut Vec::new());
}

#[test]
fn corrupt_positions_are_errors() {
    let mem = raw_ring(64);
    let (producer, consumer) = attach_both(&mem, ring_size(64));
    let (mut producer, mut consumer) = (producer.unwrap(), consumer.unwrap());
    // The producer claims more than a ring's worth past what the consumer released.
    set_position(&mem, offset_of!(RingHeader, producer), 72);
    assert!(!consumer.is_empty(), "a corrupt ring reads as not empty");
    assert!(matches!(consumer.try_pop_into(&mut Vec::new()), Err(RingError::Corrupt(_))));
    set_position(&mem, offset_of!(RingHeader, producer), 12);
    assert!(matches!(consumer.try_pop_into(&mut Vec::new()), Err(RingError::Corrupt(_))));
    set_position(&mem, offset_of!(RingHeader, producer), 0);

    // The consumer claims to have released bytes never published.
    producer.try_push(&[&[0; 48]]).unwrap();
    set_position(&mem, offset_of!(RingHeader, consumer), 8);
    assert_eq!(producer.free_bytes(), 8, "free_bytes keeps the last valid view");
    assert!(matches!(producer.try_push(&[&[0; 8]]), Err(PushError::Corrupt(_))));
}

/// Every 8-aligned start index of a 128-byte ring, every payload length: the bytes survive,
/// including payloads (and multi-part payloads) that wrap around the end.
#[test]
fn exhaustive_wrap_around() {
    let capacity = 128;
    let mut out = Vec::new();
    for start in (0..capacity).step_by(8) {
        for len in 0..=capacity - 8 {
            for laps in [0, 1] {
                let (mut producer, mut consumer) = new_ring(capacity);
                // Advance both positions to `laps * capacity + start` with filler records.
                let mut advance = laps * capacity + start;
                while advance > 0 {
                    let size = advance.min(capacity);
                    producer.try_push(&[&vec![0xAA; size - 8]]).unwrap();
                    producer.publish();
                    assert_eq!(pop(&mut consumer).map(|p| p.len()), Some(size - 8));
                    consumer.release();
                    advance -= size;
                }
                assert_eq!(producer.free_bytes(), capacity);

                let payload = pattern(len, (start + len) as u8);
                let split = (len * 5 / 7).min(len);
                producer.try_push(&[&payload[..split], &payload[split..]]).unwrap();
                let after = record_size(len);
                if after < capacity {
                    // A record that fits right behind it, also possibly wrapping.
                    let small = capacity - after - 8;
                    producer.try_push(&[&pattern(small, 3)]).unwrap();
                    assert_eq!(producer.try_push(&[]), Err(PushError::Full));
                }
                assert!(consumer.is_empty());
                producer.publish();
                assert!(consumer.try_pop_into(&mut out).unwrap());
                assert_eq!(out, payload, "start {start} len {len} laps {laps}");
                if after < capacity {
                    assert!(consumer.try_pop_into(&mut out).unwrap());
                    assert_eq!(out, pattern(capacity - after - 8, 3), "start {start} len {len} laps {laps}");
                }
                assert!(!consumer.try_pop_into(&mut out).unwrap());
                consumer.release();
                assert_eq!(producer.free_bytes(), capacity);
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Push { len: usize, seed: u8, split: usize },
    Publish,
    Pop,
    Release,
    FreeBytes,
    IsEmpty,
}

fn ops(capacity: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => (0..=capacity / 2, any::<u8>(), any::<usize>()).prop_map(|(len, seed, split)| Op::Push { len, seed, split }),
        1 => (capacity / 2..=capacity + 8, any::<u8>(), any::<usize>())
            .prop_map(|(len, seed, split)| Op::Push { len, seed, split }),
        3 => Just(Op::Publish),
        5 => Just(Op::Pop),
        3 => Just(Op::Release),
        1 => Just(Op::FreeBytes),
        1 => Just(Op::IsEmpty),
    ];
    proptest::collection::vec(op, 0..300)
}

/// What the ring should hold: records pushed but unpublished, published but not popped, and
/// the bytes of records popped but not released.
#[derive(Default)]
struct Model {
    unpublished: VecDeque<Vec<u8>>,
    published: VecDeque<Vec<u8>>,
    popped_unreleased: usize,
}

impl Model {
    fn used(&self) -> usize {
        let records = self.unpublished.iter().chain(&self.published);
        records.map(|r| record_size(r.len())).sum::<usize>() + self.popped_unreleased
    }
}

fn run_model(capacity: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let (mut producer, mut consumer) = new_ring(capacity);
    let mut model = Model::default();
    let mut out = Vec::new();
    for op in ops {
        match *op {
            Op::Push { len, seed, split } => {
                let payload = pattern(len, seed);
                let split = split % (len + 1);
                let got = producer.try_push(&[&payload[..split], &payload[split..]]);
                let expected = if len > capacity - 8 {
                    Err(PushError::TooLarge { len, max: capacity - 8 })
                } else if record_size(len) <= capacity - model.used() {
                    Ok(())
                } else {
                    Err(PushError::Full)
                };
                prop_assert_eq!(&got, &expected, "push of {} with {} bytes used", len, model.used());
                if got.is_ok() {
                    model.unpublished.push_back(payload);
                }
            }
            Op::Publish => {
                producer.publish();
                model.published.extend(model.unpublished.drain(..));
            }
            Op::Pop => {
                let got = consumer.try_pop_into(&mut out).map_err(|e| TestCaseError::fail(e.to_string()))?;
                match model.published.pop_front() {
                    Some(expected) => {
                        prop_assert!(got, "a published record was not seen");
                        prop_assert_eq!(&out, &expected);
                        model.popped_unreleased += record_size(expected.len());
                    }
                    None => prop_assert!(!got, "consumer saw an unpublished record: {:?}", out),
                }
            }
            Op::Release => {
                consumer.release();
                model.popped_unreleased = 0;
            }
            Op::FreeBytes => prop_assert_eq!(producer.free_bytes(), capacity - model.used()),
            Op::IsEmpty => prop_assert_eq!(consumer.is_empty(), model.published.is_empty()),
        }
    }
    // Drain: everything published comes out in order, then nothing.
    producer.publish();
    model.published.extend(model.unpublished.drain(..));
    for expected in model.published {
        prop_assert!(consumer.try_pop_into(&mut out).unwrap());
        prop_assert_eq!(&out, &expected);
    }
    prop_assert!(!consumer.try_pop_into(&mut out).unwrap());
    consumer.release();
    prop_assert_eq!(producer.free_bytes(), capacity);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn matches_model_64(ops in ops(64)) {
        run_model(64, &ops)?;
    }

    #[test]
    fn matches_model_256(ops in ops(256)) {
        run_model(256, &ops)?;
    }
}

fn checksum(seq: u64, body: &[u8]) -> u64 {
    // FNV-1a over the sequence number and the body.
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for byte in seq.to_le_bytes().iter().chain(body) {
        hash = (hash ^ *byte as u64).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// One producer thread, one consumer thread, a 4 KiB ring: a million records of 16..=255
/// payload bytes wrap the ring tens of thousands of times and fill it often.
#[test]
fn two_threads_million_records() {
    // Miri (`cargo +nightly miri test`) checks the unsafe code on a shorter run.
    const RECORDS: u64 = if cfg!(miri) { 500 } else { 1_000_000 };
    const CAPACITY: usize = 4096;
    let body_source: Arc<Vec<u8>> = Arc::new(pattern(512, 17));
    let (mut producer, mut consumer) = new_ring(CAPACITY);
    let filled = Arc::new(AtomicBool::new(false));
    let full_count = Arc::new(AtomicU64::new(0));
    // A lost wakeup would spin forever: fail instead.
    let deadline = Instant::now() + Duration::from_secs(300);

    let producer_thread = std::thread::spawn({
        let (body_source, filled, full_count) = (body_source.clone(), filled.clone(), full_count.clone());
        move || {
            for seq in 0..RECORDS {
                let body_len = (seq * 7919 % 240) as usize;
                let body = &body_source[(seq % 256) as usize..][..body_len];
                let (seq_bytes, sum) = (seq.to_le_bytes(), checksum(seq, body).to_le_bytes());
                loop {
                    match producer.try_push(&[&seq_bytes, body, &sum]) {
                        Ok(()) => break,
                        Err(PushError::Full) => {
                            full_count.fetch_add(1, Ordering::Relaxed);
                            filled.store(true, Ordering::Relaxed);
                            producer.publish();
                            assert!(Instant::now() < deadline, "producer stuck on Full at record {seq}");
                            std::thread::yield_now();
                        }
                        Err(err) => panic!("push {seq}: {err}"),
                    }
                }
                if seq % 16 == 15 {
                    producer.publish();
                }
            }
            producer.publish();
        }
    });

    // Start only once the producer has filled the ring, so Full is certainly exercised.
    while !filled.load(Ordering::Relaxed) {
        assert!(Instant::now() < deadline && !producer_thread.is_finished(), "the producer never filled the ring");
        std::thread::yield_now();
    }
    let mut out = Vec::new();
    let mut expected_seq = 0u64;
    let mut since_release = 0;
    while expected_seq < RECORDS {
        if !consumer.try_pop_into(&mut out).unwrap() {
            consumer.release();
            assert!(Instant::now() < deadline, "consumer stuck waiting for record {expected_seq}");
            std::thread::yield_now();
            continue;
        }
        assert!(out.len() >= 16, "record {expected_seq} is {} bytes", out.len());
        let seq = u64::from_le_bytes(out[..8].try_into().unwrap());
        assert_eq!(seq, expected_seq, "records out of order");
        let body_len = (seq * 7919 % 240) as usize;
        assert_eq!(out.len(), 16 + body_len, "record {seq} length");
        let body = &out[8..8 + body_len];
        assert_eq!(body, &body_source[(seq % 256) as usize..][..body_len], "record {seq} body");
        let sum = u64::from_le_bytes(out[8 + body_len..].try_into().unwrap());
        assert_eq!(sum, checksum(seq, body), "record {seq} checksum");
        expected_seq += 1;
        since_release += 1;
        if since_release == 32 {
            consumer.release();
            since_release = 0;
        }
    }
    consumer.release();
    producer_thread.join().unwrap();
    assert!(!consumer.try_pop_into(&mut out).unwrap(), "nothing after the last record");
    assert!(full_count.load(Ordering::Relaxed) > 0);
    eprintln!("two_threads_million_records: producer saw Full {} times", full_count.load(Ordering::Relaxed));
}

#[test]
fn a_ring_on_fresh_memory_touches_only_its_header_until_records_are_written() {
    let capacity = 1 << 20;
    let len = ring_size(capacity);
    let fd = rustix::fs::memfd_create("ring-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    let file = std::fs::File::from(fd);
    file.set_len(len as u64).unwrap();
    let map = Arc::new(memmap2::MmapOptions::new().len(len).map_raw(&file).unwrap());
    let used = || rustix::fs::fstat(&file).unwrap().st_blocks as usize * 512;
    // SAFETY: the mapping is `ring_size(capacity)` bytes, page-aligned, of a fresh memfd (it
    // reads as zeros), and not shared yet; the handles keep it alive through their owner.
    let (mut producer, mut consumer) = unsafe {
        init_ring_on_zeroed(map.as_mut_ptr(), capacity);
        (
            Producer::attach(map.as_mut_ptr(), len, map.clone()).unwrap(),
            Consumer::attach(map.as_mut_ptr(), len, map.clone()).unwrap(),
        )
    };
    assert!(used() <= 4096, "{} bytes in memory for an unused ring", used());
    for round in 0..3u8 {
        let record = pattern(300 << 10, round);
        producer.try_push(&[&record]).unwrap();
        producer.publish();
        assert_eq!(pop(&mut consumer), Some(record));
        consumer.release();
    }
    assert!(used() > 900 << 10, "records wrapping the ring touch its pages: {} bytes", used());
}
