//! A real, throwaway `redis-server` for tests: a free port, a temp dir, no persistence.
//! Started through `redis-test-server.sh`, the same script the Python tests use.

pub mod proxy;

use lmcache_resp_core::Secret;
use lmcache_resp_core::net::{ConnectOptions, Endpoint};
use lmcache_resp_core::settings::Settings;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Variants of the server's configuration.
#[derive(Clone, Debug, Default)]
pub struct ServerConfig {
    /// `requirepass`: the default user's password.
    pub password: Option<String>,
    /// An ACL user `(name, password)` with full rights.
    pub acl_user: Option<(String, String)>,
    /// Also listen on a Unix socket in the temp dir.
    pub unix_socket: bool,
}

pub struct RedisServer {
    config: ServerConfig,
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("redis-test-server.sh")
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
        let mut server = RedisServer { config, child: None, port: 0, dir };
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
        let mut command = Command::new("bash");
        command.arg(script()).arg(self.dir.path()).arg(self.port.to_string());
        if let Some(password) = &self.config.password {
            command.args(["--password", password]);
        }
        if let Some((name, password)) = &self.config.acl_user {
            command.args(["--acl-user", &format!("{name}:{password}")]);
        }
        if self.config.unix_socket {
            command.arg("--unix-socket").arg(self.unix_socket_path());
        }
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("run redis-test-server.sh");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut stderr = String::new();
                child.stderr.take().unwrap().read_to_string(&mut stderr).ok();
                let log = std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
                return Err(format!("exit status {status}\n{stderr}\n{log}"));
            }
            if self.answers_ping() {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() > deadline {
                child.kill().ok();
                return Err("redis-server did not answer PING within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
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

    /// Settings for this server, with the credentials it was configured with.
    pub fn settings(&self) -> Settings {
        let mut settings = Settings::new(self.endpoint());
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
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
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

    /// A field of `INFO stats`.
    pub fn stat_as(&self, password: Option<&str>, field: &str) -> u64 {
        let reply = self.raw_command_as(password, &[b"INFO", b"stats"]);
        let text = String::from_utf8_lossy(&reply);
        let line = text.lines().find(|l| l.starts_with(&format!("{field}:"))).unwrap_or_else(|| panic!("no {field}"));
        line.split(':').nth(1).unwrap().trim().parse().unwrap()
    }
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
