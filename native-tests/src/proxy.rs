//! A TCP proxy in front of a real redis-server that can break a connection in the middle of a
//! reply: the network fault, injected between a real client and a real server.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

type Hook = Box<dyn FnOnce() + Send>;

/// Armed: once a connection has passed `bytes` more reply bytes to its client, run `hook` and
/// close that connection.
struct Cut {
    bytes: u64,
    hook: Hook,
}

#[derive(Default)]
struct State {
    armed: Option<Cut>,
    cuts: usize,
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
                forward(client, server, shared.clone());
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
}

fn forward(client: TcpStream, server: TcpStream, state: Arc<Mutex<State>>) {
    let (mut client_in, mut server_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = client_in.read(&mut buf) {
            if server_out.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        server_out.shutdown(Shutdown::Both).ok();
    });
    let (mut server_in, mut client_out) = (server, client);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = server_in.read(&mut buf) {
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
                    client_out.write_all(&buf[..pass]).ok();
                    hook();
                    break;
                }
                _ => {
                    drop(guard);
                    if client_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        client_out.shutdown(Shutdown::Both).ok();
        server_in.shutdown(Shutdown::Both).ok();
    });
}
