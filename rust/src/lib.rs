//! lmcache-resp core: moves LLM KV-cache pages between host memory and Redis/Valkey over RESP,
//! zero-copy and pipelined.
//!
//! The API: [`settings`] (every setting, checked), [`front`] (the paged store and the
//! connector over caller buffers, with the engine in this process or in a bridge), [`arena`]
//! (the shared-memory pages they hand out), [`engine`] (the I/O engine under them, its batches
//! and results), [`metrics`] (its counters as read), [`bridge`] (the bridge process:
//! [`bridge::BridgeServer`]), and [`Op`], [`Error`], [`ErrorKind`]. Every other module is the
//! crate's own (`pub(crate)`); the native tests reach them through `internals`, a feature
//! release builds never enable.
//!
//! Layers, from the ground up: each uses only the layers before it in this list, and within a
//! layer a module uses only modules that do not use it back. `tests/walls.rs` reads this list
//! and fails on a use of a layer above, or a circle.
//!
//! - Ground (no sockets, no threads of its own): `error`, `secret`, `memory` (raw caller
//!   memory), `op` (the verbs and the batch contract), `resp` (the RESP2 codec: pure, no I/O),
//!   `clock` (deadlines as monotonic nanoseconds), `ring` (SPSC rings), [`arena`] (the
//!   shared-memory page arena, its pool and the page ledger), `logging` (the log queue the
//!   bindings drain, and the digest of bursts of like events), and `testing` (the unit tests'
//!   helpers).
//! - Wire: `net` (endpoints, sockets, the handshake, eventfds, the TLS session and records),
//!   `health` (which servers are down, and the probe that notices them back), `cluster` (slots,
//!   redirects, the slot map, sharding), `sentinel` (discovering a service's primary through
//!   Sentinels, as plain code), `conn` (one connection: an I/O-free state machine, its
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
//! - Doors: `python` (feature `python`: `lmcache_resp._native`, which translates and decides
//!   nothing, and carries the benchmark's loopback probe, `python/ceiling.rs`, which the core
//!   does not), and `internals` (feature `internals`: the inner modules, for the native tests).

// Without the bindings, what only they use (the log queue they drain, the blocking client's
// calls, a client's counters) is unused. The build that ships (feature `python`, without
// `internals`) is the one checked for dead code.
#![cfg_attr(not(feature = "python"), allow(dead_code))]

pub mod arena;
pub(crate) mod blocking;
pub mod bridge;
pub(crate) mod capacity;
pub(crate) mod clock;
pub(crate) mod cluster;
pub(crate) mod conn;
pub mod engine;
pub(crate) mod error;
pub mod front;
pub(crate) mod health;
pub(crate) mod logging;
pub(crate) mod memory;
pub mod metrics;
pub(crate) mod net;
pub(crate) mod op;
pub(crate) mod placement;
#[cfg(feature = "python")]
mod python;
pub(crate) mod ranged;
pub(crate) mod resp;
pub(crate) mod ring;
pub(crate) mod secret;
pub(crate) mod sentinel;
pub mod settings;
#[cfg(test)]
mod testing;

pub use error::{Error, ErrorKind, Result};
pub use memory::RawBuf;
pub use op::Op;
pub use secret::Secret;

/// The fuzz targets' entry points (rust/fuzz), with the `fuzzing` feature.
#[cfg(feature = "fuzzing")]
pub use resp::fuzzing;

/// The crate's inner modules as the native tests (native-tests/) see them: every `pub` item of
/// each, under the module's own name. Only with the `internals` feature, which the native
/// tests enable and release builds never do; nothing here is API.
#[cfg(feature = "internals")]
pub mod internals {
    /// `crate::blocking`.
    pub mod blocking {
        pub use crate::blocking::*;
    }
    /// `crate::bridge`'s inner modules.
    pub mod bridge {
        /// `crate::bridge::channel`.
        pub mod channel {
            pub use crate::bridge::channel::*;
        }
        /// `crate::bridge::signal`.
        pub mod signal {
            pub use crate::bridge::signal::*;
        }
        /// `crate::bridge::wire`.
        pub mod wire {
            pub use crate::bridge::wire::*;
        }
    }
    /// `crate::capacity`.
    pub mod capacity {
        pub use crate::capacity::*;
    }
    /// `crate::cluster`.
    pub mod cluster {
        pub use crate::cluster::slot::SLOT_COUNT;
        pub use crate::cluster::*;
    }
    /// `crate::conn`.
    pub mod conn {
        pub use crate::conn::core::RECHECK_PERMANENT_AFTER;
        pub use crate::conn::*;
    }
    /// `crate::net`.
    pub mod net {
        pub use crate::net::*;
        /// `crate::net::tls`.
        pub mod tls {
            pub use crate::net::tls::*;
        }
    }
    /// `crate::resp`.
    pub mod resp {
        pub use crate::resp::*;
    }
    /// `crate::ring`.
    pub mod ring {
        pub use crate::ring::*;
    }
    /// `crate::settings`' inner modules.
    pub mod settings {
        /// `crate::settings::tls`.
        pub mod tls {
            pub use crate::settings::tls::*;
        }
    }
}
