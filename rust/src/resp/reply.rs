//! RESP2 reply values.

use std::fmt;

/// One complete RESP2 reply.
#[derive(Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Simple(Vec<u8>),
    /// `-ERR ...`: the server refused the command. Not a transport error.
    Error(Vec<u8>),
    /// `:42`
    Integer(i64),
    /// `$5\r\nhello`
    Bulk(Vec<u8>),
    /// `$-1`: the key does not exist.
    Nil,
    /// `*2\r\n...`: the elements, each a reply.
    Array(Vec<Reply>),
    /// `*-1`
    NilArray,
}

impl Reply {
    /// Serializes the reply as a server would. Used by tests, fuzzing and the test server.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let line = |kind: u8, body: &[u8], out: &mut Vec<u8>| {
            out.push(kind);
            out.extend_from_slice(body);
            out.extend_from_slice(b"\r\n");
        };
        match self {
            Reply::Simple(s) => line(b'+', s, out),
            Reply::Error(s) => line(b'-', s, out),
            Reply::Integer(n) => line(b':', itoa::Buffer::new().format(*n).as_bytes(), out),
            Reply::Bulk(data) => {
                line(b'$', itoa::Buffer::new().format(data.len()).as_bytes(), out);
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Nil => line(b'$', b"-1", out),
            Reply::Array(items) => {
                line(b'*', itoa::Buffer::new().format(items.len()).as_bytes(), out);
                for item in items {
                    item.encode(out);
                }
            }
            Reply::NilArray => line(b'*', b"-1", out),
        }
    }

    /// [`Reply::encode`] into a new vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// The reply's `Debug` form for a message, cut after `max` bytes (see [`brief`]).
    pub fn brief(&self, max: usize) -> String {
        brief(self, max)
    }
}

/// `value`'s `Debug` form for a message, cut after `max` bytes (`...` marks the cut).
/// Formatting stops there: an array of a million elements costs `max`, not megabytes.
pub fn brief(value: &dyn fmt::Debug, max: usize) -> String {
    let mut out = Bounded { text: String::new(), room: max };
    if fmt::write(&mut out, format_args!("{value:?}")).is_err() {
        out.text.push_str("...");
    }
    out.text
}

/// A `fmt::Write` that takes `room` bytes, then fails (which ends the formatting).
struct Bounded {
    text: String,
    room: usize,
}

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if s.len() <= self.room {
            self.text.push_str(s);
            self.room -= s.len();
            return Ok(());
        }
        let mut cut = self.room;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&s[..cut]);
        self.room = 0;
        Err(fmt::Error)
    }
}

impl fmt::Debug for Reply {
    // Bulk payloads can be megabytes: show their size and a short prefix only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Simple(s) => write!(f, "Simple({:?})", String::from_utf8_lossy(s)),
            Reply::Error(s) => write!(f, "Error({:?})", String::from_utf8_lossy(s)),
            Reply::Integer(n) => write!(f, "Integer({n})"),
            Reply::Bulk(data) if data.len() > 32 => {
                write!(f, "Bulk({} bytes: {:?}...)", data.len(), String::from_utf8_lossy(&data[..32]))
            }
            Reply::Bulk(data) => write!(f, "Bulk({:?})", String::from_utf8_lossy(data)),
            Reply::Nil => f.write_str("Nil"),
            Reply::Array(items) => f.debug_list().entries(items).finish(),
            Reply::NilArray => f.write_str("NilArray"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_brief_reply_is_cut_without_formatting_the_rest() {
        let small = Reply::Array(vec![Reply::Bulk(b"10.0.0.5".to_vec()), Reply::Integer(6379)]);
        assert_eq!(small.brief(100), r#"[Bulk("10.0.0.5"), Integer(6379)]"#);
        let huge = Reply::Array(vec![Reply::Bulk("é".repeat(8).into_bytes()); 1_000_000]);
        let brief = huge.brief(64);
        assert!(brief.len() <= 64 + 3 && brief.ends_with("..."), "{brief}");
        assert!(brief.starts_with(r#"[Bulk("éééé"#), "{brief}");
        assert_eq!(Reply::Nil.brief(0), "...");
    }
}
