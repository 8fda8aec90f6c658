//! Sockets: where the server is, how to reach it, and the raw calls that move bytes.

pub mod endpoint;
mod eventfd;
pub mod handshake;
pub mod options;
pub mod resolve;
pub mod server;
pub mod socket;
mod sys;
pub mod tls;

pub use endpoint::{Address, Endpoint};
pub use eventfd::EventFd;
pub use options::ConnectOptions;
pub use resolve::{Lookup, Resolver, Waker};
pub use server::{Product, ServerIdentity, Version};
pub use socket::{Interest, Readiness, Stream, wait_for};
pub use sys::IoVecs;
pub use tls::{TlsConfig, TlsOptions};
