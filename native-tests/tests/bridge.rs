//! The bridge from a raw client's side: a batch naming a page the client was not given fails
//! key by key without reaching the server; one naming its own page works.

use lmcache_resp_core::ErrorKind;
use lmcache_resp_core::arena::Arena;
use lmcache_resp_core::bridge::wire::{Control, KeyEntry, PROTOCOL_VERSION, Submission, decode_batch_completion};
use lmcache_resp_core::bridge::{BridgeServer, channel};
use lmcache_resp_core::conn::Outcome;
use lmcache_resp_core::engine::EngineConfig;
use lmcache_resp_core::front::BridgedPageStore as BridgeClient;
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
    doorbell: std::os::fd::OwnedFd,
    _rings: Arc<Arena>,
}

impl RawClient {
    fn attach(path: &std::path::Path) -> RawClient {
        let control = UnixStream::connect(path).unwrap();
        channel::send(&control, &Control::Hello { version: PROTOCOL_VERSION, pid: 1 }, &[]).unwrap();
        let (Control::Welcome(_), fds) = channel::receive(&control).unwrap().unwrap() else { panic!("no welcome") };
        let [_pages, rings, doorbell, _notifier]: [std::os::fd::OwnedFd; 4] = fds.try_into().unwrap();
        let rings = Arc::new(Arena::attach(rings).unwrap());
        let (sub, sub_len, comp, comp_len) = rings.ring_region(0);
        let owner: Arc<dyn std::any::Any + Send + Sync> = rings.clone();
        // SAFETY: the bridge initialized both rings before its welcome; this raw client is the
        // producer of the first and the consumer of the second, as a client is.
        let (submit, collect) = unsafe {
            (Producer::attach(sub, sub_len, owner.clone()).unwrap(), Consumer::attach(comp, comp_len, owner).unwrap())
        };
        RawClient { _control: control, submit, collect, doorbell, _rings: rings }
    }

    fn run(&mut self, submission: &Submission<'_>) -> Vec<Outcome> {
        let mut record = Vec::new();
        submission.encode(&mut record);
        self.submit.try_push(&[&record]).unwrap();
        self.submit.publish();
        rustix::io::write(&self.doorbell, &1u64.to_ne_bytes()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.collect.try_pop_into(&mut record).unwrap() {
                self.collect.release();
                let (batch, _, outcomes) = decode_batch_completion(&record).unwrap();
                assert_eq!(batch, submission.batch);
                return outcomes;
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
    let bridge = BridgeServer::start(config, &path).unwrap();
    let honest = BridgeClient::attach(&path, Duration::from_secs(5)).unwrap();
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
