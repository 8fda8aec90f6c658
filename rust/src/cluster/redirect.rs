//! Error replies by which a cluster node sends a command elsewhere, or asks for a retry.
//!
//! All functions take the error reply's text without the leading `-`, as
//! [`Reply::Error`](crate::resp::Reply::Error) holds it.
//!
//! - `MOVED <slot> <host>:<port>`: the slot lives on that node now. Send the command there, and
//!   update the slot map (Redis advises refreshing all of it: one MOVED rarely comes alone).
//! - `ASK <slot> <host>:<port>`: the slot is being migrated and this key is already there. Send
//!   `ASKING` and then the command to that node, once; the slot map does not change.
//! - `TRYAGAIN ...`: a multi-key command during a migration; retry after a short pause.
//! - `CLUSTERDOWN ...`: the node thinks the cluster cannot serve (a failover in progress, or a
//!   slot nobody owns); retry with backoff, refreshing the slot map.

use super::node::NodeAddr;
use super::slot::SLOT_COUNT;

/// Which redirect a node sent (see the module documentation for what each asks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedirectKind {
    /// `MOVED`: the slot lives on that node now.
    Moved,
    /// `ASK`: this key of a migrating slot is on that node already, for one command.
    Ask,
}

/// A parsed `MOVED` or `ASK`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redirect {
    /// `MOVED` or `ASK`.
    pub kind: RedirectKind,
    /// The key's hash slot.
    pub slot: u16,
    /// The node to send the command to.
    pub node: NodeAddr,
}

impl Redirect {
    /// Parses a MOVED or ASK error. `asked` is the node that sent it: Redis leaves the host out
    /// (`MOVED 3999 :7001`) when it does not know its clients' view of the host (configured
    /// with `cluster-preferred-endpoint-type unknown-endpoint`, nodes behind a load balancer),
    /// meaning the host the client already used.
    ///
    /// `Ok(None)`: not a redirect. `Err`: a MOVED or ASK the client cannot follow, malformed or
    /// naming a node by `?` (the server prefers hostnames but has none); the caller should
    /// refresh its slot map, whose `CLUSTER SHARDS` reply also carries the nodes' IPs.
    pub fn parse(error: &[u8], asked: &NodeAddr) -> Result<Option<Redirect>, String> {
        let text = String::from_utf8_lossy(error);
        let mut words = text.split(' ');
        let kind = match words.next() {
            Some("MOVED") => RedirectKind::Moved,
            Some("ASK") => RedirectKind::Ask,
            _ => return Ok(None),
        };
        let bad = |why: &str| Err(format!("cannot follow the redirect {text:?}: {why}"));
        let (Some(slot), Some(target), None) = (words.next(), words.next(), words.next()) else {
            return bad("expected `<slot> <host>:<port>`");
        };
        let Some(slot) = slot.parse::<u16>().ok().filter(|&slot| slot < SLOT_COUNT) else {
            return bad("no slot number below 16384");
        };
        let Some(mut node) = NodeAddr::parse(target) else {
            return bad("no port");
        };
        match node.host.as_str() {
            "" => node.host.clone_from(&asked.host),
            "?" => return bad("the node's address is unknown to the server (`?`); refresh the slot map"),
            _ => {}
        }
        Ok(Some(Redirect { kind, slot, node }))
    }
}

/// Errors after which the same command may succeed if retried a little later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transient {
    /// `TRYAGAIN`: a multi-key command whose keys are split by an ongoing slot migration.
    TryAgain,
    /// `CLUSTERDOWN`: the cluster is down (a primary failed and no replica took over yet), or
    /// the key's slot has no owner. Either lasts until a failover or an operator fixes it, so
    /// retries need a deadline.
    ClusterDown,
}

/// Classifies an error reply: `Some` when retrying later may succeed.
pub fn transient(error: &[u8]) -> Option<Transient> {
    match error.split(|&b| b == b' ').next() {
        Some(b"TRYAGAIN") => Some(Transient::TryAgain),
        Some(b"CLUSTERDOWN") => Some(Transient::ClusterDown),
        _ => None,
    }
}

/// `CLUSTERDOWN` in any of its wordings ("The cluster is down", "Hash slot not served", ...).
#[cfg(test)]
pub fn is_cluster_down(error: &[u8]) -> bool {
    transient(error) == Some(Transient::ClusterDown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::{Decoder, Reply};

    fn asked() -> NodeAddr {
        NodeAddr::new("10.1.2.3", 7000)
    }

    fn parse(text: &str) -> Result<Option<Redirect>, String> {
        Redirect::parse(text.as_bytes(), &asked())
    }

    fn moved(slot: u16, host: &str, port: u16) -> Option<Redirect> {
        Some(Redirect { kind: RedirectKind::Moved, slot, node: NodeAddr::new(host, port) })
    }

    /// The error text of a reply captured from a real server.
    fn captured(bytes: &[u8]) -> Vec<u8> {
        let (used, reply) = Decoder::default().decode(bytes).unwrap();
        assert_eq!(used, bytes.len());
        match reply {
            Some(Reply::Error(text)) => text,
            other => panic!("expected an error reply, got {other:?}"),
        }
    }

    #[test]
    fn follows_the_redirects_a_real_server_sent() {
        let local = NodeAddr::new("127.0.0.1", 21000);
        let foo = captured(include_bytes!("testdata/moved_foo.resp"));
        assert_eq!(Redirect::parse(&foo, &local).unwrap(), moved(12182, "127.0.0.1", 21002));
        let bar = captured(include_bytes!("testdata/moved_bar.resp"));
        assert_eq!(Redirect::parse(&bar, &local).unwrap(), moved(5061, "127.0.0.1", 21000));
        let ask = captured(include_bytes!("testdata/ask_bar.resp"));
        assert_eq!(
            Redirect::parse(&ask, &local).unwrap(),
            Some(Redirect { kind: RedirectKind::Ask, slot: 5061, node: NodeAddr::new("127.0.0.1", 21001) })
        );
        // `cluster-preferred-endpoint-type unknown-endpoint`: no host, meaning the one we asked.
        let hostless = captured(include_bytes!("testdata/moved_foo_unknown-endpoint.resp"));
        assert_eq!(hostless, b"MOVED 12182 :21002");
        assert_eq!(Redirect::parse(&hostless, &asked()).unwrap(), moved(12182, "10.1.2.3", 21002));
        // `hostname` preferred but never set: the server itself does not know where to send us.
        let unknown = captured(include_bytes!("testdata/moved_foo_hostname.resp"));
        assert_eq!(unknown, b"MOVED 12182 ?:21002");
        let err = Redirect::parse(&unknown, &local).unwrap_err();
        assert!(err.contains("refresh the slot map") && err.contains("MOVED 12182 ?:21002"), "{err}");
    }

    #[test]
    fn parses_ipv6_and_host_names() {
        assert_eq!(parse("MOVED 3999 ::1:7001").unwrap(), moved(3999, "::1", 7001));
        assert_eq!(parse("MOVED 3999 [::1]:7001").unwrap(), moved(3999, "::1", 7001));
        assert_eq!(parse("MOVED 0 2001:db8::7:6379").unwrap(), moved(0, "2001:db8::7", 6379));
        assert_eq!(parse("MOVED 16383 redis-2.svc.local:6380").unwrap(), moved(16383, "redis-2.svc.local", 6380));
        assert_eq!(
            parse("ASK 1 :7002").unwrap(),
            Some(Redirect { kind: RedirectKind::Ask, slot: 1, node: NodeAddr::new("10.1.2.3", 7002) })
        );
    }

    #[test]
    fn other_errors_are_not_redirects() {
        for text in
            ["ERR unknown command", "MOVEDX 1 a:1", "moved 1 a:1", "ASKING", "", "CLUSTERDOWN The cluster is down"]
        {
            assert_eq!(parse(text), Ok(None), "{text:?}");
        }
    }

    #[test]
    fn malformed_redirects_are_errors_not_silence() {
        for text in [
            "MOVED",
            "MOVED 1",
            "MOVED 16384 a:1",
            "MOVED -1 a:1",
            "MOVED x a:1",
            "MOVED 1 a",
            "MOVED 1 a:0",
            "MOVED 1 a:1 extra",
            "ASK 1 a:99999",
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(text), "{text:?}: {err}");
        }
    }

    #[test]
    fn classifies_transient_cluster_errors() {
        assert_eq!(transient(b"TRYAGAIN Multiple keys request during rehashing of slot"), Some(Transient::TryAgain));
        for down in [
            &b"CLUSTERDOWN The cluster is down"[..],
            b"CLUSTERDOWN Hash slot not served",
            b"CLUSTERDOWN The cluster is down and only accepts read commands",
        ] {
            assert_eq!(transient(down), Some(Transient::ClusterDown));
            assert!(is_cluster_down(down));
        }
        for other in [&b"ERR wrong number of arguments"[..], b"MOVED 1 a:1", b"TRYAGAINX", b"CLUSTERDOWNX", b""] {
            assert_eq!(transient(other), None, "{:?}", String::from_utf8_lossy(other));
            assert!(!is_cluster_down(other));
        }
    }
}
