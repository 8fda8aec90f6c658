//! The cross-process bridge: one process owns the I/O engine (its threads placed near the
//! NIC, its connections, the credentials) and a page pool in shared memory; other processes on
//! the host attach over a Unix socket and move pages through it with the store's own API.
//!
//! - [`wire`]: the control messages and the batch records (pure, checked decoding).
//! - [`channel`]: frames and file descriptors over the control socket.
//! - [`server`]: the bridge: handshakes, page ownership per client, the relay between the
//!   clients' rings and the engine, and the end of clients that go away.
//!
//! The clients' side, a store and LMCache's connector attached to a bridge, are fronts like
//! their in-process twins: [`crate::front::BridgedPageStore`], [`crate::front::BridgedConnector`].
//!
//! Each client gets its own ring pair, in a memfd of its own: it can write garbage only into
//! its own rings, and that ends only its own connection. Every batch names pages by index and
//! allocation generation; the bridge runs only those it handed that client.

pub mod channel;
pub mod server;
pub mod wire;

pub use server::BridgeServer;
