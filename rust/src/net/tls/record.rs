//! The TLS record layer of an established connection, with the traffic keys rustls hands over
//! after the handshake: no I/O, no allocation per record.
//!
//! Why not rustls's own record layer: its buffered API copies plaintext into and out of its
//! buffers, and its unbuffered API (0.23) still moves each decrypted record into a fresh `Vec`
//! before the caller sees it. Here a record is sealed where it is built, from the caller's
//! page straight into the outgoing buffer, and opened in place in the incoming buffer, from
//! where the plaintext goes once into its destination: records are at most 16 KiB, so the
//! steps between the kernel's copy and the one into the destination stay in the CPU's cache.
//!
//! TLS 1.3 (RFC 8446 5.2) and TLS 1.2 (RFC 5246 6.2.3.3, RFC 7905) AEAD records: AES-128-GCM,
//! AES-256-GCM and ChaCha20-Poly1305, as ring implements them.

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::ConnectionTrafficSecrets;
use std::ops::Range;

/// The most plaintext one record carries (RFC 8446 5.1, RFC 5246 6.2.1).
pub const MAX_PLAINTEXT: usize = 1 << 14;
/// Record header: type, legacy version, length.
pub const HEADER_LEN: usize = 5;
/// The longest record body a TLS 1.2 peer may send: 2^14 + 2048 (RFC 5246 6.2.3).
pub const MAX_BODY: usize = MAX_PLAINTEXT + 2048;
/// The longest record body a TLS 1.3 peer may send: 2^14 + 256 (RFC 8446 5.2).
pub const MAX_BODY_TLS13: usize = MAX_PLAINTEXT + 256;
/// The AEAD tag of every suite supported.
const TAG_LEN: usize = 16;
/// TLS 1.2 AES-GCM records carry 8 bytes of the nonce in the clear.
const EXPLICIT_NONCE_LEN: usize = 8;

/// How much one send key may seal before it is renewed: `records` records or `bytes` bytes of
/// plaintext, whichever comes first. Past it a TLS 1.3 connection sends a KeyUpdate and seals
/// on with the next key; a TLS 1.2 connection, which has no KeyUpdate, drains (sends nothing
/// new, lets every reply arrive) and is replaced. A connection that keeps sealing past it
/// anyway (a single request longer than `DRAIN_HEADROOM`) stops at the headroom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyLimit {
    /// Records sealed with one key.
    pub records: u64,
    /// Plaintext bytes sealed with one key.
    pub bytes: u64,
}

impl Default for KeyLimit {
    /// 2^23 records or 2^37 bytes (128 GiB): AES-GCM's confidentiality limit is 2^24.5
    /// full-size records per key (RFC 8446 5.5), which rustls rounds to 2^24; half of that,
    /// plus the drain's headroom, stays below it whatever the records' sizes (small records
    /// reach the record count first, full ones both at once). ChaCha20-Poly1305 has no such
    /// limit; the same one costs it a KeyUpdate per 2^23 records.
    fn default() -> Self {
        KeyLimit { records: 1 << 23, bytes: 1 << 37 }
    }
}

/// How far past its [`KeyLimit`] a TLS 1.2 send key still seals while the connection drains:
/// enough for the request being written to be finished (a value of up to 1 GiB).
pub const DRAIN_HEADROOM: KeyLimit = KeyLimit { records: 1 << 16, bytes: 1 << 30 };

impl KeyLimit {
    /// Whether a key that sealed `records` records of `bytes` bytes is due for renewal.
    pub fn reached(&self, records: u64, bytes: u64) -> bool {
        records >= self.records || bytes >= self.bytes
    }

    /// Whether it may seal no more at all (the limit plus the drain's headroom).
    fn exhausted(&self, records: u64, bytes: u64) -> bool {
        records >= self.records.saturating_add(DRAIN_HEADROOM.records)
            || bytes >= self.bytes.saturating_add(DRAIN_HEADROOM.bytes)
    }
}

/// Record content types.
pub mod content {
    /// An alert (close_notify, or a fatal error).
    pub const ALERT: u8 = 21;
    /// A handshake message (after the handshake: tickets, key updates, renegotiation).
    pub const HANDSHAKE: u8 = 22;
    /// Application data.
    pub const APPLICATION_DATA: u8 = 23;
}

/// Which record format the connection negotiated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// TLS 1.3: nonce = iv ^ seq, the real type inside the encryption, the header as AAD.
    Tls13,
    /// TLS 1.2 AES-GCM: nonce = salt || explicit part sent in the record.
    Tls12Gcm,
    /// TLS 1.2 ChaCha20-Poly1305: nonce = iv ^ seq, no explicit part.
    Tls12Chacha,
}

impl Protocol {
    /// The longest record body the peer may send (RFC 8446 5.2, RFC 5246 6.2.3).
    pub fn max_body(self) -> usize {
        match self {
            Protocol::Tls13 => MAX_BODY_TLS13,
            Protocol::Tls12Gcm | Protocol::Tls12Chacha => MAX_BODY,
        }
    }
}

/// A record the peer's keys did not open, or that is not a record at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// The header is not a TLS record header (wrong type or version, or too long).
    NotTls,
    /// A record type the connection does not take now (TLS 1.3 wraps every record after the
    /// handshake as application data).
    UnexpectedType,
    /// A record, or its plaintext, longer than the protocol allows.
    Overflow,
    /// The record failed authentication: tampered with, or out of step.
    BadRecord,
    /// A TLS 1.3 record whose plaintext has no content type (all padding).
    NoContentType,
    /// The send key sealed all it may, headroom included (see [`KeyLimit`]).
    KeyExhausted,
}

/// What rustls negotiated, as this layer needs it.
fn aead_key(secrets: &ConnectionTrafficSecrets) -> (LessSafeKey, [u8; 12]) {
    let (algorithm, key, iv) = match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv),
        ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv),
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (&aead::CHACHA20_POLY1305, key, iv),
        // The enum is non-exhaustive; the ring provider negotiates only the three above.
        _ => unreachable!("a cipher suite the ring provider does not offer"),
    };
    let key = UnboundKey::new(algorithm, key.as_ref()).expect("rustls hands over keys of the suite's length");
    let iv: [u8; 12] = iv.as_ref().try_into().expect("every supported suite has a 12-byte IV");
    (LessSafeKey::new(key), iv)
}

/// The protocol of a connection whose version is `tls13` and whose suite `secrets` are.
pub fn protocol(tls13: bool, secrets: &ConnectionTrafficSecrets) -> Protocol {
    match (tls13, secrets) {
        (true, _) => Protocol::Tls13,
        (false, ConnectionTrafficSecrets::Chacha20Poly1305 { .. }) => Protocol::Tls12Chacha,
        (false, _) => Protocol::Tls12Gcm,
    }
}

fn nonce_for(iv: &[u8; 12], seq: u64) -> [u8; 12] {
    let mut nonce = *iv;
    for (byte, seq_byte) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
        *byte ^= seq_byte;
    }
    nonce
}

fn tls12_aad(seq: u64, typ: u8, len: usize) -> [u8; 13] {
    let mut aad = [0u8; 13];
    aad[..8].copy_from_slice(&seq.to_be_bytes());
    aad[8] = typ;
    aad[9..11].copy_from_slice(&[3, 3]);
    aad[11..].copy_from_slice(&(len as u16).to_be_bytes());
    aad
}

/// Seals outgoing records, counting what its key sealed.
pub struct Sealer {
    protocol: Protocol,
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
    limit: KeyLimit,
    records: u64,
    bytes: u64,
}

impl Sealer {
    /// The sealer for `secrets`, whose next record has sequence number `seq`, due for a new key
    /// at `limit`.
    pub fn new(protocol: Protocol, seq: u64, secrets: &ConnectionTrafficSecrets, limit: KeyLimit) -> Sealer {
        let (key, iv) = aead_key(secrets);
        Sealer { protocol, key, iv, seq, limit, records: 0, bytes: 0 }
    }

    /// Whether this key sealed as much as its [`KeyLimit`] allows.
    pub fn due_for_new_key(&self) -> bool {
        self.limit.reached(self.records, self.bytes)
    }

    /// Records and plaintext bytes this key sealed.
    #[cfg(test)]
    pub fn sealed(&self) -> (u64, u64) {
        (self.records, self.bytes)
    }

    /// Bytes a record adds to its plaintext.
    #[cfg(test)]
    pub fn overhead(&self) -> usize {
        HEADER_LEN
            + TAG_LEN
            + match self.protocol {
                Protocol::Tls13 => 1,
                Protocol::Tls12Gcm => EXPLICIT_NONCE_LEN,
                Protocol::Tls12Chacha => 0,
            }
    }

    /// Appends one record of type `typ` to `out`, its plaintext the concatenation of `parts`
    /// (at most [`MAX_PLAINTEXT`] bytes in all): each part is copied once, into the record,
    /// and encrypted there.
    pub fn seal<'p>(
        &mut self,
        typ: u8,
        parts: impl IntoIterator<Item = &'p [u8]>,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        if self.limit.exhausted(self.records, self.bytes) {
            return Err(RecordError::KeyExhausted);
        }
        let start = out.len();
        let outer_type = if self.protocol == Protocol::Tls13 { content::APPLICATION_DATA } else { typ };
        out.extend_from_slice(&[outer_type, 3, 3, 0, 0]);
        let nonce = nonce_for(&self.iv, self.seq);
        if self.protocol == Protocol::Tls12Gcm {
            out.extend_from_slice(&nonce[4..]);
        }
        let body = out.len();
        for part in parts {
            out.extend_from_slice(part);
        }
        let plaintext_len = out.len() - body;
        assert!(plaintext_len <= MAX_PLAINTEXT, "a record of {plaintext_len} bytes");
        if self.protocol == Protocol::Tls13 {
            out.push(typ);
        }
        let record_len = out.len() - start - HEADER_LEN + TAG_LEN;
        out[start + 3..start + 5].copy_from_slice(&(record_len as u16).to_be_bytes());
        let mut aad = [0u8; 13];
        let aad_len = match self.protocol {
            Protocol::Tls13 => {
                aad[..HEADER_LEN].copy_from_slice(&out[start..start + HEADER_LEN]);
                HEADER_LEN
            }
            _ => {
                aad = tls12_aad(self.seq, typ, plaintext_len);
                aad.len()
            }
        };
        self.finish_seal(nonce, &aad[..aad_len], body, out)?;
        self.bytes += plaintext_len as u64;
        Ok(())
    }

    fn finish_seal(&mut self, nonce: [u8; 12], aad: &[u8], body: usize, out: &mut Vec<u8>) -> Result<(), RecordError> {
        let tag = self
            .key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut out[body..])
            .map_err(|_| RecordError::BadRecord)?;
        out.extend_from_slice(tag.as_ref());
        self.seq += 1;
        self.records += 1;
        Ok(())
    }
}

/// A record opened in place: its type and where its plaintext now lies in the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    /// The content type (for TLS 1.3, the one inside the encryption).
    pub typ: u8,
    /// The plaintext, as a range of the record passed to [`Opener::open`].
    pub plaintext: Range<usize>,
}

/// Opens incoming records.
pub struct Opener {
    protocol: Protocol,
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
}

/// The length of the first record in `buf` (header included), once its header is there;
/// `None` until then. A header that cannot start a TLS record is an error: the peer does not
/// speak TLS (a plaintext server answering `-ERR ...`).
pub fn record_len(buf: &[u8]) -> Result<Option<usize>, RecordError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        // Judge what is there already: a plaintext reply is known from its first byte.
        return match buf.first() {
            Some(typ) if !(20..=24).contains(typ) => Err(RecordError::NotTls),
            _ => Ok(None),
        };
    };
    let len = u16::from_be_bytes([header[3], header[4]]) as usize;
    if !(20..=24).contains(&header[0]) || header[1] != 3 || len > MAX_BODY {
        return Err(RecordError::NotTls);
    }
    Ok(Some(HEADER_LEN + len))
}

/// The length of the first record in `buf` (header included) on an established connection of
/// `protocol`, once its header is there: a wrong version is not TLS, a type the protocol does
/// not carry now is unexpected, and a body longer than it allows overflows.
pub fn established_record_len(buf: &[u8], protocol: Protocol) -> Result<Option<usize>, RecordError> {
    let Some(header) = buf.get(..HEADER_LEN) else { return Ok(None) };
    if header[1..3] != [3, 3] {
        return Err(RecordError::NotTls);
    }
    match (protocol, header[0]) {
        (Protocol::Tls13, content::APPLICATION_DATA) => {}
        (
            Protocol::Tls12Gcm | Protocol::Tls12Chacha,
            content::ALERT | content::HANDSHAKE | content::APPLICATION_DATA,
        ) => {}
        _ => return Err(RecordError::UnexpectedType),
    }
    let len = u16::from_be_bytes([header[3], header[4]]) as usize;
    if len > protocol.max_body() {
        return Err(RecordError::Overflow);
    }
    Ok(Some(HEADER_LEN + len))
}

impl Opener {
    /// The opener for `secrets`, whose next record has sequence number `seq`.
    pub fn new(protocol: Protocol, seq: u64, secrets: &ConnectionTrafficSecrets) -> Opener {
        let (key, iv) = aead_key(secrets);
        Opener { protocol, key, iv, seq }
    }

    /// Decrypts the one whole record `record` (as long as [`record_len`] said) in place.
    pub fn open(&mut self, record: &mut [u8]) -> Result<Opened, RecordError> {
        let header: [u8; HEADER_LEN] = record[..HEADER_LEN].try_into().expect("a whole record");
        let (nonce, body_start) = match self.protocol {
            Protocol::Tls12Gcm => {
                if record.len() < HEADER_LEN + EXPLICIT_NONCE_LEN + TAG_LEN {
                    return Err(RecordError::BadRecord);
                }
                let mut nonce = self.iv;
                nonce[4..].copy_from_slice(&record[HEADER_LEN..HEADER_LEN + EXPLICIT_NONCE_LEN]);
                (nonce, HEADER_LEN + EXPLICIT_NONCE_LEN)
            }
            _ => (nonce_for(&self.iv, self.seq), HEADER_LEN),
        };
        let body = &mut record[body_start..];
        let Some(plaintext_len) = body.len().checked_sub(TAG_LEN) else { return Err(RecordError::BadRecord) };
        let mut aad = [0u8; 13];
        let aad_len = match self.protocol {
            Protocol::Tls13 => {
                aad[..HEADER_LEN].copy_from_slice(&header);
                HEADER_LEN
            }
            _ => {
                aad = tls12_aad(self.seq, header[0], plaintext_len);
                aad.len()
            }
        };
        let plaintext = self
            .key
            .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(&aad[..aad_len]), body)
            .map_err(|_| RecordError::BadRecord)?;
        let mut len = plaintext.len();
        self.seq += 1;
        let typ = match self.protocol {
            Protocol::Tls13 => {
                // TLSInnerPlaintext: the content, its type, then zeros of padding; at most
                // 2^14 + 1 bytes (RFC 8446 5.2, 5.4).
                if len > MAX_PLAINTEXT + 1 {
                    return Err(RecordError::Overflow);
                }
                let Some(last) = plaintext.iter().rposition(|&b| b != 0) else {
                    return Err(RecordError::NoContentType);
                };
                len = last;
                plaintext[last]
            }
            _ if len > MAX_PLAINTEXT => return Err(RecordError::Overflow),
            _ => header[0],
        };
        Ok(Opened { typ, plaintext: body_start..body_start + len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::cipher::{AeadKey, Iv};

    fn secrets(kind: u8) -> ConnectionTrafficSecrets {
        let iv = Iv::new([7; 12]);
        match kind {
            // AES-128 keys come only out of a real handshake (AeadKey's length is rustls's
            // business): the real-server tests cover that suite.
            1 => ConnectionTrafficSecrets::Aes256Gcm { key: AeadKey::from([2; 32]), iv },
            _ => ConnectionTrafficSecrets::Chacha20Poly1305 { key: AeadKey::from([3; 32]), iv },
        }
    }

    fn pair(protocol: Protocol, kind: u8) -> (Sealer, Opener) {
        (Sealer::new(protocol, 5, &secrets(kind), KeyLimit::default()), Opener::new(protocol, 5, &secrets(kind)))
    }

    const CASES: [(Protocol, u8); 4] =
        [(Protocol::Tls13, 1), (Protocol::Tls13, 2), (Protocol::Tls12Gcm, 1), (Protocol::Tls12Chacha, 2)];

    #[test]
    fn records_round_trip_from_gathered_parts() {
        for (protocol, kind) in CASES {
            let (mut sealer, mut opener) = pair(protocol, kind);
            let value: Vec<u8> = (0..MAX_PLAINTEXT as u32).map(|i| (i * 31 % 251) as u8).collect();
            let mut wire = Vec::new();
            sealer.seal(content::APPLICATION_DATA, [&b"$16384\r\n"[..], &value[..100]], &mut wire).unwrap();
            sealer.seal(content::APPLICATION_DATA, [&value[..]], &mut wire).unwrap();
            sealer.seal(content::ALERT, [&[1u8, 0][..]], &mut wire).unwrap();
            let mut at = 0;
            let mut got = Vec::new();
            while at < wire.len() {
                let len = record_len(&wire[at..]).unwrap().unwrap();
                let record = &mut wire[at..at + len];
                let opened = opener.open(record).unwrap();
                got.push((opened.typ, record[opened.plaintext].to_vec()));
                at += len;
            }
            assert_eq!(got.len(), 3, "{protocol:?}");
            assert_eq!(got[0], (content::APPLICATION_DATA, [&b"$16384\r\n"[..], &value[..100]].concat()));
            assert_eq!(got[1], (content::APPLICATION_DATA, value.clone()));
            assert_eq!(got[2], (content::ALERT, vec![1, 0]));
            assert_eq!(wire.len(), 3 * sealer.overhead() + 8 + 100 + value.len() + 2, "{protocol:?}");
        }
    }

    #[test]
    fn a_changed_byte_or_a_skipped_record_fails_authentication() {
        for (protocol, kind) in CASES {
            let (mut sealer, mut opener) = pair(protocol, kind);
            let mut wire = Vec::new();
            sealer.seal(content::APPLICATION_DATA, [&b"+OK\r\n"[..]], &mut wire).unwrap();
            let mut tampered = wire.clone();
            let last = tampered.len() - 1;
            tampered[last] ^= 1;
            assert_eq!(opener.open(&mut tampered), Err(RecordError::BadRecord), "{protocol:?}");

            let (mut sealer, mut opener) = pair(protocol, kind);
            let (mut first, mut second) = (Vec::new(), Vec::new());
            sealer.seal(content::APPLICATION_DATA, [&b"one"[..]], &mut first).unwrap();
            sealer.seal(content::APPLICATION_DATA, [&b"two"[..]], &mut second).unwrap();
            if protocol != Protocol::Tls12Gcm {
                // The sequence number is part of the nonce: a record out of turn fails.
                assert_eq!(opener.open(&mut second), Err(RecordError::BadRecord), "{protocol:?}");
            }
        }
    }

    #[test]
    fn record_lengths_come_from_the_header_and_plaintext_is_not_tls() {
        assert_eq!(record_len(b""), Ok(None));
        assert_eq!(record_len(&[23, 3]), Ok(None));
        assert_eq!(record_len(&[23, 3, 3, 0, 40, 1]), Ok(Some(45)));
        assert_eq!(record_len(b"-ERR unknown"), Err(RecordError::NotTls));
        assert_eq!(record_len(b"-"), Err(RecordError::NotTls));
        assert_eq!(record_len(&[23, 3, 3, 0xff, 0xff]), Err(RecordError::NotTls));
    }

    #[test]
    fn a_key_is_due_for_renewal_at_its_limit_by_records_or_bytes_and_seals_nothing_past_the_headroom() {
        let by_records = KeyLimit { records: 3, bytes: 1 << 40 };
        let mut sealer = Sealer::new(Protocol::Tls13, 0, &secrets(1), by_records);
        for _ in 0..3 {
            assert!(!sealer.due_for_new_key());
            sealer.seal(content::APPLICATION_DATA, [&b"x"[..]], &mut Vec::new()).unwrap();
        }
        assert!(sealer.due_for_new_key(), "3 one-byte records");
        assert_eq!(sealer.sealed(), (3, 3));

        let by_bytes = KeyLimit { records: 1 << 40, bytes: 2 * MAX_PLAINTEXT as u64 };
        let mut sealer = Sealer::new(Protocol::Tls12Gcm, 0, &secrets(1), by_bytes);
        let full = vec![7u8; MAX_PLAINTEXT];
        sealer.seal(content::APPLICATION_DATA, [&full[..]], &mut Vec::new()).unwrap();
        assert!(!sealer.due_for_new_key());
        sealer.seal(content::APPLICATION_DATA, [&full[..]], &mut Vec::new()).unwrap();
        assert!(sealer.due_for_new_key(), "two full records");

        // A TLS 1.2 key keeps sealing through the drain's headroom, then stops.
        let mut sealer = Sealer::new(Protocol::Tls12Chacha, 0, &secrets(2), by_records);
        let mut wire = Vec::new();
        for _ in 0..3 + DRAIN_HEADROOM.records {
            wire.clear();
            sealer.seal(content::APPLICATION_DATA, [&b"x"[..]], &mut wire).unwrap();
        }
        assert_eq!(sealer.seal(content::APPLICATION_DATA, [&b"x"[..]], &mut wire), Err(RecordError::KeyExhausted));
    }

    /// The real limits, against AES-GCM's (RFC 8446 5.5: 2^24.5 full-size records per key) and
    /// against the confidentiality limit rustls gives each suite of the ring provider.
    #[test]
    fn the_default_key_limit_with_its_headroom_stays_below_every_suites_aead_limit() {
        let limit = KeyLimit::default();
        let most_records = limit.records + DRAIN_HEADROOM.records;
        let most_bytes = limit.bytes + DRAIN_HEADROOM.bytes;
        let aes_gcm_records = 2f64.powf(24.5);
        assert!((most_records as f64) < aes_gcm_records);
        assert!((most_bytes as f64) < aes_gcm_records * MAX_PLAINTEXT as f64);
        for suite in rustls::crypto::ring::ALL_CIPHER_SUITES {
            let common = match suite {
                rustls::SupportedCipherSuite::Tls13(s) => &s.common,
                rustls::SupportedCipherSuite::Tls12(s) => &s.common,
            };
            assert!(most_records < common.confidentiality_limit, "{:?}", common.suite);
        }
        // Small requests (a DEL is one record) reach the record count long before the bytes.
        assert!(limit.reached(1 << 23, 100 << 23));
        assert!(!limit.reached((1 << 23) - 1, 100 << 23));
        assert!(limit.reached(1 << 10, 1 << 37));
    }

    #[test]
    fn rfc_limits_on_established_records() {
        let header = |typ: u8, len: usize| [typ, 3, 3, (len >> 8) as u8, len as u8];
        let tls13 = Protocol::Tls13;
        let tls12 = Protocol::Tls12Gcm;
        assert_eq!(established_record_len(&header(23, MAX_BODY_TLS13), tls13), Ok(Some(HEADER_LEN + MAX_BODY_TLS13)));
        assert_eq!(established_record_len(&header(23, MAX_BODY_TLS13 + 1), tls13), Err(RecordError::Overflow));
        assert_eq!(established_record_len(&header(23, MAX_BODY), tls12), Ok(Some(HEADER_LEN + MAX_BODY)));
        assert_eq!(established_record_len(&header(23, MAX_BODY + 1), tls12), Err(RecordError::Overflow));
        assert_eq!(established_record_len(&header(22, 40), tls13), Err(RecordError::UnexpectedType));
        assert_eq!(established_record_len(&header(20, 1), tls12), Err(RecordError::UnexpectedType));
        assert_eq!(established_record_len(&header(21, 2), tls12), Ok(Some(7)));
        assert_eq!(established_record_len(&[23, 3, 1, 0, 9], tls13), Err(RecordError::NotTls));
        assert_eq!(established_record_len(&[23, 3, 3], tls13), Ok(None));

        // Plaintext past 2^14 (TLS 1.3: content and type past 2^14 + 1) overflows, sealed with
        // a sealer that is not ours to limit.
        for (protocol, kind) in CASES {
            let (mut sealer, mut opener) = pair(protocol, kind);
            let too_long = vec![1u8; MAX_PLAINTEXT + 1];
            let mut wire = Vec::new();
            let parts = [&too_long[..MAX_PLAINTEXT], &too_long[MAX_PLAINTEXT..]];
            let start = wire.len();
            wire.extend_from_slice(&[content::APPLICATION_DATA, 3, 3, 0, 0]);
            let body = wire.len();
            let nonce = nonce_for(&sealer.iv, sealer.seq);
            if protocol == Protocol::Tls12Gcm {
                wire.extend_from_slice(&nonce[4..]);
            }
            let plain = wire.len();
            for part in parts {
                wire.extend_from_slice(part);
            }
            if protocol == Protocol::Tls13 {
                wire.push(content::APPLICATION_DATA);
            }
            let len = wire.len() - start - HEADER_LEN + TAG_LEN;
            wire[start + 3..start + 5].copy_from_slice(&(len as u16).to_be_bytes());
            let aad = match protocol {
                Protocol::Tls13 => wire[start..start + HEADER_LEN].to_vec(),
                _ => tls12_aad(sealer.seq, content::APPLICATION_DATA, MAX_PLAINTEXT + 1).to_vec(),
            };
            let _ = body;
            sealer.finish_seal(nonce, &aad, plain, &mut wire).unwrap();
            assert_eq!(opener.open(&mut wire), Err(RecordError::Overflow), "{protocol:?}");
        }
    }

    #[test]
    fn a_tls13_record_of_padding_only_has_no_content_type() {
        let (mut sealer, mut opener) = pair(Protocol::Tls13, 1);
        let mut wire = Vec::new();
        // Sealed as "type 0" with zeros: nothing but padding.
        sealer.seal(0, [&[0u8, 0, 0][..]], &mut wire).unwrap();
        assert_eq!(opener.open(&mut wire), Err(RecordError::NoContentType));
    }

    #[test]
    fn tls13_padding_is_stripped() {
        let (mut sealer, mut opener) = pair(Protocol::Tls13, 1);
        let mut wire = Vec::new();
        // A padded record: data, the type, then zeros (RFC 8446 5.4); sealed as "type 0" so
        // that the sealer's own type byte is one more zero of padding.
        sealer.seal(0, [&b"ab"[..], &[content::HANDSHAKE, 0, 0][..]], &mut wire).unwrap();
        let opened = opener.open(&mut wire).unwrap();
        assert_eq!((opened.typ, &wire[opened.plaintext]), (content::HANDSHAKE, &b"ab"[..]));
    }
}
