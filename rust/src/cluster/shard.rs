//! Static sharding: which of N independent servers (not a Redis Cluster) holds a key.
//!
//! Rendezvous (highest-random-weight) hashing. Every server gets a weight for the key,
//!
//! ```text
//! weight(server, key) = XXH64(key, seed = XXH64(server_id, seed = 0))
//! ```
//!
//! with XXH64 the 64-bit xxHash of the reference implementation (Yann Collet, xxhash.h) over the
//! UTF-8 bytes of the id and the raw bytes of the key, and the key goes to the server of highest
//! weight; equal weights (odds 2^-64) go to the smaller id in byte order, so the choice never
//! depends on the order servers are listed in.
//!
//! Key movement: a key's weights at the other servers do not change when a server joins, so a
//! key moves only if the newcomer outbids them all, which happens for 1/(N+1) of the keys, and
//! those keys all move *to* the newcomer. Removing a server moves only the keys it held. Measured
//! over 100k LMCache-shaped keys (see the tests): 3 → 4 servers moves 24.9 %, all to the new
//! server; with 2, 3 or 4 servers each holds within 0.4 % of its fair share.
//!
//! Stability: XXH64 is fully specified, endian-independent (input read little-endian) and uses
//! no per-process or per-platform state (unlike std's `RandomState`), so every process, version
//! and platform agrees; tests pin exact weights and choices. A server's id must be stable too:
//! its name or `host:port` as configured, never anything holding a password. Renaming a server
//! moves its keys as removing it and adding another would.
//!
//! Why XXH64, and why written out here: the weights of keys that differ in a few bytes must be
//! independent, which takes a hash with a full final avalanche (FNV-1a, the other candidate,
//! has none: a key's last byte passes through a single multiply). And it is ~60 lines checked
//! against the reference implementation's outputs: cheaper to own than a dependency.

use std::cmp::Reverse;

/// Picks a server for a key among a fixed list of servers.
#[derive(Clone, Debug)]
pub struct Rendezvous {
    servers: Vec<Server>,
}

#[derive(Clone, Debug)]
struct Server {
    id: String,
    seed: u64,
}

impl Rendezvous {
    /// Servers by stable id, in the caller's order: [`Rendezvous::pick`] returns an index into
    /// this list. Refuses an empty list and duplicate ids (two servers with one id would share
    /// every weight).
    pub fn new<I>(ids: I) -> Result<Rendezvous, String>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let mut servers: Vec<Server> = Vec::new();
        for id in ids {
            let id = id.into();
            if servers.iter().any(|server| server.id == id) {
                return Err(format!("server id {id:?} is listed twice"));
            }
            servers.push(Server { seed: xxh64(id.as_bytes(), 0), id });
        }
        if servers.is_empty() {
            return Err("static sharding needs at least one server".into());
        }
        Ok(Rendezvous { servers })
    }

    /// Number of servers.
    #[cfg(test)]
    pub fn server_count(&self) -> usize {
        self.servers.len()
    }

    /// The servers' ids, in the caller's order (the indices [`Rendezvous::pick`] returns).
    #[cfg(test)]
    pub fn ids(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator {
        self.servers.iter().map(|server| server.id.as_str())
    }

    /// The index of the server that holds `key`.
    pub fn pick(&self, key: &[u8]) -> usize {
        let ranked = self.servers.iter().enumerate().max_by_key(|(_, server)| precedence(server, key));
        ranked.expect("at least one server").0
    }

    /// Every server's index, the one holding `key` first, then the one that would hold it if
    /// that one were removed, and so on.
    #[cfg(test)]
    pub fn ranking(&self, key: &[u8]) -> Vec<usize> {
        let mut order: Vec<(usize, &Server)> = self.servers.iter().enumerate().collect();
        order.sort_by_key(|(_, server)| Reverse(precedence(server, key)));
        order.into_iter().map(|(index, _)| index).collect()
    }
}

/// Higher is preferred: the higher weight, then, for equal weights, the smaller id. Ids are
/// unique, so no two servers ever compare equal and list order never decides.
fn precedence<'a>(server: &'a Server, key: &[u8]) -> (u64, Reverse<&'a str>) {
    (xxh64(key, server.seed), Reverse(server.id.as_str()))
}

/// The weight of `server_id` for `key`; see the module documentation.
#[cfg(test)]
pub fn weight(server_id: &str, key: &[u8]) -> u64 {
    xxh64(key, xxh64(server_id.as_bytes(), 0))
}

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

fn read_u64(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"))
}

fn round(acc: u64, lane: u64) -> u64 {
    acc.wrapping_add(lane.wrapping_mul(P2)).rotate_left(31).wrapping_mul(P1)
}

fn merge(acc: u64, lane: u64) -> u64 {
    (acc ^ round(0, lane)).wrapping_mul(P1).wrapping_add(P4)
}

/// XXH64 of `data` with `seed`, as the reference implementation computes it.
pub fn xxh64(data: &[u8], seed: u64) -> u64 {
    let mut stripes = data.chunks_exact(32);
    let mut hash = if data.len() >= 32 {
        let mut lanes = [seed.wrapping_add(P1).wrapping_add(P2), seed.wrapping_add(P2), seed, seed.wrapping_sub(P1)];
        for stripe in &mut stripes {
            for (lane, word) in lanes.iter_mut().zip(stripe.chunks_exact(8)) {
                *lane = round(*lane, read_u64(word));
            }
        }
        let [a, b, c, d] = lanes;
        let hash = a
            .rotate_left(1)
            .wrapping_add(b.rotate_left(7))
            .wrapping_add(c.rotate_left(12))
            .wrapping_add(d.rotate_left(18));
        lanes.into_iter().fold(hash, merge)
    } else {
        seed.wrapping_add(P5)
    };
    hash = hash.wrapping_add(data.len() as u64);

    let mut tail = stripes.remainder();
    while tail.len() >= 8 {
        hash = (hash ^ round(0, read_u64(tail))).rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
        tail = &tail[8..];
    }
    if tail.len() >= 4 {
        let word = u64::from(u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")));
        hash = (hash ^ word.wrapping_mul(P1)).rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
        tail = &tail[4..];
    }
    for &byte in tail {
        hash = (hash ^ u64::from(byte).wrapping_mul(P5)).rotate_left(11).wrapping_mul(P1);
    }

    hash ^= hash >> 33;
    hash = hash.wrapping_mul(P2);
    hash ^= hash >> 29;
    hash = hash.wrapping_mul(P3);
    hash ^ (hash >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: usize = 100_000;

    /// Keys shaped like LMCache's: model, world size, rank, chunk hash.
    fn key(i: usize) -> Vec<u8> {
        format!("meta-llama/Llama-3.1-8B@1@0@{:016x}", (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)).into_bytes()
    }

    fn servers(n: usize) -> Rendezvous {
        Rendezvous::new((0..n).map(|i| format!("10.0.0.{}:6379", i + 1))).unwrap()
    }

    #[test]
    fn xxh64_matches_the_reference_implementation() {
        // Outputs of the reference C implementation (through python-xxhash), covering every
        // code path: empty, 1-3 byte tail, 4-byte word, 8-byte words, one stripe, several.
        let bytes: Vec<u8> = (0..100).collect();
        let cases: [(&[u8], u64, u64); 12] = [
            (b"", 0, 0xEF46_DB37_51D8_E999),
            (b"a", 0, 0xD24E_C4F1_A98C_6E5B),
            (b"abc", 0, 0x44BC_2CF5_AD77_0999),
            (b"123456789", 0, 0x8CB8_41DB_40E6_AE83),
            (b"", 1, 0xD5AF_BA13_36A3_BE4B),
            (b"abc", P1, 0xA7CB_2AAC_405E_36C7),
            (&bytes[..4], 0, 0xFFCE_D860_4453_CC1E),
            (&bytes[..12], 0, 0x424A_F23F_1F08_DCA5),
            (&bytes[..31], 7, 0x0BDB_BCAE_AD6C_6E56),
            (&bytes[..32], 7, 0xA597_2D57_C4AE_A230),
            (&bytes[..33], 7, 0x0C43_E577_54C7_78D9),
            (&bytes, 0, 0x6AC1_E580_3216_6597),
        ];
        for (data, seed, expected) in cases {
            assert_eq!(xxh64(data, seed), expected, "len {} seed {seed:#x}", data.len());
        }
        assert_eq!(xxh64(b"redis-a:6379", 0), 0x599C_7AFF_91EB_570D);
    }

    /// Pinned choices: if any of these change, every deployment's keys would move.
    #[test]
    fn choices_are_pinned_across_versions() {
        assert_eq!(weight("redis-a:6379", b"key"), 0xD9E2_9CBC_B879_1977);
        let three = Rendezvous::new(["redis-a:6379", "redis-b:6379", "redis-c:6379"]).unwrap();
        let picks: Vec<usize> = ["", "a", "key", "chunk-0", "chunk-1", "chunk-2", "chunk-3", "chunk-4"]
            .iter()
            .map(|k| three.pick(k.as_bytes()))
            .collect();
        assert_eq!(picks, PINNED_THREE);
        let four = servers(4);
        let picks: Vec<usize> = (0..12).map(|i| four.pick(&key(i))).collect();
        assert_eq!(picks, PINNED_FOUR);
    }

    // Computed apart from this code, from the formula in the module documentation with
    // python-xxhash (the reference C implementation).
    const PINNED_THREE: [usize; 8] = [1, 2, 0, 1, 1, 1, 0, 0];
    const PINNED_FOUR: [usize; 12] = [3, 1, 2, 0, 0, 0, 3, 3, 1, 1, 1, 3];

    #[test]
    fn every_server_gets_its_fair_share() {
        for n in [2, 3, 4] {
            let shards = servers(n);
            let mut counts = vec![0usize; n];
            for i in 0..KEYS {
                counts[shards.pick(&key(i))] += 1;
            }
            let fair = KEYS as f64 / n as f64;
            for (server, &count) in counts.iter().enumerate() {
                let off = (count as f64 - fair).abs() / fair;
                assert!(off < 0.05, "{n} servers: server {server} holds {count} of {KEYS}, {:.2} % off", off * 100.0);
            }
            eprintln!("{n} servers: {counts:?}");
        }
    }

    #[test]
    fn a_new_server_takes_its_share_from_everyone_and_nothing_else_moves() {
        let before = servers(3);
        let after = servers(4);
        let mut moved = 0;
        for i in 0..KEYS {
            let key = key(i);
            let (old, new) = (before.pick(&key), after.pick(&key));
            if old != new {
                assert_eq!(new, 3, "key {i} moved between old servers");
                moved += 1;
            }
        }
        let share = moved as f64 / KEYS as f64;
        eprintln!("3 -> 4 servers: {moved} of {KEYS} keys moved ({:.2} %)", share * 100.0);
        assert!((0.235..0.265).contains(&share), "{moved} of {KEYS} keys moved");
    }

    #[test]
    fn removing_a_server_moves_only_its_keys() {
        let all = servers(4);
        let without_b = Rendezvous::new(all.ids().filter(|id| *id != "10.0.0.2:6379").map(str::to_owned)).unwrap();
        for i in 0..20_000 {
            let key = key(i);
            let old = all.pick(&key);
            let new_id = without_b.ids().nth(without_b.pick(&key)).unwrap();
            if old != 1 {
                assert_eq!(new_id, all.ids().nth(old).unwrap(), "key {i} left a server that stayed");
            } else {
                // It goes where the ranking said second choice was.
                assert_eq!(new_id, all.ids().nth(all.ranking(&key)[1]).unwrap());
            }
        }
    }

    #[test]
    fn the_choice_does_not_depend_on_list_order() {
        let forward = servers(4);
        let backward = Rendezvous::new(forward.ids().rev().map(str::to_owned).collect::<Vec<_>>()).unwrap();
        for i in 0..10_000 {
            let key = key(i);
            assert_eq!(forward.ids().nth(forward.pick(&key)), backward.ids().nth(backward.pick(&key)));
            assert_eq!(forward.ranking(&key)[0], forward.pick(&key));
        }
    }

    #[test]
    fn equal_weights_go_to_the_smaller_id() {
        let server = |id: &str, seed: u64| Server { id: id.into(), seed };
        // Same seed, hence same weight for every key: only the id can decide.
        let (a, b) = (server("a:1", 42), server("b:1", 42));
        assert!(precedence(&a, b"k") > precedence(&b, b"k"));
        for servers in [vec![a.clone(), b.clone()], vec![b, a]] {
            let shards = Rendezvous { servers };
            assert_eq!(shards.ids().nth(shards.pick(b"k")), Some("a:1"));
            assert_eq!(shards.ids().nth(shards.ranking(b"k")[0]), Some("a:1"));
        }
    }

    #[test]
    fn refuses_empty_and_duplicate_server_lists() {
        assert!(Rendezvous::new(Vec::<String>::new()).unwrap_err().contains("at least one"));
        assert!(Rendezvous::new(["a:1", "b:1", "a:1"]).unwrap_err().contains("\"a:1\" is listed twice"));
        let one = Rendezvous::new(["only:6379"]).unwrap();
        assert_eq!(one.server_count(), 1);
        assert_eq!(one.pick(b"anything"), 0);
        assert_eq!(one.ranking(b"anything"), vec![0]);
    }
}
