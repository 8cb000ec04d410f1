//! The sled store's migrations, one per format version.

use super::sled_codec::{
    SEEN_BY_UNTIL, UNREAD, from_record, id_key, inbox_dedup, is_unread, to_record, unread_value,
};
use super::{InboxRecord, StoreError};

/// A migration from format `i` to `i + 1` is `MIGRATIONS[i]`.
type Migration = fn(&sled::Db) -> Result<(), StoreError>;

/// Format 0 is the layout of development builds before the store recorded
/// its version: the same trees as format 1, without `meta`. Migrating it
/// only records the version. Format 1 kept records as JSON; format 2 keeps
/// them as CBOR (about a third of the size for envelopes, whose bytes JSON
/// spells out as numbers, and faster to write). Format 3 adds an index of
/// dedup records by the end of their window, so forgetting them reads only
/// the expired ones. Format 4 adds an index of unread messages by mailbox,
/// so an agent's unread count never reads the whole inbox. Format 5 keeps
/// no dedup record for a message the inbox holds (its inbox record refuses
/// it again; one is written when the inbox forgets it), so the records
/// format 4 kept for them are dropped; it keys the id indices by an id's
/// 16 bytes (the outbox's index keeps only when its record was made); and
/// it writes the audit entries of one flush as one record (a list),
/// reading the single entries older formats wrote as they are.
pub(super) const MIGRATIONS: [Migration; 5] = [
    |_db| Ok(()),
    json_to_cbor,
    index_seen,
    index_unread,
    format_5,
];

/// The trees whose values are serde records.
const RECORD_TREES: [&str; 6] = [
    "peers",
    "audit",
    "outbox",
    "outbox_done",
    "inbox",
    "consent",
];

fn json_to_cbor(db: &sled::Db) -> Result<(), StoreError> {
    for name in RECORD_TREES {
        let tree = db.open_tree(name)?;
        for kv in tree.iter() {
            let (k, v) = kv?;
            // Folder bindings and records are JSON objects; anything else
            // (the consent tree's flags) is left as it is.
            if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&v)
                && value.is_object()
            {
                tree.insert(k, to_record(&value))?;
            }
        }
    }
    Ok(())
}

fn index_seen(db: &sled::Db) -> Result<(), StoreError> {
    let seen = db.open_tree("seen")?;
    let by_until = db.open_tree(SEEN_BY_UNTIL)?;
    for kv in seen.iter() {
        let (k, v) = kv?;
        by_until.insert([v.as_ref(), k.as_ref()].concat(), &[])?;
    }
    Ok(())
}

fn index_unread(db: &sled::Db) -> Result<(), StoreError> {
    let inbox = db.open_tree("inbox")?;
    let unread = db.open_tree(UNREAD)?;
    for kv in inbox.iter() {
        let (k, v) = kv?;
        let r: InboxRecord = from_record(&v)?;
        if is_unread(&r) {
            unread.insert(k, unread_value(&r))?;
        }
    }
    Ok(())
}

fn format_5(db: &sled::Db) -> Result<(), StoreError> {
    drop_inbox_dedup(db)?;
    // The inbox's index: hex id -> seq becomes id bytes -> seq.
    rekey_ids(&db.open_tree("inbox_ids")?, |v| v.to_vec())?;
    // The outbox's: hex id -> (created_at ‖ hex id) becomes id bytes ->
    // created_at.
    rekey_ids(&db.open_tree("outbox_done_ids")?, |v| {
        v.get(..8).unwrap_or(v).to_vec()
    })
}

/// Rewrites the entries of an index keyed by hex ids (32 characters) to
/// [`id_key`]s, their values through `value`, in one batch after reading
/// them all (the new keys sort among the old). Keys already rewritten (16
/// bytes) are left: the version is recorded only after every step, so a
/// crash can make a store run this step again.
fn rekey_ids(tree: &sled::Tree, value: impl Fn(&[u8]) -> Vec<u8>) -> Result<(), StoreError> {
    let mut batch = sled::Batch::default();
    for kv in tree.iter() {
        let (k, v) = kv?;
        let Ok(text) = std::str::from_utf8(&k) else {
            continue;
        };
        if text.len() == 32 && agentmesh_protocol::envelope::MessageId::parse(text).is_some() {
            batch.remove(k.clone());
            batch.insert(id_key(text), value(&v));
        }
    }
    tree.apply_batch(batch)?;
    Ok(())
}

fn drop_inbox_dedup(db: &sled::Db) -> Result<(), StoreError> {
    let seen = db.open_tree("seen")?;
    let by_until = db.open_tree(SEEN_BY_UNTIL)?;
    for (key, _) in inbox_dedup(&db.open_tree("inbox")?)? {
        // The until it was written with, whatever the record says now.
        if let Some(until) = seen.remove(&key)? {
            by_until.remove([until.as_ref(), &key].concat())?;
        }
    }
    Ok(())
}
