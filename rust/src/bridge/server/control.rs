//! The bridge's control thread: the listening socket, every handshake in progress, and every
//! attached client's control socket, in one poll loop. Sockets are non-blocking and read as
//! bytes arrive, so a silent or trickling connection costs only itself: it is closed when its
//! handshake deadline passes, and the others attach meanwhile.
//!
//! Who may attach is the kernel's word on the peer (SO_PEERCRED), checked against the allowed
//! uids and gids as the connection is accepted: a refused peer never holds a handshake slot.
//! Refusals are logged at a bounded rate ([`super::refusals`]). An allowed peer that says
//! `Hello` gets its region and signal socketpair with the `Welcome`. Attached clients allocate
//! and free pages of their region here.
//!
//! A client's requests are answered in turn with everyone else's, a few per turn, and only
//! while its unread replies stay under a small backlog: one that floods requests, or never
//! reads its replies, waits on itself (its socket fills, its writes block), not on the bridge's
//! memory or the others' turns.

use super::refusals::{Cause, RefusalLog};
use super::state::{self, BridgeState, Client, Dropped};
use crate::arena::PageHandle;
use crate::bridge::channel::{self, Inbox, Received};
use crate::bridge::wire::{Control, PROTOCOL_VERSION, Welcome};
use crate::error::{Error, ErrorKind, Result};
use rustix::event::{PollFd, PollFlags, poll};
use rustix::net::UCred;
use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Control replies waiting for a client: past this, its requests are not read until it reads
/// (the largest reply, a page list of its whole quota, may come on top of it once).
const REPLY_BACKLOG: usize = 64 << 10;
/// Requests answered for one client per turn of the loop: a client that floods requests takes
/// its turn, not the thread.
const REQUESTS_PER_TURN: usize = 16;
/// Connections accepted per turn of the loop at most: a peer reconnecting in a loop gets a
/// turn, not the thread.
const ACCEPTS_PER_TURN: usize = 64;
/// After accept() fails for lack of descriptors or memory: the first pause, and the longest.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// A listening socket at `path`, with `mode` whatever the umask. A socket left by a bridge
/// that died is replaced; a live one, or anything that is not a socket, is refused.
pub(super) fn bind(path: &Path, mode: u32) -> Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(Error::invalid(format!(
                "{} exists and is not a socket: refusing to replace it (remove it, or choose another --socket)",
                path.display()
            )));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(Error::invalid(format!(
                "{} is in use: another bridge (or server) listens there",
                path.display()
            )));
        }
        std::fs::remove_file(path).map_err(|e| Error::os(format!("cannot replace {}", path.display()), e))?;
    }
    let listener =
        UnixListener::bind(path).map_err(|e| Error::os(format!("cannot listen on {}", path.display()), e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::os(format!("cannot set the mode of {}", path.display()), e))?;
    listener.set_nonblocking(true).map_err(|e| Error::os("socket mode", e))?;
    Ok(listener)
}

/// A connection the control thread serves.
struct Conn {
    stream: UnixStream,
    inbox: Inbox,
    /// Replies not yet written.
    replies: VecDeque<u8>,
    stage: Stage,
}

enum Stage {
    /// Before its `Hello`: closed at `deadline`. `peer` is the kernel's word on who it is.
    Handshaking {
        deadline: Instant,
        peer: UCred,
    },
    Attached(Arc<Client>),
}

impl Conn {
    /// Whether it may send more requests now: its replies are read, and what it sent is
    /// answered.
    fn wants_input(&self) -> bool {
        self.replies.len() < REPLY_BACKLOG && !self.inbox.has_frame()
    }

    /// Whether requests of its wait to be answered, with room for their replies.
    fn has_work(&self) -> bool {
        self.replies.len() < REPLY_BACKLOG && self.inbox.has_frame()
    }

    fn pid(&self) -> i32 {
        match &self.stage {
            Stage::Handshaking { peer, .. } => peer.pid.as_raw_nonzero().get(),
            Stage::Attached(client) => client.pid,
        }
    }
}

/// The control thread's body: returns once the bridge stops, leaving the attached clients'
/// sockets open in `shared` for the stop to close once their last results are out.
pub(super) fn run(shared: &Arc<BridgeState>, listener: UnixListener) {
    let mut conns: Vec<Conn> = Vec::new();
    let mut accept_paused_until: Option<(Instant, Duration)> = None;
    let mut refusals = RefusalLog::default();
    while !shared.stopping() {
        let now = Instant::now();
        let listening = accept_paused_until.is_none_or(|(until, _)| until <= now);
        let mut fds = vec![
            PollFd::from_borrowed_fd(shared.stopped.as_fd(), PollFlags::IN),
            PollFd::from_borrowed_fd(shared.control_wake.as_fd(), PollFlags::IN),
            PollFd::new(&listener, if listening { PollFlags::IN } else { PollFlags::empty() }),
        ];
        for conn in &conns {
            let read = if conn.wants_input() { PollFlags::IN } else { PollFlags::empty() };
            let write = if conn.replies.is_empty() { PollFlags::empty() } else { PollFlags::OUT };
            fds.push(PollFd::new(&conn.stream, read | write));
        }
        let wake = conns
            .iter()
            .filter_map(|c| match c.stage {
                Stage::Handshaking { deadline, .. } => Some(deadline),
                Stage::Attached(_) => None,
            })
            .chain(accept_paused_until.map(|(until, _)| until))
            .chain(refusals.next_due())
            .chain(conns.iter().any(Conn::has_work).then_some(now))
            .min();
        let timeout = wake.map_or(Duration::from_millis(200), |at| at.saturating_duration_since(now));
        let timeout = rustix::event::Timespec { tv_sec: timeout.as_secs() as _, tv_nsec: timeout.subsec_nanos() as _ };
        let _ = poll(&mut fds, Some(&timeout));
        let ready: Vec<PollFlags> = fds[3..].iter().map(PollFd::revents).collect();
        let listener_ready = !fds[2].revents().is_empty();
        drop(fds);
        shared.control_wake.reset();

        let mut keep = Vec::with_capacity(conns.len());
        for (conn, revents) in conns.drain(..).zip(ready) {
            if let Some(conn) = serve(shared, conn, revents, &mut refusals) {
                keep.push(conn);
            }
        }
        conns = keep;
        if listener_ready && listening {
            let last_backoff = accept_paused_until.map(|(_, d)| d);
            accept_paused_until = accept(shared, &listener, &mut conns, last_backoff, &mut refusals);
        }
        if let Some(line) = refusals.flush(Instant::now()) {
            log::warn!(target: "lmcache_resp::bridge", "bridge: {line}");
        }
    }
    park_sockets(shared, conns);
}

/// Logs a refusal, at the refusal log's rate.
fn log_refusal(refusals: &mut RefusalLog, uid: u32, pid: i32, cause: Cause, reason: impl FnOnce() -> String) {
    if let Some(line) = refusals.refused(Instant::now(), uid, pid, cause, reason) {
        log::warn!(target: "lmcache_resp::bridge", "bridge: {line}");
    }
}

/// Accepts the waiting connections, a turn's worth: a peer the bridge does not serve is
/// refused at once, saying why, before it takes a handshake slot. Returns when to look at the
/// listener again, if accept() failed for lack of descriptors or memory: it backs off rather
/// than spin on a listener that stays readable.
fn accept(
    shared: &BridgeState,
    listener: &UnixListener,
    conns: &mut Vec<Conn>,
    last_backoff: Option<Duration>,
    refusals: &mut RefusalLog,
) -> Option<(Instant, Duration)> {
    for _ in 0..ACCEPTS_PER_TURN {
        match listener.accept() {
            Ok((stream, _)) => {
                // Whatever the answer, it never blocks the thread: a fresh socket's buffer
                // takes a refusal whole, and a full one loses it (the close says enough).
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                let Some(peer) = peer(&stream) else {
                    let reason = "the kernel does not say who the peer is (SO_PEERCRED failed)".to_string();
                    log_refusal(refusals, u32::MAX, 0, Cause::Unknown, || format!("refused an attach: {reason}"));
                    send_refusal(&stream, reason, Some(ErrorKind::Authentication));
                    continue;
                };
                let (pid, uid) = (peer.pid.as_raw_nonzero().get(), peer.uid.as_raw());
                if !allowed(shared, &stream, &peer) {
                    let reason = not_allowed(shared, uid, pid);
                    log_refusal(refusals, uid, pid, Cause::NotAllowed, || format!("refused an attach: {reason}"));
                    send_refusal(&stream, reason, Some(ErrorKind::Authentication));
                    continue;
                }
                let handshaking = conns.iter().filter(|c| matches!(c.stage, Stage::Handshaking { .. })).count();
                if handshaking >= shared.limits.max_handshakes {
                    let reason =
                        format!("the bridge has {handshaking} attaches in progress, its limit: try again in a moment");
                    log_refusal(refusals, uid, pid, Cause::Busy, || format!("refused an attach (pid {pid}): {reason}"));
                    send_refusal(&stream, reason, Some(ErrorKind::Connection));
                    continue;
                }
                let deadline = Instant::now() + shared.limits.handshake_timeout;
                conns.push(Conn {
                    stream,
                    inbox: Inbox::default(),
                    replies: VecDeque::new(),
                    stage: Stage::Handshaking { deadline, peer },
                });
            }
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => return None,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err)
                if matches!(err.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)) =>
            {
                let pause = last_backoff.map_or(ACCEPT_BACKOFF, |d| (d * 2).min(MAX_ACCEPT_BACKOFF));
                if last_backoff.is_none() {
                    log::warn!(
                        target: "lmcache_resp::bridge",
                        "bridge: cannot accept connections ({err}); pausing attaches, retrying"
                    );
                }
                return Some((Instant::now() + pause, pause));
            }
            Err(err) => {
                log::warn!(target: "lmcache_resp::bridge", "bridge: accept failed: {err}");
                return None;
            }
        }
    }
    None
}

/// Reads, answers and writes what one connection is ready for; None once it is done with.
fn serve(shared: &BridgeState, mut conn: Conn, revents: PollFlags, refusals: &mut RefusalLog) -> Option<Conn> {
    if let Stage::Attached(client) = &conn.stage {
        let dropped = client.dropped.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(Dropped { why, misbehaved }) = dropped {
            if misbehaved {
                log::warn!(target: "lmcache_resp::bridge",
                    "bridge: dropping client {} (pid {}): {why}", client.id, client.pid
                );
            }
            let notice = Control::Failed {
                kind: ErrorKind::Protocol as u8,
                message: format!("the bridge dropped this client: {why}"),
            };
            conn.replies.extend(notice.encode());
            flush(&mut conn);
            return finish(shared, conn);
        }
    }
    if let Stage::Handshaking { deadline, peer } = &conn.stage {
        if Instant::now() >= *deadline {
            let (uid, pid) = (peer.uid.as_raw(), conn.pid());
            log_refusal(refusals, uid, pid, Cause::Timeout, || {
                format!(
                    "closed a connection (pid {pid}) that did not finish its handshake within {:.1} s",
                    shared.limits.handshake_timeout.as_secs_f64()
                )
            });
            return None;
        }
    }
    if revents.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) && conn.wants_input() {
        match conn.inbox.read_from(&conn.stream) {
            Ok(Received::Closed) => return finish(shared, conn),
            Ok(Received::Open) => {}
            Err(err) => return drop_for_error(shared, conn, err),
        }
    }
    let mut answered = 0;
    while conn.has_work() && answered < REQUESTS_PER_TURN {
        match conn.inbox.next_frame() {
            Ok(Some(frame)) => conn = answer(shared, conn, frame, refusals)?,
            Ok(None) => break,
            Err(err) => return drop_for_error(shared, conn, err),
        }
        answered += 1;
    }
    if !flush(&mut conn) {
        return finish(shared, conn);
    }
    Some(conn)
}

/// A connection whose socket failed or that sent what does not decode: an attached client is
/// told why, and let go.
fn drop_for_error(shared: &BridgeState, mut conn: Conn, err: Error) -> Option<Conn> {
    if let Stage::Attached(client) = &conn.stage {
        log::warn!(target: "lmcache_resp::bridge", "bridge: dropping client {} (pid {}): {err}", client.id, client.pid);
        let notice =
            Control::Failed { kind: err.kind() as u8, message: format!("the bridge dropped this client: {err}") };
        conn.replies.extend(notice.encode());
        flush(&mut conn);
    }
    finish(shared, conn)
}

/// Writes what the socket takes; false if the client must be let go (its socket broke).
fn flush(conn: &mut Conn) -> bool {
    while !conn.replies.is_empty() {
        let (front, _) = conn.replies.as_slices();
        match (&conn.stream).write(front) {
            Ok(0) => return false,
            Ok(n) => {
                conn.replies.drain(..n);
            }
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

/// A connection is done with: an attached client is gone, and no request of its will take a
/// page any more (the relay returns its pages once its batches finish).
fn finish(shared: &BridgeState, conn: Conn) -> Option<Conn> {
    if let Stage::Attached(client) = &conn.stage {
        client.gone.store(true, Ordering::Release);
        client.control_closed.store(true, Ordering::Release);
        shared.relay_wake.signal();
    }
    let _ = conn.stream.shutdown(std::net::Shutdown::Both);
    None
}

/// The attached clients' sockets, for the stop to close after the last results are out.
fn park_sockets(shared: &BridgeState, conns: Vec<Conn>) {
    let mut parked = shared.parked.lock().unwrap_or_else(|p| p.into_inner());
    parked.extend(conns.into_iter().filter(|c| matches!(c.stage, Stage::Attached(_))).map(|c| c.stream));
}

fn answer(shared: &BridgeState, mut conn: Conn, frame: Control, refusals: &mut RefusalLog) -> Option<Conn> {
    match &conn.stage {
        Stage::Handshaking { .. } => match frame {
            Control::Hello { version, submission_ring_bytes, .. } => {
                handshake(shared, conn, version, submission_ring_bytes, refusals)
            }
            other => {
                let reason = format!("the first message must be Hello, not {other:?}");
                send_refusal(&conn.stream, reason, Some(ErrorKind::Protocol));
                None
            }
        },
        Stage::Attached(client) => {
            let reply = match frame {
                Control::Allocate { count } => allocate(shared, client, count as usize),
                Control::AllocateOne => allocate_one(shared, client),
                Control::Free { index, generation } => free(shared, client, index, generation).map(|()| Control::Freed),
                Control::Stats => Ok(Control::StatsReply { free_pages: free_pages(shared, client) as u64 }),
                Control::Metrics => Ok(Control::MetricsReply { snapshot: shared.engine.stats().encode() }),
                Control::Detach => Ok(Control::Detached { pages: return_idle_pages(shared, client) }),
                other => Err(Error::new(ErrorKind::Protocol, format!("unexpected control message {other:?}"))),
            };
            let reply =
                reply.unwrap_or_else(|err| Control::Failed { kind: err.kind() as u8, message: err.to_string() });
            conn.replies.extend(reply.encode());
            Some(conn)
        }
    }
}

/// The kernel's word on who is at the other end.
fn peer(stream: &UnixStream) -> Option<UCred> {
    rustix::net::sockopt::socket_peercred(stream).ok()
}

/// The peer's supplementary groups (SO_PEERGROUPS), where the kernel says.
fn peer_groups(stream: &UnixStream) -> Vec<u32> {
    use std::os::fd::AsRawFd;
    let mut groups = vec![0u32; 256];
    let mut len = (groups.len() * 4) as libc::socklen_t;
    // SAFETY: the buffer holds `len` bytes; the kernel writes at most that many and sets
    // `len` to what it wrote.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERGROUPS,
            groups.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Vec::new();
    }
    groups.truncate(len as usize / 4);
    groups
}

/// Whether the peer may attach: its uid is the bridge's own or allowed, or one of its groups
/// is allowed.
fn allowed(shared: &BridgeState, stream: &UnixStream, cred: &UCred) -> bool {
    let uid = cred.uid.as_raw();
    if uid == rustix::process::geteuid().as_raw() || shared.limits.allow_uids.contains(&uid) {
        return true;
    }
    let gids = &shared.limits.allow_gids;
    !gids.is_empty() && (gids.contains(&cred.gid.as_raw()) || peer_groups(stream).iter().any(|g| gids.contains(g)))
}

/// Why a uid may not attach, naming who may.
fn not_allowed(shared: &BridgeState, uid: u32, pid: i32) -> String {
    format!(
        "uid {uid} (pid {pid}) may not attach to this bridge: it serves uid {}{}{} (see --allow-uid, --allow-gid)",
        rustix::process::geteuid().as_raw(),
        list(" and uids ", &shared.limits.allow_uids),
        list(" and members of gids ", &shared.limits.allow_gids),
    )
}

/// Tells a peer it is refused; `kind` is what the client raises (None: a version mismatch, in
/// the form every version reads). Never blocks: the socket is non-blocking.
fn send_refusal(stream: &UnixStream, reason: String, kind: Option<ErrorKind>) {
    let _ = channel::send(stream, &Control::Refused { reason, kind: kind.map(|k| k as u8) }, &[]);
}

/// Refuses an attach after its `Hello`, saying why, and logs it at the refusal log's rate.
fn refuse(
    conn: Conn,
    refusals: &mut RefusalLog,
    cause: Cause,
    reason: String,
    kind: Option<ErrorKind>,
) -> Option<Conn> {
    let (uid, pid) = match &conn.stage {
        Stage::Handshaking { peer, .. } => (peer.uid.as_raw(), conn.pid()),
        Stage::Attached(client) => (client.uid, client.pid),
    };
    log_refusal(refusals, uid, pid, cause, || format!("refused an attach (pid {pid}, uid {uid}): {reason}"));
    send_refusal(&conn.stream, reason, kind);
    None
}

/// A `Hello` from an allowed peer: its version ours, room for one more client; then its
/// region, its signal socketpair and the `Welcome`.
fn handshake(
    shared: &BridgeState,
    conn: Conn,
    version: u32,
    ring_bytes: u32,
    refusals: &mut RefusalLog,
) -> Option<Conn> {
    let Stage::Handshaking { peer, .. } = &conn.stage else { return None };
    let (pid, uid) = (peer.pid.as_raw_nonzero().get(), peer.uid.as_raw());
    if version != PROTOCOL_VERSION {
        let reason = format!(
            "protocol version {version} is not this bridge's ({PROTOCOL_VERSION}): use the same lmcache-resp version \
             for the bridge and its clients"
        );
        return refuse(conn, refusals, Cause::Protocol, reason, None);
    }
    let attached = shared.lock_clients().len();
    if attached >= shared.limits.max_clients {
        let reason = format!(
            "the bridge serves at most {} clients and has {attached} (see --max-clients)",
            shared.limits.max_clients
        );
        return refuse(conn, refusals, Cause::Full, reason, Some(ErrorKind::Connection));
    }
    match Client::create(shared, pid, uid, ring_bytes as usize) {
        Ok((client, theirs)) => {
            let welcome = Welcome {
                version: PROTOCOL_VERSION,
                client_id: client.id,
                page_size: shared.page_size as u64,
                num_pages: client.region.num_pages() as u64,
                num_workers: shared.engine.num_workers() as u32,
                timeout_ms: shared.engine.timeout().as_millis() as u64,
                endpoint: shared.engine.endpoint().to_owned(),
            };
            let fds = [client.region.fd(), theirs.as_fd()];
            if let Err(err) = channel::send(&conn.stream, &Control::Welcome(welcome), &fds) {
                log::warn!(
                    target: "lmcache_resp::bridge",
                    "bridge: client {} (pid {pid}) left during its handshake: {err}", client.id
                );
                return None;
            }
            shared.lock_clients().insert(client.id, client.clone());
            shared.relay_wake.signal();
            log::info!(target: "lmcache_resp::bridge",
                "bridge: client {} (pid {pid}, uid {uid}) attached: up to {} pages, a {} KiB submission ring",
                client.id,
                client.region.num_pages(),
                client.lock_data().submissions.capacity() >> 10
            );
            Some(Conn { stage: Stage::Attached(client), ..conn })
        }
        Err(err) => {
            let reason = format!("the bridge cannot set up a client: {err}");
            refuse(conn, refusals, Cause::Failed, reason, Some(ErrorKind::Os))
        }
    }
}

fn list(prefix: &str, ids: &[u32]) -> String {
    if ids.is_empty() {
        return String::new();
    }
    format!("{prefix}{}", ids.iter().map(u32::to_string).collect::<Vec<_>>().join(", "))
}

/// Pages a client may still take: what its region has left and the shared budget allows.
fn free_pages(shared: &BridgeState, client: &Client) -> usize {
    client.pool.free_count().min(shared.num_pages - shared.pages_held.load(Ordering::Acquire))
}

fn allocate(shared: &BridgeState, client: &Client, count: usize) -> Result<Control> {
    let exhausted = |available: usize| {
        Error::new(
            ErrorKind::Page,
            format!(
                "out of pages: {count} page(s) requested but only {available} free for this client (it holds {} of \
                 at most {}; the bridge's {} pages are shared by its clients)",
                client.region.num_pages() - client.pool.free_count(),
                client.region.num_pages(),
                shared.num_pages
            ),
        )
    };
    if count > client.pool.free_count() {
        return Err(exhausted(free_pages(shared, client)));
    }
    shared.take_budget(count).map_err(|left| exhausted(left.min(client.pool.free_count())))?;
    match client.pool.allocate_many(count) {
        Ok(handles) => Ok(hand_over(client, handles)),
        Err(err) => {
            shared.return_budget(count);
            Err(Error::new(ErrorKind::Page, err.to_string()))
        }
    }
}

/// One page, or none when none is free (which is not an error here).
fn allocate_one(shared: &BridgeState, client: &Client) -> Result<Control> {
    if shared.take_budget(1).is_err() {
        return Ok(Control::Pages { pages: Vec::new() });
    }
    match client.pool.allocate() {
        Some(handle) => Ok(hand_over(client, vec![handle])),
        None => {
            shared.return_budget(1);
            Ok(Control::Pages { pages: Vec::new() })
        }
    }
}

/// `handles` are the client's now.
fn hand_over(client: &Client, handles: Vec<PageHandle>) -> Control {
    let mut held = client.held.lock().unwrap_or_else(|p| p.into_inner());
    let listed = handles.iter().map(|h| (h.index, h.generation)).collect();
    for handle in handles {
        held.insert(handle.index, handle);
    }
    client.held_changes.fetch_add(1, Ordering::AcqRel);
    Control::Pages { pages: listed }
}

fn free(shared: &BridgeState, client: &Client, index: u32, generation: u32) -> Result<()> {
    let handle = PageHandle { pool_id: client.pool.id(), index, generation };
    client.pool.check(&handle).map_err(|_| {
        Error::new(ErrorKind::Page, format!("page {index} (generation {generation}) is not one of this client's"))
    })?;
    client.ledger.free_if_idle(index, || state::release_pages(shared, client, &[handle]))
}

/// A leaving client's pages that no batch uses go back now; the others when their batches
/// finish (the relay retires the client).
fn return_idle_pages(shared: &BridgeState, client: &Client) -> u32 {
    let held: Vec<u32> = client.held.lock().unwrap_or_else(|p| p.into_inner()).keys().copied().collect();
    client.ledger.with_idle(held, |idle| {
        let handles: Vec<PageHandle> = {
            let held = client.held.lock().unwrap_or_else(|p| p.into_inner());
            idle.iter().filter_map(|index| held.get(index).copied()).collect()
        };
        let _ = state::release_pages(shared, client, &handles);
        handles.len() as u32
    })
}
