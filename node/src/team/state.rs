//! The team's state and its one owner: the blocks this machine holds,
//! applied; what they say about each machine; the published
//! [`Directory`]. Anything learned is stored before it is acted on: a
//! block is applied to a copy of the team, written and flushed, and only
//! then becomes the team.

use std::sync::Arc;

use agentmesh_protocol::team::{Block, BlockBody, BlockHash, Member, Standing, TeamState};
use agentmesh_protocol::{Identity, PeerId, Timestamp};
use tokio::sync::{oneshot, watch};

use super::Directory;
use super::network::Network;
use crate::api::{self, ApiError, Reply, err, rfc3339};
use crate::audit::{AuditEvent, AuditLog};
use crate::codes::ErrorCode;
use crate::config::Settings;
use crate::store::{Store, StoreError, TeamStore};

/// The answer every team op gives a machine outside any team.
pub const NOT_IN_TEAM: &str = "this machine is not in a team; create one with `agentmesh team create NAME` or join one with `agentmesh join TICKET` (the owner defaults to your login name; `--owner` names another)";

/// How a machine stands with this one's team, as `peers` and `connect`
/// show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// A current member.
    Member,
    /// Revoked from the team.
    Revoked,
    /// Not a member, and says it serves circuit relay.
    Relay,
    /// Anyone else.
    Stranger,
}

impl Membership {
    /// How `machine`, which says it is a relay or not, stands with `team`.
    pub fn of(team: Option<&TeamState>, machine: &PeerId, relay: bool) -> Membership {
        let member = team.and_then(|t| t.member(machine)).map(|m| m.standing);
        match member {
            _ if team.is_some_and(|t| t.is_revoked(machine)) => Membership::Revoked,
            Some(Standing::Current) => Membership::Member,
            _ if relay => Membership::Relay,
            _ => Membership::Stranger,
        }
    }

    /// As the API types it.
    pub fn word(self) -> api::Membership {
        match self {
            Membership::Member => api::Membership::Member,
            Membership::Revoked => api::Membership::Revoked,
            Membership::Relay => api::Membership::Relay,
            Membership::Stranger => api::Membership::Stranger,
        }
    }
}

/// A member's standing as `team show` words it: `left` for a machine
/// that revoked itself, `revoked` for one an admin revoked (both are out
/// for good, and `revoked: true` in `team show --json` for both).
pub fn standing_word(m: &Member, now: Timestamp) -> api::Standing {
    use api::Standing as W;
    match m.standing {
        Standing::Current if m.lapsed(now) => W::Lapsed,
        Standing::Current => W::Current,
        Standing::Revoked if m.left => W::Left,
        Standing::Revoked => W::Revoked,
        Standing::NameTaken => W::NameTaken,
    }
}

/// The team this machine's store records, with every stored block applied.
pub fn load_team(store: &dyn TeamStore) -> Result<Option<TeamState>, StoreError> {
    let Some(id) = store.team()? else {
        return Ok(None);
    };
    let mut state = TeamState::new(id);
    for bytes in store.blocks(&id)? {
        match Block::from_bytes(&bytes) {
            Ok(b) => {
                let _ = state.apply(b);
            }
            Err(e) => tracing::warn!(error = %e, "ignoring a damaged stored block"),
        }
    }
    Ok(Some(state))
}

/// The team's state and what is written about it.
pub struct TeamCore {
    /// This machine.
    pub me: Identity,
    /// The daemon's settings.
    pub settings: Settings,
    /// The store.
    pub store: Arc<dyn Store>,
    state: Option<TeamState>,
    directory: watch::Sender<Arc<Directory>>,
    /// The team's audit entries, on their way to the disk.
    pub audit: AuditLog,
    /// The team changed in a way members should sync about.
    announce: bool,
    /// The calendar time of this round, as the network's loop gives it
    /// (the team never reads the clock).
    now: Timestamp,
    /// Answers that wait for this round's audit entries to be durable.
    replies: Vec<(oneshot::Sender<Reply>, Reply)>,
    /// Answers of earlier rounds whose entries found the group commit's
    /// queue full, sent once they are durable.
    waiting: Vec<crate::store::Done>,
    /// The members whose membership had lapsed at the last look.
    lapsed: std::collections::BTreeSet<PeerId>,
}

impl std::fmt::Debug for TeamCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamCore")
            .field("me", &self.me.peer_id())
            .finish_non_exhaustive()
    }
}

impl TeamCore {
    /// The core over the team `store` records.
    pub fn new(
        me: Identity,
        settings: Settings,
        store: Arc<dyn Store>,
        audit: AuditLog,
    ) -> Result<TeamCore, StoreError> {
        let mut state = load_team(store.as_ref())?;
        let now = crate::clock::now();
        if let Some(t) = &mut state {
            t.set_now(now);
        }
        let (directory, _) = watch::channel(Arc::new(Directory::default()));
        let core = TeamCore {
            me,
            settings,
            store,
            state,
            directory,
            audit,
            announce: false,
            now,
            replies: vec![],
            waiting: vec![],
            lapsed: Default::default(),
        };
        core.publish_directory();
        Ok(core)
    }

    /// The team, if this machine is in one.
    pub fn state(&self) -> Option<&TeamState> {
        self.state.as_ref()
    }

    /// The calendar time of this round.
    pub fn wall(&self) -> Timestamp {
        self.now
    }

    /// Starts a round at calendar time `now` (memberships are judged at
    /// it: a member past its expiry is not one).
    pub fn at(&mut self, now: Timestamp) {
        self.now = now;
        if let Some(t) = &mut self.state {
            t.set_now(now);
        }
    }

    /// Members whose membership lapsed, or came back, since the last look:
    /// audited, and the network (which closes a lapsed member's
    /// connections) and the directory (whose mail then waits) are told.
    pub fn check_lapses(&mut self, net: &mut dyn Network) {
        let lapsed: std::collections::BTreeSet<PeerId> = self
            .state
            .iter()
            .flat_map(|t| t.members().map(|m| m.peer).filter(|p| t.lapsed(p)))
            .collect();
        if lapsed == self.lapsed {
            return;
        }
        for p in lapsed.difference(&self.lapsed).copied().collect::<Vec<_>>() {
            self.audit(
                AuditEvent::Lapsed,
                Some(&p),
                "its membership passed its expiry: not a member until an admin renews it (`agentmesh team renew`)",
            );
        }
        self.lapsed = lapsed;
        self.apply_membership(net);
    }

    /// The directory every part reads.
    pub fn directory(&self) -> watch::Receiver<Arc<Directory>> {
        self.directory.subscribe()
    }

    fn publish_directory(&self) {
        let d = Directory::of(
            self.me.peer_id(),
            self.settings.name.as_str(),
            self.state.as_ref(),
        );
        self.directory.send_replace(Arc::new(d));
    }

    /// Whether `peer` is a current member.
    pub fn is_member(&self, peer: &PeerId) -> bool {
        self.state.as_ref().is_some_and(|t| t.is_member(peer))
    }

    /// Whether `peer` was revoked.
    pub fn is_revoked(&self, peer: &PeerId) -> bool {
        self.state.as_ref().is_some_and(|t| t.is_revoked(peer))
    }

    /// Whether this machine is a current member.
    pub fn am_member(&self) -> bool {
        self.is_member(&self.me.peer_id())
    }

    /// Whether this machine is in its team, lapsed or not (a lapsed
    /// machine is still in it: its founder may renew it).
    pub fn am_in_team(&self) -> bool {
        let me = self.me.peer_id();
        self.state
            .as_ref()
            .and_then(|t| t.member(&me))
            .is_some_and(|m| m.standing == Standing::Current)
    }

    /// Whether this machine's own membership lapsed.
    pub fn lapsed_me(&self) -> bool {
        let me = self.me.peer_id();
        self.state.as_ref().is_some_and(|t| t.lapsed(&me))
    }

    /// Whether this machine is a current admin (the founder).
    pub fn am_admin(&self) -> bool {
        self.state
            .as_ref()
            .and_then(|t| t.member(&self.me.peer_id()))
            .is_some_and(|m| m.admin && m.standing == Standing::Current)
    }

    /// The current members other than this machine, with whether each is
    /// an admin.
    pub fn other_members(&self) -> Vec<(PeerId, bool)> {
        let me = self.me.peer_id();
        self.state
            .iter()
            .flat_map(|t| t.members())
            .filter(|m| m.peer != me && self.is_member(&m.peer))
            .map(|m| (m.peer, m.admin))
            .collect()
    }

    /// How `peer` stands, with whether the network says it is a relay.
    pub fn membership(&self, peer: &PeerId, net: &dyn Network) -> Membership {
        Membership::of(self.state.as_ref(), peer, net.is_relay(peer))
    }

    /// Audits `event` about `peer`.
    pub fn audit(&mut self, event: AuditEvent, peer: Option<&PeerId>, detail: impl Into<String>) {
        let peer = peer.map(ToString::to_string);
        self.audit.note(event, self.now, peer, detail);
    }

    /// Answers a client once what this round audited is durable.
    pub fn reply(&mut self, reply: oneshot::Sender<Reply>, value: Reply) {
        self.replies.push((reply, value));
    }

    /// Ends a round: hands its audit entries to the group commit and sends
    /// the answers that waited for them once they are durable (at once if
    /// nothing was audited).
    ///
    /// Never waits: the network's loop runs this. When the group commit's
    /// queue is full (the disk is failing and writes pile up), the entries
    /// and the answers wait for the next round (every tick).
    pub fn finish(&mut self) {
        let replies = std::mem::take(&mut self.replies);
        let mut thens = std::mem::take(&mut self.waiting);
        if !replies.is_empty() {
            thens.push(Box::new(move || {
                for (reply, value) in replies {
                    // A client that hung up does not want its answer.
                    let _ = reply.send(value);
                }
            }));
        }
        let all = move || {
            for then in thens {
                then();
            }
        };
        if !self.audit.has_pending() {
            return all();
        }
        if let Err(Some(then)) = self.audit.try_submit(Some(Box::new(all))) {
            self.waiting.push(then);
        }
    }

    /// At shutdown: what waits is submitted, waiting for room if it must.
    pub fn finish_blocking(&mut self) {
        self.finish();
        let waiting = std::mem::take(&mut self.waiting);
        let then: crate::store::Done = Box::new(move || {
            for then in waiting {
                then();
            }
        });
        self.audit
            .submit(crate::store::Writes::default(), Some(then));
    }

    /// Whether the team changed so that connected members should sync
    /// (a block of this machine's, a team installed); asked once.
    pub fn take_announce(&mut self) -> bool {
        std::mem::take(&mut self.announce)
    }

    /// Subscribes to the blocks topic (or leaves it) and applies
    /// membership to every connection. Called at start and whenever the
    /// team is replaced.
    pub fn activate(&mut self, net: &mut dyn Network, old: Option<&TeamState>) {
        if old.is_some() && self.state.is_none() {
            net.subscribe_blocks(false);
        }
        if self.state.is_some() {
            net.subscribe_blocks(true);
        }
        self.apply_membership(net);
    }

    fn apply_membership(&mut self, net: &mut dyn Network) {
        net.membership_changed(self.state.as_ref());
        self.publish_directory();
    }

    /// Applies blocks to a copy of the team, stores the new ones, and only
    /// then makes the copy the team. Returns how many were new.
    pub fn merge_blocks(&mut self, net: &mut dyn Network, blocks: Vec<Block>) -> usize {
        let Some(team) = &self.state else {
            return 0;
        };
        let mut next = team.clone();
        let before = team.hashes();
        for b in blocks {
            if let Err(e) = next.apply(b.clone()) {
                // Debug: a member gossiping junk must not fill the log.
                tracing::debug!(block = %b.hash(), error = %e, "refused a team block");
            }
        }
        let added: Vec<Block> = next
            .blocks()
            .filter(|b| !before.contains(&b.hash()))
            .cloned()
            .collect();
        if added.is_empty() {
            return 0;
        }
        let pairs: Vec<(BlockHash, &[u8])> = added.iter().map(|b| (b.hash(), b.bytes())).collect();
        if let Err(e) = self.store.put_blocks(&next.id(), &pairs) {
            tracing::error!(error = %e, "cannot store team blocks; not applying them");
            return 0;
        }
        self.state = Some(next);
        for b in &added {
            match b.body() {
                BlockBody::Revoke(r) => self.audit(
                    AuditEvent::Revoked,
                    Some(&r.peer),
                    format!("learned; revoked by {}", r.revoked_by),
                ),
                BlockBody::Admit(a) => self.audit(
                    AuditEvent::Admitted,
                    Some(&a.peer),
                    format!("learned; {} ({})", a.name, a.owner),
                ),
                BlockBody::Person(p) => self.audit(
                    AuditEvent::Person,
                    Some(&p.peer),
                    format!("learned; now {}'s machine (sequence {})", p.person, p.seq),
                ),
                BlockBody::Term(t) => self.audit(
                    AuditEvent::Renewed,
                    Some(&t.peer),
                    format!("learned; a member until {}", t.expires_at),
                ),
                BlockBody::Genesis(_) | BlockBody::Unknown(_) => {}
            }
        }
        self.apply_membership(net);
        added.len()
    }

    /// Signs a block, stores it, then adds it to the team and spreads it.
    pub fn add_own_block(
        &mut self,
        net: &mut dyn Network,
        body: BlockBody,
    ) -> Result<Block, ApiError> {
        let block = Block::sign(body, &self.me)
            .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?;
        let team = self
            .state
            .as_ref()
            .ok_or_else(|| ApiError::new(ErrorCode::NotInTeam, NOT_IN_TEAM))?;
        let mut next = team.clone();
        next.set_now(self.now);
        next.apply(block.clone())
            .map_err(|e| ApiError::new(ErrorCode::Refused, e.to_string()))?;
        self.store
            .put_blocks(&next.id(), &[(block.hash(), block.bytes())])?;
        self.state = Some(next);
        net.publish_block(block.bytes().to_vec());
        self.apply_membership(net);
        self.announce = true;
        Ok(block)
    }

    /// Replaces the team with `state`: stores it and points at it first,
    /// then forgets the old one.
    pub fn replace_team(
        &mut self,
        net: &mut dyn Network,
        state: TeamState,
    ) -> Result<(), ApiError> {
        let mut state = state;
        state.set_now(self.now);
        let pairs: Vec<(BlockHash, &[u8])> =
            state.blocks().map(|b| (b.hash(), b.bytes())).collect();
        self.store
            .put_blocks(&state.id(), &pairs)
            .and_then(|()| self.store.set_team(Some(state.id())))?;
        let old = self.state.replace(state);
        if let Some(old) = &old
            && Some(old.id()) != self.state.as_ref().map(TeamState::id)
        {
            let _ = self.store.delete_team(&old.id());
        }
        self.activate(net, old.as_ref());
        Ok(())
    }

    /// The team as `team show` shows it.
    pub fn team_view(&self) -> Result<api::TeamView, ApiError> {
        let Some(team) = &self.state else {
            return err(ErrorCode::NotInTeam, NOT_IN_TEAM);
        };
        let Some(g) = team.genesis() else {
            return err(ErrorCode::NotInTeam, NOT_IN_TEAM);
        };
        Ok(api::TeamView {
            team_id: team.id().to_string(),
            name: g.team_name.to_string(),
            founder: g.founder.to_string(),
            founder_name: g.founder_name.to_string(),
            members: self.member_views(team),
        })
    }

    /// Every machine `team` admitted, admins first, then by name.
    pub fn member_views(&self, team: &TeamState) -> Vec<api::MemberView> {
        let me = self.me.peer_id();
        // Carriers, as their signed directory records say (this machine
        // as its configuration says).
        let carriers: std::collections::HashSet<PeerId> = self
            .store
            .directory_records()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(p, b)| {
                let s = agentmesh_protocol::directory::SignedDirectory::from_bytes_unverified(&b)
                    .ok()?;
                s.record().always_on.then_some(p)
            })
            .collect();
        let mut members: Vec<api::MemberView> = team
            .members()
            .map(|m| api::MemberView {
                name: m.name.to_string(),
                owner: m.owner.to_string(),
                peer_id: m.peer.to_string(),
                admitted_at: rfc3339(m.admitted_at),
                revoked: m.standing == Standing::Revoked,
                admin: m.admin,
                standing: standing_word(m, self.now),
                this_machine: m.peer == me,
                always_on: if m.peer == me {
                    self.settings.carry.carry
                } else {
                    carriers.contains(&m.peer)
                },
                expires_at: m.term.map(|t| rfc3339(t.expires_at)),
                renewed_by: m.term.map(|t| {
                    team.member(&t.by)
                        .map_or_else(|| t.by.to_string(), |a| a.name.to_string())
                }),
            })
            .collect();
        members.sort_by(|a, b| (!a.admin, &a.name).cmp(&(!b.admin, &b.name)));
        members
    }

    /// The team's id and name.
    pub fn team_ref(&self) -> Option<api::TeamRef> {
        let t = self.state.as_ref()?;
        Some(api::TeamRef {
            team_id: t.id().to_string(),
            name: t.genesis()?.team_name.to_string(),
        })
    }
}
