//! The records the store keeps, as serde types (CBOR on disk).

use agentmesh_protocol::envelope::MessageId;
use agentmesh_protocol::time::MAX_CLOCK_SKEW;
use agentmesh_protocol::{PeerId, Timestamp};
use serde::{Deserialize, Serialize};

/// A message's dedup record's key: its sender's PeerId bytes ‖ its id.
pub fn dedup_key(sender: &PeerId, id: &MessageId) -> Vec<u8> {
    [sender.to_bytes(), id.0.to_vec()].concat()
}

/// When a message's dedup record may be forgotten (Unix ms): its
/// envelope's expiry and the clock skew allowed. After it, the envelope is
/// refused as expired, so no record is needed to refuse it again.
pub fn dedup_until(expires_at: Timestamp) -> u64 {
    expires_at.saturating_add(MAX_CLOCK_SKEW).as_unix_millis()
}

/// What the daemon remembers about a peer between runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerRecord {
    /// The peer.
    pub peer_id: String,
    /// Addresses it was reached at or announced, newest first.
    pub addrs: Vec<String>,
    /// The last measured round-trip time, in microseconds.
    pub rtt_us: Option<u64>,
    /// When it was last connected, Unix ms.
    pub last_seen: Option<u64>,
    /// Whether it serves circuit relay (identify listed the hop protocol).
    pub relay: bool,
}

/// One decision the daemon made, for `agentmesh audit` and for people
/// asking "what happened".
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When, Unix ms.
    pub at: u64,
    /// What happened: `team_created`, `admitted`, `revoked`, `accepted`,
    /// `held`, `refused`, `delivered`…
    pub event: String,
    /// The machine it concerns, if any (for messages: the other machine).
    pub peer: Option<String>,
    /// Details, never message bodies.
    pub detail: String,
    /// For messages: the sender, as `mailbox@machine`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    /// For messages: the recipient, as `mailbox@machine`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipient: Option<String>,
    /// For messages: the message id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// For messages: the SHA-256 of the body (hex), never the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_sha256: Option<String>,
    /// For the bus's decisions: the judgment of a broadcast for one
    /// mailbox (the mailbox is `recipient`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judged: Option<Judged>,
    /// For a broadcast judged for none (or not all) of this machine's
    /// mailboxes: how many, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<Skipped>,
}

/// Mailboxes a broadcast was not judged for, as the audit log keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// How many.
    pub count: u32,
    /// Why (the main reason).
    pub reason: Option<crate::api::SkipReason>,
}

/// A broadcast judged for one mailbox, as the audit log keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judged {
    /// The judge's probability; `None` when a judge command failed.
    pub score: Option<f64>,
    /// The preset it was judged with.
    pub preset: crate::api::Preset,
    /// The preset's threshold.
    pub threshold: f64,
    /// Delivered (else dropped).
    pub delivered: bool,
    /// Which judge: `builtin`, `command` or `agent`.
    pub judge: String,
    /// Why it was dropped when no score says it (the judge command's
    /// error code and message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Which stage decided: `builtin`, `command` or `agent` (with `judge
    /// = "agent"`, the built-in judge decides what it is sure of).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// The agent's reason, when the agent decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// Where a sent message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxStatus {
    /// Stored, not yet handed to the recipient.
    Queued,
    /// Handed over at least once, not yet acknowledged.
    Sent,
    /// The recipient stored it (in its inbox, or held).
    Delivered,
    /// Refused by the recipient, or expired undelivered; see `reason`.
    Failed,
}

/// An envelope this machine carries for another member (it is a
/// carrier): who sealed it for whom, and when it can go. The envelope's
/// bytes are kept apart, by [`CarriedRecord::key`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarriedRecord {
    /// The machine it is for (PeerId text).
    pub recipient: String,
    /// The machine that sealed and signed it (PeerId text).
    pub sender: String,
    /// Its message id, hex.
    pub id: String,
    /// Its size, bytes.
    pub size: u64,
    /// When its sender sealed it, Unix ms (the header's `sent_at`): a
    /// recipient's envelopes are carried on in this order.
    pub sent_at: u64,
    /// When this machine took it, Unix ms.
    pub stored_at: u64,
    /// When it expires, Unix ms (the envelope header's `expires_at`).
    pub expires_at: u64,
}

impl CarriedRecord {
    /// Its key: recipient ‖ 0 ‖ sender ‖ 0 ‖ id, so a recipient's
    /// envelopes are one range, and one sender's message is held once.
    pub fn key(&self) -> Vec<u8> {
        carried_key(&self.recipient, &self.sender, &self.id)
    }
}

/// The key of a carried envelope (see [`CarriedRecord::key`]).
pub fn carried_key(recipient: &str, sender: &str, id: &str) -> Vec<u8> {
    [
        recipient.as_bytes(),
        b"\0",
        sender.as_bytes(),
        b"\0",
        id.as_bytes(),
    ]
    .concat()
}

/// A message in the outbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxRecord {
    /// The message id, hex.
    pub id: String,
    /// The recipient machine.
    pub to_peer: String,
    /// The recipient, as `mailbox@machine`.
    pub to: String,
    /// `tell`, `ask`, `reply`, `broadcast`, `receipt`, `counts`.
    pub kind: crate::api::MessageKind,
    /// The sealed envelope.
    #[serde(with = "serde_bytes")]
    pub envelope: Vec<u8>,
    /// Where it stands.
    pub status: OutboxStatus,
    /// Why it failed, or why the last attempt did.
    pub reason: Option<String>,
    /// Delivery attempts so far.
    pub attempts: u32,
    /// When it was accepted, Unix ms.
    pub created_at: u64,
    /// When it stops being deliverable, Unix ms.
    pub expires_at: u64,
    /// Whether the recipient held it for approval.
    #[serde(default)]
    pub held: bool,
    /// SHA-256 of the body, hex, for the audit log (empty in records
    /// written before it was kept).
    #[serde(default)]
    pub body_sha256: String,
    /// The recipient's daily wake budget was spent: nothing wakes a
    /// session for it until then, Unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred_until: Option<u64>,
    /// Every state it went through, in the order they happen
    /// ([`MessageState::rank`]; those of one rank in the order this
    /// machine learned them), empty in records written before states
    /// were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<StateRecord>,
    /// The machine that carries it for its offline recipient, if one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carrier: Option<String>,
    /// What was sent, for this machine's own views: the envelope is
    /// sealed to its recipient, and dropped once delivered. Records
    /// written before it was kept, receipts and counts have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<SentCopy>,
}

/// The sender's own copy of what it sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentCopy {
    /// The text.
    pub text: String,
    /// The conversation, hex.
    pub thread: String,
    /// The message it answers, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<String>,
}

/// The most states an outbox record keeps: each state is kept once, and
/// there are ten.
pub const MAX_STATES: usize = 16;

/// One state a sent message went through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRecord {
    /// Which.
    pub state: MessageState,
    /// When, Unix ms (the recipient's clock for what it reported).
    pub at: u64,
    /// Why (rejected, refused, failed), or what (carried: by which
    /// machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The recipient's stable code (refused: `no_mailbox`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Until when (deferred), Unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// Who decided it, when this machine could not tell from the
    /// message alone: the carrier's name, for `carried`. (The recipient
    /// decides what it reports, this machine `queued` and `failed`.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl OutboxRecord {
    /// Records that the message reached `state` at `at`: once per state
    /// (a receipt that arrives twice, or a state the direct answer told
    /// already, changes nothing). Whether it was new.
    pub fn note(&mut self, state: MessageState, at: u64, reason: Option<String>) -> bool {
        self.note_record(StateRecord {
            state,
            at,
            reason,
            code: None,
            until: None,
            by: None,
        })
    }

    /// [`OutboxRecord::note`] of a whole state record.
    pub fn note_record(&mut self, record: StateRecord) -> bool {
        if self.reached(record.state) || self.states.len() >= MAX_STATES {
            return false;
        }
        // After every state that comes before it or with it (learned
        // first), before any that comes after it: a `read` receipt that
        // overtook its `delivered` stays last.
        let rank = record.state.rank();
        let at = (self.states.iter())
            .rposition(|s| s.state.rank() <= rank)
            .map_or(0, |i| i + 1);
        self.states.insert(at, record);
        true
    }

    /// Whether it reached `state`.
    pub fn reached(&self, state: MessageState) -> bool {
        self.states.iter().any(|s| s.state == state)
    }
}

/// A broadcast copy sent to another machine (by the copy's id): which
/// machine, and what it reported it did with it, once it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountsRecord {
    /// The machine the copy went to: only its report counts.
    pub to_peer: String,
    /// When the copy was sent, Unix ms.
    pub created_at: u64,
    /// Its report, once it arrived.
    pub reported: Option<Reported>,
}

/// What a machine reported of a broadcast: delivered to so many of its
/// mailboxes, dropped for so many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reported {
    /// Mailboxes it was delivered to.
    pub delivered: u32,
    /// Candidate mailboxes it was dropped for.
    pub dropped: u32,
    /// Mailboxes it did not judge it for.
    #[serde(default)]
    pub skipped: u32,
    /// Why it skipped them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::api::SkipReason>,
    /// When the report arrived, Unix ms.
    pub at: u64,
}

/// An ask this machine sent to another machine: what lets that machine's
/// replies to it pass unheld (the answer to a question is not held for
/// approval), a few at most.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AskRecord {
    /// The ask's id, hex.
    pub id: String,
    /// The machine it was sent to: only its replies pass.
    pub to_peer: String,
    /// The mailbox that asked (`None`: the owner's): only replies to it pass.
    pub mailbox: Option<String>,
    /// When the ask stops being deliverable, Unix ms: replies after it
    /// (and the allowed skew) are held as any other mail.
    pub expires_at: u64,
    /// Replies that passed unheld so far.
    pub answers: u32,
}

/// A message in the inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxRecord {
    /// Its place in this machine's inbox; increases with every message.
    pub seq: u64,
    /// The message id, hex.
    pub id: String,
    /// The sending machine.
    pub from_peer: String,
    /// The sender, as `mailbox@machine`.
    pub from: String,
    /// The person who ran the sending machine when it arrived, as its
    /// Admit says (a name reused after a revocation has another owner).
    #[serde(default)]
    pub from_owner: Option<String>,
    /// The receiving mailbox (`None`: the owner's).
    pub mailbox: Option<String>,
    /// The sender's identity stamp.
    pub who: crate::api::Who,
    /// `tell`, `ask`, `reply`, `broadcast`.
    pub kind: crate::api::MessageKind,
    /// The conversation, hex.
    pub thread: String,
    /// The message answered, hex.
    pub in_reply_to: Option<String>,
    /// How many peer messages caused it.
    pub hop: u8,
    /// Whether the sender had read untrusted text.
    pub taint: bool,
    /// The message.
    pub text: String,
    /// When it was received, Unix ms.
    pub received_at: u64,
    /// When its envelope expires, Unix ms.
    pub expires_at: u64,
    /// Whether a client read it, and when (Unix ms).
    pub read_at: Option<u64>,
    /// Why it is held for approval, if it is (`other_owner`, `paused`).
    pub held: Option<crate::api::HeldReason>,
    /// The SHA-256 of the sealed body, hex.
    pub body_sha256: String,
    /// When its sender sealed it (its envelope's `sent_at`), Unix ms: a
    /// carrier may bring it much later. Absent in records kept before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<u64>,
}

impl InboxRecord {
    /// The dedup record this message needs once the inbox no longer holds
    /// it, if its window is still open at `now` (an envelope is refused as
    /// expired only after `until`): (key, until). While the inbox holds
    /// it, its record is what refuses it again. A broadcast's copy needs
    /// none: the broadcast kept its own.
    pub fn dedup_after(&self, now: Timestamp) -> Option<(Vec<u8>, u64)> {
        if self.kind == crate::api::MessageKind::Broadcast {
            return None;
        }
        let until = dedup_until(Timestamp::from_unix_millis(self.expires_at));
        let sender = self.from_peer.parse::<PeerId>().ok()?;
        let id = MessageId::parse(&self.id)?;
        (until >= now.as_unix_millis()).then(|| (dedup_key(&sender, &id), until))
    }
}

/// What a mailbox says of itself in the team's directory, and the preset
/// its broadcasts are judged with (kept here only, never published).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileRecord {
    /// The mailbox name; empty for the machine owner's (`@`).
    pub mailbox: String,
    /// What its session knows and works on (at most 1 KiB).
    #[serde(default)]
    pub profile: String,
    /// Its current objective (at most 256 bytes).
    #[serde(default)]
    pub goal: String,
    /// The preset it chose; the machine's default if none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<crate::api::Preset>,
    /// Its `not_for_me` notes, oldest first (the last
    /// [`crate::api::MAX_NOTES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<NoteRecord>,
}

/// A `not_for_me`: a session said a broadcast delivered to it was not
/// for it, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoteRecord {
    /// When, Unix ms.
    pub at: u64,
    /// The delivered copy it was said of.
    pub id: String,
    /// What the session said (at most [`crate::api::MAX_NOTE_BYTES`]).
    pub note: String,
    /// The broadcast's text, its first [`crate::api::MAX_NOTED_TEXT`]
    /// bytes: what the judge compares the next broadcasts with.
    pub broadcast: String,
}

/// A folder opted in (or out) of receiving, and the mailbox bound to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FolderBinding {
    /// The mailbox name.
    pub mailbox: String,
    /// The folder, absolute.
    pub path: String,
    /// Whether it receives now (`allow`) or not (`deny`).
    pub allowed: bool,
}

/// A mailbox's taint: marked by its person (its session reads text others
/// wrote), or caught from tainted mail it received, until its person
/// speaks again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaintRecord {
    /// The mailbox name.
    pub mailbox: String,
    /// Its person marked it (`agentmesh taint MAILBOX`).
    #[serde(default)]
    pub marked: bool,
    /// Tainted mail it received since its person last spoke, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caught: Option<Caught>,
}

/// The first tainted message a mailbox received since its person spoke.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caught {
    /// When, Unix ms.
    pub at: u64,
    /// Its sender's address.
    pub from: String,
    /// Its id.
    pub id: String,
}

pub use crate::api::{MessageState, RunStatus, WakeAgent};

/// A mailbox's wake setting (`agentmesh wake set MAILBOX AGENT`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WakeRecord {
    /// The mailbox name.
    pub mailbox: String,
    /// The agent a run starts; `None`: wake is off (the record keeps a
    /// budget of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<WakeAgent>,
    /// Wakes a day; `None`: the configuration's (`wake.budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u32>,
    /// A Claude Code run's `--max-budget-usd`; `None`: the
    /// configuration's (`wake.max_budget_usd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_budget_usd: Option<f64>,
}

/// A session an agent's hooks reported in a mailbox's folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The mailbox of its folder.
    pub mailbox: String,
    /// Its agent.
    pub agent: WakeAgent,
    /// The agent's session id.
    pub id: String,
    /// Its SessionStart hook (or the first hook seen), Unix ms.
    pub started: u64,
    /// Its newest hook, Unix ms.
    pub seen: u64,
    /// Its SessionEnd hook, Unix ms, if it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<u64>,
}

/// A wake run the daemon started (the newest 100 are kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Its id, hex.
    pub id: String,
    /// The mailbox whose mail started it.
    pub mailbox: String,
    /// The agent.
    pub agent: WakeAgent,
    /// The session it resumed, or the new one it reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Whether it resumed `session`.
    pub resumed: bool,
    /// Where it stands.
    pub status: RunStatus,
    /// How it exited, in words, or why it did not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<String>,
    /// When it started, Unix ms.
    pub started: u64,
    /// When it ended, Unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<u64>,
    /// The inbox seqs of the messages its prompt showed.
    pub shown: Vec<u64>,
    /// Their ids, hex.
    pub messages: Vec<String>,
    /// Its log file.
    pub log: String,
    /// A broadcast is among the messages it was started for.
    #[serde(default)]
    pub broadcast: bool,
    /// What its session did through agentmesh while it ran: messages
    /// sent, broadcasts, replies, `not_for_me` notes, messages marked
    /// read. 0 for a run that ended is a silent wake.
    #[serde(default)]
    pub acted: u32,
}

/// What a mailbox spent of its daily wake budget on one day (the
/// receiving machine's local calendar day).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpentRecord {
    /// The mailbox name.
    pub mailbox: String,
    /// The local day, `YYYY-MM-DD`.
    pub day: String,
    /// Wake runs started.
    pub runs: u32,
    /// Broadcasts delivered to it.
    pub broadcasts: u32,
    /// Stop-hook blocks (each kept a session working).
    pub stops: u32,
}

impl SpentRecord {
    /// Everything it counts.
    pub fn total(&self) -> u32 {
        self.runs
            .saturating_add(self.broadcasts)
            .saturating_add(self.stops)
    }
}
