//! What one client of the bridge may use, and how many may attach: every resource a client costs
//! the bridge is bounded by one of these.

use std::time::Duration;

/// What one client may use, and how many may attach: every resource a client costs the bridge
/// is bounded by one of these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BridgeLimits {
    /// Clients attached at once; more are refused, saying so.
    pub max_clients: usize,
    /// Pages one client may hold at once (its region's size).
    pub client_pages: usize,
    /// Bytes of values one client may have in the engine at once; a larger batch goes in in
    /// slices, round-robin with the other clients' work.
    pub client_inflight_bytes: usize,
    /// Keys one client may have in the engine at once.
    pub client_inflight_keys: usize,
    /// Completion bytes waiting for a client that does not read its ring: past this, its
    /// batches are no longer taken in until it reads.
    pub client_outbox_bytes: usize,
    /// A client's submission ring, unless it asks for a size (kept between 64 KiB and 16 MiB).
    pub submission_ring_bytes: usize,
    /// A client's completion ring (completions larger than a quarter of it are split).
    pub completion_ring_bytes: usize,
    /// A connection that has not finished its handshake by then is closed.
    pub handshake_timeout: Duration,
    /// Handshakes in progress at once; connections past that are refused at once.
    pub max_handshakes: usize,
    /// The uids that may attach (SO_PEERCRED); empty: only the bridge's own uid.
    pub allow_uids: Vec<u32>,
    /// The gids whose members may attach (the peer's primary or supplementary groups).
    pub allow_gids: Vec<u32>,
    /// The socket file's mode, set after it is created, whatever the umask.
    pub socket_mode: u32,
}

impl Default for BridgeLimits {
    fn default() -> Self {
        BridgeLimits {
            max_clients: 64,
            client_pages: 0,
            client_inflight_bytes: 32 << 20,
            client_inflight_keys: 4096,
            client_outbox_bytes: 4 << 20,
            submission_ring_bytes: 1 << 20,
            completion_ring_bytes: 256 << 10,
            handshake_timeout: Duration::from_secs(5),
            max_handshakes: 128,
            allow_uids: Vec::new(),
            allow_gids: Vec::new(),
            socket_mode: 0o660,
        }
    }
}
