//! Resolving settings from their sources: explicit > URL > environment > default, each
//! setting read as its row of [`SETTINGS`] says. Beside the model in `mod.rs` rather than in
//! it, so that the table (which names the model's readers) and the model never use each other.

use super::value::{Given, Value};
use super::{
    Eviction, ReadFrom, SETTINGS, Settings, Sources, defaults, env_vars, eviction_fields, fields, lmcache_aliases,
    names, namespace, query_keys, sentinel, table, url, valkey,
};
use crate::error::{Error, Result};
use crate::net::Endpoint;

impl Settings {
    /// Resolves every field from the sources: explicit > URL > environment > default.
    /// LMCache's valkey-adapter names (`startup_nodes`, `cluster_mode`, ...) count as the
    /// explicit settings they mean.
    pub fn resolve(sources: &Sources<'_>) -> Result<Settings> {
        let translated = valkey::translate(sources.explicit, sources.url)?;
        let sources = Sources {
            explicit: &translated.explicit,
            url: translated.url.as_deref().or(sources.url),
            env: sources.env,
        };
        let mut settings = Resolver::new(&sources)?.resolve()?;
        settings.warnings.extend(translated.warnings);
        Ok(settings)
    }
}

pub(super) struct Resolver<'a> {
    pub(super) explicit: &'a [(String, Value)],
    /// Eviction fields from an explicit `eviction` block.
    pub(super) explicit_eviction: &'a [(String, Value)],
    pub(super) url: url::ParsedUrl,
    pub(super) query: Vec<(String, Value)>,
    /// The environment's values, which are read as text, with the variable each came from.
    pub(super) env_values: Vec<(&'static str, &'static str, Value)>,
}

impl<'a> Resolver<'a> {
    pub(super) fn new(sources: &Sources<'a>) -> Result<Resolver<'a>> {
        if sources.explicit.iter().any(|(k, _)| k == names::KEY_PASSPHRASE_FIELD) {
            return Err(names::key_passphrase_refused());
        }
        let fields = fields();
        let unknown: Vec<&str> =
            sources.explicit.iter().map(|(k, _)| k.as_str()).filter(|k| !fields.contains(k)).collect();
        if !unknown.is_empty() {
            let mut accepted = fields;
            accepted.extend(lmcache_aliases().iter().map(|(alias, _)| *alias));
            return Err(names::unknown(&unknown, &accepted, "setting(s)"));
        }
        let explicit_eviction = match sources.explicit.iter().rev().find(|(k, _)| k == "eviction") {
            Some((_, value)) => {
                let block = Given { name: "eviction", value }.map("{\"eviction_policy\": \"LRU\"}")?;
                let accepted = eviction_fields();
                let unknown: Vec<&str> =
                    block.iter().map(|(k, _)| k.as_str()).filter(|k| !accepted.contains(k)).collect();
                if !unknown.is_empty() {
                    return Err(names::unknown(&unknown, &accepted, "eviction setting(s)"));
                }
                block
            }
            None => &[],
        };
        let url = sources.url.map(url::parse).transpose()?.unwrap_or_default();
        if url.query.iter().any(|(k, _)| k == names::KEY_PASSPHRASE_FIELD) {
            return Err(names::key_passphrase_refused());
        }
        if url.query.iter().any(|(k, _)| k == "sentinel_password") {
            return Err(sentinel::password_in_url_refused());
        }
        let query_keys = query_keys();
        let unknown: Vec<&str> =
            url.query.iter().map(|(k, _)| k.as_str()).filter(|k| !query_keys.contains(k)).collect();
        if !unknown.is_empty() {
            let shown = url::redact(sources.url.unwrap_or_default());
            let mut accepted = query_keys;
            accepted.extend(table::PARSED_QUERY_KEYS);
            return Err(names::unknown(&unknown, &accepted, &format!("parameter(s) in URL {shown:?}")));
        }
        let query = url.query.iter().map(|(k, v)| (k.clone(), Value::Text(v.clone()))).collect();
        let env_values = env_vars()
            .into_iter()
            .filter_map(|(field, var)| {
                let value = sources.env.iter().rev().find(|(k, _)| k == var).map(|(_, v)| v)?;
                (!value.is_empty()).then(|| (field, var, Value::Text(value.clone())))
            })
            .collect();
        Ok(Resolver { explicit: sources.explicit, explicit_eviction, url, query, env_values })
    }

    pub(super) fn explicit(&self, name: &str) -> Option<&'a Value> {
        self.explicit.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    pub(super) fn query_value(&self, name: &str) -> Option<&Value> {
        self.query.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// Explicit, then query: what a setting read alone is given as, named for the message.
    pub(super) fn tuning<'s>(&'s self, name: &'s str) -> Option<Given<'s>> {
        self.explicit(name).or_else(|| self.query_value(name)).map(|value| Given { name, value })
    }

    pub(super) fn env_value(&self, field: &str) -> Option<Given<'_>> {
        self.env_values.iter().find(|(f, _, _)| *f == field).map(|(_, var, value)| Given { name: var, value })
    }

    pub(super) fn resolve(self) -> Result<Settings> {
        let endpoints = self.endpoints()?;
        let mut settings = Settings::new(endpoints[0].clone());
        settings.endpoints = endpoints;
        settings.username = self.credential("username", self.url.username.clone())?;
        settings.password = match self.explicit("password") {
            Some(Value::Text(text)) if text.is_empty() => None,
            Some(value) => Some(Given { name: "password", value }.secret()?),
            None => match &self.url.password {
                Some(password) => Some(password.clone()),
                None => self.env_value("password").map(|g| g.secret()).transpose()?,
            },
        };
        settings.db = match self.explicit("db") {
            Some(value) => Given { name: "db", value }.integer(0, (1 << 31) - 1)? as u32,
            None => self.url.db.unwrap_or(0),
        };
        // Every setting read alone, as its row says: explicit, then the URL's query, then its
        // variable.
        for row in SETTINGS.iter().filter(|row| row.read.is_alone()) {
            let given = self.tuning(row.name).or_else(|| row.env.and_then(|_| self.env_value(row.name)));
            if let Some(given) = given {
                row.read.apply(&given, &mut settings)?;
            }
        }
        if self.tuning("connect_timeout").is_none() {
            // Never longer than `timeout`, for every user of the settings alike.
            settings.connect_timeout = defaults::MAX_CONNECT_TIMEOUT.min(settings.timeout);
        }
        let eviction_field = |name: &str| {
            self.explicit_eviction
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v)
                .or_else(|| self.query_value(name))
        };
        let [policy, watermark, ratio] = ["eviction_policy", "trigger_watermark", "eviction_ratio"].map(eviction_field);
        settings.eviction = Eviction::from_values(policy, watermark, ratio)?;
        if (policy.is_some() || watermark.is_some() || ratio.is_some()) && settings.capacity_bytes() == 0 {
            settings
                .warnings
                .push("eviction settings have no effect without max_capacity_gb > 0 (capacity tracking is off)".into());
        }
        namespace::check_single_evictor(settings.ttl, settings.capacity_bytes())?;
        // Last: it reads files, once everything else is known to be valid.
        self.tls(&mut settings)?;
        self.sentinel(&mut settings)?;
        if settings.read_from == ReadFrom::PreferReplica && !settings.reads_replicas() {
            settings.warnings.push(
                "read_from=\"prefer_replica\" has no effect without cluster=true or Sentinel: every read goes to \
                 the one server (or its shard)"
                    .into(),
            );
        }
        Ok(settings)
    }

    /// Username: explicit (empty = none, the environment is not consulted), URL, environment.
    pub(super) fn credential(&self, field: &str, from_url: Option<String>) -> Result<Option<String>> {
        let text = match self.explicit(field) {
            Some(value) => Some(Given { name: field, value }.text()?.to_owned()),
            None => match from_url {
                Some(text) => Some(text),
                None => self.env_value(field).map(|g| g.text().map(str::to_owned)).transpose()?,
            },
        };
        Ok(text.filter(|t| !t.is_empty()))
    }

    /// One Unix socket, one TCP server, or several (seeds of a cluster, or shards).
    pub(super) fn endpoints(&self) -> Result<Vec<Endpoint>> {
        // An empty explicit host means "not set", as LMCache's configs use it.
        let host = self.explicit("host").filter(|v| !matches!(v, Value::Text(t) if t.is_empty()));
        let port = self.explicit("port");
        let unix_path = self.explicit("unix_path");
        if unix_path.is_some() && (host.is_some() || port.is_some()) {
            return Err(Error::invalid("give either host/port or unix_path, not both"));
        }
        let explicit_tcp = host.is_some() || port.is_some();
        if let Some(value) = unix_path {
            return Ok(vec![Endpoint::Unix { path: Given { name: "unix_path", value }.text()?.into() }]);
        }
        if let (Some(path), false) = (&self.url.unix_path, explicit_tcp) {
            return Ok(vec![Endpoint::Unix { path: path.into() }]);
        }
        let default_port = || -> Result<u16> {
            match self.env_value("port") {
                Some(given) => Ok(given.integer(1, 65535)? as u16),
                None => Ok(defaults::PORT),
            }
        };
        if self.url.hosts.len() > 1 && !explicit_tcp {
            let port = default_port()?;
            return Ok(self
                .url
                .hosts
                .iter()
                .map(|(host, p)| Endpoint::Tcp { host: host.clone(), port: p.unwrap_or(port) })
                .collect());
        }
        let from_url = self.url.hosts.first();
        let host = match host {
            Some(value) => Given { name: "host", value }.text()?.to_owned(),
            None => match from_url {
                Some((host, _)) => host.clone(),
                None => match self.env_value("host") {
                    Some(given) => given.text()?.to_owned(),
                    None => defaults::HOST.to_owned(),
                },
            },
        };
        let port = match (port, from_url.and_then(|(_, p)| *p)) {
            (Some(value), _) => Given { name: "port", value }.integer(1, 65535)? as u16,
            (None, Some(port)) => port,
            (None, None) => default_port()?,
        };
        Ok(vec![Endpoint::Tcp { host, port }])
    }
}
