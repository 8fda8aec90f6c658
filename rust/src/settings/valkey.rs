//! The field names of LMCache's `valkey` adapter (`valkey_l2_adapter.py`), accepted beside ours
//! so that a config moves between the two adapters with only its `type`/`module_path`/
//! `class_name` changed. Each is declared in its setting's row (`table.rs`, `lmcache`), and
//! becomes that setting here, before resolution; given together with ours and disagreeing, it is
//! refused. (`username`, `password`, `num_workers`, `key_prefix` and `ttl_seconds` are the same
//! names in both.) LMCache's other conventions are `lmcache.rs`'s.

use super::value::{Given, Value};
use crate::error::{Error, Result};

/// The explicit settings with LMCache's names turned into ours, the URL the servers of
/// `startup_nodes` make (where no URL was given), and what to warn about.
pub(super) struct Translated {
    pub explicit: Vec<(String, Value)>,
    pub url: Option<String>,
    pub warnings: Vec<String>,
}

/// Turns LMCache's names in `explicit` into ours (see the module documentation). `url` is the
/// caller's URL, which `startup_nodes` must agree with.
pub(super) fn translate(explicit: &[(String, Value)], url: Option<&str>) -> Result<Translated> {
    let last = |name: &str| explicit.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v);
    let aliases = super::lmcache_aliases();
    let is_alias = |name: &str| aliases.iter().any(|(alias, _)| *alias == name);
    let mut out = Translated {
        explicit: explicit.iter().filter(|(k, _)| !is_alias(k)).cloned().collect(),
        url: None,
        warnings: Vec::new(),
    };
    let ours = |name: &str| explicit.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v);
    let mut add = |alias: &str, field: &str, value: Value, same: &dyn Fn(&Value) -> Result<bool>| -> Result<()> {
        if let Some(given) = ours(field) {
            if !same(given)? {
                return Err(Error::invalid(format!(
                    "{alias} (LMCache's valkey-adapter name for {field}) and {field} disagree: {value} vs {given}; give \
                     one of them"
                )));
            }
        }
        out.explicit.push((field.to_owned(), value));
        Ok(())
    };
    let cluster_mode = match last("cluster_mode") {
        Some(value) => {
            let flag = Given { name: "cluster_mode", value }.flag()?;
            add("cluster_mode", "cluster", Value::Bool(flag), &|v| {
                Ok(Given { name: "cluster", value: v }.flag()? == flag)
            })?;
            flag
        }
        None => ours("cluster").map(|value| Given { name: "cluster", value }.flag()).transpose()?.unwrap_or(false),
    };
    if let Some(value) = last("tls_enable") {
        let flag = Given { name: "tls_enable", value }.flag()?;
        add("tls_enable", "ssl", Value::Bool(flag), &|v| Ok(Given { name: "ssl", value: v }.flag()? == flag))?;
    }
    if let Some(value) = last("database_id") {
        let db = Given { name: "database_id", value }.integer(0, (1 << 31) - 1)?;
        if cluster_mode {
            return Err(Error::invalid(
                "database_id applies to a standalone server only (a cluster has database 0 alone): remove database_id, \
                 or cluster_mode",
            ));
        }
        add("database_id", "db", Value::Int(db as i64), &|v| {
            Ok(Given { name: "db", value: v }.integer(0, u64::MAX)? == db)
        })?;
    }
    for (alias, field) in [("request_timeout", "timeout"), ("connection_timeout", "connect_timeout")] {
        if let Some(value) = last(alias) {
            let seconds = Given { name: alias, value }.seconds()?;
            let same = |v: &Value| Ok(Given { name: field, value: v }.seconds()? == seconds);
            add(alias, field, Value::Float(seconds.as_secs_f64()), &same)?;
        }
    }
    if let Some(value) = last("startup_nodes") {
        let nodes = startup_nodes(&Given { name: "startup_nodes", value })?;
        if ["host", "port", "unix_path"].iter().any(|name| ours(name).is_some()) {
            return Err(Error::invalid(
                "give startup_nodes (LMCache's valkey-adapter name for the servers) or host/port/unix_path, not both",
            ));
        }
        let used = if cluster_mode { &nodes[..] } else { &nodes[..1] };
        if !cluster_mode && nodes.len() > 1 {
            out.warnings.push(format!(
                "cluster_mode is off but startup_nodes names {} servers: only the first ({}) is used, as in LMCache's \
                 valkey adapter",
                nodes.len(),
                authority(&nodes[..1])
            ));
        }
        match url {
            None => out.url = Some(format!("redis://{}", authority(used))),
            Some(url) => {
                let parsed = super::url::parse(url)?;
                let named: Vec<(String, u16)> =
                    parsed.hosts.iter().map(|(h, p)| (h.clone(), p.unwrap_or(super::defaults::PORT))).collect();
                if named != used {
                    return Err(Error::invalid(format!(
                        "startup_nodes ({}) and the URL ({}) name different servers: give one of them",
                        authority(used),
                        super::url::redact(url)
                    )));
                }
            }
        }
    }
    Ok(out)
}

/// `"host:port[,host:port...]"`, as LMCache's `_parse_startup_nodes` reads it: blank entries
/// skipped, the port after the last `:`, at least one server. An entry is a host and a port
/// only: one holding credentials or a scheme (`user:pw@h:6379`, `rediss://h:6379`, which a URL
/// would take) is refused, and errors show each entry without what comes before its last `@`,
/// which may be a password. (It was glued into the URL as it came: `default:pw@h:6379` became
/// the user `[default` at host `h]`.)
fn startup_nodes(given: &Given<'_>) -> Result<Vec<(String, u16)>> {
    let text = given.text()?;
    let refuse = |why: &str| {
        let shown: Vec<&str> =
            text.split(',').map(|entry| entry.rsplit_once('@').map_or(entry, |(_, host)| host)).collect();
        let shown = shown.join(",");
        let hidden = if shown == text { "" } else { " (credentials left out)" };
        Error::invalid(format!("startup_nodes must be 'host:port[,host:port...]' ({why}), got '{shown}'{hidden}"))
    };
    let mut nodes = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        if entry.contains(['@', '/']) {
            return Err(refuse(
                "an entry holds '@' or '/': a host and a port only; give the credentials as username and password, TLS \
                 as tls_enable",
            ));
        }
        let (host, port) = entry.rsplit_once(':').ok_or_else(|| refuse("an entry has no ':port'"))?;
        let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(|| refuse("a port is not in 1..65535"))?;
        if host.is_empty() {
            return Err(refuse("an entry has no host"));
        }
        if host.contains(['[', ']']) || (host.contains(':') && host.parse::<std::net::Ipv6Addr>().is_err()) {
            return Err(refuse("an entry's host is neither a name nor an IP address (IPv6 goes in brackets)"));
        }
        nodes.push((host.to_owned(), port));
    }
    if nodes.is_empty() {
        return Err(refuse("no server named"));
    }
    Ok(nodes)
}

/// `h1:p1,[::1]:p2`: servers as a URL's authority names them.
fn authority(nodes: &[(String, u16)]) -> String {
    let one = |(host, port): &(String, u16)| match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    };
    nodes.iter().map(one).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(pairs: &[(&str, Value)]) -> Vec<(String, Value)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    fn text(t: &str) -> Value {
        Value::Text(t.into())
    }

    #[test]
    fn each_name_becomes_ours() {
        let out = translate(
            &given(&[
                ("startup_nodes", text("h1:7000")),
                ("tls_enable", Value::Bool(true)),
                ("database_id", Value::Int(3)),
                ("request_timeout", Value::Float(2.5)),
                ("connection_timeout", Value::Int(4)),
                ("key_prefix", text("t")),
            ]),
            None,
        )
        .unwrap();
        assert_eq!(out.url.as_deref(), Some("redis://h1:7000"));
        let names: Vec<&str> = out.explicit.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["key_prefix", "ssl", "db", "timeout", "connect_timeout"]);
        assert_eq!(out.explicit[1].1, Value::Bool(true));
        assert_eq!(out.explicit[2].1, Value::Int(3));
        assert_eq!(out.explicit[3].1, Value::Float(2.5));
        assert!(out.warnings.is_empty());
    }

    #[test]
    fn cluster_mode_keeps_every_seed_and_standalone_only_the_first() {
        let seeds = text("h1:7000, h2:7001,,[::1]:7002");
        let out =
            translate(&given(&[("startup_nodes", seeds.clone()), ("cluster_mode", Value::Bool(true))]), None).unwrap();
        assert_eq!(out.url.as_deref(), Some("redis://h1:7000,h2:7001,[::1]:7002"));
        assert_eq!(out.explicit, given(&[("cluster", Value::Bool(true))]));
        let out = translate(&given(&[("startup_nodes", seeds)]), None).unwrap();
        assert_eq!(out.url.as_deref(), Some("redis://h1:7000"));
        assert!(out.warnings[0].contains("only the first (h1:7000) is used"), "{:?}", out.warnings);
    }

    #[test]
    fn names_given_twice_must_agree() {
        let agree = given(&[("cluster_mode", Value::Bool(true)), ("cluster", text("true"))]);
        assert!(translate(&agree, None).is_ok());
        for (pairs, message) in [
            (
                given(&[("cluster_mode", Value::Bool(true)), ("cluster", Value::Bool(false))]),
                "cluster_mode (LMCache's valkey-adapter name for cluster) and cluster disagree: True vs False",
            ),
            (given(&[("request_timeout", Value::Int(2)), ("timeout", Value::Int(3))]), "disagree: 2.0 vs 3"),
            (given(&[("tls_enable", Value::Bool(false)), ("ssl", Value::Bool(true))]), "tls_enable"),
            (given(&[("database_id", Value::Int(1)), ("db", Value::Int(2))]), "database_id"),
            (
                given(&[("database_id", Value::Int(1)), ("cluster_mode", Value::Bool(true))]),
                "database_id applies to a standalone server only",
            ),
            (given(&[("startup_nodes", text("h:1")), ("host", text("h"))]), "not both"),
            (given(&[("startup_nodes", text("h"))]), "an entry has no ':port'"),
            (given(&[("startup_nodes", text("h:0"))]), "a port is not in 1..65535"),
            (given(&[("startup_nodes", text(" , "))]), "no server named"),
            (given(&[("startup_nodes", Value::Int(1))]), "startup_nodes must be a str"),
            (given(&[("startup_nodes", text("redis://:hunter2@h:6379"))]), "an entry holds '@' or '/'"),
            (given(&[("startup_nodes", text("h:1,u:hunter2@h:x"))]), "got 'h:1,h:x' (credentials left out)"),
            (given(&[("request_timeout", Value::Int(0))]), "request_timeout must be a positive number of seconds"),
        ] {
            let err = translate(&pairs, None).err().unwrap_or_else(|| panic!("{pairs:?} accepted"));
            assert!(err.message().contains(message), "{pairs:?}: {err}");
            assert!(!err.message().contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn startup_nodes_with_credentials_or_a_scheme_are_refused_without_showing_them() {
        for (nodes, message) in [
            ("default:hunter2@h:6379", "an entry holds '@' or '/'"),
            ("hunter2@h:6379", "an entry holds '@' or '/'"),
            ("rediss://default:hunter2@h:6379,h2:1", "an entry holds '@' or '/'"),
            ("redis://h:6379", "an entry holds '@' or '/'"),
            ("[h:6379", "neither a name nor an IP address"),
            ("h]:6379", "neither a name nor an IP address"),
            ("a:b:6379", "neither a name nor an IP address"),
            ("u:hunter2@h:x", "an entry holds '@' or '/'"),
        ] {
            for cluster in [false, true] {
                let pairs = given(&[("startup_nodes", text(nodes)), ("cluster_mode", Value::Bool(cluster))]);
                let err = translate(&pairs, None).err().unwrap_or_else(|| panic!("{nodes} accepted"));
                assert!(err.message().contains(message), "{nodes}: {err}");
                assert!(!err.message().contains("hunter2") && !err.message().contains("default"), "{nodes}: {err}");
            }
        }
        let err = translate(&given(&[("startup_nodes", text("u:hunter2@h:6379"))]), None).err().unwrap();
        assert!(err.message().ends_with("got 'h:6379' (credentials left out)"), "{err}");
        // IPv6, bracketed or not, is an address.
        let out = translate(&given(&[("startup_nodes", text("::1:7000"))]), None).unwrap();
        assert_eq!(out.url.as_deref(), Some("redis://[::1]:7000"));
    }

    #[test]
    fn startup_nodes_and_a_url_must_name_the_same_servers() {
        let nodes = given(&[("startup_nodes", text("h:7000"))]);
        let out = translate(&nodes, Some("redis://:pw@h:7000?num_workers=2")).unwrap();
        assert_eq!(out.url, None, "the caller's URL stays");
        let err = translate(&nodes, Some("redis://user:hunter2@other:7000")).err().unwrap();
        assert!(err.message().contains("name different servers"), "{err}");
        assert!(!err.message().contains("hunter2"), "{err}");
    }
}
