//! LMCache's own buffers through a bridge. LMCache's buffers live in its own pinned pool, not
//! in the bridge's arena, and a bridge must never be handed a client's private memory: so each
//! value is staged through a page this client holds. SET copies the buffer into its page
//! before the batch goes out; GET copies a hit out of its page when the batch is drained. That
//! is one memcpy per value, the price of sharing no memory but the arena.
//!
//! Staging pages are kept and reused (they are taken from the bridge only when more are in
//! flight than ever before), so the steady state costs no control-socket round trips. They go
//! back to the bridge's pool when the client closes or its process ends.

use super::session::BridgeClient;
use crate::arena::PageHandle;
use crate::conn::Outcome;
use crate::engine::BatchResult;
use crate::error::{Error, ErrorKind, Result};
use crate::memory::RawBuf;
use crate::op::{BatchShape, MemoryKind, Op};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// A bridge client whose batches move the caller's own buffers.
pub struct Staging {
    client: BridgeClient,
    /// Staging pages not in use by a batch.
    spare: Mutex<Vec<PageHandle>>,
    /// Batches in flight: the pages they use, and where a GET's hits go.
    staged: Mutex<HashMap<u64, Staged>>,
}

struct Staged {
    pages: Vec<PageHandle>,
    /// GET: each key's destination (the caller's buffer).
    destinations: Vec<RawBuf>,
}

// Lock order: `staged` before the client's own locks (held across a submit, so that no drain
// sees a batch before its staging is filed); `spare` is never held while taking another lock
// except the client's, to allocate.

impl Staging {
    /// Attaches to the bridge listening at `path`.
    pub fn attach(path: &Path, timeout: Duration) -> Result<Staging> {
        Ok(Staging {
            client: BridgeClient::attach(path, timeout)?,
            spare: Mutex::new(Vec::new()),
            staged: Mutex::new(HashMap::new()),
        })
    }

    /// The bridge client the values are staged through.
    pub fn client(&self) -> &BridgeClient {
        &self.client
    }

    /// Submits a batch over the caller's buffers (see [`crate::front::BufferConnector`]):
    /// GET reads a value only when its length is exactly its buffer's, SET stores each buffer
    /// whole; EXISTS and DELETE take keys only.
    pub fn submit(&self, op: Op, keys: &[&[u8]], buffers: &[RawBuf]) -> Result<u64> {
        let memory = MemoryKind::Buffers;
        BatchShape { op, keys, memory, memories: buffers.len(), lengths: None, exact_length: true }.check()?;
        match op {
            Op::Get | Op::Set => self.stage(op, keys, buffers),
            _ => self.client.submit(op, keys, &[], None),
        }
    }

    /// Finished batches: a GET's hits are in their buffers, its pages back among the spares.
    pub fn drain(&self) -> Result<Vec<BatchResult>> {
        let mut results = self.client.drain()?;
        let mut staged = lock(&self.staged);
        for result in &mut results {
            let Some(staging) = staged.remove(&result.id) else { continue };
            if let Err(err) = self.unstage(result, staging) {
                // The page was checked at submit and is still held: this does not happen,
                // but if it did, the key is failed rather than reported as read.
                for outcome in &mut result.outcomes {
                    if matches!(outcome, Outcome::Hit(_)) {
                        *outcome = Outcome::Failed(err.clone());
                    }
                }
            }
        }
        Ok(results)
    }

    fn take_pages(&self, n: usize) -> Result<Vec<PageHandle>> {
        let mut spare = lock(&self.spare);
        if spare.len() < n {
            let more = self.client.allocate_many(n - spare.len()).map_err(|err| {
                if err.kind() == ErrorKind::Page {
                    Error::new(
                        ErrorKind::Page,
                        format!(
                            "staging {n} values through the bridge: {} (this connector holds {} spare pages); the \
                             pool is shared by the bridge's clients: start it with a larger --num-pages, or submit \
                             smaller batches",
                            err.message(),
                            spare.len()
                        ),
                    )
                } else {
                    err
                }
            })?;
            spare.extend(more);
        }
        let at = spare.len() - n;
        Ok(spare.split_off(at))
    }

    fn give_back(&self, pages: Vec<PageHandle>) {
        lock(&self.spare).extend(pages);
    }

    fn page_memory(&self, page: &PageHandle, len: usize) -> Result<RawBuf> {
        let ptr = self.client.page_ptr(page)?;
        // SAFETY: the page is one this client holds (page_ptr checked it) inside the mapped
        // arena, which the client keeps mapped; `len` is at most a page (checked by the
        // caller). While staged, only this client and the batch it belongs to use it.
        Ok(unsafe { RawBuf::new(ptr, len) })
    }

    fn stage(&self, op: Op, keys: &[&[u8]], buffers: &[RawBuf]) -> Result<u64> {
        let page_size = self.client.page_size();
        if let Some((i, buffer)) = buffers.iter().enumerate().find(|(_, b)| b.len() > page_size) {
            return Err(Error::invalid(format!(
                "buffer {i}: {} bytes do not fit the bridge's {page_size}-byte pages: start the bridge with a \
                 --page-size of at least LMCache's chunk size",
                buffer.len()
            )));
        }
        let pages = self.take_pages(keys.len())?;
        let lengths: Vec<u64> = buffers.iter().map(|b| b.len() as u64).collect();
        let submitted = (|| {
            let mut staged = lock(&self.staged);
            let id = if op == Op::Set {
                for (page, buffer) in pages.iter().zip(buffers) {
                    self.page_memory(page, buffer.len())?.copy_from(buffer);
                }
                self.client.submit(op, keys, &pages, Some(&lengths))?
            } else {
                self.client.submit_exact_get(keys, &pages, &lengths)?
            };
            let destinations = if op == Op::Get { buffers.to_vec() } else { Vec::new() };
            staged.insert(id, Staged { pages: pages.clone(), destinations });
            Ok(id)
        })();
        if submitted.is_err() {
            self.give_back(pages);
        }
        submitted
    }

    /// A finished batch: a GET's hits go to their buffers, its pages back to the spares.
    fn unstage(&self, result: &BatchResult, staged: Staged) -> Result<()> {
        let copied = staged.destinations.iter().zip(&staged.pages).zip(&result.outcomes).try_for_each(
            |((destination, page), outcome)| match outcome {
                Outcome::Hit(len) if *len == destination.len() => {
                    destination.copy_from(&self.page_memory(page, *len)?);
                    Ok(())
                }
                _ => Ok(()),
            },
        );
        self.give_back(staged.pages);
        copied
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
