//! The control socket to the bridge: control calls (pages, stats, detach), and whether the
//! bridge is still there. The bridge speaks on it out of turn only to say it dropped this
//! client; a bridge that closes it, or stops answering, ends the client: every call from then
//! on fails, saying why and that attaching again is the way back.

use crate::bridge::channel::{self, lost};
use crate::bridge::wire::Control;
use crate::error::{Error, ErrorKind, Result};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The control socket, and why the bridge is gone once it is.
pub(super) struct Link {
    path: PathBuf,
    control: Mutex<UnixStream>,
    /// A second handle on the socket, to poll it for the bridge's end without the lock.
    watch: UnixStream,
    failure: OnceLock<Error>,
}

impl Link {
    /// The link over `stream`, the control socket of the bridge at `path`.
    pub(super) fn new(path: &Path, stream: UnixStream) -> Result<Link> {
        let watch = stream.try_clone().map_err(|e| Error::os("dup", e))?;
        Ok(Link { path: path.to_path_buf(), control: Mutex::new(stream), watch, failure: OnceLock::new() })
    }

    /// Where the bridge listens.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The socket, to poll for the bridge's end (never read from: [`Link::alive`] does).
    pub(super) fn watch(&self) -> &UnixStream {
        &self.watch
    }

    /// Why the bridge is gone, once it is.
    pub(super) fn failure(&self) -> Option<&Error> {
        self.failure.get()
    }

    /// The bridge is gone (or dropped this client): every call from now on fails with why.
    pub(super) fn fail(&self, err: Error) -> Error {
        let why = format!(
            "{}; this store is done: attach again once a bridge answers at {}",
            err.message(),
            self.path.display()
        );
        let err = Error::new(ErrorKind::Connection, why);
        let _ = self.failure.set(err.clone());
        self.failure.get().cloned().unwrap_or(err)
    }

    /// Sends `request` and reads the bridge's answer.
    pub(super) fn call(&self, request: &Control) -> Result<Control> {
        let control = self.control.lock().unwrap_or_else(|p| p.into_inner());
        channel::call(&control, request).map_err(|e| match e.kind() {
            // The bridge went away, or stopped answering: this client is done either way.
            ErrorKind::Connection | ErrorKind::Timeout => self.fail(e),
            _ => e,
        })
    }

    /// Whether the bridge is still there: its socket has not closed, nor carried a notice.
    pub(super) fn alive(&self) -> Result<()> {
        if let Some(err) = self.failure.get() {
            return Err(err.clone());
        }
        let mut probe = [0u8; 1];
        match rustix::net::recv(
            &self.watch,
            &mut probe,
            rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
        ) {
            Ok((0, _)) => Err(self.fail(lost("the bridge went away".into()))),
            Ok(_) => {
                // The bridge speaks out of turn only to say it dropped this client.
                let control = self.control.lock().unwrap_or_else(|p| p.into_inner());
                let why = match channel::receive(&control) {
                    Ok(Some((Control::Failed { message, .. }, _))) => message,
                    _ => "the bridge closed the connection".into(),
                };
                Err(self.fail(lost(why)))
            }
            Err(rustix::io::Errno::AGAIN) => Ok(()),
            Err(err) => Err(self.fail(lost(err.to_string()))),
        }
    }

    /// Closes the socket both ways: the bridge takes back what this client still holds.
    pub(super) fn shut_down(&self) {
        let _ = self.control.lock().unwrap_or_else(|p| p.into_inner()).shutdown(std::net::Shutdown::Both);
    }
}
