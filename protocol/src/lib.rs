//! # agentmesh-protocol
//!
//! Everything that crosses a machine boundary in agentmesh, defined once.
//! This crate does no I/O, starts no tasks and reads no clock: time is an
//! argument ([`Timestamp`]) and randomness comes from the caller's RNG, so
//! every function here can be property-tested and fuzzed on its own.
//! `docs/protocol.md` at the repository root is the byte-exact specification
//! of what this crate implements, with test vectors in `tests/vectors/`.
//!
//! A guide to the modules, in the order a message meets them:
//!
//! - [`identity`]: a machine's ed25519 key (its libp2p PeerId, signer of
//!   envelopes and blocks) and X25519 key (receives sealed envelopes), and the
//!   key-file format.
//! - [`names`]: the alphabet and length of machine, mailbox and team names,
//!   and what an owner (a person's name) may hold.
//! - [`envelope`]: a message between two machines: a CBOR header, a body
//!   sealed with HPKE to the recipient, and the sender's signature.
//!   [`envelope::seal`] and [`envelope::open`] are the two entry points.
//! - [`team`]: the signed blocks (`Genesis`, `Admit`, `Revoke`) that make a
//!   team, and [`team::TeamState`], which merges them as a grow-only set.
//! - [`join`]: the join request and offer, and the pairing and team codes
//!   derived from their transcript.
//! - [`ticket`]: the copy-pasteable invite ticket.
//! - [`contact`]: a member's signed record of how to reach it.
//! - [`directory`]: a member's signed record of its mailboxes, with each
//!   one's profile, goal and status.
//! - [`cbor`]: the canonical CBOR codec every type above uses, with its size
//!   limits.
//! - [`time`]: timestamps and the clock rules envelopes are judged by.

#![deny(missing_docs)]
#![forbid(unsafe_code)] // the workspace only denies it: the daemon's allocator setting (cli) is the one exception

pub mod cbor;
pub mod contact;
pub mod directory;
pub mod envelope;
pub mod identity;
pub mod join;
pub mod names;
pub mod receipt;
pub mod team;
pub mod ticket;
pub mod time;

mod base32;

pub use cbor::{DecodeError, Wire};
pub use envelope::{
    Attachment, Body, Envelope, Header, Kind, MessageId, OpenError, Opened, SealError, Who,
    WhoKind, open, seal,
};
pub use identity::{Identity, X25519Public};
pub use libp2p_identity::PeerId;
pub use multiaddr::Multiaddr;
pub use names::{Name, NameError, Owner};
pub use team::{Block, BlockBody, TeamId, TeamState};
pub use time::Timestamp;

/// identify's protocol version, which the daemon and the relay both speak:
/// peers speaking another are not agentmesh.
pub const IDENTIFY_PROTOCOL: &str = "/agentmesh/1.0.0";
/// Kademlia's private protocol name, shared by the daemon and the relay
/// (its bootstrap node), to stay off the public IPFS DHT.
pub const KAD_PROTOCOL: &str = "/agentmesh/kad/1.0.0";

/// The version of the wire format this crate speaks. Every wire type carries
/// it as its first field; see "Versioning" in docs/protocol.md.
pub const PROTOCOL_VERSION: u64 = 1;
