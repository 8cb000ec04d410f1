//! Contact records: how to reach a member, signed by that member.
//!
//! Members exchange their latest record during anti-entropy sync, so a
//! machine behind NAT can be reached through the relays it lists. A record
//! with a higher `seq` replaces a lower one; the signature means no other
//! machine can redirect a member's mail.
//!
//! ```text
//! contact = [ payload: bstr, signature: bstr .size 64 ]
//! payload = CBOR [version, peer, seq, [multiaddr...], [relay multiaddr...], at]
//! ```

use ciborium::Value;
use libp2p_identity::PeerId;
use multiaddr::Multiaddr;

use crate::cbor::{self, DecodeError, Fields, Wire};
use crate::identity::{self, Identity, peer_field, peer_value};
use crate::ticket::multiaddrs;
use crate::time::Timestamp;

/// The domain-separation tag that opens the message a contact signature covers.
pub const CONTACT_SIGNATURE_DST: &[u8] = b"agentmesh/v1 contact signature";

/// The most direct addresses one record lists (interfaces times transports).
pub const MAX_CONTACT_ADDRS: usize = 16;

/// The most relays one record lists: a machine keeps reservations on a few.
pub const MAX_CONTACT_RELAYS: usize = 8;

/// The longest encoded contact record.
pub const MAX_CONTACT_BYTES: usize = 8 * 1024;

/// How to reach one machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContactRecord {
    /// The machine.
    pub peer: PeerId,
    /// Grows with every new record the machine publishes.
    pub seq: u64,
    /// Addresses it listens on or was observed at.
    pub addrs: Vec<Multiaddr>,
    /// Relays it holds reservations on, each ending in `/p2p/RELAY`.
    pub relays: Vec<Multiaddr>,
    /// When it was made.
    pub at: Timestamp,
}

impl ContactRecord {
    fn to_value(&self) -> Value {
        let list = |addrs: &[Multiaddr]| {
            Value::Array(addrs.iter().map(|a| Value::Bytes(a.to_vec())).collect())
        };
        Value::Array(vec![
            cbor::uint(crate::PROTOCOL_VERSION),
            peer_value(&self.peer),
            cbor::uint(self.seq),
            list(&self.addrs),
            list(&self.relays),
            cbor::uint(self.at.as_unix_millis()),
        ])
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::versioned("contact record", value, 6)?;
        Ok(ContactRecord {
            peer: peer_field(&mut f, "peer")?,
            seq: f.uint("seq", u64::MAX)?,
            addrs: multiaddrs(&mut f, "addrs", MAX_CONTACT_ADDRS)?,
            relays: multiaddrs(&mut f, "relays", MAX_CONTACT_RELAYS)?,
            at: Timestamp::from_unix_millis(f.uint("at", u64::MAX)?),
        })
    }
}

/// Why bytes are not a signed contact record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContactError {
    /// The bytes do not decode.
    #[error("the contact record is malformed: {0}")]
    Malformed(#[from] DecodeError),
    /// The signature is not the named machine's.
    #[error("the contact record's signature does not verify for {0}")]
    BadSignature(PeerId),
    /// [`SignedContact::sign`] was given another machine's record.
    #[error("a machine can only sign its own contact record")]
    NotOwnRecord,
}

/// A contact record with its owner's signature. Only [`SignedContact::sign`]
/// and [`SignedContact::from_bytes`] make one, so the signature is verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedContact {
    record: ContactRecord,
    bytes: Vec<u8>,
}

fn signed_message(payload: &[u8]) -> Vec<u8> {
    [CONTACT_SIGNATURE_DST, payload].concat()
}

impl SignedContact {
    /// Signs a machine's own record.
    pub fn sign(record: ContactRecord, me: &Identity) -> Result<Self, ContactError> {
        if record.peer != me.peer_id() {
            return Err(ContactError::NotOwnRecord);
        }
        let payload = cbor::encode(&record.to_value());
        let signature = me.sign(&signed_message(&payload));
        let bytes = cbor::encode(&Value::Array(vec![
            Value::Bytes(payload),
            Value::Bytes(signature.to_vec()),
        ]));
        Ok(SignedContact { record, bytes })
    }

    /// Decodes a record and verifies its signature.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ContactError> {
        Self::decode(bytes, true)
    }

    /// Decodes a record without verifying its signature: for bytes this
    /// machine verified before it stored them, and to read which machine
    /// and sequence a received record claims before deciding whether it is
    /// worth verifying (a member's sync carries every record it holds,
    /// most of them the ones already held). What it returns from bytes
    /// not verified before is a claim, never to be kept or acted on.
    pub fn from_bytes_unverified(bytes: &[u8]) -> Result<Self, ContactError> {
        Self::decode(bytes, false)
    }

    fn decode(bytes: &[u8], verify: bool) -> Result<Self, ContactError> {
        const WHAT: &str = "contact record";
        let mut f = Fields::new(WHAT, cbor::decode(WHAT, bytes, MAX_CONTACT_BYTES)?, 2)?;
        let payload = f.bytes("payload", MAX_CONTACT_BYTES)?;
        let signature = f.array::<64>("signature")?;
        let record = ContactRecord::from_value(cbor::decode(WHAT, &payload, MAX_CONTACT_BYTES)?)?;
        if verify && !identity::verify(&record.peer, &signed_message(&payload), &signature) {
            return Err(ContactError::BadSignature(record.peer));
        }
        Ok(SignedContact {
            record,
            bytes: bytes.to_vec(),
        })
    }

    /// The record.
    pub fn record(&self) -> &ContactRecord {
        &self.record
    }

    /// The signed bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether this record should replace `other`: same machine, and a
    /// higher seq, or the same seq made later (two copies of one machine
    /// numbering from one backup: the newer wins, so each copy can see the
    /// other's).
    pub fn supersedes(&self, other: &SignedContact) -> bool {
        self.record.peer == other.record.peer
            && (self.record.seq, self.record.at) > (other.record.seq, other.record.at)
    }
}

// `Wire` is implemented for the unsigned record so property tests and fuzz
// targets can round-trip it on its own.
impl Wire for ContactRecord {
    const WHAT: &'static str = "contact record";
    const MAX_BYTES: usize = MAX_CONTACT_BYTES;

    fn to_value(&self) -> Value {
        ContactRecord::to_value(self)
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        ContactRecord::from_value(value)
    }
}
