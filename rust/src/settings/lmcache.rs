//! LMCache's conventions, in one place: the shapes of its L2 adapter document (MP mode's
//! `--l2-adapter` JSON), which of its keys are LMCache's own, and how its adapter params read
//! (an empty value means "not set", `resp_num_threads`, `url`). The names of its `valkey`
//! adapter are declared in the table (`table.rs`) and translated in `valkey.rs`. The bindings
//! only hand the document over (`RespSettings.from_lmcache`, `.from_adapter_params`).
//!
//! LMCache 0.5.6 and 0.5.7 read the same document but for `affinity_tag`: 0.5.6 takes it (a
//! fixed L1 tag), 0.5.7 refuses it ("affinity_tag was removed; L1 affinity is resolved from
//! memory tags", `l2_adapters/config.py`). A 0.5.6 document holding it is accepted, as 0.5.6
//! accepts it, with a warning that 0.5.7 will not.

use super::value::{Given, Value};
use super::{Settings, Sources};
use crate::error::{Error, Result};

/// The `type`s read: the native plugin (ours), and the two flat forms whose settings sit beside
/// `type` (LMCache's C++ `resp` adapter and its Python `valkey` adapter).
const TYPES: [&str; 3] = ["native_plugin", "resp", "valkey"];
const FLAT_TYPES: [&str; 2] = ["resp", "valkey"];

/// What a `native_plugin` document wraps around the adapter params.
const ENVELOPE_KEYS: [&str; 4] = ["type", "module_path", "class_name", "adapter_params"];

/// LMCache's own keys at the top level of an L2 adapter document (0.5.6 and 0.5.7,
/// `parse_args_to_l2_adapters_config`): its capacity accounting and eviction controller (which
/// deletes through the connector), and its routing and persistence flags. Never ours.
const LMCACHE_KEYS: [&str; 5] = ["eviction", "max_capacity_gb", "persist_enabled", "serde", "shared"];

/// LMCache 0.5.6's fixed L1 tag; 0.5.7 refuses it.
const AFFINITY_TAG: &str = "affinity_tag";

/// The capacity keys: LMCache's in MP mode, where inside `adapter_params` they are refused.
const CAPACITY_KEYS: [&str; 2] = ["max_capacity_gb", "eviction"];

/// The MP adapter's module, as a `native_plugin` document names it.
const PLUGIN_MODULE: &str = "lmcache_resp.lmcache.mp";
/// The variable of `require_server_at_start`, which the adapters default to false.
const REQUIRE_SERVER_ENV: &str = "LMCACHE_RESP_REQUIRE_SERVER_AT_START";
const PLUGIN_CLASS: &str = "RespConnector";

/// What `affinity_tag` in a document puts in [`Settings::warnings`].
pub const AFFINITY_TAG_WARNING: &str = "affinity_tag is LMCache 0.5.6's (left to LMCache, as its other top-level \
     keys): LMCache 0.5.7 refuses it (\"affinity_tag was removed; L1 affinity is resolved from memory tags\"), so \
     remove it before moving to 0.5.7";

impl Settings {
    /// LMCache's L2 adapter document (MP mode): the whole `{"type": "native_plugin",
    /// "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector", "adapter_params":
    /// {...}}`, the flat `{"type": "resp", ...}` or `{"type": "valkey", ...}` form, or bare
    /// adapter params. LMCache's top-level keys are LMCache's; the params read as
    /// [`Settings::from_adapter_params`] reads them, LMCache owning capacity and eviction.
    pub fn from_lmcache(document: &Value, env: &[(String, String)]) -> Result<Settings> {
        let (params, warnings) = document_params(document)?;
        let mut settings = Settings::from_adapter_params(&params, env, true)?;
        settings.warnings.extend(warnings);
        Ok(settings)
    }

    /// What LMCache hands `RespConnector(**adapter_params)`, with LMCache's conventions: an
    /// empty value (or port 0) means "not set", `resp_num_threads` (its non-MP `extra_config`
    /// name) means `num_workers`, `url` names the server.
    ///
    /// `lmcache_evicts` (MP mode): LMCache owns capacity and eviction (its keys at the top level
    /// of the document), so `max_capacity_gb`/`eviction` here would make a second evictor and
    /// are refused. The non-MP plugin, SGLang and vLLM pass false: there the connector owns them.
    ///
    /// Every engine's adapter (LMCache's, SGLang's, vLLM's) reads its settings here, and an
    /// engine must not refuse to serve because its cache tier is down: unless the params or
    /// `LMCACHE_RESP_REQUIRE_SERVER_AT_START` say otherwise, `require_server_at_start` is false
    /// (the connector starts without its server; its keys fail fast, and the engine recomputes,
    /// until the server answers).
    pub fn from_adapter_params(
        params: &[(String, Value)],
        env: &[(String, String)],
        lmcache_evicts: bool,
    ) -> Result<Settings> {
        let last = |name: &str| params.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v);
        let misplaced: Vec<&str> =
            CAPACITY_KEYS.into_iter().filter(|k| last(k).is_some_and(|v| !is_zero_or_empty(v))).collect();
        if lmcache_evicts && !misplaced.is_empty() {
            return Err(Error::invalid(format!(
                "{} inside adapter_params: in MP mode LMCache owns capacity and eviction. Put max_capacity_gb and \
                 eviction at the top level of the --l2-adapter JSON, next to adapter_params: LMCache then accounts \
                 for usage and evicts, deleting through this connector (in non-MP mode, set them on the remote \
                 storage plugin instead)",
                misplaced.join(" and ")
            )));
        }
        if last("resp_num_threads").is_some() && last("num_workers").is_some() {
            return Err(Error::invalid("give num_workers or resp_num_threads, not both"));
        }
        let url = match last("url") {
            Some(value) => Some(Given { name: "url", value }.text()?).filter(|url| !url.is_empty()),
            None => None,
        };
        let explicit: Vec<(String, Value)> = params
            .iter()
            .filter(|(k, v)| k != "url" && !is_blank(k, v))
            .map(|(k, v)| match k.as_str() {
                "resp_num_threads" => ("num_workers".to_owned(), v.clone()),
                _ => (k.clone(), v.clone()),
            })
            .collect();
        // The adapters' default, below every source (the params, the URL, the environment).
        let mut env = env.to_vec();
        if !env.iter().any(|(name, _)| name == REQUIRE_SERVER_ENV) {
            env.push((REQUIRE_SERVER_ENV.to_owned(), "false".to_owned()));
        }
        let env = env.as_slice();
        Settings::resolve(&Sources { explicit: &explicit, url, env })
    }
}

/// LMCache's "not set": an empty string, or port 0 (not `False`).
fn is_blank(key: &str, value: &Value) -> bool {
    match value {
        Value::Text(text) => text.is_empty(),
        Value::Int(0) => key == "port",
        Value::Float(x) => key == "port" && *x == 0.0,
        _ => false,
    }
}

/// A capacity key that sets nothing (`0`, `""`, `false`), which LMCache writes for "off".
fn is_zero_or_empty(value: &Value) -> bool {
    match value {
        Value::Text(text) => text.is_empty(),
        Value::Int(n) => *n == 0,
        Value::Float(x) => *x == 0.0,
        Value::Bool(flag) => !flag,
        _ => false,
    }
}

/// Settings by name, as given.
type Pairs = Vec<(String, Value)>;

/// The adapter params inside any of LMCache's three shapes, and what to warn about.
fn document_params(document: &Value) -> Result<(Pairs, Vec<String>)> {
    let Value::Map(document) = document else {
        return Err(Error::invalid(format!(
            "LMCache L2 adapter config must be a JSON object, not {}",
            document.type_name()
        )));
    };
    let get = |name: &str| document.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v);
    let Some(kind) = get("type") else {
        return Ok((document.clone(), Vec::new()));
    };
    let kind = match kind {
        Value::Text(text) if TYPES.contains(&text.as_str()) => text.as_str(),
        _ => {
            let types: Vec<String> = TYPES.iter().map(|t| format!("'{t}'")).collect();
            return Err(Error::invalid(format!("L2 adapter type must be one of {}, got {kind}", types.join(", "))));
        }
    };
    let warnings = get(AFFINITY_TAG).map(|_| AFFINITY_TAG_WARNING.to_owned()).into_iter().collect();
    let lmcaches = |key: &str| LMCACHE_KEYS.contains(&key) || key == AFFINITY_TAG;
    if FLAT_TYPES.contains(&kind) {
        let params: Pairs = document.iter().filter(|(k, _)| k != "type" && !lmcaches(k)).cloned().collect();
        check_single_evictor(get("max_capacity_gb"), &params)?;
        return Ok((params, warnings));
    }
    check_plugin_target(get("module_path"), get("class_name"))?;
    let mut beside: Vec<&str> =
        document.iter().map(|(k, _)| k.as_str()).filter(|k| !ENVELOPE_KEYS.contains(k) && !lmcaches(k)).collect();
    if !beside.is_empty() {
        beside.sort_unstable();
        // Names only, never values: one could be a password.
        let named: Vec<String> = beside.iter().map(|k| format!("'{k}'")).collect();
        return Err(Error::invalid(format!(
            "unknown key(s) beside adapter_params (RespConnector sees only adapter_params: put settings there; \
             LMCache's own are {}): {}",
            LMCACHE_KEYS.join(", "),
            named.join(", ")
        )));
    }
    let params = match get("adapter_params") {
        None => Vec::new(),
        Some(Value::Map(params)) => params.clone(),
        Some(other) => {
            return Err(Error::invalid(format!("adapter_params must be a JSON object, not {}", other.type_name())));
        }
    };
    check_single_evictor(get("max_capacity_gb"), &params)?;
    Ok((params, warnings))
}

/// LMCache's own `max_capacity_gb` > 0 beside a `ttl_seconds`: two owners of eviction (the
/// settings refuse the pair inside one connector, `namespace::check_single_evictor`; here
/// LMCache is the second owner).
fn check_single_evictor(capacity: Option<&Value>, params: &[(String, Value)]) -> Result<()> {
    let capacity_on = match capacity {
        Some(Value::Int(n)) => *n > 0,
        Some(Value::Float(x)) => *x > 0.0,
        Some(Value::Bool(flag)) => *flag,
        _ => false,
    };
    if capacity_on && params.iter().any(|(k, _)| k == "ttl_seconds") {
        return Err(Error::invalid(
            "ttl_seconds cannot be combined with max_capacity_gb > 0: that makes two owners of eviction (the server \
             expires keys LMCache's capacity accounting still counts, and LMCache evicts keys the server's policy \
             should choose). Use ttl_seconds with a volatile-* maxmemory-policy, or max_capacity_gb without \
             ttl_seconds",
        ));
    }
    Ok(())
}

/// A `native_plugin` document must load our class (where it names one).
fn check_plugin_target(module: Option<&Value>, class: Option<&Value>) -> Result<()> {
    let names = |value: Option<&Value>, accepted: &[&str]| match value {
        None => true,
        Some(Value::Text(text)) => accepted.contains(&text.as_str()),
        Some(_) => false,
    };
    if names(module, &[PLUGIN_MODULE]) && names(class, &[PLUGIN_CLASS]) {
        return Ok(());
    }
    let shown = |value: Option<&Value>| match value {
        None => "None".to_owned(),
        Some(Value::Text(text)) => text.clone(),
        Some(other) => other.to_string(),
    };
    Err(Error::invalid(format!(
        "this native_plugin config selects {}.{}, not {}.{PLUGIN_CLASS}",
        shown(module),
        shown(class),
        PLUGIN_MODULE
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, Value)]) -> Value {
        Value::Map(pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
    }

    fn text(t: &str) -> Value {
        Value::Text(t.into())
    }

    fn params() -> Vec<(&'static str, Value)> {
        vec![("host", text("10.0.0.5")), ("port", Value::Int(6380)), ("username", text("")), ("password", text(""))]
    }

    fn env() -> Vec<(String, String)> {
        vec![("LMCACHE_RESP_USERNAME".into(), "env-user".into()), ("LMCACHE_RESP_PASSWORD".into(), "env-pw".into())]
    }

    /// LMCache's top-level keys, as 0.5.7 reads them.
    fn lmcache_keys() -> Vec<(&'static str, Value)> {
        vec![
            ("max_capacity_gb", Value::Int(10)),
            ("eviction", map(&[("eviction_policy", text("LRU"))])),
            ("shared", Value::Bool(false)),
            ("persist_enabled", Value::Bool(true)),
            ("serde", map(&[("type", text("naive"))])),
        ]
    }

    fn plugin(extra: &[(&'static str, Value)]) -> Value {
        let mut pairs = vec![
            ("type", text("native_plugin")),
            ("module_path", text("lmcache_resp.lmcache.mp")),
            ("class_name", text("RespConnector")),
            ("adapter_params", map(&params())),
        ];
        pairs.extend(lmcache_keys());
        pairs.extend(extra.iter().cloned());
        map(&pairs)
    }

    #[test]
    fn the_three_shapes_give_the_same_settings() {
        let flat: Vec<(&str, Value)> = [vec![("type", text("resp"))], params(), lmcache_keys()].concat();
        for document in [plugin(&[]), map(&flat), map(&params())] {
            let s = Settings::from_lmcache(&document, &env()).unwrap();
            assert_eq!(s.endpoint().to_string(), "10.0.0.5:6380");
            // Empty credentials are LMCache's "not set": the environment fills them in.
            assert_eq!(s.username.as_deref(), Some("env-user"));
            assert!(s.password.is_some());
            // Capacity at the top level is LMCache's: the connector tracks none.
            assert!(s.capacity().is_none() && s.warnings.is_empty(), "{:?}", s.warnings);
        }
    }

    #[test]
    fn lmcache_0_5_6_s_affinity_tag_is_accepted_with_a_warning() {
        for document in
            [plugin(&[("affinity_tag", text("a"))]), map(&[("type", text("resp")), ("affinity_tag", text("a"))])]
        {
            let s = Settings::from_lmcache(&document, &[]).unwrap();
            assert_eq!(s.warnings, [AFFINITY_TAG_WARNING], "{document:?}");
        }
        assert!(!LMCACHE_KEYS.contains(&AFFINITY_TAG), "0.5.7 refuses it: not one of LMCache's keys");
    }

    #[test]
    fn capacity_inside_the_params_is_refused_where_lmcache_evicts() {
        let inside = [("max_capacity_gb", Value::Int(10))];
        let err = Settings::from_adapter_params(&pairs(&inside), &[], true).unwrap_err();
        assert!(err.message().starts_with("max_capacity_gb inside adapter_params: in MP mode LMCache owns"), "{err}");
        let s = Settings::from_adapter_params(&pairs(&inside), &[], false).unwrap();
        assert_eq!(s.capacity_bytes(), 10 << 30);
        // LMCache writes 0 for "off": not a second evictor.
        let off = [("max_capacity_gb", Value::Int(0)), ("eviction", text(""))];
        assert!(Settings::from_adapter_params(&pairs(&off), &[], true).is_ok());
    }

    fn pairs(list: &[(&str, Value)]) -> Vec<(String, Value)> {
        list.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    #[test]
    fn empty_means_not_set_and_the_extras() {
        let env = [("LMCACHE_RESP_HOST".to_owned(), "env-host".to_owned())];
        let blank = [("host", text("")), ("port", Value::Int(0)), ("num_workers", Value::Int(3))];
        let s = Settings::from_adapter_params(&pairs(&blank), &env, true).unwrap();
        assert_eq!((s.endpoint().to_string(), s.num_workers), ("env-host:6379".into(), 3));
        let given = [("url", text("redis://u:pw@h:1/3")), ("resp_num_threads", Value::Int(12))];
        let s = Settings::from_adapter_params(&pairs(&given), &[], true).unwrap();
        assert_eq!((s.endpoint().to_string(), s.db, s.num_workers), ("h:1".into(), 3, 12));
        let both = [("num_workers", Value::Int(4)), ("resp_num_threads", Value::Int(12))];
        let err = Settings::from_adapter_params(&pairs(&both), &[], true).unwrap_err();
        assert_eq!(err.message(), "give num_workers or resp_num_threads, not both");
        let err = Settings::from_adapter_params(&pairs(&[("url", Value::Int(1))]), &[], true).unwrap_err();
        assert_eq!(err.message(), "url must be a str, not int");
    }

    #[test]
    fn documents_that_are_not_ours_say_why() {
        for (document, message) in [
            (
                map(&[("type", text("s3"))]),
                "L2 adapter type must be one of 'native_plugin', 'resp', 'valkey', got 's3'",
            ),
            (
                map(&[("type", text("native_plugin")), ("module_path", text("other")), ("class_name", text("X"))]),
                "this native_plugin config selects other.X, not lmcache_resp.lmcache.mp.RespConnector",
            ),
            (
                plugin(&[("num_workers", Value::Int(10)), ("password", text("hunter2"))]),
                "unknown key(s) beside adapter_params (RespConnector sees only adapter_params: put settings there; \
                 LMCache's own are eviction, max_capacity_gb, persist_enabled, serde, shared): 'num_workers', \
                 'password'",
            ),
            (
                map(&[("type", text("native_plugin")), ("adapter_params", Value::Int(1))]),
                "adapter_params must be a JSON object, not int",
            ),
            (Value::Other { type_name: "list".into(), repr: "[1, 2]".into() }, "must be a JSON object, not list"),
            (
                map(&[("type", text("resp")), ("max_capacity_gb", Value::Int(1)), ("ttl_seconds", Value::Int(60))]),
                "ttl_seconds cannot be combined with max_capacity_gb > 0",
            ),
        ] {
            let err = Settings::from_lmcache(&document, &[]).unwrap_err();
            assert!(err.message().contains(message), "{document:?}: {err}");
            assert!(!err.message().contains("hunter2"), "{err}");
        }
    }
}
