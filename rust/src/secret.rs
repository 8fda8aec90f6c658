//! A password that cannot end up in a log line, repr or error message by accident.

use std::fmt;

/// A password: `Debug` and `Display` show only `***`, and only [`Secret::expose`] reads it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The only way to read the value; grep for it when auditing where secrets flow.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the secret replaced by `***`: for texts that may echo
    /// it back (a server's error about the AUTH command it was sent, say).
    pub fn scrub(&self, text: &[u8]) -> Vec<u8> {
        let secret = self.0.as_bytes();
        if secret.is_empty() {
            return text.to_vec();
        }
        let mut out = Vec::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = memchr::memmem::find(rest, secret) {
            out.extend_from_slice(&rest[..at]);
            out.extend_from_slice(b"***");
            rest = &rest[at + secret.len()..];
        }
        out.extend_from_slice(rest);
        out
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting_never_shows_the_value() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret} {secret:?} {:?}", Some(&secret)), "*** Secret(***) Some(Secret(***))");
        assert_eq!(secret.expose(), "hunter2");
    }

    #[test]
    fn scrubbing_replaces_every_occurrence() {
        let secret = Secret::new("hunter2");
        let echoed = b"ERR unknown command 'AUTH', with args beginning with: 'hunter2' 'hunter2x'";
        assert_eq!(secret.scrub(echoed), b"ERR unknown command 'AUTH', with args beginning with: '***' '***x'");
        assert_eq!(Secret::new("").scrub(b"abc"), b"abc");
    }
}
