//! TLS: what a connection trusts and presents ([`config`]), the handshake (rustls), and the
//! record layer that carries the data ([`record`]), driven without a socket ([`session`]).

pub mod certificate;
pub mod config;
pub mod failure;
mod handshake;
pub mod record;
pub mod session;
#[cfg(test)]
mod tests;
pub mod traffic;

pub use config::{TlsConfig, TlsOptions};
pub use failure::Failure;
pub use record::KeyLimit;
pub use session::{Input, Progress, TlsSession};
