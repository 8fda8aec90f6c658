//! Sentinel: the data server is the primary that Redis Sentinels name for a service, found at
//! start and followed through failovers (`crate::sentinel`, `engine::sentinel`).
//!
//! Given as `redis+sentinel://[user:pass@]s1:26379[,s2:26379...]/service_name` (redis-py's
//! form; `rediss+sentinel://` for TLS to the data server), or as `sentinel_nodes`
//! (`"s1:26379,s2:26379"`) with `sentinel_service_name`. The URL's user information and
//! `username`/`password` are the data server's; the Sentinels have their own
//! (`sentinel_username`/`sentinel_password`: Sentinel's ACL is separate from the data
//! server's). `sentinel_tls` (default: as the data server) speaks TLS to the Sentinels with the
//! data server's TLS settings; TLS to the Sentinels alone is refused, since there would be no
//! `ssl_*` settings to speak it with. (Resolved in `sentinel_resolve`.)

use super::value::Given;
use crate::error::{Error, Result};
use crate::net::{Endpoint, TlsConfig};
use crate::secret::Secret;
use std::fmt;
use std::sync::Arc;

/// The port of a Sentinel named without one.
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// Where the primary is found: Sentinels and the service they watch.
#[derive(Clone)]
pub struct SentinelSettings {
    /// The Sentinels, asked in turn.
    pub nodes: Vec<Endpoint>,
    /// The service (Sentinel's "master name").
    pub service: String,
    /// ACL user for the Sentinels (used only with a password).
    pub username: Option<String>,
    /// The Sentinels' password; None sends no AUTH to them.
    pub password: Option<Secret>,
    /// TLS to the Sentinels (the data server's TLS settings), or plaintext.
    pub tls: Option<Arc<TlsConfig>>,
}

impl SentinelSettings {
    /// `service 'mymaster' (sentinels s1:26379, s2:26379)`: what errors name; never a secret.
    pub fn describe(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(ToString::to_string).collect();
        format!("service {:?} (sentinels {})", self.service, nodes.join(", "))
    }
}

/// The password never shows.
impl fmt::Debug for SentinelSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelSettings")
            .field("nodes", &self.nodes.iter().map(ToString::to_string).collect::<Vec<_>>())
            .field("service", &self.service)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// `?sentinel_password=` in a URL: refused without showing the URL, where the secret is.
pub fn password_in_url_refused() -> Error {
    Error::invalid(
        "sentinel_password is not read from a URL's query (the URL shows in logs and errors): give it as a \
         setting (sentinel_password=..., or the adapter's JSON)",
    )
}

/// `"h1:26379,h2,[::1]:26380"`: a Sentinel named without a port is on 26379.
pub(super) fn parse_nodes(given: &Given<'_>) -> Result<Vec<Endpoint>> {
    let text = given.text()?;
    let refuse = |why: &str| {
        Error::invalid(format!("sentinel_nodes must be \"host:port,host:port\" (Sentinels), got {text:?}: {why}"))
    };
    let mut nodes = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (host, port) = match part.strip_prefix('[') {
            Some(rest) => {
                let (host, after) = rest.split_once(']').ok_or_else(|| refuse("unclosed '['"))?;
                (host, after.strip_prefix(':'))
            }
            None => match part.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (part, None),
            },
        };
        let port = match port {
            None => DEFAULT_SENTINEL_PORT,
            Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| refuse(&format!("bad port {p:?}")))?,
        };
        if host.is_empty() {
            return Err(refuse("a Sentinel without a host"));
        }
        nodes.push(Endpoint::Tcp { host: host.to_ascii_lowercase(), port });
    }
    if nodes.is_empty() {
        return Err(refuse("no Sentinel named"));
    }
    Ok(nodes)
}
