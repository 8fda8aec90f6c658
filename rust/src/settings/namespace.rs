//! Where this client's keys live and how long they stay: `key_prefix` and `ttl_seconds`, as
//! LMCache's `valkey` adapter (`valkey_l2_adapter.py`) has them, so that each finds the other's
//! keys. The engine and the blocking client put the prefix before every key they send; the
//! codec puts the expiry in every SET (`SET key value PX ms`).

use super::value::Given;
use crate::error::{Error, Result};
use std::time::Duration;

/// Joins the prefix and the key: `<prefix>@<key>`, LMCache's `_KEY_SEP`. A prefix holding it
/// would make one namespace's keys look like another's, so it is refused.
pub const KEY_SEPARATOR: char = '@';

/// The longest prefix accepted, in bytes: a namespace name, not a payload.
pub const MAX_KEY_PREFIX_LEN: usize = 1024;

/// The longest TTL accepted (100 years): PX's milliseconds stay far inside Redis's range.
pub const MAX_TTL_SECONDS: u64 = 100 * 365 * 24 * 3600;

/// `key_prefix`: text without `@`, at most [`MAX_KEY_PREFIX_LEN`] bytes; empty means none.
pub(super) fn key_prefix(given: &Given<'_>) -> Result<Option<String>> {
    let prefix = given.text()?;
    if prefix.contains(KEY_SEPARATOR) {
        return Err(Error::invalid(format!(
            "{} must not contain '{KEY_SEPARATOR}', which joins the prefix to each key (<prefix>@<key>, as in \
             LMCache's valkey adapter), got {}: choose a name without '{KEY_SEPARATOR}'",
            given.name, given.value
        )));
    }
    if prefix.len() > MAX_KEY_PREFIX_LEN {
        return Err(Error::invalid(format!(
            "{} must be at most {MAX_KEY_PREFIX_LEN} bytes, got {} bytes",
            given.name,
            prefix.len()
        )));
    }
    Ok((!prefix.is_empty()).then(|| prefix.to_owned()))
}

/// `ttl_seconds`: a positive whole number of seconds (a bool is refused: `True` is not 1 s).
pub(super) fn ttl(given: &Given<'_>) -> Result<Duration> {
    let refuse = || {
        Error::invalid(format!(
            "{} must be a whole number of seconds in 1..{MAX_TTL_SECONDS} (or None: no expiry), got {}",
            given.name, given.value
        ))
    };
    if matches!(given.value, super::Value::Bool(_)) {
        return Err(refuse());
    }
    let seconds = given.integer(1, MAX_TTL_SECONDS).map_err(|_| refuse())?;
    Ok(Duration::from_secs(seconds))
}

/// A TTL and client-side capacity tracking are two owners of eviction: the server expires
/// keys the tracker still counts (so it evicts too early, and deletes keys already gone), and
/// the tracker deletes keys the server's policy should choose among. LMCache's valkey adapter
/// warns; here it is refused.
pub(super) fn check_single_evictor(ttl: Option<Duration>, capacity_bytes: u64) -> Result<()> {
    if ttl.is_some() && capacity_bytes > 0 {
        return Err(Error::invalid(
            "ttl_seconds cannot be combined with max_capacity_gb > 0: that makes two owners of eviction (the \
             server expires keys the capacity tracker still counts, and the tracker deletes keys the server's \
             policy should choose). Use ttl_seconds with a volatile-* maxmemory-policy, or max_capacity_gb \
             without ttl_seconds",
        ));
    }
    Ok(())
}

/// What goes before every key on the wire: `<prefix>@`, or nothing without a prefix.
pub fn wire_prefix(prefix: Option<&str>) -> Box<[u8]> {
    match prefix {
        Some(prefix) => format!("{prefix}{KEY_SEPARATOR}").into_bytes().into_boxed_slice(),
        None => Box::default(),
    }
}

/// The TTL as SET's `PX` argument, in milliseconds.
pub fn expiry_ms(ttl: Option<Duration>) -> Option<u64> {
    ttl.map(|ttl| ttl.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::super::Value;
    use super::*;
    use proptest::strategy::Strategy;

    fn given(name: &str, value: Value) -> (String, Value) {
        (name.to_owned(), value)
    }

    fn prefix_of(value: Value) -> Result<Option<String>> {
        let (name, value) = given("key_prefix", value);
        key_prefix(&Given { name: &name, value: &value })
    }

    fn ttl_of(value: Value) -> Result<Duration> {
        let (name, value) = given("ttl_seconds", value);
        ttl(&Given { name: &name, value: &value })
    }

    #[test]
    fn a_prefix_is_text_without_the_separator_and_empty_is_none() {
        assert_eq!(prefix_of(Value::Text("tenantA".into())).unwrap().as_deref(), Some("tenantA"));
        assert_eq!(prefix_of(Value::Text(String::new())).unwrap(), None);
        let err = prefix_of(Value::Text("a@b".into())).unwrap_err();
        assert!(err.message().starts_with("key_prefix must not contain '@'"), "{err}");
        assert!(err.message().contains("got 'a@b'"), "{err}");
        let err = prefix_of(Value::Int(3)).unwrap_err();
        assert_eq!(err.message(), "key_prefix must be a str, not int");
        let err = prefix_of(Value::Text("x".repeat(MAX_KEY_PREFIX_LEN + 1))).unwrap_err();
        assert!(err.message().contains("at most 1024 bytes"), "{err}");
    }

    #[test]
    fn the_wire_prefix_is_the_prefix_and_the_separator() {
        assert_eq!(&*wire_prefix(Some("tenantA")), b"tenantA@");
        assert!(wire_prefix(None).is_empty());
    }

    /// Any prefix `key_prefix` accepts, from an alphabet small enough that prefixes and keys
    /// often share their bytes: '@', a letter, a space, NUL and a two-byte character.
    fn accepted_prefix() -> impl Strategy<Value = String> {
        proptest::string::string_regex("[t@x \u{0}é]{0,5}")
            .unwrap()
            .prop_filter_map("key_prefix accepts it and it names a namespace", |text| {
                prefix_of(Value::Text(text)).ok().flatten()
            })
    }

    fn any_key() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(proptest::sample::select(b"t@x \x00\xc3\xa9".to_vec()), 0..8)
    }

    proptest::proptest! {
        /// No two tenants share a server key, whatever keys they choose: `<A>@<a>` equals
        /// `<B>@<b>` only when A = B and a = b. Why: a prefix holds no '@', so a wire key's first
        /// '@' is where its prefix ends; equal wire keys have equal prefixes, then equal keys.
        /// Nor does one namespace hold a key beginning with another's `<B>@`, so nothing that
        /// goes by the prefix (a scan, a capacity tracker's deletes) crosses it either.
        #[test]
        fn no_two_namespaces_share_a_server_key(a in accepted_prefix(), b in accepted_prefix(),
                                                key_a in any_key(), key_b in any_key()) {
            let wire = |prefix: &str, key: &[u8]| [&wire_prefix(Some(prefix))[..], key].concat();
            proptest::prop_assert_eq!(wire(&a, &key_a) == wire(&b, &key_b), a == b && key_a == key_b);
            proptest::prop_assert_eq!(wire(&a, &key_a).starts_with(&wire_prefix(Some(&b))), a == b);
        }
    }

    #[test]
    fn a_client_without_a_prefix_shares_every_namespace() {
        // As LMCache's valkey adapter has it (an empty prefix is the unprefixed wire key): only
        // clients that all have a prefix are kept apart (docs/reliability.md).
        assert_eq!([&wire_prefix(None)[..], b"t@k"].concat(), [&wire_prefix(Some("t"))[..], b"k"].concat());
    }

    #[test]
    fn a_ttl_is_a_positive_whole_number_of_seconds() {
        assert_eq!(ttl_of(Value::Int(30)).unwrap(), Duration::from_secs(30));
        assert_eq!(ttl_of(Value::Text("60".into())).unwrap(), Duration::from_secs(60));
        for bad in [Value::Int(0), Value::Int(-1), Value::Float(1.5), Value::Bool(true), Value::Text("1h".into())] {
            let err = ttl_of(bad.clone()).unwrap_err();
            assert!(err.message().starts_with("ttl_seconds must be a whole number of seconds"), "{bad}: {err}");
        }
        assert_eq!(expiry_ms(Some(Duration::from_secs(30))), Some(30_000));
        assert_eq!(expiry_ms(None), None);
    }

    #[test]
    fn a_ttl_with_capacity_tracking_is_refused_saying_why() {
        let err = check_single_evictor(Some(Duration::from_secs(1)), 1 << 30).unwrap_err();
        assert!(err.message().contains("two owners of eviction"), "{err}");
        assert!(check_single_evictor(Some(Duration::from_secs(1)), 0).is_ok());
        assert!(check_single_evictor(None, 1 << 30).is_ok());
    }
}
