//! The error codes a client sees: a contract (scripts and agents match on
//! them), so each is defined here, once, and the code that answers with
//! one names it from here. `agentmesh --json` prints them as
//! `{"error":{"code":…}}`; the local API sends them in `error.code`.
//!
//! A code a client does not know (a newer daemon's) reads as
//! [`ErrorCode::Unknown`]; the message still says what went wrong.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Defines [`ErrorCode`]: each variant and its word.
macro_rules! error_codes {
    ($($(#[$meta:meta])* $variant:ident = $word:literal,)+) => {
        /// A stable error code: what clients match on.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[$meta])* $variant,)+
        }

        impl ErrorCode {
            /// Every code, for checks that they stay distinct.
            pub const ALL: &[ErrorCode] = &[$(ErrorCode::$variant,)+];

            /// The code's word, as clients see it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $word,)+
                }
            }

            /// The code whose word is `word`, if any.
            pub fn from_word(word: &str) -> Option<ErrorCode> {
                match word {
                    $($word => Some(ErrorCode::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    /// `admin`.
    Admin = "admin",
    /// `admin_cannot_leave`.
    AdminCannotLeave = "admin_cannot_leave",
    /// `already_in_team`.
    AlreadyInTeam = "already_in_team",
    /// `ambiguous_id`.
    AmbiguousId = "ambiguous_id",
    /// `attach_timeout`.
    AttachTimeout = "attach_timeout",
    /// `bad_address`.
    BadAddress = "bad_address",
    /// `bad_id`.
    BadId = "bad_id",
    /// `bad_input`.
    BadInput = "bad_input",
    /// `bad_mailbox`.
    BadMailbox = "bad_mailbox",
    /// `bad_name`.
    BadName = "bad_name",
    /// `bad_owner`.
    BadOwner = "bad_owner",
    /// `bad_path`.
    BadPath = "bad_path",
    /// `bad_ticket`.
    BadTicket = "bad_ticket",
    /// `bad_ttl`.
    BadTtl = "bad_ttl",
    /// `bad_who`.
    BadWho = "bad_who",
    /// `bound`.
    Bound = "bound",
    /// `busy`.
    Busy = "busy",
    /// `connect_failed`.
    ConnectFailed = "connect_failed",
    /// `forbidden`.
    Forbidden = "forbidden",
    /// `founder_unreachable`.
    FounderUnreachable = "founder_unreachable",
    /// `frame_too_large`.
    FrameTooLarge = "frame_too_large",
    /// `held`.
    Held = "held",
    /// `idle`: a client attached for requests only sent none for
    /// [`crate::api::REQUEST_IDLE`]; its connection was closed before
    /// anything more was read (a request it sent meanwhile was not run).
    Idle = "idle",
    /// `internal`.
    Internal = "internal",
    /// `judge_bad_answer`: a judge command's answer was not `{"p": 0.0-1.0}`.
    JudgeBadAnswer = "judge_bad_answer",
    /// `judge_failed`: a judge command exited non-zero or was killed.
    JudgeFailed = "judge_failed",
    /// `judge_timeout`: a judge command did not answer in time.
    JudgeTimeout = "judge_timeout",
    /// `judge_unavailable`: a judge command could not be started.
    JudgeUnavailable = "judge_unavailable",
    /// `join_refused`.
    JoinRefused = "join_refused",
    /// `mailbox_bound`: the mailbox is bound to another folder (`allow
    /// --move` moves it).
    MailboxBound = "mailbox_bound",
    /// `malformed_frame`.
    MalformedFrame = "malformed_frame",
    /// `no_addresses`.
    NoAddresses = "no_addresses",
    /// `not_a_code`.
    NotACode = "not_a_code",
    /// `not_admin`.
    NotAdmin = "not_admin",
    /// `not_approved`.
    NotApproved = "not_approved",
    /// `not_attached`.
    NotAttached = "not_attached",
    /// `not_bound`.
    NotBound = "not_bound",
    /// `not_held`.
    NotHeld = "not_held",
    /// `not_in_team`.
    NotInTeam = "not_in_team",
    /// `outbox_full`.
    OutboxFull = "outbox_full",
    /// `protocol`.
    Protocol = "protocol",
    /// `refused`.
    Refused = "refused",
    /// `request_cancelled`.
    RequestCancelled = "request_cancelled",
    /// `revoked`.
    Revoked = "revoked",
    /// `revoked_recipient`.
    RevokedRecipient = "revoked_recipient",
    /// `shutting_down`.
    ShuttingDown = "shutting_down",
    /// `store`.
    Store = "store",
    /// `ticket_expired`.
    TicketExpired = "ticket_expired",
    /// `not_a_broadcast`: `not_for_me` names a message that is no broadcast.
    NotABroadcast = "not_a_broadcast",
    /// `too_large`.
    TooLarge = "too_large",
    /// `unknown`.
    Unknown = "unknown",
    /// `unknown_frame`.
    UnknownFrame = "unknown_frame",
    /// `unknown_join`.
    UnknownJoin = "unknown_join",
    /// `unknown_machine`.
    UnknownMachine = "unknown_machine",
    /// `unknown_member`.
    UnknownMember = "unknown_member",
    /// `unknown_message`.
    UnknownMessage = "unknown_message",
    /// `unknown_op`.
    UnknownOp = "unknown_op",
    /// `unknown_recipient`.
    UnknownRecipient = "unknown_recipient",
    /// `unknown_request`.
    UnknownRequest = "unknown_request",
    /// `version_mismatch`.
    VersionMismatch = "version_mismatch",
    /// `wrong_code`.
    WrongCode = "wrong_code",
    /// `hop_limit`.
    HopLimit = "hop_limit",
    /// `rate_limited`.
    RateLimited = "rate_limited",
    /// `turn_limit`.
    TurnLimit = "turn_limit",
    /// `turn_quota`: a mailbox handling peer mail sent its allowance of asks,
    /// tells or broadcasts until its person speaks.
    TurnQuota = "turn_quota",
    /// `tainted`: a tainted mailbox may not change its profile.
    Tainted = "tainted",
    /// `not_the_sender`.
    NotTheSender = "not_the_sender",
    /// `no_mailbox`.
    NoMailbox = "no_mailbox",
    /// `folder_not_allowed`.
    FolderNotAllowed = "folder_not_allowed",
    /// `held_full`.
    HeldFull = "held_full",
    /// `person_exists`: a new person was asked for under a name the team's
    /// persons have (it would merge two people silently).
    PersonExists = "person_exists",
    /// `unknown_person`: an existing person was asked for, and there is none
    /// of that name.
    UnknownPerson = "unknown_person",
    /// `sender_revoked`: held mail whose sending machine was revoked (or
    /// left) since; it can only be rejected.
    SenderRevoked = "sender_revoked",
    /// `empty_text`: a message with no text (or only whitespace).
    EmptyText = "empty_text",
    /// `unknown_run`: `wake stop` named no wake run.
    UnknownRun = "unknown_run",
    /// `unknown_relay`: `relays forget` named no relay this machine knows.
    UnknownRelay = "unknown_relay",
    /// `relay_configured`: `relays forget` named a relay config.toml (or
    /// `--relay`) gives; it is removed there.
    RelayConfigured = "relay_configured",
    /// `empty_passphrase`: `backup` was given an empty passphrase.
    EmptyPassphrase = "empty_passphrase",
    /// `wrong_passphrase`: the passphrase does not open the backup.
    WrongPassphrase = "wrong_passphrase",
    /// `backup_truncated`: the backup file is shorter than it says.
    BackupTruncated = "backup_truncated",
    /// `backup_tampered`: the backup file was changed since it was made.
    BackupTampered = "backup_tampered",
    /// `not_a_backup`: the file is not an agentmesh backup.
    NotABackup = "not_a_backup",
    /// `backup_too_new`: the backup's store is newer than this build reads.
    BackupTooNew = "backup_too_new",
    /// `home_has_key`: `backup import` into a home that has a key.
    HomeHasKey = "home_has_key",
    /// `home_not_empty`: `backup import` into a home that holds files.
    HomeNotEmpty = "home_not_empty",
    /// `backup_failed`: reading or writing a backup failed (the disk).
    BackupFailed = "backup_failed",
    /// `already_running`: a daemon runs on this home already.
    AlreadyRunning = "already_running",
    /// `no_identity`: the home has no key (no `agentmesh init`).
    NoIdentity = "no_identity",
    /// `daemon_running`: this needs the daemon stopped (`agentmesh down`).
    DaemonRunning = "daemon_running",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ErrorCode, D::Error> {
        let word = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(ErrorCode::from_word(&word).unwrap_or(ErrorCode::Unknown))
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    #[test]
    fn every_code_is_distinct_snake_case() {
        let set: std::collections::HashSet<&str> =
            ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(set.len(), ErrorCode::ALL.len());
        assert!(ErrorCode::ALL.iter().all(|c| {
            c.as_str()
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ch == '_')
        }));
        assert_eq!(ErrorCode::NotInTeam.as_str(), "not_in_team");
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_word(c.as_str()), Some(*c));
            let json = serde_json::to_string(c).unwrap();
            assert_eq!(serde_json::from_str::<ErrorCode>(&json).unwrap(), *c);
        }
    }

    #[test]
    fn a_code_this_build_does_not_know_reads_as_unknown() {
        let c: ErrorCode = serde_json::from_str("\"a_code_from_the_future\"").unwrap();
        assert_eq!(c, ErrorCode::Unknown);
    }
}
