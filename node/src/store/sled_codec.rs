//! How the sled store encodes what it keeps: records as CBOR, the trees
//! the migrations name, the unread index's entries, and sled's
//! transaction errors as the store's.

use serde::{Deserialize, Serialize};

use super::{InboxRecord, StoreError};

/// Trees the migrations rewrite.
pub(super) const SEEN_BY_UNTIL: &str = "seen_by_until";
pub(super) const UNREAD: &str = "inbox_unread";

/// Whether `r` belongs in the unread index: delivered, and not read.
pub(super) fn is_unread(r: &InboxRecord) -> bool {
    r.read_at.is_none() && r.held.is_none()
}

/// The unread index's value: the mailbox, empty for the owner's (a
/// mailbox name is never empty).
pub(super) fn unread_value(r: &InboxRecord) -> &[u8] {
    r.mailbox.as_deref().unwrap_or("").as_bytes()
}

/// A transaction's error as the store's (none of ours aborts).
pub(super) fn tx_error(e: sled::transaction::TransactionError<()>) -> StoreError {
    match e {
        sled::transaction::TransactionError::Storage(e) => StoreError::Sled(e),
        sled::transaction::TransactionError::Abort(()) => StoreError::Corrupt("aborted".into()),
    }
}

/// A record as stored: CBOR.
pub(super) fn to_record<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).expect("store records always serialise");
    out
}

pub(super) fn from_record<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, StoreError> {
    ciborium::from_reader(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))
}
