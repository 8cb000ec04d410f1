//! Teams: a grow-only set of signed blocks.
//!
//! A team starts with a [`Genesis`] block, whose SHA-256 is the [`TeamId`]
//! and which names the admins (today the founder alone) and the founder's
//! own machine. [`Admit`] blocks add machines, [`Revoke`] blocks remove them,
//! [`Person`] blocks say which person runs a machine. Each block is signed
//! by the machine it names as its author. A block of a type this build does
//! not know (from a later version) is kept if an admin signed it, and
//! changes nothing here ([`Unknown`]).
//!
//! The rules, each of which depends only on the block itself, the Genesis
//! and (for a machine leaving) that machine's Admit, never on the order in
//! which blocks arrived:
//!
//! - only an admin's signature makes an Admit valid; admins are members by
//!   Genesis and can't be admitted again;
//! - only an admin's signature, or the target's own (leaving), makes a
//!   Revoke valid; an admin can't be revoked (a lost founder key means a new
//!   team);
//! - a machine may revoke itself only once it has been admitted: its
//!   self-Revoke waits for its Admit, so a key that was never admitted
//!   cannot add blocks to the team;
//! - a revocation wins forever: a revoked key is never a member again,
//!   whatever Admits exist for it (a new key is a new machine);
//! - one Admit per PeerId and one current member per name: where Admits
//!   conflict, the lowest block hash wins, and an admin's Genesis claim to a
//!   name beats any Admit;
//! - a machine's person is the one its Admit (the Genesis, for the founder)
//!   names, until an admin's Person block names another: among a machine's
//!   Person blocks the highest sequence number wins, ties the lowest hash.
//!
//! Because validity never depends on arrival order, [`TeamState`] is a pure
//! function of the *set* of blocks it has seen: any order, any duplication,
//! the same members. Blocks that arrive before what they depend on (their
//! Genesis, or a leaving machine's Admit) wait in a bounded buffer. Only at
//! the caps ([`MAX_PENDING_BLOCKS`], [`MAX_TEAM_BLOCKS`]), which honest teams
//! never reach, does order matter.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use ciborium::Value;
use libp2p_identity::PeerId;
use sha2::{Digest, Sha256};

use crate::cbor::{self, DecodeError, Fields, MAX_BLOCK_BYTES};
use crate::identity::{self, Identity, X25519Public, peer_field, peer_value};
use crate::names::{Name, Owner, name_field, owner_field};
use crate::time::Timestamp;

/// The domain-separation tag that opens the message a block signature covers.
pub const BLOCK_SIGNATURE_DST: &[u8] = b"agentmesh/v1 block signature";

/// The most admins a Genesis may name. One today; room to grow.
pub const MAX_ADMINS: usize = 16;

/// The most blocks (besides Genesis) a team holds. Only admins create
/// blocks in quantity, and 4096 is room for a thousand machines each
/// admitted and revoked twice; at 8 KiB a block it bounds a team at 32 MiB.
pub const MAX_TEAM_BLOCKS: usize = 4096;

/// The most blocks held while what they depend on (their Genesis, or the
/// Admit of a machine leaving) has not arrived. Sync sends the Genesis
/// first, so this buffer only absorbs reordering.
pub const MAX_PENDING_BLOCKS: usize = 256;

/// A team's id: the SHA-256 of its Genesis block's bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TeamId(pub [u8; 32]);

/// A block's hash: the SHA-256 of its bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(pub [u8; 32]);

macro_rules! hex_display {
    ($t:ident) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&data_encoding::HEXLOWER.encode(&self.0))
            }
        }
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($t), "({})"), self)
            }
        }
        impl $t {
            /// Parses the 64-character hex form.
            pub fn parse(s: &str) -> Option<Self> {
                let b = data_encoding::HEXLOWER_PERMISSIVE
                    .decode(s.as_bytes())
                    .ok()?;
                Some($t(b.try_into().ok()?))
            }
        }
    };
}
hex_display!(TeamId);
hex_display!(BlockHash);

/// The block that founds a team.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Genesis {
    /// The team's name.
    pub team_name: Name,
    /// The founding machine; it signs the Genesis.
    pub founder: PeerId,
    /// The founding machine's X25519 key.
    pub founder_x25519: X25519Public,
    /// The founding machine's name.
    pub founder_name: Name,
    /// The person who runs the founding machine.
    pub founder_owner: Owner,
    /// The machines whose signatures admit and revoke; must include the founder.
    pub admins: Vec<PeerId>,
    /// When the team was founded.
    pub created_at: Timestamp,
    /// Random bytes, so two teams founded alike still differ.
    pub nonce: [u8; 16],
}

/// A block that admits a machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admit {
    /// The team.
    pub team: TeamId,
    /// The admitted machine.
    pub peer: PeerId,
    /// Its X25519 key.
    pub x25519: X25519Public,
    /// Its machine name.
    pub name: Name,
    /// The person who runs it, as they claimed when joining.
    pub owner: Owner,
    /// The admin who admitted it; signs the block.
    pub admitted_by: PeerId,
    /// When.
    pub at: Timestamp,
}

/// A block that revokes a machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoke {
    /// The team.
    pub team: TeamId,
    /// The revoked machine.
    pub peer: PeerId,
    /// An admin, or the machine itself (leaving); signs the block.
    pub revoked_by: PeerId,
    /// When.
    pub at: Timestamp,
}

/// A block that says which person runs a machine (type 3): what consent
/// compares ("another person's machine"), chosen by an admin, never typed
/// by the machine itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    /// The team.
    pub team: TeamId,
    /// The admin who says so; signs the block.
    pub by: PeerId,
    /// The machine.
    pub peer: PeerId,
    /// The person who runs it from now on.
    pub person: Owner,
    /// Among the machine's Person blocks the highest wins.
    pub seq: u64,
    /// When.
    pub at: Timestamp,
}

/// A block of a type this build does not know (a later version's): every
/// type from [`FIRST_EXTENSIBLE_TYPE`] on starts `[version, type, team,
/// signer, …]`, so its team and signer can be read and its signature
/// checked. Kept if an admin signed it (so every member holds the same
/// set); it changes nothing this build knows of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown {
    /// Its type.
    pub block_type: u64,
    /// The team.
    pub team: TeamId,
    /// Who signed it.
    pub signer: PeerId,
}

/// Block types from this one on start `[version, type, team, signer, …]`
/// (the Person block is the first such type).
pub const FIRST_EXTENSIBLE_TYPE: u64 = 3;

/// The content of a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockBody {
    /// Founds a team.
    Genesis(Genesis),
    /// Admits a machine.
    Admit(Admit),
    /// Revokes a machine.
    Revoke(Revoke),
    /// Says which person runs a machine.
    Person(Person),
    /// A later version's type: kept, not understood.
    Unknown(Unknown),
}

impl BlockBody {
    /// The machine that must sign the block.
    pub fn signer(&self) -> PeerId {
        match self {
            BlockBody::Genesis(g) => g.founder,
            BlockBody::Admit(a) => a.admitted_by,
            BlockBody::Revoke(r) => r.revoked_by,
            BlockBody::Person(p) => p.by,
            BlockBody::Unknown(u) => u.signer,
        }
    }

    fn to_value(&self) -> Value {
        let v = cbor::uint(crate::PROTOCOL_VERSION);
        Value::Array(match self {
            BlockBody::Genesis(g) => vec![
                v,
                cbor::uint(0),
                Value::Text(g.team_name.to_string()),
                peer_value(&g.founder),
                Value::Bytes(g.founder_x25519.0.to_vec()),
                Value::Text(g.founder_name.to_string()),
                Value::Text(g.founder_owner.to_string()),
                Value::Array(g.admins.iter().map(peer_value).collect()),
                cbor::uint(g.created_at.as_unix_millis()),
                Value::Bytes(g.nonce.to_vec()),
            ],
            BlockBody::Admit(a) => vec![
                v,
                cbor::uint(1),
                Value::Bytes(a.team.0.to_vec()),
                peer_value(&a.peer),
                Value::Bytes(a.x25519.0.to_vec()),
                Value::Text(a.name.to_string()),
                Value::Text(a.owner.to_string()),
                peer_value(&a.admitted_by),
                cbor::uint(a.at.as_unix_millis()),
            ],
            BlockBody::Revoke(r) => vec![
                v,
                cbor::uint(2),
                Value::Bytes(r.team.0.to_vec()),
                peer_value(&r.peer),
                peer_value(&r.revoked_by),
                cbor::uint(r.at.as_unix_millis()),
            ],
            BlockBody::Person(p) => vec![
                v,
                cbor::uint(3),
                Value::Bytes(p.team.0.to_vec()),
                peer_value(&p.by),
                peer_value(&p.peer),
                Value::Text(p.person.to_string()),
                cbor::uint(p.seq),
                cbor::uint(p.at.as_unix_millis()),
            ],
            // Never signed here: an unknown block only ever comes from its
            // bytes, which are kept as they came.
            BlockBody::Unknown(u) => vec![
                v,
                cbor::uint(u.block_type),
                Value::Bytes(u.team.0.to_vec()),
                peer_value(&u.signer),
            ],
        })
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        const WHAT: &str = "block payload";
        let block_type = match &value {
            Value::Array(items) => match items.get(1) {
                Some(Value::Integer(t)) => u64::try_from(*t).ok(),
                _ => None,
            },
            _ => None,
        };
        let count = match block_type {
            Some(0) => 10,
            Some(1) => 9,
            Some(2) => 6,
            Some(3) => 8,
            Some(t) if t > 3 => {
                // A later type: its common start, the rest kept unread.
                let mut f = Fields::versioned_prefix(WHAT, value, 4)?;
                f.uint("type", u64::MAX)?;
                return Ok(BlockBody::Unknown(Unknown {
                    block_type: t,
                    team: TeamId(f.array("team")?),
                    signer: peer_field(&mut f, "signer")?,
                }));
            }
            _ => {
                // A version problem is reported first: another version may
                // have other block types.
                let len = match &value {
                    Value::Array(items) => items.len(),
                    _ => 0,
                };
                let f = Fields::versioned(WHAT, value, len)?;
                return Err(f.error("type", "must be an unsigned integer"));
            }
        };
        let mut f = Fields::versioned(WHAT, value, count)?;
        f.uint("type", 3)?;
        let ts = |f: &mut Fields, field| f.uint(field, u64::MAX).map(Timestamp::from_unix_millis);
        Ok(match block_type {
            Some(0) => {
                let team_name = name_field(&mut f, "team_name", "team name")?;
                let founder = peer_field(&mut f, "founder")?;
                let founder_x25519 = X25519Public(f.array("founder_x25519")?);
                let founder_name = name_field(&mut f, "founder_name", "machine name")?;
                let founder_owner = owner_field(&mut f, "founder_owner")?;
                let admins = f
                    .list("admins", MAX_ADMINS)?
                    .into_iter()
                    .map(|v| {
                        let mut one = Fields::new(WHAT, Value::Array(vec![v]), 1)?;
                        peer_field(&mut one, "admins")
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                BlockBody::Genesis(Genesis {
                    team_name,
                    founder,
                    founder_x25519,
                    founder_name,
                    founder_owner,
                    admins,
                    created_at: ts(&mut f, "created_at")?,
                    nonce: f.array("nonce")?,
                })
            }
            Some(1) => BlockBody::Admit(Admit {
                team: TeamId(f.array("team")?),
                peer: peer_field(&mut f, "peer")?,
                x25519: X25519Public(f.array("x25519")?),
                name: name_field(&mut f, "name", "machine name")?,
                owner: owner_field(&mut f, "owner")?,
                admitted_by: peer_field(&mut f, "admitted_by")?,
                at: ts(&mut f, "at")?,
            }),
            Some(2) => BlockBody::Revoke(Revoke {
                team: TeamId(f.array("team")?),
                peer: peer_field(&mut f, "peer")?,
                revoked_by: peer_field(&mut f, "revoked_by")?,
                at: ts(&mut f, "at")?,
            }),
            _ => BlockBody::Person(Person {
                team: TeamId(f.array("team")?),
                by: peer_field(&mut f, "by")?,
                peer: peer_field(&mut f, "peer")?,
                person: owner_field(&mut f, "person")?,
                seq: f.uint("seq", u64::MAX)?,
                at: ts(&mut f, "at")?,
            }),
        })
    }
}

/// Why bytes are not a block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockError {
    /// The bytes do not decode.
    #[error("the block is malformed: {0}")]
    Malformed(#[from] DecodeError),
    /// The signature does not verify for the block's author.
    #[error("the block's signature does not verify for its author {0}")]
    BadSignature(PeerId),
    /// [`Block::sign`] was given a block of a type this build does not
    /// know: only its bytes, as they came, can be kept.
    #[error("a block of type {0} is not one this build knows, so it cannot sign one")]
    UnknownType(u64),
    /// [`Block::sign`] was given a key other than the block's author's.
    #[error("the block must be signed by {author}, not {key}")]
    WrongSigner {
        /// The block's author.
        author: PeerId,
        /// The key offered.
        key: PeerId,
    },
}

/// A signed block. A `Block` value always carries a verified signature: the
/// only ways to make one are [`Block::sign`] and [`Block::from_bytes`].
#[derive(Clone, PartialEq, Eq)]
pub struct Block {
    body: BlockBody,
    bytes: Vec<u8>,
    hash: BlockHash,
}

impl fmt::Debug for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Block")
            .field("hash", &self.hash)
            .field("body", &self.body)
            .finish()
    }
}

fn block_signed_message(payload: &[u8]) -> Vec<u8> {
    [BLOCK_SIGNATURE_DST, payload].concat()
}

impl Block {
    /// Signs `body` with its author's key.
    pub fn sign(body: BlockBody, author: &Identity) -> Result<Block, BlockError> {
        if let BlockBody::Unknown(u) = &body {
            return Err(BlockError::UnknownType(u.block_type));
        }
        if body.signer() != author.peer_id() {
            return Err(BlockError::WrongSigner {
                author: body.signer(),
                key: author.peer_id(),
            });
        }
        let payload = cbor::encode(&body.to_value());
        let signature = author.sign(&block_signed_message(&payload));
        let bytes = cbor::encode(&Value::Array(vec![
            Value::Bytes(payload),
            Value::Bytes(signature.to_vec()),
        ]));
        Ok(Block {
            hash: BlockHash(Sha256::digest(&bytes).into()),
            body,
            bytes,
        })
    }

    /// Decodes a block and verifies its signature.
    pub fn from_bytes(bytes: &[u8]) -> Result<Block, BlockError> {
        const WHAT: &str = "block";
        let value = cbor::decode(WHAT, bytes, MAX_BLOCK_BYTES)?;
        let mut f = Fields::new(WHAT, value, 2)?;
        let payload = f.bytes("payload", MAX_BLOCK_BYTES)?;
        let signature = f.array::<64>("signature")?;
        let body =
            BlockBody::from_value(cbor::decode("block payload", &payload, MAX_BLOCK_BYTES)?)?;
        if !identity::verify(&body.signer(), &block_signed_message(&payload), &signature) {
            return Err(BlockError::BadSignature(body.signer()));
        }
        Ok(Block {
            hash: BlockHash(Sha256::digest(bytes).into()),
            body,
            bytes: bytes.to_vec(),
        })
    }

    /// The block's content.
    pub fn body(&self) -> &BlockBody {
        &self.body
    }

    /// The block's canonical bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The SHA-256 of the block's bytes.
    pub fn hash(&self) -> BlockHash {
        self.hash
    }

    /// The team a Genesis founds: its hash. `None` for other blocks.
    pub fn founds(&self) -> Option<TeamId> {
        matches!(self.body, BlockBody::Genesis(_)).then_some(TeamId(self.hash.0))
    }

    /// The team a block belongs to.
    pub fn team(&self) -> TeamId {
        match &self.body {
            BlockBody::Genesis(_) => TeamId(self.hash.0),
            BlockBody::Admit(a) => a.team,
            BlockBody::Revoke(r) => r.team,
            BlockBody::Person(p) => p.team,
            BlockBody::Unknown(u) => u.team,
        }
    }
}

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

    /// Whether `peer` is a current member.
    pub fn is_member(&self, peer: &PeerId) -> bool {
        self.member(peer)
            .is_some_and(|m| m.standing == Standing::Current)
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
