//! Invite tickets: what a founder hands a joiner, as one copy-pasteable word.
//!
//! ```text
//! ticket  = "amt" base32-lowercase(payload || checksum)
//! payload = CBOR [version, founder, [multiaddr...], nonce, expires_at]
//! checksum = SHA-256("agentmesh/v1 ticket checksum" || payload)[..4]
//! ```
//!
//! Crockford base32 keeps the ticket to letters and digits, so a double
//! click selects all of it and no character is ambiguous; the checksum turns
//! a typo into a clear error instead of a dial to the wrong place. The nonce
//! makes the ticket single-use: the founder forgets it once used.

use std::fmt;

use ciborium::Value;
use libp2p_identity::PeerId;
use multiaddr::Multiaddr;
use sha2::{Digest, Sha256};

use crate::base32;
use crate::cbor::{self, DecodeError, Fields, Wire};
use crate::identity::{peer_field, peer_value};
use crate::time::Timestamp;

/// What every ticket starts with: agentmesh ticket.
pub const TICKET_PREFIX: &str = "amt";

/// The label the checksum hash starts with.
pub const CHECKSUM_LABEL: &[u8] = b"agentmesh/v1 ticket checksum";

/// Checksum bytes: a typo gets through with probability 2^-32.
const CHECKSUM_LEN: usize = 4;

/// The most addresses a ticket carries: a few LAN and public addresses and
/// relay circuits; more would make the ticket unwieldy to paste.
pub const MAX_TICKET_ADDRS: usize = 8;

/// The longest address in a ticket, in bytes (a relay circuit with two
/// PeerIds is about 100).
pub const MAX_ADDR_BYTES: usize = 256;

/// The longest ticket payload.
const MAX_PAYLOAD: usize = 2 * 1024;

/// An invitation to join a founder's team.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The founder to dial.
    pub founder: PeerId,
    /// Where to dial it.
    pub addrs: Vec<Multiaddr>,
    /// Single-use nonce; binds the join to this ticket.
    pub nonce: [u8; 16],
    /// When the ticket stops working.
    pub expires_at: Timestamp,
}

/// Why text is not a usable ticket. Each says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TicketError {
    /// The text does not start with the ticket prefix.
    #[error(
        "this is not an agentmesh invite ticket: tickets start with \"{TICKET_PREFIX}\"; copy the whole ticket that `agentmesh invite` printed"
    )]
    NotATicket,
    /// A character outside the ticket alphabet.
    #[error(
        "the ticket has {ch:?} at position {position}, which no ticket contains; copy the ticket again"
    )]
    BadCharacter {
        /// 1-based position in the text as given, in characters.
        position: usize,
        /// The character.
        ch: char,
    },
    /// The checksum does not match: a character was mistyped, or the
    /// ticket was cut short.
    #[error(
        "the ticket is damaged (its checksum does not match): a character was mistyped or the ticket was cut short; copy it again"
    )]
    BadChecksum,
    /// The payload is not a valid ticket.
    #[error("the ticket is malformed: {0}")]
    Malformed(DecodeError),
    /// The ticket was made by a newer or older agentmesh.
    #[error(
        "the ticket is of version {found}; this agentmesh reads version {supported}; use the same agentmesh version on both machines"
    )]
    UnsupportedVersion {
        /// The ticket's version.
        found: u64,
        /// This build's.
        supported: u64,
    },
    /// The ticket has expired.
    #[error(
        "the ticket expired {} (at {expires_at}); ask the founder for a new one with `agentmesh invite`", crate::time::relative(*expires_at, *now)
    )]
    Expired {
        /// When it expired.
        expires_at: Timestamp,
        /// The clock it was judged by.
        now: Timestamp,
    },
}

impl Wire for Ticket {
    const WHAT: &'static str = "ticket";
    const MAX_BYTES: usize = MAX_PAYLOAD;

    fn to_value(&self) -> Value {
        Value::Array(vec![
            cbor::uint(crate::PROTOCOL_VERSION),
            peer_value(&self.founder),
            Value::Array(
                self.addrs
                    .iter()
                    .map(|a| Value::Bytes(a.to_vec()))
                    .collect(),
            ),
            Value::Bytes(self.nonce.to_vec()),
            cbor::uint(self.expires_at.as_unix_millis()),
        ])
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::versioned(Self::WHAT, value, 5)?;
        let founder = peer_field(&mut f, "founder")?;
        let addrs = multiaddrs(&mut f, "addrs", MAX_TICKET_ADDRS)?;
        Ok(Ticket {
            founder,
            addrs,
            nonce: f.array("nonce")?,
            expires_at: Timestamp::from_unix_millis(f.uint("expires_at", u64::MAX)?),
        })
    }
}

/// Reads a list of binary multiaddrs.
pub(crate) fn multiaddrs(
    f: &mut Fields,
    field: &'static str,
    max: usize,
) -> Result<Vec<Multiaddr>, DecodeError> {
    f.bytes_list(field, max, MAX_ADDR_BYTES)?
        .into_iter()
        .map(|b| {
            Multiaddr::try_from(b)
                .map_err(|e| f.error(field, format!("holds an invalid address: {e}")))
        })
        .collect()
}

fn checksum(payload: &[u8]) -> [u8; CHECKSUM_LEN] {
    let digest = Sha256::new()
        .chain_update(CHECKSUM_LABEL)
        .chain_update(payload)
        .finalize();
    let mut c = [0u8; CHECKSUM_LEN];
    c.copy_from_slice(&digest[..CHECKSUM_LEN]);
    c
}

impl Ticket {
    /// Reads a ticket and refuses it if it expired before `now`.
    pub fn parse(text: &str, now: Timestamp) -> Result<Ticket, TicketError> {
        let ticket = Ticket::decode(text)?;
        if now > ticket.expires_at {
            return Err(TicketError::Expired {
                expires_at: ticket.expires_at,
                now,
            });
        }
        Ok(ticket)
    }

    /// Reads a ticket without judging its expiry.
    pub fn decode(text: &str) -> Result<Ticket, TicketError> {
        let leading = text.chars().count() - text.trim_start().chars().count();
        let text = text.trim();
        let body = match text.get(..TICKET_PREFIX.len()) {
            Some(p) if p.eq_ignore_ascii_case(TICKET_PREFIX) => &text[TICKET_PREFIX.len()..],
            _ => return Err(TicketError::NotATicket),
        };
        if let Some((i, ch)) = body
            .chars()
            .enumerate()
            .find(|(_, c)| base32::fold(*c).is_none())
        {
            return Err(TicketError::BadCharacter {
                position: leading + TICKET_PREFIX.len() + i + 1,
                ch,
            });
        }
        // A length no payload can have, or trailing bits that are not zero,
        // is a damaged ticket, like a checksum mismatch.
        let bytes = base32::LOWER
            .decode(body.as_bytes())
            .map_err(|_| TicketError::BadChecksum)?;
        if bytes.len() <= CHECKSUM_LEN {
            return Err(TicketError::BadChecksum);
        }
        let (payload, sum) = bytes.split_at(bytes.len() - CHECKSUM_LEN);
        if checksum(payload) != sum {
            return Err(TicketError::BadChecksum);
        }
        Ticket::from_bytes(payload).map_err(|e| match e {
            DecodeError::UnsupportedVersion {
                found, supported, ..
            } => TicketError::UnsupportedVersion { found, supported },
            e => TicketError::Malformed(e),
        })
    }
}

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut bytes = self.to_bytes();
        let sum = checksum(&bytes);
        bytes.extend_from_slice(&sum);
        write!(f, "{TICKET_PREFIX}{}", base32::LOWER.encode(&bytes))
    }
}
