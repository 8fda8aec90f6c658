//! What becomes of a caller's request that a cluster node handed back, and of the requests
//! that wait to be routed again: the worker's cluster decisions as plain code, taking the
//! request, why it came back and the time, and saying what to do (tested with a controlled
//! clock in `tests` below, no cluster needed).
//!
//! - A redirect is followed: `MOVED` for good (the slot moves in the map), `ASK` once, behind
//!   an `ASKING`.
//! - A node failure, `TRYAGAIN` or `CLUSTERDOWN` is retried once the map is refreshed: the
//!   request waits ([`Parked`]) 20 ms, doubling per try up to 320 ms (a failover takes the
//!   cluster's node timeout, about a second), never past its deadline.
//! - A request redirected or retried [`MAX_REROUTES`] times, or past its deadline, fails,
//!   saying why: the cluster keeps moving its slot, or keeps failing.

use crate::cluster::{NodeAddr, RedirectKind};
use crate::conn::{Completion, Handoff, Outcome, Request};
use crate::error::{Error, ErrorKind};
use crate::op::Op;
use std::time::{Duration, Instant};

/// A request whose cluster node failed waits this long before it is routed again, doubling
/// per try up to `RETRY_MAX`.
const RETRY_BASE: Duration = Duration::from_millis(20);
/// The longest wait before a parked request is routed again (and the wait after routing it
/// found no node for its slot).
pub(super) const RETRY_MAX: Duration = Duration::from_millis(320);

/// Redirects and retries one request may take before it fails: more means the cluster keeps
/// moving its slot, or keeps failing.
pub(super) const MAX_REROUTES: u8 = 16;

/// What to do with a caller's request a cluster node handed back.
#[derive(Debug)]
pub(super) enum Reroute {
    /// It was redirected or retried too often, or its deadline passed: it fails with this.
    GiveUp(Outcome),
    /// Send it to `node`, behind an `ASKING` if `asking`; `moved`: the slot moves there in
    /// the map (a `MOVED`).
    Follow { node: NodeAddr, asking: bool, moved: Option<u16> },
    /// Wait ([`Parked::park`]) and route it again once the map is refreshed; it fails with
    /// this error if time runs out meanwhile.
    Park(Error),
}

/// What to do with `request`, handed back for `why` at `now`.
pub(super) fn reroute(request: &Request, why: Handoff, now: Instant) -> Reroute {
    if request.reroutes >= MAX_REROUTES || request.deadline <= now {
        let err = match why {
            Handoff::Redirect(r) => Error::new(
                ErrorKind::Server,
                format!("slot {} kept moving: last redirected to {} after {} tries", r.slot, r.node, request.reroutes),
            ),
            Handoff::Retry(err) => err,
        };
        return Reroute::GiveUp(Outcome::Failed(
            err.context(format!("{} gave up", request.op().map_or("request", Op::name))),
        ));
    }
    match why {
        Handoff::Redirect(redirect) => {
            let asking = redirect.kind == RedirectKind::Ask;
            Reroute::Follow { node: redirect.node, asking, moved: (!asking).then_some(redirect.slot) }
        }
        Handoff::Retry(err) => Reroute::Park(err),
    }
}

/// How long a request that was rerouted `reroutes` times waits before it is routed again.
fn backoff(reroutes: u8) -> Duration {
    RETRY_BASE.saturating_mul(1 << reroutes.min(4)).min(RETRY_MAX)
}

/// Requests waiting to be routed again (their node failed, or the cluster is re-forming), with
/// when, and the error they fail with if time runs out.
#[derive(Default)]
pub(super) struct Parked {
    waiting: Vec<(Instant, Request, Error)>,
}

/// A parked request whose wait is over.
pub(super) enum Unparked {
    /// Route it again, by the map as it is now.
    Route(Request),
    /// Its deadline passed while it waited: its completion, failed.
    Expired(Completion),
}

impl Parked {
    /// `request` (retried for `err`) waits its backoff, never past its deadline, and counts
    /// one more reroute.
    pub(super) fn park(&mut self, now: Instant, request: Request, err: Error) {
        let wait = backoff(request.reroutes);
        let request = request.rerouted();
        self.waiting.push(((now + wait).min(request.deadline), request, err));
    }

    /// `request` waits until `at` (its route found no node: it fails with `err` if time runs
    /// out).
    pub(super) fn park_until(&mut self, at: Instant, request: Request, err: Error) {
        self.waiting.push((at, request, err));
    }

    /// When the first wait is over.
    pub(super) fn next_wake(&self) -> Option<Instant> {
        self.waiting.iter().map(|(at, _, _)| *at).min()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The requests whose wait is over at `now`, in the order they were parked; the others
    /// keep waiting.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<Unparked> {
        if self.waiting.iter().all(|(at, _, _)| *at > now) {
            return Vec::new();
        }
        let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting).into_iter().partition(|p| p.0 <= now);
        self.waiting = waiting;
        due.into_iter()
            .map(|(_, request, err)| {
                if request.deadline > now {
                    return Unparked::Route(request);
                }
                let outcome = Outcome::Failed(
                    Error::new(
                        ErrorKind::Timeout,
                        format!("{} timed out waiting for the cluster", request.op().map_or("request", Op::name)),
                    )
                    .context(err.message()),
                );
                Unparked::Expired(request.completion(outcome))
            })
            .collect()
    }

    /// Every waiting request fails with `err` (the engine closes, or failed).
    pub(super) fn fail_all(&mut self, err: &Error, out: &mut Vec<Completion>) {
        for (_, request, _) in self.waiting.drain(..) {
            out.push(request.completion(Outcome::Failed(err.clone())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Redirect;

    fn exists(tag: u64, deadline: Instant) -> Request {
        Request::new(Op::Exists, b"k", None, tag, deadline)
    }

    fn redirect(kind: RedirectKind, slot: u16, port: u16) -> Handoff {
        Handoff::Redirect(Redirect { kind, slot, node: NodeAddr::new("10.0.0.2", port) })
    }

    fn down() -> Handoff {
        Handoff::Retry(Error::new(ErrorKind::Connection, "10.0.0.1:7000 is down"))
    }

    fn routed(unparked: Option<Unparked>) -> Request {
        match unparked {
            Some(Unparked::Route(request)) => request,
            Some(Unparked::Expired(completion)) => panic!("expired: {:?}", completion.outcome),
            None => panic!("nothing was due"),
        }
    }

    fn failed(outcome: &Outcome) -> &Error {
        match outcome {
            Outcome::Failed(err) => err,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn moved_is_followed_and_moves_the_slot_ask_is_followed_once_behind_asking() {
        let now = Instant::now();
        let request = exists(1, now + Duration::from_secs(5));
        match reroute(&request, redirect(RedirectKind::Moved, 42, 7001), now) {
            Reroute::Follow { node, asking: false, moved: Some(42) } => {
                assert_eq!(node, NodeAddr::new("10.0.0.2", 7001))
            }
            other => panic!("{other:?}"),
        }
        match reroute(&request, redirect(RedirectKind::Ask, 42, 7002), now) {
            Reroute::Follow { node, asking: true, moved: None } => assert_eq!(node, NodeAddr::new("10.0.0.2", 7002)),
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(reroute(&request, down(), now), Reroute::Park(err) if err.message() == "10.0.0.1:7000 is down")
        );
    }

    #[test]
    fn a_request_rerouted_too_often_or_past_its_deadline_gives_up_saying_why() {
        let now = Instant::now();
        let mut request = exists(1, now + Duration::from_secs(5));
        for _ in 0..MAX_REROUTES - 1 {
            request = request.rerouted();
        }
        assert!(matches!(reroute(&request, redirect(RedirectKind::Moved, 7, 7001), now), Reroute::Follow { .. }));
        let request = request.rerouted();
        match reroute(&request, redirect(RedirectKind::Moved, 7, 7001), now) {
            Reroute::GiveUp(outcome) => {
                let err = failed(&outcome);
                assert_eq!(err.kind(), ErrorKind::Server);
                assert!(err.message().contains("EXISTS gave up"), "{err}");
                assert!(
                    err.message().contains("slot 7 kept moving: last redirected to 10.0.0.2:7001 after 16 tries"),
                    "{err}"
                );
            }
            other => panic!("{other:?}"),
        }
        let late = exists(2, now);
        match reroute(&late, down(), now) {
            Reroute::GiveUp(outcome) => {
                let err = failed(&outcome);
                assert_eq!(err.kind(), ErrorKind::Connection, "the node's own failure, not a made-up one");
                assert!(
                    err.message().contains("EXISTS gave up") && err.message().contains("10.0.0.1:7000 is down"),
                    "{err}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_parked_request_waits_its_backoff_doubling_to_a_cap_and_never_past_its_deadline() {
        let start = Instant::now();
        let far = start + Duration::from_secs(60);
        let mut parked = Parked::default();
        let mut request = exists(1, far);
        let mut now = start;
        let mut waits = Vec::new();
        for _ in 0..7 {
            let reroutes = request.reroutes;
            parked.park(now, request, Error::new(ErrorKind::Connection, "down"));
            let at = parked.next_wake().unwrap();
            waits.push(at - now);
            assert!(parked.take_due(at - Duration::from_micros(1)).is_empty(), "not before its time");
            request = routed(parked.take_due(at).pop());
            assert_eq!(request.reroutes, reroutes + 1, "each park counts one reroute");
            assert!(parked.is_empty());
            now = at;
        }
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [20, 40, 80, 160, 320, 320, 320]);
        // Close to its deadline, it wakes at its deadline, and then fails saying what it waited for.
        let deadline = now + Duration::from_millis(5);
        parked.park(now, exists(2, deadline), Error::new(ErrorKind::Connection, "10.0.0.1:7000 is down"));
        assert_eq!(parked.next_wake(), Some(deadline));
        match parked.take_due(deadline).pop() {
            Some(Unparked::Expired(completion)) => {
                assert_eq!(completion.tag, 2);
                let err = failed(&completion.outcome);
                assert_eq!(err.kind(), ErrorKind::Timeout);
                assert!(err.message().contains("EXISTS timed out waiting for the cluster"), "{err}");
                assert!(err.message().contains("10.0.0.1:7000 is down"), "{err}");
            }
            Some(Unparked::Route(request)) => panic!("routed past its deadline: {}", request.tag),
            None => panic!("nothing was due at its deadline"),
        }
    }

    #[test]
    fn only_the_requests_whose_wait_is_over_are_released_the_rest_keep_waiting() {
        let now = Instant::now();
        let far = now + Duration::from_secs(60);
        let mut parked = Parked::default();
        parked.park_until(now + Duration::from_millis(30), exists(1, far), Error::new(ErrorKind::Connection, "a"));
        parked.park_until(now + Duration::from_millis(10), exists(2, far), Error::new(ErrorKind::Connection, "b"));
        parked.park_until(now + Duration::from_millis(20), exists(3, far), Error::new(ErrorKind::Connection, "c"));
        assert_eq!(parked.next_wake(), Some(now + Duration::from_millis(10)));
        let tags = |due: Vec<Unparked>| -> Vec<u64> { due.into_iter().map(|u| routed(Some(u)).tag).collect() };
        assert_eq!(tags(parked.take_due(now + Duration::from_millis(20))), [2, 3]);
        assert_eq!(parked.next_wake(), Some(now + Duration::from_millis(30)));
        let mut out = Vec::new();
        parked.fail_all(&Error::closed("the store"), &mut out);
        assert!(parked.is_empty() && parked.next_wake().is_none());
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].tag, failed(&out[0].outcome).kind()), (1, ErrorKind::Closed));
    }
}
