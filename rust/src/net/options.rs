//! How to reach and authenticate with the server.

use super::endpoint::Endpoint;
use crate::secret::Secret;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct ConnectOptions {
    pub endpoint: Endpoint,
    /// ACL user name (Redis 6+); `None` authenticates as the default user.
    pub username: Option<String>,
    pub password: Option<Secret>,
    pub db: u32,
    /// Bound on TCP connect plus the AUTH/SELECT/PING handshake.
    pub connect_timeout: Duration,
}

impl ConnectOptions {
    pub fn new(endpoint: Endpoint) -> Self {
        ConnectOptions { endpoint, username: None, password: None, db: 0, connect_timeout: Duration::from_secs(5) }
    }
}
