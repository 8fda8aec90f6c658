//! lmcache-resp core: moves LLM KV-cache pages between host memory and Redis/Valkey over RESP,
//! zero-copy and pipelined.
//!
//! - [`resp`]: the RESP2 codec (pure, no I/O).
//! - [`net`]: endpoints, sockets, the connection handshake.
//! - [`conn`]: one pipelined connection as a non-blocking state machine.
//! - [`client`]: a blocking single-connection client on top of it.

pub mod arena;
pub mod bridge;
pub mod capacity;
pub mod ceiling;
pub mod client;
pub mod cluster;
pub mod conn;
pub mod engine;
pub mod error;
pub mod front;
pub mod memory;
pub mod net;
pub mod op;
pub mod placement;
#[cfg(feature = "python")]
mod python;
pub mod resp;
pub mod ring;
pub mod secret;
pub mod settings;

pub use error::{Error, ErrorKind, Result};
pub use memory::RawBuf;
pub use secret::Secret;
