//! Sends that wait for their first answer (`send` with
//! `wait_first_answer_ms`): answered when the recipient first answers,
//! when its machine is found offline, or when the wait ends, whichever
//! comes first. One round trip for what was a send and a poll.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use agentmesh_protocol::PeerId;
use tokio::sync::oneshot;

use crate::api::{Reply, SentView};

/// The longest a send waits for its first answer.
pub(in crate::mail) const MAX_WAIT: Duration = Duration::from_secs(10);

/// Sends waiting at once, at most: past it a send is answered once
/// durable, with no first answer (as without the wait).
pub(in crate::mail) const MAX_WAITING: usize = 1024;

/// A send waiting for its first answer.
#[derive(Debug)]
pub(in crate::mail) struct Waiter {
    /// Where its answer goes.
    pub(in crate::mail) reply: oneshot::Sender<Reply>,
    /// What it answers, without the first answer yet.
    pub(in crate::mail) sent: SentView,
    /// The sending mailbox (`None`: the owner's), whose state the answer
    /// carries.
    pub(in crate::mail) mailbox: Option<String>,
    /// When it stops waiting.
    pub(in crate::mail) deadline: Instant,
    /// The recipient's machine (read once, not at every check).
    pub(in crate::mail) peer: Option<PeerId>,
}

/// The sends waiting, by message id.
#[derive(Debug, Default)]
pub(in crate::mail) struct FirstAnswers {
    waiting: HashMap<String, Waiter>,
}

impl FirstAnswers {
    /// Waits for `w`'s first answer; gives it back when too many wait
    /// already (its send is answered now, without one).
    pub(in crate::mail) fn wait(&mut self, w: Waiter) -> Option<Waiter> {
        if self.waiting.len() >= MAX_WAITING {
            return Some(w);
        }
        self.waiting.insert(w.sent.id.clone(), w);
        None
    }

    /// Every waiter, taken out (the daemon is stopping).
    pub(in crate::mail) fn drain(&mut self) -> Vec<Waiter> {
        self.waiting.drain().map(|(_, w)| w).collect()
    }

    /// The waiters.
    pub(in crate::mail) fn waiters(&self) -> impl Iterator<Item = &Waiter> {
        self.waiting.values()
    }

    /// Whether none waits.
    pub(in crate::mail) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// When the next wait ends, if any waits.
    pub(in crate::mail) fn next_deadline(&self) -> Option<Instant> {
        self.waiting.values().map(|w| w.deadline).min()
    }

    /// The waiters whose wait is over at `now`: their message was
    /// `answered` (its recipient answered, or its machine is offline), or
    /// their deadline came. Taken out.
    pub(in crate::mail) fn over(
        &mut self,
        now: Instant,
        answered: impl Fn(&str) -> bool,
    ) -> Vec<Waiter> {
        let done: Vec<String> = self
            .waiting
            .iter()
            .filter(|(id, w)| w.deadline <= now || answered(id))
            .map(|(id, _)| id.clone())
            .collect();
        done.into_iter()
            .filter_map(|id| self.waiting.remove(&id))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(id: &str) -> SentView {
        SentView {
            id: id.into(),
            to: "a@b".into(),
            local: false,
            held: false,
            first: None,
            mailbox_state: None,
        }
    }

    fn waiter(id: &str, deadline: Instant) -> (Waiter, oneshot::Receiver<Reply>) {
        let (reply, rx) = oneshot::channel();
        let w = Waiter {
            reply,
            sent: sent(id),
            mailbox: None,
            deadline,
            peer: None,
        };
        (w, rx)
    }

    #[test]
    fn a_send_waits_until_answered_or_its_deadline() {
        let t0 = Instant::now();
        let mut f = FirstAnswers::default();
        for (id, s) in [("m1", 1), ("m2", 1), ("m3", 5)] {
            assert!(f.wait(waiter(id, t0 + Duration::from_secs(s)).0).is_none());
        }
        assert_eq!(f.next_deadline(), Some(t0 + Duration::from_secs(1)));
        let answered = |id: &str| id == "m2";
        // Before any deadline: only the answered one.
        let over: Vec<String> = f
            .over(t0, answered)
            .into_iter()
            .map(|w| w.sent.id)
            .collect();
        assert_eq!(over, ["m2"]);
        // At the first deadline, m1, unanswered; not m3, whose deadline
        // is later.
        let over: Vec<String> = f
            .over(t0 + Duration::from_secs(1), answered)
            .into_iter()
            .map(|w| w.sent.id)
            .collect();
        assert_eq!(over, ["m1"]);
        assert_eq!(
            f.waiters().map(|w| w.sent.id.as_str()).collect::<Vec<_>>(),
            ["m3"]
        );
        assert_eq!(f.next_deadline(), Some(t0 + Duration::from_secs(5)));
        assert_eq!(f.over(t0 + Duration::from_secs(5), answered).len(), 1);
        assert!(f.is_empty() && f.next_deadline().is_none());
    }

    #[test]
    fn past_the_bound_a_send_is_given_back() {
        let t = Instant::now() + MAX_WAIT;
        let mut f = FirstAnswers::default();
        for i in 0..MAX_WAITING {
            assert!(f.wait(waiter(&format!("m{i}"), t).0).is_none());
        }
        let back = f.wait(waiter("one-more", t).0).expect("given back");
        assert_eq!(back.sent.id, "one-more");
        assert_eq!(f.waiters().count(), MAX_WAITING);
    }
}
