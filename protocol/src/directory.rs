//! Directory records: a machine's mailboxes, with each one's profile,
//! goal and status, signed by that machine.
//!
//! Members exchange them in the same anti-entropy sync that carries
//! contact records, so every member's `list_team` shows the whole team. A
//! record with a higher `seq` replaces a lower one; the signature means no
//! other machine can say what a member's sessions work on.
//!
//! ```text
//! directory = [ payload: bstr, signature: bstr .size 64 ]
//! payload   = CBOR [version, peer, seq, at, always_on: bool, [entry...], ...later fields]
//! entry     = [mailbox: tstr / null, profile: tstr, goal: tstr,
//!              status: tstr, last_active: uint / null, ...later fields]
//! ```
//!
//! Every bound is checked before the item it bounds is decoded: the whole
//! record ([`MAX_DIRECTORY_BYTES`]) before any CBOR is parsed, the number
//! of entries ([`MAX_DIRECTORY_MAILBOXES`]) before any entry is read, each
//! text before it is kept. Items after the ones this version knows are
//! skipped, so a later version can add fields (a carrier's details, say)
//! without older members refusing its records.

use ciborium::Value;
use libp2p_identity::PeerId;

use crate::cbor::{self, DecodeError, Fields, Wire};
use crate::identity::{self, Identity, peer_field, peer_value};
use crate::names::Name;
use crate::time::Timestamp;

/// The domain-separation tag that opens the message a directory
/// signature covers.
pub const DIRECTORY_SIGNATURE_DST: &[u8] = b"agentmesh/v1 directory signature";

/// The most mailboxes one record lists.
pub const MAX_DIRECTORY_MAILBOXES: usize = 64;

/// The longest encoded directory record, signature included.
pub const MAX_DIRECTORY_BYTES: usize = 48 * 1024;

/// The longest profile, bytes of UTF-8.
pub const MAX_PROFILE_BYTES: usize = 1024;

/// The longest goal, bytes of UTF-8.
pub const MAX_GOAL_BYTES: usize = 256;

/// What a mailbox's session is doing, as its machine says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// A session is attached and was active in the last two minutes.
    Working,
    /// A session is attached and quiet.
    Idle,
    /// Nothing is attached.
    Offline,
}

impl Status {
    /// The word on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::Idle => "idle",
            Status::Offline => "offline",
        }
    }

    /// The status a word means; a word this version does not know is
    /// read as [`Status::Offline`] (a later version's finer status never
    /// makes its whole record unreadable).
    pub fn from_word(word: &str) -> Status {
        match word {
            "working" => Status::Working,
            "idle" => Status::Idle,
            _ => Status::Offline,
        }
    }
}

/// One mailbox as its machine publishes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryEntry {
    /// The mailbox; `None` for the machine owner's (`@MACHINE`).
    pub mailbox: Option<Name>,
    /// What its session knows and works on, as written by it.
    pub profile: String,
    /// Its current objective.
    pub goal: String,
    /// What its session is doing.
    pub status: Status,
    /// When a session of it was last active, if ever.
    pub last_active: Option<Timestamp>,
}

/// The longest status word read.
const MAX_STATUS_WORD: usize = 32;

impl DirectoryEntry {
    fn to_value(&self) -> Value {
        Value::Array(vec![
            cbor::opt_text(self.mailbox.as_ref().map(Name::as_str)),
            Value::Text(self.profile.clone()),
            Value::Text(self.goal.clone()),
            Value::Text(self.status.as_str().to_owned()),
            self.last_active
                .map_or(Value::Null, |t| cbor::uint(t.as_unix_millis())),
        ])
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        const WHAT: &str = "directory entry";
        let value = match value {
            Value::Array(mut items) if items.len() >= 5 => {
                items.truncate(5);
                Value::Array(items)
            }
            other => other,
        };
        let mut f = Fields::new(WHAT, value, 5)?;
        let mailbox = match f.opt_text("mailbox", crate::names::MAX_NAME_LEN)? {
            None => None,
            Some(m) => Some(
                Name::parse("mailbox name", &m).map_err(|e| f.error("mailbox", e.to_string()))?,
            ),
        };
        Ok(DirectoryEntry {
            mailbox,
            profile: f.text("profile", MAX_PROFILE_BYTES)?,
            goal: f.text("goal", MAX_GOAL_BYTES)?,
            status: Status::from_word(&f.text("status", MAX_STATUS_WORD)?),
            last_active: match f.value("last_active")? {
                Value::Null => None,
                Value::Integer(i) => Some(Timestamp::from_unix_millis(
                    u64::try_from(i).map_err(|_| f.error("last_active", "must not be negative"))?,
                )),
                _ => return Err(f.error("last_active", "must be an integer or null")),
            },
        })
    }
}

/// A machine's mailboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryRecord {
    /// The machine.
    pub peer: PeerId,
    /// Grows with every new record the machine publishes.
    pub seq: u64,
    /// When it was made.
    pub at: Timestamp,
    /// Whether the machine is always on (a carrier: it may hold mail for
    /// members that are offline), as its person set `carry = true`.
    pub always_on: bool,
    /// Its mailboxes, at most [`MAX_DIRECTORY_MAILBOXES`].
    pub mailboxes: Vec<DirectoryEntry>,
}

impl DirectoryRecord {
    fn to_value(&self) -> Value {
        Value::Array(vec![
            cbor::uint(crate::PROTOCOL_VERSION),
            peer_value(&self.peer),
            cbor::uint(self.seq),
            cbor::uint(self.at.as_unix_millis()),
            Value::Bool(self.always_on),
            Value::Array(
                self.mailboxes
                    .iter()
                    .map(DirectoryEntry::to_value)
                    .collect(),
            ),
        ])
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::versioned_prefix("directory record", value, 6)?;
        let peer = peer_field(&mut f, "peer")?;
        let seq = f.uint("seq", u64::MAX)?;
        let at = Timestamp::from_unix_millis(f.uint("at", u64::MAX)?);
        let always_on = f.bool("always_on")?;
        let mailboxes = f
            .list("mailboxes", MAX_DIRECTORY_MAILBOXES)?
            .into_iter()
            .map(DirectoryEntry::from_value)
            .collect::<Result<Vec<_>, _>>()?;
        let mut seen = std::collections::HashSet::new();
        if !mailboxes.iter().all(|m| seen.insert(m.mailbox.clone())) {
            return Err(f.error("mailboxes", "names one mailbox twice"));
        }
        Ok(DirectoryRecord {
            peer,
            seq,
            at,
            always_on,
            mailboxes,
        })
    }
}

/// Why bytes are not a signed directory record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DirectoryError {
    /// The bytes do not decode, or break a bound.
    #[error("the directory record is malformed: {0}")]
    Malformed(#[from] DecodeError),
    /// The signature is not the named machine's.
    #[error("the directory record's signature does not verify for {0}")]
    BadSignature(PeerId),
    /// [`SignedDirectory::sign`] was given another machine's record.
    #[error("a machine can only sign its own directory record")]
    NotOwnRecord,
    /// [`SignedDirectory::sign`] was given a record over a bound.
    #[error("the directory record is over its bounds: {0}")]
    TooLarge(String),
}

/// A directory record with its owner's signature. Only
/// [`SignedDirectory::sign`] and [`SignedDirectory::from_bytes`] make
/// one, so the signature is verified and the bounds hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedDirectory {
    record: DirectoryRecord,
    bytes: Vec<u8>,
}

fn signed_message(payload: &[u8]) -> Vec<u8> {
    [DIRECTORY_SIGNATURE_DST, payload].concat()
}

impl SignedDirectory {
    /// Signs a machine's own record; refused if it is over a bound (a
    /// receiver would refuse it whole).
    pub fn sign(record: DirectoryRecord, me: &Identity) -> Result<Self, DirectoryError> {
        if record.peer != me.peer_id() {
            return Err(DirectoryError::NotOwnRecord);
        }
        if record.mailboxes.len() > MAX_DIRECTORY_MAILBOXES {
            return Err(DirectoryError::TooLarge(format!(
                "{} mailboxes, over the limit of {MAX_DIRECTORY_MAILBOXES}",
                record.mailboxes.len()
            )));
        }
        let bytes = Self::sign_unchecked(&record, me);
        if bytes.len() > MAX_DIRECTORY_BYTES {
            return Err(DirectoryError::TooLarge(format!(
                "{} bytes, over the limit of {MAX_DIRECTORY_BYTES}",
                bytes.len()
            )));
        }
        Ok(SignedDirectory { record, bytes })
    }

    /// The signed encoding of `record` whatever its size: for tests of
    /// what a receiver does with a record over the bounds.
    pub fn sign_unchecked(record: &DirectoryRecord, me: &Identity) -> Vec<u8> {
        let payload = cbor::encode(&record.to_value());
        let signature = me.sign(&signed_message(&payload));
        cbor::encode(&Value::Array(vec![
            Value::Bytes(payload),
            Value::Bytes(signature.to_vec()),
        ]))
    }

    /// Decodes a record, checking its bounds first, and verifies its
    /// signature.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DirectoryError> {
        Self::decode(bytes, true)
    }

    /// Decodes a record, checking its bounds, without verifying its
    /// signature: for bytes this machine verified before it stored them
    /// (every sync's digest and answer reads every record held). Never for
    /// bytes from the network.
    pub fn from_bytes_unverified(bytes: &[u8]) -> Result<Self, DirectoryError> {
        Self::decode(bytes, false)
    }

    fn decode(bytes: &[u8], verify: bool) -> Result<Self, DirectoryError> {
        const WHAT: &str = "directory record";
        let mut f = Fields::new(WHAT, cbor::decode(WHAT, bytes, MAX_DIRECTORY_BYTES)?, 2)?;
        let payload = f.bytes("payload", MAX_DIRECTORY_BYTES)?;
        let signature = f.array::<64>("signature")?;
        let record =
            DirectoryRecord::from_value(cbor::decode(WHAT, &payload, MAX_DIRECTORY_BYTES)?)?;
        if verify && !identity::verify(&record.peer, &signed_message(&payload), &signature) {
            return Err(DirectoryError::BadSignature(record.peer));
        }
        Ok(SignedDirectory {
            record,
            bytes: bytes.to_vec(),
        })
    }

    /// The record.
    pub fn record(&self) -> &DirectoryRecord {
        &self.record
    }

    /// The signed bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether this record should replace `other`: same machine, higher seq.
    pub fn supersedes(&self, other: &SignedDirectory) -> bool {
        self.record.peer == other.record.peer && self.record.seq > other.record.seq
    }
}

// `Wire` is implemented for the unsigned record so property tests and fuzz
// targets can round-trip it on its own.
impl Wire for DirectoryRecord {
    const WHAT: &'static str = "directory record";
    const MAX_BYTES: usize = MAX_DIRECTORY_BYTES;

    fn to_value(&self) -> Value {
        DirectoryRecord::to_value(self)
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        DirectoryRecord::from_value(value)
    }
}

/// The announcement gossip carries when a machine's record changes: only
/// which machine and which sequence, never the record (members fetch it
/// in a sync, from a member, a page at a time).
///
/// ```text
/// announce = [version, peer, seq]
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectoryAnnounce {
    /// The machine whose record changed.
    pub peer: PeerId,
    /// Its new sequence number.
    pub seq: u64,
}

impl Wire for DirectoryAnnounce {
    const WHAT: &'static str = "directory announcement";
    const MAX_BYTES: usize = 128;

    fn to_value(&self) -> Value {
        Value::Array(vec![
            cbor::uint(crate::PROTOCOL_VERSION),
            peer_value(&self.peer),
            cbor::uint(self.seq),
        ])
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::versioned_prefix(Self::WHAT, value, 3)?;
        Ok(DirectoryAnnounce {
            peer: peer_field(&mut f, "peer")?,
            seq: f.uint("seq", u64::MAX)?,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn entry(i: usize, profile: &str) -> DirectoryEntry {
        DirectoryEntry {
            mailbox: Some(Name::parse("mailbox name", &format!("m{i}")).unwrap()),
            profile: profile.into(),
            goal: "ship".into(),
            status: Status::Idle,
            last_active: Some(Timestamp::from_unix_millis(5)),
        }
    }

    fn record(me: &Identity, n: usize, profile: &str) -> DirectoryRecord {
        DirectoryRecord {
            peer: me.peer_id(),
            seq: 1,
            at: Timestamp::from_unix_millis(1),
            always_on: false,
            mailboxes: (0..n).map(|i| entry(i, profile)).collect(),
        }
    }

    #[test]
    fn signs_verifies_and_supersedes() {
        let me = Identity::generate(&mut rand::rng());
        let a = SignedDirectory::sign(record(&me, 3, "rust"), &me).unwrap();
        let back = SignedDirectory::from_bytes(a.bytes()).unwrap();
        assert_eq!(back, a);
        let mut r = record(&me, 1, "go");
        r.seq = 2;
        let b = SignedDirectory::sign(r, &me).unwrap();
        assert!(b.supersedes(&a) && !a.supersedes(&b));
    }

    #[test]
    fn a_record_over_the_bounds_is_refused_whole() {
        let me = Identity::generate(&mut rand::rng());
        let many = record(&me, MAX_DIRECTORY_MAILBOXES + 1, "x");
        assert!(matches!(
            SignedDirectory::sign(many.clone(), &me),
            Err(DirectoryError::TooLarge(_))
        ));
        let bytes = SignedDirectory::sign_unchecked(&many, &me);
        assert!(bytes.len() < MAX_DIRECTORY_BYTES);
        let e = SignedDirectory::from_bytes(&bytes).unwrap_err();
        assert!(e.to_string().contains("over the limit of 64"), "{e}");
        let big = record(&me, 60, &"p".repeat(MAX_PROFILE_BYTES));
        let bytes = SignedDirectory::sign_unchecked(&big, &me);
        assert!(bytes.len() > MAX_DIRECTORY_BYTES);
        assert!(matches!(
            SignedDirectory::from_bytes(&bytes),
            Err(DirectoryError::Malformed(DecodeError::TooLarge { .. }))
        ));
        let at_most = record(&me, MAX_DIRECTORY_MAILBOXES, &"p".repeat(600));
        SignedDirectory::sign(at_most, &me).unwrap();
    }

    #[test]
    fn another_machines_signature_is_refused() {
        let me = Identity::generate(&mut rand::rng());
        let other = Identity::generate(&mut rand::rng());
        let forged = SignedDirectory::sign_unchecked(&record(&me, 1, "x"), &other);
        assert!(matches!(
            SignedDirectory::from_bytes(&forged),
            Err(DirectoryError::BadSignature(_))
        ));
        assert!(matches!(
            SignedDirectory::sign(record(&me, 1, "x"), &other),
            Err(DirectoryError::NotOwnRecord)
        ));
    }

    #[test]
    fn later_fields_and_status_words_are_read_past() {
        let me = Identity::generate(&mut rand::rng());
        let r = record(&me, 1, "x");
        let Value::Array(mut items) = r.to_value() else {
            unreachable!()
        };
        let Value::Array(mut entries) = items[5].clone() else {
            unreachable!()
        };
        let Value::Array(mut e) = entries[0].clone() else {
            unreachable!()
        };
        e[3] = Value::Text("napping".into());
        e.push(Value::Text("a later field".into()));
        entries[0] = Value::Array(e);
        items[5] = Value::Array(entries);
        items.push(Value::Map(vec![]));
        let back = DirectoryRecord::from_value(Value::Array(items)).unwrap();
        assert_eq!(back.mailboxes[0].status, Status::Offline);
        assert_eq!(back.mailboxes[0].profile, "x");
    }

    #[test]
    fn one_mailbox_twice_is_refused() {
        let me = Identity::generate(&mut rand::rng());
        let mut r = record(&me, 2, "x");
        r.mailboxes[1].mailbox = r.mailboxes[0].mailbox.clone();
        assert!(DirectoryRecord::from_bytes(&r.to_bytes()).is_err());
    }
}
