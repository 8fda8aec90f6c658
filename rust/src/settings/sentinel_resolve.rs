//! Resolving the Sentinel settings (see `sentinel` for what they mean).

use super::Settings;
use super::resolver::Resolver;
use super::sentinel::{DEFAULT_SENTINEL_PORT, SentinelSettings, parse_nodes};
use super::table::{Group, group};
use super::value::{Given, Value};
use crate::error::{Error, Result};
use crate::net::Endpoint;

impl Resolver<'_> {
    /// A field of this file: explicit, then the URL's query; empty text is "not set".
    fn sentinel_field(&self, name: &'static str) -> Option<Given<'_>> {
        let set = |value: &&Value| !matches!(value, Value::Text(text) if text.trim().is_empty());
        self.explicit(name)
            .filter(set)
            .or_else(|| self.query_value(name).filter(set))
            .map(|value| Given { name, value })
    }

    /// `settings.sentinel` (and, for Sentinel, `settings.endpoints` become the Sentinels);
    /// runs after TLS is built. Sentinel fields without Sentinel are an error naming them.
    pub(super) fn sentinel(&self, settings: &mut Settings) -> Result<()> {
        let nodes_given = self.sentinel_field("sentinel_nodes");
        let service = match self.sentinel_field("sentinel_service_name") {
            Some(given) => Some(given.text()?.trim().to_owned()),
            None => self.url.sentinel_service.clone(),
        };
        if nodes_given.is_none() && self.url.sentinel_service.is_none() {
            let given: Vec<&str> = group(Group::Sentinel).filter(|name| self.sentinel_field(name).is_some()).collect();
            if given.is_empty() {
                return Ok(());
            }
            return Err(Error::invalid(format!(
                "{} set without Sentinels: give sentinel_nodes (\"host:port,host:port\") and sentinel_service_name, \
                 or a redis+sentinel://host:port[,host:port...]/service_name URL",
                given.join(", ")
            )));
        }
        let service = service.filter(|s| !s.is_empty()).ok_or_else(|| {
            Error::invalid("sentinel_nodes needs sentinel_service_name: the name the Sentinels know the primary by")
        })?;
        let nodes = match &nodes_given {
            Some(given) => parse_nodes(given)?,
            None => self
                .url
                .hosts
                .iter()
                .map(|(host, port)| Endpoint::Tcp { host: host.clone(), port: port.unwrap_or(DEFAULT_SENTINEL_PORT) })
                .collect(),
        };
        if settings.cluster {
            return Err(Error::invalid(
                "cluster=true and Sentinel exclude each other: a Redis Cluster fails over by itself",
            ));
        }
        let explicit_server = ["host", "port", "unix_path"].iter().find(|name| self.explicit(name).is_some());
        if let Some(name) = explicit_server {
            return Err(Error::invalid(format!(
                "{name} and Sentinel exclude each other: with Sentinel the Sentinels name the server"
            )));
        }
        let username = match self.sentinel_field("sentinel_username") {
            Some(given) => Some(given.text()?.to_owned()),
            None => None,
        };
        // Never from the URL's query, where a secret would show in every message naming the URL.
        let password = match self.explicit("sentinel_password") {
            Some(Value::Text(text)) if text.is_empty() => None,
            Some(value) => Some(Given { name: "sentinel_password", value }.secret()?),
            None => None,
        };
        let tls = match self.sentinel_field("sentinel_tls").map(|g| g.flag()).transpose()? {
            None | Some(true) if settings.tls.is_some() => settings.tls.clone(),
            None | Some(false) => None,
            Some(true) => {
                return Err(Error::invalid(
                    "sentinel_tls=True needs TLS to the data server too (rediss+sentinel:// or ssl=True): the \
                     Sentinels are spoken to with its TLS settings (ssl_ca_certs, ...)",
                ));
            }
        };
        settings.endpoints = nodes.clone();
        settings.sentinel = Some(SentinelSettings { nodes, service, username, password, tls });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Sources;
    use super::*;
    use crate::secret::Secret;

    fn resolve(explicit: &[(&str, Value)], url: Option<&str>) -> Result<Settings> {
        let explicit: Vec<(String, Value)> = explicit.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        Settings::resolve(&Sources { explicit: &explicit, url, env: &[] })
    }

    fn text(s: &str) -> Value {
        Value::Text(s.into())
    }

    fn tcp(host: &str, port: u16) -> Endpoint {
        Endpoint::Tcp { host: host.into(), port }
    }

    #[test]
    fn the_url_names_sentinels_service_and_the_data_servers_credentials() {
        let s = resolve(
            &[("sentinel_password", text("s3cret-sentinel"))],
            Some("redis+sentinel://alice:data-pw@s1:26379,s2/mymaster?db=3&sentinel_username=watcher"),
        )
        .unwrap();
        let sentinel = s.sentinel.as_ref().unwrap();
        assert_eq!(sentinel.nodes, vec![tcp("s1", 26379), tcp("s2", DEFAULT_SENTINEL_PORT)]);
        assert_eq!(s.endpoints, sentinel.nodes);
        assert_eq!(sentinel.service, "mymaster");
        assert_eq!(sentinel.username.as_deref(), Some("watcher"));
        assert_eq!(sentinel.password, Some(Secret::new("s3cret-sentinel")));
        assert_eq!((s.username.as_deref(), s.password.clone(), s.db), (Some("alice"), Some(Secret::new("data-pw")), 3));
        assert!(sentinel.tls.is_none() && s.tls.is_none());
        for shown in [format!("{s}"), format!("{s:?}"), format!("{sentinel:?}"), sentinel.describe()] {
            assert!(!shown.contains("s3cret") && !shown.contains("data-pw"), "{shown}");
        }
        assert!(format!("{s}").contains("sentinel service \"mymaster\""), "{s}");
    }

    #[test]
    fn the_fields_name_sentinels_and_service() {
        let s = resolve(
            &[("sentinel_nodes", text("10.0.0.1:5000, [::1]:5001,h3")), ("sentinel_service_name", text("svc"))],
            None,
        )
        .unwrap();
        let sentinel = s.sentinel.unwrap();
        assert_eq!(sentinel.nodes, vec![tcp("10.0.0.1", 5000), tcp("::1", 5001), tcp("h3", 26379)]);
        assert_eq!((sentinel.service.as_str(), sentinel.password), ("svc", None));
        assert!(resolve(&[], Some("redis://h:1")).unwrap().sentinel.is_none());
    }

    #[test]
    fn sentinel_tls_follows_the_data_server_unless_turned_off() {
        let s = resolve(&[("ssl_cert_reqs", text("none"))], Some("rediss+sentinel://s1:1/m")).unwrap();
        assert!(s.tls.is_some() && s.sentinel.as_ref().unwrap().tls.is_some());
        let s = resolve(
            &[("ssl_cert_reqs", text("none")), ("sentinel_tls", Value::Bool(false))],
            Some("rediss+sentinel://s1:1/m"),
        )
        .unwrap();
        assert!(s.tls.is_some() && s.sentinel.as_ref().unwrap().tls.is_none());
        let err = resolve(&[("sentinel_tls", Value::Bool(true))], Some("redis+sentinel://s1:1/m")).unwrap_err();
        assert!(err.message().contains("needs TLS to the data server too"), "{err}");
    }

    #[test]
    fn sentinel_reads_from_its_replicas_without_readonly() {
        let replica_reads = [("read_from", text("prefer_replica"))];
        let s = resolve(&replica_reads, Some("redis+sentinel://s1:1/m")).unwrap();
        assert!(s.reads_replicas(), "{s}");
        // Standalone replicas serve reads as they are, and refuse READONLY outside a cluster.
        assert!(!s.connect_options(&tcp("r1", 6380)).readonly);
        assert!(s.warnings.iter().all(|w| !w.contains("read_from")), "{:?}", s.warnings);
        let s = resolve(&[], Some("redis+sentinel://s1:1/m")).unwrap();
        assert!(!s.reads_replicas());
        // One server has no replicas to read from: it says so.
        let s = resolve(&replica_reads, Some("redis://h:1")).unwrap();
        assert!(!s.reads_replicas());
        assert!(
            s.warnings.iter().any(|w| w.contains("read_from=\"prefer_replica\" has no effect")),
            "{:?}",
            s.warnings
        );
    }

    #[test]
    fn mistakes_are_clear_errors() {
        for (explicit, url, message) in [
            (vec![("sentinel_nodes", text("s1:1"))], None, "needs sentinel_service_name"),
            (vec![("sentinel_service_name", text("m"))], None, "sentinel_service_name set without Sentinels"),
            (vec![("sentinel_password", text("pw-never-shown"))], Some("redis://h:1"), "set without Sentinels"),
            (vec![("sentinel_nodes", text("s1:0")), ("sentinel_service_name", text("m"))], None, "bad port"),
            (vec![("sentinel_nodes", text(" , ")), ("sentinel_service_name", text("m"))], None, "no Sentinel named"),
            (vec![("host", text("h"))], Some("redis+sentinel://s1/m"), "host and Sentinel exclude each other"),
            (vec![("cluster", Value::Bool(true))], Some("redis+sentinel://s1/m"), "exclude each other"),
            (vec![], Some("redis+sentinel://s1/m?sentinel_password=pw-never-shown"), "not read from a URL's query"),
        ] {
            let err = resolve(&explicit, url).unwrap_err();
            assert!(err.message().contains(message), "{explicit:?} {url:?}: {err}");
            assert!(!err.message().contains("pw-never-shown"), "{err}");
        }
    }
}
