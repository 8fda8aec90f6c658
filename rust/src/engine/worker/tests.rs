//! The worker loop's decisions, driven in memory: a worker with its real rings and batch
//! counters, and connections to an address nothing listens on that are never driven (no
//! socket is opened: requests queue on them as on any connection before it writes). Each test
//! runs the loop's steps by hand, with the time it chooses.

use super::*;
use crate::arena::{Arena, ArenaSpec};
use crate::conn::ReconnectPolicy;
use crate::engine::buffers::BufferTable;
use crate::engine::control::ControlBlock;
use crate::engine::counter;
use crate::engine::nodes::ConnFactory;
use crate::engine::records::decode_completion;
use crate::engine::regions::RegionTable;
use crate::health::HealthBoard;
use crate::net::{Endpoint, Resolver};
use crate::settings::Settings;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;

const SLOTS: usize = 16;
/// Connections per worker besides the express one: with it, each node has three.
const CONNECTIONS: usize = 2;

/// A worker, and the other ends of its rings: the submitters' and the completion reader's.
struct Harness {
    worker: Worker,
    submit: Producer,
    collect: Consumer,
}

/// A worker of one server, each connection taking `2 * requests` requests before it is full,
/// and a completion ring of `completion_ring` bytes; `pages`: an arena of that many 4 MiB
/// pages for its descriptors to name.
fn harness(requests: usize, completion_ring: usize, pages: usize) -> Harness {
    let mut settings = Settings::new(Endpoint::Tcp { host: "127.0.0.1".into(), port: 9 });
    settings.connections_per_worker = CONNECTIONS;
    settings.pipeline = PipelineLimits { max_inflight_bytes: 64 << 20, max_inflight_requests: requests };
    let (route, servers) = Route::new(&settings, None).unwrap();
    let (control, mut pairs) = ControlBlock::create(1, 1 << 16, completion_ring, SLOTS).unwrap();
    let pair = pairs.pop().unwrap();
    let arena = (pages > 0).then(|| {
        let spec = ArenaSpec {
            page_size: 4 << 20,
            num_pages: pages,
            rings: Vec::new(),
            batch_slots: 0,
            name_hint: "t".into(),
        };
        Arc::new(Arena::create(&spec).unwrap())
    });
    let doorbell = Arc::new(EventFd::new().unwrap());
    let shared = Arc::new(Shared {
        control,
        pages: arena,
        pipeline: settings.pipeline,
        set_expiry_ms: None,
        completion_event: EventFd::new().unwrap(),
        doorbells: vec![doorbell.clone()],
        buffers: BufferTable::new(SLOTS),
        regions: RegionTable::new(SLOTS),
        sealed: AtomicBool::new(false),
        failure: OnceLock::new(),
        metrics: crate::metrics::EngineMetrics::new("127.0.0.1:9", &servers, SLOTS),
        ring_failure: std::sync::Mutex::new(None),
    });
    let factory = ConnFactory {
        settings: Arc::new(settings.clone()),
        reconnect: ReconnectPolicy::default(),
        pipeline: settings.pipeline,
        resolver: Arc::new(Resolver::with_lookup(|_, port| {
            Ok(vec![std::net::SocketAddr::from(([127, 0, 0, 1], port))])
        })),
        waker: Arc::new(|| {}),
        health: Arc::new(HealthBoard::new(Default::default())),
    };
    let nodes = Nodes::new(factory, &servers).unwrap();
    let worker = Worker::new(shared, pair.take, pair.post, doorbell, Arc::new(route), nodes, RangedReads::new());
    Harness { worker, submit: pair.submit, collect: pair.collect }
}

impl Harness {
    /// Submits one descriptor, as a front does.
    fn submit(&mut self, descriptor: Descriptor<'_>) {
        self.submit.try_push(&[&descriptor.header(), descriptor.key]).unwrap();
        self.submit.publish();
    }

    /// Submits `n` EXISTS of batch slot `slot` (indices `0..n`), due `timeout` from now.
    fn submit_exists(&mut self, slot: u32, n: u32, timeout: Duration) {
        for index in 0..n {
            let key = format!("key-{slot}-{index}").into_bytes();
            self.submit(Descriptor {
                op: Op::Exists,
                tag: Tag { slot, index },
                region: Region::None,
                flags: 0,
                offset: 0,
                region_id: 0,
                len: 0,
                deadline_ns: clock::now_ns() + timeout.as_nanos() as u64,
                key: &key,
            });
        }
    }

    /// Requests queued on the worker's connections, all together.
    fn queued(&self) -> usize {
        self.worker.nodes.conns.iter().map(Conn::outstanding_requests).sum()
    }

    /// The completion records in the ring now: `(tag, outcome)`.
    fn posted(&mut self) -> Vec<(Tag, Outcome)> {
        let mut record = Vec::new();
        let mut posted = Vec::new();
        while self.collect.try_pop_into(&mut record).unwrap() {
            let (tag, outcome) = decode_completion(&record).unwrap();
            posted.push((Tag::unpack(tag), outcome));
        }
        self.collect.release();
        posted
    }

    fn counter(&self, slot: u32) -> u32 {
        self.worker.shared.counter(slot).load(Ordering::Acquire)
    }
}

fn kind(outcome: &Outcome) -> Option<ErrorKind> {
    match outcome {
        Outcome::Failed(err) => Some(err.kind()),
        _ => None,
    }
}

#[test]
fn submissions_are_taken_only_while_a_connection_has_room_the_ring_keeps_the_rest() {
    let mut h = harness(2, 1 << 12, 0);
    let conns = h.worker.nodes.conns.len();
    assert_eq!(conns, CONNECTIONS + 1, "the express connection and the others");
    h.submit_exists(0, 40, Duration::from_secs(30));
    let now = Instant::now();
    h.worker.take_submissions(now, false).unwrap();
    // Each connection takes two pipelines' worth (2 x 2 requests), then the ring is the queue.
    assert_eq!(h.queued(), conns * 4);
    assert!(h.worker.nodes.conns.iter().all(|c| !has_room(c, h.worker.shared.pipeline)));
    assert!(!h.worker.submissions.is_empty(), "the rest wait in the submission ring");
    assert!(h.worker.finished.is_empty());
    h.worker.take_submissions(now, false).unwrap();
    assert_eq!(h.queued(), conns * 4, "no room, nothing taken");
    // Room on one connection (its requests failed before they went out): that much more.
    let err = Error::new(ErrorKind::Connection, "scripted");
    h.worker.nodes.conns[1].fail_unsent(&err, &mut h.worker.finished);
    assert_eq!(h.worker.finished.len(), 4);
    h.worker.take_submissions(now, false).unwrap();
    assert_eq!(h.queued(), conns * 4);
    // 12 + 4 taken of 40.
    let mut left = 0;
    let mut record = Vec::new();
    while h.worker.submissions.try_pop_into(&mut record).unwrap() {
        left += 1;
    }
    assert_eq!(left, 40 - conns * 4 - 4);
}

#[test]
fn sealing_fails_what_no_connection_sent_and_every_submission_left_then_the_worker_is_idle() {
    let mut h = harness(2, 1 << 14, 0);
    h.submit_exists(1, 20, Duration::from_secs(30));
    h.worker.shared.control.counter(1).store(counter::armed(20, false), Ordering::Release);
    let now = Instant::now();
    h.worker.take_submissions(now, false).unwrap();
    let queued = h.queued();
    assert!(queued > 0 && queued < 20);
    assert!(!h.worker.is_idle());
    h.worker.shared.sealed.store(true, Ordering::Release);
    h.worker.seal();
    assert_eq!(h.queued(), 0, "nothing was on the wire: all of it failed");
    assert_eq!(h.worker.finished.len(), queued);
    // What is still in the ring is taken and failed, without going to a connection.
    h.worker.take_submissions(now, true).unwrap();
    assert_eq!(h.queued(), 0);
    assert_eq!(h.worker.finished.len(), 20);
    assert!(h.worker.finished.iter().all(|c| kind(&c.outcome) == Some(ErrorKind::Closed)));
    assert!(!h.worker.is_idle(), "its completions are not posted yet");
    h.worker.post_completions().unwrap();
    assert!(h.worker.is_idle());
    let posted = h.posted();
    let mut indices: Vec<u32> = posted.iter().map(|(tag, _)| tag.index).collect();
    indices.sort_unstable();
    assert_eq!(indices, (0..20).collect::<Vec<_>>(), "every key once");
    assert_eq!(h.counter(1), 0, "the batch is over");
}

#[test]
fn completions_are_posted_then_counted_off_their_batches_once_each() {
    // A completion record of a bare outcome takes 32 bytes: this ring holds four.
    let mut h = harness(2, 128, 0);
    h.worker.shared.control.counter(3).store(counter::armed(5, false), Ordering::Release);
    h.worker.shared.control.counter(4).store(counter::armed(2, true), Ordering::Release);
    let tags = [(3, 0), (4, 0), (3, 1), (3, 2), (4, 1), (3, 3), (3, 4)];
    for (slot, index) in tags {
        h.worker.finished.push(Completion { tag: Tag { slot, index }.pack(), outcome: Outcome::Bool(true) });
    }
    h.worker.shared.completion_event.reset();
    h.worker.post_completions().unwrap();
    // Only what the ring took is counted off: four of seven.
    assert_eq!(h.worker.finished.len(), 3);
    assert_eq!(h.counter(3) & !counter::WAITER_FLAG, 2, "slot 3: three of five posted");
    assert_eq!(h.counter(4), counter::armed(1, true), "slot 4: one of two posted");
    assert!(!h.worker.shared.completion_event.reset(), "no batch is over: nobody is woken");
    let first: Vec<(u32, u32)> = h.posted().iter().map(|(t, _)| (t.slot, t.index)).collect();
    assert_eq!(first, tags[..4], "in the order they finished");
    // The rest, once the reader made room.
    h.worker.post_completions().unwrap();
    assert!(h.worker.finished.is_empty());
    assert_eq!(h.counter(3), 0);
    assert_eq!(h.counter(4), counter::WAITER_FLAG, "the waiter's flag stays; its keys are done");
    assert!(h.worker.shared.completion_event.reset(), "slot 3's drainers are woken once it is over");
    let rest: Vec<(u32, u32)> = h.posted().iter().map(|(t, _)| (t.slot, t.index)).collect();
    assert_eq!(rest, tags[4..]);
    // Nothing left: posting again counts nothing off (a second count would wrap the counters).
    h.worker.post_completions().unwrap();
    assert_eq!((h.counter(3), h.counter(4)), (0, counter::WAITER_FLAG));
    assert!(h.posted().is_empty());
}

#[test]
fn a_submission_that_cannot_be_routed_or_names_no_memory_fails_alone() {
    let mut h = harness(2, 1 << 12, 0);
    let deadline_ns = clock::now_ns() + 30_000_000_000;
    // A GET naming no memory, a SET naming an arena this engine does not have, and a GET naming
    // a region nobody registered.
    let kinds = [(0, Op::Get, Region::None), (1, Op::Set, Region::Arena), (2, Op::Get, Region::Registered)];
    for (index, op, region) in kinds {
        let tag = Tag { slot: 2, index };
        h.submit(Descriptor { op, tag, region, flags: 0, offset: 0, region_id: 3, len: 8, deadline_ns, key: b"k" });
    }
    h.submit_exists(2, 1, Duration::from_secs(30));
    h.worker.take_submissions(Instant::now(), false).unwrap();
    assert_eq!(h.queued(), 1, "the EXISTS went out");
    let failed: Vec<(u32, Option<ErrorKind>)> =
        h.worker.finished.iter().map(|c| (Tag::unpack(c.tag).index, kind(&c.outcome))).collect();
    let invalid = Some(ErrorKind::InvalidInput);
    assert_eq!(failed, [(0, invalid), (1, invalid), (2, invalid)]);
}

#[test]
fn a_ranged_read_settles_its_own_completions_and_ends_once_for_its_key() {
    let mut h = harness(4, 1 << 12, 1);
    let arena = h.worker.shared.pages.clone().unwrap();
    assert!(h.worker.nodes.read_shape(0).piece_bytes() < 4 << 20, "a server that did not say reads in pieces");
    let tag = Tag { slot: 5, index: 0 };
    let deadline_ns = clock::now_ns() + 30_000_000_000;
    let offset = arena.page_offset(0);
    h.submit(Descriptor {
        op: Op::Get,
        tag,
        region: Region::Arena,
        flags: 0,
        offset,
        region_id: 0,
        len: 4 << 20,
        deadline_ns,
        key: b"big",
    });
    let now = Instant::now();
    h.worker.take_submissions(now, false).unwrap();
    assert!(!h.worker.ranged.is_empty(), "a 4 MiB GET is read in pieces");
    assert!(h.worker.rerouted, "its requests need driving before the worker sleeps");
    let express = h.worker.nodes.conn_for(0, 0);
    assert!(h.worker.nodes.conns[express].is_empty(), "never on the express connection");
    assert!(h.queued() > 0);
    // Every part fails on its connection before it goes out, attempt after attempt: the read's
    // own completions go back to it (they never reach the ring), until it gives up, once.
    let err = Error::new(ErrorKind::Connection, "scripted: the connection broke");
    for _ in 0..20 {
        if h.worker.ranged.is_empty() {
            break;
        }
        let settled = h.worker.finished.len();
        for conn in &mut h.worker.nodes.conns {
            conn.fail_unsent(&err, &mut h.worker.finished);
        }
        h.worker.settle_ranged(now, settled);
        assert!(h.worker.finished.iter().all(|c| c.tag & ranged::INTERNAL_TAG == 0), "only callers' completions stay");
    }
    assert!(h.worker.ranged.is_empty(), "the read ended");
    assert_eq!(h.queued(), 0, "nothing of it is left on a connection");
    match h.worker.finished.as_slice() {
        [done] => {
            assert_eq!(Tag::unpack(crate::metrics::strip_tag(done.tag)), tag);
            assert_eq!(kind(&done.outcome), Some(ErrorKind::Connection), "{:?}", done.outcome);
        }
        other => panic!("one completion for the key: {other:?}"),
    }
}

#[test]
fn settling_looks_only_at_completions_added_since_it_last_ran() {
    let mut h = harness(2, 1 << 12, 0);
    // A completion of a ranged read's own request that no read claims (a stray): settling
    // from 0 takes it; settling from past it leaves it where it is.
    let stray = Completion { tag: ranged::INTERNAL_TAG | 7, outcome: Outcome::Done };
    let caller = Completion { tag: Tag { slot: 1, index: 0 }.pack(), outcome: Outcome::Done };
    h.worker.finished = vec![stray, caller];
    h.worker.settle_ranged(Instant::now(), 1);
    assert_eq!(h.worker.finished.len(), 2, "what came before `from` was settled already");
    h.worker.settle_ranged(Instant::now(), 0);
    assert_eq!(h.worker.finished.iter().map(|c| c.tag).collect::<Vec<_>>(), [Tag { slot: 1, index: 0 }.pack()]);
}
