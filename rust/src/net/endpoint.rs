//! Where the server is.

use crate::error::{Error, Result};
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// A server as configured: a host and port, or a Unix socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A TCP server.
    Tcp {
        /// Host name or IP literal (an IPv6 literal with or without brackets).
        host: String,
        /// TCP port.
        port: u16,
    },
    /// A server listening on a Unix socket.
    Unix {
        /// The socket's path.
        path: PathBuf,
    },
}

/// A resolved address to connect to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// One address of a TCP endpoint's host.
    Tcp(SocketAddr),
    /// A Unix socket's path.
    Unix(PathBuf),
}

impl Endpoint {
    /// Resolves the host name (blocking: call once, not on the data path).
    pub(crate) fn resolve(&self) -> Result<Vec<Address>> {
        match self {
            Endpoint::Unix { path } => Ok(vec![Address::Unix(path.clone())]),
            Endpoint::Tcp { host, port } => {
                let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
                let addresses: Vec<Address> = (host, *port)
                    .to_socket_addrs()
                    .map_err(|err| Error::connect_failed(self, &err))?
                    .map(Address::Tcp)
                    .collect();
                if addresses.is_empty() {
                    let err = std::io::Error::new(std::io::ErrorKind::NotFound, "host name has no addresses");
                    return Err(Error::connect_failed(self, &err));
                }
                Ok(addresses)
            }
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp { host, port } if host.contains(':') && !host.starts_with('[') => {
                write!(f, "[{host}]:{port}")
            }
            Endpoint::Tcp { host, port } => write!(f, "{host}:{port}"),
            Endpoint::Unix { path } => write!(f, "unix:{}", path.display()),
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Tcp(addr) => write!(f, "{addr}"),
            Address::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_host_and_port() {
        let v4 = Endpoint::Tcp { host: "127.0.0.1".into(), port: 6380 };
        let v6 = Endpoint::Tcp { host: "::1".into(), port: 6380 };
        let unix = Endpoint::Unix { path: "/run/r.sock".into() };
        assert_eq!(v4.to_string(), "127.0.0.1:6380");
        assert_eq!(v6.to_string(), "[::1]:6380");
        assert_eq!(unix.to_string(), "unix:/run/r.sock");
    }

    #[test]
    fn resolves_literals_without_dns() {
        let v6 = Endpoint::Tcp { host: "[::1]".into(), port: 1 };
        assert_eq!(v6.resolve().unwrap(), vec![Address::Tcp("[::1]:1".parse().unwrap())]);
        let v4 = Endpoint::Tcp { host: "127.0.0.1".into(), port: 2 };
        assert_eq!(v4.resolve().unwrap(), vec![Address::Tcp("127.0.0.1:2".parse().unwrap())]);
    }

    #[test]
    fn unresolvable_host_names_the_endpoint() {
        let bad = Endpoint::Tcp { host: "no-such-host.invalid".into(), port: 7 };
        let err = bad.resolve().unwrap_err();
        assert!(err.message().starts_with("cannot connect to no-such-host.invalid:7"), "{err}");
    }
}
