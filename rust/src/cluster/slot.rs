//! Which of the 16384 hash slots a key belongs to, exactly as Redis Cluster computes it.
//!
//! `slot = CRC16(hashed part) mod 16384`, with CRC16-XMODEM (polynomial 0x1021, initial value 0,
//! no reflection, no final XOR: the CRC Redis's `crc16.c` implements). The hashed part is the
//! whole key unless the key has a *hash tag*: if the key contains a `{`, and after the first `{`
//! a `}`, and at least one byte lies between that `{` and the first `}` after it, only those
//! bytes are hashed. So `{user1000}.a` and `{user1000}.b` share a slot, `foo{}{bar}` hashes
//! whole (the first tag is empty), `foo{{bar}}zap` hashes `{bar`, and `foo{bar}{zap}` hashes
//! `bar`. Keys are bytes: nothing here assumes UTF-8.

/// Hash slots in a Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;

const TABLE: [u16; 256] = crc16_table();

const fn crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = (byte as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
}

/// CRC16-XMODEM of `data`.
pub fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |crc, &byte| (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ byte)])
}

/// The bytes between the key's hash-tag braces, if it has a non-empty tag.
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = memchr::memchr(b'{', key)?;
    let len = memchr::memchr(b'}', &key[open + 1..])?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// The hash slot of `key`, in `0..SLOT_COUNT`.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) % SLOT_COUNT
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn crc_matches_the_published_check_value() {
        // The check value of CRC16-XMODEM, and the one Redis's crc16.c is tested against.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
        // Bit-by-bit, to pin the table: XMODEM of a single 0x01 byte is the polynomial itself.
        assert_eq!(crc16(&[0x01]), 0x1021);
        assert_eq!(crc16(&[0x80]), TABLE[0x80]);
    }

    #[test]
    fn hash_tags_follow_the_cluster_spec() {
        assert_eq!(hash_tag(b"{user1000}.following"), Some(&b"user1000"[..]));
        assert_eq!(hash_tag(b"foo{}{bar}"), None, "first tag empty: the whole key is hashed");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), Some(&b"{bar"[..]));
        assert_eq!(hash_tag(b"foo{bar}{zap}"), Some(&b"bar"[..]));
        assert_eq!(hash_tag(b"{}"), None);
        assert_eq!(hash_tag(b"}{a}"), Some(&b"a"[..]), "a closing brace before the first opening one does not count");
        assert_eq!(hash_tag(b"{a"), None);
        assert_eq!(hash_tag(b"plain"), None);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOT_COUNT);
    }

    /// Every line of testdata/keyslot.txt is `hex(key) slot`, the slot being the answer of a
    /// real redis-server 7.0.15 to `CLUSTER KEYSLOT key` (`-` stands for the empty key).
    #[test]
    fn agrees_with_a_real_server_on_every_captured_key() {
        let vectors = include_str!("testdata/keyslot.txt");
        let mut checked = 0;
        for line in vectors.lines() {
            let (hex, slot) = line.split_once(' ').unwrap();
            let key = if hex == "-" { Vec::new() } else { unhex(hex) };
            assert_eq!(key_slot(&key), slot.parse::<u16>().unwrap(), "key {:?}", String::from_utf8_lossy(&key));
            checked += 1;
        }
        assert_eq!(checked, 30);
        // A few of them spelled out, so the file cannot silently lose the interesting cases.
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.followers"), 3443);
        assert_eq!(key_slot(b"foo{}{bar}"), 8363);
        assert_eq!(key_slot(b"foo{{bar}}zap"), 4015);
        assert_eq!(key_slot(b"\xff\xfe{\x00}\x01"), 0);
    }

    proptest! {
        #[test]
        fn tagged_variants_land_on_the_tags_slot(
            prefix in proptest::collection::vec(any::<u8>().prop_filter("no {", |b| *b != b'{'), 0..16),
            tag in proptest::collection::vec(any::<u8>().prop_filter("no }", |b| *b != b'}'), 1..24),
            suffix in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            let key = [&prefix[..], b"{", &tag, b"}", &suffix].concat();
            // The tag itself holds no `}`, so it has no tag of its own and hashes whole.
            prop_assert_eq!(key_slot(&key), crc16(&tag) % SLOT_COUNT);
            prop_assert_eq!(key_slot(&key), key_slot(&tag));
        }

        #[test]
        fn keys_without_a_brace_hash_whole(key in proptest::collection::vec(any::<u8>(), 0..64)) {
            let key: Vec<u8> = key.into_iter().filter(|&b| b != b'{').collect();
            prop_assert_eq!(key_slot(&key), crc16(&key) & 0x3FFF);
        }
    }
}
