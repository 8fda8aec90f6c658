//! Where reads go: the value of the `read_from` setting (checked here, resolved in mod.rs with
//! the others). A module of its own, below mod.rs and its `defaults`, which both name it.

use super::value::{Given, Value};
use crate::error::{Error, Result};

/// Where GET and EXISTS go in Redis Cluster or behind Sentinel (the `read_from` setting).
///
/// Writes (SET, DEL, and so eviction) always go to the primary. Values are written once under
/// content-hash keys, so a replica that lags can only answer a miss, never older bytes of a
/// key (see docs/reliability.md, "Reads from replicas").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadFrom {
    /// Every read goes to the slot's primary.
    #[default]
    Primary,
    /// Reads spread over the slot's primary and its replicas that are up, each key to one of
    /// them chosen by rendezvous hashing (`cluster::read_pick`); in a cluster every connection
    /// sends `READONLY` in its handshake (Sentinel-managed replicas need none).
    PreferReplica,
}

impl ReadFrom {
    /// The setting's value as written back (`"primary"`, `"prefer_replica"`).
    pub fn name(self) -> &'static str {
        match self {
            ReadFrom::Primary => "primary",
            ReadFrom::PreferReplica => "prefer_replica",
        }
    }

    /// Reads this value from text: our names, and valkey-glide's `ReadFrom` spellings
    /// (`PRIMARY`, `PREFER_REPLICA`, `PreferReplica`), case and `-`/`_` aside.
    pub fn parse(text: &str) -> Option<ReadFrom> {
        let folded: String =
            text.trim().chars().filter(|c| *c != '_' && *c != '-').map(|c| c.to_ascii_lowercase()).collect();
        match folded.as_str() {
            "primary" => Some(ReadFrom::Primary),
            "preferreplica" => Some(ReadFrom::PreferReplica),
            _ => None,
        }
    }
}

impl std::fmt::Display for ReadFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Checks a given `read_from`.
pub(super) fn read_from(given: &Given<'_>) -> Result<ReadFrom> {
    let parsed = match given.value {
        Value::Text(text) => ReadFrom::parse(text),
        _ => None,
    };
    parsed.ok_or_else(|| {
        Error::invalid(format!(
            "{} must be \"primary\" (every read from the primary) or \"prefer_replica\" (reads spread over the \
             primary and its replicas, with cluster=true or Sentinel), got {}",
            given.name, given.value
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_our_names_and_valkey_glides_spellings() {
        for text in ["primary", "PRIMARY", " Primary "] {
            assert_eq!(ReadFrom::parse(text), Some(ReadFrom::Primary), "{text:?}");
        }
        for text in ["prefer_replica", "PREFER_REPLICA", "PreferReplica", "prefer-replica"] {
            assert_eq!(ReadFrom::parse(text), Some(ReadFrom::PreferReplica), "{text:?}");
        }
        for text in ["", "replica", "prefer_replicas", "az_affinity", "primary,replica"] {
            assert_eq!(ReadFrom::parse(text), None, "{text:?}");
        }
        assert_eq!(ReadFrom::default(), ReadFrom::Primary);
        assert_eq!(ReadFrom::PreferReplica.to_string(), "prefer_replica");
    }

    #[test]
    fn refuses_other_values_naming_the_choices() {
        for value in [Value::Text("replica".into()), Value::Int(1), Value::Bool(true)] {
            let err = read_from(&Given { name: "read_from", value: &value }).unwrap_err();
            assert!(err.message().starts_with("read_from must be \"primary\""), "{}", err.message());
            assert!(err.message().ends_with(&format!("got {value}")), "{}", err.message());
        }
    }
}
