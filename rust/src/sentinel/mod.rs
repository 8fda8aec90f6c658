//! Redis Sentinel, as plain code: which Sentinel to ask next, what its answers mean, and when
//! the primary of a service is known. No sockets: [`Discovery`] takes replies (or the errors
//! that stood for them) and says what to do next; `engine::sentinel` does the talking.
//!
//! A round asks the Sentinels in turn `SENTINEL get-master-addr-by-name <service>`, and the
//! address one names is confirmed with `ROLE` (it must say `master`) before anything is sent
//! there: a Sentinel may still name a primary that was demoted, or is gone, or lie. A Sentinel
//! that does not answer, names nobody, names a node that is not a primary, or answers what is
//! not a usable address, is passed over for the next. The first answer that `ROLE` confirms is
//! taken; no quorum is counted (the Sentinels agree among themselves before a failover; a
//! client that asked them all would pay a connection to each per round, and a lying majority
//! would defeat it anyway). A node named twice in a round is asked once.
//!
//! When no Sentinel led to a primary and none named another node than the primary in use (they
//! are down, silent, or answer nonsense), that primary is asked `ROLE` itself and kept while it
//! says it is the primary: a Sentinel that misbehaves does not stop a primary that works. When
//! one named another node, the Sentinels say the primary moved, and the round fails, saying
//! why:
//!
//! - every Sentinel refused the credentials: an authentication error (permanent: the
//!   Sentinels' password, not the data server's);
//! - the primary they named refused the data server's credentials: an authentication error
//!   (the data server's password, not the Sentinels');
//! - every Sentinel that answered does not know the service: an invalid-input error
//!   (permanent: a misspelt service name);
//! - TLS failed with every Sentinel or the node it named (a certificate for another name than
//!   the Sentinel gave): a TLS error (permanent);
//! - otherwise a connection error naming the service and each Sentinel's failure (transient:
//!   a failover in progress, or Sentinels down).
//!
//! The Sentinel that led to the primary is asked first next time (as redis-py does). What a
//! Sentinel sends is bounded: a reply of more than [`MAX_REPLY_BYTES`] breaks its connection,
//! and a message shows a few hundred bytes of what each Sentinel said.

mod discovery;

pub use discovery::{Discovery, Next, is_permanent};

use crate::cluster::NodeAddr;
use crate::resp::Reply;
use std::time::Duration;

/// The largest reply taken from a Sentinel, or from a node asked `ROLE` (the parser's cap for
/// their connections): `SENTINEL replicas` of some hundred replicas fits; a Sentinel that sends
/// hundreds of MiB costs this much memory, not that.
pub const MAX_REPLY_BYTES: u64 = 1 << 20;

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
