//! The team's ops: the team, invites, joining, admitting, revoking, the
//! directory.

use serde::{Deserialize, Serialize};

use super::requests;
use crate::api;

/// The team part's operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", content = "args", rename_all = "snake_case")]
pub enum TeamOp {
    /// [`TeamShow`].
    TeamShow,
    /// [`TeamCreate`].
    TeamCreate(TeamCreate),
    /// [`TeamLeave`].
    TeamLeave,
    /// [`Invite`].
    Invite(Invite),
    /// [`JoinStart`].
    JoinStart(JoinStart),
    /// [`JoinStatus`].
    JoinStatus(JoinStatus),
    /// [`JoinConfirm`].
    JoinConfirm(JoinConfirm),
    /// [`AdmitList`].
    AdmitList,
    /// [`AdmitCode`].
    AdmitCode(AdmitCode),
    /// [`AdmitPerson`].
    AdmitPerson(AdmitPerson),
    /// [`AdmitStatus`].
    AdmitStatus(AdmitStatus),
    /// [`AdmitReject`].
    AdmitReject(AdmitReject),
    /// [`TeamPerson`].
    TeamPerson(TeamPerson),
    /// [`TeamRenew`].
    TeamRenew(TeamRenew),
    /// [`Revoke`].
    Revoke(Revoke),
}

/// The team and its members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TeamShow;

/// Found a team with this machine as its admin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamCreate {
    /// The team's name.
    pub name: String,
    /// The person who runs this machine.
    pub owner: String,
    /// How many days the memberships this founder gives last (default
    /// 180): `team create --member-days`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_days: Option<u32>,
}

/// Leave the team (revoke this machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TeamLeave;

/// Make a single-use invite ticket.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Invite {
    /// Its lifetime in seconds; the configured default if absent.
    #[serde(default)]
    pub ttl_secs: Option<u64>,
}

/// Ask a founder to join its team.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JoinStart {
    /// The ticket.
    pub ticket: String,
    /// This machine's name in the team.
    pub name: String,
    /// The person who runs this machine.
    pub owner: String,
}

/// Where a join stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JoinStatus {
    /// From [`JoinStarted`](api::JoinStarted).
    pub join_id: u64,
}

/// Accept (the team codes match) or decline a join.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JoinConfirm {
    /// From [`JoinStarted`](api::JoinStarted).
    pub join_id: u64,
    /// Whether the person confirmed the team code.
    pub accept: bool,
}

/// Join requests waiting for this admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmitList;

/// Check the pairing code a person typed for a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdmitCode {
    /// The request.
    pub request_id: u64,
    /// The code as typed.
    pub code: String,
}

/// Whose machine a request whose code matched is: the person it is
/// admitted as (what consent compares). Answers the team code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdmitPerson {
    /// The request.
    pub request_id: u64,
    /// The person's name.
    pub person: String,
    /// Whether `person` is one of the team's persons already (the
    /// machine then counts as theirs: mail between their machines is
    /// never held). A name that is (or is not) one already is refused
    /// when this says otherwise, so a claim is never merged silently.
    pub existing: bool,
    /// How many days its membership lasts (default: the team's
    /// `--member-days`, else 180): `admit --days`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<u32>,
}

/// Where an approved request stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdmitStatus {
    /// The request.
    pub request_id: u64,
}

/// Refuse a join request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdmitReject {
    /// The request.
    pub request_id: u64,
}

/// Move a machine to another person (a Person block; founder only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamPerson {
    /// The machine's name.
    pub machine: String,
    /// The person who runs it from now on.
    pub person: String,
}

/// Revoke a member by machine name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Revoke {
    /// The member's machine name.
    pub name: String,
}

/// Extend a member's membership from now (one that lapsed included):
/// `team renew MACHINE [--days N]` (founder only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamRenew {
    /// The machine's name.
    pub machine: String,
    /// For how many days (default: the team's `--member-days`, else 180).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<u32>,
}

requests! {
    TeamShow => api::TeamView = |_| TeamOp::TeamShow;
    TeamCreate => api::TeamView = TeamOp::TeamCreate;
    TeamLeave => api::LeftView = |_| TeamOp::TeamLeave;
    Invite => api::Invite = TeamOp::Invite;
    JoinStart => api::JoinStarted = TeamOp::JoinStart;
    JoinStatus => api::JoinState = TeamOp::JoinStatus;
    JoinConfirm => api::JoinState = TeamOp::JoinConfirm;
    AdmitList => Vec<api::JoinRequestView> = |_| TeamOp::AdmitList;
    AdmitCode => api::AdmitMatched = TeamOp::AdmitCode;
    AdmitPerson => api::AdmitApproved = TeamOp::AdmitPerson;
    AdmitStatus => api::AdmitState = TeamOp::AdmitStatus;
    AdmitReject => api::Done = TeamOp::AdmitReject;
    TeamPerson => api::PersonMoved = TeamOp::TeamPerson;
    TeamRenew => api::Renewed = TeamOp::TeamRenew;
    Revoke => api::RevokedView = TeamOp::Revoke;
}
