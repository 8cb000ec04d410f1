//! The guard's ops: a hop reset, taint (and, in test builds, moving the
//! clock, which expires what the calendar does).

use serde::{Deserialize, Serialize};

use super::requests;
use crate::api;

/// The guard wing's operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", content = "args", rename_all = "snake_case")]
pub enum GuardOp {
    /// [`HopReset`].
    HopReset(HopReset),
    /// [`Taint`].
    Taint(Taint),
    /// [`ClockAdvance`].
    #[cfg(feature = "test-clock")]
    ClockAdvance(ClockAdvance),
}

/// The mailbox's person spoke: what it sends next is hop 0 again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HopReset {
    /// The mailbox (`@` for the owner's); default: the attached one,
    /// else the owner's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailbox: Option<String>,
}

/// A person marks a mailbox tainted (its session reads text others
/// wrote), or clears its taint whole (`on: false`: the mark and what it
/// caught from tainted mail). Answers its [`TaintView`](api::TaintView).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Taint {
    /// The mailbox (a name on this machine).
    pub mailbox: String,
    /// Mark it (true) or clear it (false).
    pub on: bool,
}

/// Move this daemon's clock forward (test builds only).
#[cfg(feature = "test-clock")]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockAdvance {
    /// How far, in seconds.
    pub secs: u64,
}

requests! {
    HopReset => api::MailboxStateView = GuardOp::HopReset;
    Taint => api::TaintView = GuardOp::Taint;
}

#[cfg(feature = "test-clock")]
requests! {
    ClockAdvance => api::ClockView = GuardOp::ClockAdvance;
}
