//! The control socket between a bridge and a client: length-prefixed frames, and file
//! descriptors passed alongside a frame (SCM_RIGHTS).

use super::wire::{Control, MAX_CLIENT_FRAME, MAX_FRAME};
use crate::error::{Error, ErrorKind, Result};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
    recvmsg, sendmsg,
};
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// The most descriptors one frame carries (the handshake's two, with room to spare).
const MAX_FDS: usize = 4;

/// Sends `message`, with `fds` attached to its first byte.
pub fn send(stream: &UnixStream, message: &Control, fds: &[BorrowedFd<'_>]) -> Result<()> {
    let frame = message.encode();
    if fds.is_empty() {
        return (&*stream).write_all(&frame).map_err(broken);
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(Error::invalid("too many descriptors for one frame"));
    }
    let sent = sendmsg(stream, &[IoSlice::new(&frame)], &mut control, SendFlags::NOSIGNAL).map_err(broken)?;
    (&*stream).write_all(&frame[sent..]).map_err(broken)
}

/// Receives one frame and any descriptors sent with it. `Ok(None)`: the peer closed the
/// socket between frames.
pub fn receive(stream: &UnixStream) -> Result<Option<(Control, Vec<OwnedFd>)>> {
    let mut prefix = [0u8; 4];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got =
        recvmsg(stream, &mut [IoSliceMut::new(&mut prefix)], &mut control, RecvFlags::CMSG_CLOEXEC).map_err(broken)?;
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    match got.bytes {
        0 => return Ok(None),
        4 => {}
        n => (&*stream).read_exact(&mut prefix[n..]).map_err(broken)?,
    }
    let len = u32::from_le_bytes(prefix) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(protocol(format!("a control frame of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    (&*stream).read_exact(&mut body).map_err(broken)?;
    let message = Control::decode(&body).map_err(protocol)?;
    Ok(Some((message, fds)))
}

/// A request and its answer; a `Failed` answer is its error.
pub fn call(stream: &UnixStream, request: &Control) -> Result<Control> {
    send(stream, request, &[])?;
    match receive(stream)? {
        Some((Control::Failed { kind, message }, _)) => Err(super::wire::failed_error(kind, message)),
        Some((reply, _)) => Ok(reply),
        None => Err(lost("the bridge closed the connection".into())),
    }
}

/// The socket failed; a timeout (the peer is stopped or wedged) is said as such, since the
/// OS's words for it ("resource temporarily unavailable") would not tell.
fn broken(err: impl Into<std::io::Error>) -> Error {
    let err = err.into();
    match err.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::new(
            ErrorKind::Timeout,
            "the bridge connection timed out: no answer within the socket's timeout: the other side is stopped or \
             overloaded",
        ),
        _ => lost(err.to_string()),
    }
}

/// The [`ErrorKind::Connection`] error for a control connection that broke: `why` says how.
pub fn lost(why: String) -> Error {
    Error::new(ErrorKind::Connection, format!("the bridge connection is lost: {why}"))
}

fn protocol(why: String) -> Error {
    Error::new(ErrorKind::Protocol, format!("bridge protocol: {why}"))
}

/// A client's frames as the bridge reads them, without blocking: bytes are read as they
/// arrive (a slow or trickling peer costs only itself), a frame longer than
/// [`MAX_CLIENT_FRAME`] is refused before it is buffered, and frames are taken one at a time,
/// so the bridge reads no more of a client than it is ready to answer.
#[derive(Default)]
pub struct Inbox {
    buf: Vec<u8>,
    /// Where the next frame starts in `buf`.
    at: usize,
}

/// What reading a client's socket gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// The socket is open (bytes may or may not have come).
    Open,
    /// The peer closed its end.
    Closed,
}

impl Inbox {
    /// Reads what the socket holds now, at most 64 KiB per call. Descriptors a client
    /// attaches are discarded (read(2) closes them).
    pub fn read_from(&mut self, stream: &UnixStream) -> Result<Received> {
        if self.at > 0 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        let mut chunk = [0u8; 64 * 1024];
        match (&*stream).read(&mut chunk) {
            Ok(0) => return Ok(Received::Closed),
            Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(broken(err)),
        }
        Ok(Received::Open)
    }

    /// The next complete frame, if one is buffered; an error for a frame's length past the cap
    /// (as soon as its prefix is in) or a frame that does not decode.
    pub fn next_frame(&mut self) -> Result<Option<Control>> {
        let Some(len) = self.frame_len()? else { return Ok(None) };
        let body = &self.buf[self.at + 4..];
        if body.len() < len {
            return Ok(None);
        }
        let message = Control::decode(&body[..len]).map_err(protocol)?;
        self.at += 4 + len;
        Ok(Some(message))
    }

    /// Whether a whole frame (or a length past the cap, an error to report) is buffered.
    pub fn has_frame(&self) -> bool {
        match self.frame_len() {
            Ok(Some(len)) => self.buf.len() - self.at >= 4 + len,
            Ok(None) => false,
            Err(_) => true,
        }
    }

    fn frame_len(&self) -> Result<Option<usize>> {
        let Some(prefix) = self.buf.get(self.at..self.at + 4) else { return Ok(None) };
        let len = u32::from_le_bytes(prefix.try_into().expect("4 bytes")) as usize;
        if len == 0 || len > MAX_CLIENT_FRAME {
            return Err(protocol(format!("a control frame of {len} bytes (at most {MAX_CLIENT_FRAME})")));
        }
        Ok(Some(len))
    }

    /// Bytes held now (frames not yet taken, and an unfinished one).
    #[cfg(test)]
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn frames_and_descriptors_cross_a_socket_pair() {
        let (a, b) = UnixStream::pair().unwrap();
        let memfd = rustix::fs::memfd_create("bridge-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::io::write(&memfd, b"through the socket").unwrap();
        send(&a, &Control::Allocate { count: 3 }, &[memfd.as_fd()]).unwrap();
        send(&a, &Control::Stats, &[]).unwrap();
        let (message, fds) = receive(&b).unwrap().unwrap();
        assert_eq!(message, Control::Allocate { count: 3 });
        assert_eq!(fds.len(), 1);
        let mut text = [0u8; 18];
        rustix::io::pread(&fds[0], &mut text, 0).unwrap();
        assert_eq!(&text, b"through the socket");
        let (message, fds) = receive(&b).unwrap().unwrap();
        assert_eq!(message, Control::Stats);
        assert!(fds.is_empty());
        drop(a);
        assert!(receive(&b).unwrap().is_none(), "a closed peer reads as None");
    }

    #[test]
    fn the_inbox_assembles_trickled_frames_and_refuses_oversized_ones() {
        let (a, b) = UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let mut inbox = Inbox::default();
        let frame = Control::Allocate { count: 9 }.encode();
        for byte in &frame {
            assert_eq!(inbox.read_from(&b).unwrap(), Received::Open);
            assert!(!inbox.has_frame());
            assert_eq!(inbox.next_frame().unwrap(), None);
            (&a).write_all(std::slice::from_ref(byte)).unwrap();
        }
        inbox.read_from(&b).unwrap();
        assert!(inbox.has_frame());
        assert_eq!(inbox.next_frame().unwrap(), Some(Control::Allocate { count: 9 }));
        (&a).write_all(&(MAX_CLIENT_FRAME as u32 + 1).to_le_bytes()).unwrap();
        inbox.read_from(&b).unwrap();
        assert!(inbox.has_frame(), "an error to report");
        let err = inbox.next_frame().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Protocol);
        assert!(err.message().contains("a control frame of 65537 bytes"), "{err}");
        drop(a);
        let mut fresh = Inbox::default();
        assert_eq!(fresh.read_from(&b).unwrap(), Received::Closed);
    }

    #[test]
    fn the_inbox_hands_out_frames_one_at_a_time_and_reads_no_more_than_one_chunk() {
        let (a, b) = UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        a.set_nonblocking(true).unwrap();
        let stats = Control::Stats.encode();
        let flood = stats.repeat(100_000);
        let mut written = 0;
        while let Ok(n) = (&a).write(&flood[written..]) {
            written += n;
        }
        let sent = written / stats.len();
        let mut inbox = Inbox::default();
        inbox.read_from(&b).unwrap();
        assert!(inbox.buffered() <= 64 * 1024, "{} bytes buffered from one read", inbox.buffered());
        let mut taken = 0;
        while let Some(frame) = inbox.next_frame().unwrap() {
            assert_eq!(frame, Control::Stats);
            taken += 1;
        }
        assert!(taken > 1000 && taken < sent, "{taken} of {sent} frames from one read");
        assert!(inbox.buffered() < stats.len(), "at most a piece of one frame left");
    }
}
