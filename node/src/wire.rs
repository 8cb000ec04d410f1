//! What agentmesh's machines say to each other: the messages of the join,
//! sync and mail protocols, their names, and the bounds every message is
//! read within. No libp2p types: [`crate::net`] carries these, and
//! [`crate::team`] and [`crate::mail`] decide what they say.
//!
//! | protocol | carries | who may use it |
//! |---|---|---|
//! | [`JOIN`] | [`JoinMsg`] / [`JoinReply`] | anyone holding a valid ticket (the founder checks) |
//! | [`SYNC`] | [`SyncRequest`] / [`SyncReply`] | current members only |
//! | [`MAIL`] | [`MailRequest`] / [`MailReply`] | current members (others are answered busy) |
//! | [`CARRY`] | [`CarryRequest`] / [`MailReply`] | current members (others are answered busy) |
//! | gossipsub topic [`BLOCKS_TOPIC`] | signed team blocks | current members only |

use serde::{Deserialize, Serialize};

use agentmesh_protocol::team::MAX_TEAM_BLOCKS;

pub use agentmesh_protocol::IDENTIFY_PROTOCOL;
/// The join protocol.
pub const JOIN: &str = "/agentmesh/join/1";
/// The team sync protocol.
pub const SYNC: &str = "/agentmesh/sync/1";
/// The mail protocol: sealed envelopes, in batches.
pub const MAIL: &str = "/agentmesh/mail/1";
/// The carry protocol: sealed envelopes handed to a carrier, and carried
/// on to their recipient.
pub const CARRY: &str = "/agentmesh/carry/1";
/// Kademlia's private protocol name, to stay off the public IPFS DHT (not run
/// by the daemon yet: the relay issue adds the lookups that use it).
pub const KAD: &str = agentmesh_protocol::KAD_PROTOCOL;

/// The gossipsub topic team blocks travel on: one name for every team.
/// gossipsub announces subscriptions to every connected peer, strangers
/// included, so a topic named after the team would tell a stranger which
/// machines share a team. Blocks name their team and are applied only to
/// it; only members exchange gossip at all.
pub const BLOCKS_TOPIC: &str = "agentmesh/blocks/1";

/// The gossipsub topic directory announcements travel on (which member's
/// directory record changed, and its new sequence number; never the
/// record). One name for every team, like [`BLOCKS_TOPIC`].
pub const DIRECTORY_TOPIC: &str = "agentmesh/directory/1";

/// The kind of a directory record among a sync's typed records.
pub const DIRECTORY_RECORD: &str = "directory/1";

/// The most typed records one sync answer carries, and the most
/// `(machine, seq)` pairs one digest lists.
pub const MAX_RECORDS_PER_SYNC: usize = 1024;

/// Bytes of typed records one sync answer carries, at most: a page, so the
/// answer crosses a relay circuit; records beyond travel in the next one.
pub const MAX_RECORD_BYTES_PER_SYNC: usize = 64 * 1024;

/// Envelopes in one delivery batch, at most.
pub const MAX_BATCH_ENVELOPES: usize = 256;
/// Bytes of envelopes in one batch to a machine reached only through a
/// relay, at most: circuit relay v2 circuits carry 128 KiB by default (in
/// libp2p's relays of every language), so one envelope of the largest
/// size goes through a circuit with room for identify and sync, and a
/// circuit that hits its limit is replaced with every batch still whole.
pub const MAX_RELAYED_BATCH_BYTES: usize = 64 * 1024;
/// Bytes of envelopes in one batch, at most: under request-response's
/// 1 MiB request limit with room for framing.
pub const MAX_BATCH_BYTES: usize = 900 * 1024;

/// Bytes of envelopes in one batch to a machine reached directly, or
/// only through relays (`relayed`), at most.
pub fn batch_bytes(relayed: bool) -> usize {
    if relayed {
        MAX_RELAYED_BATCH_BYTES
    } else {
        MAX_BATCH_BYTES
    }
}

/// The bounds of one protocol.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest request read, bytes.
    pub request: usize,
    /// The largest response read, bytes.
    pub response: usize,
    /// Bytes of inbound requests being read at once, over every connection.
    pub inbound_budget: usize,
}

/// The most blocks one fetch asks for (8 KiB each at most, so a reply
/// stays under [`SYNC_LIMITS`]). A requester missing more fetches again.
pub const MAX_BLOCKS_PER_SYNC: usize = 100;

/// The most contact records one sync message carries: one per member.
pub const MAX_CONTACTS_PER_SYNC: usize = 1024;

/// Bytes of contact records one sync message carries, at most; records
/// beyond travel with later syncs (each member's own record always goes
/// first, in its own syncs).
pub const MAX_CONTACT_BYTES_PER_SYNC: usize = 256 * 1024;

/// Join messages are a request and an offer of a few hundred bytes; the
/// admission carries two blocks (the Genesis and the joiner's Admit), the
/// joiner syncs the rest as a member. A founder that is not yet a member
/// in the joiner's eyes can make it read no more than this.
pub const JOIN_LIMITS: Limits = Limits {
    request: 8 * 1024,
    response: 32 * 1024,
    inbound_budget: 1024 * 1024,
};

/// A digest with contact records, a fetch of at most
/// [`MAX_BLOCKS_PER_SYNC`] hashes, every hash of a full team (4,096 × 34
/// bytes), or [`MAX_BLOCKS_PER_SYNC`] blocks of 8 KiB: all under 1 MiB.
pub const SYNC_LIMITS: Limits = Limits {
    request: 1024 * 1024,
    response: 1024 * 1024,
    inbound_budget: 8 * 1024 * 1024,
};

/// A batch is under 1 MiB ([`MAX_BATCH_BYTES`] of envelopes
/// plus framing); its reply is one outcome per envelope, each with a code
/// and a reason of at most [`MAX_REASON_BYTES`]. Inbound batches read at
/// once share 64 MiB: 32 senders with both their batches in flight.
pub const MAIL_LIMITS: Limits = Limits {
    request: 1024 * 1024,
    response: 512 * 1024,
    inbound_budget: 64 * 1024 * 1024,
};

/// The carry protocol's bounds: a batch like the mail protocol's (at
/// most [`MAX_BATCH_ENVELOPES`] envelopes under 1 MiB, one outcome
/// each); its codec has its own budget of inbound batches read at once,
/// 32 MiB (a carrier's handoffs and deliveries are one batch at a time
/// per machine), so both protocols together read at most 96 MiB at once.
pub const CARRY_LIMITS: Limits = Limits {
    inbound_budget: 32 * 1024 * 1024,
    ..MAIL_LIMITS
};

/// The longest refusal reason this machine sends (a receiver shows at most
/// 300 characters of it).
pub const MAX_REASON_BYTES: usize = 1024;

/// Blocks an admission carries: the Genesis and the joiner's Admit.
pub const MAX_ADMITTED_BLOCKS: usize = 2;

/// A message of the join protocol, from the joiner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum JoinMsg {
    /// A `JoinRequest` (agentmesh-protocol's canonical CBOR).
    Request(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Where does my request (named by its nonce) stand?
    Poll(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The person confirmed the team code: admit me.
    Confirm(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The person did not confirm the team code: forget my request.
    Decline(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// The founder's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum JoinReply {
    /// A `JoinOffer` (agentmesh-protocol's canonical CBOR).
    Offer(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Nobody has typed the pairing code yet.
    Waiting,
    /// The pairing code matched; the joiner should confirm the team code.
    Approved,
    /// Admitted: the Genesis and the joiner's Admit (the joiner syncs the
    /// rest of the team's blocks as a member).
    Admitted(
        #[serde(deserialize_with = "bounded::<_, _, MAX_ADMITTED_BLOCKS>")]
        Vec<serde_bytes::ByteBuf>,
    ),
    /// Acknowledged (a decline).
    Done,
    /// Refused, and why.
    Refused(String),
}

/// An anti-entropy sync request.
///
/// ```text
/// A ── Digest{team, digest, contacts} ──> B     B: same digest? InSync : Have{every hash}
/// A <── InSync{contacts} | Have{hashes, contacts}   (B, seeing a different digest,
/// A ── Fetch{team, hashes A lacks} ──> B         also syncs toward A to pull)
/// A <── Blocks{blocks, more}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SyncRequest {
    /// "This is the digest of my block set, and the contact records I hold."
    Digest {
        /// The team.
        #[serde(with = "serde_bytes")]
        team: Vec<u8>,
        /// `TeamState::digest()`: SHA-256 of the sorted block hashes.
        #[serde(with = "serde_bytes")]
        digest: Vec<u8>,
        /// Signed contact records of current members, the sender's own included.
        #[serde(deserialize_with = "bounded::<_, _, MAX_CONTACTS_PER_SYNC>")]
        contacts: Vec<serde_bytes::ByteBuf>,
        /// The directory records the sender holds, as `(machine, seq)`:
        /// the answer carries the ones it lacks or holds older. Absent
        /// from machines that predate the directory.
        #[serde(default, deserialize_with = "bounded::<_, _, MAX_RECORDS_PER_SYNC>")]
        directory: Vec<RecordHave>,
    },
    /// "Send me these blocks."
    Fetch {
        /// The team.
        #[serde(with = "serde_bytes")]
        team: Vec<u8>,
        /// Hashes of the blocks wanted, at most [`MAX_BLOCKS_PER_SYNC`].
        #[serde(deserialize_with = "bounded::<_, _, MAX_BLOCKS_PER_SYNC>")]
        hashes: Vec<serde_bytes::ByteBuf>,
    },
}

/// The answer to a sync request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SyncReply {
    /// Same digest: nothing to exchange but contact records.
    InSync {
        /// Signed contact records of current members.
        #[serde(deserialize_with = "bounded::<_, _, MAX_CONTACTS_PER_SYNC>")]
        contacts: Vec<serde_bytes::ByteBuf>,
        /// Typed records the asker lacks, a page of them (absent from
        /// machines that predate the directory).
        #[serde(default, deserialize_with = "bounded::<_, _, MAX_RECORDS_PER_SYNC>")]
        records: Vec<TypedRecord>,
        /// Some records were left for the next sync.
        #[serde(default)]
        more_records: bool,
    },
    /// Different digest: every hash the responder holds.
    Have {
        /// Block hashes.
        #[serde(deserialize_with = "bounded::<_, _, MAX_TEAM_BLOCKS>")]
        hashes: Vec<serde_bytes::ByteBuf>,
        /// Signed contact records of current members.
        #[serde(deserialize_with = "bounded::<_, _, MAX_CONTACTS_PER_SYNC>")]
        contacts: Vec<serde_bytes::ByteBuf>,
        /// Typed records the asker lacks, a page of them (absent from
        /// machines that predate the directory).
        #[serde(default, deserialize_with = "bounded::<_, _, MAX_RECORDS_PER_SYNC>")]
        records: Vec<TypedRecord>,
        /// Some records were left for the next sync.
        #[serde(default)]
        more_records: bool,
    },
    /// The blocks asked for that the responder holds.
    Blocks {
        /// Blocks, Genesis first if included.
        #[serde(deserialize_with = "bounded::<_, _, MAX_BLOCKS_PER_SYNC>")]
        blocks: Vec<serde_bytes::ByteBuf>,
    },
    /// Refused, and why.
    Refused(String),
}

/// A directory record a sync's sender holds: which machine's, and its
/// sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordHave {
    /// The machine's PeerId bytes.
    #[serde(with = "serde_bytes")]
    pub peer: Vec<u8>,
    /// The sequence number held.
    pub seq: u64,
}

/// A signed record of some kind ([`DIRECTORY_RECORD`] today); a receiver
/// skips kinds it does not know, so later versions can add records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypedRecord {
    /// Its kind.
    pub kind: String,
    /// Its bytes (agentmesh-protocol's canonical CBOR).
    pub bytes: serde_bytes::ByteBuf,
}

/// A batch of sealed envelopes for one machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MailRequest {
    /// Envelopes (agentmesh-protocol wire form), at most
    /// `MAX_BATCH_ENVELOPES`, under 1 MiB in all. One more
    /// is kept while decoding, so an oversized batch is told apart.
    #[serde(deserialize_with = "bounded::<_, _, { MAX_BATCH_ENVELOPES + 1 }>")]
    pub envelopes: Vec<serde_bytes::ByteBuf>,
}

/// What the receiver did with each envelope of a batch, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MailReply {
    /// One outcome per envelope.
    #[serde(deserialize_with = "bounded::<_, _, { MAX_BATCH_ENVELOPES + 1 }>")]
    pub outcomes: Vec<MailOutcome>,
}

/// A request of the carry protocol: envelopes sealed and signed by their
/// sender for another machine, which the carrier can't open.
///
/// ```text
///  sender ── Hold{envelopes it sealed} ──> carrier      (its recipient is offline)
///         <── MailReply: Accepted = stored durably; Refused = full, or not acceptable
///  carrier ── Deliver{envelopes for you} ──> recipient  (it connected)
///          <── MailReply: the recipient's own outcome per envelope
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CarryRequest {
    /// "Hold these for their recipients": every envelope's `from` is the
    /// machine asking.
    Hold {
        /// Envelopes, at most [`MAX_BATCH_ENVELOPES`] (one more is kept
        /// while decoding), under 1 MiB in all.
        #[serde(deserialize_with = "bounded::<_, _, { MAX_BATCH_ENVELOPES + 1 }>")]
        envelopes: Vec<serde_bytes::ByteBuf>,
    },
    /// "These were held for you": every envelope's `to` is the machine
    /// asked; their `from` are other members.
    Deliver {
        /// Envelopes, bounded like [`CarryRequest::Hold`]'s.
        #[serde(deserialize_with = "bounded::<_, _, { MAX_BATCH_ENVELOPES + 1 }>")]
        envelopes: Vec<serde_bytes::ByteBuf>,
    },
}

impl CarryRequest {
    /// Its envelopes.
    pub fn envelopes(&self) -> &[serde_bytes::ByteBuf] {
        match self {
            CarryRequest::Hold { envelopes } | CarryRequest::Deliver { envelopes } => envelopes,
        }
    }
}

/// What the receiver did with one envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum MailOutcome {
    /// Stored: in the inbox, or held for the owner's approval.
    Accepted {
        /// Held for approval.
        held: bool,
        /// The receiving mailbox's daily wake budget is spent: the
        /// message is in its inbox, but nothing wakes a session for it
        /// (no run, no Stop-hook block) until this time, Unix ms (the
        /// receiving machine's next local midnight). Absent: not
        /// deferred.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deferred_until: Option<u64>,
    },
    /// Already received: acknowledged and dropped.
    Duplicate,
    /// Refused for good, with a code and a reason for the sender.
    Refused {
        /// A stable code: `not_a_member`, `revoked`, `expired`, `no_mailbox`…
        code: String,
        /// What the sender's person should know.
        reason: String,
    },
    /// The receiver is overloaded; try again later.
    Busy,
}

impl MailOutcome {
    /// A refusal as the sender sees it, its reason cut to what the wire
    /// carries ([`MAX_REASON_BYTES`]).
    pub fn refused(code: &str, reason: impl Into<String>) -> MailOutcome {
        let mut reason: String = reason.into();
        if reason.len() > MAX_REASON_BYTES {
            let mut cut = MAX_REASON_BYTES;
            while !reason.is_char_boundary(cut) {
                cut -= 1;
            }
            reason.truncate(cut);
        }
        MailOutcome::Refused {
            code: code.into(),
            reason,
        }
    }

    /// Stored, not deferred.
    pub fn accepted(held: bool) -> MailOutcome {
        MailOutcome::Accepted {
            held,
            deferred_until: None,
        }
    }
}

/// Decodes a list keeping at most `N` items; the rest are skipped without
/// being stored. Callers that must tell "too many" from "exactly N" use
/// one more than their limit.
pub fn bounded<'de, D, T, const N: usize>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Visit<T, const N: usize>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>, const N: usize> serde::de::Visitor<'de> for Visit<T, N> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a list")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(N).min(64));
            while out.len() < N {
                match seq.next_element()? {
                    Some(item) => out.push(item),
                    None => return Ok(out),
                }
            }
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(out)
        }
    }
    d.deserialize_seq(Visit::<T, N>(std::marker::PhantomData))
}
