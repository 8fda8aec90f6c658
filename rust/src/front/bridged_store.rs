//! The paged store with its engine in a bridge process: the same operations as a
//! [`super::LocalPageStore`], run by a [`BridgeClient`], which speaks the bridge's protocol
//! (`crate::bridge::client`). This adapter only answers the fronts' traits.

use super::{EngineFacts, EngineFront, PageStore};
use crate::arena::{Arena, PageHandle};
use crate::bridge::client::BridgeClient;
use crate::engine::BatchResult;
use crate::error::Result;
use crate::op::Op;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A page store attached to a bridge.
pub struct BridgedPageStore {
    client: BridgeClient,
}

impl BridgedPageStore {
    /// Connects to the bridge at `path`, says hello, and maps what it hands over.
    pub fn attach(path: &Path, timeout: Duration) -> Result<BridgedPageStore> {
        Ok(BridgedPageStore { client: BridgeClient::attach(path, timeout)? })
    }
}

impl PageStore for BridgedPageStore {
    fn allocate(&self) -> Result<Option<PageHandle>> {
        self.client.allocate()
    }

    fn allocate_many(&self, n: usize) -> Result<Vec<PageHandle>> {
        self.client.allocate_many(n)
    }

    fn free(&self, page: &PageHandle) -> Result<()> {
        self.client.free(page)
    }

    fn check(&self, page: &PageHandle) -> Result<()> {
        self.client.check(page)
    }

    fn page_ptr(&self, page: &PageHandle) -> Result<*mut u8> {
        self.client.page_ptr(page)
    }

    fn page_offset(&self, page: &PageHandle) -> Result<u64> {
        self.client.page_offset(page)
    }

    fn arena(&self) -> &Arc<Arena> {
        self.client.arena()
    }

    fn page_size(&self) -> usize {
        self.client.page_size()
    }

    fn num_pages(&self) -> usize {
        self.client.num_pages()
    }

    fn free_pages(&self) -> Result<usize> {
        self.client.free_pages()
    }

    fn run(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<BatchResult> {
        self.client.run(op, keys, pages, lengths)
    }

    fn submit(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<u64> {
        self.client.submit(op, keys, pages, lengths)
    }
}

impl EngineFront for BridgedPageStore {
    fn drain(&self) -> Result<Vec<BatchResult>> {
        self.client.drain()
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        self.client.event_fd()
    }

    fn close(&self) {
        self.client.close();
    }

    fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    fn num_workers(&self) -> usize {
        self.client.num_workers()
    }

    fn endpoint(&self) -> String {
        self.client.endpoint()
    }

    fn facts(&self) -> EngineFacts {
        bridge_facts(&self.client)
    }

    fn stats(&self) -> Result<crate::metrics::Snapshot> {
        self.client.stats()
    }

    #[cfg(feature = "test-hooks")]
    fn corrupt_ring_for_test(&self, _worker: usize) -> Result<()> {
        Err(crate::error::Error::invalid("the engine runs in the bridge process"))
    }
}

/// The facts of a front whose engine runs in the bridge `client` is attached to.
pub(super) fn bridge_facts(client: &BridgeClient) -> EngineFacts {
    EngineFacts::in_bridge(&client.endpoint())
}
