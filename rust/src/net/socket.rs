//! A non-blocking stream socket (TCP over IPv4/IPv6, or Unix) with the options the data path
//! needs, and a deadline-bounded wait for readiness.

use super::endpoint::Address;
use super::sys::{self, IoVec};

use crate::memory::RawBuf;
use socket2::{Domain, SockAddr, Socket, TcpKeepalive, Type};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

/// One connected (or connecting) non-blocking socket to a server.
pub struct Stream {
    socket: Socket,
}

impl Stream {
    /// Starts a non-blocking connect. Returns the stream and whether it is already connected
    /// (Unix sockets usually are); otherwise wait for writability and call
    /// [`Stream::finish_connect`].
    pub fn start_connect(address: &Address) -> io::Result<(Stream, bool)> {
        let (domain, target) = match address {
            Address::Tcp(addr) => (Domain::for_address(*addr), SockAddr::from(*addr)),
            Address::Unix(path) => (Domain::UNIX, SockAddr::unix(path)?),
        };
        let socket = Socket::new(domain, Type::STREAM.nonblocking().cloexec(), None)?;
        if let Address::Tcp(_) = address {
            // Pipelined requests must leave at once, not wait for Nagle's timer.
            socket.set_tcp_nodelay(true)?;
            // Detect a peer that vanished without a FIN (host down, cable cut).
            let keepalive = TcpKeepalive::new()
                .with_time(Duration::from_secs(30))
                .with_interval(Duration::from_secs(10))
                .with_retries(3);
            socket.set_tcp_keepalive(&keepalive)?;
        }
        match socket.connect(&target) {
            Ok(()) => Ok((Stream { socket }, true)),
            Err(err) if err.raw_os_error() == Some(libc::EINPROGRESS) || err.kind() == io::ErrorKind::WouldBlock => {
                Ok((Stream { socket }, false))
            }
            Err(err) => Err(err),
        }
    }

    /// After the socket became writable: the outcome of the connect.
    pub fn finish_connect(&self) -> io::Result<()> {
        match self.socket.take_error()? {
            Some(err) => Err(err),
            None => self.socket.peer_addr().map(drop),
        }
    }

    /// Sends from the gather list without blocking; returns the bytes sent (see
    /// `sys::send_vectored` for what `iov` must point at).
    pub fn send(&self, iov: &[IoVec]) -> io::Result<usize> {
        sys::send_vectored(self.socket.as_fd(), iov)
    }

    /// Receives into `buf` without blocking; 0 at end of stream.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        sys::recv_slice(self.socket.as_fd(), buf)
    }

    /// Receives into `buf[offset..offset + len]` without blocking; 0 at end of stream.
    /// Panics if the range is not inside `buf`.
    pub fn recv_into(&self, buf: RawBuf, offset: usize, len: usize) -> io::Result<usize> {
        sys::recv_into(self.socket.as_fd(), buf, offset, len)
    }

    /// Whether `TCP_NODELAY` is set on the socket.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.socket.tcp_nodelay()
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

/// What a connection waits for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interest {
    /// Wait until the socket is readable.
    pub read: bool,
    /// Wait until the socket is writable.
    pub write: bool,
}

/// What the socket is ready for, as poll reported it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Readable: a read will not block (an error or hang-up counts, so the next read
    /// surfaces it).
    pub readable: bool,
    /// Writable: a write will not block (an error or hang-up counts, likewise).
    pub writable: bool,
}

impl Readiness {
    /// Assume both: the non-blocking calls report `WouldBlock` where the guess is wrong.
    pub const OPTIMISTIC: Readiness = Readiness { readable: true, writable: true };

    /// The readiness `poll` reported in `revents`.
    pub fn from_poll(flags: rustix::event::PollFlags) -> Readiness {
        use rustix::event::PollFlags;
        // Errors and hang-ups are reported as readable so that the next read surfaces them.
        let failed = flags.intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL);
        Readiness {
            readable: failed || flags.contains(PollFlags::IN),
            writable: failed || flags.contains(PollFlags::OUT),
        }
    }
}

/// The `poll` events that wait for `interest`.
pub fn poll_flags(interest: Interest) -> rustix::event::PollFlags {
    use rustix::event::PollFlags;
    let mut flags = PollFlags::empty();
    if interest.read {
        flags |= PollFlags::IN;
    }
    if interest.write {
        flags |= PollFlags::OUT;
    }
    flags
}

/// Converts a deadline into poll's relative timeout; `None` waits forever.
pub fn timeout_until(deadline: Option<Instant>, now: Instant) -> Option<rustix::event::Timespec> {
    deadline.map(|deadline| {
        let left = deadline.saturating_duration_since(now);
        rustix::event::Timespec { tv_sec: left.as_secs() as _, tv_nsec: left.subsec_nanos() as _ }
    })
}

/// Waits until `fd` is ready for `interest` or the deadline passes (then `Readiness` is empty).
pub fn wait_for(fd: BorrowedFd<'_>, interest: Interest, deadline: Option<Instant>) -> io::Result<Readiness> {
    use rustix::event::{PollFd, poll};
    let mut fds = [PollFd::from_borrowed_fd(fd, poll_flags(interest))];
    let timeout = timeout_until(deadline, Instant::now());
    match poll(&mut fds, timeout.as_ref()) {
        Ok(0) => Ok(Readiness::default()),
        Ok(_) => Ok(Readiness::from_poll(fds[0].revents())),
        Err(rustix::io::Errno::INTR) => Ok(Readiness::default()),
        Err(err) => Err(err.into()),
    }
}
