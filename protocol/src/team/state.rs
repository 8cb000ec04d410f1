//! A team's state: its members, admins and persons as its blocks say, and
//! the rules a block must pass to be applied (`TeamState::apply`).

use std::collections::{BTreeMap, BTreeSet};

use libp2p_identity::PeerId;

use super::*;

/// Why a team refused a block. The reasons depend only on the block and the
/// team's Genesis, so every member refuses the same blocks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockRejected {
    /// The block belongs to another team.
    #[error("the block belongs to team {found}, not {expected}")]
    WrongTeam {
        /// This team.
        expected: TeamId,
        /// The block's team.
        found: TeamId,
    },
    /// The Genesis breaks a rule (in version 1 its admins must be exactly
    /// the founder).
    #[error("the genesis block is invalid: {0}")]
    BadGenesis(&'static str),
    /// An Admit, a Person block or a block of a later type signed by a
    /// machine that is not an admin.
    #[error(
        "{signer} is not an admin of this team, so it cannot admit machines or say whose they are"
    )]
    NotAnAdmin {
        /// The signer.
        signer: PeerId,
    },
    /// An Admit for an admin, who is a member by Genesis already.
    #[error("{peer} is an admin and a member by the team's genesis; it cannot be admitted again")]
    AdmitsAdmin {
        /// The admin.
        peer: PeerId,
    },
    /// A Term for an admin, whose membership never expires.
    #[error("{peer} is an admin: its membership does not expire")]
    TermForAdmin {
        /// The admin.
        peer: PeerId,
    },
    /// A Revoke of an admin.
    #[error(
        "{peer} is an admin and cannot be revoked; a lost founder key means founding a new team"
    )]
    RevokesAdmin {
        /// The admin.
        peer: PeerId,
    },
    /// A Revoke signed by neither an admin nor the revoked machine.
    #[error("{signer} may not revoke {peer}: only an admin, or the machine itself, can")]
    RevokeNotAllowed {
        /// The signer.
        signer: PeerId,
        /// The target.
        peer: PeerId,
    },
    /// The buffer for blocks waiting for their Genesis is full.
    #[error(
        "{MAX_PENDING_BLOCKS} blocks already wait for a block they depend on; try again after the team has synced"
    )]
    PendingFull,
    /// The team holds [`MAX_TEAM_BLOCKS`] blocks already.
    #[error("the team already holds {MAX_TEAM_BLOCKS} blocks")]
    TeamFull,
}

/// What [`TeamState::apply`] did with a valid block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The block is new and now part of the team.
    Added,
    /// The team already had it.
    Duplicate,
    /// The block depends on one not yet seen (the team's Genesis, or the
    /// Admit of a machine leaving the team) and waits for it.
    Pending,
}

/// Where a machine stands in its team.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// A current member.
    Current,
    /// Revoked (or left); never a member again.
    Revoked,
    /// Admitted, but another current member holds the same name and won
    /// (lower block hash, or an admin's Genesis claim). Not a member while
    /// that one is.
    NameTaken,
}

/// A machine the team knows, current or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The machine.
    pub peer: PeerId,
    /// Its X25519 key.
    pub x25519: X25519Public,
    /// Its machine name.
    pub name: Name,
    /// The person who runs it, as the team says: its Admit's (for the
    /// founder, the Genesis's), or the newest Person block's.
    pub owner: Owner,
    /// The sequence number of the Person block that named its person (0:
    /// none did); the next one must be higher.
    pub person_seq: u64,
    /// Whether it is an admin.
    pub admin: bool,
    /// When it was admitted (the Genesis time for the founder).
    pub admitted_at: Timestamp,
    /// Who admitted it (the founder admits itself by Genesis).
    pub admitted_by: PeerId,
    /// Where it stands.
    pub standing: Standing,
    /// The revocation, if any: who, and when.
    pub revoked: Option<(PeerId, Timestamp)>,
    /// Whether it left: revoked by Revokes of its own only (none by an
    /// admin). Revoked either way.
    pub left: bool,
    /// Its term: the Term block with the latest expiry (`None`: it does
    /// not expire).
    pub term: Option<MemberTerm>,
}

/// A member's term, as its latest-expiring Term block gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberTerm {
    /// When its membership lapses unless renewed.
    pub expires_at: Timestamp,
    /// The admin who gave it.
    pub by: PeerId,
    /// When it was given (the Term's `at`).
    pub from: Timestamp,
}

impl Member {
    /// Whether its membership has lapsed at `now` (past its expiry, not
    /// renewed).
    pub fn lapsed(&self, now: Timestamp) -> bool {
        self.term.is_some_and(|t| now >= t.expires_at)
    }
}

/// The state of one team: the blocks it has seen and the members they make.
#[derive(Debug, Clone)]
pub struct TeamState {
    id: TeamId,
    genesis: Option<(Block, Genesis)>,
    blocks: BTreeMap<BlockHash, Block>,
    pending: BTreeMap<BlockHash, Block>,
    members: BTreeMap<PeerId, Member>,
    /// Keys revoked without ever having been admitted.
    revoked_only: BTreeSet<PeerId>,
    /// Every PeerId some Admit in `blocks` names.
    admitted: BTreeSet<PeerId>,
    /// The time memberships are judged at (`None`: none lapses).
    now: Option<Timestamp>,
}

/// Whether a block can join the team now.
enum Readiness {
    Ready,
    /// It depends on a block not yet seen: the Genesis, or the Admit of a
    /// machine that is leaving.
    Waiting,
}

impl TeamState {
    /// An empty state for team `id`, waiting for its Genesis.
    pub fn new(id: TeamId) -> Self {
        TeamState {
            id,
            genesis: None,
            blocks: BTreeMap::new(),
            pending: BTreeMap::new(),
            members: BTreeMap::new(),
            revoked_only: BTreeSet::new(),
            admitted: BTreeSet::new(),
            now: None,
        }
    }

    /// A state founded by `genesis`.
    pub fn from_genesis(genesis: Block) -> Result<Self, BlockRejected> {
        let Some(id) = genesis.founds() else {
            return Err(BlockRejected::BadGenesis(
                "the first block of a team must be its genesis",
            ));
        };
        let mut state = TeamState::new(id);
        state.apply(genesis)?;
        Ok(state)
    }

    /// The team's id.
    pub fn id(&self) -> TeamId {
        self.id
    }

    /// The Genesis, once it has arrived.
    pub fn genesis(&self) -> Option<&Genesis> {
        self.genesis.as_ref().map(|(_, g)| g)
    }

    /// Adds a block, if the team's rules allow it.
    pub fn apply(&mut self, block: Block) -> Result<Applied, BlockRejected> {
        let hash = block.hash();
        if block.team() != self.id {
            return Err(BlockRejected::WrongTeam {
                expected: self.id,
                found: block.team(),
            });
        }
        if let BlockBody::Genesis(g) = block.body() {
            if self.genesis.is_some() {
                return Ok(Applied::Duplicate);
            }
            check_genesis(g)?;
            self.genesis = Some((block.clone(), g.clone()));
            self.settle();
            self.recompute();
            return Ok(Applied::Added);
        }
        if self.blocks.contains_key(&hash) || self.pending.contains_key(&hash) {
            return Ok(Applied::Duplicate);
        }
        match self.readiness(&block)? {
            Readiness::Ready => {
                self.insert(block)?;
                self.settle();
                self.recompute();
                Ok(Applied::Added)
            }
            Readiness::Waiting => {
                if self.pending.len() >= MAX_PENDING_BLOCKS {
                    return Err(BlockRejected::PendingFull);
                }
                self.pending.insert(hash, block);
                Ok(Applied::Pending)
            }
        }
    }

    /// Judges a non-Genesis block against the Genesis (and, for a machine
    /// leaving, its Admit): valid now, valid once what it depends on
    /// arrives, or never valid.
    fn readiness(&self, block: &Block) -> Result<Readiness, BlockRejected> {
        let Some((_, genesis)) = &self.genesis else {
            return Ok(Readiness::Waiting);
        };
        let is_admin = |p: &PeerId| genesis.admins.contains(p);
        match block.body() {
            BlockBody::Admit(a) => {
                if !is_admin(&a.admitted_by) {
                    return Err(BlockRejected::NotAnAdmin {
                        signer: a.admitted_by,
                    });
                }
                if is_admin(&a.peer) {
                    return Err(BlockRejected::AdmitsAdmin { peer: a.peer });
                }
            }
            BlockBody::Revoke(r) => {
                if is_admin(&r.peer) {
                    return Err(BlockRejected::RevokesAdmin { peer: r.peer });
                }
                if !is_admin(&r.revoked_by) {
                    if r.revoked_by != r.peer {
                        return Err(BlockRejected::RevokeNotAllowed {
                            signer: r.revoked_by,
                            peer: r.peer,
                        });
                    }
                    // Leaving needs an Admit to leave from; otherwise any
                    // fresh key could mint blocks and fill the team.
                    if !self.admitted.contains(&r.peer) {
                        return Ok(Readiness::Waiting);
                    }
                }
            }
            BlockBody::Term(t) => {
                if !is_admin(&t.by) {
                    return Err(BlockRejected::NotAnAdmin { signer: t.by });
                }
                if is_admin(&t.peer) {
                    return Err(BlockRejected::TermForAdmin { peer: t.peer });
                }
            }
            // A machine's person, or a later type, is an admin's to say.
            BlockBody::Person(Person { by: signer, .. })
            | BlockBody::Unknown(Unknown { signer, .. }) => {
                if !is_admin(signer) {
                    return Err(BlockRejected::NotAnAdmin { signer: *signer });
                }
            }
            BlockBody::Genesis(_) => unreachable!("genesis blocks are handled by apply"),
        }
        Ok(Readiness::Ready)
    }

    fn insert(&mut self, block: Block) -> Result<(), BlockRejected> {
        if self.blocks.len() >= MAX_TEAM_BLOCKS {
            return Err(BlockRejected::TeamFull);
        }
        if let BlockBody::Admit(a) = block.body() {
            self.admitted.insert(a.peer);
        }
        self.blocks.insert(block.hash(), block);
        Ok(())
    }

    /// Moves waiting blocks whose dependency has arrived into the team,
    /// until none moves. A waiting block that breaks a rule is dropped, as
    /// it would have been refused had its dependency come first.
    fn settle(&mut self) {
        loop {
            let mut progress = false;
            for hash in self.pending.keys().copied().collect::<Vec<_>>() {
                match self.readiness(&self.pending[&hash]) {
                    Ok(Readiness::Waiting) => continue,
                    Ok(Readiness::Ready) => {
                        let block = self.pending.remove(&hash).expect("the key was just listed");
                        progress |= self.insert(block).is_ok();
                    }
                    Err(_) => {
                        self.pending.remove(&hash);
                    }
                }
            }
            if !progress {
                return;
            }
        }
    }

    /// Derives the members from the block set. A pure function of the set:
    /// iteration is in block-hash order and every tie goes to the lowest hash.
    fn recompute(&mut self) {
        let Some((_, g)) = &self.genesis else {
            return;
        };
        let mut revoked: BTreeMap<PeerId, (PeerId, Timestamp)> = BTreeMap::new();
        let mut admits: BTreeMap<PeerId, (&BlockHash, &Admit)> = BTreeMap::new();
        let mut persons: BTreeMap<PeerId, &Person> = BTreeMap::new();
        let mut terms: BTreeMap<PeerId, &Term> = BTreeMap::new();
        // Machines an admin revoked: never "left", whatever Revokes of its
        // own they sign (whose hashes they could grind below the admin's).
        let mut by_admin: BTreeSet<PeerId> = BTreeSet::new();
        for (hash, block) in &self.blocks {
            match block.body() {
                BlockBody::Revoke(r) => {
                    revoked.entry(r.peer).or_insert((r.revoked_by, r.at));
                    if g.admins.contains(&r.revoked_by) {
                        by_admin.insert(r.peer);
                    }
                }
                BlockBody::Admit(a) => {
                    // Hash order: the first Admit seen for a peer has the lowest hash.
                    admits.entry(a.peer).or_insert((hash, a));
                }
                BlockBody::Person(p) => {
                    // Hash order again: a later block of the same sequence
                    // (a higher hash) never replaces an earlier one.
                    persons
                        .entry(p.peer)
                        .and_modify(|held| {
                            if p.seq > held.seq {
                                *held = p;
                            }
                        })
                        .or_insert(p);
                }
                BlockBody::Term(t) => {
                    // Hash order: of two with one expiry, the lower hash.
                    terms
                        .entry(t.peer)
                        .and_modify(|held| {
                            if t.expires_at > held.expires_at {
                                *held = t;
                            }
                        })
                        .or_insert(t);
                }
                BlockBody::Genesis(_) | BlockBody::Unknown(_) => {}
            }
        }
        let mut members = BTreeMap::new();
        // Names held by current members: (rank, peer), where the Genesis
        // ranks before every Admit and Admits rank by block hash.
        let mut holders: BTreeMap<&Name, (Option<&BlockHash>, PeerId)> = BTreeMap::new();
        holders.insert(&g.founder_name, (None, g.founder));
        members.insert(
            g.founder,
            Member {
                peer: g.founder,
                x25519: g.founder_x25519,
                name: g.founder_name.clone(),
                owner: g.founder_owner.clone(),
                admin: true,
                admitted_at: g.created_at,
                admitted_by: g.founder,
                standing: Standing::Current,
                revoked: None,
                person_seq: 0,
                left: false,
                term: None,
            },
        );
        for (peer, (hash, a)) in &admits {
            let revocation = revoked.get(peer).copied();
            if revocation.is_none() {
                let candidate = (Some(*hash), *peer);
                holders
                    .entry(&a.name)
                    .and_modify(|held| {
                        // `None` (the Genesis) ranks first, so an admin keeps its name.
                        if candidate < *held {
                            *held = candidate;
                        }
                    })
                    .or_insert(candidate);
            }
            members.insert(
                *peer,
                Member {
                    peer: *peer,
                    x25519: a.x25519,
                    name: a.name.clone(),
                    owner: a.owner.clone(),
                    admin: false,
                    admitted_at: a.at,
                    admitted_by: a.admitted_by,
                    standing: if revocation.is_some() {
                        Standing::Revoked
                    } else {
                        Standing::Current
                    },
                    revoked: revocation,
                    person_seq: 0,
                    left: false,
                    term: None,
                },
            );
        }
        for m in members.values_mut() {
            if m.standing == Standing::Current && holders.get(&m.name).map(|h| h.1) != Some(m.peer)
            {
                m.standing = Standing::NameTaken;
            }
            if let Some(p) = persons.get(&m.peer) {
                m.owner = p.person.clone();
                m.person_seq = p.seq;
            }
            // Left: revoked by itself, and by no admin.
            m.left = m.revoked.is_some() && !by_admin.contains(&m.peer);
            m.term = terms.get(&m.peer).filter(|_| !m.admin).map(|t| MemberTerm {
                expires_at: t.expires_at,
                by: t.by,
                from: t.at,
            });
        }
        // A revocation of a key that was never admitted still sticks: keep it
        // so `is_revoked` answers for it.
        self.members = members;
        self.revoked_only = revoked
            .into_iter()
            .filter(|(p, _)| !self.members.contains_key(p))
            .map(|(p, _)| p)
            .collect();
    }

    /// Every machine the team has admitted, current or not, by PeerId.
    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }

    /// A machine's record, if the team admitted it.
    pub fn member(&self, peer: &PeerId) -> Option<&Member> {
        self.members.get(peer)
    }

    /// Judges memberships at `now` from here on: a member past its
    /// expiry is not a member ([`TeamState::lapsed`]).
    pub fn set_now(&mut self, now: Timestamp) {
        self.now = Some(now);
    }

    /// Whether `peer` is a current member whose membership lapsed (past
    /// its expiry at the time the state is judged at, not renewed): not a
    /// member until a Term extends it.
    pub fn lapsed(&self, peer: &PeerId) -> bool {
        self.member(peer).is_some_and(|m| {
            m.standing == Standing::Current && self.now.is_some_and(|n| m.lapsed(n))
        })
    }

    /// Whether `peer` is a current member (admitted, not revoked, holding
    /// its name, not lapsed).
    pub fn is_member(&self, peer: &PeerId) -> bool {
        self.member(peer)
            .is_some_and(|m| m.standing == Standing::Current)
            && !self.lapsed(peer)
    }

    /// Whether `peer` has been revoked (or left).
    pub fn is_revoked(&self, peer: &PeerId) -> bool {
        self.member(peer)
            .is_some_and(|m| m.standing == Standing::Revoked)
            || self.revoked_only.contains(peer)
    }

    /// The current member with machine name `name`.
    pub fn by_name(&self, name: &str) -> Option<&Member> {
        self.members
            .values()
            .find(|m| m.standing == Standing::Current && m.name.as_str() == name)
    }

    /// Every block the team holds, Genesis first, then in hash order.
    pub fn blocks(&self) -> impl Iterator<Item = &Block> {
        self.genesis
            .iter()
            .map(|(b, _)| b)
            .chain(self.blocks.values())
    }

    /// The hashes of every block the team holds, in hash order.
    pub fn hashes(&self) -> BTreeSet<BlockHash> {
        self.blocks().map(Block::hash).collect()
    }

    /// A digest of the block set: the SHA-256 of the sorted block hashes.
    /// Two members with the same digest hold the same blocks.
    pub fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for hash in self.hashes() {
            h.update(hash.0);
        }
        h.finalize().into()
    }

    /// The team's persons: the person of each current member, with the
    /// names of that person's machines.
    pub fn persons(&self) -> BTreeMap<&Owner, Vec<&Name>> {
        let mut out: BTreeMap<&Owner, Vec<&Name>> = BTreeMap::new();
        for m in self
            .members
            .values()
            .filter(|m| m.standing == Standing::Current)
        {
            out.entry(&m.owner).or_default().push(&m.name);
        }
        out
    }

    /// How many blocks wait for a block they depend on.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

fn check_genesis(g: &Genesis) -> Result<(), BlockRejected> {
    // Version 1 teams have one admin, the founder. The list leaves room for
    // more in a later version without changing the format.
    if g.admins != [g.founder] {
        return Err(BlockRejected::BadGenesis(
            "in version 1 the admins are exactly [founder]",
        ));
    }
    Ok(())
}
