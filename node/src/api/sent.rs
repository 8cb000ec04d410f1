//! What the sender sees of the mail it sent: `send`'s answer, the
//! outbox's views, every state a message went through, and whether a
//! mailbox here tells senders it read their mail.

use serde::{Deserialize, Serialize};

/// `outbox`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxView {
    /// The message id.
    pub id: String,
    /// The recipient.
    pub to: String,
    /// `tell`, `ask`, `reply`, `broadcast`, `receipt`, `counts`.
    pub kind: super::MessageKind,
    /// The conversation, as its envelope's header says (absent for this
    /// machine's own copy of a broadcast).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    /// The message it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<String>,
    /// The text as sent (kept by this machine; absent for mail sent
    /// before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The latest of `states` (see [`MessageState`]).
    pub status: MessageState,
    /// Every state it went through, oldest first.
    #[serde(default)]
    pub states: Vec<StateView>,
    /// The machine carrying it for its offline recipient, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carrier: Option<String>,
    /// For deferred mail: when the recipient's budget resets, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred_until: Option<String>,
    /// Why it failed (or why the last attempt did).
    pub reason: Option<String>,
    /// Whether the recipient holds it for its owner's approval.
    pub held: bool,
    /// Delivery attempts.
    pub attempts: u32,
    /// When it was sent, RFC 3339.
    pub created_at: String,
    /// For mail still on its way that waits out a backoff: milliseconds
    /// until the next attempt (a connection to the recipient coming up
    /// tries at once). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<u64>,
    /// For mail still on its way: the last attempt could not connect to
    /// the recipient at all (it is offline or unreachable).
    #[serde(default)]
    pub offline: bool,
    /// The person who runs the recipient machine, as its Admit says.
    #[serde(default)]
    pub to_owner: Option<String>,
    /// For a broadcast: what the machine it went to reported it did with
    /// it, once it did (absent until then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<CountsView>,
}

/// What `send` answers once the message is durable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SentView {
    /// The message id.
    pub id: String,
    /// Where it goes, as `mailbox@machine`.
    pub to: String,
    /// It went to a mailbox on this machine (delivered, or held, at once).
    #[serde(default)]
    pub local: bool,
    /// A mailbox here held it for its person's approval.
    #[serde(default)]
    pub held: bool,
    /// Asked with `wait_first_answer_ms`: where it stood once its
    /// recipient first answered (or the machine was found offline, or the
    /// wait ended), as `message_status` would show it then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<OutboxView>,
    /// Asked with `wait_first_answer_ms`: the sending mailbox then, as
    /// `mailbox_state` would show it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailbox_state: Option<super::MailboxStateView>,
}

/// `receipts MAILBOX`: what a mailbox tells senders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptsView {
    /// The mailbox (`@`: the owner's).
    pub mailbox: String,
    /// Whether senders learn when their mail was read here. (Delivered,
    /// held, approved, rejected, deferred and refused are always told.)
    pub read: bool,
}

/// Where a sent message stands, as `outbox` and `message_status` say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageState {
    /// Accepted and durable here, on its way (no answer from the
    /// recipient yet).
    Queued,
    /// Handed to a carrier, an always-on member that holds it until the
    /// offline recipient connects (this machine keeps trying too).
    Carried,
    /// In the recipient mailbox's inbox.
    Delivered,
    /// Stored by the recipient, held for its person's approval.
    Held,
    /// Its person approved it: in the inbox now.
    Approved,
    /// Its person rejected it (or it expired unapproved); `reason` says.
    Rejected,
    /// In the inbox, but the recipient mailbox's daily wake budget is
    /// spent: nothing wakes a session for it before `deferred_until`.
    Deferred,
    /// A session or a person there read it (marked read: `read`,
    /// `check_inbox`, a hook, a wake run that exited 0).
    Read,
    /// Expired undelivered, or could not be sent; `reason` says.
    Failed,
    /// The recipient refused it; `reason` says why, with its code.
    Refused,
}

impl MessageState {
    /// The name in JSON and on screen.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageState::Queued => "queued",
            MessageState::Carried => "carried",
            MessageState::Delivered => "delivered",
            MessageState::Held => "held",
            MessageState::Approved => "approved",
            MessageState::Rejected => "rejected",
            MessageState::Deferred => "deferred",
            MessageState::Read => "read",
            MessageState::Failed => "failed",
            MessageState::Refused => "refused",
        }
    }
}

impl MessageState {
    /// Where the state comes in a message's life: queued, then carried,
    /// then what the recipient did on arrival (delivered, held,
    /// refused; or the sender's own `failed`), then its person's
    /// decision (approved, rejected), then a deferral, then read.
    /// Receipts may arrive in any order (one directly, one through a
    /// carrier), so states are kept in this order, and the status is
    /// the furthest one.
    pub fn rank(self) -> u8 {
        match self {
            MessageState::Queued => 0,
            MessageState::Carried => 1,
            MessageState::Delivered
            | MessageState::Held
            | MessageState::Refused
            | MessageState::Failed => 2,
            MessageState::Approved | MessageState::Rejected => 3,
            MessageState::Deferred => 4,
            MessageState::Read => 5,
        }
    }
}

impl std::fmt::Display for MessageState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One state a sent message went through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateView {
    /// Which.
    pub state: MessageState,
    /// When, RFC 3339 (the recipient's clock for what it reported).
    pub at: String,
    /// Why (rejected, refused, failed), or by which machine (carried).
    #[serde(default)]
    pub reason: Option<String>,
    /// The recipient's stable code, for `refused` (`no_mailbox`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// For `deferred`: until when, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// The machine that decided it: the recipient for what it reported
    /// (delivered, held, approved, rejected, deferred, read, refused), the
    /// carrier for `carried`, the sending machine for `queued` and
    /// `failed`. (Absent from a daemon older than the field, or for a
    /// `carried` whose carrier was not recorded.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// What a machine did with a broadcast copy: delivered to so many of its
/// mailboxes, dropped for so many, and judged so many not at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountsView {
    /// Mailboxes it was delivered to.
    pub delivered: u32,
    /// Candidate mailboxes it was dropped for.
    pub dropped: u32,
    /// Mailboxes it did not judge it for at all.
    #[serde(default)]
    pub skipped: u32,
    /// Why it skipped them: `held_sender` (it holds mail from this
    /// machine), `paused` (its person paused inbound mail), `busy` (the
    /// mailboxes' wake budgets are spent); absent when none was skipped
    /// (or the machine did not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<super::SkipReason>,
    /// All of it in words, with what to do about mailboxes skipped
    /// ("bob-laptop judged none of its mailboxes: it holds mail from
    /// ada-desk; …").
    #[serde(default)]
    pub words: String,
}

impl CountsView {
    /// What `machine` did with a copy `sender` (this machine) sent it, in
    /// words, with what to do about mailboxes it skipped.
    pub fn sentence(&self, machine: &str, sender: &str) -> String {
        let judged = format!(
            "{machine} delivered it to {} of its mailboxes, dropped it for {}",
            self.delivered, self.dropped
        );
        if self.skipped == 0 {
            return judged;
        }
        let why = match self.reason {
            Some(super::SkipReason::HeldSender) => format!(
                "it holds mail from {sender}; `agentmesh trust {sender}` there lets it judge the next"
            ),
            Some(super::SkipReason::Paused) => {
                "its person paused inbound mail; `agentmesh resume` there lets it judge the next"
                    .to_owned()
            }
            Some(super::SkipReason::Busy) => {
                "their daily wake budgets are spent; `agentmesh wake set MAILBOX claude|codex --budget N` there raises one"
                    .to_owned()
            }
            None => "it did not say why".to_owned(),
        };
        if self.delivered == 0 && self.dropped == 0 {
            format!("{machine} judged none of its mailboxes: {why}")
        } else {
            let mailboxes = if self.skipped == 1 {
                "1 mailbox".to_owned()
            } else {
                format!("{} mailboxes", self.skipped)
            };
            format!("{judged}, and judged {mailboxes} not at all: {why}")
        }
    }
}
