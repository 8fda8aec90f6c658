//! Spreading keys over several servers: Redis Cluster routing, and static sharding over
//! independent servers. Pure code, no I/O: the engine sends the commands and feeds the replies
//! in.
//!
//! Redis Cluster:
//! - [`slot`]: the hash slot of a key (CRC16 with hash tags), as every cluster node computes it.
//! - [`slot_map`]: which primary and replicas serve each slot, read from `CLUSTER SHARDS` (Redis 7+)
//!   or `CLUSTER SLOTS`, patched by `MOVED`.
//! - [`redirect`]: the `MOVED`/`ASK` error replies, and which cluster errors are worth a retry.
//! - [`read_pick`]: which of a shard's nodes serves a read when reads may go to replicas.
//!
//! Independent servers:
//! - [`shard`]: rendezvous hashing over a stable hash, so adding a server moves only its share.
//!
//! The reply fixtures under `testdata/` are bytes captured from a live Redis 7.0 cluster by
//! `testdata/capture.py`; tests parse them with the crate's own RESP decoder.

pub mod node;
pub mod read_pick;
pub mod redirect;
pub mod shard;
pub mod slot;
pub mod slot_map;

pub use node::NodeAddr;
pub use redirect::{Redirect, RedirectKind, transient};
pub use shard::Rendezvous;
pub use slot::key_slot;
pub use slot_map::SlotMap;
