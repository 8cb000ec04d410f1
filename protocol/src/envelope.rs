//! Envelopes: one message from one machine to another.
//!
//! ```text
//! envelope = [ header: bstr, enc: bstr .size 32, header_tag: bstr .size 16,
//!              ciphertext: bstr, signature: bstr .size 64 ]
//! ```
//!
//! The header travels in the clear (to the two machines: libp2p's Noise
//! channel hides it from everyone else) so the receiver can route and judge
//! the envelope before opening it. The body is sealed with HPKE base mode to
//! the recipient's X25519 key, with the header bytes as AAD. The sender signs
//! the header, `enc` and the ciphertext with its ed25519 key. `header_tag`
//! is an HPKE export over the header; it never decides whether an envelope
//! is accepted, it only lets the receiver say *what* was altered when a
//! check fails (see [`OpenError`]). docs/protocol.md is the byte-exact spec.

mod body;
pub use body::{Attachment, Body, COUNTS_MEDIA_TYPE, Counts, SkipReason, Who, WhoKind};
pub(crate) use body::{report_body, report_data};

use std::fmt;

use ciborium::Value;
use hpke::{Deserializable, OpModeR, OpModeS, Serializable};
use libp2p_identity::PeerId;
use rand_core::CryptoRng;

use crate::cbor::{
    self, DecodeError, Fields, MAX_BODY_BYTES, MAX_ENVELOPE_BYTES, MAX_HEADER_BYTES, Wire,
};
use crate::identity::{self, Identity, Kem, X25519Public, peer_field, peer_value};
use crate::names::{Name, name_field};
use crate::team::TeamId;
use crate::time::{MAX_CLOCK_SKEW, MAX_ENVELOPE_LIFETIME, Timestamp};

/// The one cipher suite of version 1: DHKEM(X25519, HKDF-SHA256),
/// HKDF-SHA256, ChaCha20-Poly1305 for the seal, ed25519 for the signature.
pub const SUITE_V1: u64 = 1;

/// The HPKE `info` string of every envelope seal.
pub const HPKE_INFO: &[u8] = b"agentmesh/v1 envelope";

/// The domain-separation tag that opens the message an envelope signature
/// covers, so an envelope signature can never be mistaken for any other
/// signature the same key makes.
pub const SIGNATURE_DST: &[u8] = b"agentmesh/v1 envelope signature";

/// The HPKE exporter context prefix of the header tag.
pub const HEADER_TAG_CONTEXT: &[u8] = b"agentmesh/v1 header tag";

type Aead = hpke::aead::ChaCha20Poly1305;
type Kdf = hpke::kdf::HkdfSha256;

/// The longest `who.name` in bytes.
pub const MAX_WHO_NAME: usize = 64;
/// The longest `who.session_id` in bytes.
pub const MAX_SESSION_ID: usize = 128;
/// The longest `who.task` in bytes.
pub const MAX_TASK: usize = 256;
/// The most attachments one body may carry: "a small list"; bulk data does
/// not belong in envelopes, which must fit a relay circuit.
pub const MAX_ATTACHMENTS: usize = 8;
/// The longest attachment name or media type, in bytes.
pub const MAX_ATTACHMENT_LABEL: usize = 128;

/// A message id: 16 random bytes, unique per sender.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub [u8; 16]);

impl MessageId {
    /// A fresh random id.
    pub fn random(rng: &mut impl CryptoRng) -> Self {
        let mut id = [0u8; 16];
        rng.fill_bytes(&mut id);
        MessageId(id)
    }

    /// Parses the 32-character lowercase hex form.
    pub fn parse(s: &str) -> Option<Self> {
        let bytes = data_encoding::HEXLOWER_PERMISSIVE
            .decode(s.as_bytes())
            .ok()?;
        Some(MessageId(bytes.try_into().ok()?))
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&data_encoding::HEXLOWER.encode(&self.0))
    }
}

impl fmt::Debug for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MessageId({self})")
    }
}

/// What a message asks of its recipient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Information; no answer expected.
    Tell,
    /// A question; the recipient is expected to reply.
    Ask,
    /// An answer to an `Ask` (`in_reply_to` names it).
    Reply,
    /// One copy of a message sent to many mailboxes.
    Broadcast,
    /// What a machine did with a broadcast it judged: how many of its
    /// mailboxes it delivered to and how many it dropped for
    /// (`in_reply_to` names the broadcast; the body is [`Counts`]).
    Counts,
    /// What a recipient machine did with a message: delivered, held,
    /// approved, rejected, deferred, read or refused (`in_reply_to`
    /// names the message; the body is a [`crate::receipt::Receipt`]).
    Receipt,
}

impl Kind {
    fn code(self) -> u64 {
        match self {
            Kind::Tell => 0,
            Kind::Ask => 1,
            Kind::Reply => 2,
            Kind::Broadcast => 3,
            Kind::Counts => 4,
            Kind::Receipt => 5,
        }
    }

    fn from_code(code: u64) -> Option<Self> {
        Some(match code {
            0 => Kind::Tell,
            1 => Kind::Ask,
            2 => Kind::Reply,
            3 => Kind::Broadcast,
            4 => Kind::Counts,
            5 => Kind::Receipt,
            _ => return None,
        })
    }

    /// The name used in JSON and on screen: `tell`, `ask`, `reply`,
    /// `broadcast`, `counts`, `receipt`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tell => "tell",
            Kind::Ask => "ask",
            Kind::Reply => "reply",
            Kind::Broadcast => "broadcast",
            Kind::Counts => "counts",
            Kind::Receipt => "receipt",
        }
    }
}

/// The envelope header: everything the receiver judges before opening.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The message id, unique per sender.
    pub id: MessageId,
    /// The team both machines belong to.
    pub team: TeamId,
    /// The sending machine.
    pub from: PeerId,
    /// The receiving machine.
    pub to: PeerId,
    /// What the message asks of its recipient.
    pub kind: Kind,
    /// The message this one answers, if any.
    pub in_reply_to: Option<MessageId>,
    /// The conversation: the id of the message that started it.
    pub thread: MessageId,
    /// How many peer messages caused this one (0: a person or a session acting
    /// on its own).
    pub hop: u8,
    /// Whether the sending session had read untrusted text.
    pub taint: bool,
    /// When the sender sealed it.
    pub sent_at: Timestamp,
    /// When it stops being deliverable.
    pub expires_at: Timestamp,
}

impl Header {
    /// Checks the time rules that depend on no clock: the lifetime is
    /// positive and no longer than [`MAX_ENVELOPE_LIFETIME`].
    fn check_lifetime(&self) -> Result<(), String> {
        if self.expires_at <= self.sent_at {
            return Err("expires_at is not after sent_at".into());
        }
        let lifetime = self.expires_at.since(self.sent_at);
        if lifetime > MAX_ENVELOPE_LIFETIME {
            return Err(format!(
                "claims a lifetime of {}, over the maximum of {}",
                crate::time::exact_duration(lifetime),
                crate::time::exact_duration(MAX_ENVELOPE_LIFETIME)
            ));
        }
        Ok(())
    }
}

impl Wire for Header {
    const WHAT: &'static str = "envelope header";
    const MAX_BYTES: usize = MAX_HEADER_BYTES;

    fn to_value(&self) -> Value {
        Value::Array(vec![
            cbor::uint(crate::PROTOCOL_VERSION),
            cbor::uint(SUITE_V1),
            Value::Bytes(self.id.0.to_vec()),
            Value::Bytes(self.team.0.to_vec()),
            peer_value(&self.from),
            peer_value(&self.to),
            cbor::uint(self.kind.code()),
            cbor::opt_bytes(self.in_reply_to.as_ref().map(|m| &m.0[..])),
            Value::Bytes(self.thread.0.to_vec()),
            cbor::uint(self.hop.into()),
            Value::Bool(self.taint),
            cbor::uint(self.sent_at.as_unix_millis()),
            cbor::uint(self.expires_at.as_unix_millis()),
        ])
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::versioned(Self::WHAT, value, 13)?;
        let suite = f.uint("suite", u64::MAX)?;
        if suite != SUITE_V1 {
            return Err(f.error(
                "suite",
                format!("{suite} is not supported; this build speaks suite {SUITE_V1}"),
            ));
        }
        let id = MessageId(f.array("id")?);
        let team = TeamId(f.array("team")?);
        let from = peer_field(&mut f, "from")?;
        let to = peer_field(&mut f, "to")?;
        let kind = f.uint("kind", 5)?;
        let kind = Kind::from_code(kind).ok_or_else(|| f.error("kind", "is unknown"))?;
        let in_reply_to = f.opt_array("in_reply_to")?.map(MessageId);
        let thread = MessageId(f.array("thread")?);
        let hop = f.uint("hop", u8::MAX.into())? as u8;
        let taint = f.bool("taint")?;
        let sent_at = Timestamp::from_unix_millis(f.uint("sent_at", u64::MAX)?);
        let expires_at = Timestamp::from_unix_millis(f.uint("expires_at", u64::MAX)?);
        Ok(Header {
            id,
            team,
            from,
            to,
            kind,
            in_reply_to,
            thread,
            hop,
            taint,
            sent_at,
            expires_at,
        })
    }
}

/// A sealed, signed envelope, as it travels.
#[derive(Clone, PartialEq, Eq)]
pub struct Envelope {
    /// The decoded header.
    pub header: Header,
    header_bytes: Vec<u8>,
    enc: [u8; 32],
    header_tag: [u8; 16],
    ciphertext: Vec<u8>,
    signature: [u8; 64],
}

impl fmt::Debug for Envelope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Envelope")
            .field("header", &self.header)
            .field("ciphertext_len", &self.ciphertext.len())
            .finish_non_exhaustive()
    }
}

/// An opened envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// The header, as signed.
    pub header: Header,
    /// The body, as sealed.
    pub body: Body,
}

/// Why an envelope could not be sealed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// The body is larger than an envelope may carry.
    #[error(
        "the message is {len} bytes once encoded, over the limit of {limit} bytes; send less text or smaller attachments"
    )]
    TooLarge {
        /// The encoded body's length.
        len: usize,
        /// [`MAX_BODY_BYTES`].
        limit: usize,
    },
    /// The header's `from` is not the sealing identity.
    #[error("the header's sender is {from}, but the sealing key belongs to {key}")]
    SenderMismatch {
        /// The header's `from`.
        from: PeerId,
        /// The sealing identity's PeerId.
        key: PeerId,
    },
    /// The header breaks a time rule.
    #[error("the header is not valid: {0}")]
    InvalidHeader(String),
    /// Too many attachments.
    #[error("the message has {0} attachments; at most {MAX_ATTACHMENTS} are allowed")]
    TooManyAttachments(usize),
    /// The recipient's X25519 key is not usable (a low-order point).
    #[error("the recipient's X25519 key is not usable")]
    BadRecipientKey,
}

/// Why an envelope was refused. The receiver checks, in this order: size;
/// structure; version and suite; header fields; recipient PeerId; lifetime;
/// clock; then signature and seal together, where the pair of outcomes
/// decides (see [`Envelope::open`] and docs/protocol.md). The first check
/// that fails decides the error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The envelope is larger than [`MAX_ENVELOPE_BYTES`]; nothing was parsed.
    #[error("the envelope is {len} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// The input's length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The envelope or its header is not well-formed.
    #[error("the envelope is malformed: {0}")]
    Malformed(DecodeError),
    /// The header's version is not one this build speaks.
    #[error(
        "the envelope has version {found}; this build speaks version {supported}; upgrade agentmesh on the older machine"
    )]
    UnsupportedVersion {
        /// The header's version.
        found: u64,
        /// [`crate::PROTOCOL_VERSION`].
        supported: u64,
    },
    /// The header's cipher suite is not one this build speaks.
    #[error("the envelope uses cipher suite {found}; this build speaks suite {supported}")]
    UnsupportedSuite {
        /// The header's suite.
        found: u64,
        /// [`SUITE_V1`].
        supported: u64,
    },
    /// The envelope is for another machine: the header names another
    /// recipient, or the body was sealed to an X25519 key this machine does
    /// not hold.
    #[error("the envelope is addressed to another machine")]
    WrongRecipient,
    /// The header claims a lifetime that is not positive or over the maximum.
    #[error("the envelope {0}")]
    BadLifetime(String),
    /// `sent_at` is further in the future than the allowed clock skew.
    #[error(
        "the envelope was sent at {sent_at}, {} ahead of this machine's clock ({now}), more than the allowed skew; check both machines' clocks", crate::time::human_duration(sent_at.since(*now))
    )]
    NotYetValid {
        /// The header's `sent_at`.
        sent_at: Timestamp,
        /// The receiver's clock.
        now: Timestamp,
    },
    /// The envelope expired (more than the allowed skew ago).
    #[error("the envelope expired {} (at {expires_at})", crate::time::relative(*expires_at, *now))]
    Expired {
        /// The header's `expires_at`.
        expires_at: Timestamp,
        /// The receiver's clock.
        now: Timestamp,
    },
    /// The header and ciphertext are as sealed, but the signature does not
    /// verify for the sender the header names.
    #[error("the envelope's signature does not verify for its sender")]
    BadSignature,
    /// The header (or the encapsulated key) was altered after sealing.
    #[error("the envelope's header was altered after it was sealed")]
    TamperedHeader,
    /// The ciphertext was altered after sealing.
    #[error("the envelope's ciphertext was altered after it was sealed")]
    TamperedCiphertext,
    /// The envelope opened, but the body inside is malformed: the signing
    /// sender sealed something this build cannot read.
    #[error("the envelope's body is malformed: {0}")]
    MalformedBody(DecodeError),
}

impl OpenError {
    /// The variant's name, as test vectors spell it in `expect`.
    pub fn name(&self) -> &'static str {
        match self {
            OpenError::TooLarge { .. } => "TooLarge",
            OpenError::Malformed(_) => "Malformed",
            OpenError::UnsupportedVersion { .. } => "UnsupportedVersion",
            OpenError::UnsupportedSuite { .. } => "UnsupportedSuite",
            OpenError::WrongRecipient => "WrongRecipient",
            OpenError::BadLifetime(_) => "BadLifetime",
            OpenError::NotYetValid { .. } => "NotYetValid",
            OpenError::Expired { .. } => "Expired",
            OpenError::BadSignature => "BadSignature",
            OpenError::TamperedHeader => "TamperedHeader",
            OpenError::TamperedCiphertext => "TamperedCiphertext",
            OpenError::MalformedBody(_) => "MalformedBody",
        }
    }
}

/// The exact bytes an envelope signature covers:
/// `SIGNATURE_DST || u32_be(len(header)) || header || enc || ciphertext`.
pub fn signed_message(header: &[u8], enc: &[u8; 32], ciphertext: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(SIGNATURE_DST.len() + 4 + header.len() + 32 + ciphertext.len());
    m.extend_from_slice(SIGNATURE_DST);
    m.extend_from_slice(&(header.len() as u32).to_be_bytes());
    m.extend_from_slice(header);
    m.extend_from_slice(enc);
    m.extend_from_slice(ciphertext);
    m
}

fn header_tag_context(header: &[u8]) -> Vec<u8> {
    [HEADER_TAG_CONTEXT, header].concat()
}

/// Seals `body` to `recipient` (the X25519 key of the machine `header.to`)
/// and signs the result with `sender`, whose PeerId must be `header.from`.
pub fn seal(
    sender: &Identity,
    recipient: &X25519Public,
    header: &Header,
    body: &Body,
    rng: &mut impl CryptoRng,
) -> Result<Envelope, SealError> {
    if header.from != sender.peer_id() {
        return Err(SealError::SenderMismatch {
            from: header.from,
            key: sender.peer_id(),
        });
    }
    header.check_lifetime().map_err(SealError::InvalidHeader)?;
    if body.attachments.len() > MAX_ATTACHMENTS {
        return Err(SealError::TooManyAttachments(body.attachments.len()));
    }
    let body_bytes = body.to_bytes();
    if body_bytes.len() > MAX_BODY_BYTES {
        return Err(SealError::TooLarge {
            len: body_bytes.len(),
            limit: MAX_BODY_BYTES,
        });
    }
    let header_bytes = header.to_bytes();
    let pk = recipient
        .to_hpke()
        .map_err(|_| SealError::BadRecipientKey)?;
    let (enc, mut ctx) =
        hpke::setup_sender_with_rng::<Aead, Kdf, Kem>(&OpModeS::Base, &pk, HPKE_INFO, rng)
            .map_err(|_| SealError::BadRecipientKey)?;
    let mut header_tag = [0u8; 16];
    ctx.export(&header_tag_context(&header_bytes), &mut header_tag)
        .expect("a 16-byte export is within HKDF's limit");
    let ciphertext = ctx
        .seal(&body_bytes, &header_bytes)
        .expect("one seal per context cannot exhaust the sequence number");
    let enc: [u8; 32] = enc.to_bytes().into();
    let signature = sender.sign(&signed_message(&header_bytes, &enc, &ciphertext));
    Ok(Envelope {
        header: header.clone(),
        header_bytes,
        enc,
        header_tag,
        ciphertext,
        signature,
    })
}

/// Decodes and opens an envelope addressed to `me`, judging its times by `now`.
pub fn open(bytes: &[u8], me: &Identity, now: Timestamp) -> Result<Opened, OpenError> {
    Envelope::from_wire(bytes)?.open(me, now)
}

impl Envelope {
    /// The canonical wire encoding.
    pub fn to_wire(&self) -> Vec<u8> {
        cbor::encode(&Value::Array(vec![
            Value::Bytes(self.header_bytes.clone()),
            Value::Bytes(self.enc.to_vec()),
            Value::Bytes(self.header_tag.to_vec()),
            Value::Bytes(self.ciphertext.clone()),
            Value::Bytes(self.signature.to_vec()),
        ]))
    }

    /// Decodes the structure of an envelope and its header, without
    /// checking any signature or seal: the receiver can route and
    /// deduplicate by `header` before it opens the envelope.
    pub fn from_wire(bytes: &[u8]) -> Result<Self, OpenError> {
        const WHAT: &str = "envelope";
        if bytes.len() > MAX_ENVELOPE_BYTES {
            return Err(OpenError::TooLarge {
                len: bytes.len(),
                limit: MAX_ENVELOPE_BYTES,
            });
        }
        let value = cbor::decode(WHAT, bytes, MAX_ENVELOPE_BYTES).map_err(OpenError::Malformed)?;
        let mut f = Fields::new(WHAT, value, 5).map_err(OpenError::Malformed)?;
        let header_bytes = f
            .bytes("header", MAX_HEADER_BYTES)
            .map_err(OpenError::Malformed)?;
        let enc = f.array::<32>("enc").map_err(OpenError::Malformed)?;
        let header_tag = f.array::<16>("header_tag").map_err(OpenError::Malformed)?;
        let ciphertext = f
            .bytes("ciphertext", MAX_ENVELOPE_BYTES)
            .map_err(OpenError::Malformed)?;
        let signature = f.array::<64>("signature").map_err(OpenError::Malformed)?;
        let header = Header::from_bytes(&header_bytes).map_err(|e| match e {
            DecodeError::UnsupportedVersion {
                found, supported, ..
            } => OpenError::UnsupportedVersion { found, supported },
            DecodeError::Field { field: "suite", .. } => match suite_of(&header_bytes) {
                Some(found) => OpenError::UnsupportedSuite {
                    found,
                    supported: SUITE_V1,
                },
                None => OpenError::Malformed(e),
            },
            e => OpenError::Malformed(e),
        })?;
        Ok(Envelope {
            header,
            header_bytes,
            enc,
            header_tag,
            ciphertext,
            signature,
        })
    }

    /// Builds an envelope from its parts, as test vectors list them.
    pub fn from_parts(
        header_bytes: &[u8],
        enc: [u8; 32],
        header_tag: [u8; 16],
        ciphertext: Vec<u8>,
        signature: [u8; 64],
    ) -> Result<Self, OpenError> {
        let wire = cbor::encode(&Value::Array(vec![
            Value::Bytes(header_bytes.to_vec()),
            Value::Bytes(enc.to_vec()),
            Value::Bytes(header_tag.to_vec()),
            Value::Bytes(ciphertext),
            Value::Bytes(signature.to_vec()),
        ]));
        Envelope::from_wire(&wire)
    }

    /// The header's exact bytes (the AAD of the seal).
    pub fn header_bytes(&self) -> &[u8] {
        &self.header_bytes
    }

    /// The HPKE encapsulated key.
    pub fn enc(&self) -> &[u8; 32] {
        &self.enc
    }

    /// The header tag.
    pub fn header_tag(&self) -> &[u8; 16] {
        &self.header_tag
    }

    /// The sealed body.
    pub fn ciphertext(&self) -> &[u8] {
        &self.ciphertext
    }

    /// The sender's signature.
    pub fn signature(&self) -> &[u8; 64] {
        &self.signature
    }

    /// What a machine that can't open the envelope (a carrier) can check:
    /// its lifetime is allowed, and its signature verifies for the sender
    /// the header names, so a byte changed anywhere is caught. Opening
    /// checks both again.
    pub fn check_signed(&self) -> Result<(), OpenError> {
        self.header
            .check_lifetime()
            .map_err(OpenError::BadLifetime)?;
        let signed = signed_message(&self.header_bytes, &self.enc, &self.ciphertext);
        if identity::verify(&self.header.from, &signed, &self.signature) {
            Ok(())
        } else {
            Err(OpenError::BadSignature)
        }
    }

    /// Checks and opens the envelope for `me` at time `now`.
    pub fn open(&self, me: &Identity, now: Timestamp) -> Result<Opened, OpenError> {
        self.open_with(&me.peer_id(), me.x25519_secret(), now)
    }

    /// Checks and opens the envelope for the machine `peer_id`, whose X25519
    /// secret is `x25519_secret`: what [`Envelope::open`] does, for a caller
    /// that holds only the receiving half of an identity (test vectors).
    pub fn open_as(
        &self,
        peer_id: &PeerId,
        x25519_secret: &[u8; 32],
        now: Timestamp,
    ) -> Result<Opened, OpenError> {
        let sk = <Kem as hpke::Kem>::PrivateKey::from_bytes(x25519_secret)
            .expect("any 32 bytes are an X25519 secret once clamped");
        self.open_with(peer_id, &sk, now)
    }

    fn open_with(
        &self,
        peer_id: &PeerId,
        x25519_secret: &<Kem as hpke::Kem>::PrivateKey,
        now: Timestamp,
    ) -> Result<Opened, OpenError> {
        let h = &self.header;
        if h.to != *peer_id {
            return Err(OpenError::WrongRecipient);
        }
        h.check_lifetime().map_err(OpenError::BadLifetime)?;
        if h.sent_at > now.saturating_add(MAX_CLOCK_SKEW) {
            return Err(OpenError::NotYetValid {
                sent_at: h.sent_at,
                now,
            });
        }
        if now > h.expires_at.saturating_add(MAX_CLOCK_SKEW) {
            return Err(OpenError::Expired {
                expires_at: h.expires_at,
                now,
            });
        }
        let signed = signed_message(&self.header_bytes, &self.enc, &self.ciphertext);
        let signature_ok = identity::verify(&h.from, &signed, &self.signature);
        let mut ctx = <Kem as hpke::Kem>::EncappedKey::from_bytes(&self.enc)
            .ok()
            .and_then(|enc| {
                hpke::setup_receiver::<Aead, Kdf, Kem>(
                    &OpModeR::Base,
                    x25519_secret,
                    &enc,
                    HPKE_INFO,
                )
                .ok()
            });
        let plaintext = ctx
            .as_mut()
            .and_then(|ctx| ctx.open(&self.ciphertext, &self.header_bytes).ok());
        match (signature_ok, plaintext) {
            (true, Some(plaintext)) => {
                let body = Body::from_bytes(&plaintext).map_err(OpenError::MalformedBody)?;
                Ok(Opened {
                    header: h.clone(),
                    body,
                })
            }
            // Signed by the sender but not openable here: sealed to a key
            // this machine does not hold.
            (true, None) => Err(OpenError::WrongRecipient),
            // Header and ciphertext are exactly as sealed; only the
            // signature is wrong.
            (false, Some(_)) => Err(OpenError::BadSignature),
            // Something the seal covers changed. The header tag, keyed by
            // the seal's exporter secret, says whether the header survived.
            (false, None) => {
                let header_intact = ctx.is_some_and(|ctx| {
                    let mut tag = [0u8; 16];
                    ctx.export(&header_tag_context(&self.header_bytes), &mut tag)
                        .is_ok()
                        && tag == self.header_tag
                });
                Err(if header_intact {
                    OpenError::TamperedCiphertext
                } else {
                    OpenError::TamperedHeader
                })
            }
        }
    }
}

/// The suite number in header bytes whose suite was refused, if the suite
/// field is an unsigned integer at all.
fn suite_of(header_bytes: &[u8]) -> Option<u64> {
    match cbor::decode("envelope header", header_bytes, MAX_HEADER_BYTES) {
        Ok(Value::Array(items)) => match items.get(1) {
            Some(Value::Integer(i)) => u64::try_from(*i).ok(),
            _ => None,
        },
        _ => None,
    }
}
