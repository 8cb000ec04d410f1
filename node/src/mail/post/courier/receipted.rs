//! What the courier learns from receipts: the states of mail it sent,
//! from the machine it went to, by any path (direct, or through a
//! carrier).

use agentmesh_protocol::PeerId;

use super::Courier;
use crate::mail::Ctx;
use crate::store::{MessageState, OutboxRecord, OutboxStatus, StateRecord};

impl Courier {
    /// A receipt from `peer` for the message `id` this machine sent to it
    /// (from any other machine it says nothing): its states, each noted
    /// once. Mail still on its way that a receipt says arrived is done.
    pub(in crate::mail) fn receipt(
        &mut self,
        peer: PeerId,
        id: &str,
        states: Vec<StateRecord>,
        ctx: &Ctx<'_>,
    ) {
        let mine = |r: &OutboxRecord| {
            r.to_peer == peer.to_string() && matches!(r.kind.as_str(), "tell" | "ask" | "reply")
        };
        // The newest copy first: a write not flushed yet (an earlier
        // receipt of the same batch) is newer than memory's or the store's.
        let held = (self.writes.iter().rev().find(|r| r.id == id))
            .or_else(|| self.outbox.get(id))
            .or_else(|| self.settling.get(id))
            .cloned();
        let mut r = match held.map_or_else(|| ctx.store.outbox_get(id), |r| Ok(Some(r))) {
            Ok(Some(r)) if mine(&r) => r,
            Ok(_) => return,
            Err(e) => {
                return tracing::warn!(error = %e, "cannot read a sent message for its receipt");
            }
        };
        if !crate::mail::post::receipts::apply(&mut r, states) {
            return;
        }
        // Given up on (expired here), yet it arrived after all: the
        // failure's reason is no longer what happened (a rejection's is).
        if r.status == OutboxStatus::Failed
            && r.states.last().is_some_and(|s| {
                !matches!(
                    s.state,
                    MessageState::Failed | MessageState::Refused | MessageState::Rejected
                )
            })
        {
            r.reason = None;
        }
        if matches!(r.status, OutboxStatus::Queued | OutboxStatus::Sent) {
            let refused = r.states.iter().find(|s| s.state == MessageState::Refused);
            r.reason = refused.map(|s| s.reason.clone().unwrap_or_default());
            r.status = if refused.is_some() {
                OutboxStatus::Failed
            } else {
                OutboxStatus::Delivered
            };
            self.outbox.remove(id);
            // One on its way leaves its queue with the batch's answer.
            if let Some(q) = self.queues.get_mut(&peer)
                && !q.sending.contains(id)
            {
                q.pending.retain(|p| p != id);
            }
        }
        r.envelope = vec![];
        self.writes.push(r);
    }
}
