//! How a bridge and a client wake each other: one socketpair per client. The client writes a
//! byte to its end after submitting (the doorbell); the bridge writes a byte to its end after
//! completing (the notifier). Each side polls its own end.
//!
//! Why not eventfds: an eventfd passed with SCM_RIGHTS shares its open file description, so a
//! client could clear `O_NONBLOCK` on it (one `fcntl`) and make the bridge block in a read, or
//! fill its counter and make it block in a write, freezing every other client. Each end of a
//! socketpair is a file description of its own, the bridge never hands its end over, and it
//! reads and writes with `MSG_DONTWAIT` on every call: nothing a client does to its end can
//! block the bridge. A full buffer means the peer has not read its signals yet, which is all a
//! signal needs to say.

use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, recv, send, socketpair};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Bytes drained from a signal socket per call at most: a client that floods its doorbell
/// costs the bridge one bounded read per turn.
const DRAIN_LIMIT: usize = 64 * 1024;

/// One end of a signal socketpair.
pub struct SignalEnd(OwnedFd);

/// What a drain found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drained {
    /// Nothing was signalled.
    Quiet,
    /// The peer signalled at least once.
    Signalled,
    /// The peer closed its end (the process is gone, or it was dropped).
    Closed,
}

impl SignalEnd {
    /// A connected pair: one end for this process, one to hand to the peer.
    pub fn pair() -> io::Result<(SignalEnd, SignalEnd)> {
        let (a, b) =
            socketpair(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC, None)?;
        Ok((SignalEnd(a), SignalEnd(b)))
    }

    /// An end received from the peer.
    pub fn from_owned(fd: OwnedFd) -> SignalEnd {
        SignalEnd(fd)
    }

    /// Another handle on the same end (for a thread that watches it).
    pub fn try_clone(&self) -> io::Result<SignalEnd> {
        Ok(SignalEnd(self.0.try_clone()?))
    }

    /// Wakes the peer (its end becomes readable). Never blocks.
    pub fn signal(&self) {
        // EAGAIN: the peer's buffer is full of unread signals, so it is readable already.
        // EPIPE and friends: the peer is gone, which its own end of the story reports.
        let _ = send(&self.0, b"!", SendFlags::DONTWAIT | SendFlags::NOSIGNAL);
    }

    /// Clears the signals the peer sent (at most `DRAIN_LIMIT` bytes). Never blocks.
    pub fn drain(&self) -> Drained {
        let mut buf = [0u8; 4096];
        let mut drained = Drained::Quiet;
        let mut total = 0;
        while total < DRAIN_LIMIT {
            match recv(&self.0, &mut buf, RecvFlags::DONTWAIT) {
                Ok((0, _)) => return Drained::Closed,
                Ok((n, _)) => {
                    total += n;
                    drained = Drained::Signalled;
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => break,
            }
        }
        drained
    }
}

impl AsFd for SignalEnd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};

    #[test]
    fn a_signal_wakes_the_other_end_once_and_a_drain_clears_it() {
        let (ours, theirs) = SignalEnd::pair().unwrap();
        assert_eq!(theirs.drain(), Drained::Quiet);
        ours.signal();
        ours.signal();
        assert_eq!(theirs.drain(), Drained::Signalled);
        assert_eq!(theirs.drain(), Drained::Quiet);
        assert_eq!(ours.drain(), Drained::Quiet, "a side does not see its own signals");
        drop(theirs);
        assert_eq!(ours.drain(), Drained::Closed);
    }

    #[test]
    fn nothing_the_peer_does_to_its_end_blocks_this_one() {
        let (ours, theirs) = SignalEnd::pair().unwrap();
        // The peer makes its end blocking and never reads: our end keeps its own flags, and a
        // full buffer only means the peer is signalled already.
        fcntl_setfl(&theirs, fcntl_getfl(&theirs).unwrap() - OFlags::NONBLOCK).unwrap();
        assert!(!fcntl_getfl(&theirs).unwrap().contains(OFlags::NONBLOCK));
        for _ in 0..1_000_000 {
            ours.signal();
        }
        // The peer floods us: one drain reads a bounded amount and returns.
        let flood = vec![b'x'; 256 * 1024];
        let mut sent = 0;
        while let Ok(n) = send(&theirs, &flood[sent % 4096..], SendFlags::DONTWAIT) {
            sent += n;
            if sent > 1 << 20 {
                break;
            }
        }
        let started = std::time::Instant::now();
        assert_eq!(ours.drain(), Drained::Signalled);
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
}
