//! Requests waiting for their answers, each with a deadline of the node's
//! own: request-response has its own timeout, but a request routed into a
//! connection that is already gone is never answered or failed by it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use libp2p::request_response::OutboundRequestId;

/// How long any request this machine sends (a mail batch, a sync step, a
/// join message) may wait for its answer before it counts as failed.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(20);

/// Requests waiting for their answers (one map per protocol: request ids
/// are numbered per protocol).
#[derive(Debug)]
pub struct Awaiting<T> {
    entries: HashMap<OutboundRequestId, (Instant, T)>,
}

impl<T> Default for Awaiting<T> {
    fn default() -> Self {
        Awaiting {
            entries: HashMap::new(),
        }
    }
}

impl<T> Awaiting<T> {
    /// Waits for the answer to `id`, sent at `now`.
    pub fn insert(&mut self, id: OutboundRequestId, value: T, now: Instant) {
        self.entries.insert(id, (now + ANSWER_DEADLINE, value));
    }

    /// The answer to `id` came (or its failure).
    pub fn remove(&mut self, id: &OutboundRequestId) -> Option<T> {
        self.entries.remove(id).map(|(_, v)| v)
    }

    /// Takes out every request whose deadline has passed.
    pub fn overdue(&mut self, now: Instant) -> Vec<T> {
        let ids: Vec<OutboundRequestId> = self
            .entries
            .iter()
            .filter(|(_, (deadline, _))| *deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        ids.iter().filter_map(|id| self.remove(id)).collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;
    use crate::wire::{SyncReply, SyncRequest};
    use agentmesh_protocol::PeerId;
    use libp2p::request_response;

    /// A request whose answer never comes is failed at its deadline: the
    /// node's own, since request-response never reports one routed into a
    /// connection it never saw close.
    #[test]
    fn requests_with_no_answer_are_overdue_at_their_deadline() {
        // Request ids come from a behaviour; make two.
        let mut b = request_response::Behaviour::with_codec(
            super::super::codec::Codec::<SyncRequest, SyncReply>::new(crate::wire::SYNC_LIMITS),
            [(
                super::super::SYNC_PROTOCOL,
                request_response::ProtocolSupport::Full,
            )],
            request_response::Config::default(),
        );
        let peer = PeerId::random();
        let req = || SyncRequest::Fetch {
            team: vec![],
            hashes: vec![],
        };
        let ids = [b.send_request(&peer, req()), b.send_request(&peer, req())];
        let now = Instant::now();
        let mut waiting: Awaiting<&str> = Awaiting::default();
        waiting.insert(ids[0], "first", now);
        waiting.insert(ids[1], "second", now);
        assert_eq!(waiting.remove(&ids[1]), Some("second"), "answered");
        assert!(waiting.overdue(now).is_empty(), "not yet");
        assert_eq!(waiting.overdue(now + ANSWER_DEADLINE), vec!["first"]);
        assert!(
            waiting.overdue(now + ANSWER_DEADLINE).is_empty(),
            "failed once"
        );
    }
}
