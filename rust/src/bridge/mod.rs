//! The cross-process bridge: one process owns the I/O engine (its threads placed near the
//! NIC, its connections, the credentials); other processes on the host attach over a Unix
//! socket and move pages through it with the store's own API.
//!
//! - [`wire`]: the control messages and the batch records (pure, checked decoding).
//! - [`channel`]: frames and file descriptors over the control socket.
//! - [`signal`]: the socketpair each client and the bridge wake each other through.
//! - [`server`]: the bridge process's side. `state` (what its two threads share: the engine,
//!   the page budget, the clients, the release of a client's pages) is imported by `control`
//!   (accepts, handshakes under a deadline, page requests) and `relay` (fair admission of
//!   batches into the engine, results back), and imports neither. Their decisions are plain
//!   types, tested without sockets or an engine: `admission` (shares, slices, round-robin,
//!   backlog bounds), `batch` (the pages a batch may name, and what the bridge keeps of it),
//!   `audit` (memory in pages a client does not hold), `refusals` (the log of refused
//!   connections at a bounded rate).
//!
//! The clients' side, a store and LMCache's connector attached to a bridge, are fronts like
//! their in-process twins: [`crate::front::BridgedPageStore`], [`crate::front::BridgedConnector`].
//!
//! Each client gets its own region, a memfd holding its ring pair and its pages and nothing of
//! any other client: another client's bytes are not merely unaddressed but unreachable. It can
//! write garbage only into its own rings, and that ends only its own connection. Every batch
//! names pages of its region by index and allocation generation; the bridge runs only those it
//! handed that client.

pub mod channel;
pub mod server;
pub mod signal;
pub mod wire;

pub use server::{BridgeLimits, BridgeServer};
