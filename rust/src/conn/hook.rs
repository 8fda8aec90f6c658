//! What a connection's core counts as it runs, on the thread that drives it: resends after a
//! broken connection and successful connects. The driver (an I/O worker after each
//! connection it drives, or a blocking client after each call) takes the counts with
//! [`take`] and files them under the connection's endpoint (`crate::metrics`, a layer up).
//! Thread-local, so a hook is a plain add, and the core needs to know nothing of endpoints or
//! cells.

use std::cell::Cell;

/// Whether this build counts (false with the `no-metrics` feature: every hook is empty).
pub const ENABLED: bool = cfg!(not(feature = "no-metrics"));

thread_local! {
    static RETRIES: Cell<u32> = const { Cell::new(0) };
    static CONNECTS: Cell<u32> = const { Cell::new(0) };
}

/// What the hooks counted since the last [`take`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests sent again after their connection broke.
    pub retries: u32,
    /// Connects that succeeded.
    pub connects: u32,
    /// Of those, the ones after a connection's first (set by the taker, who knows which
    /// connection it drove).
    pub reconnects: u32,
}

impl Counts {
    /// Nothing counted.
    pub fn is_empty(&self) -> bool {
        self.retries == 0 && self.connects == 0
    }
}

/// A request starts going out again after its connection broke.
#[inline]
pub fn retry() {
    if ENABLED {
        RETRIES.with(|c| c.set(c.get().wrapping_add(1)));
    }
}

/// A connect succeeded.
#[inline]
pub fn connected() {
    if ENABLED {
        CONNECTS.with(|c| c.set(c.get().wrapping_add(1)));
    }
}

/// The counts since the last call, reset.
#[inline]
pub fn take() -> Counts {
    if !ENABLED {
        return Counts::default();
    }
    Counts { retries: RETRIES.with(|c| c.replace(0)), connects: CONNECTS.with(|c| c.replace(0)), reconnects: 0 }
}
