//! Redis Sentinel, as plain code: which Sentinel to ask next, what its answers mean, and when
//! the primary of a service is known. No sockets: [`Discovery`] takes replies (or the errors
//! that stood for them) and says what to do next; `engine::sentinel` does the talking.
//!
//! A round asks the Sentinels in turn `SENTINEL get-master-addr-by-name <service>`, and the
//! address one names is confirmed with `ROLE` (it must say `master`) before anything is sent
//! there: a Sentinel may still name a primary that was demoted, or is gone. A Sentinel that
//! does not answer, names nobody, or names a node that is not a primary, is passed over for
//! the next. A round in which no Sentinel led to a primary fails, and says why:
//!
//! - every Sentinel refused the credentials: an authentication error (permanent: the
//!   Sentinels' password, not the data server's);
//! - every Sentinel that answered does not know the service: an invalid-input error
//!   (permanent: a misspelt service name);
//! - otherwise a connection error naming the service and each Sentinel's failure (transient:
//!   a failover in progress, or Sentinels down).
//!
//! The Sentinel that led to the primary is asked first next time (as redis-py does).

use crate::cluster::NodeAddr;
use crate::error::{Error, ErrorKind};
use crate::net::Endpoint;
use crate::resp::Reply;
use std::time::Duration;

/// The subscription to a Sentinel reconnects after this, doubling per failure up to
/// [`MAX_RESUBSCRIBE_DELAY`].
pub const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(100);
/// The longest wait before the subscription tries another Sentinel.
pub const MAX_RESUBSCRIBE_DELAY: Duration = Duration::from_secs(2);

/// The channel on which Sentinels announce a new primary.
pub const SWITCH_MASTER: &[u8] = b"+switch-master";

/// How long the subscription waits after `failures` failures in a row before trying again.
pub fn resubscribe_delay(failures: u32) -> Duration {
    RESUBSCRIBE_DELAY.saturating_mul(1 << failures.min(8)).min(MAX_RESUBSCRIBE_DELAY)
}

/// What to do next in a round of discovery.
#[derive(Debug)]
pub enum Next {
    /// Ask this Sentinel `SENTINEL get-master-addr-by-name <service>`; its answer (or the
    /// error of trying) goes to [`Discovery::on_master_addr`].
    Ask(Endpoint),
    /// Ask this node `ROLE`; the answer goes to [`Discovery::on_role`].
    Confirm(NodeAddr),
    /// The primary, confirmed.
    Found(NodeAddr),
    /// No Sentinel led to a primary (see the module documentation for the kinds).
    Failed(Error),
}

/// One round of discovery at a time (see the module documentation).
#[derive(Debug)]
pub struct Discovery {
    service: String,
    /// The Sentinels, the one that last led to the primary first.
    sentinels: Vec<Endpoint>,
    /// The Sentinel asked now (an index into `sentinels`).
    current: usize,
    /// What each Sentinel passed over said, for the error.
    failures: Vec<String>,
    refused: usize,
    unknown: usize,
}

impl Discovery {
    /// Discovery of `service`'s primary through `sentinels` (at least one).
    pub fn new(service: &str, sentinels: Vec<Endpoint>) -> Discovery {
        assert!(!sentinels.is_empty(), "settings always name a Sentinel");
        Discovery { service: service.to_owned(), sentinels, current: 0, failures: Vec::new(), refused: 0, unknown: 0 }
    }

    /// The Sentinels, in the order the next round asks them.
    pub fn sentinels(&self) -> &[Endpoint] {
        &self.sentinels
    }

    /// `service "mymaster" (sentinels s1:26379, s2:26379)`: what errors name.
    pub fn describe(&self) -> String {
        let nodes: Vec<String> = self.sentinels.iter().map(ToString::to_string).collect();
        format!("service {:?} (sentinels {})", self.service, nodes.join(", "))
    }

    /// Starts a round: ask the first Sentinel.
    pub fn begin(&mut self) -> Next {
        self.current = 0;
        self.failures.clear();
        self.refused = 0;
        self.unknown = 0;
        Next::Ask(self.sentinels[0].clone())
    }

    /// The asked Sentinel's answer: an address to confirm, or the next Sentinel to ask.
    pub fn on_master_addr(&mut self, answer: Result<Reply, Error>) -> Next {
        match answer {
            Ok(Reply::Array(parts)) => match parts.as_slice() {
                [Reply::Bulk(host), Reply::Bulk(port)] => {
                    let port = std::str::from_utf8(port).ok().and_then(|p| p.parse::<u16>().ok()).filter(|p| *p > 0);
                    match (std::str::from_utf8(host), port) {
                        (Ok(host), Some(port)) if !host.is_empty() => Next::Confirm(NodeAddr::new(host, port)),
                        _ => self.pass_over(format!("named no usable address ({parts:?})")),
                    }
                }
                _ => self.pass_over(format!("answered {parts:?}, not [host, port]")),
            },
            Ok(Reply::Nil | Reply::NilArray) => {
                self.unknown += 1;
                self.pass_over(format!("does not know the service {:?}", self.service))
            }
            Ok(Reply::Error(text)) => self.on_error(String::from_utf8_lossy(&text).into_owned(), false),
            Ok(other) => self.pass_over(format!("answered {other:?}, not [host, port]")),
            Err(err) => self.on_error(err.message().to_owned(), err.kind() == ErrorKind::Authentication),
        }
    }

    /// The Sentinel could not be asked, or answered with an error: a refusal of the
    /// credentials counts towards a permanent failure.
    fn on_error(&mut self, text: String, refused: bool) -> Next {
        if refused || ["NOAUTH", "WRONGPASS", "NOPERM"].iter().any(|p| text.starts_with(p)) {
            self.refused += 1;
        }
        self.pass_over(text)
    }

    /// The named node's answer to `ROLE`: found when it says `master`, else the next
    /// Sentinel.
    pub fn on_role(&mut self, node: &NodeAddr, answer: Result<Reply, Error>) -> Next {
        match answer {
            Ok(Reply::Array(parts)) if matches!(parts.first(), Some(Reply::Bulk(role)) if role == b"master") => {
                // The Sentinel that led here is asked first next time.
                self.sentinels[..=self.current].rotate_right(1);
                Next::Found(node.clone())
            }
            Ok(Reply::Array(parts)) => {
                let role = match parts.first() {
                    Some(Reply::Bulk(role)) => String::from_utf8_lossy(role).into_owned(),
                    _ => "?".to_owned(),
                };
                self.pass_over(format!("named {node}, which is a {role}, not a primary (a failover in progress?)"))
            }
            Ok(other) => self.pass_over(format!("named {node}, whose ROLE answer was {other:?}")),
            Err(err) => {
                self.pass_over(format!("named {node}, which did not confirm it is the primary: {}", err.message()))
            }
        }
    }

    /// The current Sentinel led nowhere (`why`): ask the next, or end the round.
    fn pass_over(&mut self, why: String) -> Next {
        self.failures.push(format!("{}: {why}", self.sentinels[self.current]));
        self.current += 1;
        if let Some(next) = self.sentinels.get(self.current) {
            return Next::Ask(next.clone());
        }
        let all = self.sentinels.len();
        let (kind, what) = if self.refused == all {
            (
                ErrorKind::Authentication,
                "every Sentinel refused the credentials: set sentinel_password (and sentinel_username) to the \
                 Sentinels' own, which are not the data server's",
            )
        } else if self.unknown > 0 && self.unknown + self.refused == all {
            (ErrorKind::InvalidInput, "the Sentinels do not know this service: check sentinel_service_name")
        } else {
            (ErrorKind::Connection, "no primary is known")
        };
        Next::Failed(Error::new(kind, format!("{what}: {}: {}", self.describe(), self.failures.join("; "))))
    }
}

/// Whether a discovery failure is for good (credentials, service name, TLS): not worth
/// asking again soon.
pub fn is_permanent(err: &Error) -> bool {
    matches!(err.kind(), ErrorKind::Authentication | ErrorKind::InvalidInput | ErrorKind::Tls)
}

/// A `+switch-master` message about `service`: the new primary. Sentinel sends
/// `["message", "+switch-master", "<service> <old ip> <old port> <new ip> <new port>"]`.
pub fn switch_master(message: &Reply, service: &str) -> Option<NodeAddr> {
    let Reply::Array(parts) = message else { return None };
    let [Reply::Bulk(kind), Reply::Bulk(channel), Reply::Bulk(payload)] = parts.as_slice() else { return None };
    if kind != b"message" || channel != SWITCH_MASTER {
        return None;
    }
    let payload = std::str::from_utf8(payload).ok()?;
    let words: Vec<&str> = payload.split(' ').collect();
    match words.as_slice() {
        [name, _, _, host, port] if *name == service => Some(NodeAddr::new(*host, port.parse().ok()?)),
        _ => None,
    }
}

/// The replicas of `SENTINEL replicas <service>` that are up (not flagged down or
/// disconnected): where reads may go, once [`replicates_from`] confirms each. Each entry is a
/// flat list of field names and values. (Their `master-link-status` is not used: the Sentinels
/// refresh it only every 10 s.)
pub fn replicas(reply: &Reply) -> Vec<NodeAddr> {
    let Reply::Array(entries) = reply else { return Vec::new() };
    entries
        .iter()
        .filter_map(|entry| {
            let Reply::Array(fields) = entry else { return None };
            let field = |name: &[u8]| {
                fields.chunks_exact(2).find_map(|pair| match pair {
                    [Reply::Bulk(k), Reply::Bulk(v)] if k == name => std::str::from_utf8(v).ok(),
                    _ => None,
                })
            };
            let flags = field(b"flags").unwrap_or("");
            if flags.split(',').any(|f| matches!(f, "s_down" | "o_down" | "disconnected")) {
                return None;
            }
            Some(NodeAddr::new(field(b"ip")?, field(b"port")?.parse().ok()?))
        })
        .collect()
}

/// Whether a listed replica's `ROLE` answer says it replicates from `primary` now
/// (`["slave", host, port, "connected", offset]`): not a demoted primary that still says it is
/// one, nor a replica still connecting or in a full resync, which would answer misses.
pub fn replicates_from(role: &Reply, primary: &NodeAddr) -> bool {
    let Reply::Array(parts) = role else { return false };
    let [Reply::Bulk(role), Reply::Bulk(host), port, Reply::Bulk(state), ..] = parts.as_slice() else { return false };
    let port = match port {
        Reply::Integer(port) => u16::try_from(*port).ok(),
        Reply::Bulk(port) => std::str::from_utf8(port).ok().and_then(|p| p.parse().ok()),
        _ => None,
    };
    role == b"slave" && state == b"connected" && *host == primary.host.as_bytes() && port == Some(primary.port)
}

#[cfg(test)]
mod tests;
