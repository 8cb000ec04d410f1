//! The crash soak's invariant checker: what every machine holds at the
//! end of a soak (`crate::soak`), checked against what the agents were
//! told and what the senders' outboxes say.
//!
//! - **Exactly once**: every message a sender's outbox holds (so every
//!   message its daemon accepted) to a member in good standing is in the
//!   recipient's inbox exactly once (a broadcast's copy: judged there, once
//!   per mailbox), and no agent took any message twice.
//! - **Accepted means durable**: every id a `send_message`, `reply` or
//!   `broadcast` tool result gave an agent is in its sender's outbox, and
//!   every message a machine holds from another is in that sender's
//!   outbox, but for one no tool result gave, sent in the moment before a
//!   SIGKILL of its sender (see [`UNRECORDED_WITHIN`]).
//! - **No false receipts**: no outbox ever showed a state that says the
//!   recipient has a message (`delivered`, `held`, `read` ...) for one the
//!   recipient does not hold, nor `read` for one not read there.
//! - **Revocation refused everywhere**: no member holds a message from the
//!   revoked machine that its agent began sending after that member was
//!   seen counting it revoked; at the end every member counts it revoked
//!   and has no connection to it.
//!
//! It reads only what it is given, so it can be shown a run with a
//! duplicate, a loss or a false receipt (its tests do) and must say so.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use agentmesh_node::api::{MessageKind, MessageState, MessageView, OutboxView};

/// One machine, as read at the end of a soak.
#[derive(Debug, Clone, Default)]
pub struct MachineEnd {
    /// Its machine name.
    pub name: String,
    /// `outbox --json`: every message its daemon accepted to send.
    pub outbox: Vec<OutboxView>,
    /// `inbox --json`: every message it holds, read or not.
    pub inbox: Vec<MessageView>,
    /// Its bus log's broadcast judgments.
    pub judgments: Vec<Judgment>,
    /// The ids its agent took with `check_inbox`, each as often as taken.
    pub taken: Vec<String>,
    /// Every status its agent was shown for a message it sent (by
    /// `send_message`, `reply` and `message_status`): (id, status).
    pub shown: Vec<(String, MessageState)>,
    /// Whether it counts the revoked machine revoked and has no
    /// connection to it (`None`: no revocation, or this is that machine).
    pub refuses_revoked: Option<bool>,
}

/// A broadcast copy judged for one mailbox (a bus log entry).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Judgment {
    /// When (the entry's time: two reads of one log give it once, a
    /// judgment made twice shows twice).
    pub at: String,
    /// The copy's id (the sender's outbox lists it).
    pub id: String,
    /// The mailbox's address (`NAME@MACHINE`, `@MACHINE` the owner's).
    pub mailbox: String,
    /// Delivered to it (else dropped).
    pub delivered: bool,
}

impl Judgment {
    /// The id the mailbox's inbox holds the copy under, if delivered.
    pub fn inbox_id(&self) -> Option<String> {
        let name = self.mailbox.split('@').next().filter(|n| !n.is_empty());
        self.delivered
            .then(|| agentmesh_node::mail::broadcast_copy_id(&self.id, name))
    }
}

/// A message an agent's tool call was told was accepted.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// Its id, as the tool result gave it.
    pub id: String,
    /// The sending machine, by index.
    pub from: usize,
    /// When the call began, from the start of the soak.
    pub started: Duration,
    /// A `broadcast` (its id names the broadcast, not a copy).
    pub broadcast: bool,
}

/// A revocation during the soak.
#[derive(Debug, Clone)]
pub struct Revocation {
    /// The revoked machine, by index.
    pub node: usize,
    /// When each machine was first seen counting it revoked, from the
    /// start of the soak.
    pub known_at: Vec<Option<Duration>>,
}

/// A daemon killed with SIGKILL during the soak.
#[derive(Debug, Clone)]
pub struct Kill {
    /// The machine, by index.
    pub node: usize,
    /// When, by the machine's clock (the one its daemons stamp mail with).
    pub at: SystemTime,
}

/// A tell, ask or reply a recipient holds and its sender has no record
/// of is not a loss if no tool result gave its id and its sender was
/// killed within this long after the second its `sent_at` names (which
/// is in whole seconds). A send to another machine leaves while its
/// outbox write is flushed (the trip overlaps the sender's fsync, issue
/// 35) and is not answered before that flush ends: a SIGKILL in between
/// leaves the copy at the recipient and no record at the sender, whose
/// agent was told "may or may not have been done" (docs/architecture.md,
/// the path of a message). The flush takes milliseconds; the rest is a
/// loaded machine's margin. Broadcast copies, receipts and counts leave
/// only once durable, so for them there is no such window.
pub const UNRECORDED_WITHIN: Duration = Duration::from_secs(2);

/// What a soak left, for [`check`].
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Every machine, by index.
    pub machines: Vec<MachineEnd>,
    /// What the tool results said was accepted.
    pub accepted: Vec<Accepted>,
    /// The revocation, if one happened.
    pub revocation: Option<Revocation>,
    /// Every SIGKILL of a daemon.
    pub kills: Vec<Kill>,
}

/// The checker's counts, and every breach in words.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Verdict {
    /// Outbox entries checked (broadcast copies included).
    pub messages: usize,
    /// Of them, held by their recipient exactly once.
    pub delivered_once: usize,
    /// Messages a recipient holds whose sender has no record of them and
    /// whose id no tool result gave, sent in the moment before a SIGKILL
    /// of their sender (not a breach: see [`UNRECORDED_WITHIN`]).
    pub unrecorded: usize,
    /// Messages held twice or more by one machine, or taken twice by an
    /// agent, or judged twice for one mailbox.
    pub duplicates: usize,
    /// Messages to a member in good standing that never arrived, accepted
    /// ids missing from their sender's outbox, and messages held whose
    /// sender's outbox does not have them.
    pub lost: usize,
    /// Receipt states shown for messages the recipient does not hold (or
    /// `read` for one it did not read).
    pub false_receipts: usize,
    /// Messages from the revoked machine held by a member that already
    /// counted it revoked when they were sent, and members that do not
    /// count it revoked (or are still connected to it) at the end.
    pub revocation_breaches: usize,
    /// Messages to or from the revoked machine, checked only for
    /// duplicates, false receipts and breaches.
    pub involving_revoked: usize,
    /// Every breach, in words (the first 50).
    pub violations: Vec<String>,
}

impl Verdict {
    /// No invariant broken.
    pub fn clean(&self) -> bool {
        self.duplicates + self.lost + self.false_receipts + self.revocation_breaches == 0
    }

    fn breach(&mut self, what: String) {
        if self.violations.len() < 50 {
            self.violations.push(what);
        }
    }
}

/// States that say the recipient's machine holds the message.
fn says_held(s: MessageState) -> bool {
    matches!(
        s,
        MessageState::Delivered
            | MessageState::Held
            | MessageState::Approved
            | MessageState::Rejected
            | MessageState::Deferred
            | MessageState::Read
    )
}

/// The machine a recipient address names (`box@machine`, `@machine`).
fn machine_of(to: &str) -> &str {
    to.rsplit('@').next().unwrap_or(to)
}

/// Checks `run`: see the module's documentation.
pub fn check(run: &Run) -> Verdict {
    let mut v = Verdict::default();
    let index: HashMap<&str, usize> = run
        .machines
        .iter()
        .enumerate()
        .map(|(i, m)| (m.name.as_str(), i))
        .collect();
    let revoked = run.revocation.as_ref().map(|r| r.node);
    let started: HashMap<&str, Duration> = run
        .accepted
        .iter()
        .map(|a| (a.id.as_str(), a.started))
        .collect();
    for (s, sender) in run.machines.iter().enumerate() {
        for e in &sender.outbox {
            if e.kind == MessageKind::Counts {
                continue;
            }
            let Some(&r) = index.get(machine_of(&e.to)) else {
                v.breach(format!(
                    "{}'s {} is to {}, no machine of the soak",
                    sender.name, e.id, e.to
                ));
                v.lost += 1;
                continue;
            };
            v.messages += 1;
            // A broadcast copy began with its broadcast, its thread.
            let key = match (&e.kind, &e.thread) {
                (MessageKind::Broadcast, Some(thread)) => thread.as_str(),
                _ => e.id.as_str(),
            };
            check_entry(&mut v, run, (s, r), e, revoked, started.get(key));
        }
    }
    accepted_are_in_outboxes(&mut v, run);
    held_are_in_outboxes(&mut v, run, &index);
    for m in &run.machines {
        let mut taken: HashMap<&str, usize> = HashMap::new();
        for id in &m.taken {
            *taken.entry(id).or_default() += 1;
        }
        for (id, n) in taken.into_iter().filter(|(_, n)| *n > 1) {
            v.duplicates += 1;
            v.breach(format!("{}'s agent took {id} {n} times", m.name));
        }
        if m.refuses_revoked == Some(false) {
            v.revocation_breaches += 1;
            v.breach(format!(
                "{} does not count the revoked machine revoked, or is still connected to it, at the end",
                m.name
            ));
        }
    }
    v
}

/// One outbox entry `e` of machine `s` to machine `r`.
fn check_entry(
    v: &mut Verdict,
    run: &Run,
    (s, r): (usize, usize),
    e: &OutboxView,
    revoked: Option<usize>,
    started: Option<&Duration>,
) {
    let (sender, recipient) = (&run.machines[s].name, &run.machines[r]);
    let what = format!("{sender}'s {:?} {} to {}", e.kind, e.id, e.to);
    let broadcast = e.kind == MessageKind::Broadcast;
    // A message is held under its id; a broadcast copy under one id per
    // mailbox its judgment delivered it to.
    let judged: Vec<&Judgment> = recipient
        .judgments
        .iter()
        .filter(|j| j.id == e.id)
        .collect();
    let ids: Vec<String> = if broadcast {
        judged.iter().filter_map(|j| j.inbox_id()).collect()
    } else {
        vec![e.id.clone()]
    };
    let copies: Vec<&MessageView> = recipient
        .inbox
        .iter()
        .filter(|m| ids.contains(&m.id))
        .collect();
    for id in &ids {
        let n = copies.iter().filter(|m| m.id == *id).count();
        if n > 1 {
            v.duplicates += 1;
            v.breach(format!(
                "{what}: held {n} times by {} (as {id})",
                recipient.name
            ));
        }
        if broadcast && n == 0 {
            v.lost += 1;
            v.breach(format!(
                "{what}: judged delivered at {}, and its copy {id} is not in the inbox",
                recipient.name
            ));
        }
    }
    let mut per_mailbox: HashMap<&str, usize> = HashMap::new();
    for j in &judged {
        *per_mailbox.entry(&j.mailbox).or_default() += 1;
    }
    for (mailbox, n) in per_mailbox.into_iter().filter(|(_, n)| *n > 1) {
        v.duplicates += 1;
        v.breach(format!("{what}: judged {n} times for {mailbox}"));
    }
    let held = !copies.is_empty() || !judged.is_empty();
    // What the outbox ever said (its history), and what the agent was told.
    let told = run.machines[s]
        .shown
        .iter()
        .filter(|(id, _)| *id == e.id)
        .map(|(_, st)| (*st, "the agent was told"));
    let mut shown = e
        .states
        .iter()
        .map(|st| (st.state, "the outbox showed"))
        .chain(told);
    // A broadcast copy to or from the revoked machine may be stored
    // (`delivered`) and then judged for no mailbox, the revocation having
    // overtaken it: nothing shows it was held.
    let involves_revoked = revoked == Some(s) || revoked == Some(r);
    if let Some((state, by)) = shown.clone().find(|(st, _)| says_held(*st))
        && !held
        && !(broadcast && involves_revoked)
    {
        v.false_receipts += 1;
        v.breach(format!(
            "{what}: {by} {} but {} does not hold it",
            state.as_str(),
            recipient.name
        ));
    }
    if let Some((_, by)) = shown.find(|(st, _)| *st == MessageState::Read)
        && !copies.iter().any(|m| m.read)
    {
        v.false_receipts += 1;
        v.breach(format!(
            "{what}: {by} read but {} has not read it",
            recipient.name
        ));
    }
    if involves_revoked {
        v.involving_revoked += 1;
        // Sent after the other end counted the revoked machine revoked:
        // from it, held by a member that knew; to it, accepted by a member
        // that knew.
        let (knower, name) = if revoked == Some(s) {
            (r, &recipient.name)
        } else {
            (s, sender)
        };
        let known = run
            .revocation
            .as_ref()
            .and_then(|rv| rv.known_at.get(knower).copied().flatten());
        let breach = if revoked == Some(s) { held } else { true };
        if breach
            && let (Some(started), Some(known)) = (started, known)
            && *started > known
        {
            v.revocation_breaches += 1;
            v.breach(format!(
                "{what}: sent {:.1} s into the soak, after {name} counted the revoked machine revoked ({:.1} s)",
                started.as_secs_f64(),
                known.as_secs_f64()
            ));
        }
        return;
    }
    if !held || !says_held(e.status) {
        v.lost += 1;
        let reason = e.reason.as_deref().unwrap_or("no reason given");
        v.breach(format!(
            "{what}: status {} ({reason}), {} copies at {}",
            e.status.as_str(),
            copies.len(),
            recipient.name
        ));
    } else if copies.len() == ids.len() {
        v.delivered_once += 1;
    }
}

/// Every message a machine holds from another machine of the soak is in
/// that machine's outbox: a sender that lost the record of a message it
/// sent (a write lost to a kill) shows here, whether a tool said it was
/// accepted or not, unless it is a message no tool result gave whose
/// sender was killed just after sending it ([`UNRECORDED_WITHIN`]).
fn held_are_in_outboxes(v: &mut Verdict, run: &Run, index: &HashMap<&str, usize>) {
    for m in &run.machines {
        for got in &m.inbox {
            let Some(&s) = index.get(machine_of(&got.from)) else {
                continue;
            };
            let mailbox = got.mailbox.as_deref();
            let sent = |e: &OutboxView| {
                e.id == got.id
                    || (e.kind == MessageKind::Broadcast
                        && agentmesh_node::mail::broadcast_copy_id(&e.id, mailbox) == got.id)
            };
            if run.machines[s].outbox.iter().any(sent) {
                continue;
            }
            let accepted = run.accepted.iter().any(|a| a.id == got.id);
            if !accepted && killed_after_sending(run, s, got) {
                v.unrecorded += 1;
            } else {
                v.lost += 1;
                v.breach(format!(
                    "{} holds {:?} {} from {} (thread {}, mailbox {:?}, sent {}), whose outbox does not have it{}",
                    m.name,
                    got.kind,
                    got.id,
                    got.from,
                    got.thread,
                    got.mailbox,
                    got.sent_at.as_deref().unwrap_or("at an unknown time"),
                    if accepted {
                        " (a tool result gave its id)".to_string()
                    } else if leaves_early(got.kind) {
                        format!(
                            " (no SIGKILL of its sender followed within {UNRECORDED_WITHIN:?} of its second)"
                        )
                    } else {
                        " (it leaves only once durable)".to_string()
                    }
                ));
            }
        }
    }
}

/// Whether a message of `kind` leaves before its outbox write is durable
/// (a tell, ask or reply; broadcast copies, receipts and counts leave
/// once durable).
fn leaves_early(kind: MessageKind) -> bool {
    matches!(
        kind,
        MessageKind::Tell | MessageKind::Ask | MessageKind::Reply
    )
}

/// Whether `got` is a send that leaves before it is durable and machine
/// `s` was killed within [`UNRECORDED_WITHIN`] after it sent it (its
/// `sent_at` is in whole seconds: the send was within the second after
/// it).
fn killed_after_sending(run: &Run, s: usize, got: &MessageView) -> bool {
    if !leaves_early(got.kind) {
        return false;
    }
    let Some(sent) = got
        .sent_at
        .as_deref()
        .and_then(|t| humantime::parse_rfc3339(t).ok())
    else {
        return false;
    };
    let last = sent + Duration::from_secs(1) + UNRECORDED_WITHIN;
    run.kills
        .iter()
        .any(|k| k.node == s && k.at >= sent && k.at <= last)
}

/// Every id a tool result gave is in its sender's outbox: accepted means
/// durable. A broadcast's id names the broadcast, whose copies (one per
/// machine) the outbox lists as its thread.
fn accepted_are_in_outboxes(v: &mut Verdict, run: &Run) {
    for a in &run.accepted {
        let outbox = &run.machines[a.from].outbox;
        let found = outbox
            .iter()
            .any(|e| e.id == a.id || (a.broadcast && e.thread.as_deref() == Some(a.id.as_str())));
        if !found {
            v.lost += 1;
            v.breach(format!(
                "{} was accepted by {}'s daemon (a tool said so {:.1} s into the soak) and is not in its outbox",
                a.id,
                run.machines[a.from].name,
                a.started.as_secs_f64()
            ));
        }
    }
}
