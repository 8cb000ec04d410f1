//! The team: its state and every membership action, the one published
//! [`Directory`], sync, the joiner's and the founder's sides of joining,
//! and the team's API ops. No I/O of its own: the network's event loop
//! drives it and carries what it sends ([`Network`]), so all of it runs
//! in unit tests without a swarm.
//!
//! ```text
//!  net event loop ── on_connected / on_gossip / on_sync_request ── Team ──> Network (send_sync,
//!                 ── on_sync_reply / on_sync_failed                          send_join, publish,
//!                 ── on_join_request / on_join_answer / on_join_failed       membership_changed,
//!                 ── op (team show/create/leave, invite, join, admit, revoke) dial, sync_finished)
//!                 ── tick (100 ms), maintain (20 s)
//!  every call ends a round: announce if the team changed, answer joins whose first sync
//!  ended, and send the round's answers once its audit entries are durable
//! ```

pub mod contacts;
pub mod desk;
pub mod directory;
pub mod founder;
pub mod joiner;
pub mod network;
pub mod records;
pub mod state;
pub mod sync;
pub mod terms;

use std::sync::Arc;
use std::time::Instant;

use agentmesh_protocol::team::{Block, BlockBody, Genesis, Person, Revoke, Standing, TeamState};
use agentmesh_protocol::{Identity, Name, Owner, PeerId};
use tokio::sync::{oneshot, watch};

pub use directory::{Directory, Machine};
pub use network::JoinWaiter;
pub use network::Network;
pub use state::{Membership, NOT_IN_TEAM, load_team};

use crate::api::{self, ApiError, LeftView, Reply, RevokedView, TeamOp, answer, err, ops};
use crate::audit::{AuditEvent, AuditLog};
use crate::codes::ErrorCode;
use crate::config::Settings;
use crate::store::{Store, StoreError};
use crate::wire::{JoinMsg, JoinReply, SyncReply, SyncRequest};
use founder::Founder;
use joiner::{JoinStart, Joiner};
use state::TeamCore;
use sync::Sync;

/// 16 random bytes: a nonce.
fn random16() -> [u8; 16] {
    let mut b = [0u8; 16];
    rand::Rng::fill_bytes(&mut rand::rng(), &mut b);
    b
}

/// How long `status` shows the last sign of another copy of this machine
/// (each sync with a member that holds the other copy's record shows it
/// again while that copy runs).
pub const ANOTHER_COPY_SHOWN: std::time::Duration = std::time::Duration::from_secs(3600);

/// The team part of the daemon.
#[derive(Debug)]
pub struct Team {
    core: TeamCore,
    sync: Sync,
    joiner: Joiner,
    founder: Founder,
    /// When this machine last asked an admin to renew its term.
    asked: Option<Instant>,
}

/// What this machine's own standing is, for `status`.
#[derive(Debug, Clone)]
pub struct OwnStanding {
    /// Its name in the team, or the configured one.
    pub name: String,
    /// The team.
    pub team: Option<api::TeamRef>,
    /// `member`, `left`, `revoked`, `name_taken`, `lapsed`, if it is in a
    /// team.
    pub standing: Option<api::Standing>,
    /// Its term: until when (RFC 3339), and the admin machine that gave it.
    pub term: Option<(String, String)>,
}

impl Team {
    /// The team `store` records, as `me` sees it.
    pub fn new(
        me: Identity,
        settings: Settings,
        store: Arc<dyn Store>,
        audit: AuditLog,
        local: watch::Receiver<Arc<records::LocalDirectory>>,
    ) -> Result<Team, StoreError> {
        let always_on = settings.carry.carry;
        Ok(Team {
            core: TeamCore::new(me, settings, store, audit)?,
            sync: Sync::new(records::Published::new(local, always_on)),
            joiner: Joiner::default(),
            founder: Founder::default(),
            asked: None,
        })
    }

    /// Applies the loaded team to the network and dials its members.
    pub fn start(&mut self, net: &mut dyn Network) {
        self.core.activate(net, None);
        self.settle(net);
    }

    /// Dials the members not connected: once the network listens (a TCP
    /// dial before then leaves from a fresh port, and a relay would
    /// observe, and DCUtR punch with, a port nobody listens on).
    pub fn dial_members(&mut self, net: &mut dyn Network) {
        self.redial(net);
        self.settle(net);
    }

    /// Starts a round at calendar time `now` (the network's loop reads the
    /// clock, the team does not).
    pub fn at(&mut self, now: agentmesh_protocol::Timestamp) {
        self.core.at(now);
    }

    /// The directory every part reads.
    pub fn directory(&self) -> watch::Receiver<Arc<Directory>> {
        self.core.directory()
    }

    /// A page of the team's directory (`directory`), without liveness:
    /// the network's loop adds whether each machine is reachable.
    pub fn directory_page(
        &self,
        after: Option<&str>,
        max_bytes: Option<usize>,
    ) -> api::DirectoryPage {
        self.sync.directory.page(
            &self.core,
            after,
            max_bytes.unwrap_or(records::MAX_DIRECTORY_PAGE),
        )
    }

    /// Another daemon with this machine's key, as `status` shows it: the
    /// last sign of one, if it was seen in the last hour.
    pub fn another_copy(&self) -> Option<api::AnotherCopyView> {
        let a = self.sync.another_copy()?;
        let now = self.core.wall();
        let recent = now.saturating_sub(ANOTHER_COPY_SHOWN) <= a.seen_at;
        recent.then(|| api::AnotherCopyView {
            seen_at: api::rfc3339(a.seen_at),
            seq: a.seq,
            addrs: a.addrs.iter().map(ToString::to_string).collect(),
        })
    }

    /// The team, if this machine is in one.
    pub fn state(&self) -> Option<&TeamState> {
        self.core.state()
    }

    /// Whether `peer` is a current member.
    pub fn is_member(&self, peer: &PeerId) -> bool {
        self.core.is_member(peer)
    }

    /// Whether `peer` was revoked.
    pub fn is_revoked(&self, peer: &PeerId) -> bool {
        self.core.is_revoked(peer)
    }

    /// How `peer` stands with the team.
    pub fn membership(&self, peer: &PeerId, net: &dyn Network) -> Membership {
        self.core.membership(peer, net)
    }

    /// The settings the daemon runs with.
    pub fn settings(&self) -> &Settings {
        &self.core.settings
    }

    /// This machine's name, team and standing, for `status`.
    pub fn own_standing(&self) -> OwnStanding {
        let me = self.core.me.peer_id();
        let member = self.core.state().and_then(|t| t.member(&me));
        OwnStanding {
            name: member.map_or_else(
                || self.core.settings.name.to_string(),
                |m| m.name.to_string(),
            ),
            team: self.core.team_ref(),
            standing: member.map(|m| state::standing_word(m, self.core.wall())),
            term: member.and_then(|m| m.term).map(|t| {
                let by = self.core.state().and_then(|s| s.member(&t.by));
                (
                    api::rfc3339(t.expires_at),
                    by.map_or_else(|| t.by.to_string(), |a| a.name.to_string()),
                )
            }),
        }
    }

    /// At shutdown: hands what waits to the group commit.
    pub fn stop(&mut self) {
        self.core.finish_blocking();
    }

    /// Ends a round (see the module docs).
    fn settle(&mut self, net: &mut dyn Network) {
        if self.core.take_announce() {
            self.sync.announce(&mut self.core, net);
            // A revoked machine's record goes with it.
            self.sync.directory.prune(&self.core);
        }
        self.sync.directory.refresh(&mut self.core, net);
        self.joiner.synced(&mut self.core, &self.sync);
        self.core.finish();
    }

    // ----- what the network reports ---------------------------------------

    /// A first connection to a member came up: sync with it.
    pub fn on_connected(&mut self, net: &mut dyn Network, peer: PeerId) {
        if self.core.is_member(&peer) {
            self.sync.start(&mut self.core, net, peer);
        }
        self.settle(net);
    }

    /// Syncs with `peer` now (a `connect` waits for it).
    pub fn sync_with(&mut self, net: &mut dyn Network, peer: PeerId) {
        self.sync.start(&mut self.core, net, peer);
        self.settle(net);
    }

    /// A connection to a machine the team has no answer for asked
    /// something that hints it may be a new member (mail from it).
    pub fn on_stranger(&mut self, net: &mut dyn Network, now: Instant) {
        self.sync.newcomer_hint(&mut self.core, net, now);
        self.settle(net);
    }

    /// A block arrived by gossip from `source` (the author) through
    /// `via`; only members' blocks through members count.
    pub fn on_gossip(
        &mut self,
        net: &mut dyn Network,
        source: Option<PeerId>,
        via: PeerId,
        data: &[u8],
    ) {
        let from_member = source.is_some_and(|s| self.core.is_member(&s));
        if !from_member || !self.core.is_member(&via) {
            return;
        }
        match Block::from_bytes(data) {
            Ok(block) => {
                self.core.merge_blocks(net, vec![block]);
            }
            Err(e) => tracing::warn!(error = %e, "a gossiped block does not decode"),
        }
        self.settle(net);
    }

    /// A directory announcement arrived by gossip from `source` (the
    /// machine whose record changed) through `via`; only members'
    /// announcements through members count. A newer record is fetched by
    /// a sync, with the machine itself if it is connected.
    pub fn on_directory_gossip(
        &mut self,
        net: &mut dyn Network,
        source: Option<PeerId>,
        via: PeerId,
        data: &[u8],
    ) {
        let from_member = source.is_some_and(|s| self.core.is_member(&s));
        if !from_member || !self.core.is_member(&via) {
            return;
        }
        let ask = source.filter(|s| net.is_connected(s)).unwrap_or(via);
        self.sync
            .on_directory_announce(&mut self.core, net, ask, data);
        self.settle(net);
    }

    /// This machine's mailboxes changed (a profile, goal, status): the
    /// directory record follows (see [`records`]).
    pub fn on_local_directory(&mut self, net: &mut dyn Network) {
        self.settle(net);
    }

    /// A machine asked for a sync step: the answer.
    pub fn on_sync_request(
        &mut self,
        net: &mut dyn Network,
        peer: PeerId,
        request: SyncRequest,
        now: Instant,
    ) -> SyncReply {
        // An admin renews a member it hears from once its term is due.
        terms::on_heard_from(&mut self.core, net, peer);
        let reply = self
            .sync
            .on_request(&mut self.core, net, peer, request, now);
        if let SyncReply::Refused(why) = &reply {
            tracing::debug!(%peer, reason = %why, "refused a sync request");
        }
        self.settle(net);
        reply
    }

    /// A member answered a sync step.
    pub fn on_sync_reply(&mut self, net: &mut dyn Network, peer: PeerId, reply: SyncReply) {
        self.sync.on_reply(&mut self.core, net, peer, reply);
        self.settle(net);
    }

    /// A sync step got no answer.
    pub fn on_sync_failed(
        &mut self,
        net: &mut dyn Network,
        peer: PeerId,
        why: String,
        closed: bool,
    ) {
        self.sync.on_failed(&mut self.core, net, peer, why, closed);
        self.settle(net);
    }

    /// A joiner's message, answered as the founder.
    pub fn on_join_request(
        &mut self,
        net: &mut dyn Network,
        peer: PeerId,
        msg: JoinMsg,
        now: Instant,
    ) -> JoinReply {
        let reply = self.founder.answer(&mut self.core, net, peer, msg, now);
        self.settle(net);
        reply
    }

    /// The founder answered one of this machine's join messages.
    pub fn on_join_answer(&mut self, net: &mut dyn Network, waiter: JoinWaiter, reply: JoinReply) {
        self.joiner
            .on_answer(&mut self.core, &mut self.sync, net, waiter, reply);
        self.settle(net);
    }

    /// One of this machine's join messages got no answer: why, and
    /// whether another try may reach the founder (the dial failed).
    pub fn on_join_failed(
        &mut self,
        net: &mut dyn Network,
        waiter: JoinWaiter,
        failure: (String, bool),
        now: Instant,
    ) {
        self.joiner
            .on_failed(&mut self.core, net, waiter, failure, now);
        self.settle(net);
    }

    /// mDNS found `peer` on the local network.
    pub fn on_found(&mut self, net: &mut dyn Network, peer: PeerId) {
        if self.core.is_member(&peer) && !net.is_connected(&peer) {
            net.dial(peer);
        }
        self.joiner.found_by_mdns(net, peer);
        self.settle(net);
    }

    /// The last connection to `peer` closed: a member is dialled again at
    /// once.
    pub fn on_lost(&mut self, net: &mut dyn Network, peer: PeerId) {
        if self.core.am_member() && self.core.is_member(&peer) && !net.is_connected(&peer) {
            net.dial(peer);
        }
    }

    /// A lapsed machine dials its admins (every redial, 20 s): once the
    /// founder renews it, the first connection's sync brings the renewal,
    /// whichever side can dial the other.
    fn dial_admins(&mut self, net: &mut dyn Network) {
        for (p, admin) in self.core.other_members() {
            if admin && !net.is_connected(&p) {
                net.dial(p);
            }
        }
    }

    /// Join polls and expiries, every tick.
    pub fn tick(&mut self, net: &mut dyn Network, now: Instant) {
        self.founder.tick(&mut self.core, now);
        self.joiner.tick(&mut self.core, net, now);
        self.sync.republish_if_moved(&mut self.core, net, now);
        self.core.check_lapses(net);
        if let Some(admin) = terms::ask_if_due(&self.core, net, &mut self.asked, now) {
            self.sync_with(net, admin);
        }
        self.settle(net);
    }

    /// Redials members that are not connected (every 20 s).
    pub fn maintain(&mut self, net: &mut dyn Network) {
        self.redial(net);
        self.settle(net);
    }

    fn redial(&mut self, net: &mut dyn Network) {
        if self.core.lapsed_me() {
            return self.dial_admins(net);
        }
        if !self.core.am_member() {
            return;
        }
        for (p, _) in self.core.other_members() {
            if !net.is_connected(&p) {
                net.dial(p);
            }
        }
    }

    // ----- the team's API ops ---------------------------------------------

    /// Runs a team op; the answer goes to `reply` (once what it audited
    /// is durable).
    pub fn op(
        &mut self,
        net: &mut dyn Network,
        op: TeamOp,
        reply: oneshot::Sender<Reply>,
        now: Instant,
    ) {
        let answer = match op {
            TeamOp::TeamShow => answer::<ops::TeamShow>(self.core.team_view()),
            TeamOp::TeamCreate(ops::TeamCreate {
                name,
                owner,
                member_days,
            }) => answer::<ops::TeamCreate>(self.team_create(net, &name, &owner, member_days)),
            TeamOp::TeamRenew(ops::TeamRenew { machine, days }) => {
                answer::<ops::TeamRenew>(terms::renew(&mut self.core, net, &machine, days))
            }
            TeamOp::TeamLeave => answer::<ops::TeamLeave>(self.team_leave(net)),
            TeamOp::Invite(ops::Invite { ttl_secs }) => {
                answer::<ops::Invite>(Founder::invite(&mut self.core, net, ttl_secs))
            }
            TeamOp::JoinStart(ops::JoinStart {
                ticket,
                name,
                owner,
            }) => {
                let start = JoinStart {
                    ticket: &ticket,
                    name: &name,
                    owner: &owner,
                    reply,
                    now,
                };
                self.joiner.start(&mut self.core, net, start);
                self.settle(net);
                return;
            }
            TeamOp::JoinStatus(ops::JoinStatus { join_id }) => {
                answer::<ops::JoinStatus>(self.joiner.state(join_id))
            }
            TeamOp::JoinConfirm(ops::JoinConfirm { join_id, accept }) => {
                self.joiner
                    .confirm(&mut self.core, net, join_id, accept, reply);
                self.settle(net);
                return;
            }
            TeamOp::AdmitList => answer::<ops::AdmitList>(self.founder.list(&self.core, now)),
            TeamOp::AdmitCode(ops::AdmitCode { request_id, code }) => {
                answer::<ops::AdmitCode>(self.founder.code(&mut self.core, request_id, &code, now))
            }
            TeamOp::AdmitPerson(ops::AdmitPerson {
                request_id,
                person,
                existing,
                days,
            }) => answer::<ops::AdmitPerson>(self.founder.person(
                &mut self.core,
                request_id,
                (&person, existing),
                days,
            )),
            TeamOp::TeamPerson(ops::TeamPerson { machine, person }) => {
                answer::<ops::TeamPerson>(self.team_person(net, &machine, &person))
            }
            TeamOp::AdmitStatus(ops::AdmitStatus { request_id }) => {
                answer::<ops::AdmitStatus>(self.founder.status(request_id))
            }
            TeamOp::AdmitReject(ops::AdmitReject { request_id }) => {
                answer::<ops::AdmitReject>(self.founder.reject(&mut self.core, request_id, now))
            }
            TeamOp::Revoke(ops::Revoke { name }) => answer::<ops::Revoke>(self.revoke(net, &name)),
        };
        self.core.reply(reply, answer);
        self.settle(net);
    }

    fn team_create(
        &mut self,
        net: &mut dyn Network,
        name: &str,
        owner: &str,
        member_days: Option<u32>,
    ) -> Result<api::TeamView, ApiError> {
        let core = &mut self.core;
        if let Some(d) = member_days {
            terms::check_days(d)?;
        }
        if core.am_in_team() {
            return err(
                ErrorCode::AlreadyInTeam,
                "this machine is already in a team; a machine belongs to one team",
            );
        }
        let team_name = Name::parse("team name", name)
            .map_err(|e| ApiError::new(ErrorCode::BadName, e.to_string()))?;
        let owner =
            Owner::parse(owner).map_err(|e| ApiError::new(ErrorCode::BadOwner, e.to_string()))?;
        let genesis = Block::sign(
            BlockBody::Genesis(Genesis {
                team_name,
                founder: core.me.peer_id(),
                founder_x25519: core.me.x25519_public(),
                founder_name: core.settings.name.clone(),
                founder_owner: owner,
                admins: vec![core.me.peer_id()],
                created_at: core.wall(),
                nonce: random16(),
            }),
            &core.me,
        )
        .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?;
        let state = TeamState::from_genesis(genesis)
            .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?;
        core.replace_team(net, state)?;
        if let Some(d) = member_days {
            core.store.set_member_days(d)?;
        }
        core.audit(AuditEvent::TeamCreated, None, format!("team {name}"));
        core.team_view()
    }

    fn team_leave(&mut self, net: &mut dyn Network) -> Result<LeftView, ApiError> {
        let core = &mut self.core;
        if !core.am_in_team() {
            return err(ErrorCode::NotInTeam, NOT_IN_TEAM);
        }
        if core.am_admin() {
            return err(
                ErrorCode::AdminCannotLeave,
                "the founder cannot leave its team: admins can't be revoked; to end the team, stop using it",
            );
        }
        let team = core
            .state()
            .map(TeamState::id)
            .ok_or_else(|| ApiError::new(ErrorCode::NotInTeam, NOT_IN_TEAM))?;
        let me = core.me.peer_id();
        core.add_own_block(
            net,
            BlockBody::Revoke(Revoke {
                team,
                peer: me,
                revoked_by: me,
                at: core.wall(),
            }),
        )?;
        core.audit(AuditEvent::Left, Some(&me), "this machine left its team");
        Ok(LeftView {
            left: team.to_string(),
        })
    }

    /// `team person MACHINE PERSON`: a Person block, one sequence number
    /// past the machine's last.
    fn team_person(
        &mut self,
        net: &mut dyn Network,
        machine: &str,
        person: &str,
    ) -> Result<api::PersonMoved, ApiError> {
        let core = &mut self.core;
        if !core.am_admin() {
            return if core.am_member() {
                err(
                    ErrorCode::NotAdmin,
                    "only the team's founder can say whose machine a member is",
                )
            } else {
                err(ErrorCode::NotInTeam, NOT_IN_TEAM)
            };
        }
        let person =
            Owner::parse(person).map_err(|e| ApiError::new(ErrorCode::BadOwner, e.to_string()))?;
        let Some(team) = core.state() else {
            return err(ErrorCode::NotInTeam, NOT_IN_TEAM);
        };
        let Some(member) = team.by_name(machine) else {
            let known = team
                .members()
                .filter(|m| m.standing == Standing::Current)
                .map(|m| m.name.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            return err(
                ErrorCode::UnknownMember,
                format!("no current member is named {machine:?}; members: {known}"),
            );
        };
        let Some(seq) = member.person_seq.checked_add(1) else {
            return err(
                ErrorCode::Refused,
                "this machine's person can't be moved again: its Person blocks reached the last sequence number",
            );
        };
        let (peer, was, id) = (member.peer, member.owner.to_string(), team.id());
        let new_person = !team.persons().contains_key(&person);
        if was == person.as_str() {
            return Ok(api::PersonMoved {
                machine: machine.into(),
                was: was.clone(),
                person: was,
                new_person: false,
            });
        }
        let by = core.me.peer_id();
        core.add_own_block(
            net,
            BlockBody::Person(Person {
                team: id,
                by,
                peer,
                person: person.clone(),
                seq,
                at: core.wall(),
            }),
        )?;
        core.audit(
            AuditEvent::Person,
            Some(&peer),
            format!("{machine} moved from {was} to {person} here (sequence {seq})"),
        );
        Ok(api::PersonMoved {
            machine: machine.into(),
            was,
            person: person.to_string(),
            new_person,
        })
    }

    fn revoke(&mut self, net: &mut dyn Network, name: &str) -> Result<RevokedView, ApiError> {
        let core = &mut self.core;
        if !core.am_admin() {
            return if core.am_member() {
                err(
                    ErrorCode::NotAdmin,
                    "only the team's founder can revoke machines; to leave, run `agentmesh team leave`",
                )
            } else {
                err(ErrorCode::NotInTeam, NOT_IN_TEAM)
            };
        }
        let Some(team) = core.state() else {
            return err(ErrorCode::NotInTeam, NOT_IN_TEAM);
        };
        // The current holder of the name; a name can also be held by a
        // machine whose Admit lost a conflict (name_taken): that one is
        // revoked by name only if no current member holds it.
        let holder = team.by_name(name).or_else(|| {
            team.members()
                .find(|m| m.name.as_str() == name && m.standing == Standing::NameTaken)
        });
        let Some(member) = holder else {
            let known = team
                .members()
                .filter(|m| m.standing == Standing::Current)
                .map(|m| m.name.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            return err(
                ErrorCode::UnknownMember,
                format!("no current member is named {name:?}; members: {known}"),
            );
        };
        if member.admin {
            return err(
                ErrorCode::Admin,
                "the founder cannot be revoked; a lost founder key means founding a new team",
            );
        }
        let (peer, id) = (member.peer, team.id());
        let by = core.me.peer_id();
        core.add_own_block(
            net,
            BlockBody::Revoke(Revoke {
                team: id,
                peer,
                revoked_by: by,
                at: core.wall(),
            }),
        )?;
        core.audit(
            AuditEvent::Revoked,
            Some(&peer),
            format!("{name} revoked here"),
        );
        Ok(RevokedView {
            revoked: peer.to_string(),
            name: name.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests;
