//! The bridge from a raw client's side: a batch naming a page the client was not given fails
//! key by key without reaching the server; one naming its own page works.

use lmcache_resp_core::ErrorKind;
use lmcache_resp_core::Op;
use lmcache_resp_core::bridge::{BridgeLimits, BridgeServer};
use lmcache_resp_core::engine::EngineConfig;
use lmcache_resp_core::engine::Outcome;
use lmcache_resp_core::front::BridgedPageStore;
use lmcache_resp_core::front::PageStore;
use lmcache_resp_core::internals::bridge::wire::{KeyEntry, Submission};
use redis_harness::RedisServer;
use redis_harness::bridge_raw::RawClient;
use std::time::Duration;

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
    let mut raw = RawClient::attach(&path).unwrap();

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
