use super::*;
use crate::error::{Error, ErrorKind};

#[test]
fn every_error_kind_has_a_slot_and_none_is_left_over() {
    // Errors are counted by code, 1..KINDS: the last slot is the highest code, none past it.
    assert!(ErrorKind::from_code(KINDS as u8 - 1).is_some());
    assert!(ErrorKind::from_code(KINDS as u8).is_none());
}

#[test]
fn buckets_are_powers_of_two_of_50_microseconds() {
    assert_eq!(bucket_of(0), 0);
    assert_eq!(bucket_of(50_000), 0);
    assert_eq!(bucket_of(50_001), 1);
    assert_eq!(bucket_of(100_000), 1);
    assert_eq!(bucket_of(100_001), 2);
    assert_eq!(bucket_of(50_000 << 20), 20);
    assert_eq!(bucket_of((50_000 << 20) + 1), 21);
    assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    assert_eq!(bucket_bound_seconds(0), 50e-6);
    assert!((bucket_bound_seconds(20) - 52.4288).abs() < 1e-9);
    assert!(bucket_bound_seconds(BUCKETS - 1).is_infinite());
    for ns in [1u64, 49_999, 50_000, 77_777, 1 << 30, 60_000_000_000] {
        let b = bucket_of(ns);
        assert!(ns as f64 / 1e9 <= bucket_bound_seconds(b), "{ns} in {b}");
        assert!(b == 0 || ns as f64 / 1e9 > bucket_bound_seconds(b - 1), "{ns} in {b}");
    }
}

#[test]
fn tags_carry_the_node_and_strip_to_the_batch_tag() {
    let tag = (4095u64 << 32) | 123;
    let with = tag | (8u64 << NODE_SHIFT);
    assert_eq!(strip_tag(with), tag);
    assert_eq!(tag_node(with), 8);
    assert_eq!(tag_node(tag), 0);
    assert_eq!(
        strip_tag(with | crate::ranged::INTERNAL_TAG) & crate::ranged::INTERNAL_TAG,
        crate::ranged::INTERNAL_TAG
    );
}

#[cfg(not(feature = "no-metrics"))]
#[test]
fn a_worker_counts_keys_under_the_endpoint_they_went_to_and_sums_on_read() {
    use crate::conn::Request;
    use std::time::Instant;
    let a = Endpoint::Tcp { host: "10.0.0.1".into(), port: 6379 };
    let b = Endpoint::Tcp { host: "10.0.0.2".into(), port: 6379 };
    let engine = EngineMetrics::new("shards a,b", &[a.clone(), b.clone()], 16);
    let mut workers = [WorkerMetrics::new(engine.clone()), WorkerMetrics::new(engine.clone())];
    let now = crate::clock::now_ns();
    engine.on_submit(3, Op::Get, now);
    let mut page = vec![0u8; 4096];
    // SAFETY: `page` outlives every use of the buffer in this test.
    let buf = unsafe { crate::memory::RawBuf::new(page.as_mut_ptr(), page.len()) };
    for (i, worker) in workers.iter_mut().enumerate() {
        let mut request = Request::new(Op::Get, b"k", Some(buf), 3 << 32 | i as u64, Instant::now());
        worker.on_send(0, if i == 0 { &a } else { &b }, &mut request);
        let outcome = if i == 0 { Outcome::Hit(4096) } else { Outcome::Failed(Error::new(ErrorKind::Timeout, "t")) };
        let snapshot = engine.snapshot();
        assert_eq!(snapshot.endpoints[i].in_flight, 1);
        assert_eq!(worker.on_complete(request.tag, &outcome, now + 70_000), 3 << 32 | i as u64);
    }
    engine.on_batch_done(3);
    let s = engine.snapshot();
    assert_eq!(s.batches, [1, 0, 0, 0]);
    assert_eq!(s.batch_latency.count(), 1);
    assert_eq!(s.endpoints.len(), 2, "{s:?}");
    let (sa, sb) = (&s.endpoints[0], &s.endpoints[1]);
    assert_eq!(
        (sa.endpoint.as_str(), sa.keys[0], sa.hits, sa.bytes_received, sa.in_flight),
        ("10.0.0.1:6379", 1, 1, 4096, 0)
    );
    assert_eq!((sb.keys[0], sb.hits, sb.errors[ErrorKind::Timeout as usize], sb.in_flight), (1, 0, 1, 0));
    assert_eq!(sa.key_latency.counts[1], 1, "70 us lands in the (50, 100] us bucket");
    assert_eq!(sa.key_latency.sum_ns, 70_000);
}

#[test]
fn a_snapshot_survives_its_encoding() {
    let mut s = Snapshot { endpoint: "cluster a:1,b:2".into(), batches: [1, 2, 3, 4], ..Snapshot::default() };
    s.batch_latency.counts[5] = 9;
    s.batch_latency.sum_ns = 77;
    for (i, name) in ["a:1", "b:2", UNROUTED].into_iter().enumerate() {
        let mut e =
            EndpointSnapshot { endpoint: name.into(), bytes_sent: i as u64 + 10, in_flight: 3, ..Default::default() };
        e.errors[4] = 2;
        e.key_latency.counts[21] = 1;
        e.server = format!("valkey 9.1.{i}");
        e.reads = "pieces of 1 MiB".into();
        s.endpoints.push(e);
    }
    let bytes = s.encode();
    assert_eq!(Snapshot::decode(&bytes), Some(s));
    assert_eq!(Snapshot::decode(&bytes[..bytes.len() - 1]), None);
    assert_eq!(Snapshot::decode(&[]), None);
}
