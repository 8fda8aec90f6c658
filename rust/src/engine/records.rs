//! What travels through the rings: fixed little-endian layouts, offsets only, no pointers.
//!
//! Submission record: `(op, key, region + offset, length)` plus the batch tag, deadline and,
//! for a registered region, its id, followed by the key bytes. Completion record: the tag, the outcome and, for failures, the
//! error's kind and message.

use crate::conn::Outcome;
use crate::error::{Error, ErrorKind};
use crate::op::Op;

/// What memory a descriptor's operation reads (SET) or receives into (GET).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Region {
    /// None: EXISTS, DEL, PING.
    None = 0,
    /// `offset` from the start of the engine's shared-memory arena: inside one of its pages.
    Arena = 1,
    /// A buffer of the submitting process, registered in the engine's process-local table
    /// under the descriptor's tag. No address ever crosses the ring: another process that
    /// maps the arena can name only buffers of batches in flight, by their tag.
    Buffer = 2,
    /// `offset` from the start of a region the caller registered with the engine (a host KV
    /// pool), named by the descriptor's `region` id; the worker checks the range against it.
    Registered = 3,
}

impl Region {
    fn from_code(code: u8) -> Option<Region> {
        [Region::None, Region::Arena, Region::Buffer, Region::Registered].into_iter().find(|r| *r as u8 == code)
    }
}

/// Descriptor flag: a GET whose value must be exactly `len` bytes; any other length is a miss
/// and the destination is left untouched (LMCache's fixed-size chunks).
pub const FLAG_EXACT_LENGTH: u8 = 1;

/// A batch slot and a key index within the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    /// The batch's slot (its counter in the control block).
    pub slot: u32,
    /// The key's position in its batch.
    pub index: u32,
}

impl Tag {
    /// The tag as records carry it: the slot in the high 32 bits, the index in the low.
    pub fn pack(self) -> u64 {
        (u64::from(self.slot) << 32) | u64::from(self.index)
    }

    /// The tag [`Tag::pack`] packed.
    pub fn unpack(tag: u64) -> Tag {
        Tag { slot: (tag >> 32) as u32, index: tag as u32 }
    }
}

/// One operation on one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptor<'a> {
    /// The operation.
    pub op: Op,
    /// Which batch and key the completion answers.
    pub tag: Tag,
    /// What memory the value moves through.
    pub region: Region,
    /// [`FLAG_EXACT_LENGTH`] or 0.
    pub flags: u8,
    /// Offset into the arena (`Region::Arena`) or the registered region; 0 otherwise.
    pub offset: u64,
    /// The registered region's id (`Region::Registered`); 0 otherwise.
    pub region_id: u32,
    /// SET: value length. GET: destination capacity. EXISTS/DEL: 0.
    pub len: u64,
    /// Nanoseconds on [`crate::clock`]'s monotonic clock.
    pub deadline_ns: u64,
    /// The key, as sent to the server.
    pub key: &'a [u8],
}

/// Bytes of a submission record before its key.
pub const SUBMISSION_HEADER_LEN: usize = 48;
/// Bytes of a completion record before its error message (if any).
pub const COMPLETION_HEADER_LEN: usize = 24;

impl<'a> Descriptor<'a> {
    /// The fixed part; the key follows it in the same record.
    #[cfg(test)]
    pub fn header(&self) -> [u8; SUBMISSION_HEADER_LEN] {
        self.header_with_prefix(&[])
    }

    /// The fixed part of a record whose key is `prefix` then [`Descriptor::key`] (a
    /// namespace's `<prefix>@`, pushed as its own slice: the key is not copied to join them).
    /// The record decodes with the two as one key.
    pub fn header_with_prefix(&self, prefix: &[u8]) -> [u8; SUBMISSION_HEADER_LEN] {
        let mut out = [0u8; SUBMISSION_HEADER_LEN];
        out[0] = self.op as u8;
        out[1] = self.region as u8;
        out[2] = self.flags;
        out[4..8].copy_from_slice(&((prefix.len() + self.key.len()) as u32).to_le_bytes());
        out[8..16].copy_from_slice(&self.tag.pack().to_le_bytes());
        out[16..24].copy_from_slice(&self.offset.to_le_bytes());
        out[24..32].copy_from_slice(&self.len.to_le_bytes());
        out[32..40].copy_from_slice(&self.deadline_ns.to_le_bytes());
        out[40..44].copy_from_slice(&self.region_id.to_le_bytes());
        out
    }

    /// Reads a descriptor back from a submission record.
    pub fn decode(record: &'a [u8]) -> Result<Descriptor<'a>, String> {
        if record.len() < SUBMISSION_HEADER_LEN {
            return Err(format!("submission record of {} bytes is shorter than its header", record.len()));
        }
        let op = Op::from_code(record[0]).ok_or_else(|| format!("unknown op code {}", record[0]))?;
        let region = Region::from_code(record[1]).ok_or_else(|| format!("unknown region {}", record[1]))?;
        let flags = record[2];
        if flags & !FLAG_EXACT_LENGTH != 0 {
            return Err(format!("unknown descriptor flags {flags:#x}"));
        }
        let key_len = u32_at(record, 4) as usize;
        let key = record
            .get(SUBMISSION_HEADER_LEN..SUBMISSION_HEADER_LEN + key_len)
            .ok_or_else(|| format!("key of {key_len} bytes overruns a {}-byte record", record.len()))?;
        Ok(Descriptor {
            op,
            tag: Tag::unpack(u64_at(record, 8)),
            region,
            flags,
            offset: u64_at(record, 16),
            len: u64_at(record, 24),
            deadline_ns: u64_at(record, 32),
            region_id: u32_at(record, 40),
            key,
        })
    }
}

/// Encodes a completion: header and message as the two parts of one ring record.
pub fn encode_completion(tag: u64, outcome: &Outcome) -> ([u8; COMPLETION_HEADER_LEN], Option<&str>) {
    let mut out = [0u8; COMPLETION_HEADER_LEN];
    out[0..8].copy_from_slice(&tag.to_le_bytes());
    let (status, value, failure) = match outcome {
        Outcome::Done => (0u8, 0u64, None),
        Outcome::Hit(len) => (1, *len as u64, None),
        Outcome::Miss => (2, 0, None),
        Outcome::Bool(flag) => (3, u64::from(*flag), None),
        Outcome::Failed(err) => (4, 0, Some((err.kind(), err.message()))),
        // Only the blocking client sends commands; their replies never take the rings.
        Outcome::Reply(_) => (4, 0, Some((ErrorKind::Protocol, "a command's reply cannot cross a completion ring"))),
    };
    out[8] = status;
    if let Some((kind, message)) = failure {
        out[9] = kind as u8;
        out[12..16].copy_from_slice(&(message.len() as u32).to_le_bytes());
    }
    out[16..24].copy_from_slice(&value.to_le_bytes());
    (out, failure.map(|(_, message)| message))
}

/// Reads a completion record back: the tag and the outcome; any malformation is an error
/// naming it.
pub fn decode_completion(record: &[u8]) -> Result<(u64, Outcome), String> {
    if record.len() < COMPLETION_HEADER_LEN {
        return Err(format!("completion record of {} bytes is shorter than its header", record.len()));
    }
    let tag = u64_at(record, 0);
    let value = u64_at(record, 16);
    let outcome = match record[8] {
        0 => Outcome::Done,
        1 => Outcome::Hit(value as usize),
        2 => Outcome::Miss,
        3 => Outcome::Bool(value != 0),
        4 => {
            let kind = ErrorKind::from_code(record[9]).ok_or_else(|| format!("unknown error kind {}", record[9]))?;
            let len = u32_at(record, 12) as usize;
            let message = record
                .get(COMPLETION_HEADER_LEN..COMPLETION_HEADER_LEN + len)
                .ok_or_else(|| format!("message of {len} bytes overruns a {}-byte record", record.len()))?;
            Outcome::Failed(Error::new(kind, String::from_utf8_lossy(message)))
        }
        other => return Err(format!("unknown completion status {other}")),
    };
    Ok((tag, outcome))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_round_trip() {
        let key = b"model@00000001@0@abcdef";
        let descriptor = Descriptor {
            op: Op::Get,
            tag: Tag { slot: 7, index: 123_456 },
            region: Region::Registered,
            flags: FLAG_EXACT_LENGTH,
            offset: 0x1234_5000,
            region_id: 77,
            len: 4 << 20,
            deadline_ns: 987_654_321,
            key,
        };
        let mut record = descriptor.header().to_vec();
        record.extend_from_slice(key);
        assert_eq!(Descriptor::decode(&record).unwrap(), descriptor);
        // With a namespace's prefix before the key, the record decodes as the joined key.
        let mut record = descriptor.header_with_prefix(b"tenantA@").to_vec();
        record.extend_from_slice(b"tenantA@");
        record.extend_from_slice(key);
        let joined = [&b"tenantA@"[..], key].concat();
        assert_eq!(Descriptor::decode(&record).unwrap(), Descriptor { key: &joined, ..descriptor });
        assert!(Descriptor::decode(&record[..record.len() - 1]).unwrap_err().contains("overruns"));
        record[2] = 0x80;
        assert!(Descriptor::decode(&record).unwrap_err().contains("unknown descriptor flags"));
        record[1] = 9;
        assert!(Descriptor::decode(&record).unwrap_err().contains("unknown region"));
        record[0] = 99;
        assert!(Descriptor::decode(&record).unwrap_err().contains("unknown op"));
    }

    #[test]
    fn completions_round_trip() {
        let outcomes = [
            Outcome::Done,
            Outcome::Hit(4 << 20),
            Outcome::Miss,
            Outcome::Bool(true),
            Outcome::Bool(false),
            Outcome::Failed(Error::value_too_large(5000, 4096)),
            Outcome::Failed(Error::new(ErrorKind::Connection, "connection to h:1 lost: reset")),
        ];
        for (i, outcome) in outcomes.iter().enumerate() {
            let (header, message) = encode_completion(i as u64 * 77, outcome);
            let mut record = header.to_vec();
            record.extend_from_slice(message.unwrap_or("").as_bytes());
            assert_eq!(decode_completion(&record).unwrap(), (i as u64 * 77, outcome.clone()));
        }
    }

    #[test]
    fn tags_pack_slot_and_index() {
        let tag = Tag { slot: u32::MAX, index: 1 };
        assert_eq!(Tag::unpack(tag.pack()), tag);
    }

    #[test]
    fn a_callers_tag_is_never_taken_for_a_ranged_reads_own() {
        // Ranged reads mark their own requests' tags with INTERNAL_TAG (bit 63); the highest
        // batch slot an engine may have stays below it.
        let highest = Tag { slot: crate::metrics::MAX_BATCH_SLOTS as u32 - 1, index: u32::MAX };
        assert_eq!(highest.pack() & crate::ranged::INTERNAL_TAG, 0);
        assert_eq!(Tag { slot: 4095, index: 7 }.pack() & crate::ranged::INTERNAL_TAG, 0);
    }
}
