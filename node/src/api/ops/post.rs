//! A letter's ops: send, the inbox and its reads, the outbox and a
//! message's status, receipts, `take`, a mailbox's state, the audit log.

use serde::{Deserialize, Serialize};

use super::requests;
use crate::api;

/// The post wing's operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", content = "args", rename_all = "snake_case")]
pub enum PostOp {
    /// [`Send`].
    Send(Send),
    /// [`Inbox`].
    Inbox(Inbox),
    /// [`Read`].
    Read(Read),
    /// [`Outbox`].
    Outbox,
    /// [`MessageStatus`].
    MessageStatus(MessageStatus),
    /// [`Receipts`].
    Receipts(Receipts),
    /// [`Take`].
    Take(Take),
    /// [`MailboxState`].
    MailboxState(MailboxState),
    /// [`Audit`].
    Audit(Audit),
}

/// Send a message. The answer (its id) comes once it is durable.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Send {
    /// `MAILBOX@MACHINE`, or `@MACHINE` for the machine's owner.
    pub to: String,
    /// The message.
    pub text: String,
    /// An ask (a reply is expected) rather than a tell.
    #[serde(default)]
    pub ask: bool,
    /// The id of the message this one answers.
    #[serde(default)]
    pub reply_to: Option<String>,
    /// The sending mailbox; the attached mailbox, else the owner's.
    #[serde(default)]
    pub from_mailbox: Option<String>,
    /// Answer once the recipient first answers (or is found offline),
    /// waiting at most this long (capped at 10 s), with where the
    /// message stands then and the sending mailbox's state: one round
    /// trip instead of a send and a poll. None: answer once durable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_first_answer_ms: Option<u64>,
}

/// Received messages, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inbox {
    /// Only this mailbox (`@` for the owner's).
    #[serde(default)]
    pub mailbox: Option<String>,
    /// Only unread messages.
    #[serde(default)]
    pub unread: bool,
    /// Only messages after this seq (paging).
    #[serde(default)]
    pub after_seq: Option<u64>,
    /// At most this many (default and cap: 1000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Show one received message and mark it read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Read {
    /// The message id.
    pub id: String,
}

/// Sent messages and where each stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outbox;

/// Where one sent message stands. Answers its
/// [`OutboxView`](api::OutboxView).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageStatus {
    /// The message id (or a unique prefix of it, at least 4
    /// characters, among the messages `outbox` lists).
    pub id: String,
}

/// Shows, or sets, whether a mailbox tells senders when their mail
/// was read. Answers a [`ReceiptsView`](api::ReceiptsView).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipts {
    /// The mailbox (a name on this machine, or `@`: the owner's).
    pub mailbox: String,
    /// Send read receipts (`Some(true)`), or not; `None` shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<bool>,
}

/// A mailbox's unread messages, oldest first, marked read unless
/// `peek` (how an agent's session sees its mail: `check_inbox`, and a
/// hook's injection). Two takes never return one message twice.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Take {
    /// The mailbox (`@` for the owner's); default: the attached one,
    /// else the owner's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailbox: Option<String>,
    /// At most this many (default and cap: 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// At most about this many bytes of messages (as JSON), and at
    /// least one message (default and cap: 640 KiB, one answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<usize>,
    /// Leave them unread.
    #[serde(default)]
    pub peek: bool,
    /// A Stop hook asks: what it takes keeps its session working, so
    /// it costs the mailbox a wake from its daily budget, and takes
    /// nothing once that is spent.
    #[serde(default)]
    pub stop: bool,
}

/// A mailbox's unread and held counts and the hop it is handling.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MailboxState {
    /// The mailbox (`@` for the owner's); default: the attached one,
    /// else the owner's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailbox: Option<String>,
}

/// The audit log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Audit {
    /// Only entries from the last this many seconds.
    #[serde(default)]
    pub since_secs: Option<u64>,
}

requests! {
    Send => api::SentView = PostOp::Send;
    Inbox => api::InboxPage = PostOp::Inbox;
    Read => api::MessageView = PostOp::Read;
    Outbox => Vec<api::OutboxView> = |_| PostOp::Outbox;
    MessageStatus => api::OutboxView = PostOp::MessageStatus;
    Receipts => api::ReceiptsView = PostOp::Receipts;
    Take => api::Taken = PostOp::Take;
    MailboxState => api::MailboxStateView = PostOp::MailboxState;
    Audit => Vec<api::AuditView> = PostOp::Audit;
}
