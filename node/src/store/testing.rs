//! A store for unit tests whose dedup lookups and inbox writes can be made
//! to fail, over a real sled store.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use agentmesh_protocol::team::{BlockHash, TeamId};
use agentmesh_protocol::{PeerId, Timestamp};

use super::*;

/// A sled store whose dedup lookups (`seen`, `inbox_has`) and `put_inbox`
/// fail while their flag is set.
#[derive(Debug)]
pub struct Flaky {
    /// The real store.
    pub inner: SledStore,
    /// `seen` and `inbox_has` fail.
    pub fail_seen: AtomicBool,
    /// `put_inbox` fails.
    pub fail_put_inbox: AtomicBool,
}

impl Flaky {
    /// Over `inner`, failing nothing yet.
    pub fn new(inner: SledStore) -> Flaky {
        Flaky {
            inner,
            fail_seen: false.into(),
            fail_put_inbox: false.into(),
        }
    }

    /// Sets whether `seen` and `inbox_has` fail.
    pub fn fail_seen(&self, fail: bool) {
        self.fail_seen.store(fail, Ordering::SeqCst);
    }

    /// Sets whether `put_inbox` fails.
    pub fn fail_put_inbox(&self, fail: bool) {
        self.fail_put_inbox.store(fail, Ordering::SeqCst);
    }
}

fn injected() -> StoreError {
    StoreError::Corrupt("injected failure".into())
}

impl TeamStore for Flaky {
    fn team(&self) -> Result<Option<TeamId>, StoreError> {
        self.inner.team()
    }

    fn set_team(&self, team: Option<TeamId>) -> Result<(), StoreError> {
        self.inner.set_team(team)
    }

    fn blocks(&self, team: &TeamId) -> Result<Vec<Vec<u8>>, StoreError> {
        self.inner.blocks(team)
    }

    fn put_blocks(&self, team: &TeamId, blocks: &[(BlockHash, &[u8])]) -> Result<(), StoreError> {
        self.inner.put_blocks(team, blocks)
    }

    fn delete_team(&self, team: &TeamId) -> Result<(), StoreError> {
        self.inner.delete_team(team)
    }

    fn peers(&self) -> Result<Vec<PeerRecord>, StoreError> {
        self.inner.peers()
    }

    fn put_peer(&self, record: &PeerRecord) -> Result<(), StoreError> {
        self.inner.put_peer(record)
    }

    fn delete_peer(&self, peer_id: &str) -> Result<(), StoreError> {
        self.inner.delete_peer(peer_id)
    }

    fn put_ticket(&self, nonce: &[u8; 16], expires_at: Timestamp) -> Result<(), StoreError> {
        self.inner.put_ticket(nonce, expires_at)
    }

    fn ticket(&self, nonce: &[u8; 16]) -> Result<Option<Timestamp>, StoreError> {
        self.inner.ticket(nonce)
    }

    fn take_ticket(&self, nonce: &[u8; 16]) -> Result<Option<Timestamp>, StoreError> {
        self.inner.take_ticket(nonce)
    }

    fn prune_tickets(&self, now: Timestamp) -> Result<usize, StoreError> {
        self.inner.prune_tickets(now)
    }

    fn contacts(&self) -> Result<BTreeMap<PeerId, Vec<u8>>, StoreError> {
        self.inner.contacts()
    }

    fn contact(&self, peer: &PeerId) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.contact(peer)
    }

    fn put_contact(&self, peer: &PeerId, record: &[u8]) -> Result<(), StoreError> {
        self.inner.put_contact(peer, record)
    }

    fn next_contact_seq(&self) -> Result<u64, StoreError> {
        self.inner.next_contact_seq()
    }

    fn raise_contact_seq(&self, seen: u64) -> Result<(), StoreError> {
        self.inner.raise_contact_seq(seen)
    }

    fn directory_records(&self) -> Result<BTreeMap<PeerId, Vec<u8>>, StoreError> {
        self.inner.directory_records()
    }

    fn directory_record(&self, peer: &PeerId) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.directory_record(peer)
    }

    fn put_directory_record(&self, peer: &PeerId, record: &[u8]) -> Result<(), StoreError> {
        self.inner.put_directory_record(peer, record)
    }

    fn delete_directory_record(&self, peer: &PeerId) -> Result<(), StoreError> {
        self.inner.delete_directory_record(peer)
    }

    fn next_directory_seq(&self) -> Result<u64, StoreError> {
        self.inner.next_directory_seq()
    }

    fn relays(&self) -> Result<Vec<String>, StoreError> {
        self.inner.relays()
    }

    fn put_relays(&self, relays: &[String]) -> Result<(), StoreError> {
        self.inner.put_relays(relays)
    }

    fn member_days(&self) -> Result<Option<u32>, StoreError> {
        self.inner.member_days()
    }

    fn set_member_days(&self, days: u32) -> Result<(), StoreError> {
        self.inner.set_member_days(days)
    }
}

impl AuditStore for Flaky {
    fn audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        self.inner.audit(entry)
    }

    fn audit_many(&self, entries: &[AuditEntry]) -> Result<(), StoreError> {
        self.inner.audit_many(entries)
    }

    fn audit_since(&self, since: Timestamp, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        self.inner.audit_since(since, limit)
    }

    fn prune_audit(&self, before: Timestamp) -> Result<usize, StoreError> {
        self.inner.prune_audit(before)
    }
}

impl MailStore for Flaky {
    fn put_outbox(&self, records: &[OutboxRecord]) -> Result<(), StoreError> {
        self.inner.put_outbox(records)
    }

    fn outbox(&self) -> Result<Vec<OutboxRecord>, StoreError> {
        self.inner.outbox()
    }

    fn outbox_envelope(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.outbox_envelope(id)
    }

    fn outbox_get(&self, id: &str) -> Result<Option<OutboxRecord>, StoreError> {
        self.inner.outbox_get(id)
    }

    fn outbox_done(&self, limit: usize) -> Result<Vec<OutboxRecord>, StoreError> {
        self.inner.outbox_done(limit)
    }

    fn prune_outbox_done(&self, before: Timestamp) -> Result<usize, StoreError> {
        self.inner.prune_outbox_done(before)
    }

    fn put_inbox(&self, records: &[InboxRecord], asks: &[AskRecord]) -> Result<(), StoreError> {
        if self.fail_put_inbox.load(Ordering::SeqCst) {
            return Err(injected());
        }
        self.inner.put_inbox(records, asks)
    }

    fn put_asks(&self, asks: &[AskRecord]) -> Result<(), StoreError> {
        self.inner.put_asks(asks)
    }

    fn ask(&self, id: &str) -> Result<Option<AskRecord>, StoreError> {
        self.inner.ask(id)
    }

    fn prune_asks(&self, before: Timestamp) -> Result<usize, StoreError> {
        self.inner.prune_asks(before)
    }

    fn move_inbox(&self, old_seq: u64, record: &InboxRecord) -> Result<(), StoreError> {
        self.inner.move_inbox(old_seq, record)
    }

    fn update_inbox(&self, records: &[InboxRecord]) -> Result<(), StoreError> {
        self.inner.update_inbox(records)
    }

    fn inbox_after(&self, after: u64, limit: usize) -> Result<Vec<InboxRecord>, StoreError> {
        self.inner.inbox_after(after, limit)
    }

    fn delete_inbox(&self, seqs: &[u64], now: Timestamp) -> Result<(), StoreError> {
        self.inner.delete_inbox(seqs, now)
    }

    fn inbox_get(&self, id: &str) -> Result<Option<InboxRecord>, StoreError> {
        self.inner.inbox_get(id)
    }

    fn inbox_has(&self, id: &str) -> Result<bool, StoreError> {
        if self.fail_seen.load(Ordering::SeqCst) {
            return Err(injected());
        }
        self.inner.inbox_has(id)
    }

    fn inbox_ids_starting(&self, prefix: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        self.inner.inbox_ids_starting(prefix, limit)
    }

    fn inbox_at(&self, seq: u64) -> Result<Option<InboxRecord>, StoreError> {
        self.inner.inbox_at(seq)
    }

    fn held_index(&self) -> Result<Vec<(u64, String)>, StoreError> {
        self.inner.held_index()
    }

    fn unread_index(&self) -> Result<Vec<(u64, Option<String>)>, StoreError> {
        self.inner.unread_index()
    }

    fn read_before(&self, before: Timestamp) -> Result<Vec<u64>, StoreError> {
        self.inner.read_before(before)
    }

    fn last_inbox_seq(&self) -> Result<u64, StoreError> {
        self.inner.last_inbox_seq()
    }

    fn seen(&self, key: &[u8]) -> Result<bool, StoreError> {
        if self.fail_seen.load(Ordering::SeqCst) {
            return Err(injected());
        }
        self.inner.seen(key)
    }

    fn prune_seen(&self, now: Timestamp) -> Result<usize, StoreError> {
        self.inner.prune_seen(now)
    }

    fn folders(&self) -> Result<Vec<FolderBinding>, StoreError> {
        self.inner.folders()
    }

    fn put_folder(&self, binding: &FolderBinding) -> Result<(), StoreError> {
        self.inner.put_folder(binding)
    }

    fn profiles(&self) -> Result<Vec<ProfileRecord>, StoreError> {
        self.inner.profiles()
    }

    fn put_profile(&self, record: &ProfileRecord) -> Result<(), StoreError> {
        self.inner.put_profile(record)
    }

    fn trusted(&self) -> Result<Vec<String>, StoreError> {
        self.inner.trusted()
    }

    fn put_trusted(&self, peer: &str) -> Result<(), StoreError> {
        self.inner.put_trusted(peer)
    }

    fn remove_trusted(&self, peer: &str) -> Result<(), StoreError> {
        self.inner.remove_trusted(peer)
    }

    fn paused(&self) -> Result<bool, StoreError> {
        self.inner.paused()
    }

    fn set_paused(&self, paused: bool) -> Result<(), StoreError> {
        self.inner.set_paused(paused)
    }
}

impl BusStore for Flaky {
    fn put_broadcasts(
        &self,
        records: &[InboxRecord],
        seen: &[(Vec<u8>, u64)],
    ) -> Result<(), StoreError> {
        self.inner.put_broadcasts(records, seen)
    }

    fn broadcasts(&self) -> Result<Vec<InboxRecord>, StoreError> {
        self.inner.broadcasts()
    }

    fn put_judged(
        &self,
        id: &str,
        copies: &[InboxRecord],
        counts: Option<&OutboxRecord>,
    ) -> Result<(), StoreError> {
        self.inner.put_judged(id, copies, counts)
    }

    fn put_counts(&self, id: &str, counts: &CountsRecord) -> Result<(), StoreError> {
        self.inner.put_counts(id, counts)
    }

    fn counts(&self, id: &str) -> Result<Option<CountsRecord>, StoreError> {
        self.inner.counts(id)
    }

    fn prune_counts(&self, before: Timestamp) -> Result<usize, StoreError> {
        self.inner.prune_counts(before)
    }

    fn taints(&self) -> Result<Vec<TaintRecord>, StoreError> {
        self.inner.taints()
    }

    fn put_taint(&self, record: &TaintRecord) -> Result<(), StoreError> {
        self.inner.put_taint(record)
    }

    fn wakes(&self) -> Result<Vec<WakeRecord>, StoreError> {
        self.inner.wakes()
    }

    fn put_wake(&self, mailbox: &str, record: Option<&WakeRecord>) -> Result<(), StoreError> {
        self.inner.put_wake(mailbox, record)
    }

    fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.inner.sessions()
    }

    fn put_session(&self, record: &SessionRecord, forget: bool) -> Result<(), StoreError> {
        self.inner.put_session(record, forget)
    }

    fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.inner.runs()
    }

    fn put_run(&self, record: &RunRecord, forget: bool) -> Result<(), StoreError> {
        self.inner.put_run(record, forget)
    }

    fn spent(&self) -> Result<Vec<SpentRecord>, StoreError> {
        self.inner.spent()
    }

    fn put_spent(&self, record: &SpentRecord) -> Result<(), StoreError> {
        self.inner.put_spent(record)
    }

    fn quiet_reads(&self) -> Result<Vec<String>, StoreError> {
        self.inner.quiet_reads()
    }

    fn put_quiet_read(&self, mailbox: &str, quiet: bool) -> Result<(), StoreError> {
        self.inner.put_quiet_read(mailbox, quiet)
    }
}

impl CarryStore for Flaky {
    fn put_carried(&self, held: &[(CarriedRecord, Vec<u8>)]) -> Result<(), StoreError> {
        self.inner.put_carried(held)
    }

    fn carried(&self) -> Result<Vec<CarriedRecord>, StoreError> {
        self.inner.carried()
    }

    fn carried_envelope(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.carried_envelope(key)
    }

    fn delete_carried(&self, keys: &[Vec<u8>]) -> Result<(), StoreError> {
        self.inner.delete_carried(keys)
    }
}

impl Store for Flaky {
    fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush()
    }
}

/// A delivered message for tests: seq `seq` (its id and thread made from
/// it), to `mailbox`, read or not, held (paused) or not.
pub fn inbox_record(seq: u64, mailbox: Option<&str>, read: bool, held: bool) -> InboxRecord {
    InboxRecord {
        seq,
        id: format!("{seq:032x}"),
        from_peer: "12D3KooWtest".into(),
        from: "@alpha".into(),
        from_owner: None,
        mailbox: mailbox.map(str::to_owned),
        who: crate::api::Who {
            kind: crate::api::WhoKind::Agent,
            name: "codex".into(),
            session_id: None,
            task: None,
        },
        kind: crate::api::MessageKind::Tell,
        thread: format!("{seq:032x}"),
        in_reply_to: None,
        hop: 0,
        taint: false,
        text: format!("message {seq}"),
        received_at: 1,
        expires_at: u64::MAX,
        read_at: read.then_some(2),
        held: held.then_some(crate::api::HeldReason::Paused),
        body_sha256: String::new(),
        sent_at: None,
    }
}

/// Opens the store in `dir` when its previous `sled::Db` in this process
/// was just dropped: sled's background thread lets go of the file lock a
/// moment later, so the open is retried until a deadline.
pub(crate) fn reopen(dir: &std::path::Path) -> Result<SledStore, StoreError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match SledStore::open(dir, 1 << 20) {
            Err(StoreError::Locked { .. } | StoreError::Sled(sled::Error::Io(_)))
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}
