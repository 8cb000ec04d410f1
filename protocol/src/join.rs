//! Joining a team: the request, the offer, and the two codes people compare.
//!
//! ```text
//! joiner                                   founder
//!   JoinRequest {ticket nonce, joiner, x25519, name, owner, nonce_j}  ->
//!   <-  JoinOffer {team, team name, founder, nonce_f}
//! both: transcript = CBOR[label, team, team name, founder, nonce_f,
//!                         ticket nonce, joiner, nonce_j, x25519, name, owner]
//!       pairing code = code(transcript, "pairing")   joiner shows it,
//!                                                    founder types it
//!       team code    = code(transcript, "team")      founder shows it,
//!                                                    joiner confirms it
//! ```
//!
//! The transcript holds both PeerIds, both nonces, the team id and every
//! field the Admit will carry, so any change to any of them changes both
//! codes. The joiner sends its nonce first and the founder answers with its
//! own: a machine in the middle must fix its side of the founder's session
//! before it learns the founder's nonce, and then find, by brute force, a
//! nonce for its session with the joiner that gives the same 60-bit code:
//! about 2^60 hashes per attempt, inside the request's lifetime.
//! docs/protocol.md has the argument in full.

use std::fmt;

use ciborium::Value;
use libp2p_identity::PeerId;
use sha2::{Digest, Sha256};

use crate::base32;
use crate::cbor::{self, DecodeError, Fields, Wire};
use crate::identity::{X25519Public, peer_field, peer_value};
use crate::names::{Name, Owner, name_field, owner_field};
use crate::team::TeamId;

/// The label that opens every join transcript.
pub const TRANSCRIPT_LABEL: &str = "agentmesh/v1 join transcript";
/// The hash label of the pairing code.
pub const PAIRING_CODE_LABEL: &[u8] = b"agentmesh/v1 pairing code";
/// The hash label of the team code.
pub const TEAM_CODE_LABEL: &[u8] = b"agentmesh/v1 team code";

/// Characters in a code: 12 base32 symbols, 60 bits.
pub const CODE_LEN: usize = 12;

/// What a machine that wants to join sends the founder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRequest {
    /// The nonce of the ticket the joiner was given.
    pub ticket_nonce: [u8; 16],
    /// The joining machine (the connection authenticates it).
    pub joiner: PeerId,
    /// Its X25519 key.
    pub x25519: X25519Public,
    /// The machine name it asks for.
    pub name: Name,
    /// The person who runs it, as claimed.
    pub owner: Owner,
    /// Random bytes chosen by the joiner for this request.
    pub nonce: [u8; 16],
}

impl Wire for JoinRequest {
    const WHAT: &'static str = "join request";
    const MAX_BYTES: usize = 512;

    fn to_value(&self) -> Value {
        Value::Array(vec![
            cbor::uint(crate::PROTOCOL_VERSION),
            Value::Bytes(self.ticket_nonce.to_vec()),
            peer_value(&self.joiner),
            Value::Bytes(self.x25519.0.to_vec()),
            Value::Text(self.name.to_string()),
            Value::Text(self.owner.to_string()),
            Value::Bytes(self.nonce.to_vec()),
        ])
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::versioned(Self::WHAT, value, 7)?;
        Ok(JoinRequest {
            ticket_nonce: f.array("ticket_nonce")?,
            joiner: peer_field(&mut f, "joiner")?,
            x25519: X25519Public(f.array("x25519")?),
            name: name_field(&mut f, "name", "machine name")?,
            owner: owner_field(&mut f, "owner")?,
            nonce: f.array("nonce")?,
        })
    }
}

/// The founder's answer to a join request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinOffer {
    /// The team.
    pub team: TeamId,
    /// The team's name.
    pub team_name: Name,
    /// The founder (the connection authenticates it).
    pub founder: PeerId,
    /// Random bytes chosen by the founder after reading the request.
    pub nonce: [u8; 16],
}

impl Wire for JoinOffer {
    const WHAT: &'static str = "join offer";
    const MAX_BYTES: usize = 256;

    fn to_value(&self) -> Value {
        Value::Array(vec![
            cbor::uint(crate::PROTOCOL_VERSION),
            Value::Bytes(self.team.0.to_vec()),
            Value::Text(self.team_name.to_string()),
            peer_value(&self.founder),
            Value::Bytes(self.nonce.to_vec()),
        ])
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::versioned(Self::WHAT, value, 5)?;
        Ok(JoinOffer {
            team: TeamId(f.array("team")?),
            team_name: name_field(&mut f, "team_name", "team name")?,
            founder: peer_field(&mut f, "founder")?,
            nonce: f.array("nonce")?,
        })
    }
}

/// The canonical transcript of one join: what both codes are derived from.
pub fn transcript(request: &JoinRequest, offer: &JoinOffer) -> Vec<u8> {
    cbor::encode(&Value::Array(vec![
        Value::Text(TRANSCRIPT_LABEL.into()),
        Value::Bytes(offer.team.0.to_vec()),
        Value::Text(offer.team_name.to_string()),
        peer_value(&offer.founder),
        Value::Bytes(offer.nonce.to_vec()),
        Value::Bytes(request.ticket_nonce.to_vec()),
        peer_value(&request.joiner),
        Value::Bytes(request.nonce.to_vec()),
        Value::Bytes(request.x25519.0.to_vec()),
        Value::Text(request.name.to_string()),
        Value::Text(request.owner.to_string()),
    ]))
}

/// The two codes of one join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Codes {
    /// Shown by the joiner; typed by the founder into `agentmesh admit`.
    pub pairing: Code,
    /// Shown by the founder after admitting; confirmed by the joiner.
    pub team: Code,
}

/// Derives both codes from a join's request and offer.
pub fn codes(request: &JoinRequest, offer: &JoinOffer) -> Codes {
    let t = transcript(request, offer);
    Codes {
        pairing: Code::derive(PAIRING_CODE_LABEL, &t),
        team: Code::derive(TEAM_CODE_LABEL, &t),
    }
}

/// A 12-character code, shown as `XXXX-XXXX-XXXX`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Code([u8; CODE_LEN]);

/// Why typed text is not a code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodeError {
    /// A character outside the code alphabet.
    #[error(
        "{0:?} is not a code character; codes use digits and the letters A-Z except I, L, O and U"
    )]
    BadCharacter(char),
    /// Too few or too many characters.
    #[error("a code has {CODE_LEN} characters (XXXX-XXXX-XXXX); this has {0}")]
    WrongLength(usize),
}

impl Code {
    fn derive(label: &[u8], transcript: &[u8]) -> Code {
        let mut h = Sha256::new();
        h.update(label);
        h.update([0u8]);
        h.update(transcript);
        let digest = h.finalize();
        // 8 bytes encode to 13 symbols; the first 12 are the first 60 bits.
        let text = base32::UPPER.encode(&digest[..8]);
        let mut code = [0u8; CODE_LEN];
        code.copy_from_slice(&text.as_bytes()[..CODE_LEN]);
        Code(code)
    }

    /// Reads a code as a person typed it: case does not matter, dashes and
    /// spaces are ignored, and I, L and O are read as 1, 1 and 0.
    pub fn parse(typed: &str) -> Result<Code, CodeError> {
        let mut code = [0u8; CODE_LEN];
        let mut n = 0;
        for c in typed.chars().filter(|c| *c != '-' && !c.is_whitespace()) {
            let c = base32::fold(c).ok_or(CodeError::BadCharacter(c))?;
            if n < CODE_LEN {
                code[n] = c as u8;
            }
            n += 1;
        }
        if n != CODE_LEN {
            return Err(CodeError::WrongLength(n));
        }
        Ok(Code(code))
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = std::str::from_utf8(&self.0).map_err(|_| fmt::Error)?;
        write!(f, "{}-{}-{}", &s[..4], &s[4..8], &s[8..])
    }
}

impl fmt::Debug for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Code({self})")
    }
}
