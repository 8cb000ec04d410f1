//! The sled implementation of the store (its migrations are in
//! [`super::migrations`]).

mod audit;
pub(super) mod backup;
mod bus;
mod carry;
mod outbox;

use std::collections::BTreeMap;
use std::path::Path;

use agentmesh_protocol::team::{BlockHash, TeamId};
use agentmesh_protocol::{PeerId, Timestamp};

use super::migrations::MIGRATIONS;
use super::sled_codec::{
    SEEN_BY_UNTIL, UNREAD, by_until_key, counted, from_record, id_key, id_keys_starting, is_unread,
    to_record, tx_error, unread_value,
};
use super::*;

/// Writes an inbox record and its indices in a transaction over the
/// inbox, its ids, the held and the unread indices.
pub(super) fn insert_inbox(
    [inbox, ids, held, unread]: [&sled::transaction::TransactionalTree; 4],
    r: &InboxRecord,
) -> Result<(), sled::transaction::UnabortableTransactionError> {
    inbox.insert(&r.seq.to_be_bytes(), to_record(r))?;
    ids.insert(id_key(&r.id), &r.seq.to_be_bytes())?;
    if r.held.is_some() {
        held.insert(&r.seq.to_be_bytes(), r.from_peer.as_bytes())?;
    }
    if is_unread(r) {
        unread.insert(&r.seq.to_be_bytes(), unread_value(r))?;
    }
    Ok(())
}

const META: &str = "meta";
const FORMAT_KEY: &[u8] = b"format_version";
const TEAM_KEY: &[u8] = b"team";
const CONTACT_SEQ_KEY: &[u8] = b"contact_seq";
const DIRECTORY_SEQ_KEY: &[u8] = b"directory_seq";

/// The sled implementation of [`Store`].
#[derive(Debug)]
pub struct SledStore {
    pub(super) db: sled::Db,
    pub(super) meta: sled::Tree,
    pub(super) blocks: sled::Tree,
    pub(super) peers: sled::Tree,
    pub(super) tickets: sled::Tree,
    pub(super) contacts: sled::Tree,
    /// Each member's signed directory record, by PeerId bytes.
    pub(super) directory: sled::Tree,
    pub(super) audit: sled::Tree,
    pub(super) outbox: sled::Tree,
    /// Delivered and failed records: created_at ‖ id -> record.
    pub(super) outbox_done: sled::Tree,
    /// id -> its key in `outbox_done`.
    pub(super) outbox_done_ids: sled::Tree,
    pub(super) inbox: sled::Tree,
    pub(super) inbox_ids: sled::Tree,
    /// Index of held messages: seq -> sender PeerId text.
    pub(super) held: sled::Tree,
    /// Index of read messages: read_at ‖ seq -> ().
    pub(super) read: sled::Tree,
    /// Index of unread delivered messages: seq -> mailbox (empty: the
    /// owner's).
    pub(super) unread: sled::Tree,
    /// Dedup records: sender ‖ id -> end of the window (Unix ms, BE).
    pub(super) seen: sled::Tree,
    /// The same, by the end of their window: until ‖ sender ‖ id -> ().
    pub(super) seen_by_until: sled::Tree,
    pub(super) consent: sled::Tree,
    /// Asks sent to other machines, by id: their replies pass unheld.
    pub(super) asks: sled::Tree,
    /// The asks by expiry (expiry ‖ id), for pruning.
    pub(super) asks_by_expiry: sled::Tree,
    /// Broadcasts received and not yet judged, by id.
    pub(super) broadcasts: sled::Tree,
    /// What machines reported of the broadcast copies sent to them, by
    /// the copy's id.
    pub(super) counts: sled::Tree,
    /// Envelopes carried for other members: recipient ‖ 0 ‖ sender ‖ 0 ‖
    /// id -> their record.
    pub(super) carried: sled::Tree,
    /// The same keys -> the envelopes' bytes.
    pub(super) carried_bytes: sled::Tree,
}

impl SledStore {
    /// Opens (creating if needed) the store in `dir`, migrating an older
    /// format and refusing a newer one.
    pub fn open(dir: &Path, cache_bytes: u64) -> Result<Self, StoreError> {
        let path = dir.display().to_string();
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(|e| match e {
                sled::Error::Io(io) if io.kind() == std::io::ErrorKind::WouldBlock => {
                    StoreError::Locked { path: path.clone() }
                }
                sled::Error::Io(io) if io.to_string().contains("lock") => {
                    StoreError::Locked { path: path.clone() }
                }
                e => StoreError::Sled(e),
            })?;
        let meta = db.open_tree(META)?;
        let found = match meta.get(FORMAT_KEY)? {
            Some(v) => u32::from_be_bytes(
                v.as_ref()
                    .try_into()
                    .map_err(|_| StoreError::Corrupt("format version".into()))?,
            ),
            // A store with no trees besides sled's own is new.
            None if db.tree_names().len() <= 2 => FORMAT_VERSION,
            None => 0,
        };
        if found > FORMAT_VERSION {
            return Err(StoreError::TooNew {
                path,
                found,
                supported: FORMAT_VERSION,
            });
        }
        for (step, migrate) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            tracing::info!(from = step, to = step + 1, "migrating the store");
            migrate(&db)?;
        }
        meta.insert(FORMAT_KEY, &FORMAT_VERSION.to_be_bytes())?;
        db.flush()?;
        Ok(SledStore {
            blocks: db.open_tree("blocks")?,
            peers: db.open_tree("peers")?,
            tickets: db.open_tree("tickets")?,
            contacts: db.open_tree("contacts")?,
            directory: db.open_tree("directory")?,
            audit: db.open_tree("audit")?,
            outbox: db.open_tree("outbox")?,
            outbox_done: db.open_tree("outbox_done")?,
            outbox_done_ids: db.open_tree("outbox_done_ids")?,
            inbox: db.open_tree("inbox")?,
            inbox_ids: db.open_tree("inbox_ids")?,
            held: db.open_tree("inbox_held")?,
            read: db.open_tree("inbox_read")?,
            unread: db.open_tree(UNREAD)?,
            seen: db.open_tree("seen")?,
            seen_by_until: db.open_tree(SEEN_BY_UNTIL)?,
            consent: db.open_tree("consent")?,
            asks: db.open_tree("asks")?,
            asks_by_expiry: db.open_tree("asks_by_expiry")?,
            broadcasts: db.open_tree("broadcasts")?,
            counts: db.open_tree("broadcast_counts")?,
            carried: db.open_tree("carried")?,
            carried_bytes: db.open_tree("carried_bytes")?,
            meta,
            db,
        })
    }

    /// The format version recorded in the store.
    pub fn format_version(&self) -> Result<u32, StoreError> {
        let v = self
            .meta
            .get(FORMAT_KEY)?
            .ok_or_else(|| StoreError::Corrupt("format version missing".into()))?;
        Ok(u32::from_be_bytes(v.as_ref().try_into().map_err(|_| {
            StoreError::Corrupt("format version".into())
        })?))
    }

    pub(super) fn sync(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }
}

pub(super) const INBOX_SEQ_KEY: &[u8] = b"inbox_seq";
const PAUSED_KEY: &[u8] = b"paused";
/// The relays adopted from a ticket (a CBOR list of multiaddr strings).
const RELAYS_KEY: &[u8] = b"relays";
/// How long memberships this founder gives last, in days (u32, BE).
const MEMBER_DAYS_KEY: &[u8] = b"member_days";
const FOLDER_PREFIX: &[u8] = b"folder/";
const TRUSTED_PREFIX: &[u8] = b"trusted/";
const PROFILE_PREFIX: &[u8] = b"profile/";

/// An ask's key in the expiry index: its expiry (big-endian) ‖ its id.
fn ask_expiry_key(a: &AskRecord) -> Vec<u8> {
    [&a.expires_at.to_be_bytes()[..], a.id.as_bytes()].concat()
}

impl TeamStore for SledStore {
    fn team(&self) -> Result<Option<TeamId>, StoreError> {
        match self.meta.get(TEAM_KEY)? {
            None => Ok(None),
            Some(v) => Ok(Some(TeamId(
                v.as_ref()
                    .try_into()
                    .map_err(|_| StoreError::Corrupt("team id".into()))?,
            ))),
        }
    }

    fn set_team(&self, team: Option<TeamId>) -> Result<(), StoreError> {
        match team {
            Some(t) => self.meta.insert(TEAM_KEY, &t.0)?,
            None => self.meta.remove(TEAM_KEY)?,
        };
        self.sync()
    }

    fn blocks(&self, team: &TeamId) -> Result<Vec<Vec<u8>>, StoreError> {
        self.blocks
            .scan_prefix(team.0)
            .map(|kv| kv.map(|(_, v)| v.to_vec()).map_err(StoreError::from))
            .collect()
    }

    fn put_blocks(&self, team: &TeamId, blocks: &[(BlockHash, &[u8])]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for (hash, bytes) in blocks {
            batch.insert([team.0, hash.0].concat(), *bytes);
        }
        self.blocks.apply_batch(batch)?;
        self.sync()
    }

    fn delete_team(&self, team: &TeamId) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for kv in self.blocks.scan_prefix(team.0) {
            batch.remove(kv?.0);
        }
        self.blocks.apply_batch(batch)?;
        self.sync()
    }

    fn peers(&self) -> Result<Vec<PeerRecord>, StoreError> {
        self.peers.iter().map(|kv| from_record(&kv?.1)).collect()
    }

    fn put_peer(&self, record: &PeerRecord) -> Result<(), StoreError> {
        self.peers
            .insert(record.peer_id.as_bytes(), to_record(record))?;
        Ok(())
    }

    fn delete_peer(&self, peer_id: &str) -> Result<(), StoreError> {
        self.peers.remove(peer_id.as_bytes())?;
        Ok(())
    }

    fn put_ticket(&self, nonce: &[u8; 16], expires_at: Timestamp) -> Result<(), StoreError> {
        self.tickets
            .insert(nonce, &expires_at.as_unix_millis().to_be_bytes())?;
        self.sync()
    }

    fn ticket(&self, nonce: &[u8; 16]) -> Result<Option<Timestamp>, StoreError> {
        Ok(self.tickets.get(nonce)?.and_then(|v| {
            <[u8; 8]>::try_from(v.as_ref())
                .ok()
                .map(|b| Timestamp::from_unix_millis(u64::from_be_bytes(b)))
        }))
    }

    fn take_ticket(&self, nonce: &[u8; 16]) -> Result<Option<Timestamp>, StoreError> {
        let old = self.tickets.remove(nonce)?;
        self.sync()?;
        Ok(old.and_then(|v| {
            <[u8; 8]>::try_from(v.as_ref())
                .ok()
                .map(|b| Timestamp::from_unix_millis(u64::from_be_bytes(b)))
        }))
    }

    fn prune_tickets(&self, now: Timestamp) -> Result<usize, StoreError> {
        let mut gone = 0;
        for kv in self.tickets.iter() {
            let (k, v) = kv?;
            let expired = <[u8; 8]>::try_from(v.as_ref())
                .map(|b| u64::from_be_bytes(b) < now.as_unix_millis())
                .unwrap_or(true);
            if expired {
                self.tickets.remove(k)?;
                gone += 1;
            }
        }
        Ok(gone)
    }

    fn contacts(&self) -> Result<BTreeMap<PeerId, Vec<u8>>, StoreError> {
        by_peer(&self.contacts)
    }

    fn contact(&self, peer: &PeerId) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.contacts.get(peer.to_bytes())?.map(|v| v.to_vec()))
    }

    fn put_contact(&self, peer: &PeerId, record: &[u8]) -> Result<(), StoreError> {
        self.contacts.insert(peer.to_bytes(), record)?;
        Ok(())
    }

    fn next_contact_seq(&self) -> Result<u64, StoreError> {
        next_seq(&self.meta, CONTACT_SEQ_KEY)
    }

    fn raise_contact_seq(&self, seen: u64) -> Result<(), StoreError> {
        self.meta.update_and_fetch(CONTACT_SEQ_KEY, |old| {
            let n = old
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(0, u64::from_be_bytes);
            Some(n.max(seen).to_be_bytes().to_vec())
        })?;
        Ok(())
    }

    fn directory_records(&self) -> Result<BTreeMap<PeerId, Vec<u8>>, StoreError> {
        by_peer(&self.directory)
    }

    fn directory_record(&self, peer: &PeerId) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.directory.get(peer.to_bytes())?.map(|v| v.to_vec()))
    }

    fn put_directory_record(&self, peer: &PeerId, record: &[u8]) -> Result<(), StoreError> {
        self.directory.insert(peer.to_bytes(), record)?;
        Ok(())
    }

    fn delete_directory_record(&self, peer: &PeerId) -> Result<(), StoreError> {
        self.directory.remove(peer.to_bytes())?;
        Ok(())
    }

    fn next_directory_seq(&self) -> Result<u64, StoreError> {
        next_seq(&self.meta, DIRECTORY_SEQ_KEY)
    }

    fn relays(&self) -> Result<Vec<String>, StoreError> {
        match self.meta.get(RELAYS_KEY)? {
            None => Ok(vec![]),
            Some(v) => from_record(&v),
        }
    }

    fn put_relays(&self, relays: &[String]) -> Result<(), StoreError> {
        self.meta.insert(RELAYS_KEY, to_record(&relays))?;
        self.sync()
    }

    fn member_days(&self) -> Result<Option<u32>, StoreError> {
        Ok(self
            .meta
            .get(MEMBER_DAYS_KEY)?
            .and_then(|v| <[u8; 4]>::try_from(v.as_ref()).ok())
            .map(u32::from_be_bytes))
    }

    fn set_member_days(&self, days: u32) -> Result<(), StoreError> {
        self.meta.insert(MEMBER_DAYS_KEY, &days.to_be_bytes())?;
        self.sync()
    }
}

impl MailStore for SledStore {
    fn put_outbox(&self, records: &[OutboxRecord]) -> Result<(), StoreError> {
        self.put_outbox_records(records)
    }

    fn put_asks(&self, asks: &[AskRecord]) -> Result<(), StoreError> {
        let (mut batch, mut by_expiry) = (sled::Batch::default(), sled::Batch::default());
        for a in asks {
            batch.insert(a.id.as_bytes(), to_record(a));
            by_expiry.insert(ask_expiry_key(a), &[]);
        }
        // The index first: a crash between the two leaves an index entry
        // for no record (pruned as any), never a record pruning misses.
        self.asks_by_expiry.apply_batch(by_expiry)?;
        self.asks.apply_batch(batch)?;
        Ok(())
    }

    fn ask(&self, id: &str) -> Result<Option<AskRecord>, StoreError> {
        self.asks
            .get(id.as_bytes())?
            .map(|v| from_record(&v))
            .transpose()
    }

    fn prune_asks(&self, before: Timestamp) -> Result<usize, StoreError> {
        // By the expiry index, as dedup records are: the scan reads only
        // what expired, however many asks a week of sends left.
        let mut gone = 0;
        for kv in self
            .asks_by_expiry
            .range(..before.as_unix_millis().to_be_bytes())
        {
            let (k, _) = kv?;
            self.asks.remove(&k[8..])?;
            self.asks_by_expiry.remove(k)?;
            gone += 1;
        }
        Ok(gone)
    }

    fn outbox(&self) -> Result<Vec<OutboxRecord>, StoreError> {
        self.outbox_live()
    }

    fn outbox_get(&self, id: &str) -> Result<Option<OutboxRecord>, StoreError> {
        self.outbox_record(id)
    }

    fn outbox_envelope(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.outbox_envelope_of(id)
    }

    fn outbox_done(&self, limit: usize) -> Result<Vec<OutboxRecord>, StoreError> {
        self.outbox_done_newest(limit)
    }

    fn prune_outbox_done(&self, before: Timestamp) -> Result<usize, StoreError> {
        self.prune_outbox_before(before)
    }

    fn put_inbox(&self, records: &[InboxRecord], asks: &[AskRecord]) -> Result<(), StoreError> {
        use sled::Transactional;
        let last = records.iter().map(|r| r.seq).max();
        (
            &self.inbox,
            &self.inbox_ids,
            &self.meta,
            &self.held,
            &self.unread,
            &self.asks,
        )
            .transaction(|(inbox, ids, meta, held, unread, asks_tree)| {
                for a in asks {
                    asks_tree.insert(a.id.as_bytes(), to_record(a))?;
                }
                for r in records {
                    insert_inbox([inbox, ids, held, unread], r)?;
                }
                if let Some(last) = last {
                    meta.insert(INBOX_SEQ_KEY, &last.to_be_bytes())?;
                }
                Ok(())
            })
            .map_err(tx_error)
    }

    fn move_inbox(&self, old_seq: u64, record: &InboxRecord) -> Result<(), StoreError> {
        use sled::Transactional;
        (
            &self.inbox,
            &self.inbox_ids,
            &self.meta,
            &self.held,
            &self.unread,
        )
            .transaction(|(inbox, ids, meta, held, unread)| {
                inbox.remove(&old_seq.to_be_bytes())?;
                held.remove(&old_seq.to_be_bytes())?;
                unread.remove(&old_seq.to_be_bytes())?;
                if record.held.is_some() {
                    held.insert(&record.seq.to_be_bytes(), record.from_peer.as_bytes())?;
                }
                if is_unread(record) {
                    unread.insert(&record.seq.to_be_bytes(), unread_value(record))?;
                }
                inbox.insert(&record.seq.to_be_bytes(), to_record(record))?;
                ids.insert(id_key(&record.id), &record.seq.to_be_bytes())?;
                meta.insert(INBOX_SEQ_KEY, &record.seq.to_be_bytes())?;
                Ok(())
            })
            .map_err(tx_error)
    }

    fn update_inbox(&self, records: &[InboxRecord]) -> Result<(), StoreError> {
        use sled::Transactional;
        // One transaction: the read index never names a record that is not
        // read, which retention would otherwise forget unread.
        (&self.inbox, &self.read, &self.held, &self.unread)
            .transaction(|(inbox, read, held, unread)| {
                for r in records {
                    inbox.insert(&r.seq.to_be_bytes(), to_record(r))?;
                    if is_unread(r) {
                        unread.insert(&r.seq.to_be_bytes(), unread_value(r))?;
                    } else {
                        unread.remove(&r.seq.to_be_bytes())?;
                    }
                    if let Some(at) = r.read_at {
                        read.insert(
                            [at.to_be_bytes(), r.seq.to_be_bytes()].concat(),
                            b"".as_ref(),
                        )?;
                    }
                    if r.held.is_some() {
                        held.insert(&r.seq.to_be_bytes(), r.from_peer.as_bytes())?;
                    }
                }
                Ok(())
            })
            .map_err(tx_error)
    }

    fn held_index(&self) -> Result<Vec<(u64, String)>, StoreError> {
        counted(&self.held, self.held.iter())
            .map(|kv| {
                let (k, v) = kv?;
                let seq = <[u8; 8]>::try_from(k.as_ref()).map_or(0, u64::from_be_bytes);
                Ok((seq, String::from_utf8_lossy(&v).into_owned()))
            })
            .collect()
    }

    fn unread_index(&self) -> Result<Vec<(u64, Option<String>)>, StoreError> {
        counted(&self.unread, self.unread.iter())
            .map(|kv| {
                let (k, v) = kv?;
                let seq = <[u8; 8]>::try_from(k.as_ref()).map_or(0, u64::from_be_bytes);
                let mailbox = String::from_utf8_lossy(&v).into_owned();
                Ok((seq, (!mailbox.is_empty()).then_some(mailbox)))
            })
            .collect()
    }

    fn read_before(&self, before: Timestamp) -> Result<Vec<u64>, StoreError> {
        counted(
            &self.read,
            self.read.range(..before.as_unix_millis().to_be_bytes()),
        )
        .map(|kv| {
            let (k, _) = kv?;
            Ok(<[u8; 8]>::try_from(&k[8..16]).map_or(0, u64::from_be_bytes))
        })
        .collect()
    }

    fn inbox_at(&self, seq: u64) -> Result<Option<InboxRecord>, StoreError> {
        match self.inbox.get(seq.to_be_bytes())? {
            Some(v) => Ok(Some(from_record(&v)?)),
            None => Ok(None),
        }
    }

    fn inbox_after(&self, after: u64, limit: usize) -> Result<Vec<InboxRecord>, StoreError> {
        let Some(start) = after.checked_add(1) else {
            return Ok(vec![]);
        };
        counted(&self.inbox, self.inbox.range(start.to_be_bytes()..))
            .take(limit)
            .map(|kv| from_record(&kv?.1))
            .collect()
    }

    fn delete_inbox(&self, seqs: &[u64], now: Timestamp) -> Result<(), StoreError> {
        for s in seqs {
            self.held.remove(s.to_be_bytes())?;
            self.unread.remove(s.to_be_bytes())?;
            if let Some(old) = self.inbox.get(s.to_be_bytes())? {
                let r: InboxRecord = from_record(&old)?;
                // Its dedup record first: a crash between the two leaves
                // both, never neither.
                if let Some((key, until)) = r.dedup_after(now) {
                    self.seen.insert(&key, &until.to_be_bytes())?;
                    self.seen_by_until.insert(by_until_key(&key, until), &[])?;
                }
                self.inbox.remove(s.to_be_bytes())?;
                self.inbox_ids.remove(id_key(&r.id))?;
                if let Some(at) = r.read_at {
                    self.read
                        .remove([at.to_be_bytes(), s.to_be_bytes()].concat())?;
                }
            }
        }
        Ok(())
    }

    fn inbox_get(&self, id: &str) -> Result<Option<InboxRecord>, StoreError> {
        let Some(seq) = self.inbox_ids.get(id_key(id))? else {
            return Ok(None);
        };
        match self.inbox.get(&seq)? {
            Some(v) => Ok(Some(from_record(&v)?)),
            None => Ok(None),
        }
    }

    fn inbox_ids_starting(&self, prefix: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        Ok(id_keys_starting(&self.inbox_ids, prefix, limit)?)
    }

    fn inbox_has(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.inbox_ids.contains_key(id_key(id))?)
    }

    fn last_inbox_seq(&self) -> Result<u64, StoreError> {
        Ok(self
            .meta
            .get(INBOX_SEQ_KEY)?
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map_or(0, u64::from_be_bytes))
    }

    fn seen(&self, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.seen.contains_key(key)?)
    }

    fn prune_seen(&self, now: Timestamp) -> Result<usize, StoreError> {
        // Only the records whose window is over are read.
        let mut gone = 0;
        for kv in self
            .seen_by_until
            .range(..now.as_unix_millis().to_be_bytes())
        {
            let (k, _) = kv?;
            self.seen.remove(&k[8..])?;
            self.seen_by_until.remove(k)?;
            gone += 1;
        }
        Ok(gone)
    }

    fn folders(&self) -> Result<Vec<FolderBinding>, StoreError> {
        self.consent
            .scan_prefix(FOLDER_PREFIX)
            .map(|kv| from_record(&kv?.1))
            .collect()
    }

    fn put_folder(&self, binding: &FolderBinding) -> Result<(), StoreError> {
        self.consent.insert(
            [FOLDER_PREFIX, binding.mailbox.as_bytes()].concat(),
            to_record(binding),
        )?;
        self.sync()
    }

    fn profiles(&self) -> Result<Vec<ProfileRecord>, StoreError> {
        self.consent
            .scan_prefix(PROFILE_PREFIX)
            .map(|kv| from_record(&kv?.1))
            .collect()
    }

    fn put_profile(&self, record: &ProfileRecord) -> Result<(), StoreError> {
        self.consent.insert(
            [PROFILE_PREFIX, record.mailbox.as_bytes()].concat(),
            to_record(record),
        )?;
        self.sync()
    }

    fn trusted(&self) -> Result<Vec<String>, StoreError> {
        self.consent
            .scan_prefix(TRUSTED_PREFIX)
            .map(|kv| {
                let (k, _) = kv?;
                Ok(String::from_utf8_lossy(&k[TRUSTED_PREFIX.len()..]).into_owned())
            })
            .collect()
    }

    fn put_trusted(&self, peer: &str) -> Result<(), StoreError> {
        self.consent
            .insert([TRUSTED_PREFIX, peer.as_bytes()].concat(), b"".as_ref())?;
        self.sync()
    }

    fn remove_trusted(&self, peer: &str) -> Result<(), StoreError> {
        self.consent
            .remove([TRUSTED_PREFIX, peer.as_bytes()].concat())?;
        self.sync()
    }

    fn paused(&self) -> Result<bool, StoreError> {
        Ok(self.consent.get(PAUSED_KEY)?.is_some())
    }

    fn set_paused(&self, paused: bool) -> Result<(), StoreError> {
        if paused {
            self.consent.insert(PAUSED_KEY, b"".as_ref())?;
        } else {
            self.consent.remove(PAUSED_KEY)?;
        }
        self.sync()
    }
}

/// A tree keyed by PeerId bytes, read whole.
fn by_peer(tree: &sled::Tree) -> Result<BTreeMap<PeerId, Vec<u8>>, StoreError> {
    let mut out = BTreeMap::new();
    for kv in tree.iter() {
        let (k, v) = kv?;
        let peer = PeerId::from_bytes(&k).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        out.insert(peer, v.to_vec());
    }
    Ok(out)
}

/// The next number of the counter at `key` (1 first), atomically.
fn next_seq(meta: &sled::Tree, key: &[u8]) -> Result<u64, StoreError> {
    let next = meta
        .update_and_fetch(key, |old| {
            let n = old
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(0, u64::from_be_bytes);
            Some((n + 1).to_be_bytes().to_vec())
        })?
        .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
        .map_or(1, u64::from_be_bytes);
    Ok(next)
}

impl Store for SledStore {
    fn flush(&self) -> Result<(), StoreError> {
        self.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::reopen;
    use crate::store::{MailStore, TeamStore};

    #[test]
    fn records_its_format_and_keeps_data_across_opens() {
        let dir = tempfile::tempdir().unwrap();
        let team = TeamId([3; 32]);
        {
            let s = reopen(dir.path()).unwrap();
            assert_eq!(s.format_version().unwrap(), FORMAT_VERSION);
            s.set_team(Some(team)).unwrap();
            s.put_blocks(
                &team,
                &[(BlockHash([1; 32]), b"one"), (BlockHash([2; 32]), b"two")],
            )
            .unwrap();
        }
        let s = reopen(dir.path()).unwrap();
        assert_eq!(s.team().unwrap(), Some(team));
        assert_eq!(
            s.blocks(&team).unwrap(),
            vec![b"one".to_vec(), b"two".to_vec()]
        );
        assert!(s.blocks(&TeamId([4; 32])).unwrap().is_empty());
    }

    #[test]
    fn refuses_a_newer_store() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::open(dir.path()).unwrap();
            db.open_tree(META)
                .unwrap()
                .insert(FORMAT_KEY, &99u32.to_be_bytes())
                .unwrap();
            db.flush().unwrap();
        }
        let e = reopen(dir.path()).unwrap_err();
        assert!(matches!(
            e,
            StoreError::TooNew {
                found: 99,
                supported: FORMAT_VERSION,
                ..
            }
        ));
        assert!(e.to_string().contains("upgrade agentmesh"), "{e}");
    }

    #[test]
    fn migrates_an_older_store() {
        let dir = tempfile::tempdir().unwrap();
        let team = TeamId([5; 32]);
        {
            // A format-0 store: data, but no recorded version.
            let db = sled::open(dir.path()).unwrap();
            db.open_tree("blocks")
                .unwrap()
                .insert([team.0, [9; 32]].concat(), b"block".as_ref())
                .unwrap();
            db.flush().unwrap();
        }
        let s = reopen(dir.path()).unwrap();
        assert_eq!(s.format_version().unwrap(), FORMAT_VERSION);
        assert_eq!(s.blocks(&team).unwrap(), vec![b"block".to_vec()]);
    }

    #[test]
    fn migrates_json_records_to_cbor() {
        let dir = tempfile::tempdir().unwrap();
        let peer = PeerRecord {
            peer_id: "12D3KooWtest".into(),
            addrs: vec!["/ip4/127.0.0.1/tcp/1".into()],
            rtt_us: Some(5),
            last_seen: None,
            relay: false,
        };
        {
            // A format-1 store: JSON records.
            let db = sled::open(dir.path()).unwrap();
            db.open_tree(META)
                .unwrap()
                .insert(FORMAT_KEY, &1u32.to_be_bytes())
                .unwrap();
            db.open_tree("peers")
                .unwrap()
                .insert(peer.peer_id.as_bytes(), serde_json::to_vec(&peer).unwrap())
                .unwrap();
            db.flush().unwrap();
        }
        let s = reopen(dir.path()).unwrap();
        assert_eq!(s.format_version().unwrap(), FORMAT_VERSION);
        assert_eq!(s.peers().unwrap(), vec![peer]);
    }

    #[test]
    fn migrates_dedup_records_to_an_index_by_window() {
        let dir = tempfile::tempdir().unwrap();
        {
            // A format-2 store with two dedup records.
            let db = sled::open(dir.path()).unwrap();
            db.open_tree(META)
                .unwrap()
                .insert(FORMAT_KEY, &2u32.to_be_bytes())
                .unwrap();
            let seen = db.open_tree("seen").unwrap();
            seen.insert(b"old-key", &100u64.to_be_bytes()).unwrap();
            seen.insert(b"new-key", &900u64.to_be_bytes()).unwrap();
            db.flush().unwrap();
        }
        let s = reopen(dir.path()).unwrap();
        assert_eq!(s.format_version().unwrap(), FORMAT_VERSION);
        assert_eq!(s.prune_seen(Timestamp::from_unix_millis(500)).unwrap(), 1);
        assert!(!s.seen(b"old-key").unwrap());
        assert!(s.seen(b"new-key").unwrap());
    }

    #[test]
    fn format_5_drops_the_dedup_records_of_messages_the_inbox_holds() {
        let dir = tempfile::tempdir().unwrap();
        let peer = agentmesh_protocol::Identity::generate(&mut rand::rng()).peer_id();
        let mut r = inbox_record(1, None, false, false);
        r.from_peer = peer.to_string();
        r.expires_at = 5_000;
        let (key, until) = r.dedup_after(Timestamp::from_unix_millis(0)).unwrap();
        let sent = OutboxRecord {
            id: format!("{:032x}", 99),
            to_peer: peer.to_string(),
            to: "@alpha".into(),
            kind: crate::api::MessageKind::Tell,
            envelope: vec![],
            status: OutboxStatus::Delivered,
            reason: None,
            attempts: 1,
            created_at: 1_234,
            expires_at: 5_000,
            held: false,
            body_sha256: String::new(),
            deferred_until: None,
            states: vec![],
            carrier: None,
            copy: None,
        };
        {
            // A format-4 store: the message and its dedup record, and a
            // broadcast's record, which stays; the id indices keyed by hex
            // ids, the outbox's naming its record's key.
            let s = SledStore::open(dir.path(), 1 << 20).unwrap();
            s.put_inbox(&[r.clone()], &[]).unwrap();
            s.put_outbox(std::slice::from_ref(&sent)).unwrap();
            s.put_broadcasts(&[], &[(key.clone(), until), (b"broadcast".to_vec(), 9)])
                .unwrap();
            s.inbox_ids.clear().unwrap();
            s.inbox_ids
                .insert(r.id.as_bytes(), &r.seq.to_be_bytes())
                .unwrap();
            s.outbox_done_ids.clear().unwrap();
            s.outbox_done_ids
                .insert(
                    sent.id.as_bytes(),
                    [&sent.created_at.to_be_bytes()[..], sent.id.as_bytes()].concat(),
                )
                .unwrap();
            s.meta.insert(FORMAT_KEY, &4u32.to_be_bytes()).unwrap();
            s.flush().unwrap();
        }
        let s = reopen(dir.path()).unwrap();
        assert_eq!(s.format_version().unwrap(), FORMAT_VERSION);
        assert!(!s.seen(&key).unwrap(), "the inbox record stands for it");
        assert!(s.seen(b"broadcast").unwrap());
        // Both indices keyed by the ids' 16 bytes, and each finds its record.
        assert_eq!(s.inbox_ids.len(), 1);
        assert_eq!(s.inbox_ids.first().unwrap().unwrap().0.len(), 16);
        assert_eq!(s.inbox_get(&r.id).unwrap(), Some(r.clone()));
        assert_eq!(
            s.inbox_ids_starting(&r.id[..5], 6).unwrap(),
            vec![r.id.clone()]
        );
        assert_eq!(s.outbox_done_ids.first().unwrap().unwrap().0.len(), 16);
        assert_eq!(s.outbox_get(&sent.id).unwrap(), Some(sent.clone()));
        // A crash before the version is recorded runs the step again: it
        // leaves what it already rewrote as it is.
        s.meta.insert(FORMAT_KEY, &4u32.to_be_bytes()).unwrap();
        s.flush().unwrap();
        drop(s);
        let s = reopen(dir.path()).unwrap();
        assert_eq!(s.format_version().unwrap(), FORMAT_VERSION);
        assert_eq!(s.inbox_get(&r.id).unwrap(), Some(r.clone()));
        assert_eq!(s.outbox_get(&sent.id).unwrap(), Some(sent.clone()));
        assert_eq!((s.inbox_ids.len(), s.outbox_done_ids.len()), (1, 1));
        // Its index entry went with it: pruning finds only the other.
        assert_eq!(
            s.prune_seen(Timestamp::from_unix_millis(u64::MAX)).unwrap(),
            1
        );
    }

    #[test]
    fn dedup_records_are_forgotten_when_their_window_ends() {
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path()).unwrap();
        let seen = [
            (b"a".to_vec(), 100),
            (b"b".to_vec(), 200),
            (b"c".to_vec(), 300),
        ];
        s.put_broadcasts(&[], &seen).unwrap();
        assert_eq!(s.prune_seen(Timestamp::from_unix_millis(50)).unwrap(), 0);
        assert_eq!(s.prune_seen(Timestamp::from_unix_millis(250)).unwrap(), 2);
        assert!(!s.seen(b"a").unwrap() && !s.seen(b"b").unwrap());
        assert!(s.seen(b"c").unwrap());
        assert_eq!(s.prune_seen(Timestamp::from_unix_millis(250)).unwrap(), 0);
    }

    #[test]
    fn tickets_are_single_use() {
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path()).unwrap();
        let t = Timestamp::from_unix_millis(1000);
        s.put_ticket(&[1; 16], t).unwrap();
        s.put_ticket(&[2; 16], Timestamp::from_unix_millis(10))
            .unwrap();
        assert_eq!(s.take_ticket(&[1; 16]).unwrap(), Some(t));
        assert_eq!(s.take_ticket(&[1; 16]).unwrap(), None);
        assert_eq!(
            s.prune_tickets(Timestamp::from_unix_millis(500)).unwrap(),
            1
        );
        assert_eq!(s.take_ticket(&[2; 16]).unwrap(), None);
    }

    use crate::store::testing::inbox_record;

    #[test]
    fn asks_are_pruned_by_their_expiry_and_counts_move_with_the_inbox() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path(), 1 << 20).unwrap();
        let ask = |id: &str, expires_at: u64| AskRecord {
            id: id.into(),
            to_peer: "p".into(),
            mailbox: None,
            expires_at,
            answers: 0,
        };
        s.put_asks(&[ask("a", 1_000), ask("b", 2_000), ask("c", 3_000)])
            .unwrap();
        // A reply's count is written with its inbox record.
        let counted = AskRecord {
            answers: 1,
            ..ask("b", 2_000)
        };
        s.put_inbox(&[inbox_record(1, None, false, false)], &[counted])
            .unwrap();
        assert_eq!(s.ask("b").unwrap().unwrap().answers, 1);
        assert_eq!(s.prune_asks(Timestamp::from_unix_millis(2_001)).unwrap(), 2);
        assert!(s.ask("a").unwrap().is_none() && s.ask("b").unwrap().is_none());
        assert_eq!(s.ask("c").unwrap().unwrap().expires_at, 3_000);
        assert_eq!(s.prune_asks(Timestamp::from_unix_millis(2_001)).unwrap(), 0);
    }

    #[test]
    fn the_unread_index_follows_every_write_and_is_built_by_migration() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = SledStore::open(dir.path(), 1 << 20).unwrap();
            s.put_inbox(
                &[
                    inbox_record(1, None, false, false),
                    inbox_record(2, Some("coder"), false, false),
                    inbox_record(3, Some("coder"), true, false),
                    inbox_record(4, Some("coder"), false, true),
                ],
                &[],
            )
            .unwrap();
            assert_eq!(
                s.unread_index().unwrap(),
                vec![(1, None), (2, Some("coder".into()))]
            );
            // Read: out. Released from hold: in, at its new seq. Deleted: out.
            s.update_inbox(&[inbox_record(2, Some("coder"), true, false)])
                .unwrap();
            s.move_inbox(4, &inbox_record(5, Some("coder"), false, false))
                .unwrap();
            s.delete_inbox(&[1], Timestamp::from_unix_millis(0))
                .unwrap();
            assert_eq!(s.unread_index().unwrap(), vec![(5, Some("coder".into()))]);
            // A format-3 store had no index: drop it and say so.
            s.unread.clear().unwrap();
            s.meta.insert(FORMAT_KEY, &3u32.to_be_bytes()).unwrap();
            s.flush().unwrap();
        }
        let s = reopen(dir.path()).unwrap();
        assert_eq!(s.format_version().unwrap(), FORMAT_VERSION);
        assert_eq!(s.unread_index().unwrap(), vec![(5, Some("coder".into()))]);
    }
}
