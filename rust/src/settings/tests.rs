use super::*;

fn text(value: &str) -> Value {
    Value::Text(value.into())
}

fn explicit(pairs: &[(&str, Value)]) -> Vec<(String, Value)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

fn env() -> Vec<(String, String)> {
    [
        ("LMCACHE_RESP_HOST", "env-host"),
        ("LMCACHE_RESP_PORT", "1111"),
        ("LMCACHE_RESP_USERNAME", "env-user"),
        ("LMCACHE_RESP_PASSWORD", "env-pw"),
        ("UNRELATED", "x"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn resolve(explicit: &[(String, Value)], url: Option<&str>, env: &[(String, String)]) -> Result<Settings> {
    Settings::resolve(&Sources { explicit, url, env })
}

fn tcp(host: &str, port: u16) -> Endpoint {
    Endpoint::Tcp { host: host.into(), port }
}

#[test]
fn defaults() {
    let s = resolve(&[], None, &[]).unwrap();
    assert_eq!(s.endpoints, vec![tcp("localhost", 6379)]);
    assert_eq!((&s.username, &s.password, s.db), (&None, &None, 0));
    assert_eq!((s.timeout, s.connect_timeout), (Duration::from_secs(10), Duration::from_secs(5)));
    assert_eq!((s.num_workers, s.connections_per_worker, &s.cpu_affinity), (8, 1, &CpuAffinity::Auto));
    assert_eq!((s.max_capacity_gb, s.eviction, s.prefault, s.cluster), (0.0, Eviction::default(), true, false));
    assert!(s.capacity().is_none() && s.warnings.is_empty());
}

#[test]
fn precedence_explicit_over_url_over_env_over_default() {
    let url = "redis://url-user:url-pw@url-host:2222/2?timeout=3&num_workers=16";
    let from_env = resolve(&[], None, &env()).unwrap();
    assert_eq!(from_env.endpoints, vec![tcp("env-host", 1111)]);
    assert_eq!((from_env.username.as_deref(), from_env.password), (Some("env-user"), Some(Secret::new("env-pw"))));
    let from_url = resolve(&[], Some(url), &env()).unwrap();
    assert_eq!(from_url.endpoints, vec![tcp("url-host", 2222)]);
    assert_eq!(
        (from_url.username.as_deref(), from_url.password.clone()),
        (Some("url-user"), Some(Secret::new("url-pw")))
    );
    assert_eq!((from_url.db, from_url.timeout, from_url.num_workers), (2, Duration::from_secs(3), 16));
    let given = explicit(&[
        ("host", text("arg-host")),
        ("port", Value::Int(3333)),
        ("username", text("arg-user")),
        ("password", text("arg-pw")),
        ("db", Value::Int(4)),
        ("timeout", Value::Float(1.5)),
        ("num_workers", Value::Int(4)),
    ]);
    let s = resolve(&given, Some(url), &env()).unwrap();
    assert_eq!(s.endpoints, vec![tcp("arg-host", 3333)]);
    assert_eq!((s.username.as_deref(), s.password, s.db), (Some("arg-user"), Some(Secret::new("arg-pw")), 4));
    assert_eq!((s.timeout, s.num_workers), (Duration::from_secs_f64(1.5), 4));
    assert_eq!(s.connect_timeout, Duration::from_secs_f64(1.5), "connect_timeout follows a short timeout");
    // Field by field: a URL without credentials still gets them from the environment, and an
    // explicit port combines with the URL's host.
    let mixed = resolve(&explicit(&[("port", Value::Int(9))]), Some("resp://url-host:2222"), &env()).unwrap();
    assert_eq!(mixed.endpoints, vec![tcp("url-host", 9)]);
    assert_eq!(mixed.username.as_deref(), Some("env-user"));
}

#[test]
fn empty_host_is_unset_but_empty_credentials_are_none() {
    let given = explicit(&[("host", text("")), ("username", text("")), ("password", text(""))]);
    let s = resolve(&given, None, &env()).unwrap();
    assert_eq!(s.endpoints, vec![tcp("env-host", 1111)]);
    assert_eq!((s.username, s.password), (None, None));
}

#[test]
fn unix_sockets() {
    let s = resolve(&[], Some("unix:///tmp/r.sock"), &env()).unwrap();
    assert_eq!(s.endpoints, vec![Endpoint::Unix { path: "/tmp/r.sock".into() }]);
    let tcp_wins = explicit(&[("host", text("h")), ("port", Value::Int(1))]);
    assert_eq!(resolve(&tcp_wins, Some("unix:///tmp/r.sock"), &[]).unwrap().endpoints, vec![tcp("h", 1)]);
    let both = explicit(&[("host", text("h")), ("unix_path", text("/tmp/x"))]);
    assert!(resolve(&both, None, &[]).unwrap_err().message().contains("not both"));
}

#[test]
fn seed_lists_name_several_servers() {
    let s = resolve(&[], Some("redis://h1:7000,h2,h3:7002?cluster=true"), &[]).unwrap();
    assert_eq!(s.endpoints, vec![tcp("h1", 7000), tcp("h2", 6379), tcp("h3", 7002)]);
    assert!(s.cluster);
    let s = resolve(&explicit(&[("cluster", Value::Bool(false))]), Some("redis://a:1,b:2?cluster=yes"), &[]).unwrap();
    assert!(!s.cluster);
}

#[test]
fn eviction_merges_query_and_block_and_warns_without_capacity() {
    let block = Value::Map(vec![("eviction_ratio".into(), Value::Float(0.5))]);
    let s = resolve(&explicit(&[("eviction", block)]), Some("resp://h?trigger_watermark=0.7"), &[]).unwrap();
    assert_eq!(s.eviction, Eviction { policy: EvictionPolicy::Lru, trigger_watermark: 0.7, eviction_ratio: 0.5 });
    assert_eq!(s.warnings.len(), 1);
    let s = resolve(&explicit(&[("max_capacity_gb", Value::Float(1.5))]), Some("resp://h?eviction_policy=NOOP"), &[])
        .unwrap();
    let capacity = s.capacity().unwrap();
    assert_eq!((capacity.capacity_bytes, capacity.policy), (3 << 29, EvictionPolicy::Noop), "GiB, as LMCache counts");
    assert!(s.warnings.is_empty());
}

#[test]
fn each_bad_field_names_itself_and_its_range() {
    type Case<'a> = (Vec<(String, Value)>, Option<&'a str>, Vec<(String, String)>, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (explicit(&[("port", Value::Int(0))]), None, vec![], "port must be an integer in 1..65535, got 0"),
        (explicit(&[("port", text("http"))]), None, vec![], "port must be an integer in 1..65535, got 'http'"),
        (explicit(&[("port", Value::Bool(true))]), None, vec![], "port must be an integer in 1..65535, got True"),
        (vec![], None, vec![("LMCACHE_RESP_PORT".into(), "http".into())], "LMCACHE_RESP_PORT must be an integer"),
        (explicit(&[("db", Value::Int(-1))]), None, vec![], "db must be an integer in 0..2147483647, got -1"),
        (explicit(&[("timeout", Value::Int(0))]), None, vec![], "timeout must be a positive number of seconds, got 0"),
        (explicit(&[("timeout", Value::Float(f64::NAN))]), None, vec![], "timeout must be a positive number"),
        (explicit(&[("host", Value::Int(5))]), None, vec![], "host must be a str, not int"),
        (explicit(&[("password", Value::Int(5))]), None, vec![], "password must be a str, not int"),
        (
            explicit(&[("num_workers", Value::Float(2.5))]),
            None,
            vec![],
            "num_workers must be an integer in 1..1024, got 2.5",
        ),
        (
            explicit(&[("connections_per_worker", Value::Int(65))]),
            None,
            vec![],
            "connections_per_worker must be an integer in 1..64, got 65",
        ),
        (
            explicit(&[("cpu_affinity", text("sometimes"))]),
            None,
            vec![],
            "cpu_affinity must be 'auto', 'none', 'numa:N' or a CPU list",
        ),
        (
            explicit(&[("max_capacity_gb", Value::Int(-1))]),
            None,
            vec![],
            "max_capacity_gb must be a number >= 0, got -1",
        ),
        (
            explicit(&[("max_capacity_gb", Value::Float(f64::INFINITY))]),
            None,
            vec![],
            "max_capacity_gb must be a number >= 0, got inf",
        ),
        (explicit(&[("eviction", Value::Int(5))]), None, vec![], "eviction must be an object"),
        (
            explicit(&[("eviction", Value::Map(vec![("eviction_policy".into(), text("FIFO"))]))]),
            None,
            vec![],
            "eviction.eviction_policy must be one of 'LRU', 'noop', got 'FIFO'",
        ),
        (
            explicit(&[("eviction", Value::Map(vec![("eviction_ratio".into(), text("lots"))]))]),
            None,
            vec![],
            "eviction.eviction_ratio must be a number in (0, 1], got 'lots'",
        ),
        (
            explicit(&[("eviction", Value::Map(vec![("trigger_watermark".into(), Value::Float(1.5))]))]),
            None,
            vec![],
            "eviction.trigger_watermark must be in (0, 1], got 1.5",
        ),
        (
            explicit(&[("eviction", Value::Map(vec![("trigger_watermak".into(), Value::Float(0.9))]))]),
            None,
            vec![],
            "unknown eviction setting(s): 'trigger_watermak' (did you mean 'trigger_watermark'?)",
        ),
        (explicit(&[("prefault", text("maybe"))]), None, vec![], "prefault must be true or false, got 'maybe'"),
        (
            vec![],
            Some("redis://u:hunter2@h:1?num_wrkers=4"),
            vec![],
            "unknown parameter(s) in URL \"redis://u:***@h:1?num_wrkers=4\": 'num_wrkers' (did you mean 'num_workers'?)",
        ),
    ];
    for (given, url, env, message) in cases {
        let err = resolve(&given, url, &env).unwrap_err();
        assert!(err.message().starts_with(message), "expected {message:?}, got {:?}", err.message());
        assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
        assert!(!err.message().contains("hunter2"));
    }
}

#[test]
fn display_never_shows_the_password() {
    let s = resolve(&explicit(&[("password", text("hunter2")), ("username", text("bob"))]), None, &[]).unwrap();
    let shown = format!("{s} {s:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("password=***"));
}
