//! Which loop the I/O workers run: the value of the `io_backend` setting (checked here,
//! resolved in mod.rs with the others).

use super::value::{Given, Value};
use crate::error::{Error, Result};

/// How the I/O workers wait and move bytes (the `io_backend` setting).
///
/// Both loops run the same connections (`conn::ConnCore` decides, the driver executes) and
/// pass the same suites; they differ in how many system calls a batch costs. The default is
/// the one that measured faster on our machines (bench/results/2026-12-04/uring/README.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoBackend {
    /// io_uring where this process may use it (probed when the engine starts), else the
    /// poll loop, with one INFO line saying why.
    Auto,
    /// io_uring: each round's sends, receives and the wait go to the kernel in one
    /// `io_uring_enter`. The engine refuses to start where io_uring is forbidden.
    Uring,
    /// One `ppoll` per round over every socket and the doorbell, then `sendmsg`/`recv` per
    /// socket.
    #[default]
    Poll,
}

impl IoBackend {
    /// The setting's value as written back.
    pub fn name(self) -> &'static str {
        match self {
            IoBackend::Auto => "auto",
            IoBackend::Uring => "uring",
            IoBackend::Poll => "poll",
        }
    }

    /// Reads this value from text (case and spaces aside; `io_uring` for `uring`).
    pub fn parse(text: &str) -> Option<IoBackend> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(IoBackend::Auto),
            "uring" | "io_uring" => Some(IoBackend::Uring),
            "poll" => Some(IoBackend::Poll),
            _ => None,
        }
    }
}

impl std::fmt::Display for IoBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Checks a given `io_backend`.
pub(super) fn io_backend(given: &Given<'_>) -> Result<IoBackend> {
    let parsed = match given.value {
        Value::Text(text) => IoBackend::parse(text),
        _ => None,
    };
    parsed.ok_or_else(|| {
        Error::invalid(format!(
            "{} must be \"auto\" (io_uring where allowed, else poll), \"uring\" or \"poll\", got {}",
            given.name, given.value
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_three_names() {
        for (text, backend) in
            [("auto", IoBackend::Auto), (" URING ", IoBackend::Uring), ("io_uring", IoBackend::Uring)]
        {
            assert_eq!(IoBackend::parse(text), Some(backend), "{text:?}");
        }
        assert_eq!(IoBackend::parse("Poll"), Some(IoBackend::Poll));
        for text in ["", "epoll", "uring,poll", "1"] {
            assert_eq!(IoBackend::parse(text), None, "{text:?}");
        }
    }
}
