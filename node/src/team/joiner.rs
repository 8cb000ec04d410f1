//! Joining a team: the joiner's side of the join protocol.
//!
//! ```text
//!  start ── Request ──> founder ── Offer ── the person compares pairing codes
//!  every 100 ms while Waiting: Poll ──> Waiting | Approved | Refused
//!  confirm(accept) ── Confirm ──> Admitted(Genesis, Admit): install, sync,
//!                                 answered once the first sync with the founder ends
//!                  ── Decline ──> Done
//!  a Request whose ticket addresses fail waits up to 10 s for mDNS to find the founder
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agentmesh_protocol::join::{self as pjoin, Codes, JoinOffer, JoinRequest};
use agentmesh_protocol::team::{Block, Standing, TeamState};
use agentmesh_protocol::ticket::{Ticket, TicketError};
use agentmesh_protocol::{Multiaddr, Name, Owner, PeerId, Wire};
use serde_bytes::ByteBuf;
use tokio::sync::oneshot;

use super::network::{JoinWaiter, Network};
use super::random16;
use super::state::TeamCore;
use super::sync::Sync;
use crate::api::{self, ApiError, Reply, answer, err, ops};
use crate::audit::AuditEvent;
use crate::codes::ErrorCode;
use crate::wire::{JoinMsg, JoinReply};

/// The most joins this machine runs as a joiner at once.
pub const MAX_JOIN_SESSIONS: usize = 8;

/// Polls of the founder that may fail in a row before the join is given
/// up as unreachable. Failed polls back off to one a second.
pub const MAX_POLL_FAILURES: u32 = 10;

/// Times a lost `Confirm` is sent again before the join reports failure
/// (the founder answers a repeated Confirm with the same blocks).
pub const MAX_CONFIRM_TRIES: u32 = 5;

/// For how long after a join starts its first request is sent again, a
/// second after each dial that failed: one failed dial (a busy machine, a
/// network still coming up, a founder's daemon starting) does not end a
/// join, as one failed poll or confirm does not. Only a dial that failed
/// is retried: a request that reached the founder and timed out may have
/// used the ticket, which is good for one join.
pub const START_RETRY_WITHIN: Duration = Duration::from_secs(10);

/// How long a join whose ticket addresses failed waits for mDNS to find
/// the founder on the local network.
pub const MDNS_JOIN_WAIT: Duration = Duration::from_secs(10);

/// Where a join stands.
#[derive(Debug, Clone, PartialEq)]
pub enum JoinPhase {
    /// The request is on its way.
    Offering,
    /// The founder has not typed the pairing code yet.
    Waiting,
    /// The founder typed it; the person confirms the team code.
    Approved,
    /// The confirmation is on its way.
    Confirming,
    /// Joined, as the machine of this person (the founder's choice).
    Joined(api::TeamRef, String),
    /// Refused, and why.
    Refused(String),
    /// The person declined.
    Declined,
}

impl JoinPhase {
    fn finished(&self) -> bool {
        matches!(
            self,
            JoinPhase::Joined(..) | JoinPhase::Refused(_) | JoinPhase::Declined
        )
    }
}

/// A join this machine is making.
#[derive(Debug)]
struct Session {
    founder: PeerId,
    addrs: Vec<Multiaddr>,
    request: JoinRequest,
    offer: Option<JoinOffer>,
    codes: Option<Codes>,
    state: JoinPhase,
    in_flight: bool,
    /// When the next poll (or the first request, sent again) is due.
    next_poll: Instant,
    /// Failed tries in a row of the step under way: the first request's,
    /// then the polls'.
    poll_failures: u32,
    confirm_tries: u32,
    started: Instant,
    /// The `join` call still waiting for the founder's first answer, kept
    /// while the first request waits to be sent again, or mDNS may yet
    /// find the founder after the ticket's addresses failed.
    awaiting_mdns: Option<oneshot::Sender<Reply>>,
}

fn founder_unreachable(why: &str) -> Reply {
    err(
        ErrorCode::FounderUnreachable,
        format!(
            "{why}; check that the ticket's addresses are reachable from here and the founder's daemon is running"
        ),
    )
}

/// The joins in progress.
#[derive(Debug, Default)]
pub struct Joiner {
    joins: BTreeMap<u64, Session>,
    next_join: u64,
    /// Joins admitted, answered once the first sync with their founder
    /// ends (successfully or not: it has a deadline).
    joined_waiting: Vec<(PeerId, u64, oneshot::Sender<Reply>)>,
}

/// What starting a join needs.
#[derive(Debug)]
pub struct JoinStart<'a> {
    /// The ticket, as typed.
    pub ticket: &'a str,
    /// This machine's name in the team.
    pub name: &'a str,
    /// Its owner.
    pub owner: &'a str,
    /// Where `join`'s answer goes.
    pub reply: oneshot::Sender<Reply>,
    /// Now.
    pub now: Instant,
}

impl Joiner {
    /// Where join `join` stands, as `join` shows it.
    pub fn state(&self, join: u64) -> Result<api::JoinState, ApiError> {
        use api::JoinPhase as Word;
        let Some(s) = self.joins.get(&join) else {
            return err(
                ErrorCode::UnknownJoin,
                "no join with that id (it may have finished long ago)",
            );
        };
        let team_code = match s.state {
            JoinPhase::Approved | JoinPhase::Confirming => s.codes.map(|c| c.team.to_string()),
            _ => None,
        };
        let (state, reason, team, person) = match &s.state {
            JoinPhase::Offering | JoinPhase::Waiting => (Word::Waiting, None, None, None),
            JoinPhase::Approved | JoinPhase::Confirming => (Word::Approved, None, None, None),
            JoinPhase::Joined(t, p) => (Word::Joined, None, Some(t.clone()), Some(p.clone())),
            JoinPhase::Refused(r) => (Word::Refused, Some(r.clone()), None, None),
            JoinPhase::Declined => (Word::Declined, None, None, None),
        };
        Ok(api::JoinState {
            state,
            team_code,
            reason,
            team,
            person,
        })
    }

    /// Sends a join request for `start.ticket`; the founder's offer
    /// answers `start.reply`.
    pub fn start(&mut self, core: &mut TeamCore, net: &mut dyn Network, start: JoinStart<'_>) {
        let JoinStart {
            ticket,
            name,
            owner,
            reply,
            now: at,
        } = start;
        let ticket = match Ticket::parse(ticket, core.wall()) {
            Ok(t) => t,
            Err(e @ TicketError::Expired { .. }) => {
                return core.reply(reply, err(ErrorCode::TicketExpired, e.to_string()));
            }
            Err(e) => return core.reply(reply, err(ErrorCode::BadTicket, e.to_string())),
        };
        if core.am_in_team() {
            return core.reply(
                reply,
                err(
                    ErrorCode::AlreadyInTeam,
                    "this machine is already in a team; a machine belongs to one team",
                ),
            );
        }
        let name = match Name::parse("machine name", name) {
            Ok(n) => n,
            Err(e) => return core.reply(reply, err(ErrorCode::BadName, e.to_string())),
        };
        let owner = match Owner::parse(owner) {
            Ok(o) => o,
            Err(e) => return core.reply(reply, err(ErrorCode::BadOwner, e.to_string())),
        };
        if ticket.founder == core.me.peer_id() {
            return core.reply(
                reply,
                err(
                    ErrorCode::BadTicket,
                    "this ticket was made by this machine; run `agentmesh join` on the machine that should join",
                ),
            );
        }
        // Finished joins make room; joins still running count.
        self.joins.retain(|_, s| !s.state.finished());
        if self.joins.len() >= MAX_JOIN_SESSIONS {
            return core.reply(
                reply,
                err(
                    ErrorCode::Busy,
                    format!(
                        "{MAX_JOIN_SESSIONS} joins are already in progress; finish or abandon one first"
                    ),
                ),
            );
        }
        let request = JoinRequest {
            ticket_nonce: ticket.nonce,
            joiner: core.me.peer_id(),
            x25519: core.me.x25519_public(),
            name,
            owner,
            nonce: random16(),
        };
        net.add_addresses(ticket.founder, &ticket.addrs);
        self.next_join += 1;
        let join = self.next_join;
        let bytes = request.to_bytes();
        self.joins.insert(
            join,
            Session {
                founder: ticket.founder,
                addrs: ticket.addrs.clone(),
                request,
                offer: None,
                codes: None,
                state: JoinPhase::Offering,
                in_flight: true,
                next_poll: at,
                poll_failures: 0,
                confirm_tries: 0,
                started: at,
                awaiting_mdns: None,
            },
        );
        net.send_join(
            ticket.founder,
            ticket.addrs,
            JoinMsg::Request(bytes),
            JoinWaiter::Start(join, reply),
        );
    }

    /// The person accepted (the team codes match) or declined.
    pub fn confirm(
        &mut self,
        core: &mut TeamCore,
        net: &mut dyn Network,
        join: u64,
        accept: bool,
        reply: oneshot::Sender<Reply>,
    ) {
        let Some(s) = self.joins.get_mut(&join) else {
            return core.reply(
                reply,
                err(ErrorCode::UnknownJoin, "no join in progress with that id"),
            );
        };
        // Withdrawing (the person stopped waiting: Ctrl-C) is a decline
        // sent while the founder has not accepted yet: the request goes
        // from the founder's `admit`.
        let withdrawing = !accept && s.state == JoinPhase::Waiting;
        if s.state != JoinPhase::Approved && !withdrawing {
            return core.reply(
                reply,
                err(
                    ErrorCode::NotApproved,
                    "the founder has not accepted the pairing code yet",
                ),
            );
        }
        s.state = if accept {
            JoinPhase::Confirming
        } else {
            JoinPhase::Declined
        };
        self.send_confirm(core, net, join, accept, reply);
    }

    fn send_confirm(
        &mut self,
        core: &mut TeamCore,
        net: &mut dyn Network,
        join: u64,
        accept: bool,
        reply: oneshot::Sender<Reply>,
    ) {
        let Some(s) = self.joins.get_mut(&join) else {
            return core.reply(reply, err(ErrorCode::UnknownJoin, "the join was cancelled"));
        };
        s.confirm_tries += 1;
        let nonce = s.request.nonce.to_vec();
        let (msg, waiter) = if accept {
            (JoinMsg::Confirm(nonce), JoinWaiter::Confirm(join, reply))
        } else {
            (JoinMsg::Decline(nonce), JoinWaiter::Decline(join, reply))
        };
        net.send_join(s.founder, s.addrs.clone(), msg, waiter);
    }

    /// Polls the founders of joins waiting for their pairing code, and
    /// gives up joins whose founder mDNS did not find in time.
    pub fn tick(&mut self, core: &mut TeamCore, net: &mut dyn Network, now: Instant) {
        for (join, s) in &mut self.joins {
            if s.state == JoinPhase::Waiting && !s.in_flight && s.next_poll <= now {
                s.in_flight = true;
                let poll = JoinMsg::Poll(s.request.nonce.to_vec());
                net.send_join(s.founder, s.addrs.clone(), poll, JoinWaiter::Poll(*join));
            }
            // The first request again, while its time is not up (a join
            // only waiting for mDNS has its next try at that time).
            if s.state == JoinPhase::Offering
                && !s.in_flight
                && s.next_poll <= now
                && now.duration_since(s.started) < START_RETRY_WITHIN
                && let Some(reply) = s.awaiting_mdns.take()
            {
                s.in_flight = true;
                let request = JoinMsg::Request(s.request.to_bytes());
                let waiter = JoinWaiter::Start(*join, reply);
                net.send_join(s.founder, s.addrs.clone(), request, waiter);
            }
        }
        let lost: Vec<u64> = self
            .joins
            .iter()
            .filter(|(_, s)| {
                s.awaiting_mdns.is_some()
                    && now.duration_since(s.started) >= MDNS_JOIN_WAIT.max(START_RETRY_WITHIN)
            })
            .map(|(id, _)| *id)
            .collect();
        for join in lost {
            if let Some(reply) = self.joins.remove(&join).and_then(|s| s.awaiting_mdns) {
                let within = MDNS_JOIN_WAIT.max(START_RETRY_WITHIN).as_secs();
                let why = if core.settings.mdns {
                    format!(
                        "could not reach the founder at the ticket's addresses, nor find it on the local network within {within}s"
                    )
                } else {
                    format!(
                        "could not reach the founder at the ticket's addresses within {within}s"
                    )
                };
                core.reply(reply, founder_unreachable(&why));
            }
        }
    }

    /// mDNS found `founder`: sends again the join requests waiting for it.
    pub fn found_by_mdns(&mut self, net: &mut dyn Network, founder: PeerId) {
        for (join, s) in &mut self.joins {
            if s.founder != founder {
                continue;
            }
            let Some(reply) = s.awaiting_mdns.take() else {
                continue;
            };
            s.in_flight = true;
            let request = JoinMsg::Request(s.request.to_bytes());
            net.send_join(founder, vec![], request, JoinWaiter::Start(*join, reply));
        }
    }

    /// A join message got no answer (`why`; `again`: the founder was not
    /// reached, so another try may reach it): retry, wait for mDNS, or
    /// give up, as its step allows.
    pub fn on_failed(
        &mut self,
        core: &mut TeamCore,
        net: &mut dyn Network,
        waiter: JoinWaiter,
        (why, again): (String, bool),
        now: Instant,
    ) {
        match waiter {
            JoinWaiter::Start(join, reply) => {
                if again
                    && let Some(s) = self.joins.get_mut(&join)
                    && now.duration_since(s.started) < START_RETRY_WITHIN
                {
                    s.poll_failures += 1;
                    tracing::info!(%why, tries = s.poll_failures, "the founder was not reached; trying again in a second");
                    s.in_flight = false;
                    s.next_poll = now + Duration::from_secs(1);
                    s.awaiting_mdns = Some(reply);
                    return;
                }
                let wait = core.settings.mdns
                    && self
                        .joins
                        .get(&join)
                        .is_some_and(|s| now.duration_since(s.started) < MDNS_JOIN_WAIT);
                if let (true, Some(s)) = (wait, self.joins.get_mut(&join)) {
                    // The ticket's addresses failed; the founder may
                    // still turn up on the local network.
                    tracing::info!(
                        "the ticket's addresses failed; looking for the founder with mDNS"
                    );
                    s.in_flight = false;
                    s.awaiting_mdns = Some(reply);
                    // No more tries at the ticket's addresses.
                    s.next_poll = s.started + MDNS_JOIN_WAIT.max(START_RETRY_WITHIN);
                } else {
                    self.joins.remove(&join);
                    core.reply(reply, founder_unreachable(&why));
                }
            }
            JoinWaiter::Poll(join) => {
                if let Some(s) = self.joins.get_mut(&join) {
                    s.in_flight = false;
                    s.poll_failures += 1;
                    s.next_poll = now + Duration::from_secs(1);
                    if s.poll_failures >= MAX_POLL_FAILURES {
                        s.state = JoinPhase::Refused(format!(
                            "{why}, {MAX_POLL_FAILURES} times in a row; start again with a new ticket when the founder is back"
                        ));
                    }
                }
            }
            JoinWaiter::Confirm(join, reply) => {
                // The founder may have admitted us and the answer
                // got lost; it answers a repeated Confirm the same.
                let again = self
                    .joins
                    .get(&join)
                    .is_some_and(|s| s.confirm_tries < MAX_CONFIRM_TRIES);
                if again {
                    self.send_confirm(core, net, join, true, reply);
                } else {
                    if let Some(s) = self.joins.get_mut(&join) {
                        s.state = JoinPhase::Refused(why.clone());
                    }
                    core.reply(reply, err(ErrorCode::FounderUnreachable, why));
                }
            }
            JoinWaiter::Decline(join, reply) => {
                core.reply(reply, answer::<ops::JoinConfirm>(self.state(join)))
            }
        }
    }

    /// The founder answered a join message.
    pub fn on_answer(
        &mut self,
        core: &mut TeamCore,
        sync: &mut Sync,
        net: &mut dyn Network,
        waiter: JoinWaiter,
        response: JoinReply,
    ) {
        match waiter {
            JoinWaiter::Start(join, reply) => {
                let result = self.on_offer(join, response);
                if result.is_err() {
                    self.joins.remove(&join);
                }
                core.reply(reply, result);
            }
            JoinWaiter::Poll(join) => {
                let Some(s) = self.joins.get_mut(&join) else {
                    return;
                };
                s.in_flight = false;
                s.poll_failures = 0;
                match response {
                    JoinReply::Approved if s.state == JoinPhase::Waiting => {
                        s.state = JoinPhase::Approved
                    }
                    JoinReply::Refused(r) => s.state = JoinPhase::Refused(r),
                    _ => {}
                }
            }
            JoinWaiter::Confirm(join, reply) => {
                let result = match response {
                    JoinReply::Admitted(blocks) => self.install_team(core, net, join, blocks),
                    JoinReply::Refused(r) => {
                        if let Some(s) = self.joins.get_mut(&join) {
                            s.state = JoinPhase::Refused(r.clone());
                        }
                        err(ErrorCode::JoinRefused, r)
                    }
                    other => err(
                        ErrorCode::Protocol,
                        format!("unexpected answer from the founder: {other:?}"),
                    ),
                };
                match result {
                    Ok(()) => {
                        sync.announce(core, net);
                        // Admitted: answered once the first sync with the
                        // founder brought the rest of the team's blocks
                        // (the admission carried only the Genesis and the
                        // Admit), so `team show` right after `join` lists
                        // everyone.
                        match self.joins.get(&join).map(|s| s.founder) {
                            Some(founder) if sync.is_open(&founder) => {
                                self.joined_waiting.push((founder, join, reply));
                            }
                            _ => core.reply(reply, answer::<ops::JoinConfirm>(self.state(join))),
                        }
                    }
                    Err(e) => core.reply(reply, Err(e)),
                }
            }
            JoinWaiter::Decline(join, reply) => {
                core.reply(reply, answer::<ops::JoinConfirm>(self.state(join)))
            }
        }
    }

    /// Answers the joins whose first sync with their founder has ended.
    pub fn synced(&mut self, core: &mut TeamCore, sync: &Sync) {
        if self.joined_waiting.is_empty() {
            return;
        }
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.joined_waiting)
            .into_iter()
            .partition(|(founder, _, _)| !sync.is_open(founder));
        self.joined_waiting = waiting;
        for (_, join, reply) in done {
            core.reply(reply, answer::<ops::JoinConfirm>(self.state(join)));
        }
    }

    fn on_offer(&mut self, join: u64, response: JoinReply) -> Reply {
        let offer = match response {
            JoinReply::Offer(bytes) => JoinOffer::from_bytes(&bytes).map_err(|e| {
                ApiError::new(
                    ErrorCode::Protocol,
                    format!("the founder's offer is malformed: {e}"),
                )
            })?,
            JoinReply::Refused(why) => {
                return err(
                    ErrorCode::JoinRefused,
                    format!("the founder refused: {why}"),
                );
            }
            other => {
                return err(
                    ErrorCode::Protocol,
                    format!("unexpected answer from the founder: {other:?}"),
                );
            }
        };
        let s = self
            .joins
            .get_mut(&join)
            .ok_or_else(|| ApiError::new(ErrorCode::UnknownJoin, "the join was cancelled"))?;
        if offer.founder != s.founder {
            return err(
                ErrorCode::Protocol,
                "the offer names another founder than the ticket",
            );
        }
        let codes = pjoin::codes(&s.request, &offer);
        s.codes = Some(codes);
        s.state = JoinPhase::Waiting;
        s.in_flight = false;
        s.poll_failures = 0;
        let started = api::JoinStarted {
            join_id: join,
            pairing_code: codes.pairing.to_string(),
            team_name: offer.team_name.to_string(),
            founder: offer.founder.to_string(),
        };
        s.offer = Some(offer);
        answer::<ops::JoinStart>(Ok(started))
    }

    /// Checks the blocks the founder sent and, if they make this machine a
    /// member of the team it was offered, exactly as it asked, stores them
    /// and joins.
    fn install_team(
        &mut self,
        core: &mut TeamCore,
        net: &mut dyn Network,
        join: u64,
        blocks: Vec<ByteBuf>,
    ) -> Result<(), ApiError> {
        let s = self
            .joins
            .get(&join)
            .ok_or_else(|| ApiError::new(ErrorCode::UnknownJoin, "the join was cancelled"))?;
        let offer = s
            .offer
            .clone()
            .ok_or_else(|| ApiError::new(ErrorCode::Protocol, "no offer"))?;
        let mut state = TeamState::new(offer.team);
        for b in &blocks {
            let block = Block::from_bytes(b).map_err(|e| {
                ApiError::new(
                    ErrorCode::Protocol,
                    format!("the founder sent a bad block: {e}"),
                )
            })?;
            state.apply(block).map_err(|e| {
                ApiError::new(
                    ErrorCode::Protocol,
                    format!("the founder sent a block the team refuses: {e}"),
                )
            })?;
        }
        let me = core.me.peer_id();
        let good = state
            .genesis()
            .is_some_and(|g| g.founder == offer.founder && g.team_name == offer.team_name)
            // The person is the founder's to choose (it may differ from
            // the owner this machine claimed); the key and name are not.
            && state.member(&me).is_some_and(|m| {
                m.standing == Standing::Current
                    && m.x25519 == s.request.x25519
                    && m.name == s.request.name
            });
        if !good {
            return err(
                ErrorCode::Protocol,
                "the founder's blocks do not admit this machine as it asked",
            );
        }
        let person = state
            .member(&me)
            .map(|m| m.owner.to_string())
            .unwrap_or_default();
        core.replace_team(net, state)?;
        // The founder's relays, named by the ticket's circuit addresses:
        // adopted once admitted (a refused or bogus ticket leaves none
        // behind), so the founder and the team can reach this machine back
        // through them. (The join itself dialled the circuit directly.)
        let addrs = s.addrs.clone();
        net.adopt_relays(&addrs);
        core.audit(
            AuditEvent::Joined,
            Some(&offer.founder),
            format!("joined team {} as {person}'s machine", offer.team_name),
        );
        let team = core
            .team_ref()
            .ok_or_else(|| ApiError::new(ErrorCode::Internal, "team vanished"))?;
        if let Some(s) = self.joins.get_mut(&join) {
            s.state = JoinPhase::Joined(team, person);
        }
        Ok(())
    }
}
