//! Restarting BBR right before a connection's first large send, so that its first values start
//! BBR as a connection's first bytes do.
//!
//! Why: a TCP connection under BBR whose first exchange is small (our AUTH/HELLO/PING
//! handshake and the warm-up's PING) leaves BBR's STARTUP within its first values and settles
//! in PROBE_BW with a bandwidth estimate a tenth of what loopback or a LAN carries; the kernel
//! then paces every large send with a timer. A connection whose first bytes are a large value
//! (LMCache's C++ connector has no handshake) stays in STARTUP, unpaced. Measured on a BBR host
//! (bench/archive/journal-2026-11-30-to-12-02.md, "Most of that gap is TCP pacing"): 5-7 of our
//! 8 loaded connections paced, the C++ connector's none, and 18-27% more client CPU for our
//! 256 KiB SETs (10% under cubic). Re-initialising BBR (Linux re-initialises a congestion
//! control only when it changes, so through another one and back) puts the connection where a
//! connection that starts with data is. It happens right before the connection's first send of
//! [`LARGE_SEND`] or more, not when the handshake ends: the warm-up's PING and any lookups sent
//! after the handshake spoil the model the same way (one of 8 loaded connections still left
//! STARTUP in two or three of six runs when the restart came right after the handshake; in one
//! of six when it comes before the first value).
//!
//! Only BBR: other congestion controls are left alone (cubic after a handshake is in its
//! initial slow start anyway, and some, such as DCTCP, must not be switched on an established
//! connection).

/// The congestion control whose state a handshake spoils.
const RESTARTED: &str = "bbr";

/// A send at least this large is the connection's first real load (a value, not a handshake,
/// PING or a batch of lookups, which the router keeps under 64 KiB per connection): BBR is
/// restarted right before the first one.
pub(crate) const LARGE_SEND: usize = 64 << 10;

/// Whether a send of `bytes` is large enough that BBR should start afresh before it.
pub(crate) fn is_large_send(bytes: usize) -> bool {
    bytes >= LARGE_SEND
}

/// The congestion control to pass through so that setting `current` again re-initialises it:
/// another one that an unprivileged process may set (`allowed`, the contents of
/// `/proc/sys/net/ipv4/tcp_allowed_congestion_control`), reno if it may. `None` leaves the
/// socket as it is: `current` is not BBR, or `current` may not be set again by an unprivileged
/// process (then the way back could fail), or there is nothing else to pass through.
pub(crate) fn detour<'a>(current: &str, allowed: &'a str) -> Option<&'a str> {
    let allowed = allowed.split_whitespace();
    if current != RESTARTED || !allowed.clone().any(|name| name == current) {
        return None;
    }
    let mut others = allowed.filter(|&name| name != current);
    others.clone().find(|&name| name == "reno").or_else(|| others.next())
}

/// A socket's congestion control name as `getsockopt(TCP_CONGESTION)` returns it (padded with
/// NULs to the buffer's size).
pub(crate) fn name_of(raw: &[u8]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bbr_passes_through_reno_when_both_are_allowed() {
        assert_eq!(detour("bbr", "reno bbr cubic"), Some("reno"));
        assert_eq!(detour("bbr", "cubic bbr reno\n"), Some("reno"));
    }

    #[test]
    fn without_reno_bbr_passes_through_another_allowed_one() {
        assert_eq!(detour("bbr", "bbr cubic"), Some("cubic"));
    }

    #[test]
    fn other_congestion_controls_are_left_alone() {
        for current in ["cubic", "reno", "dctcp", "bbr2", ""] {
            assert_eq!(detour(current, "reno bbr cubic dctcp bbr2"), None, "{current}");
        }
    }

    #[test]
    fn bbr_that_may_not_be_set_again_is_left_alone() {
        // Set by a privileged process or a route: the way back would fail, leaving reno.
        assert_eq!(detour("bbr", "reno cubic"), None);
        assert_eq!(detour("bbr", ""), None);
        // Nothing else to pass through.
        assert_eq!(detour("bbr", "bbr"), None);
    }

    #[test]
    fn only_a_send_of_64_kib_or_more_restarts_bbr() {
        for small in [0, 7, 14 + 32 * 50, LARGE_SEND - 1] {
            assert!(!is_large_send(small), "{small}");
        }
        for large in [LARGE_SEND, 256 << 10, 32 << 20] {
            assert!(is_large_send(large), "{large}");
        }
    }

    #[test]
    fn names_are_read_up_to_their_padding() {
        assert_eq!(name_of(b"bbr\0\0\0\0\0\0\0\0\0\0\0\0\0"), "bbr");
        assert_eq!(name_of(b"cubic"), "cubic");
        assert_eq!(name_of(b""), "");
    }
}
