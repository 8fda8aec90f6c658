//! A TCP proxy in front of a real redis-server that can break a connection in the middle of a
//! reply (the network fault, injected between a real client and a real server), run a hook
//! just before a chosen command reaches the server (a writer that strikes between two commands
//! of a client, deterministically), hold a chosen command on its way (a request the client has
//! sent that the server has not seen), rewrite the TLS records a server sends on chosen
//! connections (a man in the middle that flips, forges or injects), and hold back a server's
//! first bytes (a slow server).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Hook = Box<dyn FnOnce() + Send>;

/// Given a TLS record the server sent and its index on the connection (from 0), the bytes to
/// forward instead.
pub type RecordRewrite = Arc<dyn Fn(usize, &[u8]) -> Vec<u8> + Send + Sync>;

/// Armed: once a connection has passed `bytes` more reply bytes to its client, run `hook` and
/// close that connection.
struct Cut {
    bytes: u64,
    hook: Hook,
}

/// Armed: before forwarding the chunk that holds the `nth` (counting from 1) occurrence of
/// `pattern` from a client, run `hook`; with `every`, again before each later occurrence.
struct Watch {
    pattern: &'static [u8],
    nth: usize,
    every: bool,
    hook: Box<dyn FnMut() + Send>,
}

/// Armed: the chunk from a client that holds the next occurrence of `pattern`, and everything
/// its connection sends after it, wait until `released`; then they go on in one write.
struct Hold {
    pattern: &'static [u8],
    released: Arc<AtomicBool>,
}

/// A command held on its way to the server (see [`CuttingProxy::hold_command`]); released when
/// told, or when dropped.
pub struct Held(Arc<AtomicBool>);

impl Held {
    /// Lets the held command, and what its connection sent after it, go on to the server.
    pub fn release(&self) {
        self.0.store(true, Ordering::Release);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.release();
    }
}

#[derive(Default)]
struct State {
    armed: Option<Cut>,
    cuts: usize,
    watch: Option<Watch>,
    hold: Option<Hold>,
    /// Occurrences of each counted pattern seen from clients so far.
    counted: Vec<(&'static [u8], usize)>,
    /// Connections accepted so far.
    connections: usize,
    /// The next this-many connections have their server's records rewritten.
    rewrite: Option<(usize, RecordRewrite)>,
    /// How long every connection's first bytes from the server are held back.
    first_bytes_delay: Duration,
}

/// What one connection does besides forwarding.
struct Faults {
    rewrite: Option<RecordRewrite>,
    first_bytes_delay: Duration,
}

pub struct CuttingProxy {
    port: u16,
    state: Arc<Mutex<State>>,
}

impl CuttingProxy {
    /// Listens on a free port and forwards every connection to `127.0.0.1:target_port`.
    pub fn start(target_port: u16) -> CuttingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)) else { continue };
                let faults = {
                    let mut guard = shared.lock().unwrap();
                    guard.connections += 1;
                    let rewrite = match guard.rewrite.as_mut() {
                        Some((left, rewrite)) if *left > 0 => {
                            *left -= 1;
                            Some(rewrite.clone())
                        }
                        _ => None,
                    };
                    Faults { rewrite, first_bytes_delay: guard.first_bytes_delay }
                };
                forward(client, server, shared.clone(), faults);
            }
        });
        CuttingProxy { port, state }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The next connection to pass `bytes` more reply bytes runs `hook` (the client has then
    /// received exactly `bytes` of them) and is closed.
    pub fn cut_replies_after(&self, bytes: u64, hook: impl FnOnce() + Send + 'static) {
        self.state.lock().unwrap().armed = Some(Cut { bytes, hook: Box::new(hook) });
    }

    /// Connections cut so far.
    pub fn cuts(&self) -> usize {
        self.state.lock().unwrap().cuts
    }

    /// Runs `hook` just before the `nth` (from 1) occurrence of `pattern` in what clients send
    /// reaches the server; with `every`, before each later one too.
    pub fn before_command(&self, pattern: &'static [u8], nth: usize, every: bool, hook: impl FnMut() + Send + 'static) {
        self.state.lock().unwrap().watch = Some(Watch { pattern, nth, every, hook: Box::new(hook) });
    }

    /// Holds the next chunk a client sends that holds `pattern` (and everything after it on that
    /// connection) until the returned [`Held`] is released: the client has sent it, the server
    /// has not seen it. Released, all of it reaches the server in one write.
    pub fn hold_command(&self, pattern: &'static [u8]) -> Held {
        let released = Arc::new(AtomicBool::new(false));
        self.state.lock().unwrap().hold = Some(Hold { pattern, released: released.clone() });
        Held(released)
    }

    /// Counts occurrences of `pattern` in what clients send from now on.
    pub fn count_commands(&self, pattern: &'static [u8]) {
        self.state.lock().unwrap().counted.push((pattern, 0));
    }

    /// Occurrences of `pattern` sent by clients since [`CuttingProxy::count_commands`].
    pub fn count(&self, pattern: &'static [u8]) -> usize {
        self.state.lock().unwrap().counted.iter().find(|(p, _)| *p == pattern).map_or(0, |(_, n)| *n)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.state.lock().unwrap().connections
    }

    /// The next `connections` connections forward each TLS record the server sends through
    /// `rewrite` (see [`RecordRewrite`]); later ones are left alone.
    pub fn rewrite_server_records(
        &self,
        connections: usize,
        rewrite: impl Fn(usize, &[u8]) -> Vec<u8> + Send + Sync + 'static,
    ) {
        self.state.lock().unwrap().rewrite = Some((connections, Arc::new(rewrite)));
    }

    /// Every connection from now on receives the server's first bytes `delay` late.
    pub fn delay_server_first_bytes(&self, delay: Duration) {
        self.state.lock().unwrap().first_bytes_delay = delay;
    }
}

/// Whole TLS records taken from the front of `pending` (a record's length is in its header).
fn whole_records(pending: &mut Vec<u8>) -> Vec<Vec<u8>> {
    let mut records = Vec::new();
    while pending.len() >= 5 {
        let len = 5 + u16::from_be_bytes([pending[3], pending[4]]) as usize;
        if pending.len() < len {
            break;
        }
        records.push(pending.drain(..len).collect());
    }
    records
}

/// Counts patterns in what a client sends, and runs the armed hook when its command comes
/// (the commands tests watch for are short and not split across reads on loopback). Returns
/// the flag to wait for when the chunk is to be held.
fn before_forwarding(state: &Mutex<State>, chunk: &[u8]) -> Option<Arc<AtomicBool>> {
    let occurrences = |pattern: &[u8]| chunk.windows(pattern.len()).filter(|w| *w == pattern).count();
    let mut guard = state.lock().unwrap();
    for (pattern, count) in &mut guard.counted {
        *count += occurrences(pattern);
    }
    let held = match &guard.hold {
        Some(hold) if occurrences(hold.pattern) > 0 => guard.hold.take().map(|hold| hold.released),
        _ => None,
    };
    let Some(watch) = guard.watch.as_mut() else { return held };
    let seen = occurrences(watch.pattern);
    if seen == 0 {
        return held;
    }
    let due = watch.nth <= seen;
    watch.nth = watch.nth.saturating_sub(seen);
    if due {
        (watch.hook)();
        if watch.every {
            watch.nth = 1;
        } else {
            guard.watch = None;
        }
    }
    held
}

fn forward(client: TcpStream, server: TcpStream, state: Arc<Mutex<State>>, faults: Faults) {
    let (mut client_in, mut server_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let commands = state.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = client_in.read(&mut buf) {
            let mut chunk = buf[..n].to_vec();
            if let Some(released) = before_forwarding(&commands, &chunk) {
                while !released.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                // What the client sent meanwhile goes with it, in one write: the server reads
                // and answers it all at once.
                client_in.set_read_timeout(Some(Duration::from_millis(20))).ok();
                while let Ok(more @ 1..) = client_in.read(&mut buf) {
                    chunk.extend_from_slice(&buf[..more]);
                }
                client_in.set_read_timeout(None).ok();
            }
            if server_out.write_all(&chunk).is_err() {
                break;
            }
        }
        server_out.shutdown(Shutdown::Both).ok();
    });
    let (mut server_in, mut client_out) = (server, client);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let (mut first, mut pending, mut records) = (true, Vec::new(), 0);
        while let Ok(n @ 1..) = server_in.read(&mut buf) {
            if std::mem::take(&mut first) {
                std::thread::sleep(faults.first_bytes_delay);
            }
            let rewritten;
            let data = match &faults.rewrite {
                None => &buf[..n],
                Some(rewrite) => {
                    pending.extend_from_slice(&buf[..n]);
                    rewritten = whole_records(&mut pending)
                        .iter()
                        .flat_map(|record| {
                            records += 1;
                            rewrite(records - 1, record)
                        })
                        .collect::<Vec<u8>>();
                    &rewritten[..]
                }
            };
            let n = data.len();
            let mut guard = state.lock().unwrap();
            let cut = guard.armed.as_mut().map(|armed| {
                let pass = (n as u64).min(armed.bytes) as usize;
                armed.bytes -= pass as u64;
                (pass, armed.bytes == 0 && pass < n)
            });
            match cut {
                Some((pass, true)) => {
                    let Cut { hook, .. } = guard.armed.take().unwrap();
                    guard.cuts += 1;
                    drop(guard);
                    client_out.write_all(&data[..pass]).ok();
                    hook();
                    break;
                }
                _ => {
                    drop(guard);
                    if client_out.write_all(data).is_err() {
                        break;
                    }
                }
            }
        }
        client_out.shutdown(Shutdown::Both).ok();
        server_in.shutdown(Shutdown::Both).ok();
    });
}
