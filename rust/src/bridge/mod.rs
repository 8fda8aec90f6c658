//! The cross-process bridge: one process owns the I/O engine (its threads placed near the
//! NIC, its connections, the credentials); other processes on the host attach over a Unix
//! socket and move pages through it with the store's own API.
//!
//! Both sides of its protocol live here, so a change to the protocol touches only this
//! directory. What both sides speak:
//! - `wire`: the control messages and the batch records (pure, checked decoding).
//! - `channel`: frames and file descriptors over the control socket.
//! - `signal`: the socketpair each client and the bridge wake each other through.
//!
//! The two sides:
//! - `client`: a process attached to a bridge. `client::BridgeClient` (pages and batches
//!   over them) and `client::Staging` (the caller's own buffers, staged through pages), put
//!   together from parts of one job each: the attach, the control link and liveness, the pages
//!   held, the submission ring, the completions, the watcher thread. The fronts
//!   [`crate::front::BridgedPageStore`] and [`crate::front::BridgedConnector`] are adapters over
//!   them, twins of the in-process fronts.
//! - `server`: the bridge process's side. `state` (what its two threads share: the engine,
//!   the page budget, the clients, the release of a client's pages) is imported by `control`
//!   (accepts, handshakes under a deadline, page requests) and `relay` (fair admission of
//!   batches into the engine, results back), and imports neither. Their decisions are plain
//!   types, tested without sockets or an engine: `admission` (shares, slices, round-robin,
//!   backlog bounds), `batch` (the pages a batch may name, and what the bridge keeps of it),
//!   `audit` (memory in pages a client does not hold), `refusals` (the log of refused
//!   connections at a bounded rate).
//!
//! Each client gets its own region, a memfd holding its ring pair and its pages and nothing of
//! any other client: another client's bytes are not merely unaddressed but unreachable. It can
//! write garbage only into its own rings, and that ends only its own connection. Every batch
//! names pages of its region by index and allocation generation; the bridge runs only those it
//! handed that client.

pub(crate) mod channel;
pub(crate) mod client;
mod server;
pub(crate) mod signal;
pub(crate) mod wire;

pub use server::{BridgeLimits, BridgeServer};
