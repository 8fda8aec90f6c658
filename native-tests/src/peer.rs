//! What the tests' scripted peers (the hostile servers in `hostile_peer.rs`,
//! `subscription_flood.rs` and `cluster_warm_up.rs`, which no real Redis could play) and their
//! checks share: where a RESP command ends in what arrived, a listener that hands each command
//! to a script, the answers to a client's handshake, and what `/proc` says about this process.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

/// Serves every connection to `listener`, each on a thread of its own: `answer` gets each
/// whole command as it arrives, with the stream to answer on, and says whether to go on.
pub fn serve<F>(listener: TcpListener, answer: F)
where
    F: Fn(&mut TcpStream, &[u8]) -> bool + Clone + Send + 'static,
{
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let answer = answer.clone();
            std::thread::spawn(move || serve_one(stream, answer));
        }
    });
}

fn serve_one(mut stream: TcpStream, answer: impl Fn(&mut TcpStream, &[u8]) -> bool) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let Ok(n) = stream.read(&mut buf) else { return };
        if n == 0 {
            return;
        }
        seen.extend_from_slice(&buf[..n]);
        while let Some(end) = command_end(&seen) {
            let command: Vec<u8> = seen.drain(..end).collect();
            if !answer(&mut stream, &command) {
                return;
            }
        }
    }
}

/// Where the first whole command of `data` (a RESP array of bulk strings) ends.
fn command_end(data: &[u8]) -> Option<usize> {
    let lines: Vec<usize> = data.windows(2).enumerate().filter(|(_, w)| w == b"\r\n").map(|(i, _)| i + 2).collect();
    let header = std::str::from_utf8(data.get(1..lines.first()? - 2)?).ok()?;
    let args: usize = header.parse().ok()?;
    lines.get(2 * args).copied()
}

/// Answers `command` if it is part of the client's handshake, as a server before Redis 6 would
/// (PING with PONG, HELLO with an unknown-command error): `Some(whether the stream took it)`;
/// None for any other command, which the peer's script answers.
pub fn answer_handshake(stream: &mut TcpStream, command: &[u8]) -> Option<bool> {
    let reply: &[u8] = if contains(command, b"PING") {
        b"+PONG\r\n"
    } else if contains(command, b"HELLO") {
        b"-ERR unknown command 'HELLO'\r\n"
    } else {
        return None;
    };
    Some(stream.write_all(reply).is_ok())
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A number field of `/proc/self/status` (`Threads:`, `VmHWM:` in KiB, ...).
pub fn status_field(name: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} in /proc/self/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// This process's peak resident memory, in bytes.
pub fn peak_rss() -> u64 {
    status_field("VmHWM:") * 1024
}
