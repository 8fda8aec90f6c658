//! Redis Cluster: requests a node redirects (`-MOVED`, `-ASK`) or cannot serve now go back to the
//! worker ([`ConnCore::take_handoffs`]), which routes them again.

use super::*;

impl ConnCore {
    /// Requests handed back since the last call, with why.
    pub fn take_handoffs(&mut self) -> Vec<(Request, Handoff)> {
        std::mem::take(&mut self.handoffs)
    }

    /// Leaves `request` to the worker (cluster mode): it no longer counts here.
    pub(super) fn hand_off(&mut self, request: Request, why: Handoff) {
        self.outstanding_cost -= request.pipeline_cost();
        self.outstanding_requests -= 1;
        self.handoffs.push((request, why));
    }

    /// A request this connection cannot complete (its node is unreachable): handed back in
    /// cluster mode when it can go elsewhere in time, failed otherwise.
    pub(super) fn finish_or_hand_off(&mut self, now: Instant, request: Request, err: Error, out: &mut Vec<Completion>) {
        let movable = matches!(request.kind, Kind::User(op) if op.is_idempotent()) && request.deadline > now;
        if self.hands_off && movable {
            self.hand_off(request, Handoff::Retry(err));
        } else {
            self.finish(request, Outcome::Failed(err), out);
        }
    }

    /// What a cluster node's error reply asks of a request: another node, or another try.
    pub(super) fn handoff_for(&self, text: &[u8]) -> Option<Handoff> {
        let asked = match &self.options.endpoint {
            Endpoint::Tcp { host, port } => NodeAddr::new(host.clone(), *port),
            Endpoint::Unix { .. } => return None,
        };
        match Redirect::parse(text, &asked) {
            Ok(Some(redirect)) => Some(Handoff::Redirect(redirect)),
            // READONLY: a primary demoted by a Sentinel failover; the write was not applied.
            // LOADING or MASTERDOWN: a replica in a full resync or cut off from its primary;
            // another try goes to the primary (reads from replicas), or to the node once ready.
            Ok(None)
                if crate::cluster::transient(text).is_some()
                    || text.starts_with(b"MASTERDOWN")
                    || text.starts_with(b"READONLY")
                    || text.starts_with(b"LOADING") =>
            {
                Some(Handoff::Retry(Error::server(text).context(&self.options.endpoint)))
            }
            Ok(None) => None,
            Err(why) => Some(Handoff::Retry(Error::new(ErrorKind::Protocol, why).context(&self.options.endpoint))),
        }
    }
}
