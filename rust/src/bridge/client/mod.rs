//! The clients' side of the bridge protocol: attach to a bridge, move pages through it, and
//! read its results, with the same operations as a store whose engine runs in this process.
//! The fronts ([`crate::front::BridgedPageStore`], [`crate::front::BridgedConnector`]) are
//! adapters over these two types:
//!
//! - [`BridgeClient`] (`session.rs`): pages of this client's region, and batches over them.
//! - [`Staging`] (`staging.rs`): the caller's own buffers (LMCache's pinned pool), each value
//!   staged through a page the client holds, since a bridge never sees a client's private
//!   memory.
//!
//! Each part has one job; `session.rs` puts them together, and only `staging.rs` builds on it:
//! `attach.rs` (the hello, the welcome, the region and rings mapped), `link.rs` (control calls
//! over the control socket, and whether the bridge is still there), `pages.rs` (the pages this
//! client holds, by generation), `rings.rs` (a batch into the submission ring: described, split
//! to fit, pushed), `results.rs` (the completion ring filed into the batches in flight),
//! `watcher.rs` (the thread that turns the bridge's signals into this process's event fd).

mod attach;
mod link;
mod pages;
mod results;
mod rings;
mod session;
mod staging;
mod watcher;

pub use session::BridgeClient;
pub use staging::Staging;
