//! Broadcasts: one message to every mailbox in the team that it concerns.
//!
//! ```text
//!  sender:   broadcast ── one sealed envelope of kind `broadcast` per member machine
//!            (this machine's own copy by the local path) ── outbox, one record per machine
//!  receiver: stored (with its dedup record) ── acknowledged ── judged for each candidate
//!            mailbox, off the actor (the built-in judge, or `[bus] judge_command`)
//!            ── delivered copies into the inbox, the counts sealed for the sender,
//!            the broadcast forgotten: one write ── audited, each judgment with its score
//!  sender:   the counts envelope ── `outbox` shows "delivered to N, dropped for M"
//! ```
//!
//! A mailbox is a candidate when consent would deliver mail from the
//! sender to it (the owner's mailbox, or one opted in; never the sending
//! mailbox itself). A judge that fails drops the broadcast for that
//! mailbox: a wrong delivery wakes an expensive session for nothing.
//!
//! A broadcast accepted and not yet judged is in the store; after a crash
//! it is judged when the daemon starts again. Each delivered copy has an
//! id derived from the broadcast's and the mailbox's, so a judgment
//! written twice is one copy.

mod judged;
pub(in crate::mail) mod judging;
pub(in crate::mail) mod notes;
pub(in crate::mail) mod profiles;
mod queue;
pub(in crate::mail) mod serve;
mod stages;
mod stats;

pub(in crate::mail) use queue::Queue;
pub use queue::{MAX_WAITING_BROADCASTS, MAX_WAITING_PER_SENDER};

use agentmesh_protocol::Name;
use agentmesh_protocol::Timestamp;
use agentmesh_protocol::envelope::{Body, Counts, Header, Kind, MessageId};
use sha2::{Digest, Sha256};

use super::address::mailbox_name;
use super::consent::{Consent, Decision};
use super::{Ctx, address, hex, peer_of};
use crate::api::{self, ApiError, Who};
use crate::audit::AuditEvent;
use crate::codes::ErrorCode;
use crate::judge::JudgeWith;
use crate::mail::guard::loops::Sending;
use crate::mail::post::mailroom::{self, remote_target};
use crate::store::{AuditEntry, CountsRecord, InboxRecord, OutboxRecord, OutboxStatus};
use agentmesh_judge::Input;
pub(in crate::mail) use stages::AgentCalls;
use stages::{Candidate, Outcome, Skips};
pub(in crate::mail) use stats::bus_stats;

/// Broadcasts and the profiles they are judged against, the bus's parts.
#[derive(Debug)]
pub(in crate::mail) struct Bus {
    /// Broadcasts waiting for their judgment.
    pub(in crate::mail) queue: Queue,
    /// Profiles, goals, presets and who is attached: this machine's part
    /// of the directory.
    pub(in crate::mail) profiles: profiles::Profiles,
}

/// A broadcast judged for all its candidates, back from the judging task.
#[derive(Debug)]
pub(super) struct Judgments {
    record: InboxRecord,
    outcomes: Vec<Outcome>,
    /// The mailboxes it was not judged for.
    skips: Skips,
    /// Agent calls the judging made.
    agent_calls: u32,
}

/// The id of the copy of broadcast `id` delivered to `mailbox` (its name;
/// `None` for the owner's): the id that mailbox's inbox holds it under.
pub fn copy_id(id: &str, mailbox: Option<&str>) -> String {
    let mut h = Sha256::new();
    h.update(b"agentmesh/v1 broadcast copy\0");
    h.update(id.as_bytes());
    h.update(b"\0");
    h.update(mailbox.unwrap_or("").as_bytes());
    hex(&h.finalize()[..16])
}

/// A client's `broadcast`.
#[derive(Debug)]
pub(super) struct BroadcastRequest {
    /// Who sends.
    pub who: Who,
    /// The mailbox the client attached to.
    pub attached: Option<String>,
    /// The text.
    pub text: String,
    /// The sending mailbox, else the attached one, else the owner's.
    pub from_mailbox: Option<String>,
}

/// A broadcast sealed and recorded, waiting for its flush.
#[derive(Debug)]
pub(super) struct Sealed {
    /// The answer.
    view: api::BroadcastView,
    /// One outbox record per other member machine.
    remote: Vec<OutboxRecord>,
    /// This machine's copy, judged here.
    local: InboxRecord,
}

/// What sealing a broadcast reads and counts in.
struct SendParts<'a> {
    room: &'a mailroom::Mailroom,
    consent: &'a Consent,
    loops: &'a mut crate::mail::guard::loops::Loops,
    /// Messages the courier has yet to deliver.
    waiting: usize,
}

/// What every copy of one broadcast shares.
struct Copies<'a> {
    room: &'a mailroom::Mailroom,
    body: &'a Body,
    /// The sending address.
    from: &'a str,
    body_sha256: &'a str,
    thread: MessageId,
    hop: u8,
    taint: bool,
    now: Timestamp,
    expires_at: Timestamp,
}

impl Copies<'_> {
    /// The copy for `machine`, sealed, queued, its counts expected and
    /// its acceptance audited.
    fn remote(
        &self,
        machine: &str,
        ctx: &mut Ctx<'_>,
    ) -> Result<(OutboxRecord, api::BroadcastCopyView), ApiError> {
        let (peer, key) = remote_target(machine, 0, ctx.dir)?;
        let header = Header {
            id: MessageId::random(&mut rand::rng()),
            team: key.team,
            from: self.room.peer_id(),
            to: peer,
            kind: Kind::Broadcast,
            in_reply_to: None,
            thread: self.thread,
            hop: self.hop,
            taint: self.taint,
            sent_at: self.now,
            expires_at: self.expires_at,
        };
        let envelope = self.room.seal(&key.x25519, &header, self.body)?;
        let to = format!("*@{machine}");
        let mut record = queued(&header, to.clone(), envelope, self.body_sha256.to_owned());
        record.copy = Some(crate::store::SentCopy {
            text: self.body.text.clone(),
            thread: self.thread.to_string(),
            in_reply_to: None,
        });
        let expected = CountsRecord {
            to_peer: peer.to_string(),
            created_at: self.now.as_unix_millis(),
            reported: None,
        };
        ctx.store.put_counts(&record.id, &expected)?;
        ctx.log.record(
            AuditEvent::Accepted,
            self.now,
            AuditEntry {
                peer: Some(record.to_peer.clone()),
                sender: Some(self.from.to_owned()),
                recipient: Some(to),
                message_id: Some(record.id.clone()),
                body_sha256: Some(self.body_sha256.to_owned()),
                detail: format!("broadcast queued for delivery, hop {}", self.hop),
                ..AuditEntry::default()
            },
        );
        let view = api::BroadcastCopyView {
            machine: machine.to_owned(),
            id: record.id.clone(),
            local: false,
        };
        Ok((record, view))
    }

    /// This machine's own copy, stored to be judged for its mailboxes,
    /// its acceptance audited.
    fn local(
        &self,
        who: Who,
        ctx: &mut Ctx<'_>,
    ) -> Result<(InboxRecord, api::BroadcastCopyView), ApiError> {
        let dir = ctx.dir;
        let me = self.room.peer_id();
        let id = MessageId::random(&mut rand::rng()).to_string();
        let local = InboxRecord {
            seq: 0,
            id: id.clone(),
            from_peer: me.to_string(),
            from: self.from.to_owned(),
            from_owner: (!dir.my_owner.is_empty()).then(|| dir.my_owner.clone()),
            mailbox: None,
            who,
            kind: Kind::Broadcast.into(),
            thread: self.thread.to_string(),
            in_reply_to: None,
            hop: self.hop,
            taint: self.taint,
            text: self.body.text.clone(),
            received_at: self.now.as_unix_millis(),
            expires_at: self.expires_at.as_unix_millis(),
            read_at: None,
            held: None,
            body_sha256: self.body_sha256.to_owned(),
            sent_at: Some(self.now.as_unix_millis()),
        };
        ctx.store
            .put_broadcasts(std::slice::from_ref(&local), &[])?;
        ctx.log.record(
            AuditEvent::Accepted,
            self.now,
            AuditEntry {
                peer: Some(me.to_string()),
                sender: Some(self.from.to_owned()),
                recipient: Some(format!("*@{}", dir.my_name)),
                message_id: Some(id.clone()),
                body_sha256: Some(self.body_sha256.to_owned()),
                detail: format!(
                    "broadcast for the mailboxes on this machine, hop {}",
                    self.hop
                ),
                ..AuditEntry::default()
            },
        );
        let view = api::BroadcastCopyView {
            machine: dir.my_name.clone(),
            id,
            local: true,
        };
        Ok((local, view))
    }
}

/// The names of the team's current members other than this machine,
/// sorted: where a broadcast's copies go (none outside a team).
fn members(dir: &crate::team::Directory, me: agentmesh_protocol::PeerId) -> Vec<String> {
    if !dir.member || dir.team.is_none() {
        return vec![];
    }
    let mut names: Vec<String> = dir
        .machines
        .iter()
        .filter(|(p, m)| **p != me && m.standing == agentmesh_protocol::team::Standing::Current)
        .map(|(_, m)| m.name.clone())
        .collect();
    names.sort();
    names
}

fn seal_broadcast(
    parts: SendParts<'_>,
    req: BroadcastRequest,
    ctx: &mut Ctx<'_>,
) -> Result<Sealed, ApiError> {
    let SendParts {
        room,
        consent,
        loops,
        waiting,
    } = parts;
    let dir = ctx.dir;
    let now = ctx.now.wall;
    api::check_text(&req.text)?;
    let from_mailbox = match req.from_mailbox.as_deref() {
        Some(m) => crate::mail::consent::mailboxes::sending_from(
            m,
            req.attached.as_deref(),
            consent,
            &dir.my_name,
        )?,
        None => req.attached.clone(),
    };
    let from_mailbox = from_mailbox.as_deref().map(mailbox_name).transpose()?;
    let sender = from_mailbox.as_ref().map(Name::as_str);
    let from_addr = address(sender, &dir.my_name);
    let everyone = format!("*@{}", dir.my_name);
    let hop = loops
        .hop_for(sender, None, now)
        .and_then(|hop| {
            loops.check_quota(sender, Sending::Broadcast, now)?;
            Ok(hop)
        })
        .map_err(|r| mailroom::refuse(r, &from_addr, &everyone, loops, ctx))?;
    let taint = loops.taints.is_tainted(sender);
    let (body, body_sha256) = mailroom::body_of(&req.who, (&from_mailbox, &None), req.text)?;
    let me = room.peer_id();
    let members = members(dir, me);
    if !members.is_empty() && waiting + members.len() > super::MAX_OUTBOX {
        return api::err(
            ErrorCode::OutboxFull,
            format!(
                "{} messages are waiting to be delivered; wait for them, or check `agentmesh outbox`",
                super::MAX_OUTBOX
            ),
        );
    }
    loops
        .count_pair(&from_addr, &everyone, hop, now)
        .map_err(|r| mailroom::refuse(r, &from_addr, &everyone, loops, ctx))?;
    loops.count_sent(sender, Sending::Broadcast, now);
    let thread = MessageId::random(&mut rand::rng());
    let expires_at = now.saturating_add(room.lifetime());
    let copies = Copies {
        room,
        body: &body,
        from: &from_addr,
        body_sha256: &body_sha256,
        thread,
        hop,
        taint,
        now,
        expires_at,
    };
    let mut remote = vec![];
    let mut machines = vec![];
    for machine in &members {
        let (record, view) = copies.remote(machine, ctx)?;
        machines.push(view);
        remote.push(record);
    }
    let (local, view) = copies.local(req.who, ctx)?;
    machines.insert(0, view);
    Ok(Sealed {
        view: api::BroadcastView {
            id: thread.to_string(),
            machines,
        },
        remote,
        local,
    })
}

/// The counts envelope for `record`'s sender.
fn seal_counts(
    room: &mailroom::Mailroom,
    record: &InboxRecord,
    counts: Counts,
    ctx: &mut Ctx<'_>,
) -> Result<OutboxRecord, ApiError> {
    let dir = ctx.dir;
    let sender = dir.name_of(&peer_of(&record.from_peer).ok_or_else(|| {
        ApiError::new(ErrorCode::Store, "a stored broadcast's sender is damaged")
    })?);
    let (peer, key) = remote_target(&sender, 0, dir)?;
    let parse = |h: &str| {
        MessageId::parse(h).ok_or_else(|| ApiError::new(ErrorCode::Store, "a stored id is damaged"))
    };
    let now = ctx.now.wall;
    let id = MessageId::random(&mut rand::rng());
    let expires_at = now.saturating_add(room.lifetime());
    let header = Header {
        id,
        team: key.team,
        from: room.peer_id(),
        to: peer,
        kind: Kind::Counts,
        in_reply_to: Some(parse(&record.id)?),
        thread: parse(&record.thread)?,
        hop: 0,
        taint: false,
        sent_at: now,
        expires_at,
    };
    let who = agentmesh_protocol::Who {
        kind: agentmesh_protocol::WhoKind::Agent,
        name: "agentmesh".into(),
        session_id: None,
        task: None,
    };
    let envelope = room.seal(&key.x25519, &header, &counts.to_body(who))?;
    Ok(queued(
        &header,
        address(None, &sender),
        envelope,
        String::new(),
    ))
}

/// The outbox record of an envelope sealed under `header`, queued.
fn queued(header: &Header, to: String, envelope: Vec<u8>, body_sha256: String) -> OutboxRecord {
    OutboxRecord {
        id: header.id.to_string(),
        to_peer: header.to.to_string(),
        to,
        kind: header.kind.into(),
        envelope,
        status: OutboxStatus::Queued,
        reason: None,
        attempts: 0,
        created_at: header.sent_at.as_unix_millis(),
        expires_at: header.expires_at.as_unix_millis(),
        held: false,
        body_sha256,
        deferred_until: None,
        states: vec![],
        carrier: None,
        copy: None,
    }
}

/// A machine's counts for a broadcast copy this machine sent it: kept
/// if the copy went to that machine, and audited.
pub(super) fn on_counts(
    peer: agentmesh_protocol::PeerId,
    id: &str,
    counts: Counts,
    ctx: &mut Ctx<'_>,
) {
    let Ok(Some(mut c)) = ctx.store.counts(id) else {
        return;
    };
    if c.to_peer != peer.to_string() || c.reported.is_some() {
        return;
    }
    c.reported = Some(crate::store::Reported {
        delivered: counts.delivered,
        dropped: counts.dropped,
        skipped: counts.skipped,
        reason: counts.reason.map(Into::into),
        at: ctx.now.wall.as_unix_millis(),
    });
    if let Err(e) = ctx.store.put_counts(id, &c) {
        tracing::warn!(error = %e, "cannot record a broadcast's counts");
        return;
    }
    let machine = ctx.dir.name_of(&peer);
    ctx.log.record(
        AuditEvent::BroadcastCounts,
        ctx.now.wall,
        AuditEntry {
            peer: Some(peer.to_string()),
            recipient: Some(format!("*@{machine}")),
            message_id: Some(id.to_owned()),
            detail: api::CountsView {
                delivered: counts.delivered,
                dropped: counts.dropped,
                skipped: counts.skipped,
                reason: counts.reason.map(Into::into),
                words: String::new(),
            }
            .sentence(&machine, &ctx.dir.my_name),
            ..AuditEntry::default()
        },
    );
}

/// How `outbox` lists this machine's own copy: delivered here.
fn local_outbox(
    local: &InboxRecord,
    me: agentmesh_protocol::PeerId,
    machine: &str,
) -> OutboxRecord {
    OutboxRecord {
        id: local.id.clone(),
        to_peer: me.to_string(),
        to: format!("*@{machine}"),
        kind: local.kind,
        envelope: vec![],
        status: OutboxStatus::Delivered,
        reason: None,
        attempts: 0,
        created_at: local.received_at,
        expires_at: local.expires_at,
        held: false,
        body_sha256: local.body_sha256.clone(),
        deferred_until: None,
        states: vec![crate::store::StateRecord {
            state: crate::store::MessageState::Delivered,
            at: local.received_at,
            reason: None,
            code: None,
            until: None,
            by: None,
        }],
        carrier: None,
        copy: Some(crate::store::SentCopy {
            text: local.text.clone(),
            thread: local.thread.clone(),
            in_reply_to: None,
        }),
    }
}

/// The candidate mailboxes of a broadcast, with what the judge is given
/// for each: every mailbox here consent would deliver the sender's mail
/// to, but the sending mailbox itself; and those consent would hold it
/// for, counted by why.
fn candidates(
    record: &InboxRecord,
    me: agentmesh_protocol::PeerId,
    consent: &Consent,
    profiles: &profiles::Profiles,
    dir: &crate::team::Directory,
    now: Timestamp,
) -> (Vec<Candidate>, Skips) {
    let mut skips = Skips::default();
    let Some(from) = peer_of(&record.from_peer) else {
        return (vec![], skips);
    };
    // Revoked (or gone) since it was accepted: nobody's candidate.
    let current = dir
        .machines
        .get(&from)
        .is_some_and(|m| m.standing == agentmesh_protocol::team::Standing::Current);
    if from != me && !current {
        return (vec![], skips);
    }
    let names = consent
        .bindings()
        .filter(|b| b.allowed)
        .map(|b| Some(b.mailbox.clone()));
    let candidates = std::iter::once(None)
        .chain(names)
        .filter(|m| !(from == me && address(m.as_deref(), &dir.my_name) == record.from))
        .filter(|m| match consent.decide(from, m.as_deref(), dir) {
            Decision::Deliver => true,
            Decision::Hold(api::HeldReason::Paused) => {
                skips.paused += 1;
                false
            }
            Decision::Hold(_) => {
                skips.held_sender += 1;
                false
            }
            Decision::NoMailbox(_) | Decision::FolderDenied(_) => false,
        })
        .map(|m| {
            let j = profiles.for_judge(m.as_deref(), now);
            Candidate {
                agent: None,
                preset: j.preset,
                input: Input {
                    broadcast: record.text.clone(),
                    sender: Some(record.from.clone()),
                    profile: j.profile,
                    goal: j.goal,
                    status: j.status,
                    notes: j.notes,
                    mailbox: m.clone(),
                },
                mailbox: m,
            }
        })
        .collect();
    (candidates, skips)
}
