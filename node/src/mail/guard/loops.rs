//! Loop safety: the hop every message carries, and the per-pair limit on
//! messages that peers caused.
//!
//! ```text
//!  a mailbox handling no peer mail (a person, an agent in a turn its
//!  person started) ── hop 0
//!  mailbox receives a peer message of hop h ── it is handling h:
//!      its next new message carries h + 1, until its person speaks again
//!      (hop_reset: the UserPromptSubmit hook, `agentmesh send` typed at a
//!      terminal), or `hop_reset` passes with no peer mail
//!  reply ── only to mail this mailbox received, only to its sender;
//!      hop: the higher of the message it answers and what the mailbox
//!      is handling, never refused for its hop
//!  hop > max_hop ── send refused (hop_limit)          audited
//!  hop >= 1 (replies too) ── at most pair_per_hour per (from, to)
//!      ── refused (rate_limited), audited
//!  replies from one mailbox in one thread ── at most max_turns until its
//!      person speaks ── refused (turn_limit), audited
//! ```
//!
//! With the default `max_hop` of 2 ("past 2, refused"): a person asks A
//! (hop 0), A asks B (hop 1), B asks C (hop 2), C can ask no one (hop 3).
//! The pair limit never applies at hop 0, so a person, an agent its person
//! started, or a benchmark is never throttled by it; it applies where loops
//! happen. Replies can loop too: two sessions answering each other stay
//! at hop 0 for ever, which is what the turn limit is for (6 replies per
//! mailbox per thread by default; a person speaking resets it).
//!
//! The daemon decides by the sending mailbox's state only, never by who a
//! client claims to be (the symmetry rule): "the person spoke" is a
//! client's `hop_reset`, which the CLI sends only when it runs at a
//! terminal, as admission is done only there. The owner's mailbox
//! (`@MACHINE`) is its person's and always sends hop 0: person-to-person
//! mail is never limited, and an agent that sends from it speaks as its
//! person (a loop through it is still bounded by the other side's limits).
//!
//! What a mailbox is handling lives in memory: a restart forgets it, as
//! the person's next prompt would.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use agentmesh_protocol::Timestamp;

use crate::limits::RateWindow;

use crate::api::ApiError;
use crate::codes::ErrorCode;
pub use crate::config::LoopRules;
use crate::mail::guard::taint::Taints;

/// Mailboxes whose hop is remembered at once; past it, the one that heard
/// from a peer longest ago is forgotten (it falls back to hop 0 sooner).
const MAX_HANDLING: usize = 4096;
/// (sender, recipient) pairs whose hop ≥ 1 sends are counted at once;
/// past it the pair counted longest ago is forgotten.
const MAX_PAIRS: usize = 4096;
/// The window of the pair limit.
const PAIR_WINDOW: Duration = Duration::from_secs(3600);
/// (mailbox, thread) pairs whose replies are counted at once; past it the
/// one replied in longest ago is forgotten (as MAX_HANDLING: more threads
/// at once than any person follows).
const MAX_THREADS: usize = 4096;

/// What one mailbox is handling.
#[derive(Debug, Clone, Copy)]
struct Handling {
    /// The highest hop of peer mail it received since its person spoke.
    hop: u8,
    /// When the last peer mail reached it.
    last: Timestamp,
    /// What it sent since it began handling peer mail (the per-turn quota).
    sent: Sent,
}

/// New messages a mailbox handling peer mail sent (replies aside).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Sent {
    asks: u32,
    tells: u32,
    broadcasts: u32,
}

/// What the per-turn quota counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::mail) enum Sending {
    /// A new ask.
    Ask,
    /// A new tell.
    Tell,
    /// A broadcast.
    Broadcast,
}

impl Sending {
    fn plural(self) -> &'static str {
        match self {
            Sending::Ask => "asks",
            Sending::Tell => "tells",
            Sending::Broadcast => "broadcasts",
        }
    }
}

/// Why a send is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::mail) enum LoopRefusal {
    /// Its hop reached the limit.
    Hop {
        /// The hop it would carry.
        hop: u8,
        /// The limit.
        max: u8,
    },
    /// The pair sent its allowance of hop ≥ 1 messages this hour.
    Pair {
        /// The allowance.
        per_hour: u32,
        /// Seconds until the oldest counted send leaves the window.
        retry_in_secs: u64,
    },
    /// The mailbox replied in this thread as often as it may until its
    /// person speaks.
    Turns {
        /// The allowance.
        max: u32,
    },
    /// The mailbox, handling peer mail, sent its allowance of new
    /// messages of this kind until its person speaks.
    Quota {
        /// What it would send.
        what: Sending,
        /// The allowance.
        max: u32,
    },
}

impl LoopRefusal {
    /// What the client is told; `from` and `to` name the pair.
    pub(in crate::mail) fn error(self, from: &str, to: &str) -> ApiError {
        match self {
            LoopRefusal::Hop { hop, max } => ApiError::new(
                ErrorCode::HopLimit,
                format!(
                    "not sent: this would be hop {hop}, past the limit of {max}. {from} is handling a message that peers passed along {} already, so sending on could start a loop; answer the message you got with a reply (replies are always allowed), or wait for your person to speak (their next prompt resets the hop)",
                    match hop.saturating_sub(1) {
                        1 => "once".to_owned(),
                        n => format!("{n} times"),
                    }
                ),
            ),
            LoopRefusal::Pair {
                per_hour,
                retry_in_secs,
            } => ApiError::new(
                ErrorCode::RateLimited,
                format!(
                    "not sent: {from} already sent {} caused by peer mail to {to} in the last hour (the loop limit); try again in {}, or let your person decide",
                    agentmesh_protocol::time::count(per_hour.into(), "message"),
                    agentmesh_protocol::time::human_duration(Duration::from_secs(retry_in_secs))
                ),
            ),
            LoopRefusal::Turns { max } => ApiError::new(
                ErrorCode::TurnLimit,
                format!(
                    "not sent: {from} already replied {} in this thread since its person last spoke (the loop limit: two agents answering each other would never stop); tell your person what was said and let them decide, their next prompt resets it",
                    agentmesh_protocol::time::count_as(max.into(), "time", "times")
                ),
            ),
            LoopRefusal::Quota { what, max } => ApiError::new(
                ErrorCode::TurnQuota,
                format!(
                    "not sent: {from} already sent {max} {} since it began handling peer mail (the per-turn quota: {}); it resets when your person next speaks (their next prompt) or with the next run. Replies to the mail you are handling are not counted: answer with a reply, or tell your person what you wanted to send",
                    what.plural(),
                    "a session woken by peers can't turn one message into many"
                ),
            ),
        }
    }

    /// The audit entry's detail.
    pub(in crate::mail) fn detail(self) -> String {
        match self {
            LoopRefusal::Hop { hop, max } => {
                format!("hop_limit: hop {hop} refused (past the limit of {max})")
            }
            LoopRefusal::Pair { per_hour, .. } => {
                format!("rate_limited: more than {per_hour} messages of hop >= 1 in an hour")
            }
            LoopRefusal::Turns { max } => {
                format!("turn_limit: more than {max} replies in one thread without its person")
            }
            LoopRefusal::Quota { what, max } => format!(
                "turn_quota: more than {max} {} while handling peer mail",
                what.plural()
            ),
        }
    }
}

/// The hops mailboxes are handling, and the pair counts.
#[derive(Debug)]
pub(in crate::mail) struct Loops {
    rules: LoopRules,
    /// By mailbox (`None`: the owner's).
    handling: HashMap<Option<String>, Handling>,
    /// (sender address, recipient address) → when its counted sends were
    /// made, oldest first (at most `pair_per_hour`).
    pairs: HashMap<(String, String), VecDeque<Timestamp>>,
    /// (mailbox, thread) → replies sent since its person spoke, and when
    /// the last was.
    turns: HashMap<(String, String), (u32, Timestamp)>,
    /// Refusals audited, per (sender, recipient, code), per minute: an
    /// agent retrying a refused send can't turn each try into a disk write.
    audited: RateWindow<(String, String, ErrorCode)>,
    /// Which mailboxes are tainted (kept in the store, unlike the rest).
    pub(in crate::mail) taints: Taints,
}

impl Loops {
    /// Nothing handled yet; the stored taints.
    pub(in crate::mail) fn new(rules: LoopRules, taints: Taints) -> Loops {
        Loops {
            rules,
            handling: HashMap::new(),
            pairs: HashMap::new(),
            turns: HashMap::new(),
            audited: RateWindow::new(Duration::from_secs(60), 1, MAX_PAIRS),
            taints,
        }
    }

    /// Whether `mailbox`, handling peer mail at `now`, may send one more
    /// new message of `what` (the owner's mailbox never handles any).
    pub(in crate::mail) fn check_quota(
        &self,
        mailbox: Option<&str>,
        what: Sending,
        now: Timestamp,
    ) -> Result<(), LoopRefusal> {
        if !self.is_handling(mailbox, now) {
            return Ok(());
        }
        let Some(h) = self.handling.get(&mailbox.map(str::to_owned)) else {
            return Ok(());
        };
        let q = self.rules.quota;
        let (sent, max) = match what {
            Sending::Ask => (h.sent.asks, q.asks),
            Sending::Tell => (h.sent.tells, q.tells),
            Sending::Broadcast => (h.sent.broadcasts, q.broadcasts),
        };
        if sent >= max {
            return Err(LoopRefusal::Quota { what, max });
        }
        Ok(())
    }

    /// Counts a new message of `what` that `mailbox` sent at `now`, if it
    /// is handling peer mail.
    pub(in crate::mail) fn count_sent(
        &mut self,
        mailbox: Option<&str>,
        what: Sending,
        now: Timestamp,
    ) {
        if !self.is_handling(mailbox, now) {
            return;
        }
        if let Some(h) = self.handling.get_mut(&mailbox.map(str::to_owned)) {
            let n = match what {
                Sending::Ask => &mut h.sent.asks,
                Sending::Tell => &mut h.sent.tells,
                Sending::Broadcast => &mut h.sent.broadcasts,
            };
            *n = n.saturating_add(1);
        }
    }

    /// The hop `mailbox` is handling at `now` (0: none, or it expired).
    pub(in crate::mail) fn handling(&self, mailbox: Option<&str>, now: Timestamp) -> u8 {
        match self.handling.get(&mailbox.map(str::to_owned)) {
            Some(h) if now.saturating_sub(self.rules.hop_reset) < h.last => h.hop,
            _ => 0,
        }
    }

    /// Whether `mailbox` is handling peer mail at `now`.
    pub(in crate::mail) fn is_handling(&self, mailbox: Option<&str>, now: Timestamp) -> bool {
        self.handling
            .get(&mailbox.map(str::to_owned))
            .is_some_and(|h| now.saturating_sub(self.rules.hop_reset) < h.last)
    }

    /// The hop of a new message from `mailbox`, or why it may not be
    /// sent; `answers` is the hop of the message a reply answers. A reply
    /// carries at least the hop its mailbox is handling (a reply to a
    /// reply is handling peer mail too), and is never refused for it.
    pub(in crate::mail) fn hop_for(
        &self,
        mailbox: Option<&str>,
        answers: Option<u8>,
        now: Timestamp,
    ) -> Result<u8, LoopRefusal> {
        if let Some(hop) = answers {
            return Ok(hop.max(self.handling(mailbox, now)));
        }
        if !self.is_handling(mailbox, now) {
            return Ok(0);
        }
        let hop = self.handling(mailbox, now).saturating_add(1);
        if hop > self.rules.max_hop {
            return Err(LoopRefusal::Hop {
                hop,
                max: self.rules.max_hop,
            });
        }
        Ok(hop)
    }

    /// Counts a send of `hop` from `from` to `to` at `now`, unless the
    /// pair is past its allowance (hop 0 is never counted or refused).
    pub(in crate::mail) fn count_pair(
        &mut self,
        from: &str,
        to: &str,
        hop: u8,
        now: Timestamp,
    ) -> Result<(), LoopRefusal> {
        if hop == 0 {
            return Ok(());
        }
        let per_hour = self.rules.pair_per_hour;
        let since = now.saturating_sub(PAIR_WINDOW);
        let key = (from.to_owned(), to.to_owned());
        if !self.pairs.contains_key(&key) && self.pairs.len() >= MAX_PAIRS {
            self.forget_oldest_pair();
        }
        let sent = self.pairs.entry(key).or_default();
        while sent.front().is_some_and(|t| *t <= since) {
            sent.pop_front();
        }
        if sent.len() >= per_hour as usize {
            let oldest = sent.front().copied().unwrap_or(now);
            let free_at = oldest.saturating_add(PAIR_WINDOW);
            let retry_in_secs = free_at
                .as_unix_millis()
                .saturating_sub(now.as_unix_millis())
                .div_ceil(1000);
            return Err(LoopRefusal::Pair {
                per_hour,
                retry_in_secs,
            });
        }
        sent.push_back(now);
        Ok(())
    }

    /// Whether `mailbox` may send one more reply in `thread` (the owner's
    /// mailbox, its person's, always may).
    pub(in crate::mail) fn check_turn(
        &self,
        mailbox: Option<&str>,
        thread: &str,
    ) -> Result<(), LoopRefusal> {
        let Some(m) = mailbox else {
            return Ok(());
        };
        let max = self.rules.max_turns;
        match self.turns.get(&(m.to_owned(), thread.to_owned())) {
            Some((n, _)) if *n >= max => Err(LoopRefusal::Turns { max }),
            _ => Ok(()),
        }
    }

    /// Counts a reply `mailbox` sent in `thread` at `now`.
    pub(in crate::mail) fn count_turn(
        &mut self,
        mailbox: Option<&str>,
        thread: &str,
        now: Timestamp,
    ) {
        let Some(m) = mailbox else {
            return;
        };
        let key = (m.to_owned(), thread.to_owned());
        if !self.turns.contains_key(&key) && self.turns.len() >= MAX_THREADS {
            let oldest = self
                .turns
                .iter()
                .min_by_key(|(_, (_, last))| *last)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.turns.remove(&k);
            }
        }
        let entry = self.turns.entry(key).or_insert((0, now));
        entry.0 = entry.0.saturating_add(1);
        entry.1 = now;
    }

    fn forget_oldest_pair(&mut self) {
        let oldest = self
            .pairs
            .iter()
            .min_by_key(|(_, sent)| sent.back().copied())
            .map(|(k, _)| k.clone());
        if let Some(k) = oldest {
            self.pairs.remove(&k);
        }
    }

    /// `mailbox` received (or was shown) a peer message of `hop` at `now`.
    /// The owner's mailbox (`None`, `@MACHINE`) is its person's: a person
    /// reading mail is not an agent passing it on, so it never handles a
    /// hop and what it sends is hop 0. Agents' sessions have mailboxes of
    /// their own (their folders').
    pub(in crate::mail) fn received(&mut self, mailbox: Option<&str>, hop: u8, now: Timestamp) {
        if mailbox.is_none() {
            return;
        }
        let current = self.handling(mailbox, now);
        // A turn that fell back (no peer mail for `hop_reset`) begins anew.
        let sent = if self.is_handling(mailbox, now) {
            self.handling[&mailbox.map(str::to_owned)].sent
        } else {
            Sent::default()
        };
        let key = mailbox.map(str::to_owned);
        if !self.handling.contains_key(&key) && self.handling.len() >= MAX_HANDLING {
            let oldest = self
                .handling
                .iter()
                .min_by_key(|(_, h)| h.last)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.handling.remove(&k);
            }
        }
        self.handling.insert(
            key,
            Handling {
                hop: current.max(hop),
                last: now,
                sent,
            },
        );
    }

    /// Whether a refusal of `code` from `from` to `to` at `now` is audited:
    /// the first of its kind per minute.
    pub(in crate::mail) fn audit_refusal(
        &mut self,
        from: &str,
        to: &str,
        code: ErrorCode,
        now: Timestamp,
    ) -> bool {
        let key = (from.to_owned(), to.to_owned(), code);
        let now = Duration::from_millis(now.as_unix_millis());
        let pass = self.audited.check(&key, now);
        // Ended windows are forgotten; their counts are not reported.
        let _ = self.audited.closed(now);
        pass
    }

    /// A wake run of `mailbox` starts: its quota counts afresh (the hop it
    /// is handling stays: a run is no person speaking).
    pub(in crate::mail) fn new_turn(&mut self, mailbox: Option<&str>) {
        if let Some(h) = self.handling.get_mut(&mailbox.map(str::to_owned)) {
            h.sent = Sent::default();
        }
    }

    /// `mailbox`'s person spoke: what it sends next is hop 0 again, and
    /// its replies are counted afresh.
    pub(in crate::mail) fn reset(&mut self, mailbox: Option<&str>) {
        self.handling.remove(&mailbox.map(str::to_owned));
        if let Some(m) = mailbox {
            self.turns.retain(|(mailbox, _), _| mailbox != m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Timestamp {
        Timestamp::from_unix_millis(1_800_000_000_000 + secs * 1000)
    }

    #[test]
    fn hops_climb_with_peer_mail_and_stop_past_the_limit() {
        let mut l = Loops::new(LoopRules::default(), Taints::default());
        let (a, b, c) = (Some("a"), Some("b"), Some("c"));
        // Nothing heard from a peer: hop 0.
        assert_eq!(l.hop_for(a, None, at(0)), Ok(0));
        // A person asks A (hop 0): A asks B at hop 1.
        l.received(a, 0, at(1));
        assert_eq!(l.hop_for(a, None, at(2)), Ok(1));
        // B asks C at hop 2.
        l.received(b, 1, at(3));
        assert_eq!(l.hop_for(b, None, at(4)), Ok(2));
        // C can ask no one: hop 3 is past 2.
        l.received(c, 2, at(5));
        assert_eq!(
            l.hop_for(c, None, at(6)),
            Err(LoopRefusal::Hop { hop: 3, max: 2 })
        );
        // A reply carries the hop it answers, never refused for it, and
        // at least the hop its mailbox is handling.
        assert_eq!(l.hop_for(c, Some(2), at(6)), Ok(2));
        assert_eq!(l.hop_for(c, Some(7), at(6)), Ok(7));
        assert_eq!(l.hop_for(c, Some(0), at(6)), Ok(2));
        // Its person speaks: hop 0 again.
        l.reset(c);
        assert_eq!(l.hop_for(c, None, at(7)), Ok(0));
    }

    #[test]
    fn a_limit_of_zero_lets_agents_only_reply() {
        let mut l = Loops::new(
            LoopRules {
                max_hop: 0,
                ..LoopRules::default()
            },
            Taints::default(),
        );
        let m = Some("m");
        assert_eq!(l.hop_for(m, None, at(0)), Ok(0));
        l.received(m, 0, at(1));
        assert!(l.hop_for(m, None, at(2)).is_err());
        assert_eq!(l.hop_for(m, Some(0), at(2)), Ok(0));
    }

    #[test]
    fn a_mailbox_handles_the_highest_hop_until_it_falls_back() {
        let rules = LoopRules {
            max_hop: 5,
            ..LoopRules::default()
        };
        let mut l = Loops::new(rules, Taints::default());
        let m = Some("m");
        l.received(m, 2, at(0));
        l.received(m, 0, at(10));
        assert_eq!(l.handling(m, at(11)), 2);
        assert_eq!(l.hop_for(m, None, at(11)), Ok(3));
        // Ten minutes with no peer mail after the last: back to 0.
        assert_eq!(l.hop_for(m, None, at(10 + 599)), Ok(3));
        assert_eq!(l.hop_for(m, None, at(10 + 600)), Ok(0));
        assert_eq!(l.handling(m, at(10 + 600)), 0);
        // The owner's mailbox is its person's: it never handles a hop.
        l.received(None, 1, at(11));
        assert_eq!(l.handling(None, at(12)), 0);
        assert_eq!(l.hop_for(None, None, at(12)), Ok(0));
    }

    #[test]
    fn the_pair_limit_counts_only_hop_one_and_up() {
        let mut l = Loops::new(LoopRules::default(), Taints::default());
        for i in 0..100 {
            assert_eq!(l.count_pair("a@x", "b@y", 0, at(i)), Ok(()));
        }
        for i in 0..6 {
            assert_eq!(l.count_pair("a@x", "b@y", 1, at(i)), Ok(()), "send {i}");
        }
        assert_eq!(
            l.count_pair("a@x", "b@y", 1, at(10)),
            Err(LoopRefusal::Pair {
                per_hour: 6,
                retry_in_secs: 3590
            })
        );
        // Another pair, and hop 0 on this one, are not affected.
        assert_eq!(l.count_pair("a@x", "c@y", 1, at(10)), Ok(()));
        assert_eq!(l.count_pair("a@x", "b@y", 0, at(10)), Ok(()));
        // An hour after the first, one more fits.
        assert_eq!(l.count_pair("a@x", "b@y", 2, at(3600)), Ok(()));
        assert!(l.count_pair("a@x", "b@y", 2, at(3600)).is_err());
    }

    #[test]
    fn replies_in_one_thread_stop_until_the_person_speaks() {
        let mut l = Loops::new(LoopRules::default(), Taints::default());
        let (a, b) = (Some("a"), Some("b"));
        for turn in 0..6 {
            assert_eq!(l.check_turn(a, "t1"), Ok(()), "turn {turn}");
            l.count_turn(a, "t1", at(turn));
        }
        assert_eq!(l.check_turn(a, "t1"), Err(LoopRefusal::Turns { max: 6 }));
        // Another thread, another mailbox and the person's own mailbox
        // are not affected.
        assert_eq!(l.check_turn(a, "t2"), Ok(()));
        assert_eq!(l.check_turn(b, "t1"), Ok(()));
        for turn in 0..20 {
            l.count_turn(None, "t1", at(turn));
        }
        assert_eq!(l.check_turn(None, "t1"), Ok(()));
        // Its person speaks: it may answer again.
        l.reset(a);
        assert_eq!(l.check_turn(a, "t1"), Ok(()));
        for i in 0..(MAX_THREADS as u64 + 10) {
            l.count_turn(a, &format!("t{i}"), at(i));
        }
        assert_eq!(l.turns.len(), MAX_THREADS);
    }

    #[test]
    fn a_turn_handling_peer_mail_sends_its_quota_and_no_more() {
        let mut l = Loops::new(LoopRules::default(), Taints::default());
        let m = Some("m");
        // Not handling peer mail: never counted, never refused.
        for i in 0..10 {
            l.count_sent(m, Sending::Ask, at(i));
        }
        assert_eq!(l.check_quota(m, Sending::Ask, at(10)), Ok(()));
        l.received(m, 0, at(11));
        for (what, max) in [
            (Sending::Ask, 3),
            (Sending::Tell, 3),
            (Sending::Broadcast, 1),
        ] {
            for n in 0..max {
                assert_eq!(l.check_quota(m, what, at(12)), Ok(()), "{what:?} {n}");
                l.count_sent(m, what, at(12));
            }
            assert_eq!(
                l.check_quota(m, what, at(12)),
                Err(LoopRefusal::Quota { what, max })
            );
        }
        // More peer mail keeps the count; another mailbox and the owner's
        // are not affected.
        l.received(m, 0, at(13));
        assert!(l.check_quota(m, Sending::Ask, at(14)).is_err());
        assert_eq!(l.check_quota(Some("n"), Sending::Ask, at(14)), Ok(()));
        assert_eq!(l.check_quota(None, Sending::Ask, at(14)), Ok(()));
        // Its person speaks: a new turn.
        l.reset(m);
        l.received(m, 0, at(15));
        assert_eq!(l.check_quota(m, Sending::Ask, at(16)), Ok(()));
        // A turn that fell back with no peer mail begins anew too.
        for _ in 0..3 {
            l.count_sent(m, Sending::Ask, at(16));
        }
        assert!(l.check_quota(m, Sending::Ask, at(16)).is_err());
        l.received(m, 0, at(16 + 600));
        assert_eq!(l.check_quota(m, Sending::Ask, at(16 + 601)), Ok(()));
    }

    #[test]
    fn remembered_mailboxes_and_pairs_are_bounded() {
        let mut l = Loops::new(LoopRules::default(), Taints::default());
        for i in 0..(MAX_HANDLING as u64 + 10) {
            l.received(Some(&format!("m{i}")), 1, at(i));
        }
        assert_eq!(l.handling.len(), MAX_HANDLING);
        for i in 0..(MAX_PAIRS as u64 + 10) {
            l.count_pair(&format!("a{i}@x"), "b@y", 1, at(i)).unwrap();
        }
        assert_eq!(l.pairs.len(), MAX_PAIRS);
    }
}
