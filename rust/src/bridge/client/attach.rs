//! The attach: connect to the bridge's socket, say hello, and map what its welcome hands over
//! (this client's region, with its ring pair and its pages, and its end of the signal
//! socketpair). Every way an attach can fail says what the caller should do about it.

use crate::arena::Arena;
use crate::bridge::channel;
use crate::bridge::signal::SignalEnd;
use crate::bridge::wire::{Control, PROTOCOL_VERSION, Welcome};
use crate::error::{Error, ErrorKind, Result};
use crate::ring::{Consumer, Producer};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long a waiter gives the bridge past a batch's deadline (and a control call past the
/// bridge's timeout).
pub(super) const GRACE: Duration = Duration::from_secs(5);

/// What a welcome hands over, mapped.
pub(super) struct Attached {
    /// The control socket, with read and write timeouts of the bridge's timeout and [`GRACE`].
    pub(super) stream: UnixStream,
    pub(super) welcome: Welcome,
    /// This client's region: its ring pair and its pages.
    pub(super) pages: Arc<Arena>,
    /// This client's ends of its rings: it produces submissions and consumes completions.
    pub(super) submissions: Producer,
    pub(super) completions: Consumer,
    /// This client's end of its signal socketpair.
    pub(super) signal: SignalEnd,
}

/// Connects to the bridge at `path`, says hello, and maps what it hands over.
pub(super) fn attach(path: &Path, timeout: Duration) -> Result<Attached> {
    let not_a_bridge = |why: String| {
        Error::new(ErrorKind::Connection, format!("{} is not an lmcache-resp bridge: {why}", path.display()))
    };
    let stream = UnixStream::connect(path).map_err(|e| connect_error(path, &e))?;
    stream.set_read_timeout(Some(timeout)).map_err(|e| Error::os("socket timeout", e))?;
    let hello = Control::Hello { version: PROTOCOL_VERSION, pid: std::process::id(), submission_ring_bytes: 0 };
    // A bridge that refuses at once may close before the hello is written: its refusal
    // is still there to read, and says more than the broken pipe. So does an answer that is
    // no bridge's (a peer that wrote garbage and closed).
    let sent = channel::send(&stream, &hello, &[]);
    let answer = channel::receive(&stream);
    if let Err(err) = &sent {
        let answer_says_more = match &answer {
            Ok(reply) => reply.is_some(),
            Err(answer) => answer.kind() == ErrorKind::Protocol,
        };
        if !answer_says_more {
            return Err(err.clone().context(format!("attaching to the bridge at {}", path.display())));
        }
    }
    let (welcome, fds) = match answer {
        Ok(Some((Control::Welcome(welcome), fds))) if fds.len() == 2 => (welcome, fds),
        Ok(Some((Control::Refused { reason, kind }, _))) => {
            let kind = kind.and_then(ErrorKind::from_code).unwrap_or(ErrorKind::InvalidInput);
            return Err(Error::new(kind, format!("the bridge at {} refused: {reason}", path.display())));
        }
        Ok(Some((other, _))) => return Err(not_a_bridge(format!("it answered {other:?}"))),
        Ok(None) => {
            return Err(Error::new(
                ErrorKind::Connection,
                format!(
                    "the bridge at {} closed the connection during the attach (it may be stopping, or not be a \
                     bridge)",
                    path.display()
                ),
            ));
        }
        Err(err) if err.kind() == ErrorKind::Timeout => {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "the bridge at {} did not answer the attach within {:.1} s: it is stopped or overloaded",
                    path.display(),
                    timeout.as_secs_f64()
                ),
            ));
        }
        Err(err) if err.kind() == ErrorKind::Protocol => return Err(not_a_bridge(err.message().to_owned())),
        Err(err) => return Err(err.context(format!("attaching to the bridge at {}", path.display()))),
    };
    // A bridge that stops answering (stopped, wedged) fails a control call after this
    // long, and the client with it, rather than hanging it.
    let answer_within = Some(Duration::from_millis(welcome.timeout_ms) + GRACE);
    stream.set_read_timeout(answer_within).map_err(|e| Error::os("socket timeout", e))?;
    stream.set_write_timeout(answer_within).map_err(|e| Error::os("socket timeout", e))?;
    let [region, signal]: [OwnedFd; 2] = fds.try_into().expect("two descriptors");
    let signal = SignalEnd::from_owned(signal);
    let pages =
        Arena::attach(region).map(Arc::new).map_err(|e| not_a_bridge(format!("its region is not an arena: {e}")))?;
    if pages.page_size() as u64 != welcome.page_size || pages.num_pages() as u64 != welcome.num_pages {
        return Err(not_a_bridge("its region does not match its welcome".into()));
    }
    let (sub_base, sub_len, comp_base, comp_len) = pages.ring_region(0);
    let owner: Arc<dyn std::any::Any + Send + Sync> = pages.clone();
    let ring_err = |e: crate::ring::RingError| not_a_bridge(format!("its rings: {e}"));
    // SAFETY: the ring regions lie inside the mapped region (its header was validated by
    // `attach`), initialized by the bridge before it sent the welcome. This client is the
    // producer of the submission ring and the consumer of the completion ring, the
    // bridge the other end of each.
    let (submissions, completions) = unsafe {
        (
            Producer::attach(sub_base, sub_len, owner.clone()).map_err(ring_err)?,
            Consumer::attach(comp_base, comp_len, owner).map_err(ring_err)?,
        )
    };
    Ok(Attached { stream, welcome, pages, submissions, completions, signal })
}

/// Why the bridge's socket could not be connected to. Not being allowed to open it is
/// permanent (an `Authentication` error, never worth retrying) and says what decides it.
fn connect_error(path: &Path, err: &std::io::Error) -> Error {
    let at = format!("cannot attach to the bridge at {}: {err}", path.display());
    if err.kind() != std::io::ErrorKind::PermissionDenied {
        return Error::new(ErrorKind::Connection, at);
    }
    use std::os::unix::fs::MetadataExt;
    let socket = match std::fs::metadata(path) {
        Ok(meta) => {
            format!("the socket is mode {:04o}, owner uid {} gid {}", meta.mode() & 0o7777, meta.uid(), meta.gid())
        }
        Err(_) => "its directory may not be searched".into(),
    };
    Error::new(
        ErrorKind::Authentication,
        format!(
            "{at}: this user (uid {}) may not open it: {socket} (the bridge's --socket-mode and group, and the \
             directory's mode, decide who may)",
            rustix::process::geteuid().as_raw()
        ),
    )
}
