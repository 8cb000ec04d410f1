//! The store: everything the daemon keeps between runs, behind [`Store`].
//!
//! [`SledStore`] keeps it in sled, in `HOME/data`. Only the daemon opens it
//! (sled takes a file lock, so a second process cannot); every other command
//! goes through the local socket, and `agentmesh doctor` never opens it.
//! The machine's keys are not here but in the key file (`Home::key_file`,
//! mode 0600), so the store can be copied or inspected without exposing them.
//!
//! The store records its format version. A daemon refuses a store written
//! by a newer version, and migrates an older one step by step at open.

use std::collections::BTreeMap;

use crate::codes::ErrorCode;
use agentmesh_protocol::team::{BlockHash, TeamId};
use agentmesh_protocol::{PeerId, Timestamp};

mod flush;
mod migrations;
mod records;
mod sled_codec;
mod sled_store;
#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
pub(crate) use flush::stalled;
pub use flush::{Done, GroupCommit, Writes};
pub use records::{
    AskRecord, AuditEntry, CarriedRecord, Caught, CountsRecord, FolderBinding, InboxRecord, Judged,
    MAX_STATES, MessageState, NoteRecord, OutboxRecord, OutboxStatus, PeerRecord, ProfileRecord,
    Reported, RunRecord, RunStatus, SentCopy, SessionRecord, Skipped, SpentRecord, StateRecord,
    TaintRecord, WakeAgent, WakeRecord,
};
pub use records::{carried_key, dedup_key, dedup_until};
pub use sled_store::SledStore;
pub use sled_store::backup::Restoring;

/// The format this build writes. Bump it, and add a step to
/// `MIGRATIONS` (in `sled_store.rs`), whenever the layout of any tree changes.
pub const FORMAT_VERSION: u32 = 5;

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// sled failed (disk full, corruption, permissions).
    #[error("the store failed: {0}")]
    Sled(#[from] sled::Error),
    /// Another process holds the store open.
    #[error(
        "the store {path} is in use by another process (is another agentmesh daemon running on this home?)"
    )]
    Locked {
        /// The store directory.
        path: String,
    },
    /// The store was written by a newer agentmesh.
    #[error(
        "the store {path} was written by a newer agentmesh (store format {found}; this build reads up to {supported}); upgrade agentmesh"
    )]
    TooNew {
        /// The store directory.
        path: String,
        /// The store's format.
        found: u32,
        /// [`FORMAT_VERSION`].
        supported: u32,
    },
    /// A record in the store does not decode.
    #[error("a record in the store is damaged ({0})")]
    Corrupt(String),
}

/// What the team's part keeps: the team, its blocks, peer records,
/// tickets and contact records.
pub trait TeamStore: Send + Sync + std::fmt::Debug {
    /// The team this machine belongs to, if any.
    fn team(&self) -> Result<Option<TeamId>, StoreError>;
    /// Records the team this machine belongs to (or none). Durable on return.
    fn set_team(&self, team: Option<TeamId>) -> Result<(), StoreError>;
    /// Every block stored for `team`, in hash order.
    fn blocks(&self, team: &TeamId) -> Result<Vec<Vec<u8>>, StoreError>;
    /// Stores blocks of `team`. Durable on return.
    fn put_blocks(&self, team: &TeamId, blocks: &[(BlockHash, &[u8])]) -> Result<(), StoreError>;
    /// Forgets every block of `team`.
    fn delete_team(&self, team: &TeamId) -> Result<(), StoreError>;
    /// Every peer record.
    fn peers(&self) -> Result<Vec<PeerRecord>, StoreError>;
    /// Stores a peer record, replacing the previous one.
    fn put_peer(&self, record: &PeerRecord) -> Result<(), StoreError>;
    /// Forgets a peer's record.
    fn delete_peer(&self, peer_id: &str) -> Result<(), StoreError>;
    /// Records an unused invite ticket nonce and its expiry.
    fn put_ticket(&self, nonce: &[u8; 16], expires_at: Timestamp) -> Result<(), StoreError>;
    /// The expiry of an unused ticket nonce, without using it.
    fn ticket(&self, nonce: &[u8; 16]) -> Result<Option<Timestamp>, StoreError>;
    /// Removes a ticket nonce (single use) and returns its expiry, if it
    /// was known. Durable on return.
    fn take_ticket(&self, nonce: &[u8; 16]) -> Result<Option<Timestamp>, StoreError>;
    /// Forgets tickets that expired before `now`.
    fn prune_tickets(&self, now: Timestamp) -> Result<usize, StoreError>;
    /// The latest signed contact record of each machine, by PeerId.
    fn contacts(&self) -> Result<BTreeMap<PeerId, Vec<u8>>, StoreError>;
    /// The latest signed contact record of one machine.
    fn contact(&self, peer: &PeerId) -> Result<Option<Vec<u8>>, StoreError>;
    /// Stores a machine's signed contact record.
    fn put_contact(&self, peer: &PeerId, record: &[u8]) -> Result<(), StoreError>;
    /// The sequence number of this machine's last contact record.
    fn next_contact_seq(&self) -> Result<u64, StoreError>;
    /// Makes the next contact sequence number higher than `seen` (a
    /// record of this machine's key numbered `seen` is out there: this
    /// machine's next must supersede it).
    fn raise_contact_seq(&self, seen: u64) -> Result<(), StoreError>;
    /// The latest signed directory record of each machine, by PeerId
    /// (this machine's own included).
    fn directory_records(&self) -> Result<BTreeMap<PeerId, Vec<u8>>, StoreError>;
    /// The latest signed directory record of one machine.
    fn directory_record(&self, peer: &PeerId) -> Result<Option<Vec<u8>>, StoreError>;
    /// Stores a machine's signed directory record.
    fn put_directory_record(&self, peer: &PeerId, record: &[u8]) -> Result<(), StoreError>;
    /// Forgets a machine's directory record (it was revoked).
    fn delete_directory_record(&self, peer: &PeerId) -> Result<(), StoreError>;
    /// The next sequence number for this machine's directory record.
    fn next_directory_seq(&self) -> Result<u64, StoreError>;
    /// The relays adopted from the ticket this machine joined with.
    fn relays(&self) -> Result<Vec<String>, StoreError>;
    /// Replaces the adopted relays. Durable on return.
    fn put_relays(&self, relays: &[String]) -> Result<(), StoreError>;
    /// How many days a membership this admin gives lasts, if its founder
    /// said (`team create --member-days`).
    fn member_days(&self) -> Result<Option<u32>, StoreError>;
    /// Records it. Durable on return.
    fn set_member_days(&self, days: u32) -> Result<(), StoreError>;
}

/// The audit log's records (written only by [`crate::audit::AuditLog`]
/// through the group commit).
pub trait AuditStore: Send + Sync + std::fmt::Debug {
    /// Appends to the audit log.
    fn audit(&self, entry: &AuditEntry) -> Result<(), StoreError>;
    /// Appends several entries to the audit log at once.
    fn audit_many(&self, entries: &[AuditEntry]) -> Result<(), StoreError>;
    /// Audit entries at or after `since`, oldest first.
    /// The newest `limit` audit entries from `since` on, oldest first.
    fn audit_since(&self, since: Timestamp, limit: usize) -> Result<Vec<AuditEntry>, StoreError>;
    /// Forgets audit entries older than `before`.
    fn prune_audit(&self, before: Timestamp) -> Result<usize, StoreError>;
}

/// What the mail actor keeps: the outbox, the inbox with its dedup
/// records and indices, and consent.
pub trait MailStore: Send + Sync + std::fmt::Debug {
    /// Writes outbox records (not durable until the next flush). Records
    /// still on their way are kept apart from delivered and failed ones, so
    /// loading what is left to deliver reads only that.
    fn put_outbox(&self, records: &[OutboxRecord]) -> Result<(), StoreError>;
    /// The records still to deliver (queued or sent), without their
    /// envelopes: up to 100,000 of 64 KiB would not fit in memory at once.
    fn outbox(&self) -> Result<Vec<OutboxRecord>, StoreError>;
    /// The sealed envelope of a record still to deliver. The courier keeps
    /// only what it needs to schedule in memory and reads envelopes from
    /// here when it sends them, so a full outbox does not fill memory.
    fn outbox_envelope(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// The outbox record of a message id, on its way or done (with its
    /// envelope, if it still has one).
    fn outbox_get(&self, id: &str) -> Result<Option<OutboxRecord>, StoreError>;
    /// The newest `limit` delivered or failed messages, newest first
    /// (counts and receipts, this machine's reports, are skipped).
    fn outbox_done(&self, limit: usize) -> Result<Vec<OutboxRecord>, StoreError>;
    /// Forgets delivered and failed records sent before `before`.
    fn prune_outbox_done(&self, before: Timestamp) -> Result<usize, StoreError>;
    /// Stores received messages and the ask records whose counts they
    /// moved atomically: after a crash, all are there or none (not durable
    /// until the next flush). A message in the inbox needs no dedup record:
    /// its inbox record (found by id, with its sender) refuses it again.
    /// [`MailStore::delete_inbox`] leaves the record behind when it forgets
    /// a message whose window is still open.
    fn put_inbox(&self, records: &[InboxRecord], asks: &[AskRecord]) -> Result<(), StoreError>;
    /// Writes ask records (not durable until the next flush); `put_inbox`
    /// updates their counts with the replies they let pass.
    fn put_asks(&self, asks: &[AskRecord]) -> Result<(), StoreError>;
    /// The ask record of a message id this machine sent.
    fn ask(&self, id: &str) -> Result<Option<AskRecord>, StoreError>;
    /// Forgets ask records that expired before `before`.
    fn prune_asks(&self, before: Timestamp) -> Result<usize, StoreError>;
    /// Moves an inbox record to a new seq (a held message delivered now
    /// takes its place at the end of the inbox), atomically.
    fn move_inbox(&self, old_seq: u64, record: &InboxRecord) -> Result<(), StoreError>;
    /// Replaces inbox records (read).
    fn update_inbox(&self, records: &[InboxRecord]) -> Result<(), StoreError>;
    /// At most `limit` inbox records with a seq after `after`, in order.
    fn inbox_after(&self, after: u64, limit: usize) -> Result<Vec<InboxRecord>, StoreError>;
    /// Forgets inbox records. A message whose dedup window is still open
    /// at `now` leaves its dedup record (sender ‖ id, until) in their
    /// place, written before the message is removed, so that no crash
    /// between the two lets it in again.
    fn delete_inbox(&self, seqs: &[u64], now: Timestamp) -> Result<(), StoreError>;
    /// The inbox record of a message id.
    fn inbox_get(&self, id: &str) -> Result<Option<InboxRecord>, StoreError>;
    /// Whether an inbox message has id `id`, without reading it.
    fn inbox_has(&self, id: &str) -> Result<bool, StoreError>;
    /// The ids of inbox messages starting with `prefix`, at most `limit`.
    fn inbox_ids_starting(&self, prefix: &str, limit: usize) -> Result<Vec<String>, StoreError>;
    /// The inbox record at `seq`.
    fn inbox_at(&self, seq: u64) -> Result<Option<InboxRecord>, StoreError>;
    /// The held messages: (seq, sender PeerId), from an index, so that
    /// finding them reads no message.
    fn held_index(&self) -> Result<Vec<(u64, String)>, StoreError>;
    /// The delivered messages not yet read: (seq, mailbox; `None` the
    /// owner's), oldest first, from an index.
    fn unread_index(&self) -> Result<Vec<(u64, Option<String>)>, StoreError>;
    /// The seqs of messages read before `before`, from an index.
    fn read_before(&self, before: Timestamp) -> Result<Vec<u64>, StoreError>;
    /// The highest inbox seq ever stored.
    fn last_inbox_seq(&self) -> Result<u64, StoreError>;
    /// Whether (sender ‖ id) has a dedup record: a broadcast received, or
    /// a message the inbox held and forgot within its window. (A message
    /// the inbox still holds is found there.)
    fn seen(&self, key: &[u8]) -> Result<bool, StoreError>;
    /// Forgets dedup records whose window ended before `now`.
    fn prune_seen(&self, now: Timestamp) -> Result<usize, StoreError>;
    /// Folder bindings.
    fn folders(&self) -> Result<Vec<FolderBinding>, StoreError>;
    /// Stores a folder binding (durable on return).
    fn put_folder(&self, binding: &FolderBinding) -> Result<(), StoreError>;
    /// Every mailbox's profile, goal and preset.
    fn profiles(&self) -> Result<Vec<ProfileRecord>, StoreError>;
    /// Stores a mailbox's profile, goal and preset, durably.
    fn put_profile(&self, record: &ProfileRecord) -> Result<(), StoreError>;
    /// Machines whose mail is not held.
    fn trusted(&self) -> Result<Vec<String>, StoreError>;
    /// Trusts a machine (durable on return).
    fn put_trusted(&self, peer: &str) -> Result<(), StoreError>;
    /// Trusts a machine no more (durable on return).
    fn remove_trusted(&self, peer: &str) -> Result<(), StoreError>;
    /// Whether inbound delivery is paused.
    fn paused(&self) -> Result<bool, StoreError>;
    /// Pauses or resumes inbound delivery (durable on return).
    fn set_paused(&self, paused: bool) -> Result<(), StoreError>;
}

/// What the bus keeps: broadcasts received and not yet judged. (A judged
/// broadcast lives on only as the copies delivered to mailboxes, and the
/// audit entries of its judgments.)
pub trait BusStore: Send + Sync + std::fmt::Debug {
    /// Stores received broadcasts waiting to be judged with their dedup
    /// records, atomically (not durable until the next flush).
    fn put_broadcasts(
        &self,
        records: &[InboxRecord],
        seen: &[(Vec<u8>, u64)],
    ) -> Result<(), StoreError>;
    /// The broadcasts waiting to be judged.
    fn broadcasts(&self) -> Result<Vec<InboxRecord>, StoreError>;
    /// A broadcast judged: its copies into the inbox, the counts for its
    /// sender into the outbox, and the broadcast forgotten, atomically
    /// (not durable until the next flush).
    fn put_judged(
        &self,
        id: &str,
        copies: &[InboxRecord],
        counts: Option<&OutboxRecord>,
    ) -> Result<(), StoreError>;
    /// Records a broadcast copy sent to a machine, or what it reported of
    /// it (not durable until the next flush).
    fn put_counts(&self, id: &str, counts: &CountsRecord) -> Result<(), StoreError>;
    /// What the machine a broadcast copy went to reported of it, if it did.
    fn counts(&self, id: &str) -> Result<Option<CountsRecord>, StoreError>;
    /// Forgets the records of copies sent before `before`.
    fn prune_counts(&self, before: Timestamp) -> Result<usize, StoreError>;
    /// The mailboxes' taints.
    fn taints(&self) -> Result<Vec<TaintRecord>, StoreError>;
    /// Writes a mailbox's taint durably (`None` parts: it is clean, the
    /// record is removed).
    fn put_taint(&self, record: &TaintRecord) -> Result<(), StoreError>;
    /// The mailboxes' wake settings.
    fn wakes(&self) -> Result<Vec<WakeRecord>, StoreError>;
    /// Writes `mailbox`'s wake setting durably (`None`: wake off, the
    /// record is removed).
    fn put_wake(&self, mailbox: &str, record: Option<&WakeRecord>) -> Result<(), StoreError>;
    /// The sessions hooks reported.
    fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError>;
    /// Writes a session's record (`forget`: removes it) durably.
    fn put_session(&self, record: &SessionRecord, forget: bool) -> Result<(), StoreError>;
    /// The wake runs kept.
    fn runs(&self) -> Result<Vec<RunRecord>, StoreError>;
    /// Writes a run's record (`forget`: removes it) durably.
    fn put_run(&self, record: &RunRecord, forget: bool) -> Result<(), StoreError>;
    /// What mailboxes spent of their daily wake budgets.
    fn spent(&self) -> Result<Vec<SpentRecord>, StoreError>;
    /// Writes what a mailbox spent today, durably.
    fn put_spent(&self, record: &SpentRecord) -> Result<(), StoreError>;
    /// The mailboxes whose person turned read receipts off (`@`: the
    /// machine owner's).
    fn quiet_reads(&self) -> Result<Vec<String>, StoreError>;
    /// Turns `mailbox`'s read receipts off (`quiet`) or on, durably.
    fn put_quiet_read(&self, mailbox: &str, quiet: bool) -> Result<(), StoreError>;
}

/// What a carrier holds for offline members: each envelope's record and
/// its bytes, apart. Writes are made durable by the next flush.
pub trait CarryStore: Send + Sync + std::fmt::Debug {
    /// Keeps envelopes: each record with its bytes.
    fn put_carried(&self, held: &[(CarriedRecord, Vec<u8>)]) -> Result<(), StoreError>;
    /// Every carried envelope's record (not its bytes).
    fn carried(&self) -> Result<Vec<CarriedRecord>, StoreError>;
    /// The bytes of the carried envelope under `key`.
    fn carried_envelope(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    /// Forgets carried envelopes.
    fn delete_carried(&self, keys: &[Vec<u8>]) -> Result<(), StoreError>;
}

/// The daemon's persistent state: every part's records, in one database
/// that one flush makes durable.
pub trait Store: TeamStore + AuditStore + MailStore + BusStore + CarryStore {
    /// Makes every write so far durable. Writers that need durability
    /// write, then wait for a flush (see [`GroupCommit`], which
    /// shares one flush among every writer waiting at the time).
    fn flush(&self) -> Result<(), StoreError>;
}

/// A store failure as an API answer: code `store`.
impl From<StoreError> for crate::api::ApiError {
    fn from(e: StoreError) -> Self {
        crate::api::ApiError::new(ErrorCode::Store, e.to_string())
    }
}
