//! Counters as read: plain numbers, summed over the workers, and what they are counted by
//! (operations, error kinds, latency buckets).

use crate::op::Op;

/// The operations counted, in this order everywhere (PING, the engine's warm-up, is not).
pub const OPS: [Op; 4] = [Op::Get, Op::Set, Op::Exists, Op::Del];
/// Their names in stats and metric labels.
pub const OP_NAMES: [&str; 4] = ["get", "set", "exists", "delete"];
/// Error kinds by code ([`ErrorKind`](crate::ErrorKind) `as u8`, 1..=14); index 0 is unused.
pub const KINDS: usize = 15;

/// Latency buckets: upper bounds of 50 µs x 2^i for i in 0..21 (50 µs .. 52.4 s), then one
/// for everything slower.
pub const BUCKETS: usize = 22;
/// The first bucket's upper bound, in nanoseconds.
pub(crate) const FIRST_BOUND_NS: u64 = 50_000;

/// The upper bound of bucket `i` in seconds (`f64::INFINITY` for the last).
pub fn bucket_bound_seconds(i: usize) -> f64 {
    if i + 1 >= BUCKETS { f64::INFINITY } else { (FIRST_BOUND_NS << i) as f64 / 1e9 }
}

/// The bucket of a latency of `ns` nanoseconds.
pub(crate) fn bucket_of(ns: u64) -> usize {
    if ns <= FIRST_BOUND_NS {
        return 0;
    }
    let q = (ns - 1) / FIRST_BOUND_NS;
    ((64 - q.leading_zeros()) as usize).min(BUCKETS - 1)
}

/// A latency histogram: counts per bucket (not cumulative; bounds in
/// [`bucket_bound_seconds`]) and the sum of the latencies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Observations per bucket.
    pub counts: [u64; BUCKETS],
    /// Sum of the observed latencies, in nanoseconds.
    pub sum_ns: u64,
}

impl Histogram {
    /// Observations in all buckets.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds `other`'s observations.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.sum_ns += other.sum_ns;
    }
}

/// One endpoint's counters (see `docs/observability.md` for each one's meaning).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointSnapshot {
    /// The endpoint's display string: `host:port`, `unix:/path`, or `super::UNROUTED`.
    pub endpoint: String,
    /// Keys completed, by operation ([`OPS`] order).
    pub keys: [u64; 4],
    /// Payload bytes of the SETs handed to this endpoint.
    pub bytes_sent: u64,
    /// Payload bytes of the GET hits received from it.
    pub bytes_received: u64,
    /// GETs that found a value.
    pub hits: u64,
    /// GETs that found none (or, for fixed-size chunks, one of another length).
    pub misses: u64,
    /// Failed keys by error kind code (index 0 unused).
    pub errors: [u64; KINDS],
    /// Requests sent again: after a broken connection, or to a cluster node after a failure.
    pub retries: u64,
    /// Connects that succeeded after a connection's first.
    pub reconnects: u64,
    /// `MOVED` redirects this endpoint answered.
    pub moved: u64,
    /// `ASK` redirects this endpoint answered.
    pub ask: u64,
    /// Keys handed to it and not completed yet.
    pub in_flight: u64,
    /// 1 while the endpoint is known to be down (its keys fail at once; see
    /// `crate::health`), else 0.
    pub down: u64,
    /// What the server said it is (`valkey 9.1.2`); empty until a handshake heard it.
    pub server: String,
    /// How its large values are read (`whole GETs`, `pieces of 1 MiB`; see
    /// `crate::ranged::shape`).
    pub reads: String,
    /// Per key: its batch's submission to its completion.
    pub key_latency: Histogram,
}

impl EndpointSnapshot {
    /// Nothing was ever counted here.
    pub fn is_empty(&self) -> bool {
        *self == EndpointSnapshot { endpoint: self.endpoint.clone(), ..EndpointSnapshot::default() }
    }

    /// Failed keys, all kinds.
    pub fn errors_total(&self) -> u64 {
        self.errors.iter().sum()
    }
}

/// A front's counters: batch-level ones, and per endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Where the front sends (its `endpoint` property).
    pub endpoint: String,
    /// Batches completed, by operation ([`OPS`] order).
    pub batches: [u64; 4],
    /// Per batch: submission to its last key's completion filed.
    pub batch_latency: Histogram,
    /// Per endpoint, in the order they were first seen (configured servers first).
    pub endpoints: Vec<EndpointSnapshot>,
}

impl Snapshot {
    /// Encodes as little-endian u64 words and length-prefixed names (the bridge's control
    /// channel carries it).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let put = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_le_bytes());
        let name = |out: &mut Vec<u8>, s: &str| {
            let s = &s.as_bytes()[..s.len().min(1024)];
            out.extend_from_slice(&(s.len() as u16).to_le_bytes());
            out.extend_from_slice(s);
        };
        let hist = |out: &mut Vec<u8>, h: &Histogram| {
            h.counts.iter().for_each(|&c| put(out, c));
            put(out, h.sum_ns);
        };
        name(&mut out, &self.endpoint);
        self.batches.iter().for_each(|&c| put(&mut out, c));
        hist(&mut out, &self.batch_latency);
        out.extend_from_slice(&(self.endpoints.len() as u16).to_le_bytes());
        for e in &self.endpoints {
            name(&mut out, &e.endpoint);
            e.keys.iter().for_each(|&c| put(&mut out, c));
            e.errors.iter().for_each(|&c| put(&mut out, c));
            for v in [
                e.bytes_sent,
                e.bytes_received,
                e.hits,
                e.misses,
                e.retries,
                e.reconnects,
                e.moved,
                e.ask,
                e.in_flight,
                e.down,
            ] {
                put(&mut out, v);
            }
            hist(&mut out, &e.key_latency);
            name(&mut out, &e.server);
            name(&mut out, &e.reads);
        }
        out
    }

    /// Decodes what [`Snapshot::encode`] wrote; None if it is not that.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Snapshot> {
        let mut at = 0usize;
        let mut take = |n: usize| -> Option<&[u8]> {
            let part = bytes.get(at..at.checked_add(n)?)?;
            at += n;
            Some(part)
        };
        fn u16_of(b: &[u8]) -> usize {
            u16::from_le_bytes([b[0], b[1]]) as usize
        }
        fn u64_of(b: &[u8]) -> u64 {
            u64::from_le_bytes(b.try_into().expect("8 bytes"))
        }
        macro_rules! word {
            () => {
                u64_of(take(8)?)
            };
        }
        macro_rules! name {
            () => {{
                let len = u16_of(take(2)?);
                String::from_utf8_lossy(take(len)?).into_owned()
            }};
        }
        macro_rules! hist {
            () => {{
                let mut h = Histogram::default();
                for c in h.counts.iter_mut() {
                    *c = word!();
                }
                h.sum_ns = word!();
                h
            }};
        }
        let mut out = Snapshot { endpoint: name!(), ..Snapshot::default() };
        for c in out.batches.iter_mut() {
            *c = word!();
        }
        out.batch_latency = hist!();
        let endpoints = u16_of(take(2)?);
        for _ in 0..endpoints {
            let mut e = EndpointSnapshot { endpoint: name!(), ..EndpointSnapshot::default() };
            for c in e.keys.iter_mut() {
                *c = word!();
            }
            for c in e.errors.iter_mut() {
                *c = word!();
            }
            for v in [
                &mut e.bytes_sent,
                &mut e.bytes_received,
                &mut e.hits,
                &mut e.misses,
                &mut e.retries,
                &mut e.reconnects,
                &mut e.moved,
                &mut e.ask,
                &mut e.in_flight,
                &mut e.down,
            ] {
                *v = word!();
            }
            e.key_latency = hist!();
            e.server = name!();
            e.reads = name!();
            out.endpoints.push(e);
        }
        (at == bytes.len()).then_some(out)
    }
}
