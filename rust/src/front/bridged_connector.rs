//! LMCache's native connector through a bridge: the caller's buffers staged through pages of
//! the bridge's arena by a [`Staging`] client (`crate::bridge::client`), which says why and
//! how. This adapter only answers the fronts' traits.

use super::bridged_store::bridge_facts;
use super::{BufferConnector, EngineFacts, EngineFront, RangeBatch};
use crate::bridge::client::Staging;
use crate::engine::BatchResult;
use crate::error::{Error, Result};
use crate::memory::RawBuf;
use crate::op::Op;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::time::Duration;

/// LMCache's connector attached to a bridge.
pub struct BridgedConnector {
    staging: Staging,
}

impl BridgedConnector {
    /// Attaches to the bridge listening at `path`.
    pub fn attach(path: &Path, timeout: Duration) -> Result<BridgedConnector> {
        Ok(BridgedConnector { staging: Staging::attach(path, timeout)? })
    }
}

impl BufferConnector for BridgedConnector {
    fn submit(&self, op: Op, keys: &[&[u8]], buffers: &[RawBuf]) -> Result<u64> {
        self.staging.submit(op, keys, buffers)
    }

    fn register_region(&self, _memory: RawBuf) -> Result<u32> {
        Err(no_regions())
    }

    fn unregister_region(&self, _region: u32) -> Result<()> {
        Err(no_regions())
    }

    fn run_ranges(&self, _batch: &RangeBatch<'_>) -> Result<BatchResult> {
        Err(no_regions())
    }

    fn submit_ranges(&self, _batch: &RangeBatch<'_>) -> Result<u64> {
        Err(no_regions())
    }
}

/// The bridge's engine cannot reach this process's memory: values cross in its pages.
fn no_regions() -> Error {
    Error::invalid(
        "registered regions need the I/O engine in this process: a connector attached to a bridge stages \
         values through the bridge's pages (use submit with buffers, or a connector of its own)",
    )
}

impl EngineFront for BridgedConnector {
    fn drain(&self) -> Result<Vec<BatchResult>> {
        self.staging.drain()
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        self.staging.client().event_fd()
    }

    fn close(&self) {
        self.staging.client().close();
    }

    fn is_closed(&self) -> bool {
        self.staging.client().is_closed()
    }

    fn num_workers(&self) -> usize {
        self.staging.client().num_workers()
    }

    fn endpoint(&self) -> String {
        self.staging.client().endpoint()
    }

    fn facts(&self) -> EngineFacts {
        bridge_facts(self.staging.client())
    }

    fn stats(&self) -> Result<crate::metrics::Snapshot> {
        self.staging.client().stats()
    }

    #[cfg(feature = "test-hooks")]
    fn corrupt_ring_for_test(&self, _worker: usize) -> Result<()> {
        Err(Error::invalid("the engine runs in the bridge process"))
    }
}
