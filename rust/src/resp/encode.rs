//! RESP2 command encoding.
//!
//! A command goes on the wire as three parts: a header (array length, command name, key and,
//! for SET, the value's bulk-length line), the value itself, and a trailer: the value's CRLF
//! and, for a SET with an expiry, its `PX ms` ([`Command::trailer`]). Header and trailer are
//! produced here; the value is never copied: callers hand the value's memory to
//! `writev`/`sendmsg` as its own iovec between the two.

use std::borrow::Cow;

/// Bytes that follow a SET value on the wire when it has no expiry.
pub const TRAILER: &[u8] = b"\r\n";

/// The commands this client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command<'a> {
    /// `SET key <value> [PX ms]`; the value (of `value_len` bytes) travels as a separate
    /// iovec, the expiry in the trailer after it.
    Set {
        /// The key.
        key: &'a [u8],
        /// Bytes of the value.
        value_len: usize,
        /// The key expires this many milliseconds after the SET (`PX`); None: never.
        expiry_ms: Option<u64>,
    },
    /// `GET key`.
    Get {
        /// The key.
        key: &'a [u8],
    },
    /// `EXISTS key`.
    Exists {
        /// The key.
        key: &'a [u8],
    },
    /// `DEL key`.
    Del {
        /// The key.
        key: &'a [u8],
    },
    /// `AUTH password` or, with a username (Redis 6 ACL), `AUTH username password`.
    Auth {
        /// The ACL user; `None` for the default user.
        username: Option<&'a [u8]>,
        /// The password.
        password: &'a [u8],
    },
    /// `PING`.
    Ping,
    /// `HELLO 2`: the server's name and version, staying on RESP2 (Redis 6 and later).
    Hello,
    /// `SELECT db`.
    Select {
        /// The database number.
        db: u32,
    },
    /// `ASKING`: the next command may touch a slot being imported (Redis Cluster).
    Asking,
    /// `READONLY`: a cluster replica serves this connection's reads of its primary's slots.
    ReadOnly,
    /// `CLUSTER <subcommand>` without arguments (`SHARDS`, `SLOTS`).
    Cluster {
        /// The subcommand's name, sent as given.
        subcommand: &'a [u8],
    },
    /// `GETRANGE key start end`: bytes `start..=end` of the value (a ranged read's piece).
    GetRange {
        /// The key.
        key: &'a [u8],
        /// Offset of the first byte.
        start: usize,
        /// Offset of the last byte (inclusive, as Redis counts).
        end: usize,
    },
    /// `STRLEN key`: the value's length (0 for a missing key).
    Strlen {
        /// The key.
        key: &'a [u8],
    },
    /// `WATCH key`: a later `EXEC` on this connection fails if the key was written since.
    Watch {
        /// The key.
        key: &'a [u8],
    },
    /// `UNWATCH`: forgets this connection's watched keys.
    Unwatch,
    /// `MULTI`: starts a transaction.
    Multi,
    /// `EXEC`: runs the transaction, or fails it (nil) if a watched key was written.
    Exec,
}

impl Command<'_> {
    /// Length of the value iovec that follows the header, if the command carries one.
    #[cfg(test)]
    pub fn value_len(&self) -> Option<usize> {
        match *self {
            Command::Set { value_len, .. } => Some(value_len),
            _ => None,
        }
    }

    /// Bytes of the whole frame: header, value and trailer.
    #[cfg(test)]
    pub fn frame_len(&self) -> usize {
        self.header_len() + self.value_len().map_or(0, |len| len + self.trailer().len())
    }

    /// What follows the value of a command that carries one: its CRLF, then a SET's
    /// `PX ms` (a bulk string each, counted in the header's array length). Empty for the
    /// commands without a value.
    pub fn trailer(&self) -> Cow<'static, [u8]> {
        match *self {
            Command::Set { expiry_ms: None, .. } => Cow::Borrowed(TRAILER),
            Command::Set { expiry_ms: Some(ms), .. } => {
                let mut digits = itoa::Buffer::new();
                let ms = digits.format(ms).as_bytes();
                let mut out = Vec::with_capacity(TRAILER.len() + 8 + bulk_len_line(ms.len()) + ms.len() + 2);
                out.extend_from_slice(TRAILER);
                push_bulk(&mut out, b"PX");
                push_bulk(&mut out, ms);
                Cow::Owned(out)
            }
            _ => Cow::Borrowed(&[]),
        }
    }

    /// Bytes of the header alone, computed without encoding anything.
    pub fn header_len(&self) -> usize {
        let mut len = 0;
        self.for_each_part(|part| {
            len += match part {
                Part::ArrayLen(n) => array_len_line(n),
                Part::Arg(arg) => bulk_len_line(arg.len()) + arg.len() + 2,
                Part::ValueLen(n) => bulk_len_line(n),
            }
        });
        len
    }

    /// Appends the header to `out`; exactly [`Command::header_len`] bytes.
    pub fn encode_header(&self, out: &mut Vec<u8>) {
        out.reserve(self.header_len());
        self.for_each_part(|part| match part {
            Part::ArrayLen(n) => push_len_line(out, b'*', n),
            Part::Arg(arg) => push_bulk(out, arg),
            Part::ValueLen(n) => push_len_line(out, b'$', n),
        });
    }

    /// The header as a new vector.
    pub fn header(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_header(&mut out);
        out
    }

    // One description of each command's shape serves both the length computation and the
    // encoder, so the two cannot disagree.
    fn for_each_part(&self, mut emit: impl FnMut(Part<'_>)) {
        let mut db_digits = itoa::Buffer::new();
        let (mut start_digits, mut end_digits) = (itoa::Buffer::new(), itoa::Buffer::new());
        let mut args = |name: &'static [u8], rest: &[&[u8]], value: Option<usize>| {
            emit(Part::ArrayLen(1 + rest.len() + usize::from(value.is_some())));
            emit(Part::Arg(name));
            for arg in rest {
                emit(Part::Arg(arg));
            }
            if let Some(n) = value {
                emit(Part::ValueLen(n));
            }
        };
        match *self {
            Command::Set { key, value_len, expiry_ms } => {
                // The trailer's `PX ms` are the array's last two elements.
                emit(Part::ArrayLen(3 + if expiry_ms.is_some() { 2 } else { 0 }));
                emit(Part::Arg(b"SET"));
                emit(Part::Arg(key));
                emit(Part::ValueLen(value_len));
            }
            Command::Get { key } => args(b"GET", &[key], None),
            Command::Exists { key } => args(b"EXISTS", &[key], None),
            Command::Del { key } => args(b"DEL", &[key], None),
            Command::Auth { username: Some(user), password } => args(b"AUTH", &[user, password], None),
            Command::Auth { username: None, password } => args(b"AUTH", &[password], None),
            Command::Ping => args(b"PING", &[], None),
            Command::Hello => args(b"HELLO", &[b"2"], None),
            Command::Select { db } => args(b"SELECT", &[db_digits.format(db).as_bytes()], None),
            Command::Asking => args(b"ASKING", &[], None),
            Command::ReadOnly => args(b"READONLY", &[], None),
            Command::Cluster { subcommand } => args(b"CLUSTER", &[subcommand], None),
            Command::GetRange { key, start, end } => args(
                b"GETRANGE",
                &[key, start_digits.format(start).as_bytes(), end_digits.format(end).as_bytes()],
                None,
            ),
            Command::Strlen { key } => args(b"STRLEN", &[key], None),
            Command::Watch { key } => args(b"WATCH", &[key], None),
            Command::Unwatch => args(b"UNWATCH", &[], None),
            Command::Multi => args(b"MULTI", &[], None),
            Command::Exec => args(b"EXEC", &[], None),
        }
    }
}

enum Part<'a> {
    ArrayLen(usize),
    Arg(&'a [u8]),
    ValueLen(usize),
}

fn decimal_digits(mut n: usize) -> usize {
    let mut digits = 1;
    while n >= 10 {
        n /= 10;
        digits += 1;
    }
    digits
}

/// `*<n>\r\n`
fn array_len_line(n: usize) -> usize {
    1 + decimal_digits(n) + 2
}

/// `$<n>\r\n`
fn bulk_len_line(n: usize) -> usize {
    1 + decimal_digits(n) + 2
}

/// Any command given as its arguments, encoded whole: for what [`Command`] does not name
/// (`ROLE`, `SENTINEL ...`, `SUBSCRIBE`), sent by the blocking client.
pub fn encode_args(args: &[&[u8]]) -> Vec<u8> {
    let len =
        array_len_line(args.len()) + args.iter().map(|arg| bulk_len_line(arg.len()) + arg.len() + 2).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    push_len_line(&mut out, b'*', args.len());
    for arg in args {
        push_bulk(&mut out, arg);
    }
    out
}

/// One bulk string: its `$len` line, its bytes, CRLF.
fn push_bulk(out: &mut Vec<u8>, arg: &[u8]) {
    push_len_line(out, b'$', arg.len());
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

fn push_len_line(out: &mut Vec<u8>, kind: u8, n: usize) {
    out.push(kind);
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_command_is_an_array_of_bulk_strings_of_the_length_reserved() {
        let frame = encode_args(&[b"SENTINEL", b"replicas", b"my master"]);
        assert_eq!(frame, b"*3\r\n$8\r\nSENTINEL\r\n$8\r\nreplicas\r\n$9\r\nmy master\r\n");
        assert_eq!(frame.capacity(), frame.len(), "the length is computed, not grown into");
        assert_eq!(encode_args(&[b"ROLE"]), b"*1\r\n$4\r\nROLE\r\n");
    }

    fn whole_frame(cmd: &Command<'_>, value: &[u8]) -> Vec<u8> {
        let mut out = cmd.header();
        if cmd.value_len().is_some() {
            out.extend_from_slice(value);
            out.extend_from_slice(&cmd.trailer());
        }
        out
    }

    #[test]
    fn set_frame_is_header_value_trailer() {
        let cmd = Command::Set { key: b"k1", value_len: 5, expiry_ms: None };
        assert_eq!(cmd.header(), b"*3\r\n$3\r\nSET\r\n$2\r\nk1\r\n$5\r\n");
        assert_eq!(whole_frame(&cmd, b"hello"), b"*3\r\n$3\r\nSET\r\n$2\r\nk1\r\n$5\r\nhello\r\n");
        assert_eq!(cmd.frame_len(), whole_frame(&cmd, b"hello").len());
    }

    #[test]
    fn a_set_with_an_expiry_is_one_command_ending_in_px() {
        let cmd = Command::Set { key: b"t@k", value_len: 5, expiry_ms: Some(30_000) };
        let frame = whole_frame(&cmd, b"hello");
        assert_eq!(frame, b"*5\r\n$3\r\nSET\r\n$3\r\nt@k\r\n$5\r\nhello\r\n$2\r\nPX\r\n$5\r\n30000\r\n");
        assert_eq!(cmd.frame_len(), frame.len());
        // The frame parses as one whole array of the five arguments, nothing left over.
        let mut decoder = crate::resp::decoder::Decoder::default();
        let (used, reply) = decoder.decode(&frame).unwrap();
        assert_eq!(used, frame.len());
        let args: Vec<&[u8]> = vec![b"SET", b"t@k", b"hello", b"PX", b"30000"];
        let expected =
            crate::resp::Reply::Array(args.into_iter().map(|a| crate::resp::Reply::Bulk(a.to_vec())).collect());
        assert_eq!(reply, Some(expected));
        assert_eq!(Command::Get { key: b"k" }.trailer().len(), 0);
    }

    #[test]
    fn every_command_encodes_to_the_exact_wire_bytes() {
        let cases: &[(Command<'_>, &[u8])] = &[
            (Command::Get { key: b"a b" }, b"*2\r\n$3\r\nGET\r\n$3\r\na b\r\n"),
            (Command::Exists { key: b"" }, b"*2\r\n$6\r\nEXISTS\r\n$0\r\n\r\n"),
            (Command::Del { key: b"\r\n" }, b"*2\r\n$3\r\nDEL\r\n$2\r\n\r\n\r\n"),
            (Command::Ping, b"*1\r\n$4\r\nPING\r\n"),
            (Command::Asking, b"*1\r\n$6\r\nASKING\r\n"),
            (Command::ReadOnly, b"*1\r\n$8\r\nREADONLY\r\n"),
            (Command::Cluster { subcommand: b"SHARDS" }, b"*2\r\n$7\r\nCLUSTER\r\n$6\r\nSHARDS\r\n"),
            (Command::Select { db: 15 }, b"*2\r\n$6\r\nSELECT\r\n$2\r\n15\r\n"),
            (Command::Auth { username: None, password: b"pw" }, b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n"),
            (Command::Auth { username: Some(b"u"), password: b"pw" }, b"*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$2\r\npw\r\n"),
            (
                Command::GetRange { key: b"k", start: 4_194_304, end: 8_388_607 },
                b"*4\r\n$8\r\nGETRANGE\r\n$1\r\nk\r\n$7\r\n4194304\r\n$7\r\n8388607\r\n",
            ),
            (Command::Strlen { key: b"k" }, b"*2\r\n$6\r\nSTRLEN\r\n$1\r\nk\r\n"),
            (Command::Watch { key: b"k" }, b"*2\r\n$5\r\nWATCH\r\n$1\r\nk\r\n"),
            (Command::Unwatch, b"*1\r\n$7\r\nUNWATCH\r\n"),
            (Command::Multi, b"*1\r\n$5\r\nMULTI\r\n"),
            (Command::Exec, b"*1\r\n$4\r\nEXEC\r\n"),
        ];
        for (cmd, wire) in cases {
            assert_eq!(&cmd.header(), wire, "{cmd:?}");
            assert_eq!(cmd.header_len(), wire.len(), "{cmd:?}");
            assert_eq!(cmd.frame_len(), wire.len(), "{cmd:?}");
        }
    }

    #[test]
    fn lengths_are_right_across_digit_boundaries() {
        for len in [0usize, 9, 10, 99, 100, 4 << 20, 32 << 20, usize::MAX] {
            let cmd = Command::Set { key: b"key", value_len: len, expiry_ms: None };
            let header = cmd.header();
            assert_eq!(header.len(), cmd.header_len());
            let expected_tail = format!("${len}\r\n");
            assert!(header.ends_with(expected_tail.as_bytes()));
        }
        let long_key = vec![b'x'; 65536];
        let cmd = Command::Get { key: &long_key };
        assert_eq!(cmd.header().len(), cmd.header_len());
        assert_eq!(cmd.header_len(), 4 + 9 + 8 + 65536 + 2);
    }

    #[test]
    fn decimal_digits_counts_correctly() {
        for (n, d) in [(0, 1), (9, 1), (10, 2), (999, 3), (1000, 4), (usize::MAX, 20)] {
            assert_eq!(decimal_digits(n), d, "{n}");
        }
    }
}
