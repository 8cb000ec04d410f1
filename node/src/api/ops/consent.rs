//! Consent's ops: held mail and its approval, trust, folders and
//! mailboxes, pause and resume.

use serde::{Deserialize, Serialize};

use super::requests;
use crate::api;

/// The consent wing's operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", content = "args", rename_all = "snake_case")]
pub enum ConsentOp {
    /// [`Held`].
    Held,
    /// [`Approve`].
    Approve(Approve),
    /// [`Reject`].
    Reject(Reject),
    /// [`Trust`].
    Trust(Trust),
    /// [`Allow`].
    Allow(Allow),
    /// [`Deny`].
    Deny(Deny),
    /// [`Mailboxes`].
    Mailboxes,
    /// [`Pause`].
    Pause,
    /// [`Resume`].
    Resume,
    /// [`MailboxFor`].
    MailboxFor(MailboxFor),
}

/// Messages held for approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held;

/// Deliver a held message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approve {
    /// The message id.
    pub id: String,
}

/// Drop a held message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reject {
    /// The message id.
    pub id: String,
    /// Why, for the audit log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Stop holding a machine's mail (or, `off`, hold it again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trust {
    /// Its machine name.
    pub machine: String,
    /// Hold its mail again: what was delivered stays delivered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub off: bool,
    /// Also approve what is held from it now (each audited `approved`,
    /// by whoever asked).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approve_held: bool,
}

/// Opt a folder in: its mailbox receives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allow {
    /// The folder.
    pub path: String,
    /// The mailbox name; default: the folder's base name.
    #[serde(default)]
    pub mailbox: Option<String>,
    /// Move the mailbox here when it is bound to another folder (else
    /// that is refused `mailbox_bound`).
    #[serde(default, rename = "move", skip_serializing_if = "std::ops::Not::not")]
    pub move_bound: bool,
}

/// Opt a folder out: its mailbox refuses mail.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Deny {
    /// The folder, as it was allowed (empty to name the mailbox only).
    #[serde(default)]
    pub path: String,
    /// Or the mailbox's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailbox: Option<String>,
}

/// The mailboxes: each folder opted in or out, and its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mailboxes;

/// Hold all inbound mail until `resume`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause;

/// Deliver inbound mail again, and what `pause` held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume;

/// The mailbox a folder is: the one bound to it or to its nearest
/// bound ancestor, else its base name, unless that name is bound to
/// another folder or folds to nothing (then it has none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MailboxFor {
    /// The folder.
    pub path: String,
}

requests! {
    Held => Vec<api::MessageView> = |_| ConsentOp::Held;
    Approve => api::ResolvedView = ConsentOp::Approve;
    Reject => api::ResolvedView = ConsentOp::Reject;
    Trust => api::TrustedView = ConsentOp::Trust;
    Allow => api::BindingView = ConsentOp::Allow;
    Deny => api::BindingView = ConsentOp::Deny;
    Mailboxes => Vec<api::BindingView> = |_| ConsentOp::Mailboxes;
    Pause => api::PausedView = |_| ConsentOp::Pause;
    Resume => api::PausedView = |_| ConsentOp::Resume;
    MailboxFor => api::MailboxFor = ConsentOp::MailboxFor;
}
