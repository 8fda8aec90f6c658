//! Loom models of one producer and one consumer. Data bytes live in loom cells (see
//! `storage`), so a missing Release/Acquire pair shows up as a causality violation on the
//! payload, not only as a wrong value.

use loom::thread;

use super::test_mem::new_ring;
use super::{Consumer, Producer, PushError};

fn payload(index: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (index * 64 + i) as u8 ^ 0x5A).collect()
}

/// Pushes each of `lens` (one publish per burst: on Full and at the end), waiting on Full.
fn produce(mut producer: Producer, lens: &[usize]) {
    for (index, &len) in lens.iter().enumerate() {
        let bytes = payload(index, len);
        let (head, tail) = bytes.split_at(len / 3);
        loop {
            match producer.try_push(&[head, tail]) {
                Ok(()) => break,
                Err(PushError::Full) => {
                    producer.publish();
                    thread::yield_now();
                }
                Err(err) => panic!("push {index}: {err}"),
            }
        }
    }
    producer.publish();
}

/// Pops `lens.len()` records, checking each, releasing whenever the ring looks empty.
fn consume(mut consumer: Consumer, lens: &[usize]) {
    let mut out = Vec::new();
    let mut index = 0;
    while index < lens.len() {
        if consumer.try_pop_into(&mut out).unwrap() {
            assert_eq!(out, payload(index, lens[index]), "record {index}");
            index += 1;
        } else {
            consumer.release();
            thread::yield_now();
        }
    }
    consumer.release();
    assert!(!consumer.try_pop_into(&mut out).unwrap());
}

/// Explores every interleaving (no preemption bound: the state space is a few thousand
/// executions, since the handles touch shared atomics only when full or empty and per burst).
fn model(lens: &'static [usize]) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = None;
    builder.check(move || {
        let (producer, consumer) = new_ring(64);
        let handle = thread::spawn(move || produce(producer, lens));
        consume(consumer, lens);
        handle.join().unwrap();
    });
}

/// A 64-byte ring, four records (32 + 40 + 24 + 8 bytes): the second must wait for the first
/// to be released, its payload wraps around the end (24 bytes, then 6), the third starts
/// after the wrap.
#[test]
fn spsc_wraps_and_waits() {
    model(&[20, 30, 12, 0]);
}

/// Records that fill the ring exactly, so every push after the first waits for a release
/// and the consumer reads bytes the producer overwrote the lap before.
#[test]
fn spsc_full_ring_records() {
    model(&[56, 50, 41]);
}

/// Many small records: bursts of several records per publish and per release, three laps.
#[test]
fn spsc_bursts() {
    model(&[0, 3, 8, 9, 1, 15, 4, 0, 7, 2, 16, 5]);
}
