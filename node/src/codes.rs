//! The error codes a client sees: a contract (scripts and agents match on
//! them), so each is defined here, once, and the code that answers with
//! one names it from here. `agentmesh --json` prints them as
//! `{"error":{"code":…}}`; the local API sends them in `error.code`.

/// `admin`.
pub const ADMIN: &str = "admin";
/// `admin_cannot_leave`.
pub const ADMIN_CANNOT_LEAVE: &str = "admin_cannot_leave";
/// `already_in_team`.
pub const ALREADY_IN_TEAM: &str = "already_in_team";
/// `ambiguous_id`.
pub const AMBIGUOUS_ID: &str = "ambiguous_id";
/// `attach_timeout`.
pub const ATTACH_TIMEOUT: &str = "attach_timeout";
/// `bad_address`.
pub const BAD_ADDRESS: &str = "bad_address";
/// `bad_id`.
pub const BAD_ID: &str = "bad_id";
/// `bad_input`.
pub const BAD_INPUT: &str = "bad_input";
/// `bad_mailbox`.
pub const BAD_MAILBOX: &str = "bad_mailbox";
/// `bad_name`.
pub const BAD_NAME: &str = "bad_name";
/// `bad_owner`.
pub const BAD_OWNER: &str = "bad_owner";
/// `bad_path`.
pub const BAD_PATH: &str = "bad_path";
/// `bad_ticket`.
pub const BAD_TICKET: &str = "bad_ticket";
/// `bad_ttl`.
pub const BAD_TTL: &str = "bad_ttl";
/// `bad_who`.
pub const BAD_WHO: &str = "bad_who";
/// `bound`.
pub const BOUND: &str = "bound";
/// `busy`.
pub const BUSY: &str = "busy";
/// `connect_failed`.
pub const CONNECT_FAILED: &str = "connect_failed";
/// `forbidden`.
pub const FORBIDDEN: &str = "forbidden";
/// `founder_unreachable`.
pub const FOUNDER_UNREACHABLE: &str = "founder_unreachable";
/// `frame_too_large`.
pub const FRAME_TOO_LARGE: &str = "frame_too_large";
/// `held`.
pub const HELD: &str = "held";
/// `internal`.
pub const INTERNAL: &str = "internal";
/// `judge_bad_answer`: a judge command's answer was not `{"p": 0.0-1.0}`.
pub const JUDGE_BAD_ANSWER: &str = "judge_bad_answer";
/// `judge_failed`: a judge command exited non-zero or was killed.
pub const JUDGE_FAILED: &str = "judge_failed";
/// `judge_timeout`: a judge command did not answer in time.
pub const JUDGE_TIMEOUT: &str = "judge_timeout";
/// `judge_unavailable`: a judge command could not be started.
pub const JUDGE_UNAVAILABLE: &str = "judge_unavailable";
/// `join_refused`.
pub const JOIN_REFUSED: &str = "join_refused";
/// `mailbox_taken`.
pub const MAILBOX_TAKEN: &str = "mailbox_taken";
/// `malformed_frame`.
pub const MALFORMED_FRAME: &str = "malformed_frame";
/// `no_addresses`.
pub const NO_ADDRESSES: &str = "no_addresses";
/// `not_a_code`.
pub const NOT_A_CODE: &str = "not_a_code";
/// `not_admin`.
pub const NOT_ADMIN: &str = "not_admin";
/// `not_approved`.
pub const NOT_APPROVED: &str = "not_approved";
/// `not_attached`.
pub const NOT_ATTACHED: &str = "not_attached";
/// `not_bound`.
pub const NOT_BOUND: &str = "not_bound";
/// `not_held`.
pub const NOT_HELD: &str = "not_held";
/// `not_in_team`.
pub const NOT_IN_TEAM: &str = "not_in_team";
/// `outbox_full`.
pub const OUTBOX_FULL: &str = "outbox_full";
/// `protocol`.
pub const PROTOCOL: &str = "protocol";
/// `refused`.
pub const REFUSED: &str = "refused";
/// `request_cancelled`.
pub const REQUEST_CANCELLED: &str = "request_cancelled";
/// `revoked`.
pub const REVOKED: &str = "revoked";
/// `revoked_recipient`.
pub const REVOKED_RECIPIENT: &str = "revoked_recipient";
/// `shutting_down`.
pub const SHUTTING_DOWN: &str = "shutting_down";
/// `store`.
pub const STORE: &str = "store";
/// `ticket_expired`.
pub const TICKET_EXPIRED: &str = "ticket_expired";
/// `not_a_broadcast`: `not_for_me` names a message that is no broadcast.
pub const NOT_A_BROADCAST: &str = "not_a_broadcast";
/// `too_large`.
pub const TOO_LARGE: &str = "too_large";
/// `unknown`.
pub const UNKNOWN: &str = "unknown";
/// `unknown_frame`.
pub const UNKNOWN_FRAME: &str = "unknown_frame";
/// `unknown_join`.
pub const UNKNOWN_JOIN: &str = "unknown_join";
/// `unknown_machine`.
pub const UNKNOWN_MACHINE: &str = "unknown_machine";
/// `unknown_member`.
pub const UNKNOWN_MEMBER: &str = "unknown_member";
/// `unknown_message`.
pub const UNKNOWN_MESSAGE: &str = "unknown_message";
/// `unknown_op`.
pub const UNKNOWN_OP: &str = "unknown_op";
/// `unknown_recipient`.
pub const UNKNOWN_RECIPIENT: &str = "unknown_recipient";
/// `unknown_request`.
pub const UNKNOWN_REQUEST: &str = "unknown_request";
/// `version_mismatch`.
pub const VERSION_MISMATCH: &str = "version_mismatch";
/// `wrong_code`.
pub const WRONG_CODE: &str = "wrong_code";

/// `hop_limit`.
pub const HOP_LIMIT: &str = "hop_limit";
/// `rate_limited`.
pub const RATE_LIMITED: &str = "rate_limited";
/// `turn_limit`.
pub const TURN_LIMIT: &str = "turn_limit";
/// `turn_quota`: a mailbox handling peer mail sent its allowance of asks,
/// tells or broadcasts until its person speaks.
pub const TURN_QUOTA: &str = "turn_quota";
/// `tainted`: a tainted mailbox may not change its profile.
pub const TAINTED: &str = "tainted";
/// `not_the_sender`.
pub const NOT_THE_SENDER: &str = "not_the_sender";
/// `no_mailbox`.
pub const NO_MAILBOX: &str = "no_mailbox";
/// `folder_not_allowed`.
pub const FOLDER_NOT_ALLOWED: &str = "folder_not_allowed";
/// `held_full`.
pub const HELD_FULL: &str = "held_full";
/// `person_exists`: a new person was asked for under a name the team's
/// persons have (it would merge two people silently).
pub const PERSON_EXISTS: &str = "person_exists";
/// `unknown_person`: an existing person was asked for, and there is none
/// of that name.
pub const UNKNOWN_PERSON: &str = "unknown_person";
/// `sender_revoked`: held mail whose sending machine was revoked (or
/// left) since; it can only be rejected.
pub const SENDER_REVOKED: &str = "sender_revoked";
/// `empty_text`: a message with no text (or only whitespace).
pub const EMPTY_TEXT: &str = "empty_text";
/// `unknown_run`: `wake stop` named no wake run.
pub const UNKNOWN_RUN: &str = "unknown_run";

/// Every code, for checks that they stay distinct.
pub const ALL: &[&str] = &[
    ADMIN,
    ADMIN_CANNOT_LEAVE,
    ALREADY_IN_TEAM,
    AMBIGUOUS_ID,
    ATTACH_TIMEOUT,
    BAD_ADDRESS,
    BAD_ID,
    BAD_INPUT,
    BAD_MAILBOX,
    BAD_NAME,
    BAD_OWNER,
    BAD_PATH,
    BAD_TICKET,
    BAD_TTL,
    BAD_WHO,
    BOUND,
    BUSY,
    CONNECT_FAILED,
    FORBIDDEN,
    FOUNDER_UNREACHABLE,
    FRAME_TOO_LARGE,
    HELD,
    INTERNAL,
    JOIN_REFUSED,
    JUDGE_BAD_ANSWER,
    JUDGE_FAILED,
    JUDGE_TIMEOUT,
    JUDGE_UNAVAILABLE,
    MAILBOX_TAKEN,
    MALFORMED_FRAME,
    NO_ADDRESSES,
    NOT_A_CODE,
    NOT_ADMIN,
    NOT_APPROVED,
    NOT_ATTACHED,
    NOT_BOUND,
    NOT_HELD,
    NOT_IN_TEAM,
    OUTBOX_FULL,
    PROTOCOL,
    REFUSED,
    REQUEST_CANCELLED,
    REVOKED,
    REVOKED_RECIPIENT,
    SHUTTING_DOWN,
    STORE,
    TICKET_EXPIRED,
    TOO_LARGE,
    UNKNOWN,
    UNKNOWN_FRAME,
    UNKNOWN_JOIN,
    UNKNOWN_MACHINE,
    UNKNOWN_MEMBER,
    UNKNOWN_MESSAGE,
    UNKNOWN_OP,
    UNKNOWN_RECIPIENT,
    UNKNOWN_REQUEST,
    VERSION_MISMATCH,
    WRONG_CODE,
    HOP_LIMIT,
    RATE_LIMITED,
    TURN_LIMIT,
    TURN_QUOTA,
    TAINTED,
    NOT_THE_SENDER,
    NO_MAILBOX,
    FOLDER_NOT_ALLOWED,
    HELD_FULL,
    PERSON_EXISTS,
    UNKNOWN_PERSON,
    SENDER_REVOKED,
    EMPTY_TEXT,
    NOT_A_BROADCAST,
    UNKNOWN_RUN,
];

#[cfg(test)]
mod tests {
    #[test]
    fn every_code_is_distinct_snake_case() {
        let set: std::collections::HashSet<&str> = super::ALL.iter().copied().collect();
        assert_eq!(set.len(), super::ALL.len());
        assert!(
            super::ALL
                .iter()
                .all(|c| c.chars().all(|ch| ch.is_ascii_lowercase() || ch == '_'))
        );
        assert_eq!(super::NOT_IN_TEAM, "not_in_team");
    }
}
