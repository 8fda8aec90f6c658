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

/// The most plaintext one record carries.
pub const MAX_PLAINTEXT: usize = 1 << 14;
/// Record header: type, legacy version, length.
pub const HEADER_LEN: usize = 5;
/// The longest record body a peer may send (TLS 1.2 allows 2048 bytes of expansion).
pub const MAX_BODY: usize = MAX_PLAINTEXT + 2048;
/// The AEAD tag of every suite supported.
const TAG_LEN: usize = 16;
/// TLS 1.2 AES-GCM records carry 8 bytes of the nonce in the clear.
const EXPLICIT_NONCE_LEN: usize = 8;
/// Records sealed with one key before the connection must be replaced: well below AES-GCM's
/// confidentiality limit of 2^24.5 records per key (RFC 8446 5.5), which rustls would meet
/// with a key update. Updating keys needs the traffic secrets, which rustls does not hand
/// over; at 16 KiB per record this is 128 GiB per connection.
pub const MAX_RECORDS_PER_KEY: u64 = 1 << 23;

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

/// A record the peer's keys did not open, or that is not a record at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// The header is not a TLS record header (wrong type or version, or too long).
    NotTls,
    /// The record failed authentication: tampered with, or out of step.
    BadRecord,
    /// More records than one key may seal (see [`MAX_RECORDS_PER_KEY`]).
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

/// Seals outgoing records.
pub struct Sealer {
    protocol: Protocol,
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
    sealed: u64,
}

impl Sealer {
    /// The sealer for `secrets`, whose next record has sequence number `seq`.
    pub fn new(protocol: Protocol, seq: u64, secrets: &ConnectionTrafficSecrets) -> Sealer {
        let (key, iv) = aead_key(secrets);
        Sealer { protocol, key, iv, seq, sealed: 0 }
    }

    /// Bytes a record adds to its plaintext.
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
        if self.sealed >= MAX_RECORDS_PER_KEY {
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
        self.finish_seal(nonce, &aad[..aad_len], body, out)
    }

    fn finish_seal(&mut self, nonce: [u8; 12], aad: &[u8], body: usize, out: &mut Vec<u8>) -> Result<(), RecordError> {
        let tag = self
            .key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut out[body..])
            .map_err(|_| RecordError::BadRecord)?;
        out.extend_from_slice(tag.as_ref());
        self.seq += 1;
        self.sealed += 1;
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
                // The real type is the last non-zero byte; zeros after it are padding.
                let Some(last) = plaintext.iter().rposition(|&b| b != 0) else { return Err(RecordError::BadRecord) };
                len = last;
                plaintext[last]
            }
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
        (Sealer::new(protocol, 5, &secrets(kind)), Opener::new(protocol, 5, &secrets(kind)))
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
    fn a_key_seals_a_bounded_number_of_records() {
        let (mut sealer, _) = pair(Protocol::Tls13, 1);
        sealer.sealed = MAX_RECORDS_PER_KEY;
        assert_eq!(
            sealer.seal(content::APPLICATION_DATA, [&b"x"[..]], &mut Vec::new()),
            Err(RecordError::KeyExhausted)
        );
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
