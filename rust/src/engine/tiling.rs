//! Splitting a batch across workers: contiguous tiles of about equal bytes.

use std::ops::Range;

/// Per-key cost that is not payload (command, reply, round trip), so that batches of empty
/// payloads (EXISTS, DEL) spread by count.
pub const PER_KEY_OVERHEAD: u64 = 4096;

/// Least work worth a worker of its own. Below it, another socket, another wake-up and another
/// completion burst cost more than the parallelism gains: 500 EXISTS keys ran 15% faster on 4
/// workers than on 8 (bench/archive/journal-2026-11-30-to-12-02.md).
pub const MIN_TILE_COST: u64 = 512 * 1024;

/// Splits keys with the given payload sizes into `workers` contiguous ranges whose byte totals
/// are as equal as the key boundaries allow. Key `i` goes to the worker whose share contains
/// the midpoint of its bytes, which keeps ranges contiguous and ordered. A small batch uses
/// only as many workers as it has [`MIN_TILE_COST`]s of work; the other ranges are empty.
pub fn tile(sizes: &[u64], workers: usize) -> Vec<Range<usize>> {
    assert!(workers > 0, "at least one worker");
    let costs = sizes.iter().map(|s| s.saturating_add(PER_KEY_OVERHEAD));
    let total: u128 = costs.clone().map(u128::from).sum();
    let used = (total / u128::from(MIN_TILE_COST)).clamp(1, workers as u128) as usize;
    let mut ranges = split(costs, total, used, sizes.len());
    ranges.resize(workers, sizes.len()..sizes.len());
    ranges
}

/// `keys` keys in `workers` contiguous ranges of equal counts (give or take one).
pub fn spread_evenly(keys: usize, workers: usize) -> Vec<Range<usize>> {
    (0..workers).map(|w| keys * w / workers..keys * (w + 1) / workers).collect()
}

fn split(costs: impl Iterator<Item = u64>, total: u128, workers: usize, keys: usize) -> Vec<Range<usize>> {
    let mut ranges = vec![0..0; workers];
    let mut before: u128 = 0;
    let mut start = 0;
    let mut current = 0;
    for (i, cost) in costs.enumerate() {
        let midpoint = before * 2 + u128::from(cost);
        let worker = ((midpoint * workers as u128) / (total * 2)).min(workers as u128 - 1) as usize;
        if worker != current {
            ranges[current] = start..i;
            start = i;
            current = worker;
        }
        before += u128::from(cost);
    }
    ranges[current] = start..keys;
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn equal_sizes_split_evenly() {
        assert_eq!(tile(&[MIB; 8], 4), vec![0..2, 2..4, 4..6, 6..8]);
        assert_eq!(tile(&[MIB; 10], 4).iter().map(|r| r.len()).collect::<Vec<_>>(), vec![2, 3, 2, 3]);
    }

    #[test]
    fn small_batches_use_fewer_workers() {
        let exists = tile(&[0; 500], 8);
        assert_eq!(exists.iter().filter(|r| !r.is_empty()).count(), 3, "500 x 4 KiB of overhead is 3.9 tiles");
        assert_eq!(exists.iter().map(|r| r.len()).sum::<usize>(), 500);
        assert_eq!(tile(&[0; 10], 8)[0], 0..10, "a tiny batch stays on one worker");
        assert!(tile(&[0; 10], 8)[1..].iter().all(|r| r.is_empty()));
        assert_eq!(tile(&[4 * MIB; 500], 8).iter().filter(|r| !r.is_empty()).count(), 8);
    }

    #[test]
    fn spreading_evenly_reaches_every_worker() {
        assert_eq!(spread_evenly(8, 4), vec![0..2, 2..4, 4..6, 6..8]);
        assert_eq!(spread_evenly(3, 3), vec![0..1, 1..2, 2..3]);
        assert_eq!(spread_evenly(5, 2), vec![0..2, 2..5]);
    }

    #[test]
    fn big_keys_get_tiles_of_their_own() {
        let sizes = [64u64 << 20, 1, 1, 1, 1, 1, 1, 64 << 20];
        let ranges = tile(&sizes, 2);
        assert_eq!(ranges, vec![0..4, 4..8]);
    }

    #[test]
    fn fewer_keys_than_workers() {
        let ranges = tile(&[MIB, MIB], 8);
        assert_eq!(ranges.iter().filter(|r| !r.is_empty()).count(), 2);
        assert_eq!(ranges.iter().map(|r| r.len()).sum::<usize>(), 2);
        assert_eq!(tile(&[], 3), vec![0..0, 0..0, 0..0]);
    }

    proptest! {
        #[test]
        fn tiles_are_contiguous_cover_everything_and_balance(
            sizes in proptest::collection::vec(0u64..(8 << 20), 0..300),
            workers in 1usize..16,
        ) {
            let ranges = tile(&sizes, workers);
            prop_assert_eq!(ranges.len(), workers);
            let mut next = 0;
            for range in &ranges {
                if range.is_empty() { continue; }
                prop_assert_eq!(range.start, next);
                next = range.end;
            }
            prop_assert_eq!(next, sizes.len());
            // No tile exceeds its fair share (among the workers worth using) by more than one
            // key's cost.
            let cost = |s: &u64| u128::from(s + PER_KEY_OVERHEAD);
            let total: u128 = sizes.iter().map(cost).sum();
            let biggest: u128 = sizes.iter().map(cost).max().unwrap_or(0);
            let used = (total / u128::from(MIN_TILE_COST)).clamp(1, workers as u128);
            prop_assert!(ranges.iter().filter(|r| !r.is_empty()).count() as u128 <= used);
            for range in &ranges {
                let load: u128 = sizes[range.clone()].iter().map(cost).sum();
                prop_assert!(load <= total / used + biggest + 1, "load {} of total {}", load, total);
            }
        }
    }
}
