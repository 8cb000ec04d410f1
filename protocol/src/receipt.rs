//! Receipts: what a recipient machine did with a message, told to its
//! sender in an envelope of kind [`Kind::Receipt`], sealed to the sender
//! and signed like any envelope. `in_reply_to` names the message; the
//! body carries one attachment named `receipt` of media type
//! [`RECEIPT_MEDIA_TYPE`], its data:
//!
//! ```text
//! receipt = [ 1, [ entry, ... ] ]          ; 1 to MAX_RECEIPT_ENTRIES entries
//! entry   = [ state: uint 0-6, at: uint,   ; at: Unix ms, the recipient's clock
//!             code: text / null,           ; refused: a stable code
//!             reason: text / null,         ; rejected, refused: why
//!             until: uint / null ]         ; deferred: Unix ms
//! ```
//!
//! A receipt never gets a receipt, and is never shown to a session.

use ciborium::Value;

use crate::cbor::{self, DecodeError, Fields, Wire};
use crate::envelope::{Body, Who, report_body, report_data};
use crate::time::Timestamp;

#[cfg(doc)]
use crate::envelope::Kind;

/// The media type of the one attachment a receipt's body carries.
pub const RECEIPT_MEDIA_TYPE: &str = "application/vnd.agentmesh.receipt+cbor";
/// The most entries one receipt carries.
pub const MAX_RECEIPT_ENTRIES: usize = 8;
/// The longest code in an entry, bytes.
pub const MAX_RECEIPT_CODE: usize = 64;
/// The longest reason in an entry, bytes.
pub const MAX_RECEIPT_REASON: usize = 1024;

/// What happened to a message at its recipient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReceiptState {
    /// Stored in the recipient mailbox's inbox.
    Delivered,
    /// Stored, and held for the recipient's person to approve.
    Held,
    /// Its person approved it: it is in the inbox now.
    Approved,
    /// Its person rejected it (or it expired unapproved); `reason` says.
    Rejected,
    /// In the inbox, but the mailbox's daily wake budget is spent:
    /// nothing wakes a session for it before `until`.
    Deferred,
    /// A session or a person was shown it, or read it.
    Read,
    /// Refused: `code` and `reason` say why.
    Refused,
}

impl ReceiptState {
    /// Every state, in code order.
    pub const ALL: [ReceiptState; 7] = [
        ReceiptState::Delivered,
        ReceiptState::Held,
        ReceiptState::Approved,
        ReceiptState::Rejected,
        ReceiptState::Deferred,
        ReceiptState::Read,
        ReceiptState::Refused,
    ];

    fn code(self) -> u64 {
        self as u64
    }

    /// The name in JSON and on screen.
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiptState::Delivered => "delivered",
            ReceiptState::Held => "held",
            ReceiptState::Approved => "approved",
            ReceiptState::Rejected => "rejected",
            ReceiptState::Deferred => "deferred",
            ReceiptState::Read => "read",
            ReceiptState::Refused => "refused",
        }
    }
}

/// One state a receipt tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptEntry {
    /// What happened.
    pub state: ReceiptState,
    /// When, by the recipient's clock.
    pub at: Timestamp,
    /// A stable code (refused).
    pub code: Option<String>,
    /// Why (rejected, refused).
    pub reason: Option<String>,
    /// Until when (deferred).
    pub until: Option<Timestamp>,
}

impl ReceiptEntry {
    /// An entry with no code, reason or time.
    pub fn new(state: ReceiptState, at: Timestamp) -> Self {
        ReceiptEntry {
            state,
            at,
            code: None,
            reason: None,
            until: None,
        }
    }

    fn to_value(&self) -> Value {
        Value::Array(vec![
            cbor::uint(self.state.code()),
            cbor::uint(self.at.as_unix_millis()),
            cbor::opt_text(self.code.as_deref()),
            cbor::opt_text(self.reason.as_deref()),
            self.until
                .map_or(Value::Null, |t| cbor::uint(t.as_unix_millis())),
        ])
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::new("receipt entry", value, 5)?;
        let state = f.uint("state", ReceiptState::ALL.len() as u64 - 1)?;
        let state = ReceiptState::ALL[state as usize];
        let at = Timestamp::from_unix_millis(f.uint("at", u64::MAX)?);
        let code = f.opt_text("code", MAX_RECEIPT_CODE)?;
        let reason = f.opt_text("reason", MAX_RECEIPT_REASON)?;
        let until = match f.value("until")? {
            Value::Null => None,
            Value::Integer(i) => Some(Timestamp::from_unix_millis(
                u64::try_from(i).map_err(|_| f.error("until", "must be an unsigned integer"))?,
            )),
            _ => return Err(f.error("until", "must be an unsigned integer or null")),
        };
        Ok(ReceiptEntry {
            state,
            at,
            code,
            reason,
            until,
        })
    }
}

/// The body of a receipt envelope: what happened to the message its
/// `in_reply_to` names, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// 1 to [`MAX_RECEIPT_ENTRIES`] states.
    pub entries: Vec<ReceiptEntry>,
}

impl Wire for Receipt {
    const WHAT: &'static str = "receipt";
    const MAX_BYTES: usize = 16 * 1024;

    fn to_value(&self) -> Value {
        Value::Array(vec![
            cbor::uint(crate::PROTOCOL_VERSION),
            Value::Array(self.entries.iter().map(ReceiptEntry::to_value).collect()),
        ])
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::versioned(Self::WHAT, value, 2)?;
        let items = f.list("entries", MAX_RECEIPT_ENTRIES)?;
        if items.is_empty() {
            return Err(f.error("entries", "is empty"));
        }
        let entries = items
            .into_iter()
            .map(ReceiptEntry::from_value)
            .collect::<Result<_, _>>()?;
        Ok(Receipt { entries })
    }
}

impl Receipt {
    /// The body of a receipt envelope, stamped with `who`.
    pub fn to_body(&self, who: Who) -> Body {
        report_body(who, "receipt", RECEIPT_MEDIA_TYPE, self.to_bytes())
    }

    /// The receipt a receipt envelope's body carries.
    pub fn from_body(body: &Body) -> Result<Receipt, DecodeError> {
        Receipt::from_bytes(report_data(
            body,
            Self::WHAT,
            "receipt",
            RECEIPT_MEDIA_TYPE,
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_round_trips_and_bad_ones_are_refused() {
        let r = Receipt {
            entries: vec![
                ReceiptEntry::new(ReceiptState::Delivered, Timestamp::from_unix_millis(5)),
                ReceiptEntry {
                    until: Some(Timestamp::from_unix_millis(9)),
                    ..ReceiptEntry::new(ReceiptState::Deferred, Timestamp::from_unix_millis(6))
                },
                ReceiptEntry {
                    code: Some("no_mailbox".into()),
                    reason: Some("no mailbox pipelin".into()),
                    ..ReceiptEntry::new(ReceiptState::Refused, Timestamp::from_unix_millis(7))
                },
            ],
        };
        assert_eq!(Receipt::from_bytes(&r.to_bytes()).unwrap(), r);
        let empty = Receipt { entries: vec![] };
        assert!(Receipt::from_bytes(&empty.to_bytes()).is_err());
        let many = Receipt {
            entries: vec![r.entries[0].clone(); MAX_RECEIPT_ENTRIES + 1],
        };
        assert!(Receipt::from_bytes(&many.to_bytes()).is_err());
        // An unknown state code.
        let bad = cbor::encode(&Value::Array(vec![
            cbor::uint(1),
            Value::Array(vec![Value::Array(vec![
                cbor::uint(7),
                cbor::uint(1),
                Value::Null,
                Value::Null,
                Value::Null,
            ])]),
        ]));
        assert!(Receipt::from_bytes(&bad).is_err());
    }
}
