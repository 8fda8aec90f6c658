//! The bridge from a raw client's side: a batch naming a page the client was not given fails
//! key by key without reaching the server; one naming its own page works.

use lmcache_resp_core::ErrorKind;
use lmcache_resp_core::arena::Arena;
use lmcache_resp_core::bridge::signal::SignalEnd;
use lmcache_resp_core::bridge::wire::{Control, KeyEntry, PROTOCOL_VERSION, Submission, decode_completion_record};
use lmcache_resp_core::bridge::{BridgeLimits, BridgeServer, channel};
use lmcache_resp_core::conn::Outcome;
use lmcache_resp_core::engine::EngineConfig;
use lmcache_resp_core::front::BridgedPageStore;
use lmcache_resp_core::front::PageStore;
use lmcache_resp_core::op::Op;
use lmcache_resp_core::ring::{Consumer, Producer};
use redis_harness::RedisServer;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct RawClient {
    _control: UnixStream,
    submit: Producer,
    collect: Consumer,
    signal: SignalEnd,
    _region: Arc<Arena>,
}

impl RawClient {
    fn attach(path: &std::path::Path) -> RawClient {
        let control = UnixStream::connect(path).unwrap();
        let hello = Control::Hello { version: PROTOCOL_VERSION, pid: 1, submission_ring_bytes: 0 };
        channel::send(&control, &hello, &[]).unwrap();
        let (Control::Welcome(_), fds) = channel::receive(&control).unwrap().unwrap() else { panic!("no welcome") };
        let [region, signal]: [std::os::fd::OwnedFd; 2] = fds.try_into().unwrap();
        let region = Arc::new(Arena::attach(region).unwrap());
        let (sub, sub_len, comp, comp_len) = region.ring_region(0);
        let owner: Arc<dyn std::any::Any + Send + Sync> = region.clone();
        // SAFETY: the bridge initialized both rings before its welcome; this raw client is the
        // producer of the first and the consumer of the second, as a client is.
        let (submit, collect) = unsafe {
            (Producer::attach(sub, sub_len, owner.clone()).unwrap(), Consumer::attach(comp, comp_len, owner).unwrap())
        };
        RawClient { _control: control, submit, collect, signal: SignalEnd::from_owned(signal), _region: region }
    }

    fn run(&mut self, submission: &Submission<'_>) -> Vec<Outcome> {
        let mut record = Vec::new();
        submission.encode(&mut record);
        self.submit.try_push(&[&record]).unwrap();
        self.submit.publish();
        self.signal.signal();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.collect.try_pop_into(&mut record).unwrap() {
                self.collect.release();
                let completion = decode_completion_record(&record).unwrap();
                assert_eq!(completion.batch, submission.batch);
                return completion.outcomes;
            }
            assert!(Instant::now() < deadline, "no completion");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

#[test]
fn a_batch_naming_pages_the_client_was_not_given_fails_without_reaching_the_server() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.sock");
    let mut config = EngineConfig::new(server.settings());
    config.settings.num_workers = 1;
    config.page_size = 4096;
    config.num_pages = 8;
    let bridge = BridgeServer::start(config, &path, BridgeLimits::default()).unwrap();
    let honest = BridgedPageStore::attach(&path, Duration::from_secs(5)).unwrap();
    let theirs = honest.allocate_many(1).unwrap()[0];
    let mut raw = RawClient::attach(&path);

    let stolen = Submission {
        batch: 1,
        op: Op::Set,
        exact_length: false,
        keys: vec![KeyEntry { key: b"stolen", page: theirs.index, generation: theirs.generation, len: 4096 }],
    };
    let outcomes = raw.run(&stolen);
    let Outcome::Failed(err) = &outcomes[0] else { panic!("{outcomes:?}") };
    assert_eq!(err.kind(), ErrorKind::Page);
    assert!(err.message().contains("is not one this client allocated"), "{err}");
    assert_eq!(server.raw_command(&[b"EXISTS", b"stolen"]), b":0\r\n", "nothing reached the server");

    let out_of_range = Submission {
        batch: 2,
        op: Op::Get,
        exact_length: false,
        keys: vec![KeyEntry { key: b"k", page: 1_000_000, generation: 0, len: 4096 }],
    };
    assert!(matches!(&raw.run(&out_of_range)[0], Outcome::Failed(e) if e.kind() == ErrorKind::Page));

    // Keys only: fine without pages, and the honest client is untouched.
    let exists = Submission {
        batch: 3,
        op: Op::Exists,
        exact_length: false,
        keys: vec![KeyEntry { key: b"stolen", page: u32::MAX, generation: 0, len: 0 }],
    };
    assert_eq!(raw.run(&exists), vec![Outcome::Bool(false)]);
    let stored = honest.run(Op::Set, &[b"mine"], &[theirs], Some(&[10])).unwrap();
    assert_eq!(stored.outcomes, vec![Outcome::Done]);
    assert_eq!(bridge.clients(), 2);
}
