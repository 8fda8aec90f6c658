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
    /// TCP (low-water marks apply), not a Unix socket.
    tcp: bool,
    /// The `SO_RCVLOWAT` last set (1, the kernel's default, on a new socket), or
    /// [`LOW_WATER_REFUSED`] once the socket refused one.
    low_water: std::cell::Cell<usize>,
    /// Its congestion control was restarted before its first large send (or needed no restart).
    congestion_restarted: std::cell::Cell<bool>,
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
        let tcp = matches!(address, Address::Tcp(_));
        let stream = |socket| Stream {
            socket,
            tcp,
            low_water: std::cell::Cell::new(1),
            congestion_restarted: std::cell::Cell::new(!tcp),
        };
        match socket.connect(&target) {
            Ok(()) => Ok((stream(socket), true)),
            Err(err) if err.raw_os_error() == Some(libc::EINPROGRESS) || err.kind() == io::ErrorKind::WouldBlock => {
                Ok((stream(socket), false))
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

    /// Asks poll to report the socket readable only once `bytes` are queued (TCP only; a Unix
    /// socket's poll does not honour it). A system call only when the mark changes.
    ///
    /// A socket that refuses a mark is not asked again (a refusal would otherwise cost a failing
    /// system call per wake-up). The error is returned only when the refusal leaves a mark above
    /// `bytes` in place, where poll would not report a shorter reply: the caller must drop the
    /// connection rather than wait on it.
    pub fn set_recv_low_water(&self, bytes: usize) -> io::Result<()> {
        if !low_water_is_safe() {
            return Ok(());
        }
        self.set_low_water_with(bytes, |fd| sys::set_recv_low_water(fd, bytes))
    }

    /// The receive low-water mark in force: what [`Stream::set_recv_low_water`] last set, or 1
    /// (none, a refused one, not TCP).
    pub fn recv_low_water(&self) -> usize {
        match self.low_water.get() {
            LOW_WATER_REFUSED => 1,
            _ if !self.tcp => 1,
            bytes => bytes,
        }
    }

    /// [`Stream::set_recv_low_water`] past the kernel gate, with the system call given.
    fn set_low_water_with(&self, bytes: usize, set: impl FnOnce(BorrowedFd<'_>) -> io::Result<()>) -> io::Result<()> {
        let current = self.low_water.get();
        if !self.tcp || current == bytes || current == LOW_WATER_REFUSED {
            return Ok(());
        }
        match set(self.socket.as_fd()) {
            Ok(()) => {
                self.low_water.set(bytes);
                Ok(())
            }
            Err(err) => {
                self.low_water.set(LOW_WATER_REFUSED);
                if current > bytes { Err(err) } else { Ok(()) }
            }
        }
    }

    /// Before a send of `bytes`: the socket's first large send (see
    /// [`super::congestion::LARGE_SEND`]) restarts its congestion control first (see
    /// [`Stream::restart_congestion_control_once`]).
    pub fn before_send(&self, bytes: usize) -> io::Result<()> {
        if self.congestion_restarted.get() || !super::congestion::is_large_send(bytes) {
            return Ok(());
        }
        self.restart_congestion_control_once()
    }

    /// Once per socket: restarts BBR, if the socket runs it (see `net::congestion` for why).
    /// Other congestion controls, Unix sockets and later calls are left alone, and so is a
    /// socket whose congestion control or allowed list cannot be read, or that refuses the
    /// detour. An error means only this: the socket could not be switched back, and runs the
    /// congestion control the error names.
    pub fn restart_congestion_control_once(&self) -> io::Result<()> {
        if self.congestion_restarted.replace(true) {
            return Ok(());
        }
        let Ok(current) = self.socket.tcp_congestion() else { return Ok(()) };
        let current = super::congestion::name_of(&current);
        let Ok(allowed) = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control") else {
            return Ok(());
        };
        let Some(detour) = super::congestion::detour(&current, &allowed) else {
            return Ok(());
        };
        if self.socket.set_tcp_congestion(detour.as_bytes()).is_err() {
            return Ok(());
        }
        self.socket.set_tcp_congestion(current.as_bytes()).map_err(|err| {
            io::Error::new(
                err.kind(),
                format!(
                    "the connection runs {detour}: switching it back to {current} before its first large send failed: \
                     {err}"
                ),
            )
        })
    }

    /// The socket's congestion control, as the kernel names it (for tests).
    #[cfg(any(test, feature = "internals"))]
    pub fn congestion_control(&self) -> io::Result<String> {
        Ok(super::congestion::name_of(&self.socket.tcp_congestion()?))
    }

    /// Whether [`Stream::restart_congestion_control_once`] was called (or a Unix socket, which
    /// needs none; for tests).
    #[cfg(any(test, feature = "internals"))]
    pub fn congestion_restarted(&self) -> bool {
        self.congestion_restarted.get()
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

/// `Stream::low_water` of a socket that refused a mark (no real mark is 0: the kernel makes 0 into 1).
const LOW_WATER_REFUSED: usize = 0;

/// Whether this kernel grows a TCP socket's receive buffer to fit its low-water mark and wakes
/// a reader whose window is closing short of it (Linux 4.18, `tcp_set_rcvlowat`). Before
/// that, a mark above what the buffer holds left poll silent while the sender waited: a stall.
fn low_water_is_safe() -> bool {
    static SAFE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SAFE.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/osrelease").is_ok_and(|release| honours_low_water(&release))
    })
}

/// Whether a kernel of this release (`uname -r`: "6.1.0-28-amd64") is Linux 4.18 or later.
fn honours_low_water(release: &str) -> bool {
    let mut numbers = release.trim().split(|c: char| !c.is_ascii_digit()).map(|n| n.parse::<u32>().ok());
    match (numbers.next().flatten(), numbers.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (4, 18),
        _ => false,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{SocketAddr, TcpListener};

    #[test]
    fn low_water_marks_are_used_from_linux_4_18() {
        for (release, safe) in [
            ("6.1.0-28-amd64", true),
            ("4.18.0-553.el8_10.x86_64", true),
            ("5.4.0", true),
            ("10.0.1", true),
            ("4.17.19", false),
            ("3.10.0-1160.el7.x86_64", false),
            ("", false),
            ("garbage", false),
        ] {
            assert_eq!(honours_low_water(release), safe, "{release}");
        }
    }

    /// A connected stream and the peer end that writes to it.
    fn pair() -> (Stream, std::net::TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let (stream, connected) = Stream::start_connect(&Address::Tcp(addr)).unwrap();
        let (peer, _) = listener.accept().unwrap();
        if !connected {
            wait_for(
                stream.as_fd(),
                Interest { read: false, write: true },
                Some(Instant::now() + Duration::from_secs(5)),
            )
            .unwrap();
            stream.finish_connect().unwrap();
        }
        (stream, peer)
    }

    fn readable_within(stream: &Stream, wait: Duration) -> bool {
        wait_for(stream.as_fd(), Interest { read: true, write: false }, Some(Instant::now() + wait)).unwrap().readable
    }

    #[test]
    fn a_socket_that_refuses_a_mark_is_not_asked_again() {
        let (stream, _peer) = pair();
        let calls = std::cell::Cell::new(0);
        let refuse = |_: BorrowedFd<'_>| {
            calls.set(calls.get() + 1);
            Err(io::Error::from_raw_os_error(libc::ENOPROTOOPT))
        };
        // Raising is refused: the mark stays at 1 byte, which is safe, so no error...
        stream.set_low_water_with(256 << 10, refuse).unwrap();
        assert_eq!(calls.get(), 1);
        // ...and the socket is not asked again, whatever the mark.
        for bytes in [512 << 10, 1, 1 << 20] {
            stream.set_low_water_with(bytes, refuse).unwrap();
        }
        assert_eq!(calls.get(), 1, "asked again after a refusal");
    }

    #[test]
    fn a_refused_lowering_is_an_error_because_poll_would_miss_short_replies() {
        let (stream, _peer) = pair();
        let calls = std::cell::Cell::new(0);
        let accept = |_: BorrowedFd<'_>| {
            calls.set(calls.get() + 1);
            Ok(())
        };
        stream.set_low_water_with(1 << 20, accept).unwrap();
        stream.set_low_water_with(1 << 20, accept).unwrap();
        assert_eq!(calls.get(), 1, "an unchanged mark costs no system call");
        let err = stream
            .set_low_water_with(1, |_: BorrowedFd<'_>| Err(io::Error::from_raw_os_error(libc::EINVAL)))
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
        stream.set_low_water_with(1, accept).unwrap();
        assert_eq!(calls.get(), 1, "asked again after a refusal");
    }

    #[test]
    fn poll_reports_a_stream_readable_only_once_its_low_water_mark_is_queued() {
        if !low_water_is_safe() {
            return;
        }
        let (stream, mut peer) = pair();
        stream.set_recv_low_water(256 << 10).unwrap();
        peer.write_all(&vec![7u8; 100 << 10]).unwrap();
        assert!(!readable_within(&stream, Duration::from_millis(100)), "woken below the mark");
        peer.write_all(&vec![7u8; 156 << 10]).unwrap();
        assert!(readable_within(&stream, Duration::from_secs(5)), "the mark was reached");
        // Back to 1 byte: readable at once with what is queued, and a fresh byte wakes it.
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0;
        while got < 256 << 10 {
            got += stream.recv(&mut buf).unwrap();
        }
        stream.set_recv_low_water(1).unwrap();
        peer.write_all(&[1]).unwrap();
        assert!(readable_within(&stream, Duration::from_secs(5)));
        assert_eq!(stream.recv(&mut buf).unwrap(), 1);
    }

    #[test]
    fn the_end_of_the_stream_wakes_a_reader_below_its_mark() {
        if !low_water_is_safe() {
            return;
        }
        let (stream, mut peer) = pair();
        stream.set_recv_low_water(1 << 20).unwrap();
        peer.write_all(&[9u8; 10]).unwrap();
        assert!(!readable_within(&stream, Duration::from_millis(50)));
        drop(peer);
        assert!(readable_within(&stream, Duration::from_secs(5)), "a closed peer must not leave the reader waiting");
        let mut buf = [0u8; 64];
        assert_eq!(stream.recv(&mut buf).unwrap(), 10);
        assert_eq!(stream.recv(&mut buf).unwrap(), 0);
    }

    /// A small request and its reply, as a handshake's, then a pause.
    fn exchange(stream: &Stream, peer: &mut std::net::TcpStream) {
        use std::io::Read;
        let mut iov = super::super::IoVecs::<1>::new();
        iov.push_slice(b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(stream.send(iov.as_slice()).unwrap(), 14);
        let mut got = [0u8; 14];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"*1\r\n$4\r\nPING\r\n");
        peer.write_all(b"+PONG\r\n").unwrap();
        let mut reply = [0u8; 7];
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut read = 0;
        while read < reply.len() {
            wait_for(stream.as_fd(), Interest { read: true, write: false }, Some(deadline)).unwrap();
            match stream.recv(&mut reply[read..]) {
                Ok(n) => read += n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(err) => panic!("{err}"),
            }
            assert!(Instant::now() < deadline, "no reply");
        }
        assert_eq!(&reply, b"+PONG\r\n");
        std::thread::sleep(Duration::from_millis(20));
    }

    /// Puts the stream on BBR if this kernel has it and lets us choose it (CI runs as root);
    /// the system's own choice otherwise, which must then be left alone. The congestion control
    /// it runs, the allowed list, and whether a restart applies to it.
    fn bbr_if_allowed(stream: &Stream) -> (String, String, bool) {
        let _ = stream.socket.set_tcp_congestion(b"bbr");
        let chosen = stream.congestion_control().unwrap();
        let allowed = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control").unwrap();
        let restarts = chosen == "bbr" && super::super::congestion::detour("bbr", &allowed).is_some();
        (chosen, allowed, restarts)
    }

    #[test]
    fn small_sends_leave_bbr_alone_and_the_first_large_one_starts_it_afresh() {
        let (stream, mut peer) = pair();
        let (chosen, allowed, restarts) = bbr_if_allowed(&stream);
        exchange(&stream, &mut peer);
        // A handshake, a PING, a batch of lookups: the model keeps what it learnt.
        stream.before_send(64 * 1024 - 1).unwrap();
        assert!(!stream.congestion_restarted(), "a small send restarted the congestion control");
        if restarts {
            let (bw, _) = sys::bbr_model(stream.as_fd()).unwrap().expect("BBR reports its model");
            assert!(bw > 0, "the small send reset BBR's model");
        }
        // The first value: a fresh model right before it goes.
        stream.before_send(256 * 1024).unwrap();
        assert!(stream.congestion_restarted());
        assert_eq!(stream.congestion_control().unwrap(), chosen, "the same congestion control afterwards");
        if restarts {
            let (bw, _) = sys::bbr_model(stream.as_fd()).unwrap().expect("still BBR");
            assert_eq!(bw, 0, "a fresh model: no bandwidth sample yet");
            exchange(&stream, &mut peer);
            // Later large sends leave the model alone.
            stream.before_send(256 * 1024).unwrap();
            let (bw, _) = sys::bbr_model(stream.as_fd()).unwrap().expect("still BBR");
            assert!(bw > 0, "a second large send restarted BBR again");
        } else {
            eprintln!("congestion control {chosen} (allowed: {}): only checked to be left alone", allowed.trim());
        }
        exchange(&stream, &mut peer);
    }

    #[test]
    fn bbr_is_started_afresh_only_once() {
        let (stream, mut peer) = pair();
        let (chosen, allowed, restarts) = bbr_if_allowed(&stream);
        exchange(&stream, &mut peer);
        let before = sys::bbr_model(stream.as_fd()).unwrap();
        stream.restart_congestion_control_once().unwrap();
        assert_eq!(stream.congestion_control().unwrap(), chosen, "the same congestion control afterwards");
        if restarts {
            let (bw, _) = before.expect("BBR reports its model");
            assert!(bw > 0, "the exchange gave BBR a bandwidth sample");
            let (bw, _) = sys::bbr_model(stream.as_fd()).unwrap().expect("still BBR");
            assert_eq!(bw, 0, "a fresh model: no bandwidth sample yet");
            exchange(&stream, &mut peer);
            let (bw, gain) = sys::bbr_model(stream.as_fd()).unwrap().expect("still BBR");
            assert!(bw > 0 && gain > 2 * 256, "in STARTUP (pacing gain {gain}/256), where large sends are not paced");
            // Only once: a second call leaves the model alone.
            stream.restart_congestion_control_once().unwrap();
            let (bw, _) = sys::bbr_model(stream.as_fd()).unwrap().expect("still BBR");
            assert!(bw > 0, "a second call restarted BBR again");
        } else {
            eprintln!("congestion control {chosen} (allowed: {}): only checked to be left alone", allowed.trim());
        }
        // The connection still carries bytes both ways.
        exchange(&stream, &mut peer);
    }
}
