//! Handing mail to a carrier: mail for a member that has waited
//! [`Handoff::after`] with no connection to it goes, as a copy of the
//! same sealed, signed envelope, to a member that announced it carries
//! (`always_on` in its directory record). The courier keeps its own copy
//! and keeps retrying directly, so whichever path gets there first
//! delivers it, and the recipient's dedup keeps it in the inbox once.
//!
//! ```text
//!  every second: undelivered tell/ask/reply/receipt, older than `after`, recipient
//!  offline, not carried yet ── carry/1 Hold (≤ 256, to one carrier at a time) ──> carrier
//!    accepted or duplicate: noted `carried` (by whom), written with the envelope
//!    refused: not offered to that carrier again (full, or behind on the team: not
//!    before `after` has passed again)    all busy, no answer: that carrier backs off
//! ```

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use agentmesh_protocol::PeerId;
use agentmesh_protocol::directory::SignedDirectory;
use agentmesh_protocol::team::Standing;
use serde_bytes::ByteBuf;

use super::{Carrier, Courier, backoff, past_sending};
use crate::audit::AuditEvent;
use crate::mail::{Ctx, sha};
use crate::net::{Carry, Delivered, Via};
use crate::store::{AuditEntry, MessageState, OutboxRecord, StateRecord};
use crate::wire::{MAX_BATCH_ENVELOPES, MailOutcome, MailRequest, batch_bytes};

/// A carrier's refusals that may not hold later: it is full, or has not
/// yet heard of the recipient's admission, or of its own `carry = true`.
/// That message is offered to it again once `after` has passed (to
/// others meanwhile).
const TRANSIENT_REFUSALS: [&str; 3] = ["carrier_full", "unknown_recipient", "not_a_carrier"];

/// How often the courier looks for mail to hand to a carrier.
const LOOK: Duration = Duration::from_secs(1);
/// How long the carriers read from the directory are used before they
/// are read again.
const CARRIERS_KEPT: Duration = Duration::from_secs(5);

/// What the courier hands to carriers.
#[derive(Debug)]
pub(in crate::mail) struct Handoff {
    /// Mail waits this long for a connection before it is handed over.
    after: Duration,
    /// Batches on their way to carriers: the carrier and the ids.
    batches: HashMap<u64, (PeerId, Vec<String>)>,
    next_batch: u64,
    /// Ids on their way to a carrier.
    handing: HashSet<String>,
    /// (id, carrier) pairs a carrier refused: not offered to it again
    /// (`None`), or not before the time given (a refusal that may not
    /// hold later).
    refused: HashMap<(String, PeerId), Option<Instant>>,
    /// Carriers that failed: failures in a row, and no try before.
    failing: HashMap<PeerId, (u32, Instant)>,
    /// The carriers the directory names, and when they were read.
    known: Option<(Instant, Vec<PeerId>)>,
    next_look: Option<Instant>,
}

impl Default for Handoff {
    fn default() -> Handoff {
        Handoff {
            after: crate::config::CarryRules::default().handoff_after,
            batches: HashMap::new(),
            next_batch: 0,
            handing: HashSet::new(),
            refused: HashMap::new(),
            failing: HashMap::new(),
            known: None,
            next_look: None,
        }
    }
}

/// Whether `r` is mail a carrier may take: a tell, ask, reply or
/// receipt never carried, waiting `after_ms` or longer, not expired.
fn carriable(r: &OutboxRecord, now_ms: u64, after_ms: u64) -> bool {
    matches!(r.kind.as_str(), "tell" | "ask" | "reply" | "receipt")
        && r.carrier.is_none()
        && r.created_at.saturating_add(after_ms) <= now_ms
        && !past_sending(r, now_ms)
}

impl Courier {
    /// Whether `peer` could not be reached lately: no connection could
    /// be made, or its last batch got no answer on one (a relayed
    /// circuit that carries nothing, say). A machine that answers, even
    /// busy, is reachable: a carrier would only add to its load.
    fn unreachable(&self, peer: &PeerId) -> bool {
        self.offline.contains(peer) || self.lost.contains(peer)
    }

    /// Mail waits `after` with no connection before a carrier gets it.
    pub(in crate::mail) fn hand_off_after(&mut self, after: Duration) {
        self.handoff.after = after;
    }

    /// The current carriers other than this machine, by name, as their
    /// signed directory records say (read again every few seconds).
    fn carriers(&mut self, ctx: &Ctx<'_>) -> Vec<PeerId> {
        let now = ctx.now.mono;
        if let Some((at, known)) = &self.handoff.known
            && now < *at + CARRIERS_KEPT
        {
            return known.clone();
        }
        let dir = ctx.dir;
        let records = ctx.store.directory_records().unwrap_or_default();
        let mut known: Vec<PeerId> = records
            .into_iter()
            .filter(|(p, _)| Some(*p) != dir.me)
            .filter(|(p, _)| {
                dir.machines
                    .get(p)
                    .is_some_and(|m| m.standing == Standing::Current)
            })
            .filter(|(_, b)| {
                SignedDirectory::from_bytes_unverified(b).is_ok_and(|s| s.record().always_on)
            })
            .map(|(p, _)| p)
            .collect();
        known.sort_by_key(|p| dir.name_of(p));
        self.handoff.known = Some((now, known.clone()));
        known
    }

    /// Hands mail that waited long enough to a carrier, at most once a
    /// second, one batch per carrier at a time.
    pub(in crate::mail) fn hand_off_due(&mut self, net: &dyn Carrier, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if !self.handoff.batches.is_empty() || self.handoff.next_look.is_some_and(|t| now.mono < t)
        {
            return;
        }
        self.handoff.next_look = Some(now.mono + LOOK);
        // Refusals are remembered while their message waits (those for a
        // while, until then).
        let outbox = &self.outbox;
        (self.handoff.refused)
            .retain(|(id, _), until| outbox.contains_key(id) && until.is_none_or(|t| t > now.mono));
        let (now_ms, after_ms) = (
            now.wall.as_unix_millis(),
            self.handoff.after.as_millis() as u64,
        );
        let sending: HashSet<&String> = self.queues.values().flat_map(|q| &q.sending).collect();
        let mut waiting: Vec<(&OutboxRecord, PeerId)> = self
            .outbox
            .values()
            .filter(|r| carriable(r, now_ms, after_ms))
            .filter(|r| !sending.contains(&r.id) && !self.handoff.handing.contains(&r.id))
            .filter_map(|r| {
                let peer = super::peer_of(&r.to_peer)?;
                self.unreachable(&peer).then_some((r, peer))
            })
            .collect();
        if waiting.is_empty() {
            return;
        }
        waiting.sort_by_key(|(r, _)| r.created_at);
        let waiting: Vec<(String, PeerId)> = waiting
            .into_iter()
            .map(|(r, p)| (r.id.clone(), p))
            .collect();
        // The first carrier (by name) that is not backing off and takes
        // any of what waits: one that refused all of it does not keep
        // the others from their turn.
        let carriers: Vec<PeerId> = (self.carriers(ctx).into_iter())
            .filter(|c| {
                let backing_off =
                    (self.handoff.failing.get(c)).is_some_and(|(_, next)| *next > now.mono);
                !backing_off && !self.unreachable(c)
            })
            .collect();
        let (mut carrier, mut ids, mut envelopes) = (None, vec![], vec![]);
        for c in carriers {
            let most = batch_bytes(self.relayed.contains(&c));
            let mut bytes = 0;
            for (id, peer) in &waiting {
                if ids.len() == MAX_BATCH_ENVELOPES {
                    break;
                }
                if *peer == c || self.handoff.refused.contains_key(&(id.clone(), c)) {
                    continue;
                }
                let Ok(Some(envelope)) = ctx.store.outbox_envelope(id) else {
                    continue;
                };
                if bytes + envelope.len() > most && !ids.is_empty() {
                    break;
                }
                bytes += envelope.len();
                envelopes.push(ByteBuf::from(envelope));
                ids.push(id.clone());
            }
            if !ids.is_empty() {
                carrier = Some(c);
                break;
            }
        }
        let Some(carrier) = carrier else {
            return;
        };
        self.handoff.next_batch += 1;
        let batch = self.handoff.next_batch;
        self.handoff.handing.extend(ids.iter().cloned());
        self.handoff.batches.insert(batch, (carrier, ids));
        let carry = Carry {
            batch,
            peer: carrier,
            via: Via::Hold,
            request: MailRequest { envelopes },
        };
        if !net.carry(carry) {
            // Stopping: handed over after the restart, if still waiting.
            if let Some((_, ids)) = self.handoff.batches.remove(&batch) {
                for id in ids {
                    self.handoff.handing.remove(&id);
                }
            }
        }
    }

    /// A carrier's answer to mail handed to it.
    pub(in crate::mail) fn handed(&mut self, d: Delivered, ctx: &mut Ctx<'_>) {
        let Some((carrier, ids)) = self.handoff.batches.remove(&d.batch) else {
            return;
        };
        for id in &ids {
            self.handoff.handing.remove(id);
        }
        self.handoff.next_look = None;
        let outcomes = match d.result {
            Ok(reply) if reply.outcomes.len() == ids.len() => reply.outcomes,
            Ok(_) => return self.carrier_failed(carrier, "answered a different number", ctx),
            Err(e) => return self.carrier_failed(carrier, &e.why, ctx),
        };
        let name = ctx.dir.name_of(&carrier);
        let at = ctx.now.wall.as_unix_millis();
        let (mut taken, mut busy, mut took) = (0u64, false, false);
        for (id, outcome) in ids.iter().zip(outcomes) {
            match outcome {
                MailOutcome::Accepted { .. } | MailOutcome::Duplicate => took = true,
                MailOutcome::Refused { code, reason } => {
                    tracing::info!(%id, carrier = %name, %code, %reason, "a carrier refused mail");
                    // Full, or behind on the team: it may take it once
                    // `after` has passed again (others meanwhile); any
                    // other refusal is for good.
                    let until = (TRANSIENT_REFUSALS.contains(&code.as_str()))
                        .then(|| ctx.now.mono + self.handoff.after);
                    self.handoff.refused.insert((id.clone(), carrier), until);
                    continue;
                }
                MailOutcome::Busy => {
                    busy = true;
                    continue;
                }
            }
            // Delivered meanwhile (a receipt, or a direct answer): nothing
            // to note.
            let Some(r) = self.outbox.get_mut(id) else {
                continue;
            };
            // Written whole: the record stays in the live outbox, and the
            // store keeps its envelope there.
            let Ok(Some(envelope)) = ctx.store.outbox_envelope(id) else {
                continue;
            };
            r.carrier = Some(name.clone());
            let to = r.to.clone();
            r.note_record(StateRecord {
                state: MessageState::Carried,
                at,
                reason: Some(format!(
                    "{name} took a copy to carry to {to} when it connects"
                )),
                code: None,
                until: None,
                by: Some(name.clone()),
            });
            ctx.log.record(
                AuditEvent::Carried,
                ctx.now.wall,
                AuditEntry {
                    peer: Some(carrier.to_string()),
                    recipient: Some(to),
                    message_id: Some(id.clone()),
                    body_sha256: sha(&r.body_sha256),
                    detail: format!("handed to the carrier {name}: its recipient is offline"),
                    ..AuditEntry::default()
                },
            );
            taken += 1;
            let whole = OutboxRecord {
                envelope,
                ..r.clone()
            };
            self.writes.push(whole);
        }
        tracing::debug!(carrier = %name, taken, "handed mail to a carrier");
        // Busy for all of it: it backs off; it took some: it is well.
        if busy && !took {
            self.carrier_failed(carrier, "busy", ctx);
        } else {
            self.handoff.failing.remove(&carrier);
        }
    }

    fn carrier_failed(&mut self, carrier: PeerId, why: &str, ctx: &Ctx<'_>) {
        let (failures, _) = self
            .handoff
            .failing
            .get(&carrier)
            .copied()
            .unwrap_or((0, ctx.now.mono));
        let next = ctx.now.mono + backoff(failures);
        self.handoff.failing.insert(carrier, (failures + 1, next));
        tracing::debug!(carrier = %ctx.dir.name_of(&carrier), %why, "handing mail to a carrier failed");
    }
}
