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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{HeldReason, MessageKind};
    use crate::store::InboxRecord;

    /// A message's kind and held reason are enums in the code and the
    /// same words on disk: a record written when they were strings reads
    /// as the enum, and a record written now is the words it always was
    /// (so the store needs no rewrite for them).
    #[test]
    fn kind_and_held_are_the_words_they_were_on_disk() {
        let mut record = crate::store::testing::inbox_record(1, None, false, true);
        record.kind = MessageKind::Ask;
        let bytes = to_record(&record);
        let mut value: ciborium::Value = ciborium::from_reader(&bytes[..]).unwrap();
        let field = |v: &ciborium::Value, name: &str| {
            v.as_map()
                .unwrap()
                .iter()
                .find(|(k, _)| k.as_text() == Some(name))
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        assert_eq!(field(&value, "kind").as_text(), Some("ask"));
        assert_eq!(field(&value, "held").as_text(), Some("paused"));
        // An older record's words read as the enums.
        for (k, v) in value.as_map_mut().unwrap() {
            if k.as_text() == Some("held") {
                *v = ciborium::Value::Text("other_owner".into());
            }
        }
        let mut old = vec![];
        ciborium::into_writer(&value, &mut old).unwrap();
        let back: InboxRecord = from_record(&old).unwrap();
        assert_eq!(back.held, Some(HeldReason::OtherOwner));
        assert_eq!(back.kind, MessageKind::Ask);
    }
}
