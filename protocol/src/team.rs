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
//!   Person blocks the highest sequence number wins, ties the lowest hash;
//! - a machine's membership lasts until the latest `expires_at` of its
//!   admins' [`Term`] blocks (none: it does not expire; the founder never
//!   does); past it the machine is not a member (lapsed) until a Term
//!   extends it. Only this rule reads a clock: the time a state is
//!   judged at, given to it ([`TeamState::set_now`]).
//!
//! Because validity never depends on arrival order, [`TeamState`] is a pure
//! function of the *set* of blocks it has seen: any order, any duplication,
//! the same members. Blocks that arrive before what they depend on (their
//! Genesis, or a leaving machine's Admit) wait in a bounded buffer. Only at
//! the caps ([`MAX_PENDING_BLOCKS`], [`MAX_TEAM_BLOCKS`]), which honest teams
//! never reach, does order matter.

mod state;
pub use state::{Applied, BlockRejected, Member, MemberTerm, Standing, TeamState};

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

/// A block that sets when a machine's membership ends unless renewed
/// (type 4): written with its Admit and again at each renewal. Among a
/// machine's Term blocks the latest `expires_at` counts; a machine with
/// none does not expire (it was admitted before terms, or by a build
/// without them). The founder's membership never expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// The team.
    pub team: TeamId,
    /// The admin who admits or renews; signs the block.
    pub by: PeerId,
    /// The machine.
    pub peer: PeerId,
    /// When its membership lapses, unless a later Term extends it.
    pub expires_at: Timestamp,
    /// When the term was given (its start: a member asks for renewal two
    /// thirds of the way from here to `expires_at`).
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
    /// Says until when a machine is a member.
    Term(Term),
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
            BlockBody::Term(t) => t.by,
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
            BlockBody::Term(t) => vec![
                v,
                cbor::uint(4),
                Value::Bytes(t.team.0.to_vec()),
                peer_value(&t.by),
                peer_value(&t.peer),
                cbor::uint(t.expires_at.as_unix_millis()),
                cbor::uint(t.at.as_unix_millis()),
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
            Some(4) => 7,
            Some(t) if t > 4 => {
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
        f.uint("type", 4)?;
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
            Some(4) => BlockBody::Term(Term {
                team: TeamId(f.array("team")?),
                by: peer_field(&mut f, "by")?,
                peer: peer_field(&mut f, "peer")?,
                expires_at: ts(&mut f, "expires_at")?,
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
            BlockBody::Term(t) => t.team,
            BlockBody::Unknown(u) => u.team,
        }
    }
}
