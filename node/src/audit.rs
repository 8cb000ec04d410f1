//! The audit log: what the daemon decided, who decided it, and about which
//! machine and message. [`AuditLog`] is the only writer of audit entries:
//! every part records into its own log, and the entries reach the disk
//! through the store's group commit, so an answer that waits for its
//! writes waits for its audit entry too.
//!
//! ```text
//!  team ops, founder desk ──┐
//!  mailroom, courier, inbox, consent, retention ── AuditLog::record ── pending
//!                                                        │
//!                      AuditLog::submit(outbox writes, then) ── GroupCommit ── disk
//! ```
//!
//! The event names ([`AuditEvent::as_str`]) are a contract: `agentmesh
//! audit --json` shows them and users' scripts match on them.

use std::time::Duration;

use agentmesh_protocol::Timestamp;

use crate::api::{ApiError, AuditView};
use crate::store::{AuditEntry, AuditStore, Done, GroupCommit, Writes};

/// Audit entries `audit` lists, at most (the newest).
pub const MAX_AUDIT_LISTED: usize = 1000;

/// What an audit entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuditEvent {
    /// A team was founded here.
    TeamCreated,
    /// An invite ticket was made.
    Invited,
    /// A join request reached this founder.
    JoinRequested,
    /// A wrong pairing code was typed.
    WrongCode,
    /// A join request was cancelled (three wrong codes).
    JoinCancelled,
    /// The founder refused a join request.
    JoinRejected,
    /// The joiner said the team codes differ.
    JoinDeclined,
    /// A join request expired.
    JoinExpired,
    /// A machine was admitted (here, or learned from a block).
    Admitted,
    /// This machine joined a team.
    Joined,
    /// A machine was revoked (here, or learned from a block).
    Revoked,
    /// This machine left its team.
    Left,
    /// A message was accepted for delivery.
    Accepted,
    /// A message went out on a connection.
    Sent,
    /// A message was delivered.
    Delivered,
    /// A message failed.
    Failed,
    /// A message (undelivered, or held) expired.
    Expired,
    /// An inbound envelope was refused.
    Refused,
    /// An inbound message was held for approval.
    Held,
    /// An inbound message was delivered to the inbox.
    Received,
    /// A held message was approved.
    Approved,
    /// A held message was rejected.
    Rejected,
    /// A message held by pause was released by resume.
    Released,
    /// A machine's mail is no longer held.
    Trust,
    /// A machine's mail is held again (`trust --off`).
    Untrust,
    /// A folder was opted in.
    Allow,
    /// A folder was opted out.
    Deny,
    /// Inbound mail was paused.
    Pause,
    /// Inbound mail was resumed.
    Resume,
    /// A send was refused: its hop reached the limit (loop safety).
    HopLimit,
    /// A send was refused: its pair sent its hourly allowance of messages
    /// peers caused (loop safety).
    RateLimited,
    /// A reply was refused: its mailbox answered in one thread as often
    /// as it may without its person speaking (loop safety).
    TurnLimit,
    /// A machine was moved to another person (a Person block).
    Person,
    /// A machine's membership was given a term or renewed (a Term block).
    Renewed,
    /// A machine's membership lapsed: past its expiry, not renewed.
    Lapsed,
    /// A reply from another person's machine was delivered unheld: it
    /// answers an ask this mailbox sent to that machine.
    ReplyToOwn,
    /// A member's directory record was refused whole (over its bounds, or
    /// its signature did not verify).
    DirectoryRefused,
    /// A mailbox's profile, goal or preset was set.
    Profile,
    /// A broadcast was judged for a mailbox and delivered to it.
    BroadcastDelivered,
    /// A broadcast was judged for a mailbox and dropped for it.
    BroadcastDropped,
    /// A machine reported what it did with a broadcast copy sent to it.
    BroadcastCounts,
    /// A broadcast was judged for none (or not all) of this machine's
    /// mailboxes: mail from its sender is held here, inbound mail is
    /// paused, or the mailboxes' wake budgets are spent.
    BroadcastSkipped,
    /// A session said a broadcast delivered to it was not for it.
    NotForMe,
    /// A mailbox handling peer mail sent its turn's quota; a send past it
    /// was refused.
    TurnQuota,
    /// A mailbox became tainted: it received tainted mail, or its person
    /// marked it.
    Tainted,
    /// A mailbox's taint was cleared: its person spoke, or unmarked it.
    TaintCleared,
    /// Something a tainted mailbox may not do was refused (`set_profile`).
    TaintRefused,
    /// A wake run started for a mailbox's mail.
    WakeStarted,
    /// A wake run ended (done, failed, timed out, stopped, not started).
    WakeEnded,
    /// A mailbox's daily wake budget is spent: its mail starts no run, no
    /// Stop-hook block, and it is no broadcast candidate until the budget
    /// resets (once a day per mailbox).
    Budget,
    /// Tainted mail started no wake run: it waits, unread, for its
    /// person's own session.
    TaintWaits,
    /// Carrying: mail handed to a carrier; a carrier took, carried on or
    /// dropped envelopes it held for an offline member.
    Carried,
    /// The web page closed connections of another user of this machine
    /// (at most one entry a minute, with how many).
    UiRefused,
}

impl AuditEvent {
    /// The name `agentmesh audit` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditEvent::TeamCreated => "team_created",
            AuditEvent::Invited => "invited",
            AuditEvent::JoinRequested => "join_requested",
            AuditEvent::WrongCode => "wrong_code",
            AuditEvent::JoinCancelled => "join_cancelled",
            AuditEvent::JoinRejected => "join_rejected",
            AuditEvent::JoinDeclined => "join_declined",
            AuditEvent::JoinExpired => "join_expired",
            AuditEvent::Admitted => "admitted",
            AuditEvent::Joined => "joined",
            AuditEvent::Revoked => "revoked",
            AuditEvent::Left => "left",
            AuditEvent::Accepted => "accepted",
            AuditEvent::Sent => "sent",
            AuditEvent::Delivered => "delivered",
            AuditEvent::Failed => "failed",
            AuditEvent::Expired => "expired",
            AuditEvent::Refused => "refused",
            AuditEvent::Held => "held",
            AuditEvent::Received => "received",
            AuditEvent::Approved => "approved",
            AuditEvent::Rejected => "rejected",
            AuditEvent::Released => "released",
            AuditEvent::Trust => "trust",
            AuditEvent::Untrust => "untrust",
            AuditEvent::Allow => "allow",
            AuditEvent::Deny => "deny",
            AuditEvent::Pause => "pause",
            AuditEvent::Resume => "resume",
            AuditEvent::HopLimit => "hop_limit",
            AuditEvent::RateLimited => "rate_limited",
            AuditEvent::TurnLimit => "turn_limit",
            AuditEvent::Person => "person",
            AuditEvent::Renewed => "renewed",
            AuditEvent::Lapsed => "lapsed",
            AuditEvent::ReplyToOwn => "reply_to_own",
            AuditEvent::DirectoryRefused => "directory_refused",
            AuditEvent::Profile => "profile",
            AuditEvent::BroadcastDelivered => "broadcast_delivered",
            AuditEvent::BroadcastDropped => "broadcast_dropped",
            AuditEvent::BroadcastCounts => "broadcast_counts",
            AuditEvent::BroadcastSkipped => "broadcast_skipped",
            AuditEvent::NotForMe => "not_for_me",
            AuditEvent::TurnQuota => "turn_quota",
            AuditEvent::Tainted => "tainted",
            AuditEvent::TaintCleared => "taint_cleared",
            AuditEvent::TaintRefused => "taint_refused",
            AuditEvent::WakeStarted => "wake_started",
            AuditEvent::WakeEnded => "wake_ended",
            AuditEvent::Budget => "budget",
            AuditEvent::TaintWaits => "taint",
            AuditEvent::Carried => "carried",
            AuditEvent::UiRefused => "ui_refused",
        }
    }
}

impl std::fmt::Display for AuditEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One part's audit entries on their way to the disk.
#[derive(Debug)]
pub struct AuditLog {
    commit: GroupCommit,
    pending: Vec<AuditEntry>,
}

impl AuditLog {
    /// A log that writes through `commit`.
    pub fn new(commit: GroupCommit) -> AuditLog {
        AuditLog {
            commit,
            pending: vec![],
        }
    }

    /// Records `event` at `at`; the other fields come from `entry`.
    /// Written with the next [`AuditLog::submit`].
    pub fn record(&mut self, event: AuditEvent, at: Timestamp, entry: AuditEntry) {
        self.pending.push(AuditEntry {
            at: at.as_unix_millis(),
            event: event.as_str().into(),
            ..entry
        });
    }

    /// Records `event` about `peer` with `detail`, the common short form.
    pub fn note(
        &mut self,
        event: AuditEvent,
        at: Timestamp,
        peer: Option<String>,
        detail: impl Into<String>,
    ) {
        self.record(
            event,
            at,
            AuditEntry {
                peer,
                detail: detail.into(),
                ..AuditEntry::default()
            },
        );
    }

    /// Whether entries wait for the next submit.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// How many entries wait.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The entries waiting, oldest first (unit tests read what a part
    /// recorded).
    #[cfg(test)]
    pub(crate) fn pending(&self) -> &[AuditEntry] {
        &self.pending
    }

    /// Hands the entries recorded so far, with `writes` (outbox and ask
    /// records) written in the same flush, to the group commit; `then`
    /// runs once they are durable.
    pub fn submit(&mut self, mut writes: Writes, then: Option<Done>) {
        writes.audit.append(&mut self.pending);
        if writes.is_empty() && then.is_none() {
            return;
        }
        self.commit.submit(writes, then);
    }

    /// Like [`AuditLog::submit`] without waiting: a full group-commit queue
    /// keeps the entries for the next try and hands `then` back.
    pub fn try_submit(&mut self, then: Option<Done>) -> Result<(), Option<Done>> {
        let writes = Writes {
            audit: std::mem::take(&mut self.pending),
            ..Writes::default()
        };
        match self.commit.try_submit(writes, then) {
            Ok(()) => Ok(()),
            Err((writes, then)) => {
                self.pending = writes.audit;
                Err(then)
            }
        }
    }
}

/// The newest entries from the last `since_secs` seconds (all without
/// it), at most [`MAX_AUDIT_LISTED`], oldest first, as `audit` shows
/// them, within one answer page (`fits` keeps the newest that fit).
pub fn list(
    store: &dyn AuditStore,
    now: Timestamp,
    since_secs: Option<u64>,
    fits: impl FnOnce(Vec<AuditEntry>) -> Vec<AuditEntry>,
) -> Result<Vec<AuditView>, ApiError> {
    let since = since_secs.map_or(Timestamp::from_unix_millis(0), |s| {
        now.saturating_sub(Duration::from_secs(s))
    });
    let entries = store.audit_since(since, MAX_AUDIT_LISTED)?;
    Ok(fits(entries)
        .into_iter()
        .map(|e| AuditView {
            at: crate::api::rfc3339_ms(e.at),
            at_ms: e.at,
            event: e.event,
            peer: e.peer,
            sender: e.sender,
            recipient: e.recipient,
            id: e.message_id,
            body_sha256: e.body_sha256,
            detail: e.detail,
        })
        .collect())
}

/// Forgets entries older than `retention` before `now`.
pub fn prune(store: &dyn AuditStore, now: Timestamp, retention: Duration) {
    if let Err(e) = store.prune_audit(now.saturating_sub(retention)) {
        tracing::warn!(error = %e, "cannot prune the audit log");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_has_its_own_name() {
        use AuditEvent::*;
        let all = [
            TeamCreated,
            Invited,
            JoinRequested,
            WrongCode,
            JoinCancelled,
            JoinRejected,
            JoinDeclined,
            JoinExpired,
            Admitted,
            Joined,
            Revoked,
            Left,
            Accepted,
            Sent,
            Delivered,
            Failed,
            Expired,
            Refused,
            Held,
            Received,
            Approved,
            Rejected,
            Released,
            Trust,
            Untrust,
            Allow,
            Deny,
            Pause,
            Resume,
            HopLimit,
            RateLimited,
            TurnLimit,
            Person,
            Renewed,
            Lapsed,
            ReplyToOwn,
            DirectoryRefused,
            Profile,
            BroadcastDelivered,
            BroadcastDropped,
            BroadcastCounts,
            BroadcastSkipped,
            NotForMe,
            TurnQuota,
            Tainted,
            TaintCleared,
            TaintRefused,
            WakeStarted,
            WakeEnded,
            Budget,
            TaintWaits,
            Carried,
            UiRefused,
        ];
        let names: std::collections::HashSet<&str> = all.iter().map(|e| e.as_str()).collect();
        assert_eq!(names.len(), all.len());
        assert_eq!(TeamCreated.as_str(), "team_created");
        assert_eq!(JoinExpired.to_string(), "join_expired");
    }
}
