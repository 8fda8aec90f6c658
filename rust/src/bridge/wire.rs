//! What bridge and clients say to each other. Pure code: encoding and checked decoding.
//!
//! The control socket carries frames of `u32 length (LE) + kind + fields`: the handshake
//! (with file descriptors passed alongside, SCM_RIGHTS), page allocation and freeing, and the
//! bridge's reasons when it drops a client. The data path is the client's own region in
//! shared memory (its ring pair and its pages): one submission record per batch, and one or
//! more completion records per batch (a batch's outcomes are split into records that fit the
//! ring, each naming the outcomes it carries).
//!
//! Everything a client sends is untrusted: every decoder checks every length and count, and
//! the bridge checks every page a batch names against the pages it gave that client.

use crate::conn::Outcome;
use crate::engine::records::{COMPLETION_HEADER_LEN, decode_completion, encode_completion};
use crate::error::{Error, ErrorKind, Result};
use crate::op::Op;

/// `b"LMCRBRDG"`: the first bytes of every handshake.
pub const MAGIC: [u8; 8] = *b"LMCRBRDG";
/// Bump on any incompatible change; a mismatch is refused with both numbers named. 4: the
/// metrics carry what each server is and how its large values are read.
pub const PROTOCOL_VERSION: u32 = 4;
/// The largest control frame a client reads (a bridge's page list of a whole pool stays far
/// below).
pub const MAX_FRAME: usize = 64 << 20;
/// The largest control frame a bridge accepts from a client: every request is a few bytes; a
/// larger one is a broken or hostile client, dropped before its frame is buffered.
pub const MAX_CLIENT_FRAME: usize = 64 << 10;
/// No page: EXISTS and DEL name only keys.
pub const NO_PAGE: u32 = u32::MAX;

/// Control messages, client to bridge and back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Control {
    /// A client's first message: sent right after connecting.
    Hello {
        /// The client's [`PROTOCOL_VERSION`]; the bridge refuses any other.
        version: u32,
        /// The client's process id as it says (the bridge logs the kernel's word for it).
        pid: u32,
        /// The submission ring the client wants, in bytes (0: the bridge's default); the
        /// bridge keeps it within its bounds.
        submission_ring_bytes: u32,
    },
    /// Sent with two fds: the client's region (a memfd holding its ring pair and its pages,
    /// and nothing of any other client) and the client's end of its signal socketpair (it
    /// writes there after submitting; it is readable after the bridge completed something).
    Welcome(Welcome),
    /// The bridge's answer to a `Hello` it does not accept, or to a connection it cannot take.
    Refused {
        /// Why, for the client's user.
        reason: String,
        /// What kind of error the client should raise ([`ErrorKind`] as a code): permanent
        /// (not allowed: `Authentication`) or transient (full: `Connection`). None for a
        /// protocol version mismatch, which is sent without it so that clients of any version
        /// can read it.
        kind: Option<u8>,
    },
    /// `count` pages, or none if fewer are free: answered with `Pages` or `Failed`.
    Allocate {
        /// Pages asked for.
        count: u32,
    },
    /// One page if one is free: answered with `Pages` of zero or one entries (an exhausted
    /// pool is not an error here).
    AllocateOne,
    /// `(index, generation)` of each page allocated.
    Pages {
        /// The pages, now the client's.
        pages: Vec<(u32, u32)>,
    },
    /// Gives one of the client's pages back to the pool: answered with `Freed` or `Failed`.
    Free {
        /// The page's index in the page arena.
        index: u32,
        /// The generation `Pages` gave it; a page the client does not hold in this generation
        /// is refused.
        generation: u32,
    },
    /// The page of a `Free` is back in the pool.
    Freed,
    /// The pool's free pages (a gauge of the shared pool).
    Stats,
    /// The answer to `Stats`.
    StatsReply {
        /// Pages free in the shared pool now.
        free_pages: u64,
    },
    /// The bridge engine's counters (`stats()` of a bridged front).
    Metrics,
    /// The answer to `Metrics`: a [`crate::metrics::Snapshot`], encoded.
    MetricsReply {
        /// `crate::metrics::Snapshot::encode`'s bytes.
        snapshot: Vec<u8>,
    },
    /// A request failed, or (unasked) why the bridge drops the client.
    Failed {
        /// The [`ErrorKind`]'s code ([`failed_error`] turns it back into an [`Error`]).
        kind: u8,
        /// The error's message.
        message: String,
    },
    /// The client is leaving: the bridge takes its idle pages back before answering, so they
    /// are in the pool when `close()` returns.
    Detach,
    /// The answer to `Detach`.
    Detached {
        /// Pages taken back into the pool now (pages of batches still in flight follow when
        /// those finish).
        pages: u32,
    },
}

/// What a client learns at the handshake. No credentials: they stay in the bridge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// The bridge's [`PROTOCOL_VERSION`].
    pub version: u32,
    /// The bridge's number for this client, unique while the bridge runs.
    pub client_id: u32,
    /// Bytes per page.
    pub page_size: u64,
    /// Pages in the client's region: the most it may hold at once.
    pub num_pages: u64,
    /// I/O worker threads of the bridge's engine.
    pub num_workers: u32,
    /// Every key of a batch completes within this many milliseconds of its submission.
    pub timeout_ms: u64,
    /// Where the bridge's I/O goes (`host:port`, `unix:/path`, `cluster ...`), for reprs.
    pub endpoint: String,
}

const HELLO: u8 = 1;
const WELCOME: u8 = 2;
const REFUSED: u8 = 3;
const ALLOCATE: u8 = 4;
const PAGES: u8 = 5;
const FREE: u8 = 6;
const FREED: u8 = 7;
const STATS: u8 = 8;
const STATS_REPLY: u8 = 9;
const FAILED: u8 = 10;
const DETACH: u8 = 11;
const DETACHED: u8 = 12;
const ALLOCATE_ONE: u8 = 13;
const METRICS: u8 = 14;
const METRICS_REPLY: u8 = 15;

impl Control {
    /// The whole frame, length prefix included.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        match self {
            Control::Hello { version, pid, submission_ring_bytes } => {
                body.push(HELLO);
                body.extend_from_slice(&MAGIC);
                put_u32(&mut body, *version);
                put_u32(&mut body, *pid);
                put_u32(&mut body, *submission_ring_bytes);
            }
            Control::Welcome(w) => {
                body.push(WELCOME);
                body.extend_from_slice(&MAGIC);
                put_u32(&mut body, w.version);
                put_u32(&mut body, w.client_id);
                put_u64(&mut body, w.page_size);
                put_u64(&mut body, w.num_pages);
                put_u32(&mut body, w.num_workers);
                put_u64(&mut body, w.timeout_ms);
                put_str(&mut body, &w.endpoint);
            }
            Control::Refused { reason, kind } => {
                body.push(REFUSED);
                body.extend_from_slice(&MAGIC);
                put_str(&mut body, reason);
                body.extend(kind);
            }
            Control::Allocate { count } => {
                body.push(ALLOCATE);
                put_u32(&mut body, *count);
            }
            Control::AllocateOne => body.push(ALLOCATE_ONE),
            Control::Pages { pages } => {
                body.push(PAGES);
                put_u32(&mut body, pages.len() as u32);
                for (index, generation) in pages {
                    put_u32(&mut body, *index);
                    put_u32(&mut body, *generation);
                }
            }
            Control::Free { index, generation } => {
                body.push(FREE);
                put_u32(&mut body, *index);
                put_u32(&mut body, *generation);
            }
            Control::Freed => body.push(FREED),
            Control::Stats => body.push(STATS),
            Control::StatsReply { free_pages } => {
                body.push(STATS_REPLY);
                put_u64(&mut body, *free_pages);
            }
            Control::Metrics => body.push(METRICS),
            Control::MetricsReply { snapshot } => {
                body.push(METRICS_REPLY);
                put_u32(&mut body, snapshot.len() as u32);
                body.extend_from_slice(snapshot);
            }
            Control::Failed { kind, message } => {
                body.push(FAILED);
                body.push(*kind);
                put_str(&mut body, message);
            }
            Control::Detach => body.push(DETACH),
            Control::Detached { pages } => {
                body.push(DETACHED);
                put_u32(&mut body, *pages);
            }
        }
        let mut frame = Vec::with_capacity(4 + body.len());
        put_u32(&mut frame, body.len() as u32);
        frame.extend_from_slice(&body);
        frame
    }

    /// Decodes one frame's body (after its length prefix).
    pub fn decode(body: &[u8]) -> Result<Control, String> {
        let mut r = Reader::new(body);
        let kind = r.u8()?;
        let message = match kind {
            HELLO | WELCOME | REFUSED => {
                if r.bytes(MAGIC.len())? != MAGIC {
                    return Err("not an lmcache-resp bridge handshake (bad magic)".into());
                }
                match kind {
                    // A client of another version may not send the ring size: its Hello still
                    // decodes, so that the refusal can name both versions.
                    HELLO => {
                        let version = r.u32()?;
                        let pid = r.u32()?;
                        let ring_bytes_sent = version == PROTOCOL_VERSION || r.remaining() > 0;
                        Control::Hello {
                            version,
                            pid,
                            submission_ring_bytes: if ring_bytes_sent { r.u32()? } else { 0 },
                        }
                    }
                    WELCOME => Control::Welcome(Welcome {
                        version: r.u32()?,
                        client_id: r.u32()?,
                        page_size: r.u64()?,
                        num_pages: r.u64()?,
                        num_workers: r.u32()?,
                        timeout_ms: r.u64()?,
                        endpoint: r.string()?,
                    }),
                    _ => Control::Refused {
                        reason: r.string()?,
                        kind: if r.remaining() > 0 { Some(r.u8()?) } else { None },
                    },
                }
            }
            ALLOCATE => Control::Allocate { count: r.u32()? },
            ALLOCATE_ONE => Control::AllocateOne,
            PAGES => {
                let count = r.u32()? as usize;
                if count > r.remaining() / 8 {
                    return Err(format!("a page list of {count} entries overruns its frame"));
                }
                Control::Pages { pages: (0..count).map(|_| Ok((r.u32()?, r.u32()?))).collect::<Result<_, String>>()? }
            }
            FREE => Control::Free { index: r.u32()?, generation: r.u32()? },
            FREED => Control::Freed,
            STATS => Control::Stats,
            STATS_REPLY => Control::StatsReply { free_pages: r.u64()? },
            METRICS => Control::Metrics,
            METRICS_REPLY => {
                let len = r.u32()? as usize;
                Control::MetricsReply { snapshot: r.bytes(len)?.to_vec() }
            }
            FAILED => Control::Failed { kind: r.u8()?, message: r.string()? },
            DETACH => Control::Detach,
            DETACHED => Control::Detached { pages: r.u32()? },
            other => return Err(format!("unknown control message {other}")),
        };
        r.finish()?;
        Ok(message)
    }
}

/// One key of a submitted batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyEntry<'a> {
    /// The key, as sent to the server.
    pub key: &'a [u8],
    /// The page (with its allocation's generation), or [`NO_PAGE`].
    pub page: u32,
    /// The generation `Pages` gave the page; the bridge refuses a page the client does not
    /// hold in this generation.
    pub generation: u32,
    /// SET: bytes of the page sent; GET: room in the page.
    pub len: u64,
}

/// A batch as it crosses the submission ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission<'a> {
    /// The client's id for the batch; echoed in its completion.
    pub batch: u64,
    /// The operation of every key (never PING).
    pub op: Op,
    /// GET: only a value of exactly `len` bytes is read (see `crate::op::BatchShape`).
    pub exact_length: bool,
    /// The keys, in the order their outcomes come back.
    pub keys: Vec<KeyEntry<'a>>,
}

/// Bytes of a submission record before its keys.
pub const SUBMISSION_HEADER: usize = 16;
/// Bytes a key takes in a submission record besides the key itself.
pub const ENTRY_HEADER: usize = 20;

impl Submission<'_> {
    /// The record for the submission ring, written into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.push(self.op as u8);
        out.push(u8::from(self.exact_length));
        out.extend_from_slice(&[0, 0]);
        put_u32(out, self.keys.len() as u32);
        put_u64(out, self.batch);
        for entry in &self.keys {
            put_u32(out, entry.page);
            put_u32(out, entry.generation);
            put_u64(out, entry.len);
            put_u32(out, entry.key.len() as u32);
            out.extend_from_slice(entry.key);
        }
    }
}

impl<'a> Submission<'a> {
    /// Decodes a record written by a client: any malformation is an error naming it.
    pub fn decode(record: &'a [u8], max_key_len: usize) -> Result<Submission<'a>, String> {
        let mut r = Reader::new(record);
        let op = Op::from_code(r.u8()?).filter(|op| *op != Op::Ping).ok_or("unknown operation")?;
        let exact_length = match r.u8()? {
            0 => false,
            1 => true,
            other => return Err(format!("bad exact-length flag {other}")),
        };
        r.bytes(2)?;
        let count = r.u32()? as usize;
        let batch = r.u64()?;
        if count > r.remaining() / ENTRY_HEADER {
            return Err(format!("{count} keys cannot fit a {}-byte record", record.len()));
        }
        let mut keys = Vec::with_capacity(count);
        for i in 0..count {
            keys.push(read_entry(&mut r, max_key_len).map_err(|why| format!("key {i}: {why}"))?);
        }
        r.finish()?;
        Ok(Submission { batch, op, exact_length, keys })
    }
}

/// The key entries of a submission record from byte `at` on, each with where the next one
/// starts: a bridge keeps a batch as its record and walks it as its keys are sent. The record
/// must be one [`Submission::decode`] accepted (`at` the start of an entry, or its end);
/// otherwise the walk stops at the first entry that does not decode.
pub fn entries_from(record: &[u8], at: usize) -> impl Iterator<Item = (KeyEntry<'_>, usize)> {
    let mut r = Reader { data: record, at: at.max(SUBMISSION_HEADER) };
    std::iter::from_fn(move || {
        if r.remaining() == 0 {
            return None;
        }
        let entry = read_entry(&mut r, usize::MAX).ok()?;
        Some((entry, r.at))
    })
}

fn read_entry<'a>(r: &mut Reader<'a>, max_key_len: usize) -> Result<KeyEntry<'a>, String> {
    let page = r.u32()?;
    let generation = r.u32()?;
    let len = r.u64()?;
    let key_len = r.u32()? as usize;
    if key_len > max_key_len {
        return Err(format!("{key_len} bytes, longer than {max_key_len}"));
    }
    Ok(KeyEntry { key: r.bytes(key_len)?, page, generation, len })
}

/// One completion record: outcomes `start..start + outcomes.len()` of a batch of `total`
/// keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletionRecord {
    /// The client's id for the batch.
    pub batch: u64,
    /// The batch's operation.
    pub op: Op,
    /// Index of the first outcome this record carries.
    pub start: u32,
    /// Keys in the whole batch.
    pub total: u32,
    /// The outcomes, in key order.
    pub outcomes: Vec<Outcome>,
}

const COMPLETION_RECORD_HEADER: usize = 24;

/// A batch's outcomes as completion records of at most `max_record` bytes each (one outcome,
/// whose message is bounded, always fits a record of a few KiB).
#[cfg(test)]
pub fn encode_completion_records(batch: u64, op: Op, outcomes: &[Outcome], max_record: usize) -> Vec<Vec<u8>> {
    encode_completion_run(batch, op, 0, outcomes.len(), outcomes, max_record)
}

/// Outcomes `start..start + outcomes.len()` of a batch of `total` keys as completion records
/// of at most `max_record` bytes each: a bridge sends a batch's outcomes as its slices finish.
pub fn encode_completion_run(
    batch: u64,
    op: Op,
    start: usize,
    total: usize,
    outcomes: &[Outcome],
    max_record: usize,
) -> Vec<Vec<u8>> {
    let total = total as u32;
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut count = 0u32;
    let begin = |record: &mut Vec<u8>, start: usize| {
        record.clear();
        put_u64(record, batch);
        record.push(op as u8);
        record.extend_from_slice(&[0, 0, 0]);
        put_u32(record, start as u32);
        put_u32(record, total);
        put_u32(record, 0);
    };
    begin(&mut record, start);
    for (i, outcome) in outcomes.iter().enumerate().map(|(i, outcome)| (start + i, outcome)) {
        let (header, message) = encode_completion(i as u64, outcome);
        let size = header.len() + message.map_or(0, str::len);
        if count > 0 && record.len() + size > max_record {
            record[20..24].copy_from_slice(&count.to_le_bytes());
            records.push(std::mem::take(&mut record));
            count = 0;
            begin(&mut record, i);
        }
        record.extend_from_slice(&header);
        record.extend_from_slice(message.unwrap_or("").as_bytes());
        count += 1;
    }
    record[20..24].copy_from_slice(&count.to_le_bytes());
    records.push(record);
    records
}

/// Decodes a record `encode_completion_records` wrote; any malformation is an error naming
/// it.
pub fn decode_completion_record(record: &[u8]) -> Result<CompletionRecord, String> {
    let mut r = Reader::new(record);
    let batch = r.u64()?;
    let op = Op::from_code(r.u8()?).ok_or("unknown operation")?;
    r.bytes(3)?;
    let start = r.u32()?;
    let total = r.u32()?;
    let count = r.u32()? as usize;
    debug_assert_eq!(r.at, COMPLETION_RECORD_HEADER);
    if count > r.remaining() / COMPLETION_HEADER_LEN {
        return Err(format!("{count} outcomes cannot fit a {}-byte record", record.len()));
    }
    if start as u64 + count as u64 > u64::from(total) {
        return Err(format!("outcomes {start}..{} of a {total}-key batch", start as usize + count));
    }
    let mut outcomes = Vec::with_capacity(count);
    for i in 0..count {
        let rest = &record[r.at..];
        let message_len = rest.get(12..16).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize).unwrap_or(0);
        let size = COMPLETION_HEADER_LEN.checked_add(message_len).ok_or("overflow")?;
        let (tag, outcome) = decode_completion(r.bytes(size)?)?;
        if tag != start as u64 + i as u64 {
            return Err(format!("outcome {} is tagged {tag}", start as usize + i));
        }
        outcomes.push(outcome);
    }
    r.finish()?;
    Ok(CompletionRecord { batch, op, start, total, outcomes })
}

/// A control frame's error as the core error it carries.
pub fn failed_error(kind: u8, message: String) -> Error {
    Error::new(ErrorKind::from_code(kind).unwrap_or(ErrorKind::Protocol), message)
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, text: &str) {
    put_u32(out, text.len() as u32);
    out.extend_from_slice(text.as_bytes());
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { data, at: 0 }
    }

    fn remaining(&self) -> usize {
        self.data.len() - self.at
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.data.len()).ok_or_else(|| {
            format!("{n} more bytes wanted at offset {} of a {}-byte message", self.at, self.data.len())
        })?;
        let bytes = &self.data[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().unwrap()))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().unwrap()))
    }

    fn string(&mut self) -> Result<String, String> {
        let len = self.u32()? as usize;
        String::from_utf8(self.bytes(len)?.to_vec()).map_err(|_| "text that is not UTF-8".to_string())
    }

    fn finish(&self) -> Result<(), String> {
        if self.at == self.data.len() { Ok(()) } else { Err(format!("{} trailing bytes", self.data.len() - self.at)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn control_messages_round_trip() {
        let messages = [
            Control::Hello { version: PROTOCOL_VERSION, pid: 42, submission_ring_bytes: 1 << 20 },
            Control::Welcome(Welcome {
                version: 1,
                client_id: 3,
                page_size: 4 << 20,
                num_pages: 512,
                num_workers: 8,
                timeout_ms: 10_000,
                endpoint: "10.0.0.5:6379".into(),
            }),
            Control::Refused { reason: "protocol version 2, this bridge speaks 1".into(), kind: None },
            Control::Refused { reason: "uid 7 may not attach".into(), kind: Some(ErrorKind::Authentication as u8) },
            Control::Allocate { count: 7 },
            Control::AllocateOne,
            Control::Pages { pages: vec![(1, 2), (3, 4)] },
            Control::Free { index: 9, generation: 1 },
            Control::Freed,
            Control::Stats,
            Control::StatsReply { free_pages: 17 },
            Control::Metrics,
            Control::MetricsReply { snapshot: vec![1, 2, 3] },
            Control::Failed { kind: ErrorKind::Page as u8, message: "out of pages".into() },
            Control::Detach,
            Control::Detached { pages: 12 },
        ];
        for message in messages {
            let frame = message.encode();
            assert_eq!(u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize, frame.len() - 4);
            assert_eq!(Control::decode(&frame[4..]).unwrap(), message);
            for cut in 0..frame.len() - 4 {
                match (Control::decode(&frame[4..4 + cut]), &message) {
                    // The kind is optional (a version refusal goes without, for every version):
                    // without its last byte, a refusal is one without a kind.
                    (Ok(Control::Refused { reason, kind: None }), Control::Refused { reason: sent, kind: Some(_) }) => {
                        assert_eq!((&reason, cut), (sent, frame.len() - 5));
                    }
                    (decoded, _) => assert!(decoded.is_err(), "{message:?} cut at {cut}"),
                }
            }
        }
        assert!(Control::decode(b"\x01NOTMAGIC\x01\0\0\0\0\0\0\0").unwrap_err().contains("bad magic"));
    }

    #[test]
    fn batches_and_completions_round_trip() {
        let submission = Submission {
            batch: 77,
            op: Op::Get,
            exact_length: true,
            keys: vec![
                KeyEntry { key: b"model@0@a", page: 3, generation: 9, len: 4096 },
                KeyEntry { key: b"", page: 5, generation: 1, len: 0 },
            ],
        };
        let mut record = Vec::new();
        submission.encode(&mut record);
        assert_eq!(Submission::decode(&record, 1024).unwrap(), submission);
        assert!(Submission::decode(&record, 4).unwrap_err().contains("longer than 4"));
        let outcomes = vec![Outcome::Hit(4096), Outcome::Failed(Error::invalid("page 5 is not yours"))];
        let records = encode_completion_records(77, Op::Get, &outcomes, 1 << 20);
        assert_eq!(records.len(), 1);
        let record = decode_completion_record(&records[0]).unwrap();
        assert_eq!(record, CompletionRecord { batch: 77, op: Op::Get, start: 0, total: 2, outcomes });
    }

    #[test]
    fn a_large_batch_s_outcomes_split_into_records_that_fit_and_add_up() {
        let outcomes: Vec<Outcome> = (0..10_000)
            .map(|i| match i % 3 {
                0 => Outcome::Bool(true),
                1 => Outcome::Failed(Error::new(ErrorKind::Connection, format!("connection to h:{i} lost: reset"))),
                _ => Outcome::Miss,
            })
            .collect();
        let records = encode_completion_records(5, Op::Exists, &outcomes, 16 << 10);
        assert!(records.len() > 10);
        let mut seen = Vec::new();
        for record in &records {
            assert!(record.len() <= 16 << 10);
            let decoded = decode_completion_record(record).unwrap();
            assert_eq!((decoded.batch, decoded.total, decoded.start as usize), (5, 10_000, seen.len()));
            seen.extend(decoded.outcomes);
        }
        assert_eq!(seen, outcomes);
        let empty = encode_completion_records(6, Op::Del, &[], 16 << 10);
        assert_eq!(decode_completion_record(&empty[0]).unwrap().outcomes, vec![]);
    }

    #[test]
    fn a_hello_of_another_version_without_the_ring_size_still_decodes() {
        let mut body = vec![HELLO];
        body.extend_from_slice(&MAGIC);
        body.extend_from_slice(&2u32.to_le_bytes());
        body.extend_from_slice(&7u32.to_le_bytes());
        assert_eq!(Control::decode(&body).unwrap(), Control::Hello { version: 2, pid: 7, submission_ring_bytes: 0 });
    }

    proptest! {
        #[test]
        fn garbage_never_panics_the_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Control::decode(&bytes);
            let _ = Submission::decode(&bytes, 1 << 18);
            let _ = decode_completion_record(&bytes);
        }
    }
}
