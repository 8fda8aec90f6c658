//! Sockets: where the server is, how to reach it, and the raw calls that move bytes.
//!
//! - `endpoint` (where the server is), `options` (how to reach and authenticate with it),
//!   `resolve` (host names looked up off the I/O threads);
//! - `socket` (a non-blocking TCP or Unix stream, and a deadline-bounded wait) and `sys` (the
//!   raw `sendmsg`/`recv` of the data path: the only place the kernel touches caller memory);
//!   `congestion` (restarting BBR before a connection's first value, so that it does not pace a
//!   LAN's values);
//! - `handshake` (AUTH, SELECT, HELLO, PING on every new connection, and which failures are
//!   permanent) and `server` (what the server says it is);
//! - `eventfd` (how the engine and the bridge wake whoever waits);
//! - `tls` (trust and identity, and the connection's TLS session and records, with no I/O of
//!   their own: `crate::conn` feeds them from the socket).

mod congestion;
pub mod endpoint;
mod eventfd;
pub mod handshake;
pub mod options;
pub mod resolve;
pub mod server;
pub mod socket;
mod sys;
pub mod tls;
pub mod uring;

pub use endpoint::{Address, Endpoint};
pub use eventfd::EventFd;
pub use options::ConnectOptions;
pub use resolve::{Lookup, Resolver, Waker};
pub use server::{Product, ServerIdentity, Version};
pub use socket::{Interest, Readiness, Stream, wait_for};
pub use sys::IoVecs;
pub use tls::{TlsConfig, TlsOptions};
