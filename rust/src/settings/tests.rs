use super::*;
use std::sync::Arc;

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

/// Issue #42: credentials in the URL's query (redis-py's form) count as the URL's, below
/// explicit values and the user information, above the environment.
#[test]
fn credentials_in_the_query_are_the_url_s() {
    let s = resolve(&[], Some("redis://h:1?username=q-user&password=q-pw"), &env()).unwrap();
    assert_eq!((s.username.as_deref(), s.password), (Some("q-user"), Some(Secret::new("q-pw"))));
    let s = resolve(&[], Some("redis://u-user:u-pw@h:1?username=q-user&password=q-pw"), &env()).unwrap();
    assert_eq!((s.username.as_deref(), s.password), (Some("u-user"), Some(Secret::new("u-pw"))));
    let given = explicit(&[("password", text("arg-pw"))]);
    let s = resolve(&given, Some("redis://h:1?password=q-pw"), &env()).unwrap();
    assert_eq!((s.username.as_deref(), s.password.clone()), (Some("env-user"), Some(Secret::new("arg-pw"))));
    let shown = format!("{s} {s:?}");
    assert!(!shown.contains("q-pw") && !shown.contains("arg-pw"), "{shown}");
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
    let s = resolve(&[], Some("unix:///run/r.sock"), &env()).unwrap();
    assert_eq!(s.endpoints, vec![Endpoint::Unix { path: "/run/r.sock".into() }]);
    let tcp_wins = explicit(&[("host", text("h")), ("port", Value::Int(1))]);
    assert_eq!(resolve(&tcp_wins, Some("unix:///run/r.sock"), &[]).unwrap().endpoints, vec![tcp("h", 1)]);
    let both = explicit(&[("host", text("h")), ("unix_path", text("/run/x"))]);
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
            "unknown parameter(s) in URL \"redis://u:***@h:1?num_wrkers=***\": 'num_wrkers' (did you mean 'num_workers'?)",
        ),
        (
            vec![],
            Some("redis://h:1?password=hunter2&passwd=hunter2"),
            vec![],
            "unknown parameter(s) in URL \"redis://h:1?password=***&passwd=***\": 'passwd' (did you mean 'password'?)",
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

// -- TLS ------------------------------------------------------------------------------------------

/// A throwaway test CA (ECDSA P-256, self-signed, valid to 2126), and a client certificate it
/// signed with its key: test material only, trusted by nothing (py-tests/test_tls_settings.py
/// reads the same files).
const TEST_CA: &str = include_str!("testdata/ca.pem");
const TEST_CLIENT_CERT: &str = include_str!("testdata/client.pem");
const TEST_CLIENT_KEY: &str = include_str!("testdata/client.key");

/// The body lines of [`TEST_CLIENT_KEY`], which no output may contain.
fn test_client_key_body() -> Vec<&'static str> {
    TEST_CLIENT_KEY.lines().filter(|line| !line.starts_with("-----")).collect()
}

/// A directory of this test's own, removed at the end.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("lmcache-resp-settings-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self, name: &str, contents: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path.display().to_string()
    }

    /// The CA as `name`, the client certificate and its key: their paths.
    fn certs(&self, name: &str) -> (String, String, String) {
        (self.file(name, TEST_CA), self.file("client.pem", TEST_CLIENT_CERT), self.file("client.key", TEST_CLIENT_KEY))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tls_options(s: &Settings) -> &crate::net::TlsOptions {
    s.tls.as_ref().expect("TLS is on").options()
}

fn env_of(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn tls_is_off_by_default_and_for_plaintext_urls() {
    for url in [None, Some("redis://h"), Some("resp://h:1"), Some("unix:///run/r.sock")] {
        let s = resolve(&[], url, &[]).unwrap();
        assert!(s.tls.is_none() && s.connect_options(s.endpoint()).tls.is_none(), "{url:?}");
    }
}

#[test]
fn rediss_and_ssl_true_turn_tls_on_and_reach_the_connect_options() {
    let dir = TempDir::new("on");
    let (ca, _, _) = dir.certs("ca.pem");
    for (url, given) in [
        (format!("rediss://h:6380?ssl_ca_certs={ca}"), vec![]),
        (format!("resps://h:6380?ssl_ca_certs={ca}"), vec![]),
        ("redis://h:6380".to_owned(), explicit(&[("ssl", Value::Bool(true)), ("ssl_ca_certs", text(&ca))])),
        (format!("redis://h:6380?ssl=true&ssl_ca_certs={ca}"), vec![]),
        (format!("redis://h:6380?ssl=false&ssl_ca_certs={ca}"), explicit(&[("ssl", Value::Bool(true))])),
    ] {
        let s = resolve(&given, Some(&url), &[]).unwrap();
        let options = tls_options(&s);
        assert_eq!(options.ca_certs.as_deref(), Some(std::path::Path::new(&ca)), "{url}");
        assert!(options.verify_certificate && options.check_hostname, "{url}: verified, hostname checked by default");
        assert!(s.warnings.is_empty(), "{url}");
        let connect = s.connect_options(s.endpoint());
        assert!(Arc::ptr_eq(connect.tls.as_ref().unwrap(), s.tls.as_ref().unwrap()), "one config, shared");
    }
    // Every seed of a cluster gets the same TLS.
    let s = resolve(&[], Some(&format!("rediss://a:1,b:2?cluster=true&ssl_ca_certs={ca}")), &[]).unwrap();
    assert!(s.endpoints.iter().all(|e| s.connect_options(e).tls.is_some()));
}

#[test]
fn tls_fields_resolve_explicit_over_query_over_env() {
    let dir = TempDir::new("precedence");
    let (arg_ca, cert, key) = dir.certs("arg-ca.pem");
    let url_ca = dir.file("url-ca.pem", TEST_CA);
    let env_ca = dir.file("env-ca.pem", TEST_CA);
    let env = env_of(&[
        ("LMCACHE_RESP_SSL_CA_CERTS", &env_ca),
        ("LMCACHE_RESP_SSL_CERTFILE", &cert),
        ("LMCACHE_RESP_SSL_KEYFILE", &key),
    ]);
    let url = format!("rediss://h?ssl_ca_certs={url_ca}");
    let path = |p: &str| Some(std::path::PathBuf::from(p));
    let s = resolve(&explicit(&[("ssl_ca_certs", text(&arg_ca))]), Some(&url), &env).unwrap();
    assert_eq!(tls_options(&s).ca_certs, path(&arg_ca));
    let s = resolve(&[], Some(&url), &env).unwrap();
    assert_eq!(tls_options(&s).ca_certs, path(&url_ca));
    let s = resolve(&[], Some("rediss://h"), &env).unwrap();
    let options = tls_options(&s);
    assert_eq!((&options.ca_certs, &options.certfile, &options.keyfile), (&path(&env_ca), &path(&cert), &path(&key)));
    // An empty value is "not set": the next source applies.
    let s = resolve(&explicit(&[("ssl_ca_certs", text(""))]), Some("rediss://h?ssl_ca_certs="), &env).unwrap();
    assert_eq!(tls_options(&s).ca_certs, path(&env_ca));
    // The other fields: explicit over the query, then the defaults.
    let url = format!("rediss://h?ssl_ca_certs={url_ca}&ssl_check_hostname=false&ssl_server_name=url.internal");
    let s = resolve(&[], Some(&url), &[]).unwrap();
    let options = tls_options(&s);
    assert_eq!((options.check_hostname, options.server_name.as_deref()), (false, Some("url.internal")));
    let given = explicit(&[("ssl_check_hostname", Value::Bool(true)), ("ssl_server_name", text("arg.internal"))]);
    let s = resolve(&given, Some(&url), &[]).unwrap();
    let options = tls_options(&s);
    assert_eq!((options.check_hostname, options.server_name.as_deref()), (true, Some("arg.internal")));
}

#[test]
fn mutual_tls_and_a_ca_directory() {
    let dir = TempDir::new("mtls");
    let (ca, cert, key) = dir.certs("ca.pem");
    let cas = TempDir::new("mtls-cas");
    cas.file("ca.pem", TEST_CA);
    let url = format!(
        "rediss://h:6380?ssl_ca_path={}&ssl_certfile={cert}&ssl_keyfile={key}&ssl_cert_reqs=required",
        cas.0.display()
    );
    let s = resolve(&[], Some(&url), &[]).unwrap();
    let options = tls_options(&s);
    assert_eq!(options.ca_path.as_deref(), Some(cas.0.as_path()));
    assert_eq!((options.certfile.is_some(), options.keyfile.is_some(), options.ca_certs.is_none()), (true, true, true));
    let given = explicit(&[("ssl_ca_certs", text(&ca)), ("ssl_certfile", text(&cert))]);
    let err = resolve(&given, Some("rediss://h"), &[]).unwrap_err();
    assert_eq!(err.message(), "ssl_certfile is set but ssl_keyfile is not: mutual TLS needs both");
}

#[test]
fn the_environment_s_tls_files_are_ignored_without_tls() {
    let env = env_of(&[
        ("LMCACHE_RESP_SSL_CA_CERTS", "/nonexistent/ca.pem"),
        ("LMCACHE_RESP_SSL_CERTFILE", "/nonexistent/client.pem"),
        ("LMCACHE_RESP_SSL_KEYFILE", "/nonexistent/client.key"),
    ]);
    for url in [None, Some("redis://h"), Some("unix:///run/r.sock")] {
        assert!(resolve(&[], url, &env).unwrap().tls.is_none(), "{url:?}");
    }
    // With TLS on they apply, and a bad one names the variable it came from.
    let err = resolve(&[], Some("rediss://h"), &env).unwrap_err();
    assert!(err.message().contains("/nonexistent/") && err.message().contains("(from LMCACHE_RESP_SSL_"), "{err}");
    let env = env_of(&[("LMCACHE_RESP_SSL_CA_CERTS", "/nonexistent/ca.pem")]);
    let err = resolve(&explicit(&[("ssl_cert_reqs", text("required"))]), Some("rediss://h"), &env).unwrap_err();
    assert!(err.message().starts_with("ssl_ca_certs /nonexistent/ca.pem: "), "{err}");
    assert!(err.message().ends_with(" (from LMCACHE_RESP_SSL_CA_CERTS)"), "{err}");
}

#[test]
fn tls_is_never_turned_off_over_a_source_that_turned_it_on() {
    let no = explicit(&[("ssl", Value::Bool(false))]);
    for (given, url, message) in [
        (&no, "rediss://h", "ssl=False contradicts the URL, which asks for TLS (its rediss:// scheme)"),
        (&no, "resps://h", "ssl=False contradicts the URL, which asks for TLS (its rediss:// scheme)"),
        (&no, "redis://h?ssl=true", "ssl=False contradicts the URL, which asks for TLS (ssl=true in its query)"),
        (&vec![], "rediss://h?ssl=false", "ssl=false in the URL's query contradicts its rediss:// scheme"),
        (&vec![], "redis://h?ssl=maybe", "ssl must be true or false, got 'maybe'"),
    ] {
        let err = resolve(given, Some(url), &[]).unwrap_err();
        assert!(err.message().starts_with(message), "{url}: {err}");
        assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
    }
    // ssl=False with a plaintext URL is just plaintext.
    assert!(resolve(&no, Some("redis://h"), &[]).unwrap().tls.is_none());
}

#[test]
fn a_tls_field_without_tls_is_an_error_naming_it() {
    let err = resolve(&explicit(&[("ssl_ca_certs", text("/etc/ca.pem"))]), Some("redis://h"), &[]).unwrap_err();
    assert_eq!(
        err.message(),
        "ssl_ca_certs is set but TLS is off: use a rediss:// URL or ssl=True (nothing would be encrypted)"
    );
    let err = resolve(&[], Some("redis://h?ssl_check_hostname=false&ssl_server_name=x"), &[]).unwrap_err();
    assert!(err.message().starts_with("ssl_check_hostname, ssl_server_name are set but TLS is off"), "{err}");
    let given = explicit(&[("ssl", Value::Bool(false)), ("ssl_cert_reqs", text("none"))]);
    assert!(resolve(&given, None, &[]).unwrap_err().message().starts_with("ssl_cert_reqs is set but TLS is off"));
    let err = resolve(&explicit(&[("ssl_ca_certz", text("/x"))]), None, &[]).unwrap_err();
    assert!(err.message().contains("'ssl_ca_certz' (did you mean 'ssl_ca_certs'?)"), "{err}");
    let err = resolve(&[], Some("rediss://h?ssl_keyfil=/x"), &[]).unwrap_err();
    assert!(err.message().contains("'ssl_keyfil' (did you mean 'ssl_keyfile'?)"), "{err}");
}

#[test]
fn cert_reqs_none_turns_verification_off_with_a_warning() {
    for value in [text("none"), text("NONE"), text("CERT_NONE"), Value::Int(0)] {
        let s = resolve(&explicit(&[("ssl_cert_reqs", value.clone())]), Some("rediss://h"), &[]).unwrap();
        let options = tls_options(&s);
        assert!(!options.verify_certificate && !options.check_hostname, "{value}");
        assert!(s.tls.as_ref().unwrap().verification_off());
        assert_eq!(s.warnings, vec![tls::VERIFICATION_OFF_WARNING.to_owned()]);
        assert!(s.warnings[0].starts_with("TLS certificate verification is off (ssl_cert_reqs='none')"));
    }
    let s = resolve(&[], Some("rediss://h?ssl_cert_reqs=none&ssl_check_hostname=false"), &[]).unwrap();
    assert!(!tls_options(&s).verify_certificate);
    let given = explicit(&[("ssl_cert_reqs", text("none")), ("ssl_check_hostname", Value::Bool(true))]);
    let err = resolve(&given, Some("rediss://h"), &[]).unwrap_err();
    assert!(err.message().starts_with("ssl_check_hostname=True needs the certificate verified"), "{err}");
    let dir = TempDir::new("reqs");
    let (ca, _, _) = dir.certs("ca.pem");
    for value in [text("required"), text("optional"), text("CERT_REQUIRED"), Value::Int(2), Value::Int(1)] {
        let given = explicit(&[("ssl_cert_reqs", value.clone()), ("ssl_ca_certs", text(&ca))]);
        let s = resolve(&given, Some("rediss://h"), &[]).unwrap();
        assert!(tls_options(&s).verify_certificate && s.warnings.is_empty(), "{value}");
    }
    for value in [text("sometimes"), Value::Int(3), Value::Bool(false)] {
        let err = resolve(&explicit(&[("ssl_cert_reqs", value.clone())]), Some("rediss://h"), &[]).unwrap_err();
        let expected = format!(
            "ssl_cert_reqs must be 'required' (the default), 'optional' (the same, for a client) or 'none' \
             (no verification: test rigs only), got {value}"
        );
        assert_eq!(err.message(), expected);
    }
}

#[test]
fn bad_tls_values_name_the_setting() {
    let dir = TempDir::new("bad");
    let (ca, _, _) = dir.certs("ca.pem");
    let not_a_cert = dir.file("notes.txt", "hello\n");
    let on = |pairs: &[(&str, Value)]| {
        let mut given = explicit(pairs);
        given.push(("ssl".into(), Value::Bool(true)));
        resolve(&given, Some("redis://h"), &[]).unwrap_err().message().to_owned()
    };
    let message = on(&[("ssl_ca_certs", text("/nonexistent/ca.pem"))]);
    assert!(message.starts_with("ssl_ca_certs /nonexistent/ca.pem: "), "{message}");
    let message = on(&[("ssl_ca_certs", text(&not_a_cert))]);
    assert!(message.starts_with(&format!("ssl_ca_certs {not_a_cert}: no PEM certificate")), "{message}");
    let message = on(&[("ssl_ca_path", text(&ca))]);
    assert_eq!(message, format!("ssl_ca_path {ca} is not a directory"));
    let message =
        on(&[("ssl_ca_certs", text(&ca)), ("ssl_certfile", text(&ca)), ("ssl_keyfile", text("/nonexistent/k"))]);
    assert!(message.starts_with("ssl_keyfile /nonexistent/k: "), "{message}");
    assert_eq!(on(&[("ssl_ca_certs", Value::Int(5))]), "ssl_ca_certs must be a str, not int");
    assert_eq!(
        on(&[("ssl_check_hostname", text("perhaps"))]),
        "ssl_check_hostname must be true or false, got 'perhaps'"
    );
    assert_eq!(
        on(&[("ssl_server_name", text("not a name!"))]),
        "ssl_server_name must be a DNS name or an IP address, got 'not a name!'"
    );
    let message = on(&[("unix_path", text("/run/r.sock"))]);
    assert!(message.starts_with("TLS is on but the server is the Unix socket /run/r.sock"), "{message}");
    // redis-py's key passphrase is refused with what to do, never shown.
    for (given, url) in
        [(explicit(&[("ssl_password", text("hunter2"))]), None), (vec![], Some("rediss://h?ssl_password=hunter2"))]
    {
        let err = resolve(&given, url, &[]).unwrap_err();
        assert!(err.message().starts_with("ssl_password (a passphrase for ssl_keyfile) is not supported"), "{err}");
        assert!(!err.message().contains("hunter2"));
    }
}

#[test]
fn tls_settings_print_paths_and_switches_never_key_material() {
    let dir = TempDir::new("print");
    let (ca, cert, key) = dir.certs("ca.pem");
    let given = explicit(&[
        ("password", text("hunter2")),
        ("ssl_ca_certs", text(&ca)),
        ("ssl_certfile", text(&cert)),
        ("ssl_keyfile", text(&key)),
    ]);
    let s = resolve(&given, Some("rediss://h:6380"), &[]).unwrap();
    let shown = format!("{s} | {s:?} | {:?}", s.connect_options(s.endpoint()));
    for line in test_client_key_body() {
        assert!(!shown.contains(line), "key material in {shown}");
    }
    assert!(!shown.contains("hunter2") && !shown.contains("MIIB"), "{shown}");
    assert!(shown.contains(&format!("tls=on (ca={ca}, client cert={cert}, hostname checked)")), "{s}");
    let s = resolve(
        &explicit(&[("ssl_cert_reqs", text("none")), ("ssl_server_name", text("r.internal"))]),
        Some("rediss://h"),
        &[],
    )
    .unwrap();
    assert!(s.to_string().contains("tls=on (certificate NOT verified, server_name=r.internal)"), "{s}");
    let s = resolve(&[], Some(&format!("rediss://h?ssl_ca_certs={ca}&ssl_check_hostname=0")), &[]).unwrap();
    assert!(s.to_string().contains(&format!("tls=on (ca={ca}, hostname NOT checked)")), "{s}");
    assert!(!resolve(&[], None, &[]).unwrap().to_string().contains("tls"));
}
