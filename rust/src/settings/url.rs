//! Server URLs: `resp://host:port`, `redis://[user:pass@]host:port[,host:port...][/db]` and
//! `unix:///path/to/redis.sock`, with settings in the query (`?num_workers=16&cluster=true`).
//! `rediss://` (and `resps://`, its `resp://` spelling) is the same with TLS, as in redis-py.
//! `redis+sentinel://[user:pass@]host:port[,host:port...]/service_name` names Sentinels and the
//! service they watch (the user information is the data server's, as in `redis://`; the
//! Sentinels' own credentials are `sentinel_username`/`sentinel_password`);
//! `rediss+sentinel://` is the same with TLS to the data server.
//!
//! Hand-written rather than a general URL parser because the forms are not quite URLs: a seed
//! list `h1:p1,h2:p2` is not a valid authority, and a password may contain `/`, `#` or `?`
//! unencoded. The user information runs up to the *last* `@` of the URL, so such a password is
//! still found, parsed and redacted: no error message ever shows it. What reads as a query before
//! that `@` (`?name=`) is refused: `redis://h?key_prefix=a@b` is a query holding `@`, not a
//! password.
//!
//! The credentials may also sit in the query, as redis-py's `parse_url` reads them
//! (`redis://h:6379?password=...&username=...`): the user information wins where it names one,
//! the first non-empty value of each counts, and `+` reads as a space (form encoding). They go
//! into [`ParsedUrl::username`]/[`ParsedUrl::password`], never into [`ParsedUrl::query`]. A URL
//! shown in a message ([`redact`]) has its password and every query value replaced by `***`.

use crate::error::{Error, Result};
use crate::secret::Secret;

/// What a URL says. Fields it does not mention are `None`/empty.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParsedUrl {
    /// The user before the password in the user information, percent-decoded; else the
    /// query's `username`.
    pub username: Option<String>,
    /// The password after the user's `:`, percent-decoded; else the query's `password`. Never
    /// shown.
    pub password: Option<Secret>,
    /// `(host, port)` per server named; the port is `None` where the URL leaves it out.
    pub hosts: Vec<(String, Option<u16>)>,
    /// The socket path of a `unix://` URL.
    pub unix_path: Option<String>,
    /// The database: the path (`/3`) or a `db` query parameter, which wins.
    pub db: Option<u32>,
    /// Query parameters in order, percent-decoded; later ones win. Never `username` or
    /// `password`, which go to their fields.
    pub query: Vec<(String, String)>,
    /// The scheme asks for TLS (`rediss://`, `resps://`, `rediss+sentinel://`).
    pub tls: bool,
    /// `redis+sentinel://`: the service name (the path); `hosts` are then the Sentinels.
    pub sentinel_service: Option<String>,
}

const SCHEMES: [&str; 7] = ["resp", "redis", "rediss", "resps", "unix", SENTINEL_SCHEME, SENTINEL_TLS_SCHEME];
/// The schemes that mean TLS (to the data server).
const TLS_SCHEMES: [&str; 3] = ["rediss", "resps", SENTINEL_TLS_SCHEME];
/// Sentinels and a service name, redis-py's form.
const SENTINEL_SCHEME: &str = "redis+sentinel";
/// The same, with TLS to the data server.
const SENTINEL_TLS_SCHEME: &str = "rediss+sentinel";

/// The URL with its password and every query value replaced by `***`, whatever else is wrong
/// with it: the query may carry a password (`?password=`), or a secret under a misspelt name.
pub fn redact(url: &str) -> String {
    let Some(authority_start) = url.find("://").map(|i| i + 3) else { return url.to_owned() };
    let rest = &url[authority_start..];
    let mut shown = url[..authority_start].to_owned();
    // The user information as `parse` finds it (up to an '@' that no query precedes); where
    // every '@' follows a query (a URL `parse` refuses), all from the first ':' to the last '@'
    // may be a password.
    let userinfo_end = rest.match_indices('@').map(|(at, _)| at).rev().find(|&at| !sets_something(&rest[..at]));
    let Some(at) = userinfo_end.or_else(|| rest.rfind('@')) else {
        shown.push_str(&hide_query_values(rest));
        return shown;
    };
    match rest[..at].find(':') {
        Some(colon) => shown.push_str(&format!("{}***", &rest[..colon + 1])),
        None => shown.push_str(&hide_query_values(&rest[..at])),
    }
    shown.push('@');
    shown.push_str(&hide_query_values(&rest[at + 1..]));
    shown
}

/// `location?k=***&flag`: every value of a query replaced, its names kept.
fn hide_query_values(text: &str) -> String {
    let Some((location, query)) = text.split_once('?') else { return text.to_owned() };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| pair.split_once('=').map_or_else(|| pair.to_owned(), |(key, _)| format!("{key}=***")))
        .collect();
    format!("{location}?{}", pairs.join("&"))
}

/// Parses a server URL; errors name the URL with its password redacted. A `db` query
/// parameter moves into [`ParsedUrl::db`]; the other parameters stay in `query`, unchecked.
pub fn parse(url: &str) -> Result<ParsedUrl> {
    let shown = redact(url);
    let invalid = |why: &str| Error::invalid(format!("invalid URL {shown:?}: {why}"));
    let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("expected scheme://..."))?;
    let scheme = scheme.to_ascii_lowercase();
    if !SCHEMES.contains(&scheme.as_str()) {
        return Err(Error::invalid(format!(
            "unsupported URL scheme {scheme:?} in {shown:?}: use resp://, redis://, rediss:// (TLS), unix:// or \
             redis+sentinel://"
        )));
    }
    let mut parsed = ParsedUrl { tls: TLS_SCHEMES.contains(&scheme.as_str()), ..ParsedUrl::default() };
    let rest = match rest.rfind('@') {
        Some(at) if sets_something(&rest[..at]) => {
            // `redis://h:1?key_prefix=a@b` would be user `h`, a password `1?key_prefix=a` and
            // host `b`: the setting lost without a word, the password sent to another host.
            return Err(invalid(
                "an '@' after the query's '?' reads as the end of a password, and the rest as the host: write it \
                 as %40 (or, where the '?' is in the password, write that as %3F)",
            ));
        }
        Some(at) => {
            let (user, password) = match rest[..at].split_once(':') {
                Some((user, password)) => (user, Some(password)),
                None => (&rest[..at], None),
            };
            parsed.username = Some(decode(user, &invalid)?).filter(|u| !u.is_empty());
            parsed.password =
                password.map(|p| decode(p, &invalid)).transpose()?.filter(|p| !p.is_empty()).map(Secret::new);
            &rest[at + 1..]
        }
        None => rest,
    };
    let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
    let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (mut query_username, mut query_password) = (None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = decode(key, &invalid)?;
        // redis-py's credentials in the query: form-decoded, the first non-empty value counts.
        let credential = match key.as_str() {
            "username" => Some(&mut query_username),
            "password" => Some(&mut query_password),
            _ => None,
        };
        match credential {
            Some(slot) => {
                let value = decode(&value.replace('+', "%20"), &invalid)?;
                if slot.is_none() && !value.is_empty() {
                    *slot = Some(value);
                }
            }
            None => parsed.query.push((key, decode(value, &invalid)?)),
        }
    }
    // The user information wins, as in redis-py.
    parsed.username = parsed.username.take().or(query_username);
    parsed.password = parsed.password.take().or_else(|| query_password.map(Secret::new));
    if scheme == "unix" {
        let path = decode(location, &invalid)?;
        if !path.starts_with('/') {
            return Err(Error::invalid(format!(
                "unix URL {shown:?} has no socket path: use unix:///path/to/redis.sock"
            )));
        }
        parsed.unix_path = Some(path);
    } else {
        let (authority, path) = location.find('/').map_or((location, ""), |slash| location.split_at(slash));
        for server in authority.split(',') {
            parsed.hosts.push(host_and_port(server, &invalid)?);
        }
        if parsed.hosts.iter().any(|(host, _)| host.is_empty()) {
            return Err(Error::invalid(format!("URL {shown:?} has no host: use {scheme}://host:port")));
        }
        let db = path.trim_matches('/');
        if scheme == SENTINEL_SCHEME || scheme == SENTINEL_TLS_SCHEME {
            let service = decode(db, &invalid)?;
            if service.is_empty() || service.contains('/') {
                return Err(Error::invalid(format!(
                    "Sentinel URL {shown:?} must name one service: {scheme}://host:port[,host:port...]/service_name"
                )));
            }
            parsed.sentinel_service = Some(service);
        } else if !db.is_empty() {
            parsed.db = Some(database(db, &format!("database in URL {shown:?}"))?);
        }
    }
    if let Some((_, db)) = parsed.query.iter().rev().find(|(key, _)| key == "db") {
        parsed.db = Some(database(db, &format!("db parameter in URL {shown:?}"))?);
    }
    parsed.query.retain(|(key, _)| key != "db");
    Ok(parsed)
}

/// Whether `userinfo` (up to the last `@`) holds what reads as a query: `?name=` (a setting's
/// name, or a misspelt one). A password may hold `?`; one that holds `?name=` must be written
/// with `%3F`.
fn sets_something(userinfo: &str) -> bool {
    let Some((_, query)) = userinfo.split_once('?') else { return false };
    let named = |key: &str| !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    query.split('&').any(|pair| pair.split_once('=').is_some_and(|(key, _)| named(key)))
}

fn host_and_port(server: &str, invalid: &impl Fn(&str) -> Error) -> Result<(String, Option<u16>)> {
    let (host, port) = if let Some(bracketed) = server.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']').ok_or_else(|| invalid("unclosed '[' in an IPv6 host"))?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':').ok_or_else(|| invalid("expected :port after ']'"))?)),
        }
    } else {
        match server.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (server, None),
        }
    };
    let port = match port {
        None => None,
        Some(text) => Some(
            text.parse::<u16>()
                .ok()
                .filter(|p| *p > 0 && text.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| invalid(&format!("port must be an integer in 1..65535, got {text:?}")))?,
        ),
    };
    Ok((host.to_ascii_lowercase(), port))
}

fn database(text: &str, what: &str) -> Result<u32> {
    text.parse::<u32>()
        .ok()
        .filter(|db| *db < 1 << 31 && text.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| Error::invalid(format!("{what} must be a non-negative integer, got {text:?}")))
}

/// Percent-decoding (`%40` -> `@`); the result must be UTF-8.
fn decode(text: &str, invalid: &impl Fn(&str) -> Error) -> Result<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
            out.push(hex.ok_or_else(|| invalid("a '%' is not followed by two hex digits"))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| invalid("percent-encoding that is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &[(&str, Option<u16>)]) -> Vec<(String, Option<u16>)> {
        list.iter().map(|(h, p)| (h.to_string(), *p)).collect()
    }

    #[test]
    fn the_schemes() {
        let url = parse("resp://h:1").unwrap();
        assert_eq!(url.hosts, hosts(&[("h", Some(1))]));
        assert!(!url.tls);
        assert_eq!(parse("redis://h").unwrap().hosts, hosts(&[("h", None)]));
        let url = parse("redis://u:p%40ss@h:2/5").unwrap();
        assert_eq!((url.username.as_deref(), url.password, url.db), (Some("u"), Some(Secret::new("p@ss")), Some(5)));
        let url = parse("redis://:pw@h:3").unwrap();
        assert_eq!((url.username, url.password), (None, Some(Secret::new("pw"))));
        assert_eq!(parse("redis://[::1]:4").unwrap().hosts, hosts(&[("::1", Some(4))]));
        let url = parse("unix:///run/redis.sock?db=2").unwrap();
        assert_eq!((url.unix_path.as_deref(), url.db, url.tls), (Some("/run/redis.sock"), Some(2), false));
    }

    #[test]
    fn rediss_and_resps_ask_for_tls() {
        for scheme in ["rediss", "REDISS", "resps"] {
            let url = parse(&format!("{scheme}://u:pw@h:6380/1?ssl_ca_certs=/etc/ca.pem")).unwrap();
            assert!(url.tls, "{scheme}");
            assert_eq!((url.hosts, url.db), (hosts(&[("h", Some(6380))]), Some(1)));
            assert_eq!(url.query, vec![("ssl_ca_certs".into(), "/etc/ca.pem".into())]);
        }
        assert!(!parse("redis://h").unwrap().tls);
    }

    #[test]
    fn seed_lists_and_queries() {
        let url = parse("redis://h1:7000,h2:7001,[::1]:7002?cluster=true&num_workers=4&db=1").unwrap();
        assert_eq!(url.hosts, hosts(&[("h1", Some(7000)), ("h2", Some(7001)), ("::1", Some(7002))]));
        assert_eq!(url.query, vec![("cluster".into(), "true".into()), ("num_workers".into(), "4".into())]);
        assert_eq!(url.db, Some(1));
    }

    #[test]
    fn passwords_with_reserved_characters_are_found_and_never_shown() {
        for password in ["pa/ss", "pa#ss", "pa?ss", "p@ss", "a/b#c?d"] {
            let raw = format!("redis://user:{password}@h:1/2");
            let url = parse(&raw).unwrap();
            assert_eq!(url.password, Some(Secret::new(password)), "{raw}");
            assert_eq!((url.hosts[0].0.as_str(), url.db), ("h", Some(2)));
            assert_eq!(redact(&raw), "redis://user:***@h:1/2");
            let bad = format!("https://user:{password}@h:1");
            assert!(!parse(&bad).unwrap_err().message().contains(password));
            let bad = format!("redis://user:{password}@h:99999");
            assert!(!parse(&bad).unwrap_err().message().contains(password));
        }
    }

    /// Issue #36: `?key_prefix=a@b` made the URL's user information run to that '@' (a user `h`,
    /// a password `1?key_prefix=a`, the host `b`), and the store ran without its namespace.
    #[test]
    fn an_at_sign_in_a_setting_of_the_query_is_refused_never_read_as_the_password_s_end() {
        for raw in ["redis://h:1?key_prefix=a@b", "redis://u:secret@h:1?key_prefix=t@x", "redis://h?misspelt=1@x"] {
            let err = parse(raw).unwrap_err();
            assert!(err.message().contains("write it as %40"), "{raw}: {err}");
            assert!(!err.message().contains("secret"), "{err}");
        }
        let url = parse("redis://h:1?key_prefix=a%40b").unwrap();
        assert_eq!(url.query, [("key_prefix".to_owned(), "a@b".to_owned())]);
        // A password may still hold '?' and '@' unencoded, a query after it too.
        let url = parse("redis://u:p?w@d@h:1?key_prefix=t").unwrap();
        assert_eq!(url.password, Some(Secret::new("p?w@d")));
        assert_eq!((url.hosts[0].0.as_str(), &url.query[0].1[..]), ("h", "t"));
    }

    /// Issue #42: `?password=` was refused as an unknown parameter by a message showing it.
    /// redis-py's `parse_url` reads credentials from the query; the user information wins, the
    /// first non-empty value counts, `+` is a space.
    #[test]
    fn credentials_in_the_query_are_read_as_redis_py_reads_them() {
        let url = parse("redis://h:1/2?password=s3cr%40t&username=bob&num_workers=4").unwrap();
        assert_eq!((url.username.as_deref(), url.password), (Some("bob"), Some(Secret::new("s3cr@t"))));
        assert_eq!((url.query, url.db), (vec![("num_workers".into(), "4".into())], Some(2)));
        let url = parse("redis://alice:pw@h:1?password=other&username=bob").unwrap();
        assert_eq!((url.username.as_deref(), url.password), (Some("alice"), Some(Secret::new("pw"))));
        let url = parse("redis://:@h:1?password=&password=first&password=second&username=").unwrap();
        assert_eq!((url.username, url.password), (None, Some(Secret::new("first"))));
        assert_eq!(parse("rediss://h?password=a+b%2Bc").unwrap().password, Some(Secret::new("a b+c")));
        let url = parse("redis+sentinel://s1:26379/mymaster?password=pw").unwrap();
        assert_eq!((url.password, url.sentinel_service.as_deref()), (Some(Secret::new("pw")), Some("mymaster")));
    }

    #[test]
    fn a_shown_url_holds_no_query_value_and_no_password() {
        for (raw, shown) in [
            ("redis://u:pw@h:1/2?password=s3cret&num_workers=4", "redis://u:***@h:1/2?password=***&num_workers=***"),
            ("redis://h:1?passwrd=s3cret&flag", "redis://h:1?passwrd=***&flag"),
            ("redis://h?key_prefix=s3cret@b", "redis://h?key_prefix=***@b"),
            ("redis://h:1?key_prefix=s3cret@b", "redis://h:***@b"),
            ("redis://u:s3cret@h:1?key_prefix=t@x", "redis://u:***@h:1?key_prefix=***"),
            ("redis://u:s3?a=b@h:1", "redis://u:***@h:1"),
            ("redis://u:p?w@d@h:1?key_prefix=t", "redis://u:***@h:1?key_prefix=***"),
            ("unix:///run/r.sock?password=s3cret", "unix:///run/r.sock?password=***"),
            ("redis://h:1", "redis://h:1"),
        ] {
            assert_eq!(redact(raw), shown, "{raw}");
        }
        for bad in ["redis://h:99999?password=s3cret", "redis://h/x?password=s3cret", "redis://h?password=s3cret%zz"] {
            let err = parse(bad).unwrap_err();
            assert!(!err.message().contains("s3cret"), "{bad}: {err}");
        }
    }

    #[test]
    fn sentinel_urls_name_the_sentinels_and_the_service() {
        let url = parse("redis+sentinel://u:p%40w@s1:26379,s2:26380/my%20primary?db=2").unwrap();
        assert_eq!(url.hosts, hosts(&[("s1", Some(26379)), ("s2", Some(26380))]));
        assert_eq!(url.sentinel_service.as_deref(), Some("my primary"));
        assert_eq!((url.username.as_deref(), url.password, url.db), (Some("u"), Some(Secret::new("p@w")), Some(2)));
        assert!(!url.tls);
        assert!(parse("rediss+sentinel://s1:26379/mymaster").unwrap().tls);
        assert_eq!(parse("redis://h/3").unwrap().sentinel_service, None);
        for bad in ["redis+sentinel://s1:26379", "redis+sentinel://s1:26379/", "redis+sentinel://u:secret@s1/a/b"] {
            let err = parse(bad).unwrap_err();
            assert!(err.message().contains("must name one service"), "{bad}: {err}");
            assert!(!err.message().contains("secret"), "{err}");
        }
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (url, message) in [
            ("http://h", "unsupported URL scheme"),
            ("redisss://h", "use resp://, redis://, rediss:// (TLS), unix:// or redis+sentinel://"),
            ("redis://h:99999", "invalid URL"),
            ("redis://h:0", "port must be an integer in 1..65535"),
            ("redis://h/notadb", "must be a non-negative integer, got \"notadb\""),
            ("unix://", "no socket path"),
            ("redis://:1", "has no host"),
            ("redis://h1:1,:2", "has no host"),
            ("h:1", "expected scheme://"),
            ("redis://[::1:4", "unclosed"),
            ("redis://u%zz:p@h", "two hex digits"),
        ] {
            let err = parse(url).unwrap_err();
            assert!(err.message().contains(message), "{url}: {err}");
        }
    }
}
