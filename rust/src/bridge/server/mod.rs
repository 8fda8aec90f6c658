//! The bridge process's side: one engine shared by the clients that attach over a Unix socket,
//! each client confined to a region of its own.
//!
//! Two threads serve every client, however many attach:
//! - the control thread (`control.rs`) accepts connections, runs their handshakes side by side
//!   under one deadline each, and answers page requests; nothing a slow or silent peer does
//!   holds up another;
//! - the relay (`relay.rs`) moves batches from the clients' rings into the engine, round-robin,
//!   each client within its share of what is in flight, and the results back.
//!
//! What they share is `state.rs` (the engine, the page budget, the clients, the release of a
//! client's pages), which both import and which imports neither; `limits.rs` bounds what each
//! client costs. Their decisions are plain types, tested without sockets or an engine:
//! `admission.rs` (shares, slices, round-robin, backlog bounds), `batch.rs` (the pages a batch
//! may name, and what the bridge keeps of it), `audit.rs` (memory in pages a client does not
//! hold), `refusals.rs` (the log of refused connections at a bounded rate).
//!
//! Each client gets its own region: a memfd holding its ring pair and its pages, and nothing of
//! any other client. Its batches name pages of that region only; the engine reads and writes
//! them through the bridge's own mapping. The bridge trusts nothing a client writes: a record
//! that does not decode or a ring whose positions are impossible ends that client alone; a
//! batch naming a page the client does not hold fails, key by key, before it reaches the
//! engine.

mod admission;
mod audit;
mod batch;
mod control;
mod limits;
mod refusals;
mod relay;
mod state;

pub use limits::BridgeLimits;

use crate::capacity::TrackedEngine;
use crate::engine::EngineConfig;
use crate::error::{Error, Result};
use state::BridgeState;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A running bridge: its engine, its page budget, and the two threads serving its clients.
pub struct BridgeServer {
    shared: Arc<BridgeState>,
    socket: PathBuf,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl BridgeServer {
    /// Starts the engine and listens on `socket` (replacing a stale socket file, refusing
    /// anything else there). `config.num_pages` pages of `config.page_size` bytes are the
    /// budget all clients share; each holds at most `limits.client_pages` of them (0: the
    /// whole budget).
    pub fn start(mut config: EngineConfig, socket: &Path, mut limits: BridgeLimits) -> Result<BridgeServer> {
        if config.page_size == 0 || config.num_pages == 0 {
            return Err(Error::invalid("the bridge needs page_size >= 1 and num_pages >= 1"));
        }
        if limits.client_pages == 0 || limits.client_pages > config.num_pages {
            limits.client_pages = config.num_pages;
        }
        if limits.max_clients == 0 {
            return Err(Error::invalid("the bridge needs max_clients >= 1"));
        }
        let (page_size, num_pages) = (config.page_size, config.num_pages);
        crate::memory::check_fits(page_size as u64 * num_pages as u64, "the bridge's pages")?;
        let listener = control::bind(socket, limits.socket_mode)?;
        // The engine holds no pages of its own: every page lives in a client's region.
        config.page_size = 0;
        config.num_pages = 0;
        // Room in the engine's rings for every client's share in flight at once.
        config.submission_ring_bytes = config.submission_ring_bytes.max(4 << 20).next_power_of_two();
        let engine_ring_bytes = config.submission_ring_bytes * config.settings.num_workers;
        let engine = TrackedEngine::start(config)?;
        let shared = Arc::new(BridgeState::new(engine, limits, page_size, num_pages, engine_ring_bytes)?);
        let threads = vec![
            spawn("lmcache-resp-bridge-control", {
                let shared = shared.clone();
                move || control::run(&shared, listener)
            })?,
            spawn("lmcache-resp-bridge-relay", {
                let shared = shared.clone();
                move || relay::run(&shared)
            })?,
        ];
        Ok(BridgeServer { shared, socket: socket.to_path_buf(), threads: Mutex::new(threads) })
    }

    /// The engine (for its facts: placement, workers, capacity).
    pub fn engine(&self) -> &TrackedEngine {
        &self.shared.engine
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.shared.page_size
    }

    /// Pages all clients together may hold.
    pub fn num_pages(&self) -> usize {
        self.shared.num_pages
    }

    /// Pages no client holds now.
    pub fn free_pages(&self) -> usize {
        self.shared.num_pages - self.shared.pages_held.load(Ordering::Acquire)
    }

    /// The bounds each client works within.
    pub fn limits(&self) -> &BridgeLimits {
        &self.shared.limits
    }

    /// Clients attached now.
    pub fn clients(&self) -> usize {
        self.shared.lock_clients().len()
    }

    /// Stops taking clients and batches, completes or fails what is in flight (delivering
    /// the results), drops the clients, and removes the socket file. Idempotent.
    pub fn stop(&self) {
        self.shared.request_stop();
        let threads: Vec<_> = self.threads.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
        for thread in threads {
            let _ = thread.join();
        }
        self.shared.engine.close();
        relay::finish(&self.shared);
        for socket in self.shared.parked.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
        // The clients' signal ends close with them: a client that only waits on its event fd
        // wakes and learns the bridge is gone.
        self.shared.lock_clients().clear();
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for BridgeServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name.into()).spawn(body).map_err(|e| Error::os("cannot start a bridge thread", e))
}
