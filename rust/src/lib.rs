//! lmcache-resp core: moves LLM KV-cache pages between host memory and Redis/Valkey over RESP,
//! zero-copy and pipelined.
//!
//! Layers, each using only those below it:
//!
//! - Ground: [`error`], [`secret`], [`memory`] (raw caller memory), [`op`] (the verbs and the
//!   batch contract), [`resp`] (the RESP2 codec: pure, no I/O), [`ring`] (SPSC rings),
//!   [`arena`] (the shared-memory page arena, its pool and the page ledger), [`settings`].
//! - Wire: [`net`] (endpoints, sockets, the handshake, eventfds), [`conn`] (one connection: an
//!   I/O-free state machine and its socket driver), [`blocking`] (a blocking client on one
//!   connection), [`cluster`] (slots, redirects, the slot map, sharding), [`ranged`] (large values
//!   read in pieces over several connections), [`placement`].
//! - Engine: [`engine`] (I/O worker threads fed through rings), [`capacity`] (client-side
//!   capacity tracking over it).
//! - Bridge: [`bridge`], both sides of the cross-process protocol: the bridge process over one
//!   engine ([`bridge::server`]) and the processes attached to it ([`bridge::client`]).
//! - Fronts: [`front`] (the paged store and LMCache's connector, in this process or through a
//!   bridge: the bridge twins are adapters over [`bridge::client`]).
//! - Bindings (feature `python`): `lmcache_resp._native`, which translates and decides nothing
//!   (and carries the benchmark's loopback probe, `python/ceiling.rs`, which the core does not).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod arena;
pub mod blocking;
pub mod bridge;
pub mod capacity;
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
