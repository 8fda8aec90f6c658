//! lmcache-resp core: moves LLM KV-cache pages between host memory and Redis/Valkey over RESP,
//! zero-copy and pipelined.
//!
//! Layers, from the ground up: each uses only the layers before it in this list, and within a
//! layer a module uses only modules that do not use it back. `tests/walls.rs` reads this list
//! and fails on a use of a layer above, or a circle.
//!
//! - Ground (no sockets, no threads of its own): `error`, `secret`, `memory` (raw caller
//!   memory), `op` (the verbs and the batch contract), `resp` (the RESP2 codec: pure, no I/O),
//!   `clock` (deadlines as monotonic nanoseconds), `ring` (SPSC rings), `arena` (the
//!   shared-memory page arena, its pool and the page ledger), `logging` (the log queue the
//!   bindings drain, and the digest of bursts of like events), and `testing` (the unit tests'
//!   helpers).
//! - Wire: `net` (endpoints, sockets, the handshake, eventfds, the TLS session and records),
//!   `health` (which servers are down, and the probe that notices them back), `cluster` (slots,
//!   redirects, the slot map, sharding), `conn` (one connection: an I/O-free state machine, its
//!   socket driver and the hooks it counts through), [`settings`] (every setting, checked; it
//!   builds what the wire takes: endpoints, connect options, TLS configs, pipeline limits),
//!   `ranged` (large values read in pieces over several connections), `blocking` (a blocking
//!   client on one connection), `placement` (where the I/O threads run).
//! - Engine: [`metrics`] (the always-on counters), [`engine`] (I/O worker threads fed through
//!   rings; the summary of failed keys), `capacity` (client-side capacity tracking over it).
//! - Bridge: [`bridge`], both sides of the cross-process protocol: the bridge process over one
//!   engine (`bridge::server`) and the processes attached to it (`bridge::client`).
//! - Fronts: [`front`] (the paged store and LMCache's connector, in this process or through a
//!   bridge: the bridge twins are adapters over `bridge::client`).
//! - Bindings: `python` (feature `python`: `lmcache_resp._native`, which translates and decides
//!   nothing, and carries the benchmark's loopback probe, `python/ceiling.rs`, which the core
//!   does not).

pub mod arena;
pub mod blocking;
pub mod bridge;
pub mod capacity;
pub mod clock;
pub mod cluster;
pub mod conn;
pub mod engine;
pub mod error;
pub mod front;
pub mod health;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod net;
pub mod op;
pub mod placement;
#[cfg(feature = "python")]
mod python;
pub mod ranged;
pub mod resp;
pub mod ring;
pub mod secret;
pub mod settings;
#[cfg(test)]
mod testing;

pub use error::{Error, ErrorKind, Result};
pub use memory::RawBuf;
pub use secret::Secret;
