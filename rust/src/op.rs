//! The crate's verbs and the contract every batch meets before anything is sent, whichever
//! front it comes through (the paged store, the connector over caller buffers, a bridge's
//! client or the bridge itself): keys, memory per key, and lengths, checked here and only here.

use crate::error::{Error, Result};
use std::collections::HashMap;

/// Longest key accepted; it bounds what a submission record must hold.
pub const MAX_KEY_LEN: usize = 256 * 1024;

/// The data operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Reads a value into a page or buffer.
    Get = 1,
    /// Stores a page or buffer (or its first bytes) as a value.
    Set = 2,
    /// Whether a key exists.
    Exists = 3,
    /// Deletes a key.
    Del = 4,
    /// Checks a connection (the engine's warm-up).
    Ping = 5,
}

impl Op {
    /// The op with this wire code (submission records carry it as one byte).
    pub fn from_code(code: u8) -> Option<Op> {
        [Op::Get, Op::Set, Op::Exists, Op::Del, Op::Ping].into_iter().find(|op| *op as u8 == code)
    }

    /// Safe to send again after a connection broke with the request unanswered: repeating it
    /// leaves the same state and gives an equally true answer. DEL is not: a repeat would
    /// report "not deleted" for a key the first attempt deleted.
    pub fn is_idempotent(self) -> bool {
        !matches!(self, Op::Del)
    }

    /// GET and SET move a value through memory, one page or buffer per key; the others name
    /// keys only.
    pub fn moves_values(self) -> bool {
        matches!(self, Op::Get | Op::Set)
    }

    /// The RESP command's name.
    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "GET",
            Op::Set => "SET",
            Op::Exists => "EXISTS",
            Op::Del => "DEL",
            Op::Ping => "PING",
        }
    }
}

/// What memory a batch names for its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// Pages of a store's pool: at most `page_size` bytes each.
    Pages {
        /// The pool's page size, which bounds every length.
        page_size: u64,
    },
    /// Caller buffers, whole.
    Buffers,
    /// Ranges of a region the caller registered with the engine.
    Ranges,
}

impl MemoryKind {
    fn noun(self) -> &'static str {
        match self {
            MemoryKind::Pages { .. } => "pages",
            MemoryKind::Buffers => "buffers",
            MemoryKind::Ranges => "ranges",
        }
    }
}

/// One batch as a front sees it before anything is sent: the op, its keys, how many pages or
/// buffers came with them, and the lengths asked for.
#[derive(Clone, Copy, Debug)]
pub struct BatchShape<'a> {
    /// The operation of every key.
    pub op: Op,
    /// The keys, as sent on the wire.
    pub keys: &'a [&'a [u8]],
    /// What kind of memory the batch names.
    pub memory: MemoryKind,
    /// Pages or buffers given (GET and SET need one per key; the other ops none).
    pub memories: usize,
    /// Bytes per key: what a SET sends, or the only length an exact-length GET accepts.
    pub lengths: Option<&'a [u64]>,
    /// GET: only a value of exactly the expected length is read (LMCache's fixed-size chunks).
    pub exact_length: bool,
}

impl<'a> BatchShape<'a> {
    /// A batch of `op` over `keys` with no memory (EXISTS, DEL, or a GET/SET given none).
    #[cfg(test)]
    pub fn keys_only(op: Op, keys: &'a [&'a [u8]]) -> BatchShape<'a> {
        BatchShape { op, keys, memory: MemoryKind::Buffers, memories: 0, lengths: None, exact_length: false }
    }

    /// Whether the batch may be sent: every key short enough, no key twice in a SET or DEL
    /// batch (which write would win is undefined), one page or buffer per key for GET and SET
    /// and none otherwise, and lengths only where they mean something, each within a page.
    pub fn check(&self) -> Result<()> {
        for (i, key) in self.keys.iter().enumerate() {
            check_key_len(key.len()).map_err(|err| err.context(format!("key {i}")))?;
        }
        if matches!(self.op, Op::Set | Op::Del) {
            check_unique(self.op, self.keys)?;
        }
        let keys = self.keys.len();
        let noun = self.memory.noun();
        match (self.op.moves_values(), self.memories) {
            (true, n) if n != keys => {
                return Err(Error::invalid(format!(
                    "{} needs one of its {noun} per key: {keys} keys but {n} {noun}",
                    self.op.name()
                )));
            }
            (false, n) if n > 0 => {
                return Err(Error::invalid(format!(
                    "{} takes keys only: {n} {noun} were given with its {keys} keys",
                    self.op.name()
                )));
            }
            _ => {}
        }
        let Some(lengths) = self.lengths else { return Ok(()) };
        let takes_lengths = self.op == Op::Set || (self.op == Op::Get && self.exact_length);
        if !takes_lengths {
            return Err(Error::invalid(format!(
                "lengths apply to SET only: {} receives up to a whole page",
                self.op.name()
            )));
        }
        if lengths.len() != keys {
            return Err(Error::invalid(format!("{keys} keys but {} lengths", lengths.len())));
        }
        if let MemoryKind::Pages { page_size } = self.memory {
            if let Some((i, len)) = lengths.iter().enumerate().find(|(_, len)| **len > page_size) {
                return Err(Error::invalid(format!("key {i}: length {len} is larger than the page size {page_size}")));
            }
        }
        Ok(())
    }
}

/// A key of `len` bytes is accepted (the bound a submission record must hold).
pub fn check_key_len(len: usize) -> Result<()> {
    if len > MAX_KEY_LEN {
        return Err(Error::invalid(format!("a key of {len} bytes is longer than the limit of {MAX_KEY_LEN} bytes")));
    }
    Ok(())
}

fn check_unique(op: Op, keys: &[&[u8]]) -> Result<()> {
    let mut seen = HashMap::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        if let Some(first) = seen.insert(*key, i) {
            let shown: String = String::from_utf8_lossy(key).chars().take(80).collect();
            return Err(Error::invalid(format!(
                "keys {first} and {i} are the same key ({shown:?}) in one {} batch, so which of them wins would be \
                 undefined: send them in separate batches",
                op.name()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: MemoryKind = MemoryKind::Pages { page_size: 100 };

    fn shape<'a>(op: Op, keys: &'a [&'a [u8]], memories: usize) -> BatchShape<'a> {
        BatchShape { op, keys, memory: PAGE, memories, lengths: None, exact_length: false }
    }

    #[test]
    fn ops_round_trip_through_their_codes() {
        for op in [Op::Get, Op::Set, Op::Exists, Op::Del, Op::Ping] {
            assert_eq!(Op::from_code(op as u8), Some(op));
        }
        assert_eq!(Op::from_code(0), None);
        assert_eq!(Op::from_code(6), None);
        assert!(!Op::Del.is_idempotent() && Op::Get.is_idempotent() && Op::Set.is_idempotent());
    }

    #[test]
    fn keys_are_bounded_and_unique_where_order_would_matter() {
        let long = vec![b'k'; MAX_KEY_LEN + 1];
        let keys: [&[u8]; 2] = [b"a", &long];
        let err = shape(Op::Exists, &keys, 0).check().unwrap_err();
        assert_eq!(
            err.message(),
            format!("key 1: a key of {} bytes is longer than the limit of {MAX_KEY_LEN} bytes", MAX_KEY_LEN + 1)
        );
        let exact: [&[u8]; 1] = [&long[..MAX_KEY_LEN]];
        shape(Op::Exists, &exact, 0).check().unwrap();

        let twice: [&[u8]; 3] = [b"k", b"x", b"k"];
        for op in [Op::Set, Op::Del] {
            let memories = if op == Op::Set { 3 } else { 0 };
            let err = shape(op, &twice, memories).check().unwrap_err();
            assert!(
                err.message().starts_with(&format!("keys 0 and 2 are the same key (\"k\") in one {} batch", op.name())),
                "{err}"
            );
        }
        // Reading or probing a key twice is well defined.
        shape(Op::Get, &twice, 3).check().unwrap();
        shape(Op::Exists, &twice, 0).check().unwrap();
    }

    #[test]
    fn memory_is_one_per_key_for_values_and_none_otherwise() {
        let keys: [&[u8]; 2] = [b"a", b"b"];
        let err = shape(Op::Get, &keys, 1).check().unwrap_err();
        assert_eq!(err.message(), "GET needs one of its pages per key: 2 keys but 1 pages");
        let err = BatchShape { memory: MemoryKind::Buffers, ..shape(Op::Set, &keys, 0) }.check().unwrap_err();
        assert_eq!(err.message(), "SET needs one of its buffers per key: 2 keys but 0 buffers");
        let err = shape(Op::Del, &keys, 2).check().unwrap_err();
        assert_eq!(err.message(), "DEL takes keys only: 2 pages were given with its 2 keys");
        shape(Op::Set, &keys, 2).check().unwrap();
        BatchShape::keys_only(Op::Exists, &keys).check().unwrap();
    }

    #[test]
    fn lengths_fit_a_page_and_only_set_or_exact_get_takes_them() {
        let keys: [&[u8]; 2] = [b"a", b"b"];
        let fits = [100, 0];
        let set = BatchShape { lengths: Some(&fits), ..shape(Op::Set, &keys, 2) };
        set.check().unwrap();
        let over = [100, 101];
        let err = BatchShape { lengths: Some(&over), ..set }.check().unwrap_err();
        assert_eq!(err.message(), "key 1: length 101 is larger than the page size 100");
        let short = [1];
        let err = BatchShape { lengths: Some(&short), ..set }.check().unwrap_err();
        assert_eq!(err.message(), "2 keys but 1 lengths");
        let get = BatchShape { lengths: Some(&fits), ..shape(Op::Get, &keys, 2) };
        assert_eq!(get.check().unwrap_err().message(), "lengths apply to SET only: GET receives up to a whole page");
        BatchShape { exact_length: true, ..get }.check().unwrap();
        // Buffers have no page to fit.
        BatchShape { memory: MemoryKind::Buffers, lengths: Some(&over), ..set }.check().unwrap();
    }
}
