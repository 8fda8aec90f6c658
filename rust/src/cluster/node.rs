//! The address of one cluster node, as the cluster itself names it.

use crate::net::Endpoint;
use std::fmt;

/// A node's host (name or IP literal, IPv6 without brackets) and port.
///
/// Kept apart from [`Endpoint`] because a cluster only ever names TCP nodes, and addresses are
/// compared for equality when routing (a MOVED target against the known primaries): one
/// spelling per address, with the brackets of `[::1]` stripped on the way in.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeAddr {
    /// Host name or IP literal; an IPv6 address without brackets.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl NodeAddr {
    /// The address of `host` (brackets around an IPv6 literal are stripped) and `port`.
    pub fn new(host: impl Into<String>, port: u16) -> NodeAddr {
        let host = host.into();
        let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(inner) => inner.to_owned(),
            None => host,
        };
        NodeAddr { host, port }
    }

    /// Parses `host:port`, `[v6]:port` or `v6:port` (Redis writes IPv6 hosts unbracketed, so the
    /// port is whatever follows the last colon). The host may be empty: Redis sends `:7001` for
    /// a node whose host the client is expected to know already. None when there is no port.
    pub fn parse(text: &str) -> Option<NodeAddr> {
        let (host, port) = text.rsplit_once(':')?;
        let port: u16 = port.parse().ok().filter(|&port| port != 0)?;
        Some(NodeAddr::new(host, port))
    }

    /// The TCP endpoint to connect to.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint::Tcp { host: self.host.clone(), port: self.port }
    }
}

impl From<NodeAddr> for Endpoint {
    fn from(node: NodeAddr) -> Endpoint {
        Endpoint::Tcp { host: node.host, port: node.port }
    }
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v4_v6_names_and_empty_hosts() {
        assert_eq!(NodeAddr::parse("127.0.0.1:7000"), Some(NodeAddr::new("127.0.0.1", 7000)));
        assert_eq!(NodeAddr::parse("::1:7001"), Some(NodeAddr { host: "::1".into(), port: 7001 }));
        assert_eq!(NodeAddr::parse("[::1]:7001"), Some(NodeAddr { host: "::1".into(), port: 7001 }));
        assert_eq!(NodeAddr::parse("fe80::1:2:6379"), Some(NodeAddr { host: "fe80::1:2".into(), port: 6379 }));
        assert_eq!(NodeAddr::parse("redis-0.example:6380"), Some(NodeAddr::new("redis-0.example", 6380)));
        assert_eq!(NodeAddr::parse(":7001"), Some(NodeAddr { host: String::new(), port: 7001 }));
    }

    #[test]
    fn rejects_text_without_a_usable_port() {
        for bad in ["", "127.0.0.1", "127.0.0.1:", "host:0", "host:65536", "host:70x", "host: 7"] {
            assert_eq!(NodeAddr::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn displays_like_the_endpoint_it_becomes() {
        for node in [NodeAddr::new("127.0.0.1", 7000), NodeAddr::new("[::1]", 7001), NodeAddr::new("::1", 7001)] {
            assert_eq!(node.to_string(), node.endpoint().to_string());
            assert_eq!(Endpoint::from(node.clone()), node.endpoint());
        }
        assert_eq!(NodeAddr::new("::1", 7001).to_string(), "[::1]:7001");
        assert_eq!(NodeAddr::new("[::1]", 7001), NodeAddr::new("::1", 7001));
    }
}
