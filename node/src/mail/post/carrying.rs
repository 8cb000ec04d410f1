//! Carrying: what this machine holds for members that are offline, when
//! its person made it a carrier (`carry = true`), and carrying it on when
//! they connect. A carrier never opens an envelope: it checks what the
//! header says and that the sender's signature covers every byte, keeps
//! the bytes as they came, and hands them on unchanged. The recipient
//! checks them again, as it checks any mail.
//!
//! ```text
//!  sender ── carry/1 Hold ──> intake: a carrier? sender = connection? in our team?
//!                             recipient a current member (not us)? lifetime, signature?
//!                             already held? room (per sender, in all)?
//!                             ── put_carried ── answered once durable
//!  recipient connects (or its backoff passed) ── carry/1 Deliver (≤ 256, ≤ 900 KiB)
//!     <── its outcome per envelope: accepted, duplicate or refused: forgotten; busy: kept
//!  sweep (5 s): expired, sender or recipient revoked: dropped
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use agentmesh_protocol::PeerId;
use agentmesh_protocol::envelope::{Envelope, Kind};
use agentmesh_protocol::team::Standing;
use agentmesh_protocol::time::MAX_CLOCK_SKEW;
use serde_bytes::ByteBuf;

use crate::audit::AuditEvent;
use crate::config::CarryRules;
use crate::mail::post::courier::{Carrier, backoff};
use crate::mail::{Ctx, peer_of};
use crate::net::{Carry, Delivered, Via};
use crate::store::{AuditEntry, CarriedRecord};
use crate::wire::{MAX_BATCH_ENVELOPES, MailOutcome, MailReply, MailRequest, batch_bytes};

/// Envelopes a carrier holds at once, whatever its byte bounds allow:
/// what it keeps in memory for them (a record of about 300 bytes each,
/// with its key) stays under about 30 MiB.
pub const MAX_CARRIED: usize = 65_536;
/// How often held envelopes are looked at for expiry and revocation.
const SWEEP: Duration = Duration::from_secs(5);
/// How long an envelope its recipient answered busy waits before it is
/// offered again.
const LATER: Duration = Duration::from_secs(10);

/// One recipient's deliveries: whether a batch is on its way, and when
/// the next may go.
#[derive(Debug, Default)]
struct Delivery {
    in_flight: bool,
    failures: u32,
    next_try: Option<Instant>,
}

impl Delivery {
    fn due(&self, now: Instant) -> bool {
        !self.in_flight && self.next_try.is_none_or(|t| t <= now)
    }
}

/// What this machine carries for others.
#[derive(Debug)]
pub(in crate::mail) struct Carrying {
    rules: CarryRules,
    /// Every envelope held, by key (a recipient's are one range).
    held: BTreeMap<Vec<u8>, CarriedRecord>,
    /// Envelopes and bytes held per sender (PeerId text).
    senders: HashMap<String, (usize, u64)>,
    /// Bytes held in all.
    total: u64,
    /// Recipients with envelopes held, and their deliveries.
    deliveries: HashMap<PeerId, Delivery>,
    /// Batches on their way: recipient and keys.
    batches: HashMap<u64, (PeerId, Vec<Vec<u8>>)>,
    next_batch: u64,
    /// Recipients reached only through relays (batches go small).
    relayed: HashSet<PeerId>,
    /// Envelopes their recipient answered busy: not carried on before
    /// the time given (the rest of what is held for it goes meanwhile).
    later: HashMap<Vec<u8>, Instant>,
    next_sweep: Option<Instant>,
}

impl Carrying {
    /// What the store held at start-up, under `rules`.
    pub(in crate::mail) fn load(rules: CarryRules, records: Vec<CarriedRecord>) -> Carrying {
        let mut c = Carrying {
            rules,
            held: BTreeMap::new(),
            senders: HashMap::new(),
            total: 0,
            deliveries: HashMap::new(),
            batches: HashMap::new(),
            next_batch: 0,
            relayed: HashSet::new(),
            later: HashMap::new(),
            next_sweep: None,
        };
        for r in records {
            c.add(r);
        }
        c
    }

    /// Envelopes held (status, tests).
    pub(in crate::mail) fn len(&self) -> usize {
        self.held.len()
    }

    fn add(&mut self, r: CarriedRecord) {
        let s = self.senders.entry(r.sender.clone()).or_default();
        s.0 += 1;
        s.1 += r.size;
        self.total += r.size;
        if let Some(p) = peer_of(&r.recipient) {
            self.deliveries.entry(p).or_default();
        }
        self.held.insert(r.key(), r);
    }

    fn remove(&mut self, key: &[u8]) -> Option<CarriedRecord> {
        self.later.remove(key);
        let r = self.held.remove(key)?;
        if let Some(s) = self.senders.get_mut(&r.sender) {
            s.0 = s.0.saturating_sub(1);
            s.1 = s.1.saturating_sub(r.size);
            if s.0 == 0 {
                self.senders.remove(&r.sender);
            }
        }
        self.total = self.total.saturating_sub(r.size);
        Some(r)
    }

    /// Whether anything is held for `peer`.
    fn holds_for(&self, peer: &str) -> bool {
        let start = [peer.as_bytes(), b"\0"].concat();
        self.held
            .range(start.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&start))
    }

    /// Takes envelopes `from` asks this machine to hold: an outcome each,
    /// to answer once the store has them (the caller flushes first).
    pub(in crate::mail) fn hold(
        &mut self,
        from: PeerId,
        revoked: bool,
        request: &MailRequest,
        ctx: &mut Ctx<'_>,
    ) -> MailReply {
        let mut outcomes = vec![];
        let mut taken = vec![];
        for bytes in request.envelopes.iter().take(MAX_BATCH_ENVELOPES) {
            outcomes.push(match self.intake(from, revoked, bytes, ctx) {
                Ok(r) => {
                    taken.push((r.clone(), bytes.to_vec()));
                    self.add(r);
                    MailOutcome::accepted(false)
                }
                Err(o) => o,
            });
        }
        for _ in request.envelopes.iter().skip(MAX_BATCH_ENVELOPES) {
            outcomes.push(MailOutcome::refused(
                "batch_too_large",
                format!("a batch carries at most {MAX_BATCH_ENVELOPES} envelopes"),
            ));
        }
        if taken.is_empty() {
            return MailReply { outcomes };
        }
        if let Err(e) = ctx.store.put_carried(&taken) {
            tracing::error!(error = %e, "cannot store envelopes to carry");
            for (r, _) in &taken {
                self.remove(&r.key());
            }
            for o in &mut outcomes {
                if matches!(o, MailOutcome::Accepted { .. }) {
                    *o = MailOutcome::Busy;
                }
            }
            return MailReply { outcomes };
        }
        let mut recipients: Vec<String> = taken
            .iter()
            .filter_map(|(r, _)| peer_of(&r.recipient).map(|p| ctx.dir.name_of(&p)))
            .collect();
        recipients.sort();
        recipients.dedup();
        let bytes: u64 = taken.iter().map(|(r, _)| r.size).sum();
        ctx.log.record(
            AuditEvent::Carried,
            ctx.now.wall,
            AuditEntry {
                peer: Some(from.to_string()),
                sender: Some(ctx.dir.name_of(&from)),
                detail: format!(
                    "holding {} ({bytes} bytes, sealed) for {}, until they connect",
                    agentmesh_protocol::time::count(taken.len() as u64, "envelope"),
                    recipients.join(", ")
                ),
                ..AuditEntry::default()
            },
        );
        MailReply { outcomes }
    }

    /// Whether one envelope offered by `from` is held: its record, or the
    /// outcome that says why not.
    fn intake(
        &self,
        from: PeerId,
        revoked: bool,
        bytes: &[u8],
        ctx: &Ctx<'_>,
    ) -> Result<CarriedRecord, MailOutcome> {
        let dir = ctx.dir;
        if !self.rules.carry {
            return Err(MailOutcome::refused(
                "not_a_carrier",
                format!(
                    "{} does not carry mail for others (its person can make it a carrier with `agentmesh config set carry true`)",
                    dir.my_name
                ),
            ));
        }
        if revoked {
            return Err(MailOutcome::refused(
                "revoked",
                "the sender was revoked from the team",
            ));
        }
        let envelope = Envelope::from_wire(bytes)
            .map_err(|e| MailOutcome::refused(e.name(), e.to_string()))?;
        let h = &envelope.header;
        if h.from != from {
            return Err(MailOutcome::refused(
                "sender_mismatch",
                "a carrier holds only the asking machine's own envelopes",
            ));
        }
        if dir.lapsed_me() && dir.team == Some(h.team) {
            return Err(MailOutcome::Busy);
        }
        if !dir.member || dir.team != Some(h.team) {
            return Err(MailOutcome::refused(
                "not_a_member",
                "this machine is not a member of the sender's team",
            ));
        }
        if Some(h.to) == dir.me || h.to == from {
            return Err(MailOutcome::refused(
                "wrong_recipient",
                "a carrier holds mail for a third machine: send mail for the carrier itself on /agentmesh/mail/1",
            ));
        }
        match dir.machines.get(&h.to) {
            Some(m) if m.standing == Standing::Current => {}
            Some(m) => {
                return Err(MailOutcome::refused(
                    "revoked_recipient",
                    format!("{} is no longer a member of the team", m.name),
                ));
            }
            None => {
                return Err(MailOutcome::refused(
                    "unknown_recipient",
                    "the recipient is not a member of the team",
                ));
            }
        }
        // Mail, and receipts of it; broadcasts and counts go to machines
        // that are online (a broadcast is judged when it arrives).
        if !matches!(h.kind, Kind::Tell | Kind::Ask | Kind::Reply | Kind::Receipt) {
            return Err(MailOutcome::refused(
                "not_carried",
                format!("a carrier holds mail and receipts, not {}", h.kind.as_str()),
            ));
        }
        let now = ctx.now.wall;
        if now > h.expires_at.saturating_add(MAX_CLOCK_SKEW) {
            return Err(MailOutcome::refused("expired", "the envelope has expired"));
        }
        if h.sent_at > now.saturating_add(MAX_CLOCK_SKEW) {
            return Err(MailOutcome::refused(
                "not_yet_valid",
                "the envelope was sealed in the future: check the sender's clock",
            ));
        }
        envelope
            .check_signed()
            .map_err(|e| MailOutcome::refused(e.name(), e.to_string()))?;
        let record = CarriedRecord {
            recipient: h.to.to_string(),
            sender: from.to_string(),
            id: h.id.to_string(),
            size: bytes.len() as u64,
            sent_at: h.sent_at.as_unix_millis(),
            stored_at: now.as_unix_millis(),
            expires_at: h.expires_at.as_unix_millis(),
        };
        if self.held.contains_key(&record.key()) {
            return Err(MailOutcome::Duplicate);
        }
        let (n, b) = self
            .senders
            .get(&record.sender)
            .copied()
            .unwrap_or_default();
        let rules = &self.rules;
        let mib = |b: u64| b / (1024 * 1024);
        if n >= rules.per_sender || b + record.size > rules.per_sender_bytes {
            return Err(MailOutcome::refused(
                "carrier_full",
                format!(
                    "{} already holds {n} envelopes ({} MiB) from you, its most per sender ({} envelopes, {} MiB); your machine keeps the message and delivers it itself",
                    dir.my_name,
                    mib(b),
                    rules.per_sender,
                    mib(rules.per_sender_bytes)
                ),
            ));
        }
        if self.held.len() >= MAX_CARRIED || self.total + record.size > rules.total_bytes {
            return Err(MailOutcome::refused(
                "carrier_full",
                format!(
                    "{} holds as much as it carries for everyone ({} MiB); your machine keeps the message and delivers it itself",
                    dir.my_name,
                    mib(rules.total_bytes)
                ),
            ));
        }
        Ok(record)
    }

    /// `peer` is now reached only through relays (`relayed`), or not.
    pub(in crate::mail) fn route(&mut self, peer: PeerId, relayed: bool) {
        if relayed {
            self.relayed.insert(peer);
        } else {
            self.relayed.remove(&peer);
        }
    }

    /// A connection to `peer` came up: what is held for it goes now.
    pub(in crate::mail) fn connected(
        &mut self,
        peer: PeerId,
        net: &dyn Carrier,
        ctx: &mut Ctx<'_>,
    ) {
        if let Some(d) = self.deliveries.get_mut(&peer) {
            d.failures = 0;
            d.next_try = None;
        }
        self.dispatch(peer, net, ctx);
    }

    /// Sweeps when it is time, and carries on what is due.
    pub(in crate::mail) fn tick(&mut self, net: &dyn Carrier, ctx: &mut Ctx<'_>) {
        let now = ctx.now.mono;
        if self.next_sweep.is_none_or(|t| t <= now) {
            self.next_sweep = Some(now + SWEEP);
            self.sweep(ctx);
        }
        let due: Vec<PeerId> = self
            .deliveries
            .iter()
            .filter(|(_, d)| d.due(now))
            .map(|(p, _)| *p)
            .collect();
        for p in due {
            self.dispatch(p, net, ctx);
        }
    }

    /// Drops what expired, and what a revoked sender sent or a revoked
    /// recipient would get, or everything once this machine is no
    /// longer a member (it left, or was revoked): one audit entry for all
    /// of it.
    fn sweep(&mut self, ctx: &mut Ctx<'_>) {
        let skew = MAX_CLOCK_SKEW.as_millis() as u64;
        let now_ms = ctx.now.wall.as_unix_millis();
        let revoked = |p: &str| {
            peer_of(p)
                .and_then(|p| ctx.dir.machines.get(&p))
                .is_none_or(|m| m.standing != Standing::Current)
        };
        let (mut expired, mut gone) = (vec![], vec![]);
        for (k, r) in &self.held {
            if r.expires_at.saturating_add(skew) < now_ms {
                expired.push(k.clone());
            } else if (!ctx.dir.member && !ctx.dir.lapsed_me())
                || revoked(&r.sender)
                || revoked(&r.recipient)
            {
                gone.push(k.clone());
            }
        }
        let on_way: HashSet<&Vec<u8>> = self.batches.values().flat_map(|(_, k)| k).collect();
        expired.retain(|k| !on_way.contains(k));
        gone.retain(|k| !on_way.contains(k));
        if expired.is_empty() && gone.is_empty() {
            return;
        }
        let detail = format!(
            "dropped {} held for offline members: {} expired, {} from or for a machine no longer in the team (or this machine left it)",
            expired.len() + gone.len(),
            expired.len(),
            gone.len()
        );
        let keys = [expired, gone].concat();
        self.forget(&keys, ctx);
        ctx.log
            .note(AuditEvent::Carried, ctx.now.wall, None, detail);
    }

    /// Forgets `keys`, in memory and in the store.
    fn forget(&mut self, keys: &[Vec<u8>], ctx: &Ctx<'_>) {
        for k in keys {
            self.remove(k);
        }
        if let Err(e) = ctx.store.delete_carried(keys) {
            // Kept on disk: carried on again after a restart, and the
            // recipient drops what it already has.
            tracing::warn!(error = %e, "cannot forget carried envelopes");
        }
        let idle: Vec<PeerId> = self
            .deliveries
            .iter()
            .filter(|(p, d)| !d.in_flight && !self.holds_for(&p.to_string()))
            .map(|(p, _)| *p)
            .collect();
        for p in idle {
            self.deliveries.remove(&p);
        }
    }

    /// Sends `peer` the next batch of what is held for it, if one may go.
    fn dispatch(&mut self, peer: PeerId, net: &dyn Carrier, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if !self.deliveries.get(&peer).is_some_and(|d| d.due(now.mono)) {
            return;
        }
        let most = batch_bytes(self.relayed.contains(&peer));
        let start = [peer.to_string().as_bytes(), b"\0"].concat();
        let skew = MAX_CLOCK_SKEW.as_millis() as u64;
        let now_ms = now.wall.as_unix_millis();
        // Oldest first, as their senders sealed them: the recipient's
        // inbox gets them in the order it would have directly.
        let mut due: Vec<(u64, &Vec<u8>, u64)> = (self.held.range(start.clone()..))
            .take_while(|(k, _)| k.starts_with(&start))
            // Expired: dropped by the sweep, never carried late.
            .filter(|(_, r)| r.expires_at.saturating_add(skew) >= now_ms)
            .filter(|(k, _)| self.later.get(*k).is_none_or(|t| *t <= now.mono))
            .map(|(k, r)| (r.sent_at, k, r.size))
            .collect();
        due.sort_unstable();
        let (mut keys, mut envelopes, mut missing, mut bytes) = (vec![], vec![], vec![], 0);
        for (_, k, size) in due {
            if keys.len() == MAX_BATCH_ENVELOPES
                || (bytes + size as usize > most && !keys.is_empty())
            {
                break;
            }
            match ctx.store.carried_envelope(k) {
                Ok(Some(e)) => {
                    bytes += e.len();
                    keys.push(k.clone());
                    envelopes.push(ByteBuf::from(e));
                }
                Ok(None) => missing.push(k.clone()),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read a carried envelope");
                    break;
                }
            }
        }
        if !missing.is_empty() {
            self.forget(&missing, ctx);
        }
        if keys.is_empty() {
            return;
        }
        self.next_batch += 1;
        let batch = self.next_batch;
        let carry = Carry {
            batch,
            peer,
            via: Via::Deliver,
            request: MailRequest { envelopes },
        };
        if let Some(d) = self.deliveries.get_mut(&peer) {
            d.in_flight = true;
        }
        self.batches.insert(batch, (peer, keys));
        if !net.carry(carry) {
            // Stopping: kept, carried on after the restart.
            self.batches.remove(&batch);
        }
    }

    /// The recipient's answer to a carried batch: what it took, refused
    /// or already had is forgotten (audited in one entry); what it was too
    /// busy for waits [`LATER`] (the rest goes meanwhile), and a batch
    /// that got no answer, or only busy ones, waits for a backoff.
    pub(in crate::mail) fn delivered(
        &mut self,
        d: Delivered,
        net: &dyn Carrier,
        ctx: &mut Ctx<'_>,
    ) {
        let Some((peer, keys)) = self.batches.remove(&d.batch) else {
            return;
        };
        let (mut done, mut counts) = (vec![], [0usize; 3]);
        let failed = match d.result {
            Ok(reply) if reply.outcomes.len() == keys.len() => {
                for (k, o) in keys.into_iter().zip(reply.outcomes) {
                    match o {
                        MailOutcome::Accepted { .. } => counts[0] += 1,
                        MailOutcome::Duplicate => counts[1] += 1,
                        MailOutcome::Refused { .. } => counts[2] += 1,
                        MailOutcome::Busy => {
                            self.later.insert(k, ctx.now.mono + LATER);
                            continue;
                        }
                    }
                    done.push(k);
                }
                done.is_empty()
            }
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(%peer, why = %e.why, "carrying on failed");
                true
            }
        };
        if !done.is_empty() {
            self.forget(&done, ctx);
            ctx.log.record(
                AuditEvent::Carried,
                ctx.now.wall,
                AuditEntry {
                    peer: Some(peer.to_string()),
                    recipient: Some(ctx.dir.name_of(&peer)),
                    detail: format!(
                        "carried on {} held for this machine: {} taken, {} it already had, {} refused",
                        agentmesh_protocol::time::count(done.len() as u64, "envelope"),
                        counts[0],
                        counts[1],
                        counts[2]
                    ),
                    ..AuditEntry::default()
                },
            );
        }
        let mono = ctx.now.mono;
        if let Some(d) = self.deliveries.get_mut(&peer) {
            d.in_flight = false;
            if failed {
                d.next_try = Some(mono + backoff(d.failures));
                d.failures += 1;
            } else {
                d.failures = 0;
                d.next_try = None;
            }
        }
        self.dispatch(peer, net, ctx);
    }
}
