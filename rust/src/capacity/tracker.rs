//! Client-side capacity tracking and LRU eviction (LMCache's `max_capacity_gb` with its
//! `eviction` block): which keys this client stored, how many bytes they hold, and which to
//! delete when the footprint passes the watermark.
//!
//! Pure bookkeeping: the layer in `capacity/mod.rs` feeds it batch outcomes and sends the DELs
//! it asks for.

use crate::settings::{CapacityConfig, EvictionPolicy};
use std::collections::HashMap;

/// What the tracker has seen, for users and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapacityStats {
    /// The configured capacity, in bytes.
    pub capacity_bytes: u64,
    /// Bytes of the values this client stored that are still tracked.
    pub stored_bytes: u64,
    /// Bytes of SETs in flight.
    pub reserved_bytes: u64,
    /// Keys tracked now.
    pub keys: u64,
    /// Keys chosen for eviction (and deleted with DEL).
    pub evictions: u64,
    /// Bytes of the keys chosen for eviction.
    pub evicted_bytes: u64,
    /// Times eviction ran (a run may choose no key).
    pub eviction_runs: u64,
}

const NIL: usize = usize::MAX;

struct Node {
    key: Box<[u8]>,
    size: u64,
    /// Toward the least recently used end.
    older: usize,
    newer: usize,
}

/// Stored keys in recency order (a slab-backed doubly linked list plus an index).
pub struct Tracker {
    config: CapacityConfig,
    index: HashMap<Box<[u8]>, usize>,
    nodes: Vec<Node>,
    free: Vec<usize>,
    oldest: usize,
    newest: usize,
    stats: CapacityStats,
}

impl Tracker {
    /// A tracker that has seen nothing yet.
    pub fn new(config: CapacityConfig) -> Tracker {
        Tracker {
            config,
            index: HashMap::new(),
            nodes: Vec::new(),
            free: Vec::new(),
            oldest: NIL,
            newest: NIL,
            stats: CapacityStats { capacity_bytes: config.capacity_bytes, ..CapacityStats::default() },
        }
    }

    /// What it was configured with.
    pub fn config(&self) -> &CapacityConfig {
        &self.config
    }

    /// Its counters now.
    pub fn stats(&self) -> CapacityStats {
        self.stats
    }

    /// A SET of `key` with `size` bytes succeeded: it is now the most recently used.
    pub fn stored(&mut self, key: &[u8], size: u64) {
        if let Some(&node) = self.index.get(key) {
            self.stats.stored_bytes = self.stats.stored_bytes - self.nodes[node].size + size;
            self.nodes[node].size = size;
            self.unlink(node);
            self.link_newest(node);
            return;
        }
        let node = Node { key: key.into(), size, older: NIL, newer: NIL };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.nodes[slot] = node;
                slot
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.index.insert(key.into(), slot);
        self.link_newest(slot);
        self.stats.stored_bytes += size;
        self.stats.keys += 1;
    }

    /// A GET hit or EXISTS found `key`: a use.
    pub fn touched(&mut self, key: &[u8]) {
        if let Some(&node) = self.index.get(key) {
            self.unlink(node);
            self.link_newest(node);
        }
    }

    /// `key` is gone from the server (deleted, or found missing).
    pub fn removed(&mut self, key: &[u8]) {
        if let Some(node) = self.index.remove(key) {
            self.release(node);
        }
    }

    /// SETs of `bytes` are about to go out. Returns the keys to delete first so that what is
    /// stored plus what is in flight stays within the capacity (down to the watermark).
    pub fn reserve(&mut self, bytes: u64) -> Vec<Box<[u8]>> {
        let mut victims = Vec::new();
        let projected = |s: &CapacityStats| s.stored_bytes + s.reserved_bytes + bytes;
        if self.config.policy == EvictionPolicy::Lru && projected(&self.stats) > self.config.capacity_bytes {
            let target = self.config.watermark_bytes();
            while projected(&self.stats) > target && self.oldest != NIL {
                victims.push(self.evict_oldest());
            }
            self.stats.eviction_runs += 1;
        }
        self.stats.reserved_bytes += bytes;
        victims
    }

    /// SETs of `bytes` completed (each also reported through `stored` if it succeeded).
    pub fn unreserve(&mut self, bytes: u64) {
        self.stats.reserved_bytes = self.stats.reserved_bytes.saturating_sub(bytes);
    }

    /// Past the watermark, LMCache's rule: delete the least recently used `eviction_ratio` of
    /// the tracked keys (at least one).
    pub fn victims(&mut self) -> Vec<Box<[u8]>> {
        if self.config.policy != EvictionPolicy::Lru || self.stats.stored_bytes <= self.config.watermark_bytes() {
            return Vec::new();
        }
        let count = ((self.stats.keys as f64 * self.config.eviction_ratio).ceil() as u64).max(1);
        let victims: Vec<Box<[u8]>> =
            (0..count).map_while(|_| (self.oldest != NIL).then(|| self.evict_oldest())).collect();
        self.stats.eviction_runs += 1;
        victims
    }

    /// Keys from least to most recently used (for tests and diagnostics).
    #[cfg(test)]
    pub fn keys_by_recency(&self) -> Vec<&[u8]> {
        let mut out = Vec::with_capacity(self.index.len());
        let mut node = self.oldest;
        while node != NIL {
            out.push(&*self.nodes[node].key);
            node = self.nodes[node].newer;
        }
        out
    }

    fn evict_oldest(&mut self) -> Box<[u8]> {
        let node = self.oldest;
        let key = std::mem::take(&mut self.nodes[node].key);
        self.index.remove(&key);
        self.stats.evictions += 1;
        self.stats.evicted_bytes += self.nodes[node].size;
        self.release(node);
        key
    }

    fn release(&mut self, node: usize) {
        self.unlink(node);
        self.stats.stored_bytes -= self.nodes[node].size;
        self.stats.keys -= 1;
        self.nodes[node].key = Box::default();
        self.free.push(node);
    }

    fn unlink(&mut self, node: usize) {
        let (older, newer) = (self.nodes[node].older, self.nodes[node].newer);
        match older {
            NIL => self.oldest = newer,
            older => self.nodes[older].newer = newer,
        }
        match newer {
            NIL => self.newest = older,
            newer => self.nodes[newer].older = older,
        }
        self.nodes[node].older = NIL;
        self.nodes[node].newer = NIL;
    }

    fn link_newest(&mut self, node: usize) {
        self.nodes[node].older = self.newest;
        self.nodes[node].newer = NIL;
        match self.newest {
            NIL => self.oldest = node,
            newest => self.nodes[newest].newer = node,
        }
        self.newest = node;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn config(capacity: u64, policy: EvictionPolicy) -> CapacityConfig {
        CapacityConfig { capacity_bytes: capacity, policy, trigger_watermark: 0.8, eviction_ratio: 0.2 }
    }

    #[test]
    fn past_the_watermark_the_least_recently_used_fifth_goes() {
        let mut tracker = Tracker::new(config(1000, EvictionPolicy::Lru));
        for i in 0..8u8 {
            tracker.stored(&[i], 100);
        }
        assert_eq!(tracker.victims(), Vec::<Box<[u8]>>::new(), "800 bytes is at the watermark, not past it");
        tracker.touched(&[0]);
        tracker.touched(&[1]);
        tracker.stored(&[8], 100);
        assert_eq!(tracker.stats().stored_bytes, 900);
        // ceil(9 * 0.2) = 2 keys, the least recently used: 2 and 3 (0 and 1 were used).
        assert_eq!(tracker.victims(), vec![Box::from([2u8]), Box::from([3u8])]);
        let stats = tracker.stats();
        assert_eq!((stats.stored_bytes, stats.keys, stats.evictions, stats.evicted_bytes), (700, 7, 2, 200));
        assert_eq!(tracker.keys_by_recency(), vec![&[4u8][..], &[5], &[6], &[7], &[0], &[1], &[8]]);
    }

    #[test]
    fn overwrites_and_removals_keep_the_byte_count() {
        let mut tracker = Tracker::new(config(1 << 30, EvictionPolicy::Lru));
        tracker.stored(b"a", 10);
        tracker.stored(b"a", 25);
        tracker.stored(b"b", 5);
        assert_eq!((tracker.stats().stored_bytes, tracker.stats().keys), (30, 2));
        tracker.removed(b"a");
        tracker.removed(b"never-stored");
        assert_eq!((tracker.stats().stored_bytes, tracker.stats().keys), (5, 1));
    }

    #[test]
    fn a_put_that_would_overflow_evicts_first_down_to_the_watermark() {
        let mut tracker = Tracker::new(config(1000, EvictionPolicy::Lru));
        for i in 0..7u8 {
            tracker.stored(&[i], 100);
        }
        // 700 stored + 400 incoming > 1000: evict oldest until 700 - k*100 + 400 <= 800.
        let victims = tracker.reserve(400);
        assert_eq!(victims, vec![Box::from([0u8]), Box::from([1u8]), Box::from([2u8])]);
        assert_eq!(tracker.stats().reserved_bytes, 400);
        assert_eq!(tracker.stats().stored_bytes + tracker.stats().reserved_bytes, 800);
        tracker.unreserve(400);
        assert_eq!(tracker.stats().reserved_bytes, 0);
    }

    #[test]
    fn noop_tracks_but_never_evicts() {
        let mut tracker = Tracker::new(config(100, EvictionPolicy::Noop));
        for i in 0..5u8 {
            tracker.stored(&[i], 100);
        }
        assert!(tracker.reserve(1000).is_empty());
        assert!(tracker.victims().is_empty());
        assert_eq!(tracker.stats().stored_bytes, 500);
    }

    #[test]
    fn configuration_is_validated() {
        assert!(config(1, EvictionPolicy::Lru).validate().is_ok());
        let bad = CapacityConfig { trigger_watermark: 1.5, ..config(1, EvictionPolicy::Lru) };
        assert!(
            bad.validate().unwrap_err().message().contains("eviction.trigger_watermark must be in (0, 1], got 1.5")
        );
        let bad = CapacityConfig { eviction_ratio: 0.0, ..config(1, EvictionPolicy::Lru) };
        assert!(bad.validate().unwrap_err().message().contains("eviction.eviction_ratio"));
        assert_eq!("LRU".parse::<EvictionPolicy>().unwrap(), EvictionPolicy::Lru);
        assert!("FIFO".parse::<EvictionPolicy>().unwrap_err().message().contains("\"FIFO\""));
    }

    #[derive(Debug, Clone)]
    enum Step {
        Store(u8, u16),
        Touch(u8),
        Remove(u8),
        Evict,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u8..20, 1u16..500).prop_map(|(k, s)| Step::Store(k, s)),
            (0u8..20).prop_map(Step::Touch),
            (0u8..20).prop_map(Step::Remove),
            Just(Step::Evict),
        ]
    }

    proptest! {
        #[test]
        fn matches_a_simple_recency_list(steps in proptest::collection::vec(step(), 0..200)) {
            let mut tracker = Tracker::new(config(2000, EvictionPolicy::Lru));
            // The model: (key, size), least recently used first.
            let mut model: Vec<(u8, u64)> = Vec::new();
            for step in steps {
                match step {
                    Step::Store(k, s) => {
                        model.retain(|(key, _)| *key != k);
                        model.push((k, u64::from(s)));
                        tracker.stored(&[k], u64::from(s));
                    }
                    Step::Touch(k) => {
                        if let Some(i) = model.iter().position(|(key, _)| *key == k) {
                            let entry = model.remove(i);
                            model.push(entry);
                        }
                        tracker.touched(&[k]);
                    }
                    Step::Remove(k) => {
                        model.retain(|(key, _)| *key != k);
                        tracker.removed(&[k]);
                    }
                    Step::Evict => {
                        let stored: u64 = model.iter().map(|(_, s)| s).sum();
                        let expected: Vec<Box<[u8]>> = if stored > 1600 {
                            let count = ((model.len() as f64 * 0.2).ceil() as usize).max(1);
                            model.drain(..count.min(model.len())).map(|(k, _)| Box::from([k])).collect()
                        } else {
                            Vec::new()
                        };
                        prop_assert_eq!(tracker.victims(), expected);
                    }
                }
                let keys: Vec<Vec<u8>> = model.iter().map(|(k, _)| vec![*k]).collect();
                let got: Vec<Vec<u8>> = tracker.keys_by_recency().into_iter().map(<[u8]>::to_vec).collect();
                prop_assert_eq!(got, keys);
                prop_assert_eq!(tracker.stats().stored_bytes, model.iter().map(|(_, s)| s).sum::<u64>());
                prop_assert_eq!(tracker.stats().keys, model.len() as u64);
            }
        }
    }
}
