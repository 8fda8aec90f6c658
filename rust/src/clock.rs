//! Deadlines cross the rings as nanoseconds of CLOCK_MONOTONIC, the clock `Instant` reads on
//! Linux, so they mean the same in every thread (and every process on the host).

use rustix::time::{ClockId, clock_gettime};
use std::time::{Duration, Instant};

/// Now, in nanoseconds of CLOCK_MONOTONIC.
pub fn now_ns() -> u64 {
    let now = clock_gettime(ClockId::Monotonic);
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// The `Instant` of a deadline given in clock nanoseconds, relative to a reading of both
/// clocks taken together.
pub fn instant_at(deadline_ns: u64, now_ns: u64, now: Instant) -> Instant {
    now + Duration::from_nanos(deadline_ns.saturating_sub(now_ns))
}

/// The earlier of two optional instants (`None`: no instant).
pub fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
