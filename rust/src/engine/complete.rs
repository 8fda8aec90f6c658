//! The completion side of the front-end: filing completion records with their batches,
//! waiting for one batch, draining finished ones, and settling everything after a failure.

use super::batches::{BatchResult, Recorded};
use super::futex::futex_wait;
use super::records::{Tag, decode_completion};
use super::submit::Ticket;
use super::{Engine, FrontEnd, WAIT_GRACE};
use crate::conn::Outcome;
use crate::error::{Error, ErrorKind, Result};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Engine {
    /// Waits for a batch submitted with [`Engine::submit_waiting`].
    pub(crate) fn wait(&self, ticket: Ticket) -> Result<BatchResult> {
        let Ticket { id, slot } = ticket;
        let give_up = Instant::now() + self.timeout + WAIT_GRACE;
        let counter = self.shared.counter(slot);
        loop {
            if self.shared.failure().is_some() {
                self.settle_failure();
            }
            {
                let mut front = self.lock_front();
                self.collect(&mut front);
                if let Some(result) = front.batches.take_completed(slot) {
                    debug_assert_eq!(result.id, id);
                    return Ok(result);
                }
                if Instant::now() >= give_up {
                    front.batches.abandon(slot);
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!("batch {id} did not complete within its timeout (the I/O workers are stuck)"),
                    ));
                }
            }
            let value = counter.load(Ordering::Acquire);
            if !super::counter::is_open(value) {
                // The last completion was published before the count reached zero.
                continue;
            }
            let left = give_up.saturating_duration_since(Instant::now());
            futex_wait(counter, value, left.min(Duration::from_millis(100)));
        }
    }

    /// Results of every `submit`ted batch that completed since the last call; clears the
    /// eventfd's readiness.
    pub fn drain(&self) -> Result<Vec<BatchResult>> {
        self.check_process()?;
        if self.shared.failure().is_some() {
            self.settle_failure();
        }
        let mut front = self.lock_front();
        // Reset before looking: a completion posted after this point signals again.
        self.shared.completion_event.reset();
        self.collect(&mut front);
        Ok(front.batches.take_ready())
    }

    /// Files every posted completion with its batch. A record that cannot be ours means the
    /// rings are broken: the engine fails rather than guess.
    pub(super) fn collect(&self, front: &mut FrontEnd) {
        for lane in 0..front.consumers.len() {
            let mut took = false;
            loop {
                let FrontEnd { consumers, record, .. } = &mut *front;
                match consumers[lane].try_pop_into(record) {
                    Ok(true) => took = true,
                    Ok(false) => break,
                    Err(err) => {
                        self.shared.fail(Error::new(
                            ErrorKind::EngineFailed,
                            format!("completion ring {lane} corrupt: {err}"),
                        ));
                        return;
                    }
                }
                let (tag, outcome) = match decode_completion(&front.record) {
                    Ok(decoded) => decoded,
                    Err(err) => {
                        self.shared.fail(Error::new(ErrorKind::EngineFailed, format!("bad completion record: {err}")));
                        return;
                    }
                };
                let tag = Tag::unpack(tag);
                if !self.file(front, tag.slot, tag.index, outcome) {
                    return;
                }
            }
            if took {
                front.consumers[lane].release();
            }
        }
    }

    /// Records one key's outcome; a batch that completes lets go of its buffers. False when
    /// the record was impossible (and the engine is now failed).
    pub(super) fn file(&self, front: &mut FrontEnd, slot: u32, index: u32, outcome: Outcome) -> bool {
        match front.batches.record(slot, index, outcome) {
            Ok(Recorded::Pending) => true,
            Ok(Recorded::Completed) => {
                self.shared.buffers.release(slot);
                self.shared.regions.release(slot);
                self.shared.metrics.on_batch_done(slot);
                true
            }
            Err(why) => {
                self.shared.fail(Error::new(ErrorKind::EngineFailed, format!("impossible completion: {why}")));
                false
            }
        }
    }

    /// After a failure: waits for the workers (which drop their connections at once), files
    /// what they posted, and fails every key still open, so every batch completes and no
    /// buffer is used any more.
    pub(super) fn settle_failure(&self) {
        self.join_workers();
        let mut front = self.lock_front();
        self.collect(&mut front);
        self.settle_if_failed(&mut front);
    }

    /// With the workers gone, fails every key still open.
    pub(super) fn settle_if_failed(&self, front: &mut FrontEnd) {
        let Some(err) = self.shared.failure() else { return };
        let completed = front.batches.fail_open(err);
        if completed.is_empty() {
            return;
        }
        for slot in completed {
            self.shared.buffers.release(slot);
            self.shared.regions.release(slot);
            super::futex::futex_wake_all(self.shared.counter(slot));
        }
        if front.batches.has_ready() {
            self.shared.completion_event.signal();
        }
    }
}
