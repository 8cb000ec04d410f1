//! Answers: a reply to a question this machine asked is not held for
//! approval, even from another person's machine.
//!
//! ```text
//!  send ask to another machine ── AskRecord (the group commit, with the outbox)
//!  inbound reply, consent says hold (other person) ── passes?
//!     in_reply_to names an ask of ours ── sent to this machine ── from the
//!     mailbox it comes to ── within the ask's lifetime ── fewer than
//!     replies_per_ask passed ── delivered, audited reply_to_own, the count
//!     written with the inbox record (one transaction)
//!  retention ── forgets asks past their lifetime
//! ```
//!
//! Holding exists so that a stranger's mail waits for a person; an answer
//! to a question a mailbox put to a machine is mail that mailbox asked
//! for. Only what the receiver itself recorded decides (its own ask's id,
//! recipient and lifetime), never what the reply claims, so a machine that
//! was never asked gets nothing past the hold, and one that was gets a
//! few replies, not a channel.

use std::collections::HashMap;

use agentmesh_protocol::envelope::{Header, Kind};
use agentmesh_protocol::time::MAX_CLOCK_SKEW;
use agentmesh_protocol::{PeerId, Timestamp};

use crate::store::{AskRecord, MailStore, StoreError};

/// The asks whose records wait for the next flush, and the rule.
#[derive(Debug)]
pub(in crate::mail) struct Answers {
    /// Replies to one ask that pass unheld, at most.
    per_ask: u32,
    /// Asks recorded since the last flush. Bounded by the sends between
    /// two flushes (the group commit takes them every loop turn).
    pending: Vec<AskRecord>,
}

impl Answers {
    /// At most `per_ask` replies to each ask pass.
    pub(in crate::mail) fn new(per_ask: u32) -> Answers {
        Answers {
            per_ask,
            pending: vec![],
        }
    }

    /// An ask was sent to another machine: record it with the outbox.
    pub(in crate::mail) fn asked(&mut self, ask: AskRecord) {
        self.pending.push(ask);
    }

    /// The records to write with the next flush.
    pub(in crate::mail) fn take_writes(&mut self) -> Vec<AskRecord> {
        std::mem::take(&mut self.pending)
    }

    /// The ask record, counted once more, if the reply `header` from
    /// `peer` to `mailbox` answers an ask of this machine and may pass
    /// unheld at `now`; `counted` is how many replies to each ask already
    /// passed earlier in this batch.
    pub(in crate::mail) fn passes(
        &self,
        store: &dyn MailStore,
        peer: PeerId,
        header: &Header,
        mailbox: Option<&str>,
        now: Timestamp,
        counted: &HashMap<String, u32>,
    ) -> Result<Option<AskRecord>, StoreError> {
        if header.kind != Kind::Reply {
            return Ok(None);
        }
        let Some(asked) = header.in_reply_to else {
            return Ok(None);
        };
        self.answers(
            store,
            &peer.to_string(),
            &asked.to_string(),
            mailbox,
            now,
            counted,
        )
    }

    /// [`Answers::passes`] for a stored message (mail a pause held, which
    /// `resume` decides again).
    pub(in crate::mail) fn passes_record(
        &self,
        store: &dyn MailStore,
        r: &crate::store::InboxRecord,
        now: Timestamp,
    ) -> Result<Option<AskRecord>, StoreError> {
        match (&r.in_reply_to, r.kind.as_str()) {
            (Some(asked), "reply") => self.answers(
                store,
                &r.from_peer,
                asked,
                r.mailbox.as_deref(),
                now,
                &HashMap::new(),
            ),
            _ => Ok(None),
        }
    }

    fn answers(
        &self,
        store: &dyn MailStore,
        peer: &str,
        id: &str,
        mailbox: Option<&str>,
        now: Timestamp,
        counted: &HashMap<String, u32>,
    ) -> Result<Option<AskRecord>, StoreError> {
        let ask = match self.pending.iter().rev().find(|a| a.id == id) {
            Some(a) => Some(a.clone()),
            None => store.ask(id)?,
        };
        let Some(mut ask) = ask else {
            return Ok(None);
        };
        let in_time = now.as_unix_millis()
            <= Timestamp::from_unix_millis(ask.expires_at)
                .saturating_add(MAX_CLOCK_SKEW)
                .as_unix_millis();
        let so_far = ask.answers + counted.get(id).copied().unwrap_or(0);
        let fits = ask.to_peer == peer
            && ask.mailbox.as_deref() == mailbox
            && in_time
            && so_far < self.per_ask;
        if !fits {
            return Ok(None);
        }
        ask.answers = so_far + 1;
        Ok(Some(ask))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;
    use crate::store::SledStore;
    use agentmesh_protocol::envelope::MessageId;
    use agentmesh_protocol::team::TeamId;

    fn reply_to(ask: MessageId, from: PeerId, me: PeerId, kind: Kind) -> Header {
        Header {
            id: MessageId::random(&mut rand::rng()),
            team: TeamId([0; 32]),
            from,
            to: me,
            kind,
            in_reply_to: Some(ask),
            thread: ask,
            hop: 0,
            taint: false,
            sent_at: Timestamp::from_unix_millis(1_000),
            expires_at: Timestamp::from_unix_millis(2_000),
        }
    }

    #[test]
    fn a_few_replies_to_our_own_ask_pass_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        let (bob, eve, me) = (PeerId::random(), PeerId::random(), PeerId::random());
        let ask = MessageId::random(&mut rand::rng());
        let record = AskRecord {
            id: ask.to_string(),
            to_peer: bob.to_string(),
            mailbox: Some("api".into()),
            expires_at: 10_000,
            answers: 0,
        };
        let mut a = Answers::new(2);
        a.asked(record.clone());
        let now = Timestamp::from_unix_millis(5_000);
        let none = HashMap::new();
        let passes = |a: &Answers, h: &Header, m: Option<&str>, now, counted| {
            a.passes(&store, h.from, h, m, now, counted).unwrap()
        };
        // Not yet flushed: the pending record answers.
        let r = reply_to(ask, bob, me, Kind::Reply);
        assert_eq!(passes(&a, &r, Some("api"), now, &none).unwrap().answers, 1);
        store.put_asks(&a.take_writes()).unwrap();
        // From the machine asked, to the mailbox that asked, in time.
        assert!(passes(&a, &r, Some("api"), now, &none).is_some());
        // Another machine, another mailbox, a tell, too late: held.
        assert!(
            passes(
                &a,
                &reply_to(ask, eve, me, Kind::Reply),
                Some("api"),
                now,
                &none
            )
            .is_none()
        );
        assert!(passes(&a, &r, Some("web"), now, &none).is_none());
        assert!(passes(&a, &r, None, now, &none).is_none());
        assert!(
            passes(
                &a,
                &reply_to(ask, bob, me, Kind::Tell),
                Some("api"),
                now,
                &none
            )
            .is_none()
        );
        let late = Timestamp::from_unix_millis(10_000).saturating_add(MAX_CLOCK_SKEW);
        assert!(passes(&a, &r, Some("api"), late, &none).is_some());
        let later = Timestamp::from_unix_millis(late.as_unix_millis() + 1);
        assert!(passes(&a, &r, Some("api"), later, &none).is_none());
        // An id we never asked.
        let other = reply_to(MessageId::random(&mut rand::rng()), bob, me, Kind::Reply);
        assert!(passes(&a, &other, Some("api"), now, &none).is_none());
        // At most per_ask: counted in the store and in the batch.
        let one = HashMap::from([(ask.to_string(), 1)]);
        assert_eq!(passes(&a, &r, Some("api"), now, &one).unwrap().answers, 2);
        let two = HashMap::from([(ask.to_string(), 2)]);
        assert!(passes(&a, &r, Some("api"), now, &two).is_none());
        store
            .put_asks(&[AskRecord {
                answers: 2,
                ..record
            }])
            .unwrap();
        assert!(passes(&a, &r, Some("api"), now, &none).is_none());
    }
}
