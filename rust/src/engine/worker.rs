//! One I/O worker thread: takes descriptors from its submission ring, spreads them over its
//! connections, drives the sockets, and posts completions to its completion ring.

use super::clock;
use super::notify::{EventFd, futex_wake_all};
use super::records::{Descriptor, Region, Tag, encode_completion};
use super::{BATCH_COUNT_MASK, BATCH_WAITER_FLAG, Shared};
use crate::conn::{Completion, Conn, Outcome, PipelineLimits, Request};
use crate::error::Error;
use crate::memory::RawBuf;
use crate::net::Readiness;
use crate::net::socket::{poll_flags, timeout_until};
use crate::ring::{Consumer, Producer, PushError};
use rustix::event::{PollFd, PollFlags, poll};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Error messages cross the completion ring; longer ones are cut.
const MAX_MESSAGE: usize = 2048;
/// While the completion ring is full, look again this often.
const FULL_RING_RETRY: Duration = Duration::from_millis(1);

pub struct Worker {
    pub shared: Arc<Shared>,
    pub submissions: Consumer,
    pub completions: Producer,
    pub doorbell: Arc<EventFd>,
    pub conns: Vec<Conn>,
    /// Completions not yet in the completion ring (it was full).
    pub finished: Vec<Completion>,
    pub record: Vec<u8>,
}

impl Worker {
    pub fn run(mut self) {
        let mut readiness = vec![Readiness::OPTIMISTIC; self.conns.len()];
        loop {
            let now = Instant::now();
            let sealed = self.shared.sealed.load(Ordering::Acquire);
            if sealed {
                let err = Error::closed("the store");
                for conn in &mut self.conns {
                    conn.fail_unsent(&err, &mut self.finished);
                }
            }
            if self.finished.is_empty() {
                self.take_submissions(now, sealed);
            }
            for (conn, ready) in self.conns.iter_mut().zip(&readiness) {
                conn.drive(now, *ready, &mut self.finished);
                conn.expire(now, &mut self.finished);
            }
            self.post_completions();
            if sealed
                && self.finished.is_empty()
                && self.conns.iter().all(Conn::is_empty)
                && self.submissions.is_empty()
            {
                return;
            }
            self.wait(&mut readiness);
        }
    }

    /// Moves descriptors from the ring onto connections while they have room: the ring is
    /// the queue, and a full ring is the submitters' backpressure.
    fn take_submissions(&mut self, now: Instant, sealed: bool) {
        let now_ns = clock::now_ns();
        let limits = self.shared.pipeline;
        let mut took = false;
        while let Some(conn) =
            self.conns.iter_mut().filter(|c| has_room(c, limits)).min_by_key(|c| c.outstanding_cost())
        {
            match self.submissions.try_pop_into(&mut self.record) {
                Ok(true) => {}
                Ok(false) => break,
                Err(err) => panic!("submission ring corrupt: {err}"),
            }
            took = true;
            let descriptor = match Descriptor::decode(&self.record) {
                Ok(descriptor) => descriptor,
                Err(err) => panic!("malformed submission record: {err}"),
            };
            let tag = descriptor.tag.pack();
            if sealed {
                self.finished.push(Completion { tag, outcome: Outcome::Failed(Error::closed("the store")) });
                continue;
            }
            let data = match resolve(&self.shared, &descriptor) {
                Ok(data) => data,
                Err(err) => {
                    self.finished.push(Completion { tag, outcome: Outcome::Failed(err) });
                    continue;
                }
            };
            let deadline = clock::instant_at(descriptor.deadline_ns, now_ns, now);
            conn.push(Request::new(descriptor.op, descriptor.key, data, tag, deadline), &mut self.finished);
        }
        if took {
            self.submissions.release();
        }
    }

    /// Posts finished operations, then counts them off their batches. Only after a batch's
    /// last completion is in the ring is its submitter woken: once per burst on the eventfd,
    /// or on the batch counter's futex for a thread waiting for that batch.
    fn post_completions(&mut self) {
        if self.finished.is_empty() {
            return;
        }
        let mut posted = 0;
        for completion in &self.finished {
            let (header, message) = encode_completion(completion.tag, &completion.outcome);
            let message = truncate(message.unwrap_or(""), MAX_MESSAGE);
            match self.completions.try_push(&[&header, message.as_bytes()]) {
                Ok(()) => posted += 1,
                Err(PushError::Full) => break,
                Err(PushError::TooLarge { .. }) => unreachable!("completion records are small"),
                Err(PushError::Corrupt(what)) => panic!("completion ring corrupt: {what}"),
            }
        }
        if posted == 0 {
            return;
        }
        self.completions.publish();
        let mut per_slot: Vec<(u32, u32)> = Vec::new();
        for completion in self.finished.drain(..posted) {
            let slot = Tag::unpack(completion.tag).slot;
            match per_slot.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, count)) => *count += 1,
                None => per_slot.push((slot, 1)),
            }
        }
        let mut signal_drainers = false;
        for (slot, count) in per_slot {
            let counter = self.shared.arena.batch_counter(slot as usize);
            let before = counter.fetch_sub(count, Ordering::AcqRel);
            if before & BATCH_COUNT_MASK == count {
                if before & BATCH_WAITER_FLAG != 0 {
                    futex_wake_all(counter);
                } else {
                    signal_drainers = true;
                }
            }
        }
        if signal_drainers {
            self.shared.completion_event.signal();
        }
    }

    fn has_room(&self) -> bool {
        self.conns.iter().any(|c| has_room(c, self.shared.pipeline))
    }

    fn wait(&mut self, readiness: &mut [Readiness]) {
        let mut wake: Option<Instant> = None;
        if !self.finished.is_empty() {
            wake = Some(Instant::now() + FULL_RING_RETRY);
        } else if self.has_room() && !self.submissions.is_empty() {
            // Descriptors are waiting and can be taken now: only collect readiness.
            wake = Some(Instant::now());
        }
        let mut fds = Vec::with_capacity(self.conns.len() + 1);
        fds.push(PollFd::from_borrowed_fd(self.doorbell.as_fd(), PollFlags::IN));
        let mut slots = Vec::with_capacity(self.conns.len());
        for conn in &self.conns {
            let (fd, interest, conn_wake) = conn.interest();
            wake = match (wake, conn_wake) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match fd {
                Some(fd) if interest.read || interest.write => {
                    slots.push(Some(fds.len()));
                    fds.push(PollFd::from_borrowed_fd(fd, poll_flags(interest)));
                }
                _ => slots.push(None),
            }
        }
        let timeout = timeout_until(wake, Instant::now());
        let polled = poll(&mut fds, timeout.as_ref());
        let doorbell_rang = matches!(polled, Ok(n) if n > 0) && fds[0].revents().contains(PollFlags::IN);
        for (ready, slot) in readiness.iter_mut().zip(&slots) {
            *ready = match (polled, slot) {
                (Ok(n), Some(i)) if n > 0 => Readiness::from_poll(fds[*i].revents()),
                _ => Readiness::default(),
            };
        }
        drop(fds);
        if doorbell_rang {
            self.doorbell.reset();
        }
    }
}

/// A connection takes more descriptors while its queue holds less than two pipelines' worth:
/// enough to keep the wire busy, little enough that the ring stays the queue.
fn has_room(conn: &Conn, limits: PipelineLimits) -> bool {
    conn.outstanding_cost() < 2 * limits.max_inflight_bytes
        && conn.outstanding_requests() < 2 * limits.max_inflight_requests
}

/// The memory a descriptor names, checked against the arena's bounds.
fn resolve(shared: &Shared, descriptor: &Descriptor<'_>) -> Result<Option<RawBuf>, Error> {
    if descriptor.len == 0 && !matches!(descriptor.op, crate::conn::Op::Get | crate::conn::Op::Set) {
        return Ok(None);
    }
    let len = usize::try_from(descriptor.len).map_err(|_| Error::invalid("length does not fit in memory"))?;
    let ptr = match descriptor.region {
        Region::Arena => {
            let end = descriptor.offset.checked_add(descriptor.len);
            if end.is_none_or(|end| end > shared.arena.size() as u64) {
                return Err(Error::invalid(format!(
                    "range {}+{} is outside the {}-byte arena",
                    descriptor.offset,
                    descriptor.len,
                    shared.arena.size()
                )));
            }
            shared.arena.base().wrapping_add(descriptor.offset as usize)
        }
        Region::Process => descriptor.offset as usize as *mut u8,
    };
    // SAFETY: arena ranges were bounds-checked above and the arena outlives every worker
    // (`Shared` holds it). Process ranges were validated by the submitter, who keeps them
    // alive and reserved until the batch's completion is drained (the engine's contract).
    Ok(Some(unsafe { RawBuf::new(ptr, len) }))
}

fn truncate(message: &str, max: usize) -> &str {
    if message.len() <= max {
        return message;
    }
    let mut end = max;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}
