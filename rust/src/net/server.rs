//! What a server says it is: its product and version, from the `HELLO 2` every connection's
//! handshake sends. Servers differ in how they write big replies (Valkey 9 sends a value
//! straight from the stored object; older servers copy it into freshly allocated reply buffers
//! first), so how large values are best read depends on this (see `ranged::shape`).

use crate::resp::Reply;
use std::fmt;

/// A server's product, as `HELLO` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Product {
    /// `server: redis`.
    Redis,
    /// `server: valkey`.
    Valkey,
    /// Anything else (a proxy, a compatible server), by the name it gave.
    Other(String),
}

/// A `major.minor.patch` version; missing parts read as 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// `"9.1.2"` (also `"8.6"`, `"255.255.255"`); `None` unless it starts with a number.
    pub fn parse(text: &str) -> Option<Version> {
        let mut parts = text.split('.').map(|part| {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        let major = parts.next().flatten()?;
        let minor = parts.next().flatten().unwrap_or(0);
        let patch = parts.next().flatten().unwrap_or(0);
        Some(Version(major, minor, patch))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// What a server said it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerIdentity {
    /// Redis, Valkey or another.
    pub product: Product,
    /// Its own version (Valkey's, not the `redis_version` it also reports for old clients).
    pub version: Version,
}

impl ServerIdentity {
    /// From the reply to `HELLO 2`: a flat array of field names and values (`server`,
    /// `version`, `proto`, `id`, `mode`, `role`, `modules`). `None` for anything else: an
    /// error (a server before Redis 6, or one where HELLO is renamed or denied), or a reply
    /// without a readable version.
    pub fn from_hello(reply: &Reply) -> Option<ServerIdentity> {
        let Reply::Array(items) = reply else { return None };
        let field = |name: &[u8]| {
            items.chunks_exact(2).find_map(|pair| match (&pair[0], &pair[1]) {
                (Reply::Bulk(key), Reply::Bulk(value)) if key.eq_ignore_ascii_case(name) => {
                    Some(String::from_utf8_lossy(value).into_owned())
                }
                _ => None,
            })
        };
        let version = Version::parse(&field(b"version")?)?;
        let product = match field(b"server")?.to_ascii_lowercase().as_str() {
            "redis" => Product::Redis,
            "valkey" => Product::Valkey,
            other => Product::Other(other.to_owned()),
        };
        Some(ServerIdentity { product, version })
    }
}

impl fmt::Display for ServerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match &self.product {
            Product::Redis => "redis",
            Product::Valkey => "valkey",
            Product::Other(name) => name,
        };
        write!(f, "{name} {}", self.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Reply {
        Reply::Bulk(text.as_bytes().to_vec())
    }

    /// The reply as each server of the test matrix sends it (captured with `redis-cli HELLO 2`).
    fn hello(server: &str, version: &str) -> Reply {
        Reply::Array(vec![
            bulk("server"),
            bulk(server),
            bulk("version"),
            bulk(version),
            bulk("proto"),
            Reply::Integer(2),
            bulk("id"),
            Reply::Integer(7),
            bulk("mode"),
            bulk("standalone"),
            bulk("role"),
            bulk("master"),
            bulk("modules"),
            Reply::Array(vec![]),
        ])
    }

    #[test]
    fn the_servers_of_the_test_matrix_are_told_apart() {
        let redis = ServerIdentity::from_hello(&hello("redis", "7.0.15")).unwrap();
        assert_eq!(redis, ServerIdentity { product: Product::Redis, version: Version(7, 0, 15) });
        assert_eq!(redis.to_string(), "redis 7.0.15");
        let valkey8 = ServerIdentity::from_hello(&hello("valkey", "8.1.8")).unwrap();
        assert_eq!(valkey8.product, Product::Valkey);
        let valkey9 = ServerIdentity::from_hello(&hello("valkey", "9.1.2")).unwrap();
        assert_eq!(valkey9.version, Version(9, 1, 2));
        assert!(valkey9.version > valkey8.version);
        let other = ServerIdentity::from_hello(&hello("KeyDB", "6.3.4")).unwrap();
        assert_eq!(other.product, Product::Other("keydb".into()));
    }

    #[test]
    fn a_refused_or_odd_hello_says_nothing() {
        assert_eq!(ServerIdentity::from_hello(&Reply::Error(b"ERR unknown command 'HELLO'".to_vec())), None);
        assert_eq!(ServerIdentity::from_hello(&Reply::Simple(b"OK".to_vec())), None);
        let no_version = Reply::Array(vec![bulk("server"), bulk("redis")]);
        assert_eq!(ServerIdentity::from_hello(&no_version), None);
        assert_eq!(ServerIdentity::from_hello(&hello("redis", "unstable")), None);
    }

    #[test]
    fn versions_parse_leniently_and_order() {
        assert_eq!(Version::parse("8.6"), Some(Version(8, 6, 0)));
        assert_eq!(Version::parse("255.255.255"), Some(Version(255, 255, 255)));
        assert_eq!(Version::parse("7.2.4-rc1"), Some(Version(7, 2, 4)));
        assert_eq!(Version::parse("x"), None);
        assert!(Version(8, 6, 0) > Version(8, 4, 9));
    }
}
