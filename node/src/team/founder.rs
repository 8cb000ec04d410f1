//! The founder's side of joining: tickets, the checks a join request must
//! pass, the desk where requests wait for a person, and admission.
//!
//! ```text
//!  invite ── ticket (single use, stored) ── the joiner
//!  Request ── checks (rate, ticket, admin, standing, name, room) ── Offer; filed on the desk
//!  Poll    ── Waiting | Approved | Refused
//!  admit CODE (the person) ── Matched | Wrong | Cancelled
//!  admit PERSON (whose machine it is) ── Approved: the team code
//!  Decline while it waits (the joiner's Ctrl-C) ── Cancelled: withdrawn
//!  Confirm ── sign the Admit ── Admitted(Genesis, Admit)   Decline ── Done
//! ```

use std::time::{Duration, Instant};

use agentmesh_protocol::join::{self as pjoin, JoinOffer, JoinRequest};
use agentmesh_protocol::team::{Admit, Block, BlockBody};
use agentmesh_protocol::ticket::Ticket;
use agentmesh_protocol::{Multiaddr, PeerId, Wire};
use serde_bytes::ByteBuf;

use super::desk::{CodeOutcome, Desk, DeskState};
use super::network::Network;
use super::random16;
use super::state::{NOT_IN_TEAM, TeamCore};
use crate::api::{self, ApiError, Done, err, rfc3339};
use crate::audit::AuditEvent;
use crate::codes::ErrorCode;
use crate::wire::{JoinMsg, JoinReply};

/// The founder's desk of join requests.
#[derive(Debug, Default)]
pub struct Founder {
    desk: Desk,
}

impl Founder {
    /// Answers a joiner's message.
    pub fn answer(
        &mut self,
        core: &mut TeamCore,
        net: &mut dyn Network,
        peer: PeerId,
        msg: JoinMsg,
        now: Instant,
    ) -> JoinReply {
        let refused = |why: &str| JoinReply::Refused(why.into());
        match msg {
            JoinMsg::Request(bytes) => {
                if !self
                    .desk
                    .allow(peer, now, core.settings.max_per_peer_per_minute)
                {
                    // Not audited: a flood must not turn into disk writes.
                    return refused("too many join requests from this machine; wait a minute");
                }
                let reply = self.open_request(core, peer, &bytes, now);
                if let JoinReply::Refused(why) = &reply {
                    // Debug: anyone can cause these, with fresh identities.
                    tracing::debug!(%peer, reason = %why, "refused a join request");
                }
                reply
            }
            JoinMsg::Poll(nonce) => match self.desk.find(&peer, &nonce) {
                None => refused(
                    "no such join request (it may have expired); start again with a new ticket",
                ),
                Some(r) => match &r.state {
                    DeskState::Waiting | DeskState::Matched => JoinReply::Waiting,
                    DeskState::Approved | DeskState::Admitted => JoinReply::Approved,
                    DeskState::Declined => refused("declined"),
                    DeskState::Cancelled(why) => JoinReply::Refused(why.clone()),
                },
            },
            JoinMsg::Confirm(nonce) => self.admit(core, net, peer, &nonce, now),
            JoinMsg::Decline(nonce) => {
                let found = self
                    .desk
                    .find(&peer, &nonce)
                    .map(|r| (r.id, r.state.clone()));
                match found {
                    Some((id, DeskState::Approved)) => {
                        self.desk.settle(id, DeskState::Declined, now);
                        core.audit(
                            AuditEvent::JoinDeclined,
                            Some(&peer),
                            "the joiner said the team codes differ",
                        );
                    }
                    // Before the code was typed (or the person chosen): the
                    // joiner stopped waiting (Ctrl-C), so the request goes
                    // from `admit`'s list.
                    Some((id, DeskState::Waiting | DeskState::Matched)) => {
                        self.desk.settle(
                            id,
                            DeskState::Cancelled("the joiner withdrew its request".into()),
                            now,
                        );
                        core.audit(
                            AuditEvent::JoinDeclined,
                            Some(&peer),
                            "the joiner withdrew its request before it was admitted",
                        );
                    }
                    _ => {}
                }
                JoinReply::Done
            }
        }
    }

    /// The checks a join request must pass, in an order that tells a
    /// machine without a valid ticket nothing about the team.
    fn open_request(
        &mut self,
        core: &mut TeamCore,
        peer: PeerId,
        bytes: &[u8],
        at: Instant,
    ) -> JoinReply {
        let refused = |why: String| JoinReply::Refused(why);
        let request = match JoinRequest::from_bytes(bytes) {
            Ok(r) => r,
            Err(e) => return refused(format!("the request is malformed: {e}")),
        };
        if request.joiner != peer {
            return refused("the request names another machine than the one sending it".into());
        }
        match core.store.ticket(&request.ticket_nonce) {
            Ok(Some(expires)) if expires >= core.wall() => {}
            Ok(Some(_)) => {
                return refused(
                    "the ticket expired; ask the founder for a new one (agentmesh invite)".into(),
                );
            }
            Ok(None) => {
                return refused("the ticket is unknown or was already used; ask the founder for a new one (agentmesh invite)".into());
            }
            Err(e) => return refused(format!("the founder's store failed: {e}")),
        }
        let am_admin = core.am_admin();
        let Some(team) = core.state() else {
            return refused("this machine is not in a team".into());
        };
        if !am_admin {
            return refused("this machine cannot admit machines to its team".into());
        }
        match team.member(&peer).map(|m| m.standing) {
            Some(agentmesh_protocol::team::Standing::Revoked) => {
                return refused("this machine was revoked from the team and cannot rejoin with the same key; a new key is a new machine".into());
            }
            Some(_) => return refused("this machine was already admitted to the team".into()),
            None => {}
        }
        if team.by_name(request.name.as_str()).is_some()
            || self.desk.name_pending(&request.name, &peer)
        {
            return refused(format!(
                "the name {} is taken in this team; join with another --name",
                request.name
            ));
        }
        if self.desk.open_count(Some(&peer)) >= core.settings.max_pending {
            return refused(
                "the founder has too many join requests waiting; try again later".into(),
            );
        }
        match core.store.take_ticket(&request.ticket_nonce) {
            Ok(Some(_)) => {}
            Ok(None) => return refused("the ticket was just used by another request".into()),
            Err(e) => return refused(format!("the founder's store failed: {e}")),
        }
        let genesis = team
            .genesis()
            .expect("a team with an admin has its genesis");
        // Drawn only now that the whole request has arrived: the order the
        // pairing code's strength rests on (docs/protocol.md §7.5).
        let offer = JoinOffer {
            team: team.id(),
            team_name: genesis.team_name.clone(),
            founder: core.me.peer_id(),
            nonce: random16(),
        };
        let codes = pjoin::codes(&request, &offer);
        let detail = format!("{} (owner {}) asks to join", request.name, request.owner);
        let offer_bytes = offer.to_bytes();
        self.desk.file(peer, request, offer, codes, at);
        core.audit(AuditEvent::JoinRequested, Some(&peer), detail);
        JoinReply::Offer(offer_bytes)
    }

    /// What an admission carries: the Genesis and `peer`'s Admit, a few
    /// KiB whatever the team's size. The new member syncs the rest.
    fn admission_blocks(core: &TeamCore, peer: &PeerId) -> Vec<ByteBuf> {
        let Some(team) = core.state() else {
            return vec![];
        };
        let genesis = team
            .blocks()
            .find(|b| matches!(b.body(), BlockBody::Genesis(_)));
        let admit = team
            .blocks()
            .find(|b| matches!(b.body(), BlockBody::Admit(a) if a.peer == *peer));
        genesis
            .into_iter()
            .chain(admit)
            .map(|b| ByteBuf::from(Block::bytes(b).to_vec()))
            .collect()
    }

    /// The joiner confirmed the team code: sign its Admit. A repeated
    /// Confirm (its answer was lost) gets the same blocks again.
    fn admit(
        &mut self,
        core: &mut TeamCore,
        net: &mut dyn Network,
        peer: PeerId,
        nonce: &[u8],
        at: Instant,
    ) -> JoinReply {
        let Some(r) = self.desk.find(&peer, nonce) else {
            return JoinReply::Refused("no such join request".into());
        };
        match r.state {
            DeskState::Approved => {}
            DeskState::Admitted => return JoinReply::Admitted(Self::admission_blocks(core, &peer)),
            _ => {
                return JoinReply::Refused("the founder has not accepted the pairing code".into());
            }
        }
        let (id, request) = (r.id, r.request.clone());
        let Some(team) = core.state() else {
            return JoinReply::Refused("this machine is no longer in a team".into());
        };
        if team.by_name(request.name.as_str()).is_some() {
            self.desk.settle(
                id,
                DeskState::Cancelled(format!(
                    "the name {} was taken meanwhile; join with another --name",
                    request.name
                )),
                at,
            );
            return JoinReply::Refused(format!("the name {} was taken meanwhile", request.name));
        }
        // The person the founder chose, never the joiner's claim (an
        // approved request always has one).
        let person = r.person.clone().unwrap_or_else(|| request.owner.clone());
        let days = super::terms::days_or_default(core, r.days)
            .unwrap_or(super::terms::DEFAULT_MEMBER_DAYS);
        let body = BlockBody::Admit(Admit {
            team: team.id(),
            peer,
            x25519: request.x25519,
            name: request.name.clone(),
            owner: person.clone(),
            admitted_by: core.me.peer_id(),
            at: core.wall(),
        });
        // With its term: a member for `days` from now, unless renewed;
        // both blocks, or neither (the team has room for two).
        if team.blocks().count() + 2 > agentmesh_protocol::team::MAX_TEAM_BLOCKS {
            return JoinReply::Refused("the team holds as many blocks as it can".into());
        }
        let admitted = core
            .add_own_block(net, body)
            .and_then(|_| super::terms::give(core, net, peer, days));
        match admitted {
            Ok(_) => {
                self.desk.settle(id, DeskState::Admitted, at);
                core.audit(
                    AuditEvent::Admitted,
                    Some(&peer),
                    format!(
                        "{} as {person}'s machine (it said its owner is {})",
                        request.name, request.owner
                    ),
                );
                JoinReply::Admitted(Self::admission_blocks(core, &peer))
            }
            Err(e) => JoinReply::Refused(e.message),
        }
    }

    /// Expires requests nobody decided within the request lifetime.
    pub fn tick(&mut self, core: &mut TeamCore, now: Instant) {
        for id in self.desk.expire(now, core.settings.request_ttl) {
            core.audit(
                AuditEvent::JoinExpired,
                None,
                format!("request {id} expired"),
            );
        }
    }

    /// `invite`: a single-use ticket, stored before it is shown.
    pub fn invite(
        core: &mut TeamCore,
        net: &dyn Network,
        ttl_secs: Option<u64>,
    ) -> Result<api::Invite, ApiError> {
        if !core.am_admin() {
            return if core.am_member() {
                err(
                    ErrorCode::NotAdmin,
                    "only the team's founder can invite machines",
                )
            } else {
                err(ErrorCode::NotInTeam, NOT_IN_TEAM)
            };
        }
        let ttl = ttl_secs.map_or(core.settings.invite_ttl, Duration::from_secs);
        if ttl > core.settings.max_invite_ttl || ttl.is_zero() {
            return err(
                ErrorCode::BadTtl,
                format!(
                    "--ttl must be between 1 s and {} (join.max_invite_ttl in config.toml)",
                    agentmesh_protocol::time::exact_duration(core.settings.max_invite_ttl)
                ),
            );
        }
        let addrs = ticket_addrs(net.circuit_addrs(), net.advertised_addrs());
        if addrs.is_empty() {
            return err(
                ErrorCode::NoAddresses,
                "this machine is not listening on any address yet; check `agentmesh status`",
            );
        }
        let nonce = random16();
        let expires_at = core.wall().saturating_add(ttl);
        core.store.put_ticket(&nonce, expires_at)?;
        let ticket = Ticket {
            founder: core.me.peer_id(),
            addrs,
            nonce,
            expires_at,
        };
        core.audit(
            AuditEvent::Invited,
            None,
            format!("ticket valid until {}", rfc3339(expires_at)),
        );
        Ok(api::Invite {
            ticket: ticket.to_string(),
            expires_at: rfc3339(expires_at),
        })
    }

    /// `admit` (the list): requests waiting for this admin.
    pub fn list(
        &self,
        core: &TeamCore,
        now: Instant,
    ) -> Result<Vec<api::JoinRequestView>, ApiError> {
        if !core.am_admin() {
            return err(
                ErrorCode::NotAdmin,
                "only the team's founder can admit machines",
            );
        }
        let mut views = self.desk.views(now);
        if let Some(team) = core.state() {
            let members = core.member_views(team);
            for v in &mut views {
                v.name_was = members
                    .iter()
                    .find(|m| m.name == v.name && m.standing != api::Standing::Current)
                    .cloned();
            }
        }
        Ok(views)
    }

    /// `admit ID CODE`: checks the pairing code a person typed.
    pub fn code(
        &mut self,
        core: &mut TeamCore,
        id: u64,
        code: &str,
        now: Instant,
    ) -> Result<api::AdmitMatched, ApiError> {
        if !core.am_admin() {
            return err(
                ErrorCode::NotAdmin,
                "only the team's founder can admit machines",
            );
        }
        let (name, peer, claimed) = match self.desk.get(id) {
            Some(r) => (
                r.request.name.to_string(),
                Some(r.peer),
                r.request.owner.to_string(),
            ),
            None => (String::new(), None, String::new()),
        };
        match self.desk.check_code(id, code, now) {
            CodeOutcome::Matched => Ok(api::AdmitMatched {
                claimed_owner: claimed,
                persons: persons(core),
            }),
            CodeOutcome::Wrong(left) => {
                core.audit(
                    AuditEvent::WrongCode,
                    peer.as_ref(),
                    format!("{left} tries left"),
                );
                err(
                    ErrorCode::WrongCode,
                    format!(
                        "that is not the code {name} shows; {left} {} left",
                        if left == 1 { "try" } else { "tries" }
                    ),
                )
            }
            CodeOutcome::Cancelled => {
                core.audit(
                    AuditEvent::JoinCancelled,
                    peer.as_ref(),
                    "three wrong codes",
                );
                err(
                    ErrorCode::RequestCancelled,
                    format!(
                        "that was the third wrong code: the request from {name} is cancelled; if the codes really differ, someone may be in the middle"
                    ),
                )
            }
            CodeOutcome::NotACode(why) => err(ErrorCode::NotACode, why),
            CodeOutcome::Unknown => err(
                ErrorCode::UnknownRequest,
                "no waiting join request with that id",
            ),
        }
    }

    /// `admit` once the code matched: request `id` is `person`'s machine
    /// (`existing`: one of the team's persons already, so mail between
    /// their machines is never held). A claim is never merged silently: a
    /// name that is a person already is refused unless `existing` says
    /// so, and the other way round.
    pub fn person(
        &mut self,
        core: &mut TeamCore,
        id: u64,
        (person, existing): (&str, bool),
        days: Option<u32>,
    ) -> Result<api::AdmitApproved, ApiError> {
        if let Some(d) = days {
            super::terms::check_days(d)?;
        }
        if !core.am_admin() {
            return err(
                ErrorCode::NotAdmin,
                "only the team's founder can admit machines",
            );
        }
        let person = agentmesh_protocol::Owner::parse(person)
            .map_err(|e| ApiError::new(ErrorCode::BadOwner, e.to_string()))?;
        let known = persons(core);
        let machines = known
            .iter()
            .find(|p| p.person == person.as_str())
            .map(|p| p.machines.join(", "));
        match (machines, existing) {
            (Some(machines), false) => {
                return err(
                    ErrorCode::PersonExists,
                    format!(
                        "{person} is a person of this team already (machines: {machines}); say it is {person}'s machine (existing), or admit it as a new person with another name"
                    ),
                );
            }
            (None, true) => {
                let names: Vec<&str> = known.iter().map(|p| p.person.as_str()).collect();
                return err(
                    ErrorCode::UnknownPerson,
                    format!(
                        "{person} is not a person of this team (persons: {}); admit it as a new person",
                        names.join(", ")
                    ),
                );
            }
            _ => {}
        }
        if let Some(DeskState::Cancelled(why)) = self.desk.get(id).map(|r| r.state.clone()) {
            return err(
                ErrorCode::RequestCancelled,
                format!("the request ended: {why}"),
            );
        }
        match self.desk.choose_person(id, person.clone(), days) {
            Some(team) => Ok(api::AdmitApproved {
                team_code: team.to_string(),
                person: person.to_string(),
            }),
            None => err(
                ErrorCode::UnknownRequest,
                "no join request with that id has a matching code yet; type its pairing code first",
            ),
        }
    }

    /// Where an approved request stands.
    pub fn status(&mut self, id: u64) -> Result<api::AdmitState, ApiError> {
        use api::AdmitPhase;
        let Some(r) = self.desk.get(id) else {
            return err(ErrorCode::UnknownRequest, "no join request with that id");
        };
        let (state, reason) = match &r.state {
            DeskState::Waiting | DeskState::Matched => (AdmitPhase::Waiting, None),
            DeskState::Approved => (AdmitPhase::AwaitingConfirmation, None),
            DeskState::Admitted => (AdmitPhase::Admitted, None),
            DeskState::Declined => (AdmitPhase::Declined, None),
            DeskState::Cancelled(why) => (AdmitPhase::Cancelled, Some(why.clone())),
        };
        Ok(api::AdmitState { state, reason })
    }

    /// `admit reject ID`.
    pub fn reject(&mut self, core: &mut TeamCore, id: u64, now: Instant) -> Result<Done, ApiError> {
        if !core.am_admin() {
            return err(
                ErrorCode::NotAdmin,
                "only the team's founder can admit machines",
            );
        }
        let Some(peer) = self.desk.get(id).map(|r| r.peer) else {
            return err(ErrorCode::UnknownRequest, "no join request with that id");
        };
        self.desk.settle(
            id,
            DeskState::Cancelled("the founder refused the request".into()),
            now,
        );
        core.audit(
            AuditEvent::JoinRejected,
            Some(&peer),
            "refused by the founder",
        );
        Ok(Done {})
    }
}

/// The team's persons, each with their current machines.
fn persons(core: &TeamCore) -> Vec<api::PersonView> {
    core.state()
        .map(|t| {
            t.persons()
                .into_iter()
                .map(|(person, machines)| api::PersonView {
                    person: person.to_string(),
                    machines: machines.iter().map(ToString::to_string).collect(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The addresses a ticket carries, at most
/// [`agentmesh_protocol::ticket::MAX_TICKET_ADDRS`]: circuits through this
/// machine's relays first (they are what a joiner on another network can
/// dial, and they name the relays it adopts), at most half of the room,
/// then the direct addresses, then any circuits left.
pub fn ticket_addrs(circuits: Vec<Multiaddr>, direct: Vec<Multiaddr>) -> Vec<Multiaddr> {
    let max = agentmesh_protocol::ticket::MAX_TICKET_ADDRS;
    let first = circuits.len().min(max / 2);
    let mut out: Vec<Multiaddr> = circuits[..first].to_vec();
    out.extend(direct);
    out.extend(circuits[first..].iter().cloned());
    out.truncate(max);
    out
}
