//! Whether a port is a plaintext Redis, asked on a second connection so that the TLS one is
//! never touched: nothing but TLS is ever written to a TLS connection, so a TLS server that
//! answers late (within the connect timeout) is never harmed.
//!
//! A plaintext Redis or Valkey reads a TLS hello as the start of an inline command whose end of
//! line never comes, and waits in silence. So when a TLS handshake has heard nothing by half
//! its connect timeout (`ConnCore::take_plaintext_check`), or when the server's first bytes on
//! it are plaintext (a plaintext port, or bytes injected on the path), the driver opens a
//! second connection to the same address and sends `PING\r\n`: a plaintext server answers
//! `+PONG`, `-NOAUTH ...`, `-DENIED ...` at once; a TLS server answers with a TLS alert or
//! closes. The socket is not in the poll set: the driver looks at it every [`POLL_EVERY`]
//! while the handshake lasts.

use crate::net::tls::failure::plaintext_reply;
use crate::net::{Address, IoVecs, Stream};
use std::io;
use std::time::Duration;

/// What the probe sends: a command every Redis answers, with or without credentials.
const PING: &[u8] = b"PING\r\n";
/// The reply shown: the first line, at most this long.
const SHOWN: usize = 48;
/// How often the driver looks at the probe's socket.
pub(crate) const POLL_EVERY: Duration = Duration::from_millis(10);

/// What the port answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A plaintext reply, shown (escaped).
    Plaintext(String),
    /// TLS, a close or a reset: not a plaintext server.
    NotPlaintext,
}

/// What a reply so far says, once it says enough; `ended`: the server closed after it.
pub(crate) fn judge(reply: &[u8], ended: bool) -> Option<Verdict> {
    if reply.is_empty() {
        return ended.then_some(Verdict::NotPlaintext);
    }
    let Some(shown) = plaintext_reply(&reply[..reply.len().min(SHOWN)]) else { return Some(Verdict::NotPlaintext) };
    // Plaintext from its first byte: show its first line whole.
    let line_ended = reply.windows(2).any(|w| w == b"\r\n");
    (line_ended || ended || reply.len() >= SHOWN).then_some(Verdict::Plaintext(shown))
}

/// A `PING` on a second connection to the address the TLS handshake waits on.
pub(crate) struct PlaintextCheck {
    stream: Stream,
    connected: bool,
    sent: usize,
    reply: Vec<u8>,
    verdict: Option<Verdict>,
}

impl PlaintextCheck {
    /// Starts connecting to `address`.
    pub(crate) fn start(address: &Address) -> io::Result<PlaintextCheck> {
        let (stream, connected) = Stream::start_connect(address)?;
        Ok(PlaintextCheck { stream, connected, sent: 0, reply: Vec::new(), verdict: None })
    }

    /// The verdict, once there is one (non-blocking).
    pub(crate) fn poll(&mut self) -> Option<Verdict> {
        if self.verdict.is_none() {
            self.verdict = self.step().unwrap_or(Some(Verdict::NotPlaintext));
        }
        self.verdict.clone()
    }

    /// As far as the socket goes now; an error (refused, reset) is no plaintext server.
    fn step(&mut self) -> io::Result<Option<Verdict>> {
        if !self.connected {
            match self.stream.finish_connect() {
                Ok(()) => self.connected = true,
                Err(err) if err.raw_os_error() == Some(libc::ENOTCONN) => return Ok(None),
                Err(err) => return Err(err),
            }
        }
        while self.sent < PING.len() {
            let mut iov = IoVecs::<1>::new();
            iov.push_slice(&PING[self.sent..]);
            match self.stream.send(iov.as_slice()) {
                Ok(n) => self.sent += n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(err) => return Err(err),
            }
        }
        let mut buf = [0u8; SHOWN];
        loop {
            match self.stream.recv(&mut buf) {
                Ok(0) => return Ok(judge(&self.reply, true)),
                Ok(n) => {
                    let room = SHOWN.saturating_sub(self.reply.len());
                    self.reply.extend_from_slice(&buf[..n.min(room)]);
                    if let Some(verdict) = judge(&self.reply, false) {
                        return Ok(Some(verdict));
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(err) => return Err(err),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plaintext_reply_is_known_by_its_first_line_and_tls_by_its_first_byte() {
        assert_eq!(judge(b"+PONG\r\n", false), Some(Verdict::Plaintext("+PONG\\r\\n".into())));
        assert_eq!(
            judge(b"-NOAUTH Authentication required.\r\n", false),
            Some(Verdict::Plaintext("-NOAUTH Authentication required.\\r\\n".into()))
        );
        assert_eq!(judge(b"+PO", false), None, "the rest of the line first");
        assert_eq!(judge(b"+PO", true), Some(Verdict::Plaintext("+PO".into())));
        // A TLS alert (OpenSSL's answer to a record header it cannot read).
        assert_eq!(judge(&[21, 3, 3, 0, 2, 2, 70], false), Some(Verdict::NotPlaintext));
        assert_eq!(judge(&[21], false), Some(Verdict::NotPlaintext));
        assert_eq!(judge(b"", false), None);
        assert_eq!(judge(b"", true), Some(Verdict::NotPlaintext), "closed without a word");
        let long = [b'-'; 100];
        assert_eq!(judge(&long[..SHOWN], false), Some(Verdict::Plaintext("-".repeat(SHOWN))));
    }

    #[test]
    fn a_listener_that_answers_pong_is_plaintext_and_one_that_closes_is_not() {
        use std::io::{Read, Write};
        use std::net::TcpListener;
        for (answer, expected) in [
            (&b"+PONG\r\n"[..], Verdict::Plaintext("+PONG\\r\\n".into())),
            (&[21u8, 3, 3, 0, 2, 2, 70][..], Verdict::NotPlaintext),
            (&b""[..], Verdict::NotPlaintext),
        ] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let address = Address::Tcp(listener.local_addr().unwrap());
            let server = std::thread::spawn(move || {
                let (mut peer, _) = listener.accept().unwrap();
                let mut got = [0u8; 6];
                peer.read_exact(&mut got).unwrap();
                peer.write_all(answer).unwrap();
                got
            });
            let mut check = PlaintextCheck::start(&address).unwrap();
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            let verdict = loop {
                if let Some(verdict) = check.poll() {
                    break verdict;
                }
                assert!(std::time::Instant::now() < deadline, "no verdict");
                std::thread::sleep(Duration::from_millis(1));
            };
            assert_eq!(verdict, expected);
            assert_eq!(&server.join().unwrap(), PING);
        }
    }
}
