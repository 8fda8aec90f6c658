//! The batch counter: the keys of a batch still open, and whether a thread waits for the batch
//! on the counter's futex (rather than a drainer on the completion eventfd). Whoever counts off
//! a batch's last keys wakes its submitter, after the completions are published.

/// The keys still open.
pub const COUNT_MASK: u32 = 0x7fff_ffff;
/// A thread waits on the futex for this batch.
pub const WAITER_FLAG: u32 = 0x8000_0000;

/// The value a counter starts at for a batch of `keys` keys.
pub fn armed(keys: u32, waiter: bool) -> u32 {
    keys | if waiter { WAITER_FLAG } else { 0 }
}

/// Who must be woken after a count-off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Keys are still open.
    Nobody,
    /// The thread waiting on the futex.
    Waiter,
    /// Whoever drains the completion eventfd.
    Drainers,
}

/// After `finished` keys were counted off a counter that held `before` (what `fetch_sub`
/// returned): the batch is over exactly when those were its last keys.
pub fn wake_for(before: u32, finished: u32) -> Wake {
    match (before & COUNT_MASK == finished, before & WAITER_FLAG != 0) {
        (false, _) => Wake::Nobody,
        (true, true) => Wake::Waiter,
        (true, false) => Wake::Drainers,
    }
}

/// Whether a counter holding `value` still counts open keys.
pub fn is_open(value: u32) -> bool {
    value & COUNT_MASK != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_count_off_wakes_and_it_wakes_the_right_one() {
        assert_eq!(wake_for(armed(5, true), 3), Wake::Nobody);
        assert_eq!(wake_for(armed(2, true), 2), Wake::Waiter);
        assert_eq!(wake_for(armed(2, false), 2), Wake::Drainers);
        assert!(is_open(armed(1, true)) && !is_open(armed(0, true)));
    }
}
