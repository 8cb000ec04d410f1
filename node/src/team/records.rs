//! The team-wide directory: every member's signed directory record (its
//! mailboxes with profile, goal and status), carried like contact records
//! by the sync on every new connection, and announced by gossip when one
//! changes. Owned by the team part (it runs inside the network's loop);
//! this machine's own mailboxes come from the mail actor
//! ([`LocalDirectory`]).
//!
//! ```text
//!  LocalDirectory changed ── profile, goal or mailboxes: republish now
//!                         ── status or last_active only: at most once per REPUBLISH_EVERY
//!  republish: sign (next seq), store, gossip Announce{peer, seq} on DIRECTORY_TOPIC
//!  Announce from a member via a member, newer than held ── sync with it
//!  sync Digest{directory: [(peer, seq)]} ── answer: records newer than those, ≤ 64 KiB, more_records
//!  take: verify, bounds (refused whole, audited), member, newer ── store
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use agentmesh_protocol::directory::{
    DirectoryAnnounce, DirectoryEntry, DirectoryError, DirectoryRecord, SignedDirectory,
    Status as WireStatus,
};
use agentmesh_protocol::{Name, PeerId, Timestamp, Wire};
use serde_bytes::ByteBuf;
use tokio::sync::watch;

use super::network::Network;
use super::state::TeamCore;
use crate::api;
use crate::api::SessionStatus as Status;
use crate::audit::AuditEvent;
use crate::wire::{
    DIRECTORY_RECORD, MAX_RECORD_BYTES_PER_SYNC, MAX_RECORDS_PER_SYNC, RecordHave, TypedRecord,
};

/// The least time between two records of this machine that differ only
/// in statuses (a profile, goal or mailbox change goes out at once).
pub const REPUBLISH_EVERY: Duration = Duration::from_secs(30);

/// The most bytes of one `directory` page, as JSON, and the default.
pub const MAX_DIRECTORY_PAGE: usize = 24 * 1024;

/// Refusals of received records audited per minute, at most (a member
/// could send the same bad record in every sync).
const REFUSALS_AUDITED_PER_MINUTE: u32 = 10;

/// A status as the wire says it.
fn to_wire(s: Status) -> WireStatus {
    match s {
        Status::Working => WireStatus::Working,
        Status::Idle => WireStatus::Idle,
        Status::Offline => WireStatus::Offline,
    }
}

/// A status the wire said.
fn from_wire(s: WireStatus) -> Status {
    match s {
        WireStatus::Working => Status::Working,
        WireStatus::Idle => Status::Idle,
        WireStatus::Offline => Status::Offline,
    }
}

/// What of a mailbox list changes a record at once: everything but the
/// statuses.
fn content(d: &LocalDirectory) -> Vec<(Option<&str>, &str, &str)> {
    d.mailboxes
        .iter()
        .map(|m| (m.mailbox.as_deref(), m.profile.as_str(), m.goal.as_str()))
        .collect()
}

fn entry(m: &LocalMailbox) -> Option<DirectoryEntry> {
    let mailbox = match &m.mailbox {
        None => None,
        Some(n) => Some(Name::parse("mailbox name", n).ok()?),
    };
    Some(DirectoryEntry {
        mailbox,
        profile: m.profile.clone(),
        goal: m.goal.clone(),
        status: to_wire(m.status),
        last_active: m.last_active,
    })
}

/// This machine's record and when it was made, and the refusals audited.
#[derive(Debug)]
pub struct Published {
    local: watch::Receiver<Arc<LocalDirectory>>,
    /// What the last record said.
    last: Option<Arc<LocalDirectory>>,
    /// When the last record was made (calendar time).
    last_at: Option<Timestamp>,
    /// A status change waits for [`REPUBLISH_EVERY`].
    pending: bool,
    refusals: (u64, u32),
    /// Records announced that are newer than held: (peer, seq).
    wanted: HashMap<PeerId, u64>,
    /// This machine is a carrier (`carry = true`): its records say so.
    always_on: bool,
}

impl Published {
    /// Publishes what `local` says of this machine's mailboxes, and
    /// whether it is `always_on` (a carrier).
    pub fn new(local: watch::Receiver<Arc<LocalDirectory>>, always_on: bool) -> Published {
        Published {
            local,
            last: None,
            last_at: None,
            pending: false,
            refusals: (0, 0),
            wanted: HashMap::new(),
            always_on,
        }
    }

    /// This machine's mailboxes as of now.
    pub fn local(&self) -> Arc<LocalDirectory> {
        self.local.borrow().clone()
    }

    /// Republishes if this machine's mailboxes changed: at once for a
    /// profile, goal or mailbox change, else once [`REPUBLISH_EVERY`]
    /// has passed since the last record. Only a member publishes.
    pub fn refresh(&mut self, core: &mut TeamCore, net: &mut dyn Network) {
        if !core.am_member() {
            return;
        }
        let now_dir = self.local.borrow_and_update().clone();
        let now = core.wall();
        let first = self.last.is_none();
        let changed = self.last.as_ref().is_none_or(|l| **l != *now_dir);
        if !changed && !self.pending && !first {
            return;
        }
        let content_changed = self
            .last
            .as_ref()
            .is_none_or(|l| content(l) != content(&now_dir));
        let due = self.last_at.is_none_or(|t| {
            now.as_unix_millis().saturating_sub(t.as_unix_millis())
                >= REPUBLISH_EVERY.as_millis() as u64
        });
        if !(first || content_changed || due) {
            self.pending = true;
            return;
        }
        let seq = match core.store.next_directory_seq() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot number a directory record");
                return;
            }
        };
        let mut record = DirectoryRecord {
            peer: core.me.peer_id(),
            seq,
            at: now,
            always_on: self.always_on,
            mailboxes: now_dir.mailboxes.iter().filter_map(entry).collect(),
        };
        // A record over 48 KiB would be refused whole: the last mailboxes'
        // profiles give way (the owner's is first and stays).
        let signed = loop {
            match SignedDirectory::sign(record.clone(), &core.me) {
                Ok(s) => break s,
                Err(DirectoryError::TooLarge(why)) if record.mailboxes.len() > 1 => {
                    tracing::warn!(%why, "this machine's directory record is too large; leaving out the last mailbox");
                    record.mailboxes.pop();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot sign this machine's directory record");
                    return;
                }
            }
        };
        if let Err(e) = core
            .store
            .put_directory_record(&core.me.peer_id(), signed.bytes())
        {
            tracing::warn!(error = %e, "cannot store this machine's directory record");
            return;
        }
        self.last = Some(now_dir);
        self.last_at = Some(now);
        self.pending = false;
        net.publish_directory(
            DirectoryAnnounce {
                peer: core.me.peer_id(),
                seq,
            }
            .to_bytes(),
        );
    }

    /// What a digest says this machine holds: `(machine, seq)` of every
    /// current member's record.
    pub fn holding(&self, core: &TeamCore) -> Vec<RecordHave> {
        let Ok(all) = core.store.directory_records() else {
            return vec![];
        };
        all.into_iter()
            .filter(|(p, _)| core.is_member(p))
            .filter_map(|(p, b)| {
                let s = SignedDirectory::from_bytes_unverified(&b).ok()?;
                Some(RecordHave {
                    peer: p.to_bytes(),
                    seq: s.record().seq,
                })
            })
            .take(MAX_RECORDS_PER_SYNC)
            .collect()
    }

    /// The records a sync answer carries: this machine's first, then every
    /// current member's that the asker (holding `theirs`) lacks or holds
    /// older, up to [`MAX_RECORD_BYTES_PER_SYNC`]; and whether some were
    /// left for the next sync. Only ever called for a member's sync.
    pub fn share(&self, core: &TeamCore, theirs: &[RecordHave]) -> (Vec<TypedRecord>, bool) {
        let have: HashMap<Vec<u8>, u64> = theirs
            .iter()
            .take(MAX_RECORDS_PER_SYNC)
            .map(|h| (h.peer.clone(), h.seq))
            .collect();
        let Ok(all) = core.store.directory_records() else {
            return (vec![], false);
        };
        let me = core.me.peer_id();
        let mut ordered: Vec<(PeerId, Vec<u8>)> = all
            .into_iter()
            .filter(|(p, _)| *p == me || core.is_member(p))
            .collect();
        // Its own first: what the asker most likely lacks.
        ordered.sort_by_key(|(p, _)| *p != me);
        let mut out = vec![];
        let mut bytes = 0;
        let mut more = false;
        for (peer, record) in ordered {
            let Ok(s) = SignedDirectory::from_bytes_unverified(&record) else {
                continue;
            };
            if have
                .get(&peer.to_bytes())
                .is_some_and(|seq| *seq >= s.record().seq)
            {
                continue;
            }
            if bytes + record.len() > MAX_RECORD_BYTES_PER_SYNC || out.len() >= MAX_RECORDS_PER_SYNC
            {
                more = true;
                break;
            }
            bytes += record.len();
            out.push(TypedRecord {
                kind: DIRECTORY_RECORD.into(),
                bytes: ByteBuf::from(record),
            });
        }
        (out, more)
    }

    /// Keeps the directory records of `records` (from `from`, a member)
    /// that verify, keep their bounds, name a current member and
    /// supersede what is held; skips kinds this version does not know. A
    /// record over its bounds or that does not verify is refused whole
    /// and audited. The number kept.
    pub fn take(&mut self, core: &mut TeamCore, from: PeerId, records: &[TypedRecord]) -> usize {
        let mut kept = 0;
        for r in records.iter().take(MAX_RECORDS_PER_SYNC) {
            if r.kind != DIRECTORY_RECORD {
                tracing::debug!(kind = %r.kind, "skipping a record of a kind this version does not know");
                continue;
            }
            let signed = match SignedDirectory::from_bytes(&r.bytes) {
                Ok(s) => s,
                Err(e) => {
                    self.refused(core, from, &e.to_string(), r.bytes.len());
                    continue;
                }
            };
            let peer = signed.record().peer;
            if peer == core.me.peer_id() || !core.is_member(&peer) {
                continue;
            }
            let newer = held(core, &peer).is_none_or(|old| signed.supersedes(&old));
            if !newer {
                continue;
            }
            if let Err(e) = core.store.put_directory_record(&peer, signed.bytes()) {
                tracing::warn!(error = %e, "cannot store a directory record");
                continue;
            }
            if self
                .wanted
                .get(&peer)
                .is_some_and(|s| *s <= signed.record().seq)
            {
                self.wanted.remove(&peer);
            }
            kept += 1;
        }
        kept
    }

    fn refused(&mut self, core: &mut TeamCore, from: PeerId, why: &str, len: usize) {
        let minute = core.wall().as_unix_millis() / 60_000;
        if self.refusals.0 != minute {
            self.refusals = (minute, 0);
        }
        tracing::info!(%from, %why, "refused a directory record");
        if self.refusals.1 >= REFUSALS_AUDITED_PER_MINUTE {
            return;
        }
        self.refusals.1 += 1;
        core.audit(
            AuditEvent::DirectoryRefused,
            Some(&from),
            format!("a directory record of {len} bytes was refused whole: {why}"),
        );
    }

    /// A member announced (by gossip) that `peer`'s record is at `seq`:
    /// whether it is newer than held (then the caller syncs with `via`).
    pub fn announced(&mut self, core: &TeamCore, data: &[u8]) -> bool {
        let Ok(a) = DirectoryAnnounce::from_bytes(data) else {
            tracing::debug!("a directory announcement does not decode");
            return false;
        };
        if a.peer == core.me.peer_id() || !core.is_member(&a.peer) {
            return false;
        }
        let newer = held(core, &a.peer).is_none_or(|h| h.record().seq < a.seq);
        if newer {
            self.wanted.insert(a.peer, a.seq);
        }
        newer
    }

    /// Forgets the records of machines no longer members.
    pub fn prune(&self, core: &TeamCore) {
        let Ok(all) = core.store.directory_records() else {
            return;
        };
        for peer in all.keys() {
            if *peer != core.me.peer_id()
                && !core.is_member(peer)
                && let Err(e) = core.store.delete_directory_record(peer)
            {
                tracing::warn!(error = %e, "cannot forget a directory record");
            }
        }
    }

    /// A page of the team's directory: every current member, by name,
    /// with its mailboxes (this machine's as they are now), after the
    /// mailbox `after`, of at most about `max_bytes` of JSON.
    pub fn page(
        &self,
        core: &TeamCore,
        after: Option<&str>,
        max_bytes: usize,
    ) -> api::DirectoryPage {
        let team = core.state();
        let me = core.me.peer_id();
        let records: BTreeMap<PeerId, SignedDirectory> = core
            .store
            .directory_records()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(p, b)| Some((p, SignedDirectory::from_bytes_unverified(&b).ok()?)))
            .collect();
        let local = self.local();
        let mut machines: Vec<(String, String, PeerId)> = match team {
            Some(t) => t
                .members()
                .filter(|m| m.standing == agentmesh_protocol::team::Standing::Current)
                .map(|m| (m.name.to_string(), m.owner.to_string(), m.peer))
                .collect(),
            None => vec![(core.settings.name.to_string(), String::new(), me)],
        };
        machines.sort();
        // Rows in order: each mailbox of each machine (a machine with no
        // record is one row with no mailbox), named by its address.
        let max_bytes = max_bytes.clamp(1024, MAX_DIRECTORY_PAGE);
        let mut out: Vec<api::DirectoryMachineView> = vec![];
        let mut bytes = 0;
        let mut last_cursor: Option<String> = None;
        let mut next_after = None;
        let mut past = after.is_none();
        'machines: for (name, owner, peer) in machines {
            let this = peer == me;
            let record = records.get(&peer);
            let mailboxes = if this {
                local
                    .mailboxes
                    .iter()
                    .map(|m| api::DirectoryMailboxView {
                        address: address(m.mailbox.as_deref(), &name),
                        profile: m.profile.clone(),
                        goal: m.goal.clone(),
                        status: m.status.into(),
                        last_active: m.last_active.map(api::rfc3339),
                    })
                    .collect()
            } else {
                record.map_or_else(Vec::new, |s| {
                    s.record()
                        .mailboxes
                        .iter()
                        .map(|m| api::DirectoryMailboxView {
                            address: address(m.mailbox.as_ref().map(Name::as_str), &name),
                            profile: m.profile.clone(),
                            goal: m.goal.clone(),
                            status: from_wire(m.status).into(),
                            last_active: m.last_active.map(api::rfc3339),
                        })
                        .collect()
                })
            };
            let mut view = api::DirectoryMachineView {
                name: name.clone(),
                owner,
                peer_id: peer.to_string(),
                this_machine: this,
                // The network's loop says (this machine always is).
                reachable: this,
                last_seen: None,
                known: this || record.is_some(),
                always_on: if this {
                    core.settings.carry.carry
                } else {
                    record.is_some_and(|s| s.record().always_on)
                },
                seq: record.map(|s| s.record().seq),
                updated_at: record.map(|s| api::rfc3339(s.record().at)),
                mailboxes: vec![],
            };
            let rows: Vec<(String, Option<api::DirectoryMailboxView>)> = if mailboxes.is_empty() {
                vec![(format!("@{name}"), None)]
            } else {
                mailboxes
                    .into_iter()
                    .map(|m| (m.address.clone(), Some(m)))
                    .collect()
            };
            let mut shown = false;
            for (cursor, row) in rows {
                if !past {
                    past = Some(cursor.as_str()) == after;
                    continue;
                }
                let size =
                    row.as_ref().map_or(0, json_len) + if shown { 0 } else { json_len(&view) };
                if bytes + size > max_bytes && last_cursor.is_some() {
                    next_after = last_cursor;
                    if shown {
                        out.push(view);
                    }
                    break 'machines;
                }
                bytes += size;
                shown = true;
                last_cursor = Some(cursor);
                if let Some(r) = row {
                    view.mailboxes.push(r);
                }
            }
            if shown {
                out.push(view);
            }
        }
        api::DirectoryPage {
            team: team.and_then(|t| t.genesis().map(|g| g.team_name.to_string())),
            machines: out,
            next_after,
        }
    }
}

/// `MAILBOX@MACHINE`, or `@MACHINE` for the owner's mailbox.
fn address(mailbox: Option<&str>, machine: &str) -> String {
    format!("{}@{machine}", mailbox.unwrap_or_default())
}

/// The length of `v` as JSON.
fn json_len<T: serde::Serialize>(v: &T) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
}

fn held(core: &TeamCore, peer: &PeerId) -> Option<SignedDirectory> {
    core.store
        .directory_record(peer)
        .ok()
        .flatten()
        .and_then(|b| SignedDirectory::from_bytes_unverified(&b).ok())
}

/// One of this machine's mailboxes, as the mail actor publishes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalMailbox {
    /// Its name; `None` for the owner's.
    pub mailbox: Option<String>,
    /// Its profile.
    pub profile: String,
    /// Its goal.
    pub goal: String,
    /// What its session is doing.
    pub status: Status,
    /// When a session of it was last active.
    pub last_active: Option<Timestamp>,
}

/// This machine's mailboxes, the owner's first, then by name; at most
/// [`MAX_DIRECTORY_MAILBOXES`](agentmesh_protocol::directory::MAX_DIRECTORY_MAILBOXES).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalDirectory {
    /// The mailboxes.
    pub mailboxes: Vec<LocalMailbox>,
}
