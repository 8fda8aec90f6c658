//! TLS: what a connection trusts and presents ([`config`]), the handshake (rustls), and the
//! record layer that carries the data ([`record`]).

pub mod config;
pub mod record;
pub mod session;

pub use config::{TlsConfig, TlsOptions};
pub use session::{Failure, Progress, TlsSession};
