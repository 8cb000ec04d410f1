//! The bus's ops: profiles, broadcasts, not_for_me notes, the bus's log
//! and stats.

use serde::{Deserialize, Serialize};

use super::requests;
use crate::api;

/// The bus wing's operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", content = "args", rename_all = "snake_case")]
pub enum BusOp {
    /// [`ProfileSet`].
    ProfileSet(ProfileSet),
    /// [`ProfileShow`].
    ProfileShow(ProfileShow),
    /// [`Broadcast`].
    Broadcast(Broadcast),
    /// [`NotForMe`].
    NotForMe(NotForMe),
    /// [`BusStats`].
    BusStats,
    /// [`BusLog`].
    BusLog(BusLog),
}

/// Sets a mailbox's profile, goal or preset (each left as it is when
/// absent). Answers its [`ProfileView`](api::ProfileView).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileSet {
    /// The mailbox (`@` for the owner's); default: the attached one,
    /// else the owner's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailbox: Option<String>,
    /// What its session knows and works on (at most 1 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Its current objective (at most 256 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// The preset its broadcasts are judged with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<api::Preset>,
    /// Set by the CLI when its person runs it at an interactive terminal:
    /// then a tainted mailbox's profile may be set too (its person's
    /// decision, as clearing the taint is). An agent session's call, or a
    /// command with no terminal, is refused while the mailbox is tainted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_terminal: bool,
}

/// This machine's mailboxes' profiles, goals, statuses and presets
/// ([`ProfilesView`](api::ProfilesView)); only `mailbox` if given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileShow {
    /// The mailbox (`@` for the owner's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailbox: Option<String>,
}

/// Sends one message to every mailbox in the team it concerns, as
/// each receiving machine's judge decides
/// ([`BroadcastView`](api::BroadcastView)).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Broadcast {
    /// The message.
    pub text: String,
    /// The sending mailbox; the attached mailbox, else the owner's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_mailbox: Option<String>,
}

/// Says a broadcast delivered to a mailbox was not for it, and why
/// ([`NotForMeView`](api::NotForMeView)).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NotForMe {
    /// The delivered broadcast's id (or a unique prefix).
    pub id: String,
    /// Why it was not for this session.
    #[serde(default)]
    pub note: String,
    /// The mailbox (`@` for the owner's); default: the attached one,
    /// else the owner's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailbox: Option<String>,
}

/// What the bus delivered and dropped, and the wake runs broadcasts
/// started that did nothing ([`BusStatsView`](api::BusStatsView)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusStats;

/// The bus's decisions ([`BusLogView`](api::BusLogView)).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BusLog {
    /// Only entries from the last this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_secs: Option<u64>,
    /// Only entries about this mailbox (`NAME@MACHINE`, `NAME@`, or
    /// `@` for the owner's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailbox: Option<String>,
}

requests! {
    ProfileSet => api::ProfileView = BusOp::ProfileSet;
    ProfileShow => api::ProfilesView = BusOp::ProfileShow;
    Broadcast => api::BroadcastView = BusOp::Broadcast;
    NotForMe => api::NotForMeView = BusOp::NotForMe;
    BusStats => api::BusStatsView = |_| BusOp::BusStats;
    BusLog => api::BusLogView = BusOp::BusLog;
}
