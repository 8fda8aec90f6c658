//! How to reach and authenticate with the server.

use super::endpoint::Endpoint;
use super::tls::TlsConfig;
use crate::secret::Secret;
use std::sync::Arc;
use std::time::Duration;

/// Everything one connection needs to reach the server and log in.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// The server.
    pub endpoint: Endpoint,
    /// ACL user name (Redis 6+); `None` authenticates as the default user.
    pub username: Option<String>,
    /// Password for AUTH; `None` sends no AUTH.
    pub password: Option<Secret>,
    /// Database to SELECT after connecting (no SELECT for 0).
    pub db: u32,
    /// Bound on TCP connect plus the AUTH/SELECT/PING handshake.
    pub connect_timeout: Duration,
    /// TLS (`rediss://`, `ssl=True`): what the server must prove and this client presents;
    /// `None` speaks plaintext. There is never a fallback from one to the other.
    pub tls: Option<Arc<TlsConfig>>,
    /// Redis Cluster reads from replicas: `READONLY` in the handshake, so that a replica
    /// serves reads of its primary's slots instead of redirecting them.
    pub readonly: bool,
}

impl ConnectOptions {
    /// `endpoint` with no credentials, database 0, a 5 s connect timeout and no TLS.
    #[cfg(any(test, feature = "internals"))]
    pub fn new(endpoint: Endpoint) -> Self {
        ConnectOptions {
            endpoint,
            username: None,
            password: None,
            db: 0,
            connect_timeout: Duration::from_secs(5),
            tls: None,
            readonly: false,
        }
    }
}
