//! The broadcasts a machine received and has yet to judge: one queue per
//! sending machine, judged in turns.
//!
//! ```text
//!  stored ── waiting[its sending machine] (oldest first)
//!  next ── the sender whose turn it is: its oldest; at the next turn,
//!          that sender goes to the back of the turns if more of its
//!          wait (round robin, so one member's many never hold another's
//!          one back)
//! ```

use std::collections::{BTreeMap, VecDeque};

use crate::judge::JudgeWith;
use crate::store::InboxRecord;

/// Broadcasts stored and waiting for their judgment, at most; past it an
/// inbound broadcast is answered busy (the sender keeps it and tries
/// again later).
pub const MAX_WAITING_BROADCASTS: usize = 1024;

/// Broadcasts one sending machine may have waiting for their judgment
/// (the one being judged included), at most; past it its next is
/// answered busy, as past [`MAX_WAITING_BROADCASTS`]: one member can't
/// fill the queue everyone's broadcasts wait in.
pub const MAX_WAITING_PER_SENDER: usize = 32;

/// The broadcasts waiting for their judgment, and the one being judged.
#[derive(Debug)]
pub(in crate::mail) struct Queue {
    pub(super) judge: JudgeWith,
    /// By sending machine (its PeerId), oldest first.
    waiting: BTreeMap<String, VecDeque<InboxRecord>>,
    /// The senders with broadcasts waiting, whose turn is first first
    /// (but the one whose turn was last).
    turns: VecDeque<String>,
    /// The sender whose turn was last: back in `turns` at the next turn.
    rested: Option<String>,
    /// Broadcasts taken from the network and not yet queued (their flush
    /// is pending), by sending machine: counted as waiting, so batches
    /// that arrive meanwhile see the room they really have.
    reserved: BTreeMap<String, usize>,
    /// The sender of the broadcast being judged, while one is.
    pub(super) judging: Option<String>,
    /// Agent calls spent today (`[bus] judge = "agent"`).
    pub(super) agent_calls: super::AgentCalls,
}

impl Queue {
    /// A bus judging with `judge`; `stored` were accepted before a
    /// restart and not judged.
    pub(in crate::mail) fn new(judge: JudgeWith, stored: Vec<InboxRecord>) -> Queue {
        let mut bus = Queue {
            judge,
            waiting: BTreeMap::new(),
            turns: VecDeque::new(),
            rested: None,
            reserved: BTreeMap::new(),
            judging: None,
            agent_calls: super::AgentCalls::default(),
        };
        bus.enqueue(stored);
        bus
    }

    /// How many wait, of all senders.
    fn queued(&self) -> usize {
        self.waiting.values().map(VecDeque::len).sum()
    }

    /// How many more broadcasts may wait, of all senders.
    pub(in crate::mail) fn room(&self) -> usize {
        let reserved: usize = self.reserved.values().sum();
        MAX_WAITING_BROADCASTS
            .saturating_sub(self.queued() + reserved + usize::from(self.judging.is_some()))
    }

    /// How many more broadcasts from the machine `sender` may wait.
    pub(in crate::mail) fn room_for(&self, sender: &str) -> usize {
        let theirs = self.waiting.get(sender).map_or(0, VecDeque::len)
            + self.reserved.get(sender).copied().unwrap_or(0)
            + usize::from(self.judging.as_deref() == Some(sender));
        MAX_WAITING_PER_SENDER
            .saturating_sub(theirs)
            .min(self.room())
    }

    /// `records` were taken from the network: they count as waiting
    /// until [`Queue::arrived`] queues them, once their flush is done.
    pub(in crate::mail) fn reserve(&mut self, records: &[InboxRecord]) {
        for r in records {
            *self.reserved.entry(r.from_peer.clone()).or_default() += 1;
        }
    }

    /// Reserved `records` are durable: queued to be judged.
    pub(in crate::mail) fn arrived(&mut self, records: Vec<InboxRecord>) {
        for r in &records {
            if let Some(n) = self.reserved.get_mut(&r.from_peer) {
                *n -= 1;
                if *n == 0 {
                    self.reserved.remove(&r.from_peer);
                }
            }
        }
        self.enqueue(records);
    }

    /// Durable broadcasts to judge.
    pub(in crate::mail) fn enqueue(&mut self, records: impl IntoIterator<Item = InboxRecord>) {
        for r in records {
            let sender = r.from_peer.clone();
            let queue = self.waiting.entry(sender.clone()).or_default();
            let had_none = queue.is_empty();
            queue.push_back(r);
            // A sender whose turn just was takes its place again at the
            // next turn, behind those that arrived meanwhile.
            if had_none && self.rested.as_ref() != Some(&sender) {
                self.turns.push_back(sender);
            }
        }
    }

    /// The next broadcast to judge: the oldest of the sender whose turn
    /// it is. That sender goes to the back at the next turn, behind
    /// every sender waiting then (those whose broadcasts arrived while
    /// its own was judged included).
    pub(super) fn take_next(&mut self) -> Option<InboxRecord> {
        if let Some(prev) = self.rested.take()
            && self.waiting.contains_key(&prev)
        {
            self.turns.push_back(prev);
        }
        let sender = self.turns.pop_front()?;
        let queue = self.waiting.get_mut(&sender)?;
        let next = queue.pop_front();
        if queue.is_empty() {
            self.waiting.remove(&sender);
        }
        self.rested = Some(sender);
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(peer: &str, n: u64) -> InboxRecord {
        InboxRecord {
            from_peer: peer.into(),
            id: format!("{peer}{n}"),
            ..crate::store::testing::inbox_record(n, None, false, false)
        }
    }

    #[test]
    fn senders_take_turns_and_each_has_its_own_bound() {
        let stored = (1..=10).map(|n| from("busy", n)).collect();
        let mut bus = Queue::new(JudgeWith::Builtin, stored);
        assert_eq!(bus.room_for("busy"), MAX_WAITING_PER_SENDER - 10);
        assert_eq!(bus.room_for("honest"), MAX_WAITING_PER_SENDER);
        // The busy one's first is being judged when the honest one's
        // arrives: the honest one's is next, before the busy one's second.
        let first = bus.take_next().unwrap();
        bus.judging = Some(first.from_peer.clone());
        assert_eq!(bus.room_for("busy"), MAX_WAITING_PER_SENDER - 10);
        bus.enqueue([from("honest", 1)]);
        bus.judging = None;
        let order: Vec<String> = std::iter::from_fn(|| bus.take_next())
            .map(|r| r.id)
            .collect();
        assert_eq!(order[0], "honest1", "{order:?}");
        assert_eq!(order[1], "busy2", "{order:?}");
        assert_eq!(order.len(), 10);
        assert_eq!(bus.room(), MAX_WAITING_BROADCASTS);
        // Two senders with many each alternate.
        bus.enqueue((1..=3).map(|n| from("a", n)));
        bus.enqueue((1..=3).map(|n| from("b", n)));
        let order: Vec<String> = std::iter::from_fn(|| bus.take_next())
            .map(|r| r.id)
            .collect();
        assert_eq!(order, ["a1", "b1", "a2", "b2", "a3", "b3"]);
        // Past its bound, a sender has no room while others still do.
        bus.enqueue((1..=MAX_WAITING_PER_SENDER as u64).map(|n| from("a", n)));
        assert_eq!(bus.room_for("a"), 0);
        assert_eq!(bus.room_for("b"), MAX_WAITING_PER_SENDER);
        // Taken from the network, not yet flushed: counted already, so a
        // batch arriving meanwhile sees the room there really is.
        let taken: Vec<InboxRecord> = (1..=30).map(|n| from("b", n)).collect();
        bus.reserve(&taken);
        assert_eq!(bus.room_for("b"), MAX_WAITING_PER_SENDER - 30);
        assert_eq!(
            bus.room(),
            MAX_WAITING_BROADCASTS - MAX_WAITING_PER_SENDER - 30
        );
        bus.arrived(taken);
        assert_eq!(bus.room_for("b"), MAX_WAITING_PER_SENDER - 30);
        assert!(bus.reserved.is_empty());
        assert_eq!(bus.queued(), MAX_WAITING_PER_SENDER + 30);
    }
}
