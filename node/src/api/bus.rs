//! The bus's views: broadcasts and their copies, not_for_me notes, the
//! bus log and stats, the audit log, profiles and the team's directory.

use serde::{Deserialize, Serialize};

/// `broadcast`: the machines it went to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BroadcastView {
    /// The broadcast (every copy's thread, so replies to any copy are in
    /// one conversation).
    pub id: String,
    /// One copy per member machine, this one first; `outbox` shows each
    /// one's counts as they arrive.
    pub machines: Vec<BroadcastCopyView>,
}

/// One machine's copy of a broadcast.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BroadcastCopyView {
    /// The machine.
    pub machine: String,
    /// The copy's id (as `outbox` lists it).
    pub id: String,
    /// This machine (judged here, no envelope).
    pub local: bool,
}

/// A `not_for_me` note, as `profile show` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoteView {
    /// When, RFC 3339.
    pub at: String,
    /// The delivered broadcast it was said of.
    pub id: String,
    /// What the session said.
    pub note: String,
}

/// `not_for_me`: the note kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotForMeView {
    /// The broadcast it was said of.
    pub id: String,
    /// The mailbox it is kept for.
    pub address: String,
    /// Notes the mailbox has now (the last 20 are kept; the judge reads
    /// the last 5).
    pub notes: usize,
}

/// What `bus log` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BusEvent {
    /// A broadcast was judged for a mailbox and delivered to it.
    BroadcastDelivered,
    /// A broadcast was judged for a mailbox and dropped for it.
    BroadcastDropped,
    /// A machine reported what it did with a broadcast copy.
    BroadcastCounts,
    /// A broadcast was judged for none (or not all) of this machine's
    /// mailboxes (`skipped`, `reason`).
    BroadcastSkipped,
    /// A session said a broadcast was not for it.
    NotForMe,
    /// A member's directory record was refused whole.
    DirectoryRefused,
    /// A mailbox became tainted (received tainted mail, or marked).
    Tainted,
    /// A mailbox's taint was cleared (its person spoke, or unmarked it).
    TaintCleared,
    /// A tainted mailbox was refused something (`set_profile`).
    TaintRefused,
    /// A mailbox's daily wake budget is spent: no run, no Stop-hook
    /// block, no broadcast until it resets.
    Budget,
    /// Tainted mail started no wake run: it waits for its person.
    Taint,
    /// A wake run started.
    WakeStarted,
    /// A wake run ended.
    WakeEnded,
}

impl BusEvent {
    const ALL: [BusEvent; 13] = [
        BusEvent::BroadcastDelivered,
        BusEvent::BroadcastDropped,
        BusEvent::BroadcastCounts,
        BusEvent::BroadcastSkipped,
        BusEvent::NotForMe,
        BusEvent::DirectoryRefused,
        BusEvent::Tainted,
        BusEvent::TaintCleared,
        BusEvent::TaintRefused,
        BusEvent::Budget,
        BusEvent::Taint,
        BusEvent::WakeStarted,
        BusEvent::WakeEnded,
    ];

    /// The bus event an audit entry's event name is, if it is one.
    pub fn of(event: &str) -> Option<BusEvent> {
        BusEvent::ALL.into_iter().find(|e| e.as_str() == event)
    }

    /// Its name, as the audit log and the API give it.
    pub fn as_str(self) -> &'static str {
        match self {
            BusEvent::BroadcastDelivered => "broadcast_delivered",
            BusEvent::BroadcastDropped => "broadcast_dropped",
            BusEvent::BroadcastCounts => "broadcast_counts",
            BusEvent::BroadcastSkipped => "broadcast_skipped",
            BusEvent::NotForMe => "not_for_me",
            BusEvent::DirectoryRefused => "directory_refused",
            BusEvent::Tainted => "tainted",
            BusEvent::TaintCleared => "taint_cleared",
            BusEvent::TaintRefused => "taint_refused",
            BusEvent::Budget => "budget",
            BusEvent::Taint => "taint",
            BusEvent::WakeStarted => "wake_started",
            BusEvent::WakeEnded => "wake_ended",
        }
    }
}

/// One of the bus's decisions (`bus log`): an audit entry, with the
/// judgment's figures for a broadcast judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BusLogEntry {
    /// When, RFC 3339.
    pub at: String,
    /// What.
    pub event: BusEvent,
    /// The mailbox it concerns (`NAME@MACHINE`; `*@MACHINE` for a
    /// machine's counts).
    pub mailbox: Option<String>,
    /// Who sent the broadcast.
    pub sender: Option<String>,
    /// The broadcast's id as it arrived here (for `not_for_me`: the
    /// delivered copy's).
    pub id: Option<String>,
    /// The SHA-256 of its body, never the body.
    pub body_sha256: Option<String>,
    /// The judge's probability (absent when a judge command failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// The preset, and its threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<crate::api::Preset>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The preset's threshold.
    pub threshold: Option<f64>,
    /// Which judge: `builtin`, `command` or `agent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<String>,
    /// Which stage decided: `builtin`, `command` or `agent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// The agent's reason, when the agent decided (its words: data, not
    /// instructions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Why a judge gave no score (its code and message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For `broadcast_skipped`: how many mailboxes were not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<u32>,
    /// For `broadcast_skipped`: why (`held_sender`, `paused`, `busy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::api::SkipReason>,
    /// The decision in words.
    pub detail: String,
}

/// One mailbox's line of `bus stats` (or all of them: `total`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BusStatsRow {
    /// `NAME@MACHINE`, `@MACHINE` for the owner's; `*` for the total.
    pub mailbox: String,
    /// Broadcasts delivered to it.
    pub delivered: u64,
    /// Broadcasts judged for it and dropped.
    pub dropped: u64,
    /// Wake runs that a delivered broadcast started and that ended done
    /// (exit 0; failed, stopped or cut-off runs are `wake list`'s).
    pub wake_runs: u64,
    /// Those whose session sent nothing and marked nothing.
    pub silent_runs: u64,
    /// `silent_runs / wake_runs`; `null` without runs.
    pub silent_wake_share: Option<f64>,
}

/// `bus stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BusStatsView {
    /// The oldest judgment counted (RFC 3339): the audit log keeps
    /// `[messages] audit_retention`; `null` when there is none.
    pub judged_since: Option<String>,
    /// The wake runs counted are the last this many kept.
    pub runs_kept: usize,
    /// Per mailbox, by name.
    pub mailboxes: Vec<BusStatsRow>,
    /// All mailboxes together.
    pub total: BusStatsRow,
}

/// `bus log`: the bus's decisions, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BusLogView {
    /// The entries.
    pub entries: Vec<BusLogEntry>,
}

/// `audit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditView {
    /// When, RFC 3339.
    pub at: String,
    /// When, as Unix milliseconds: the time recorded, to the millisecond
    /// (`at` is to the second).
    #[serde(default)]
    pub at_ms: u64,
    /// What happened.
    pub event: String,
    /// The other machine, if any.
    pub peer: Option<String>,
    /// The sender of the message, if any.
    pub sender: Option<String>,
    /// Its recipient.
    pub recipient: Option<String>,
    /// Its id.
    pub id: Option<String>,
    /// The SHA-256 of its body.
    pub body_sha256: Option<String>,
    /// Details.
    pub detail: String,
}

/// A mailbox's profile, goal, status and preset: `profile set` and
/// `profile show`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileView {
    /// Its address: `NAME@MACHINE`, or `@MACHINE` for the owner's.
    pub address: String,
    /// Its name; `None` for the owner's mailbox.
    pub mailbox: Option<String>,
    /// What its session knows and works on (at most 1 KiB).
    pub profile: String,
    /// Its current objective (at most 256 bytes).
    pub goal: String,
    /// What its session is doing.
    pub status: crate::api::SessionStatus,
    /// When a session of it was last active (RFC 3339), if since the
    /// daemon started.
    pub last_active: Option<String>,
    /// The preset its broadcasts are judged with.
    pub preset: crate::api::Preset,
    /// Whether that is the machine's default (`[bus] preset`), not its own.
    pub preset_is_default: bool,
    /// Its `not_for_me` notes, oldest first (the last 20; the judge reads
    /// the last 5).
    #[serde(default)]
    pub notes: Vec<NoteView>,
    /// Its daily wake budget today (what is left, when it resets) and its
    /// runs: for a mailbox of this machine, not the owner's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<super::WakeStatusView>,
}

/// `profile show`: this machine's mailboxes (or the one asked for).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfilesView {
    /// The mailboxes, the owner's first, then by name.
    pub mailboxes: Vec<ProfileView>,
}

/// A mailbox in the team's directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectoryMailboxView {
    /// Its address: `NAME@MACHINE`, or `@MACHINE` for the owner's.
    pub address: String,
    /// What its session knows and works on, as written by that machine's
    /// sessions (as claimed; text, never instructions).
    pub profile: String,
    /// Its current objective, as written by them.
    pub goal: String,
    /// What its session is doing, as its machine says; `unreachable`
    /// when its machine is not reachable from here now.
    pub status: crate::api::MailboxStatus,
    /// When a session of it was last active (RFC 3339), if known.
    pub last_active: Option<String>,
}

/// A member machine in the team's directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectoryMachineView {
    /// Its name.
    pub name: String,
    /// The person who runs it.
    pub owner: String,
    /// Its PeerId.
    #[serde(default)]
    pub peer_id: String,
    /// Whether it is this machine.
    pub this_machine: bool,
    /// Whether it is reachable now: connected, and heard from (a ping
    /// answered) in the last 45 s. This machine always is.
    #[serde(default)]
    pub reachable: bool,
    /// When it was last heard from (RFC 3339): now while reachable; null
    /// if never since this daemon started.
    #[serde(default)]
    pub last_seen: Option<String>,
    /// Whether its directory record has reached this machine (a member
    /// that never connected since, or runs an older version, has none).
    pub known: bool,
    /// Whether it is a carrier: always on, it holds mail for members
    /// that are offline (`carry = true` in its configuration).
    pub always_on: bool,
    /// The record's sequence number, if known.
    pub seq: Option<u64>,
    /// When its record was made (RFC 3339), if known.
    pub updated_at: Option<String>,
    /// Its mailboxes (on this page).
    pub mailboxes: Vec<DirectoryMailboxView>,
}

/// `directory`: the team's machines and their mailboxes, a page at a time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectoryPage {
    /// The team's name, if this machine is in one.
    pub team: Option<String>,
    /// Member machines, by name (a machine whose mailboxes go on past this
    /// page appears again on the next).
    pub machines: Vec<DirectoryMachineView>,
    /// Give this as `after` for the next page; `None` on the last.
    pub next_after: Option<String>,
}

/// A mailbox's `not_for_me` notes kept (the judge reads the last
/// [`agentmesh_judge::NOTES_READ`]).
pub const MAX_NOTES: usize = 20;

/// The longest `not_for_me` note, bytes.
pub const MAX_NOTE_BYTES: usize = 1024;

/// How much of a broadcast's text is kept with a note about it, bytes:
/// what the judge compares later broadcasts with.
pub const MAX_NOTED_TEXT: usize = 2048;
