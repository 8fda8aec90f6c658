//! What every front of an engine answers, whether the engine runs in this process or in a
//! bridge: the paged store ([`crate::store::PageStore`]) and the connector over caller memory
//! ([`crate::connector::BufferConnector`]) both build on it.

use crate::capacity::TrackedEngine;
use crate::engine::BatchResult;
use crate::error::Result;
use std::os::fd::BorrowedFd;

pub trait EngineHandle: Send + Sync {
    /// Finished batches submitted for draining; clears the event fd's readiness.
    fn drain(&self) -> Result<Vec<BatchResult>>;
    /// Readable while finished batches wait to be drained.
    fn event_fd(&self) -> BorrowedFd<'_>;
    /// Completes or fails everything in flight, then refuses further calls.
    fn close(&self);
    fn is_closed(&self) -> bool;
    fn num_workers(&self) -> usize;
    fn endpoint(&self) -> String;
    /// The engine, when it runs in this process.
    fn local_engine(&self) -> Option<&TrackedEngine>;
}

impl EngineHandle for TrackedEngine {
    fn drain(&self) -> Result<Vec<BatchResult>> {
        TrackedEngine::drain(self)
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        crate::engine::Engine::event_fd(self)
    }

    fn close(&self) {
        crate::engine::Engine::close(self);
    }

    fn is_closed(&self) -> bool {
        crate::engine::Engine::is_closed(self)
    }

    fn num_workers(&self) -> usize {
        crate::engine::Engine::num_workers(self)
    }

    fn endpoint(&self) -> String {
        crate::engine::Engine::endpoint(self).to_owned()
    }

    fn local_engine(&self) -> Option<&TrackedEngine> {
        Some(self)
    }
}
